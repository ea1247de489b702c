"""One helper task beside the current one, and a one-shot wake-up, at asyncio's own cost where it runs.

A stream of the server runs in the request's task plus at most one helper
per level (the coalescing pump of a pipeline, the disconnect watcher of an
SSE response). anyio's task group and ``Event`` give every backend the same
structured semantics, but on asyncio they cost several times what the loop's
own objects do: starting, cancelling and leaving a task group with one child
took 112 µs against 11 µs for a bare task (uvloop, this repository's
machines), and a wake-up through ``anyio.Event`` three times one through a
future. A streamed request has two such helpers: with them on bare tasks a
short request over ASGI went from 0.77-0.86 ms to 0.33-0.56 ms.

:class:`Companion` keeps the task group's semantics for its one helper:

* the helper is cancelled when the ``async with`` body ends, however it
  ends, and the exit waits (shielded) until the helper has finished, so its
  clean-up (closing an engine's response) is done when the block is left;
* a helper that fails cancels the body, and its exception is raised from
  the ``async with``;
* :meth:`Companion.cancel` cancels the body and the helper (what
  ``tg.cancel_scope.cancel()`` does);
* the helper runs in a copy of the context of :meth:`Companion.start_soon`'s
  caller (its context variables: the stream's log binding).

On asyncio (uvloop included) the helper is a bare task and the body runs in
one cancel scope; on any other backend (trio) an anyio task group does it.

:func:`cancel_scope`, :func:`loop_time` and :func:`checkpoint` are anyio's
``CancelScope``, ``current_time`` and ``lowlevel.checkpoint`` without the
backend lookup anyio makes at each call (a ``sniffio`` call, which asks
asyncio for the current task, and for a scope a second ``__init__``): a
streamed gateway request makes about fifteen such calls.
"""

from __future__ import annotations

import asyncio
import math
import sys
from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any, NoReturn

import anyio
import anyio.lowlevel

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

__all__ = ("Companion", "Wake", "cancel_scope", "checkpoint", "loop_time", "on_asyncio", "raise_single")


def raise_single(group: BaseExceptionGroup[Any]) -> NoReturn:
    """Raise the one exception inside ``group`` (nested groups flattened) with its own context, or the
    group itself when it holds several, or a ``BaseException`` that is not an ``Exception``."""
    errors = _leaves(group)
    if len(errors) == 1 and isinstance(errors[0], Exception):
        exc = errors[0]
        context, suppress = exc.__context__, exc.__suppress_context__
        try:
            raise exc
        finally:  # keep the exception's own context, not the group's
            exc.__context__, exc.__suppress_context__ = context, suppress
    raise group


def _leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    out: list[BaseException] = []
    for e in group.exceptions:
        if isinstance(e, BaseExceptionGroup):
            out += _leaves(e)
        else:
            out.append(e)
    return out


def on_asyncio() -> bool:
    """Whether the calling code runs on an asyncio event loop (uvloop included)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


_asyncio_scope: type[anyio.CancelScope] | None = None  # anyio's asyncio scope class, found at the first scope


def cancel_scope(*, deadline: float = math.inf, shield: bool = False) -> anyio.CancelScope:
    """``anyio.CancelScope(deadline=deadline, shield=shield)``, made directly on asyncio (see the module docstring)."""
    global _asyncio_scope
    if not on_asyncio():
        return anyio.CancelScope(deadline=deadline, shield=shield)
    cls = _asyncio_scope
    if cls is None:
        cls = _asyncio_scope = type(anyio.CancelScope())
    return cls(deadline=deadline, shield=shield)


def loop_time() -> float:
    """``anyio.current_time()``: the event loop's clock (the clock of scope deadlines)."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return anyio.current_time()


async def checkpoint() -> None:
    """``anyio.lowlevel.checkpoint()``: let other tasks run (and a pending cancellation arrive)."""
    if on_asyncio():
        await asyncio.sleep(0)
    else:
        await anyio.lowlevel.checkpoint()


class Companion:
    """At most one helper task for the length of an ``async with`` (see the module docstring).

    Usage::

        async with Companion() as helper:
            helper.start_soon(pump, source, backlog)
            ...  # the body; the helper is cancelled and awaited when it ends
    """

    __slots__ = ("_scope", "_task", "_tg", "_open", "_started")

    def __init__(self) -> None:
        self._scope: anyio.CancelScope | None = None
        self._task: asyncio.Task[Any] | None = None
        self._tg: Any = None  # an anyio task group, off asyncio
        self._open = False
        self._started = False

    async def __aenter__(self) -> Companion:
        if self._scope is not None or self._tg is not None:
            raise RuntimeError("a Companion can be entered only once")
        if on_asyncio():
            self._scope = cancel_scope().__enter__()
        else:
            self._tg = anyio.create_task_group()
            await self._tg.__aenter__()
        self._open = True
        return self

    def start_soon(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Start the helper ``fn(*args)`` (once per companion, inside the ``async with``).

        Raises:
            RuntimeError: the block is not open, or a helper was started already.
        """
        if not self._open:
            raise RuntimeError("start_soon() needs the Companion's async with block to be open")
        if self._started:
            raise RuntimeError("a Companion runs one helper; it was started already")
        self._started = True
        if self._tg is not None:
            self._tg.start_soon(fn, *args)
            return
        task = asyncio.get_running_loop().create_task(fn(*args))
        task.add_done_callback(self._ended)
        self._task = task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        """The helper finished: if it failed while the body runs, the body is cancelled (as in a task group)."""
        if self._open and not task.cancelled() and task.exception() is not None:
            assert self._scope is not None
            self._scope.cancel()

    def cancel(self) -> None:
        """Cancel the body and the helper (``tg.cancel_scope.cancel()``); the block then ends quietly."""
        if self._tg is not None:
            self._tg.cancel_scope.cancel()
            return
        if self._scope is None:
            raise RuntimeError("cancel() needs the Companion's async with block to be entered")
        if self._open:
            self._scope.cancel()
        task = self._task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()  # (a helper that cancels the block ends as it returns)

    async def __aexit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        tg = self._tg
        if tg is not None:
            self._open = False
            tg.cancel_scope.cancel()  # the body has ended: so does the helper
            try:
                return bool(await tg.__aexit__(et, exc, tb))
            except BaseExceptionGroup as group:  # one error is raised as itself, as on asyncio
                raise_single(group)
        scope = self._scope
        assert scope is not None
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with cancel_scope(shield=True):
                try:
                    await task
                except BaseException:
                    if not task.done():  # this task itself was interrupted (not by anyio: the scope is shielded)
                        self._open = False
                        scope.__exit__(et, exc, tb)
                        raise
        self._open = False
        swallowed = scope.__exit__(et, exc, tb)
        if task is not None and not task.cancelled():
            failure = task.exception()
            if failure is not None:
                if isinstance(exc, Exception):  # the body failed too: both, as a task group raises them
                    raise BaseExceptionGroup("the stream and its helper failed", [failure, exc])
                raise failure
        return swallowed


class Wake:
    """A one-shot wake-up for one waiting task: an asyncio future where it can be, else an ``anyio.Event``.

    Create one right before waiting on it; :meth:`set` may be called any
    number of times, also after the waiter was cancelled.
    """

    __slots__ = ("_fut", "_event")

    def __init__(self) -> None:
        try:
            self._fut: asyncio.Future[None] | None = asyncio.get_running_loop().create_future()
            self._event: anyio.Event | None = None
        except RuntimeError:
            self._fut = None
            self._event = anyio.Event()

    def set(self) -> None:
        """Wake the waiter (no-op when it was woken or has gone)."""
        fut = self._fut
        if fut is None:
            assert self._event is not None
            self._event.set()
        elif not fut.done():
            fut.set_result(None)

    def wait(self) -> Awaitable[Any]:
        """What to await until :meth:`set` (it is cancelled with the waiting task)."""
        fut = self._fut
        if fut is None:
            assert self._event is not None
            return self._event.wait()
        return fut
