"""What the upstream adapters share: one pooled client, streamed reading, timeouts, retry, errors.

:class:`HttpUpstream` is the base of every adapter. It holds one pooled
:class:`httpx.AsyncClient` (split into pools of :data:`POOL_SHARD` connections
when more are allowed) and reads an engine's answer as a stream of event
payloads (SSE ``data`` fields through ``httpx_sse``'s decoders, or NDJSON lines), which
an adapter's :class:`EventDecoder` turns into
:class:`~deltaflow.items.TokenChunk` objects. Around that loop it enforces:

* **timeouts** (:class:`Timeouts`): connecting; the first event (from sending
  the request to the first event, so it includes the engine's prompt
  processing); idle time between two events. The first-byte limit is an anyio
  deadline around each wait before the first event; the idle limit is one
  timer per stream that stops a wait lasting longer (:class:`_IdleWatch`: it
  shuts the connection's socket down, or cancels the wait's scope), so a slow
  socket read and a silent engine are treated alike, and a long stream does
  not pay for a deadline or a scope per event;
* **one bounded retry** (``retries``, 1 by default), only while nothing has
  reached the caller and only for failures that say nothing about the request
  itself: the connection could not be made (refused, connect timeout), the
  server dropped it before the first event (a stale keep-alive connection), or
  it answered 502/503/504. A first-byte timeout is not retried (the engine may
  still be processing a long prompt; a retry would double the wait);
* **error mapping** onto :class:`~deltaflow.gateway.upstream.UpstreamError`:
  connect failures -> ``connect``; deadlines -> ``timeout``; non-2xx answers
  and error objects inside a stream -> ``status`` (with the engine's own
  message, taken from its JSON body); undecodable events -> ``protocol``; a
  stream that ends (or breaks) before its final event -> ``closed``. Messages
  are written here, never taken from httpx exceptions (which may name the
  URL), and the upstream's URL, host and API key are scrubbed from the
  engine's own messages;
* **closing**: the reader is an async generator; closing it early (the client
  went away) closes the HTTP response, which drops the connection, and the
  engine stops generating.
"""

from __future__ import annotations

import asyncio
import codecs
import math
import socket
import struct
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import anyio
import httpx
import msgspec

# httpx-sse's decoders, without the generators around them (see _SSEData); the version is pinned below 0.5
from httpx_sse._decoders import SSEDecoder, SSELineDecoder

from ...constrain import ToolConstraint, UnsupportedConstraintError
from ...items import EngineUsage, TokenChunk
from ...pipeline.companion import cancel_scope, loop_time
from ..upstream import ConstraintForm, UpstreamError, UpstreamErrorKind, UpstreamRequest
from ._h1 import BODY_READ, AutoTransport, H1Pool

__all__ = (
    "DEFAULT_RETRY_STATUSES",
    "LAZY_FORMS",
    "EventDecoder",
    "HttpUpstream",
    "Timeouts",
    "decoder_for",
    "engine_usage",
    "error_message",
    "error_status",
    "event_error",
    "pick_form",
)

DEFAULT_RETRY_STATUSES: frozenset[int] = frozenset((502, 503, 504))
"""Answers retried before the first byte: a proxy or a loading engine (llama.cpp answers 503 while it loads)."""

LAZY_FORMS: tuple[ConstraintForm, ...] = ("structural_tag",)
"""The forms that express a lazy constraint on engines without lazy grammars (vLLM, SGLang)."""

MAX_ERROR_BODY = 64 * 1024
"""Bytes of an error answer read to find the engine's message."""

MAX_MESSAGE = 2000
"""Characters of an engine's message kept in an :class:`UpstreamError`."""

POOL_SHARD = 16
"""Connections per ``httpx`` pool: a larger ``max_connections`` is split over several clients.

httpcore's pool (1.0) scans all its connections, and for each idle one all of
them again, at every request and response close (encode/httpcore#1035): with
hundreds of streams that bookkeeping costs more than the streams (on asyncio
the transport is deltaflow's own (:mod:`._h1`), whose pool has no such cost: there all the
clients' transports share one pool; trio keeps httpcore). A stream
goes to the client with the fewest open streams, which is also the one with
the most idle connections to reuse.
"""

T = TypeVar("T")
UpstreamT = TypeVar("UpstreamT", bound="HttpUpstream")


@dataclass(frozen=True)
class Timeouts:
    """The time limits of one upstream (seconds; None: no limit).

    Attributes:
        connect: to open a TCP connection.
        first_byte: from sending a request to the answer's first event
            (includes connecting and the engine's prompt processing).
        idle: between two events of a stream.
        write: to send a request body.
        pool: to wait for a free connection of the pool.
        health: the whole health request.
        keepalive_expiry: how long an idle pooled connection is kept. Keep it
            below the engine's own keep-alive timeout (llama.cpp: 5 s), or a
            request can land on a connection the server is closing.
    """

    connect: float | None = 5.0
    first_byte: float | None = 300.0
    idle: float | None = 120.0
    write: float | None = 60.0
    pool: float | None = 60.0
    health: float = 5.0
    keepalive_expiry: float | None = 4.0


class _StreamFault(Exception):
    """A failure found while reading an answer; :class:`HttpUpstream` turns it into an UpstreamError.

    Private control flow (errors.py's convention for underscore names): the
    decoders of the sibling modules raise it, :meth:`HttpUpstream.stream`
    catches every one and raises an UpstreamError instead; none reaches a caller.

    Decoders raise it (``protocol``, ``status`` for an error event, ``closed``
    from :meth:`EventDecoder.finish`); the reader adds whether anything had
    been yielded.

    Args:
        kind: the :data:`~deltaflow.gateway.upstream.UpstreamErrorKind`.
        message: what a client may see.
        status: the engine's status code, when it gave one.
        retryable: the failure happened before the first event and says
            nothing about the request (see the module docstring).
    """

    def __init__(
        self, kind: UpstreamErrorKind, message: str, *, status: int | None = None, retryable: bool = False
    ) -> None:
        super().__init__(message)
        self.kind: UpstreamErrorKind = kind
        self.message = message
        self.status = status
        self.retryable = retryable


class EventDecoder(Protocol):
    """One response's event decoder (a new one per attempt)."""

    @property
    def done(self) -> bool:
        """The final event has been seen (a later timeout or break ends the stream normally)."""
        ...

    def feed(self, data: str) -> Sequence[TokenChunk]:
        """Decode one event payload (an SSE ``data`` field or an NDJSON line).

        Raises:
            _StreamFault: the event is malformed (``protocol``) or is the
                engine's error object (``status``).
        """
        ...

    def finish(self) -> Sequence[TokenChunk]:
        """The stream ended: what is still held.

        Raises:
            _StreamFault: ``closed`` when the final event never came.
        """
        ...


def decoder_for(kind: type[T]) -> Callable[[str], T]:
    """A fast JSON decoder of one event type that raises :class:`_StreamFault` (``protocol``)."""
    dec = msgspec.json.Decoder(kind)

    def decode(data: str) -> T:
        try:
            return dec.decode(data)
        except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
            raise _StreamFault("protocol", f"the upstream sent a malformed event ({exc})") from exc

    return decode


def sampling_fields(request: UpstreamRequest, max_tokens_key: str) -> dict[str, Any]:
    """The request's limit, stops and sampling options that are set, under the names the
    OpenAI-style completion APIs share (llama.cpp, vLLM); the limit under ``max_tokens_key``."""
    out: dict[str, Any] = {}
    if request.max_tokens is not None:
        out[max_tokens_key] = request.max_tokens
    if request.stop:
        out["stop"] = list(request.stop)
    if request.temperature is not None:
        out["temperature"] = request.temperature
    if request.top_p is not None:
        out["top_p"] = request.top_p
    if request.seed is not None:
        out["seed"] = request.seed
    return out


def engine_usage(prompt_tokens: Any, completion_tokens: Any) -> EngineUsage | None:
    """The engine's counts as an :class:`~deltaflow.items.EngineUsage` (None when it gave neither).

    Raises:
        _StreamFault: a count is not a non-negative int (``protocol``).
    """
    if prompt_tokens is None and completion_tokens is None:
        return None
    try:
        return EngineUsage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
    except ValueError as exc:
        raise _StreamFault("protocol", f"the upstream reported invalid token counts ({exc})") from exc


def error_message(payload: Any) -> str | None:
    """The engine's own error message in a decoded JSON body, or None.

    Understands ``{"error": {"message": ...}}`` (OpenAI, llama.cpp, vLLM,
    SGLang), ``{"error": "..."}`` (TGI, Ollama), ``{"object": "error",
    "message": ...}`` (older vLLM) and ``{"detail": ...}`` (FastAPI).
    """
    if not isinstance(payload, Mapping):
        return None
    err = payload.get("error")
    if isinstance(err, str) and err:
        return err
    if isinstance(err, Mapping):
        msg = err.get("message")
        if isinstance(msg, str) and msg:
            return msg
    msg = payload.get("message")
    if isinstance(msg, str) and msg:
        return msg
    detail = payload.get("detail")
    if isinstance(detail, str) and detail:
        return detail
    if isinstance(detail, list):
        parts = [d["msg"] for d in detail if isinstance(d, Mapping) and isinstance(d.get("msg"), str)]
        if parts:
            return "; ".join(parts)
    return None


def event_error(data: str) -> _StreamFault:
    """The fault for an event that is the engine's error object (``status``, its message and code)."""
    try:
        payload = msgspec.json.decode(data)
    except msgspec.DecodeError:
        payload = None
    return _StreamFault("status", error_message(payload) or "the upstream engine reported an error",
                        status=error_status(payload))


def error_status(payload: Any) -> int | None:
    """The status code inside an engine's error object (``error.code``, ``code``), or None."""
    if not isinstance(payload, Mapping):
        return None
    err = payload.get("error")
    for src in (err, payload):
        if isinstance(src, Mapping):
            code = src.get("code", src.get("status_code"))
            if isinstance(code, int) and not isinstance(code, bool) and 100 <= code <= 599:
                return code
    return None


def pick_form(
    constraint: ToolConstraint,
    forms: Sequence[ConstraintForm],
    kind: str,
    *,
    lazy_forms: Collection[ConstraintForm] | None = None,
) -> ConstraintForm:
    """The first of ``forms`` that ``constraint`` can be written in.

    Args:
        constraint: the tool-call constraint.
        forms: the adapter's forms, preferred first.
        kind: the adapter's name (for the message).
        lazy_forms: the forms that can express a lazy constraint (``"auto"``:
            free text until a trigger); None: all of them.

    Raises:
        UnsupportedConstraintError: none of them fits (or the adapter takes no constraint).
    """
    for form in forms:
        if form == "structural_tag" and constraint.structural_tag_json is None:
            continue
        if constraint.lazy and lazy_forms is not None and form not in lazy_forms:
            continue
        return form
    if not forms:
        raise UnsupportedConstraintError(f"the {kind} upstream cannot constrain decoding (no grammar field)")
    lazy = "lazy " if constraint.lazy else ""
    raise UnsupportedConstraintError(
        f"the {lazy}{constraint.dialect} constraint has no form the {kind} upstream takes ({', '.join(forms)})"
    )


def _left(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    return max(0.0, deadline - loop_time())


def _is_json(response: httpx.Response) -> bool:
    return "json" in response.headers.get("content-type", "").lower()


class _NoCookies(httpx.Cookies):
    """Cookies that keep nothing: an engine's answers set no cookies the gateway would send back.

    httpx takes the cookies of every answer by translating it and its request
    for the standard library's jar (a URL parse and two adapter objects), even
    for a jar that keeps nothing; these skip it.
    """

    def extract_cookies(self, response: httpx.Response) -> None:
        """Keep nothing."""

    def set_cookie_header(self, request: httpx.Request) -> None:
        """Send nothing."""


_NO_COOKIES = _NoCookies()


class _Client(httpx.AsyncClient):
    """httpx's client whose cookies are :class:`_NoCookies` (the gateway's own clients)."""

    @property
    def cookies(self) -> httpx.Cookies:
        """No cookies, ever."""
        return _NO_COOKIES

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        """Ignored: these clients keep no cookies."""


class _SentBody(httpx.AsyncByteStream, httpx.SyncByteStream):
    """A request body that can be let go once no retry can need it.

    httpx keeps a bytes body in its request (and the request in its response)
    for the whole answer; for a long agent conversation that is the rendered
    prompt and its token ids, tens of kilobytes per open stream. This body
    gives its bytes to the transport as often as asked until :meth:`release`,
    after which the stream's memory no longer holds them.
    """

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data = data

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[bytes]:
        yield self._data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self._data

    def release(self) -> None:
        """Drop the bytes (a later read gets none)."""
        self._data = b""


class _Reader(Generic[T]):
    """Steps one of httpx's response iterators, and unwinds it when abandoned.

    httpx reads a body through a chain of nested async generators (``aiter_text``
    over ``aiter_bytes`` over ``aiter_raw`` over httpcore's streams). Closing
    the outermost one leaves the inner ones suspended, and Trio warns when they
    are garbage collected. :meth:`abandon` instead steps the chain once more
    inside an already-cancelled scope: the cancellation is raised at the
    innermost socket read and unwinds every level (httpcore closes the
    connection on the way out).

    Args:
        it: the iterator.
        payload: ``""``: :meth:`next` returns its items; ``"ndjson"``: the next
            non-blank line instead (in one step, not in a coroutine per item).
            An SSE body is read by :class:`_SSEData`.
    """

    __slots__ = ("_it", "_payload", "finished")

    def __init__(self, it: AsyncIterator[T], payload: str = "") -> None:
        self._it = it
        self._payload = payload
        self.finished = False

    def buffered(self) -> None:
        """Nothing: every item is a step of the iterator (see :meth:`_SSEData.buffered`)."""
        return None

    async def next(self) -> Any:
        """The next item (or payload: see the class), or None at the end of the body."""
        anext = self._it.__anext__
        payload = self._payload
        try:
            while True:
                item: Any = await anext()
                if not payload:
                    return item
                if item.strip():  # ndjson
                    return str(item)
        except StopAsyncIteration:
            self.finished = True
            return None
        except BaseException:
            self.finished = True  # an exception unwound the whole chain
            raise

    async def abandon(self, sock: Any = None) -> None:
        """Stop reading (no-op once finished).

        Args:
            sock: the response's socket, when at hand: it is shut down first, so
                that the steps below end at what is already buffered. Without it
                the cancellation has to end them, and on uvloop it can come too
                late: uvloop runs socket reads before the callbacks the loop
                already holds, so while the engine keeps writing, every read's
                wait has its data before anyio looks to cancel it, and the steps
                went on to the end of the answer (a gateway whose client had left
                read an engine's whole 128 MB flood).
        """
        if not self.finished:
            self.finished = True
            await _drain(self._it.__anext__, sock)


_MAX_DRAIN = 10_000


async def _drain(step: Callable[[], Awaitable[Any]], sock: Any) -> None:
    """Shut ``sock`` down (when given: see :meth:`_Reader.abandon`), then call ``step`` inside a cancelled scope
    until it raises (the cancellation, at the innermost read, unwinds every generator on the way) or returns
    ``b""`` (a body read's end)."""
    if sock is not None:
        _shutdown(sock)
    with anyio.CancelScope() as scope:
        scope.cancel()
        for _ in range(_MAX_DRAIN):  # buffered data comes back without a checkpoint; the next read raises
            try:
                if await step() == b"":
                    return
            except Exception:  # noqa: BLE001 - StopAsyncIteration or a read error: unwound either way
                return


class _SSEData:
    """The ``data`` of an SSE body's events, read from its bytes with httpx-sse's own decoders.

    ``httpx_sse.EventSource.aiter_sse`` gives the same events through six nested async generators
    (httpx's stream, raw, byte and text iterators, httpx-sse's line and event generators), each a frame
    that an open stream keeps and a step that every token pays. This reads the body's bytes with one
    call per read (:func:`_body_read`: on asyncio, the body's own read, no generator at all) and runs what those
    generators run on each piece: UTF-8 decoding as httpx's text decoder does it (invalid bytes
    replaced), then httpx-sse's :class:`SSELineDecoder` and :class:`SSEDecoder` (the SSE standard's line
    splitting and field rules stay the library's). A test holds it to ``aiter_sse``'s output on every
    split of tricky bodies.

    Args:
        read: the body's next bytes, ``b""`` at its end (:func:`_body_read`).
    """

    __slots__ = ("_at", "_events", "_lines", "_read", "_ready", "_text", "finished")

    def __init__(self, read: Callable[[], Awaitable[bytes]]) -> None:
        self._read = read
        self.finished = False
        self._text = _utf8_decoder("replace")
        self._lines = SSELineDecoder()
        self._events = SSEDecoder()
        self._ready: list[str] = []
        self._at = 0

    def _take(self, lines: list[str]) -> None:
        decode = self._events.decode
        ready: list[str] = []
        for line in lines:
            event = decode(line)
            if event is not None and event.data:
                ready.append(event.data)
        self._ready, self._at = ready, 0

    def buffered(self) -> str | None:
        """The next ``data`` of the events already read, without reading; None when there is none."""
        at = self._at
        if at < len(self._ready):
            self._at = at + 1
            return self._ready[at]
        return None

    async def next(self) -> str | None:
        """The next non-empty ``data`` (events without data are skipped), or None at the end of the body."""
        data = self.buffered()
        if data is not None or self.finished:
            return data
        read = self._read
        try:
            while piece := await read():
                self._take(self._lines.decode(self._text.decode(piece)))
                if self._ready:
                    return self.buffered()
        except BaseException:
            self.finished = True  # an exception unwound the read
            raise
        self.finished = True
        tail = self._text.decode(b"", True)  # a cut multi-byte character ends as U+FFFD, as in httpx
        self._take((self._lines.decode(tail) if tail else []) + self._lines.flush())
        return self.buffered()

    async def abandon(self, sock: Any = None) -> None:
        """Stop reading (no-op once finished): as :meth:`_Reader.abandon`."""
        if not self.finished:
            self.finished = True
            await _drain(self._read, sock)


class _IdleWatch:
    """The idle limit of one stream, with one timer per stream (re-armed at most once per ``idle``
    seconds) instead of a deadline per event.

    Only the time spent waiting counts: between the end of one wait and the
    start of the next (the consumer holds the stream) the clock is stopped,
    and each wait starts a new count. How a wait that has lasted ``idle``
    seconds is stopped:

    * with the response's socket at hand (on an asyncio loop, uvloop
      included, through :class:`._h1.AutoTransport`'s
      connection or httpcore's): nothing per wait but a clock reading; the timer
      shuts the socket down, the pending read fails, and :attr:`tripped` tells
      the reader that the failure is the idle limit. The connection was lost
      to the timeout anyway;
    * otherwise (no socket: a custom transport) each wait gets a cancel scope
      without a deadline, which the timer cancels (:meth:`open`); on a loop
      other than asyncio (trio) each wait gets an anyio deadline.

    A deadline per wait (``anyio.fail_after``) costs a timer and a backend
    lookup per event; a scope per wait costs its enter and exit (together
    about a seventh of the gateway's CPU at 100 streams, measured).

    Args:
        idle: the limit (seconds; None: no limit).
        sock: the response's socket (``network_stream.get_extra_info("socket")``), or None.
    """

    __slots__ = ("_handle", "_idle", "_loop", "_scope", "_start", "_sock", "_waiting", "tripped")

    def __init__(self, idle: float | None, sock: Any = None) -> None:
        self._idle = idle
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scope: anyio.CancelScope | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._start = 0.0
        self._waiting = False
        self._sock: Any = None
        self.tripped = False
        if idle is not None:
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:  # not asyncio (trio): an anyio deadline per wait
                pass
            else:
                if sock is not None and hasattr(sock, "fileno"):
                    self._sock = sock

    @property
    def scopeless(self) -> bool:
        """Waits need no scope: call :meth:`enter` before each and :meth:`close` after it."""
        return self._sock is not None or self._idle is None

    def enter(self) -> None:
        """A wait starts (scopeless mode)."""
        loop = self._loop
        if loop is not None and self._idle is not None:  # else no limit
            self._arm(loop, self._idle)

    def _arm(self, loop: asyncio.AbstractEventLoop, idle: float) -> None:
        """A wait starts now: start its count, and the stream's timer if none runs."""
        self._start = now = loop.time()
        self._waiting = True
        if self._handle is None:
            self._handle = loop.call_at(now + idle, self._check)

    def open(self) -> anyio.CancelScope:
        """The scope of the next wait (enter it at once; call :meth:`close` after it)."""
        idle = self._idle
        if idle is None:
            return cancel_scope()
        loop = self._loop
        if loop is None:
            return cancel_scope(deadline=loop_time() + idle)
        scope = self._scope = cancel_scope()
        self._arm(loop, idle)
        return scope

    def close(self) -> None:
        """The wait ended."""
        self._scope = None
        self._waiting = False

    def cancel(self) -> None:
        """The stream ended: drop the timer."""
        self._scope = None
        self._waiting = False
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _check(self) -> None:
        self._handle = None
        loop, idle = self._loop, self._idle
        if not self._waiting or loop is None or idle is None:
            return  # not waiting: the next wait arms a new timer
        due = self._start + idle
        if loop.time() < due:
            self._handle = loop.call_at(due, self._check)
        elif self._scope is not None:
            self._scope.cancel()
        elif self._sock is not None:
            self.tripped = True
            self._abort()

    def _abort(self) -> None:
        """Shut the response's socket down: the pending read sees the connection end."""
        _shutdown(self._sock)


def _shutdown(sock: Any) -> None:
    """Shut a response's connection down: its reads end at once, and the engine sees the client go.

    Both ways, and with a zero linger, so that closing the socket later resets
    the connection: after a plain shutdown the engine, its writes stuck on a
    full window, would only see an end of input, and a server that waits for
    its writes before it closes (uvicorn under uvloop) never learns that its
    client has gone.
    """
    try:
        # A duplicate of the descriptor: the loop's own socket object may refuse shutdown()
        # (uvloop's), and options and shutdown act on the connection, whichever descriptor.
        with socket.fromfd(sock.fileno(), getattr(sock, "family", socket.AF_INET), socket.SOCK_STREAM) as dup:
            dup.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET_ON_CLOSE)
            dup.shutdown(socket.SHUT_RDWR)
    except OSError:  # already closed: the read ends by itself
        pass


_RESET_ON_CLOSE = struct.pack("ii", 1, 0)  # SO_LINGER on, zero seconds


def _idle_fault(t: Timeouts) -> _StreamFault:
    """The fault of a stream whose engine went silent for longer than ``t.idle``."""
    return _StreamFault("timeout", f"the upstream engine sent nothing for {t.idle:g} s")


_utf8_decoder = codecs.getincrementaldecoder("utf-8")


def _body_read(response: httpx.Response) -> Callable[[], Awaitable[bytes]]:
    """The response body's next bytes as they arrive, ``b""`` at the end (``aiter_raw``'s pieces, without its
    generator): for a body read once and then closed with ``response.aclose()``. On asyncio the body's own
    read (:data:`._h1.BODY_READ`), else a step of the response's byte stream."""
    read: Callable[[], Awaitable[bytes]] | None = response.extensions.get(BODY_READ)
    if read is not None:
        return read
    stream = response.stream
    if not isinstance(stream, httpx.AsyncByteStream):
        raise TypeError("an async client's response has an async byte stream")
    anext = stream.__aiter__().__anext__

    async def step() -> bytes:
        try:
            while not (data := await anext()):  # an empty piece is not the end
                pass
        except StopAsyncIteration:
            return b""
        return data

    return step


def _socket_of(response: httpx.Response) -> Any:
    """The response connection's socket (the ``network_stream`` extension, as httpcore and
    :class:`._h1.AutoTransport` give it), or None (another transport)."""
    stream = response.extensions.get("network_stream")
    get = getattr(stream, "get_extra_info", None)
    if get is None:
        return None
    try:
        return get("socket")
    except Exception:  # noqa: BLE001 - a transport without the info: the scope per wait instead
        return None


class HttpUpstream:
    """The base of the adapters: a pooled client, the streamed reader, health and close.

    Args:
        base_url: the engine's root URL (``http://host:port``, optionally
            with a path prefix).
        api_key: sent as ``Authorization: Bearer ...`` (never in errors).
        timeouts: the time limits (:class:`Timeouts`).
        client: an ``httpx.AsyncClient`` to use instead of a new one (it is
            not closed by :meth:`aclose`; the request timeouts still apply).
        retries: how many times a failure before the first byte is retried.
        retry_statuses: the HTTP statuses retried (before the first byte).
        retry_backoff: seconds to wait before a retry.
        max_connections: the pool size of the client this creates.
        headers: more headers for every request.

    Raises:
        ValueError: ``base_url`` is not an ``http``/``https`` URL, or a bad ``retries``.
    """

    kind: str = "http"
    constraint_forms: tuple[ConstraintForm, ...] = ()
    health_path: str = "/health"

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeouts: Timeouts | None = None,
        client: httpx.AsyncClient | None = None,
        retries: int = 1,
        retry_statuses: Collection[int] = DEFAULT_RETRY_STATUSES,
        retry_backoff: float = 0.1,
        max_connections: int = 100,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        url = httpx.URL(base_url)
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"base_url must be an http:// or https:// URL with a host (scheme {url.scheme!r})")
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.base_url = str(url.copy_with(query=None, fragment=None)).rstrip("/")
        self.timeouts = timeouts if timeouts is not None else Timeouts()
        self.retries = retries
        self.retry_statuses = frozenset(retry_statuses)
        self.retry_backoff = retry_backoff
        t = self.timeouts
        # read=None: the first-byte and idle limits are anyio deadlines around each wait.
        self._timeout = httpx.Timeout(connect=t.connect, read=None, write=t.write, pool=t.pool)
        hdrs = {"accept": "text/event-stream, application/x-ndjson, application/json"}
        hdrs.update(headers or {})
        if api_key:
            hdrs["authorization"] = f"Bearer {api_key}"
        self._headers = hdrs
        # Longest first, so the base URL is replaced before the host inside it.
        netloc, userinfo = url.netloc.decode("ascii", "replace"), url.userinfo.decode("ascii", "replace")
        candidates = {api_key or "", self.base_url, url.host, netloc, userinfo}
        self._secrets = tuple(sorted((s for s in candidates if len(s) >= 4), key=len, reverse=True))
        self._owns_client = client is None
        if client is not None:
            clients: tuple[httpx.AsyncClient, ...] = (client,)
        else:
            shards = max(1, -(-max_connections // POOL_SHARD))
            per = -(-max_connections // shards)
            limits = httpx.Limits(max_connections=per, max_keepalive_connections=per,
                                  keepalive_expiry=t.keepalive_expiry)
            # On asyncio every shard's transport uses one pool with the whole limit (see H1Pool)
            shared = H1Pool(httpx.Limits(max_connections=max_connections,
                                         max_keepalive_connections=max_connections,
                                         keepalive_expiry=t.keepalive_expiry))
            clients = tuple(
                _Client(
                    timeout=self._timeout,
                    trust_env=False,  # engines are reached directly; a proxy from the environment is never wanted
                    transport=AutoTransport(limits=limits, shared=shared),
                )
                for _ in range(shards)
            )
        self._clients = clients
        # url -> its parsed URL and the request headers (our own clients: see _post)
        self._prepared: dict[str, tuple[httpx.URL, httpx.Headers]] = {}
        self._json_headers = {**self._headers, "content-type": "application/json"}  # a streaming POST's own
        self._timeout_ext = self._timeout.as_dict()
        self._client = clients[0]  # plain requests (health, probes)
        self._busy = [0] * len(clients)  # the streams open on each client

    def _post(self, url: str, body: _SentBody) -> httpx.Request:
        """The streaming POST of ``body`` to ``url``, as ``build_request`` makes it for our own clients.

        The same URL, headers (the clients' defaults, ours, the JSON content
        type and the body's length), body and timeouts; the URL is parsed and
        the headers merged once per URL instead of at every request (a tenth
        of a millisecond of the first token's time). Our clients keep no
        cookies and add no parameters. The request holds ``body``, not its
        bytes: releasing it lets them go.
        """
        prepared = self._prepared.get(url)
        if prepared is None:
            target = httpx.URL(url)
            merged = httpx.Headers(self._clients[0].headers)
            merged.update(self._json_headers)
            # A request made with stream= gets no automatic headers: Host first, as httpx writes it.
            prepared = self._prepared[url] = (target, httpx.Headers([(b"Host", target.netloc), *merged.raw]))
        target, headers = prepared
        headers = headers.copy()
        headers["Content-Length"] = str(len(body))
        return httpx.Request("POST", target, stream=body, headers=headers,
                             extensions={"timeout": self._timeout_ext})

    # -- errors -------------------------------------------------------------------------------------------------

    def _scrub(self, message: str) -> str:
        for secret in self._secrets:
            if secret in message:
                message = message.replace(secret, "<upstream>")
        if len(message) > MAX_MESSAGE:
            message = message[:MAX_MESSAGE] + "..."
        return message

    def _error(self, fault: _StreamFault, yielded: bool) -> UpstreamError:
        return UpstreamError(
            fault.kind, self._scrub(fault.message), status=fault.status, before_first_byte=not yielded
        )

    def _transport_fault(self, exc: httpx.TransportError, *, answered: bool) -> _StreamFault:
        """Map an httpx transport failure (``answered``: response headers had arrived)."""
        if isinstance(exc, (httpx.ConnectTimeout, httpx.PoolTimeout)):
            what = "connecting to" if isinstance(exc, httpx.ConnectTimeout) else "a free connection to"
            return _StreamFault("timeout", f"timed out waiting for {what} the upstream engine",
                                retryable=isinstance(exc, httpx.ConnectTimeout))
        if isinstance(exc, httpx.TimeoutException):
            return _StreamFault("timeout", "the upstream engine did not answer in time")
        if isinstance(exc, httpx.ConnectError):
            return _StreamFault("connect", "could not connect to the upstream engine", retryable=True)
        if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
            if answered:
                return _StreamFault("closed", "the upstream engine closed the stream before its end")
            return _StreamFault("closed", "the upstream engine closed the connection without answering",
                                retryable=True)
        if isinstance(exc, httpx.UnsupportedProtocol):
            return _StreamFault("connect", "the upstream URL's protocol is not supported")
        return _StreamFault("connect", f"the upstream engine could not be reached ({type(exc).__name__})")

    async def _status_fault(self, response: httpx.Response, deadline: float | None) -> _StreamFault:
        """Read (a bounded part of) a non-2xx answer and find the engine's message."""
        code = response.status_code
        payload: Any = None
        reader = _Reader(response.aiter_bytes())
        buf = bytearray()
        try:
            with anyio.fail_after(_left(deadline)):
                while len(buf) < MAX_ERROR_BODY and (part := await reader.next()) is not None:
                    buf += part
            if _is_json(response) or bytes(buf[:1]) in (b"{", b"["):
                payload = msgspec.json.decode(bytes(buf))
        except (TimeoutError, httpx.HTTPError, msgspec.DecodeError):
            payload = None
        finally:
            await reader.abandon()
        message = error_message(payload) or self._generic(code)
        return _StreamFault("status", message, status=code, retryable=code in self.retry_statuses)

    @staticmethod
    def _generic(code: int) -> str:
        return f"the upstream engine answered with HTTP {code}"

    # -- streaming ----------------------------------------------------------------------------------------------

    def stream(
        self,
        path: str,
        body: Mapping[str, Any],
        new_decoder: Callable[[], EventDecoder],
        *,
        ndjson: bool = False,
    ) -> AsyncGenerator[TokenChunk, None]:
        """POST ``body`` to ``path`` and stream the decoded chunks.

        The body is encoded now (so a bad body fails at the call, not at the
        first iteration). Close the returned generator to stop early: that
        closes the HTTP response.

        Args:
            path: the endpoint, appended to ``base_url``.
            body: the JSON body.
            new_decoder: makes the decoder of one attempt.
            ndjson: the answer is NDJSON lines (Ollama) instead of SSE.

        Raises:
            UpstreamError: when iterated (see the module docstring).
        """
        content = msgspec.json.encode(body)
        return self._stream(self.base_url + path, content, new_decoder, ndjson)

    async def _stream(
        self, url: str, content: bytes, new_decoder: Callable[[], EventDecoder], ndjson: bool
    ) -> AsyncGenerator[TokenChunk, None]:
        attempt = 0
        yielded = False
        headers = self._json_headers
        t = self.timeouts
        while True:
            decoder = new_decoder()
            try:
                deadline = None if t.first_byte is None else loop_time() + t.first_byte
                busy = self._busy
                shard = busy.index(min(busy)) if len(busy) > 1 else 0
                client = self._clients[shard]
                sent = _SentBody(content)
                request = (self._post(url, sent) if self._owns_client else
                           client.build_request("POST", url, content=content, headers=headers, timeout=self._timeout))
                busy[shard] += 1
                try:
                    # anyio.fail_after, without its backend lookups (see deltaflow.pipeline.companion)
                    with cancel_scope(deadline=math.inf if deadline is None else deadline) as sending:
                        response = await client.send(request, stream=True)
                    if sending.cancelled_caught:
                        raise TimeoutError
                    del sending  # an exited scope, and its sets, are not kept while the answer streams
                except BaseException as exc:
                    busy[shard] -= 1
                    if isinstance(exc, TimeoutError):
                        raise _StreamFault("timeout", f"the upstream engine did not answer within"
                                           f" {t.first_byte:g} s") from exc
                    if isinstance(exc, httpx.TransportError):
                        raise self._transport_fault(exc, answered=False) from exc
                    raise
                try:
                    if not response.is_success:
                        raise await self._status_fault(response, deadline)
                    ctype = response.headers.get("content-type", "")
                    if not ndjson and "text/event-stream" not in ctype:
                        fault = await self._status_fault(response, deadline)
                        said = fault.message if fault.message != self._generic(response.status_code) else ctype
                        raise _StreamFault("protocol", f"the upstream engine did not answer with an event stream"
                                           f" ({said or 'no content type'})", status=response.status_code)
                    got_event = False
                    # An event stream is UTF-8 whatever its header says (the SSE standard), and so is
                    # NDJSON (JSON's); saying so spares httpx parsing the content type with the email
                    # package, once per answer.
                    response.encoding = "utf-8"
                    reader: _Reader[Any] | _SSEData = (_Reader(response.aiter_lines(), "ndjson") if ndjson else
                                            _SSEData(_body_read(response)))
                    sock = _socket_of(response)
                    watch = _IdleWatch(t.idle, sock)
                    scopeless = watch.scopeless
                    scope: anyio.CancelScope | None = None
                    try:
                        while True:
                            # Events already read (several arrive in one read at full speed) are taken
                            # without a wait, so without the watch or a scope.
                            data = reader.buffered()
                            if data is None:
                                # Until the first event, one scope with the first-byte deadline per wait
                                # (a couple per stream); then the idle watch (see _IdleWatch): no scope
                                # at all where it can shut the socket down, else a deadline-free scope per
                                # wait. Only the wait is inside a scope: the chunks are yielded outside it.
                                try:
                                    if got_event and scopeless:
                                        watch.enter()
                                        data = await reader.next()
                                    else:
                                        scope = watch.open() if got_event else cancel_scope(
                                            deadline=math.inf if deadline is None else deadline)
                                        with scope:
                                            data = await reader.next()
                                except httpx.TransportError as exc:
                                    if decoder.done:
                                        break
                                    if watch.tripped:
                                        raise _idle_fault(t) from exc
                                    fault = self._transport_fault(exc, answered=True)
                                    fault.retryable = fault.retryable or (fault.kind == "closed" and not got_event)
                                    raise fault from exc
                                finally:
                                    watch.close()
                                if scope is not None and scope.cancelled_caught:
                                    if decoder.done:
                                        break
                                    if got_event:
                                        raise _idle_fault(t)
                                    raise _StreamFault("timeout", f"the upstream engine sent no event within"
                                                       f" {t.first_byte:g} s")
                                if data is None:
                                    if watch.tripped and not decoder.done:  # a read-until-close body ended
                                        raise _idle_fault(t)
                                    break
                                scope = None
                            got_event = True
                            for chunk in decoder.feed(data):
                                if not yielded:
                                    # No retry after the first chunk: the body is let go (see _SentBody).
                                    yielded = True
                                    sent.release()
                                    content = b""
                                yield chunk
                    finally:
                        watch.cancel()
                        await reader.abandon(sock)
                    for chunk in decoder.finish():
                        yielded = True
                        yield chunk
                    return
                finally:
                    busy[shard] -= 1
                    with cancel_scope(deadline=loop_time() + 5, shield=True):
                        await response.aclose()
            except _StreamFault as fault:
                if not yielded and fault.retryable and attempt < self.retries:
                    attempt += 1
                    if self.retry_backoff > 0:
                        await anyio.sleep(self.retry_backoff * attempt)
                    continue
                raise self._error(fault, yielded) from (fault.__cause__ or fault)

    def generate(self, request: UpstreamRequest) -> AsyncGenerator[TokenChunk, None]:
        """Stream one generation (each adapter implements it with :meth:`stream`)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement generate()")

    # -- plain requests -----------------------------------------------------------------------------------------

    async def request_json(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        """One non-streamed JSON request (probes, tokenize), within ``first_byte``.

        Raises:
            UpstreamError: as for :meth:`stream` (``protocol`` when the answer is not JSON).
        """
        t = self.timeouts
        headers = dict(self._headers)
        content = None
        if body is not None:
            headers["content-type"] = "application/json"
            content = msgspec.json.encode(body)
        deadline = None if t.first_byte is None else anyio.current_time() + t.first_byte
        try:
            try:
                with anyio.fail_after(_left(deadline)):
                    response = await self._client.request(method, self.base_url + path, content=content,
                                                          headers=headers, timeout=self._timeout)
            except TimeoutError as exc:
                raise _StreamFault("timeout", f"the upstream engine did not answer within {t.first_byte:g} s") from exc
            except httpx.TransportError as exc:
                raise self._transport_fault(exc, answered=False) from exc
            if not response.is_success:
                payload: Any = None
                try:
                    payload = response.json()
                except ValueError:
                    pass
                raise _StreamFault("status", error_message(payload) or
                                   f"the upstream engine answered with HTTP {response.status_code}",
                                  status=response.status_code)
            try:
                return msgspec.json.decode(response.content)
            except msgspec.DecodeError as exc:
                raise _StreamFault("protocol", "the upstream engine's answer is not JSON") from exc
        except _StreamFault as fault:
            raise self._error(fault, False) from (fault.__cause__ or fault)

    def _healthy(self, response: httpx.Response) -> bool:
        return response.is_success

    async def health(self) -> bool:
        """Whether the engine answers its health endpoint (``health_path``) with a 2xx now."""
        try:
            with anyio.fail_after(self.timeouts.health):
                response = await self._client.get(self.base_url + self.health_path, headers=self._headers,
                                                  timeout=self._timeout)
                await response.aread()
        except (TimeoutError, httpx.HTTPError, OSError):
            return False
        return self._healthy(response)

    async def aclose(self) -> None:
        """Close the pooled connections (a client passed in is left open)."""
        if self._owns_client:
            for client in self._clients:
                await client.aclose()

    async def __aenter__(self: UpstreamT) -> UpstreamT:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(kind={self.kind!r})"

