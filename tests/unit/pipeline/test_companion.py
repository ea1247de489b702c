"""Companion: one helper task with a task group's semantics (a bare task on asyncio), and Wake."""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import pytest

from deltaflow.pipeline.companion import Companion, Wake, cancel_scope, checkpoint, loop_time, on_asyncio

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

pytestmark = pytest.mark.anyio

_who: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


def _waits_forever(log: list[str]) -> Callable[[], Coroutine[Any, Any, None]]:
    """A helper that waits until it is cancelled and notes in ``log`` that it has gone."""

    async def helper() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            log.append("helper gone")

    return helper


async def test_the_backend_is_told_apart(anyio_backend: str) -> None:
    assert on_asyncio() is (anyio_backend == "asyncio")


async def test_the_helper_is_cancelled_and_cleaned_up_when_the_body_ends(anyio_backend: str) -> None:
    log: list[str] = []

    async def helper() -> None:
        log.append("started")
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.01)  # a clean-up that waits (closing an engine's response)
            log.append("cleaned up")

    async with Companion() as c:
        c.start_soon(helper)
        await anyio.sleep(0.01)
        log.append("body done")
    log.append("left")
    assert log == ["started", "body done", "cleaned up", "left"]


async def test_a_failing_body_propagates_unchanged_after_the_helper_is_gone(anyio_backend: str) -> None:
    log: list[str] = []
    helper = _waits_forever(log)

    with pytest.raises(KeyError, match="boom") as info:
        async with Companion() as c:
            c.start_soon(helper)
            await anyio.sleep(0.01)
            raise KeyError("boom")
    assert log == ["helper gone"]
    assert type(info.value) is KeyError


async def test_a_failing_helper_cancels_the_body_and_its_error_is_raised(anyio_backend: str) -> None:
    reached: list[str] = []

    async def helper() -> None:
        await anyio.sleep(0.01)
        raise ValueError("helper broke")

    with pytest.raises(ValueError, match="helper broke"):
        async with Companion() as c:
            c.start_soon(helper)
            try:
                await anyio.sleep(5)
            finally:
                reached.append("body cancelled")
            reached.append("body went on")  # pragma: no cover - the cancellation stops the body
    assert reached == ["body cancelled"]


async def test_a_body_and_a_helper_that_both_fail_raise_both(anyio_backend: str) -> None:
    async def helper() -> None:
        raise ValueError("helper broke")

    with pytest.raises(BaseExceptionGroup) as info:
        async with Companion() as c:
            c.start_soon(helper)
            try:
                await anyio.sleep(5)
            finally:
                raise KeyError("body broke too")  # noqa: B012 - a clean-up that fails while cancelled
    leaves = sorted(type(e).__name__ for e in info.value.exceptions)
    assert leaves == ["KeyError", "ValueError"]


async def test_cancel_from_the_helper_ends_the_block_quietly(anyio_backend: str) -> None:
    after: list[str] = []
    with anyio.fail_after(5):
        async with Companion() as c:

            async def helper() -> None:
                await anyio.sleep(0.01)
                c.cancel()  # the client left: stop the stream

            c.start_soon(helper)
            await anyio.sleep_forever()
        after.append("left quietly")
    assert after == ["left quietly"]


async def test_an_outer_cancellation_stops_body_and_helper(anyio_backend: str) -> None:
    log: list[str] = []
    helper = _waits_forever(log)

    with anyio.move_on_after(0.02) as outer:
        async with Companion() as c:
            c.start_soon(helper)
            await anyio.sleep_forever()
    assert outer.cancelled_caught
    assert log == ["helper gone"]


async def test_the_helper_runs_in_the_callers_context(anyio_backend: str) -> None:
    seen: list[str] = []

    async def helper() -> None:
        seen.append(_who.get())

    token = _who.set("stream-7")
    try:
        async with Companion() as c:
            c.start_soon(helper)
            await anyio.sleep(0.01)
    finally:
        _who.reset(token)
    assert seen == ["stream-7"]


async def test_a_helper_that_returns_early_leaves_the_body_running(anyio_backend: str) -> None:
    async def helper() -> None:
        return None

    async with Companion() as c:
        c.start_soon(helper)
        await anyio.sleep(0.01)
        done = "body finished"
    assert done == "body finished"


async def test_misuse_is_refused_with_what_is_allowed(anyio_backend: str) -> None:
    async def helper() -> None:
        await anyio.sleep(0)

    c = Companion()
    with pytest.raises(RuntimeError, match="block to be open"):
        c.start_soon(helper)
    async with c:
        c.start_soon(helper)
        with pytest.raises(RuntimeError, match="one helper"):
            c.start_soon(helper)
    with pytest.raises(RuntimeError, match="entered only once"):
        async with c:
            pass  # pragma: no cover


async def test_a_wake_set_before_the_wait_returns_at_once(anyio_backend: str) -> None:
    w = Wake()
    w.set()
    w.set()  # again: no error
    with anyio.fail_after(1):
        await w.wait()


async def test_a_wake_wakes_a_waiting_task_and_survives_a_cancelled_waiter(anyio_backend: str) -> None:
    got: list[str] = []
    w = Wake()
    async with anyio.create_task_group() as tg:

        async def waiter() -> None:
            await w.wait()
            got.append("woken")

        tg.start_soon(waiter)
        await anyio.sleep(0.01)
        assert got == []
        w.set()
    assert got == ["woken"]
    gone = Wake()
    with anyio.move_on_after(0.01):
        await gone.wait()
    gone.set()  # the waiter was cancelled: setting it later is harmless


async def test_cancel_scope_is_anyios_scope_with_its_deadline_and_shield() -> None:
    """cancel_scope() makes the running backend's own scope: its deadline cancels the block, a shielded one
    keeps an outer cancellation out, and loop_time() is anyio's clock."""
    assert abs(loop_time() - anyio.current_time()) < 0.05
    with cancel_scope(deadline=loop_time() + 0.02) as scope:
        assert isinstance(scope, anyio.CancelScope) and type(scope) is type(anyio.CancelScope())
        await anyio.sleep(5)
    assert scope.cancelled_caught
    done = []
    with anyio.CancelScope() as outer:
        outer.cancel()
        with cancel_scope(shield=True):
            await anyio.sleep(0.01)  # not cancelled: the scope is shielded
            done.append("shielded")
        await anyio.sleep(1)  # the outer cancellation arrives here
    assert done == ["shielded"] and outer.cancelled_caught


async def test_checkpoint_lets_a_ready_task_run() -> None:
    """checkpoint() gives a task started just before it its first turn."""
    log: list[str] = []

    async def other() -> None:
        log.append("other ran")

    async with anyio.create_task_group() as tg:
        tg.start_soon(other)
        for _ in range(5):
            await checkpoint()
            if log:
                break
        assert log == ["other ran"]
