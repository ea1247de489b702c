"""Server-sent events: wire events -> bytes, and an ASGI response that streams a pipeline.

Framing rules: every payload is one ``data:`` line of JSON (newlines inside
values are JSON-escaped by the encoder); Anthropic and Responses events get
an ``event:`` line; OpenAI Chat Completions streams end with
``data: [DONE]``. Idle streams get ``: ping`` comment lines.

Tasks: the pipeline and its framer run in a producer task
(:func:`produce_events`) that sends event batches over a bounded memory
stream; the response's own task writes them to the socket. No generator
ever yields from inside the pipeline's task group, a slow client slows the
producer (and so the source), and ``http.disconnect`` cancels everything,
which closes the engine's iterator.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import msgspec
import structlog
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..errors import DeltaflowError
from ..pipeline.runner import DeltaStream
from .framing.base import Framer, WireEvent

__all__ = ("SSEEncoder", "SSEResponse", "iter_events", "produce_events")

_log = structlog.get_logger("deltaflow.sinks")
DONE = b"data: [DONE]\n\n"
PING = b": ping\n\n"

OpenStream = Callable[[], AbstractAsyncContextManager[DeltaStream]]


class SSEEncoder:
    """Encodes wire events as SSE bytes with one reused msgspec encoder and buffer."""

    __slots__ = ("_enc", "_buf")

    def __init__(self) -> None:
        self._enc = msgspec.json.Encoder()
        self._buf = bytearray(256)

    def encode(self, events: Iterable[WireEvent]) -> bytes:
        """The SSE bytes of ``events``."""
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


async def produce_events(
    open_stream: OpenStream,
    framer: Framer,
    send: MemoryObjectSendStream[list[WireEvent]],
) -> None:
    """Run the pipeline and send its framed events; a failure becomes the protocol's error event.

    Args:
        open_stream: opens the pipeline (e.g. ``lambda: deltaflow.stream(source, ...)``).
        framer: the protocol framer for this response.
        send: where event batches go; closed at the end.
    """
    async with send:
        try:
            await send.send(framer.start())
            async with open_stream() as deltas:
                async for delta in deltas:
                    events = framer.feed(delta)
                    if events:
                        await send.send(events)
            await send.send(framer.finish(deltas.usage))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return  # the writer is gone (client disconnected)
        except DeltaflowError as exc:
            _log.warning("stream_failed", error=str(exc), cause=repr(exc.__cause__))
            try:
                await send.send(framer.error(exc))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return


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
        self._open = open_stream
        self._framer = framer
        self._done = done_marker
        self._heartbeat = heartbeat
        self._headers = headers or {}

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ] + [(k.lower().encode(), v.encode()) for k, v in self._headers.items()]
        enc = SSEEncoder()
        events_out, events_in = anyio.create_memory_object_stream[list[WireEvent]](1)
        async with anyio.create_task_group() as tg:

            async def watch_disconnect() -> None:
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        _log.debug("client_disconnected")
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(watch_disconnect)
            tg.start_soon(produce_events, self._open, self._framer, events_out)
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            try:
                async with events_in:
                    while True:
                        try:
                            batch = await _next_batch(events_in, self._heartbeat)
                        except anyio.EndOfStream:
                            break
                        body = PING if batch is None else enc.encode(batch)
                        await send({"type": "http.response.body", "body": body, "more_body": True})
                tail = DONE if self._done else b""
                await send({"type": "http.response.body", "body": tail, "more_body": False})
            except OSError:  # the socket went away
                pass
            tg.cancel_scope.cancel()
