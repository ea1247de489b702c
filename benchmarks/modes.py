"""The systems under test ("modes") and the floors they are compared with.

A mode turns a workload and its chunks into one run: a callable (sync) or
a coroutine function (async) whose result can be checked. A timed run folds
its deltas into a small string sink (:class:`~benchmarks.verify.Fold`), as a
client does and as the peers' harness does: keeping every delta object
alive would time CPython's garbage collector, whose passes grow with the
live deltas (1 MB at K=4: 5.25 instead of 3.43 µs per chunk). Each cell is
also checked once with the deltas kept and rebuilt by ``deltaflow.accumulate``.
Modes:

* ``sync``: the sans-IO core, ``ResponseParser.feed`` over the chunks;
* ``complete``: ``parse_complete`` of the whole text;
* ``stream``: the full async pipeline, ``deltaflow.stream`` over an async
  generator of the chunks (default ``prefetch=16``: a pump task, coalescing);
* ``stream-p0``: the same with ``prefetch=0`` (no read-ahead: the
  consumer's task runs the fused chain inline, no task and no memory stream);
* ``stream-sse``: the pipeline plus OpenAI Chat Completions SSE framing to
  bytes, as the server runs it (``SSEResponse`` driven through ASGI, inline
  pipeline with ``prefetch=0``; see :func:`find_sse_framer`).

Floors, measured in the same run on the same chunks:

* ``floor-find`` (for the sync core): iterate the chunks, append each to a
  list and run one ``str.find`` on it;
* ``floor-memstream`` (for the async modes): the chunks from the same async
  generator through one anyio memory object stream (buffer 16) into a list.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import msgspec

import deltaflow
from deltaflow import DeltaMessage, ResponseParser, accumulate, parse_complete

from .verify import Fold, check_message
from .workloads import Workload

__all__ = ("MODES", "Mode", "Run", "find_sse_framer", "floor_find", "floor_memstream", "parser_kwargs")

Run = Callable[[], Any]
ARun = Callable[[], Awaitable[Any]]
Check = Callable[[Any], "str | None"]


def parser_kwargs(wl: Workload) -> dict[str, Any]:
    """The dialect arguments ``wl`` needs (for ``ResponseParser``, ``parse_complete``, ``stream``)."""
    kwargs: dict[str, Any] = {
        "tool_parser": wl.tool_parser,
        "reasoning_parser": wl.reasoning_parser,
        "tools": wl.tools,
    }
    if "enable_thinking" in wl.meta:
        kwargs["enable_thinking"] = wl.meta["enable_thinking"]
    return kwargs


async def source_of(items: Sequence[Any]) -> AsyncIterator[Any]:
    """An engine-like async generator of ``items`` (it never waits: the producer is never the bottleneck)."""
    for it in items:
        yield it


# -- floors -----------------------------------------------------------------------
def floor_find(chunks: Sequence[str]) -> Run:
    """The sync floor: append every chunk to a list and run one ``str.find`` on it."""

    def run() -> list[str]:
        out: list[str] = []
        append = out.append
        for c in chunks:
            append(c)
            c.find("<")
        return out

    return run


def floor_memstream(items: Sequence[Any], buffer: int = 16) -> ARun:
    """The async floor: the items through one anyio memory object stream (buffer 16) into a list."""

    async def pump(send: Any) -> None:
        async with send:
            async for it in source_of(items):
                await send.send(it)

    async def run() -> list[Any]:
        out: list[Any] = []
        send, receive = anyio.create_memory_object_stream[Any](buffer)
        async with anyio.create_task_group() as tg:
            tg.start_soon(pump, send)
            async with receive:
                async for it in receive:
                    out.append(it)
        return out

    return run


def check_floor(n: int) -> Check:
    """A floor's check: every item arrived."""
    return lambda out: None if len(out) == n else f"{len(out)} of {n} items arrived"


# -- SSE framing ------------------------------------------------------------------------
# An SSE frame function takes ``open_stream`` (a zero-argument callable returning the
# ``deltaflow.stream(...)`` context manager) and ``write`` (called with each body chunk),
# and runs one response the way the server does: ``deltaflow.sinks.SSEResponse`` as an
# ASGI app, with a client that never disconnects and a ``send`` that hands the bytes to
# ``write`` instead of a socket.
OpenStream = Callable[[], Any]
SseFrame = Callable[[OpenStream, Callable[[bytes], Any]], Awaitable[None]]


def _adapter_asgi_response(sinks: Any) -> SseFrame | None:
    """``SSEResponse`` + ``ChatCompletionsFramer`` driven through the ASGI interface (what the server runs)."""
    if not all(hasattr(sinks, n) for n in ("ChatCompletionsFramer", "SSEResponse")):
        return None

    async def frame(open_stream: OpenStream, write: Callable[[bytes], Any]) -> None:
        never = anyio.Event()

        async def receive() -> dict[str, Any]:
            await never.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body":
                write(message["body"])

        framer = sinks.ChatCompletionsFramer("bench")
        response = sinks.SSEResponse(open_stream, framer, done_marker=True, heartbeat=15.0)
        await response({"type": "http", "method": "POST"}, receive, send)

    return frame


SSE_ADAPTERS: list[Callable[[Any], SseFrame | None]] = [_adapter_asgi_response]


def find_sse_framer() -> tuple[SseFrame | None, str]:
    """Look for OpenAI Chat Completions SSE framing in ``deltaflow.sinks``.

    Returns:
        ``(frame, "")`` when an adapter finds it, else ``(None, reason)``. To
        wire another API, add an adapter to ``SSE_ADAPTERS``.
    """
    try:
        import deltaflow.sinks as sinks
    except ImportError as exc:  # pragma: no cover - sinks always exists
        return None, f"deltaflow.sinks cannot be imported ({exc})"
    for adapter in SSE_ADAPTERS:
        try:
            frame = adapter(sinks)
        except Exception as exc:  # noqa: BLE001 - an adapter for an API in flux
            return None, f"the SSE adapter {adapter.__name__} failed: {exc!r}"
        if frame is not None:
            return frame, ""
    sse_like = sorted(n for n in dir(sinks) if "sse" in n.lower())
    if sse_like:
        return None, (
            f"deltaflow.sinks has {', '.join(sse_like)} but no adapter in benchmarks.modes.SSE_ADAPTERS fits"
        )
    return None, "deltaflow.sinks has no SSE framer yet (the wire protocols issue adds it)"


def deltas_from_sse(data: bytes) -> list[DeltaMessage]:
    """Decode OpenAI ``chat.completion.chunk`` SSE bytes back into deltas (to verify the framing)."""
    out: list[DeltaMessage] = []
    for event in data.split(b"\n\n"):
        for line in event.split(b"\n"):
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                continue
            obj = json.loads(payload)
            for choice in obj.get("choices") or ():
                delta = dict(choice.get("delta") or {})
                if choice.get("finish_reason"):
                    delta["finish_reason"] = choice["finish_reason"]
                out.append(msgspec.convert(delta, DeltaMessage))
    return out


# -- modes ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Mode:
    """A system under test.

    Attributes:
        name: as on the command line.
        is_async: runs inside an event loop.
        floor: the floor it is compared with.
        text_only: needs text chunks (not token ids).
        whole_text: runs on the whole text, not on chunks.
        prefetch: for the pipeline modes.
        sse: frames to SSE bytes.
    """

    name: str
    is_async: bool
    floor: str | None
    text_only: bool = False
    whole_text: bool = False
    prefetch: int = 16
    sse: bool = False

    def unavailable(self, wl: Workload) -> str | None:
        """Why this mode cannot run ``wl`` (None when it can)."""
        if self.text_only and wl.token_source:
            return "token-id source: pipeline modes only"
        if self.sse:
            framer, reason = find_sse_framer()
            if framer is None:
                return reason
        return None

    @property
    def folds(self) -> bool:
        """Whether runs fold their deltas into a :class:`~benchmarks.verify.Fold` (unless ``keep``)."""
        return not (self.whole_text or self.sse)

    def check(self, wl: Workload, keep: bool = False) -> Check:
        """The check of one run's result (``keep``: the run kept its deltas for ``deltaflow.accumulate``)."""
        if self.whole_text:
            return lambda msg: check_message(wl, msg)
        if self.sse:
            return lambda data: check_message(wl, accumulate(deltas_from_sse(data)))
        if keep:
            return lambda deltas: check_message(wl, accumulate(deltas))
        return lambda fold: fold.check(wl)

    def sync_run(
        self, wl: Workload, chunks: Sequence[str], keep: bool = False
    ) -> tuple[Callable[[], Any] | None, Callable[..., Any]]:
        """One run of a sync mode: ``(prepare, run)``; only ``run`` is timed.

        The sync core's ``ResponseParser`` is built by ``prepare`` (untimed, as
        the peers' harness builds their parsers outside the clock);
        ``parse_complete`` is timed whole (building its parser is part of it).
        A run folds its deltas into a :class:`~benchmarks.verify.Fold` as a
        client would (``keep=True``: returns the deltas themselves).
        """
        kwargs = parser_kwargs(wl)
        if self.whole_text:
            text = wl.text
            return None, lambda: parse_complete(text, **kwargs)

        def prepare() -> ResponseParser:
            return ResponseParser(**kwargs)

        def run_keep(parser: ResponseParser) -> list[DeltaMessage]:
            feed = parser.feed
            out: list[DeltaMessage] = []
            extend = out.extend
            for c in chunks:
                extend(feed(c))
            extend(feed("", final=True))
            return out

        def run(parser: ResponseParser) -> Fold:
            feed = parser.feed
            fold = Fold()
            add = fold.add
            for c in chunks:
                for d in feed(c):
                    add(d)
            for d in feed("", final=True):
                add(d)
            return fold

        return prepare, (run_keep if keep else run)

    def async_run(self, wl: Workload, items: Sequence[Any], tokenizer: Any = None, keep: bool = False) -> ARun:
        """One run of an async mode (pipeline construction included: it is per response).

        Deltas are folded as in :meth:`sync_run` (``keep=True``: returned as a list).
        """
        kwargs = parser_kwargs(wl)
        if tokenizer is not None:
            kwargs["tokenizer"] = tokenizer
        kwargs["prefetch"] = self.prefetch
        if self.sse:
            framer, _ = find_sse_framer()
            assert framer is not None

            async def run_sse() -> bytes:
                parts: list[bytes] = []
                await framer(lambda: deltaflow.stream(source_of(items), **kwargs), parts.append)
                return b"".join(parts)

            return run_sse

        async def run_keep() -> list[DeltaMessage]:
            out: list[DeltaMessage] = []
            async with deltaflow.stream(source_of(items), **kwargs) as deltas:
                async for d in deltas:
                    out.append(d)
            return out

        async def run() -> Fold:
            fold = Fold()
            add = fold.add
            async with deltaflow.stream(source_of(items), **kwargs) as deltas:
                async for d in deltas:
                    add(d)
            return fold

        return run_keep if keep else run


MODES: dict[str, Mode] = {
    "sync": Mode("sync", is_async=False, floor="floor-find", text_only=True),
    "complete": Mode("complete", is_async=False, floor=None, text_only=True, whole_text=True),
    "stream": Mode("stream", is_async=True, floor="floor-memstream", prefetch=16),
    "stream-p0": Mode("stream-p0", is_async=True, floor="floor-memstream", prefetch=0),
    "stream-sse": Mode("stream-sse", is_async=True, floor="floor-memstream", prefetch=0, sse=True),
}
