"""Server-sent events: wire events -> bytes, and an ASGI response that streams a pipeline.

Framing rules: every payload is one ``data:`` line of JSON (newlines inside
values are JSON-escaped by the encoder); Anthropic and Responses events get
an ``event:`` line; OpenAI Chat Completions streams end with
``data: [DONE]``. Idle streams get ``: ping`` comment lines.

Tasks: :func:`run_framed` runs the pipeline and its framer in the task
that writes (an SSE response, a WebSocket handler), so a delta goes from the
pipeline to the socket without crossing a memory stream; with the server's
default inline pipeline (``prefetch=0``) a token costs no task switch at all
beyond awaiting the engine (with ``coalesce``, one pump task reads the
engine). A slow client slows the pipeline (and so the source). The SSE
response adds one task that does nothing per token: it waits for
``http.disconnect`` (which cancels everything and so closes the engine's
iterator) and writes a ``: ping`` after ``heartbeat`` seconds without a
write. :func:`iter_events` is the generator form: it runs the
pipeline in a producer task (:func:`produce_events`), because a generator
must never yield from inside a pipeline's task group.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager
from time import monotonic
from typing import Any

import anyio
import msgspec
import structlog
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..errors import DeltaflowError
from ..pipeline.companion import Companion, cancel_scope, checkpoint, loop_time, on_asyncio
from ..pipeline.runner import DeltaStream
from .framing.base import Framer, WireEvent

__all__ = ("SSEEncoder", "SSEResponse", "iter_events", "produce_events", "run_framed")

_log = structlog.get_logger("deltaflow.sinks")
_Raw = msgspec.Raw
DONE = b"data: [DONE]\n\n"
PING = b": ping\n\n"

OpenStream = Callable[[], AbstractAsyncContextManager[DeltaStream]]

_asyncio_timeout: Any = getattr(asyncio, "timeout", None)  # Python 3.11+; on 3.10 the heartbeat waits in an anyio scope


class SSEEncoder:
    """Encodes wire events as SSE bytes with one reused msgspec encoder and buffer."""

    __slots__ = ("_buf", "_enc")

    def __init__(self) -> None:
        self._enc = msgspec.json.Encoder()
        self._buf = bytearray(256)

    def encode(self, events: Iterable[WireEvent]) -> bytes:
        """The SSE bytes of ``events`` (a payload already rendered as ``msgspec.Raw`` is copied as is)."""
        if isinstance(events, list) and len(events) == 1:
            ev = events[0]
            if ev.event is None and ev.data.__class__ is _Raw:
                return b"data: " + ev.data + b"\n\n"
        out = bytearray()
        buf = self._buf
        for ev in events:
            if ev.event is not None:
                out += b"event: "
                out += ev.event.encode()
                out += b"\n"
            self._enc.encode_into(ev.data, buf)
            out += b"data: "
            out += buf
            out += b"\n\n"
        return bytes(out)


async def run_framed(
    open_stream: OpenStream,
    framer: Framer,
    emit: Callable[[list[WireEvent]], Awaitable[Any]],
    *,
    head: Callable[[], Awaitable[Any]] | None = None,
) -> None:
    """Run the pipeline in this task and ``emit`` its framed event batches, start to finish.

    The pipeline is opened first and its tasks get a turn before anything is
    written: on asyncio, a pipeline that reads its source in a task of its
    own (the gateway's) sends the upstream request then, and the response's
    head and first events are written while the engine works, not before it
    starts (trio orders ready tasks as it likes: no such promise there).

    A :class:`~deltaflow.errors.DeltaflowError` of the pipeline (a failing
    stage or source) becomes the protocol's error event, emitted last.
    Exceptions of ``emit`` and ``head`` propagate (the caller knows what a
    gone client looks like).

    Args:
        open_stream: opens the pipeline (e.g. ``lambda: deltaflow.stream(source, ...)``).
        framer: the protocol framer for this response.
        emit: awaited with each non-empty batch of wire events.
        head: awaited once before the first ``emit`` (e.g. the HTTP response's head).
    """
    started = False

    async def start() -> None:
        nonlocal started
        started = True
        if head is not None:
            await head()
        await emit(framer.start())

    try:
        opened = open_stream()
        # The opener (and the request it closes over: a planned prompt, its token ids, the body) is not
        # needed once the stream is open; an open stream must not keep it alive.
        del open_stream
        async with opened as deltas:
            await checkpoint()  # the pipeline's own tasks start (the upstream request goes out)
            await start()
            feed = framer.feed
            # Every delta that is ready when one arrives goes into the same emit: one write per burst.
            take_ready = getattr(deltas, "take_ready", None)
            async for delta in deltas:
                events = feed(delta)
                if take_ready is not None and (more := take_ready()):
                    events = list(events)
                    for d in more:
                        events += feed(d)
                if events:
                    await emit(events)
        last = framer.finish(deltas.usage)
    except DeltaflowError as exc:
        _log.warning("stream_failed", error=str(exc), cause=repr(exc.__cause__))
        last = framer.error(exc)
    if not started:  # the pipeline failed as it opened
        await start()
    if last:
        await emit(last)


async def produce_events(
    open_stream: OpenStream,
    framer: Framer,
    send: MemoryObjectSendStream[list[WireEvent]],
) -> None:
    """:func:`run_framed` into a memory stream (closed at the end); a gone reader ends it quietly.

    Args:
        open_stream: opens the pipeline (e.g. ``lambda: deltaflow.stream(source, ...)``).
        framer: the protocol framer for this response.
        send: where event batches go; closed at the end.
    """
    async with send:
        try:
            await run_framed(open_stream, framer, send.send)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return  # the reader is gone (client disconnected)


async def _next_batch(
    receive: MemoryObjectReceiveStream[list[WireEvent]], heartbeat: float | None
) -> list[WireEvent] | None:
    """The producer's next event batch, or None after ``heartbeat`` seconds of silence.

    Raises:
        anyio.EndOfStream: the producer finished.
    """
    if heartbeat is None:
        return await receive.receive()
    with anyio.move_on_after(heartbeat):
        return await receive.receive()
    return None


async def iter_events(
    open_stream: OpenStream, framer: Framer, *, heartbeat: float | None = None
) -> AsyncIterator[list[WireEvent] | None]:
    """Yield event batches from a producer task (``None`` on each idle heartbeat).

    The pipeline runs in the producer task, so this generator never yields
    from inside the pipeline's task group.
    """
    send, receive = anyio.create_memory_object_stream[list[WireEvent]](1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(produce_events, open_stream, framer, send)
        try:
            async with receive:
                while True:
                    try:
                        batch = await _next_batch(receive, heartbeat)
                    except anyio.EndOfStream:
                        return
                    yield batch
        finally:
            tg.cancel_scope.cancel()


class _BodyWriter:
    """Writes ``http.response.body`` messages from two tasks (the stream and its watcher's heartbeat) one at a
    time."""

    __slots__ = ("_busy", "_ended", "_free", "_send", "gone", "last")

    def __init__(self, send: Callable[..., Any]) -> None:
        self._send = send
        self._busy = False
        self._free: anyio.Event | None = None
        self._ended = False
        self.gone = False  # the client disconnected (set by :meth:`watch`)
        self.last = monotonic()

    async def write(self, body: bytes, more: bool = True) -> None:
        """Send one body message.

        Raises:
            ConnectionResetError: the client has disconnected. The server drops
                writes after that without a word, and the cancellation that the
                watcher starts can come late (under uvloop, a task whose every wait
                is a socket read the loop has already answered is not cancelled
                until a wait finds nothing), so the stream must not go on writing
                into nothing meanwhile, reading its engine to the end.
        """
        if self.gone:
            raise ConnectionResetError("the client disconnected")
        while self._busy:  # only while a heartbeat is being written
            if self._free is None:
                self._free = anyio.Event()
            await self._free.wait()
        if self._ended:  # nothing may follow the last body message
            return
        self._ended = not more
        self._busy = True
        try:
            await self._send({"type": "http.response.body", "body": body, "more_body": more})
        finally:
            self._busy = False
            self.last = monotonic()
            if self._free is not None:
                self._free.set()
                self._free = None

    async def watch(self, receive: Callable[..., Any], every: float | None) -> None:
        """Return when the client disconnects; meanwhile write ``: ping`` after ``every`` seconds
        without a write (None: never). One task per stream does both (a task costs about 4 KB)."""
        while True:
            if every is None or self._ended:
                message = await receive()
            else:
                delay = self.last + every - monotonic()
                if delay <= 0 and not self._busy:  # a write in progress (a slow client) is not silence
                    await self.write(PING)
                    continue
                wait = delay if delay > 0 else every
                if _asyncio_timeout is not None and on_asyncio():
                    # asyncio's own timeout: a timer handle and a small object, where an anyio scope with a
                    # deadline also costs its two sets and a task-state entry (an open stream keeps one)
                    timeout = _asyncio_timeout(wait)
                    try:
                        async with timeout:
                            message = await receive()  # a cancelled receive() loses no message
                    except TimeoutError:
                        if not timeout.expired():
                            raise
                        continue
                else:
                    message = None
                    with cancel_scope(deadline=loop_time() + wait):
                        message = await receive()
                    if message is None:
                        continue
            if message["type"] == "http.disconnect":
                self.gone = True
                return


class SSEResponse:
    """An ASGI response streaming one pipeline as SSE (see the module docstring).

    Args:
        open_stream: opens the pipeline for this response.
        framer: the protocol framer.
        done_marker: end with ``data: [DONE]`` (OpenAI Chat Completions).
        heartbeat: seconds of silence before a ``: ping`` comment (None: never).
    """

    def __init__(
        self,
        open_stream: OpenStream,
        framer: Framer,
        *,
        done_marker: bool = False,
        heartbeat: float | None = 15.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        self._open: OpenStream | None = open_stream
        self._framer = framer
        self._done = done_marker
        self._heartbeat = heartbeat
        self._headers = headers or {}

    def _take_opener(self) -> OpenStream:
        """The opener, handed over once: a response streams once, and nothing the opener closes over (a
        planned request: its prompt, token ids, body) stays alive while the stream is open (see
        :func:`run_framed`)."""
        open_stream, self._open = self._open, None
        if open_stream is None:
            raise RuntimeError("an SSEResponse can be sent only once")
        return open_stream

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ] + [(k.lower().encode(), v.encode()) for k, v in self._headers.items()]
        if self._open is None:
            raise RuntimeError("an SSEResponse can be sent only once")
        encode = SSEEncoder().encode
        writer = _BodyWriter(send)

        def emit(events: list[WireEvent]) -> Awaitable[None]:
            return writer.write(encode(events))  # the write itself is the awaitable: one coroutine per batch

        async with Companion() as helper:  # the watcher's task (a bare task on asyncio: see Companion)

            async def watch() -> None:
                await writer.watch(receive, self._heartbeat)
                _log.debug("client_disconnected")
                helper.cancel()

            async def head() -> None:
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                helper.start_soon(watch)  # the disconnect and the heartbeat

            try:
                await run_framed(self._take_opener(), self._framer, emit, head=head)
                await writer.write(DONE if self._done else b"", more=False)
            except OSError:  # the socket went away
                pass
            # leaving the block cancels the watcher
