"""The upstream's HTTP/1.1 under httpx: a small client on asyncio's protocols and httptools' parser.

The gateway reads every engine answer through ``httpx`` and ``httpx_sse``'s
decoders. httpx's own transport (httpcore over h11) parses HTTP in Python,
and an engine sends each token as its own chunk of a chunked body (llama.cpp,
vLLM, SGLang alike): with a hundred streams that parsing, not deltaflow, was
the largest share of the gateway's time (issue 19, measured). This module's
transport parses with httptools (llhttp, in C: the parser uvicorn already
runs for the gateway's own clients) inside an :class:`asyncio.Protocol`, and
hands over whatever body bytes arrived in one read. It replaced an aiohttp
transport that did the same: aiohttp's request, response, reader and timer
objects cost about 12 KB per open stream, most of an idle stream's memory
that was not the server's (measured with tracemalloc at 1,000 streams).

What it does, and only that (an engine's API is plain HTTP/1.1):

* one request at a time per connection (no pipelining), its body sent whole
  with a ``Content-Length``; ``HEAD`` is refused (its answer's framing would
  need the request's method);
* a pool of keep-alive connections per host shared by every transport made
  with the same :class:`H1Pool`: an idle connection is reused last-in
  first-out, dropped after ``keepalive_expiry`` or when the server closes it,
  and a request waits (up to the pool timeout) when ``max_connections`` are
  open;
* a connection goes back to the pool as soon as the whole answer has
  arrived, before its body has been read; one left unfinished is closed,
  which tells the engine that the client went away;
* httpx's ``connect``, ``read``, ``write`` and ``pool`` timeouts;
* its failures are httpx's exception classes, by what happened (refused,
  timed out, dropped before or during the answer, malformed), with messages
  written here that never carry the URL.

:class:`AutoTransport` chooses per event loop, at its first request: this
client on asyncio (uvloop included) where httptools is installed, httpx's own
transport anywhere else (trio, or no httptools). The answer's socket is
exposed as httpx's ``network_stream`` extension (``get_extra_info("socket")``),
as httpcore does, so the idle watch of :mod:`._http` can stop a silent stream
by shutting its socket down; the body's read is exposed as :data:`BODY_READ`.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx

try:
    import httptools
except ImportError:  # pragma: no cover - CPython installs it with the server extra
    httptools = None  # type: ignore[assignment]

__all__ = ("BODY_READ", "AutoTransport", "H1Pool")

BODY_READ = "deltaflow.body_read"
"""The response extension holding the body's ``read()`` (``b""`` at the end): for a reader that reads
the body once, without httpx's stream generator around it, and closes the response after."""

_HIGH_WATER = 256 * 1024
"""Body bytes buffered unread before the connection stops reading from its socket (resumed when read)."""

_Key = tuple[str, str, int]  # scheme, host, port


class _Answer(httpx.AsyncByteStream):
    """One answer's body as it arrives; also its ``network_stream`` extension and the socket that gives.

    The connection feeds it (:meth:`_feed`, :meth:`_end`, :meth:`_fail`) and
    lets go of it when the whole answer has arrived or the connection is lost.

    The socket (``get_extra_info("socket")``) is the answer itself: ``fileno()``
    and ``family`` are its connection's socket's for as long as the connection
    carries this answer, and a closed socket's (``fileno()`` -1) from the
    moment it lets go. A connection goes back to the pool as soon as the whole
    answer has arrived, often before it has been read, and may carry another
    answer by the time this one is abandoned: shutting down a socket taken
    earlier would then cut that other answer. The idle watch and the reader's
    abandon of :mod:`._http` shut down what this gives, which is nothing once
    the answer is whole (no read of it waits).
    """

    __slots__ = ("_chunks", "_conn", "_done", "_error", "_read_timeout", "_size", "_waiter", "head")

    def __init__(self, conn: _Connection, read_timeout: float | None) -> None:
        self._conn: _Connection | None = conn
        self._chunks: list[bytes] = []
        self._size = 0
        self._waiter: asyncio.Future[None] | None = None
        self._done = False
        self._error: Exception | None = None
        self._read_timeout = read_timeout
        self.head: tuple[int, bytes, list[tuple[bytes, bytes]]] | None = None
        """The status, reason phrase and headers, once they have arrived."""

    # -- fed by the connection

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _feed(self, data: bytes) -> None:
        self._chunks.append(data)
        self._size += len(data)
        if self._size > _HIGH_WATER and self._conn is not None:
            self._conn.pause()
        self._wake()

    def _end(self) -> None:
        self._done = True
        self._conn = None
        self._wake()

    def _fail(self, error: Exception) -> None:
        if not self._done:
            self._error = error
            self._conn = None
            self._wake()

    # -- read by httpx and the gateway

    async def _wait(self, what: str) -> None:
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timeout, timer = self._read_timeout, None
        if timeout is not None:
            timer = loop.call_later(timeout, _expire, waiter, what)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    async def read(self) -> bytes:
        """What has arrived of the body since the last read (waiting for some); ``b""`` at its end.

        The body without a generator around it: the gateway's SSE reader takes
        this (the :data:`BODY_READ` extension) instead of iterating the response.

        Raises:
            httpx.ReadTimeout: nothing arrived within the read timeout.
            httpx.RemoteProtocolError: the connection was lost before the
                body's end, or the answer was malformed.
        """
        while True:
            chunks = self._chunks
            if chunks:
                data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                self._chunks = []
                if self._size > _HIGH_WATER and self._conn is not None:
                    self._conn.resume()
                self._size = 0
                return data
            if self._error is not None:
                raise self._error
            if self._done:
                return b""
            await self._wait("reading")

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = self.read
        while data := await read():
            yield data

    async def aclose(self) -> None:
        """Let the answer go: a body that has not arrived whole closes its connection (the engine sees it)."""
        conn, self._conn = self._conn, None
        self._done = True
        self._chunks = []
        if conn is not None:
            conn.close()

    def get_extra_info(self, info: str) -> Any:
        """httpx's ``network_stream`` extension: the connection's transport info while it carries this answer
        (``"socket"``: the answer itself, a view of its connection's socket; see the class docstring)."""
        if info == "socket":
            return self
        conn = self._conn
        if conn is None or conn.transport is None:
            return None
        return conn.transport.get_extra_info(info)

    def _socket(self) -> Any:
        conn = self._conn
        return None if conn is None or conn.transport is None else conn.transport.get_extra_info("socket")

    def fileno(self) -> int:
        """The connection's socket's descriptor while it carries this answer, else -1 (a closed socket)."""
        sock = self._socket()
        return -1 if sock is None else int(sock.fileno())

    @property
    def family(self) -> int:
        """The connection's socket's address family (``AF_INET`` once the connection has let go)."""
        sock = self._socket()
        return socket.AF_INET if sock is None else int(sock.family)


def _expire(waiter: asyncio.Future[None], what: str) -> None:
    if not waiter.done():
        waiter.set_exception(httpx.ReadTimeout(f"timed out {what}"))


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection of an :class:`H1Pool`: parses what arrives into the current answer."""

    __slots__ = (
        "_drain", "_parser", "_pool", "answer", "headers", "idle_since", "key", "keep_alive", "reason",
        "status", "transport",
    )

    def __init__(self, pool: H1Pool, key: _Key) -> None:
        self._pool: H1Pool | None = pool
        self.key = key
        self.transport: asyncio.Transport | None = None
        self._parser: Any = httptools.HttpResponseParser(self)
        self.answer: _Answer | None = None
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.keep_alive = True
        self.idle_since = 0.0
        self._drain: asyncio.Future[None] | None = None  # a write waiting for the socket's buffer to empty

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass, but is one

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except Exception:  # noqa: BLE001 - httptools' parse errors, or an answer nobody asked for
            self._lost(httpx.RemoteProtocolError("the upstream's answer was malformed"))
            self.close()

    def eof_received(self) -> bool | None:
        return False  # close the transport: one side closing ends the connection

    def connection_lost(self, exc: Exception | None) -> None:
        answer = self.answer
        if (answer is not None and answer.head is not None and exc is None and not self.keep_alive
                and not self._framed()):
            self.on_message_complete()  # a body that ends where its connection ends (no length, not chunked)
        elif answer is not None:
            what = "the server closed without answering" if answer.head is None else "the body ended early"
            self._lost(httpx.RemoteProtocolError(what))
        self.transport = None
        drain, self._drain = self._drain, None
        if drain is not None and not drain.done():
            drain.set_exception(httpx.WriteError("the connection was lost while sending"))
        pool, self._pool = self._pool, None
        if pool is not None:
            pool._forget(self)
        self._parser = None  # the parser holds this protocol's methods: let the two go together

    def pause_writing(self) -> None:
        if self._drain is None:
            self._drain = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        drain, self._drain = self._drain, None
        if drain is not None and not drain.done():
            drain.set_result(None)

    # -- httptools' callbacks

    def on_message_begin(self) -> None:
        if self.answer is None:
            raise RuntimeError("an answer nobody asked for")
        self.status, self.reason, self.headers = 0, b"", []

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (none is asked for): the real one follows
            self.headers = []
            return
        self.status = status
        self.keep_alive = self._parser.should_keep_alive()
        answer = self.answer
        if answer is not None:
            answer.head = (status, self.reason, self.headers)
            answer._wake()

    def on_body(self, body: bytes) -> None:
        answer = self.answer
        if answer is not None:
            answer._feed(body)

    def on_message_complete(self) -> None:
        answer, self.answer = self.answer, None
        if answer is None or answer.head is None:  # an interim answer's end, or one nobody waits for
            self.answer = answer
            return
        answer._end()
        pool = self._pool
        if self.keep_alive and pool is not None and self.transport is not None:
            self.resume()
            pool._release(self)
        else:
            self.close()

    # -- used by the pool and the answer

    def _framed(self) -> bool:
        """Whether the answer's headers say where its body ends (a length, chunks, or no body)."""
        if self.status in (204, 304):
            return True
        for name, value in self.headers:
            lowered = name.lower()
            if lowered == b"content-length" or (lowered == b"transfer-encoding" and b"chunked" in value.lower()):
                return True
        return False

    def _lost(self, error: Exception) -> None:
        answer, self.answer = self.answer, None
        if answer is not None:
            answer._fail(error)

    def pause(self) -> None:
        if self.transport is not None:
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.transport is not None and not self.transport.is_reading():
            self.transport.resume_reading()

    def close(self) -> None:
        """Close the connection (its answer, if any, fails; the pool forgets it at once)."""
        self._lost(httpx.ReadError("the connection was closed"))
        pool, self._pool = self._pool, None
        if pool is not None:
            pool._forget(self)
        if self.transport is not None:
            self.transport.close()

    async def send(self, data: bytes, write_timeout: float | None) -> None:
        """Write a request (waiting, up to ``write_timeout``, while the socket's buffer is full)."""
        transport = self.transport
        if transport is None or transport.is_closing():
            raise httpx.RemoteProtocolError("the server closed without answering")
        transport.write(data)
        drain = self._drain
        if drain is not None:
            try:
                await asyncio.wait_for(asyncio.shield(drain), write_timeout)
            except asyncio.TimeoutError:
                raise httpx.WriteTimeout("timed out sending") from None


class H1Pool:
    """The keep-alive connections of one or more :class:`AutoTransport` objects on asyncio.

    An upstream splits its connections over several httpx clients for
    httpcore's sake (see ``_http.POOL_SHARD``); this pool has no cost to
    split, so the clients' transports share one, with the whole limit.

    Args:
        limits: the pool's size (``max_connections``; None: no limit) and
            keep-alive expiry (seconds an idle connection is kept; None: 15).
            ``max_keepalive_connections`` is not used: every idle connection
            is kept until it expires or the server closes it.
        ssl_context: for ``https`` upstreams (by default, as httpx's: certifi's CA bundle).
    """

    __slots__ = ("_closed", "_expiry", "_idle", "_max", "_open", "_ssl", "_waiters")

    def __init__(self, limits: httpx.Limits, ssl_context: ssl.SSLContext | None = None) -> None:
        self._max = limits.max_connections
        self._expiry = limits.keepalive_expiry if limits.keepalive_expiry is not None else 15.0
        self._ssl = ssl_context
        self._idle: dict[_Key, list[_Connection]] = {}
        self._open: set[_Connection] = set()
        self._waiters: list[asyncio.Future[None]] = []
        self._closed = False

    @property
    def open_connections(self) -> int:
        """How many connections are open (idle in the pool or carrying an answer)."""
        return len(self._open)

    def _release(self, conn: _Connection) -> None:
        if self._closed:
            conn.close()
            return
        conn.idle_since = asyncio.get_running_loop().time()
        self._idle.setdefault(conn.key, []).append(conn)
        self._wake_one()

    def _forget(self, conn: _Connection) -> None:
        self._open.discard(conn)
        idle = self._idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)
        self._wake_one()

    def _wake_one(self) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)
                return

    def _reuse(self, key: _Key, now: float) -> _Connection | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            transport = conn.transport
            if transport is not None and not transport.is_closing() and now - conn.idle_since < self._expiry:
                return conn
            conn.close()
        return None

    def _make_room(self) -> bool:
        """Whether a new connection may be opened (closing an idle one of another host if that makes room)."""
        if self._max is None or len(self._open) < self._max:
            return True
        for idle in self._idle.values():
            if idle:
                idle.pop(0).close()
                return True
        return False

    async def acquire(self, key: _Key, timeouts: dict[str, float | None]) -> _Connection:
        """A connection to ``key``: an idle one, a new one, or (when the pool is full) the next freed."""
        if self._closed:
            raise httpx.ConnectError("the connection pool is closed")
        loop = asyncio.get_running_loop()
        deadline = None if timeouts.get("pool") is None else loop.time() + timeouts["pool"]  # type: ignore[operator]
        while True:
            conn = self._reuse(key, loop.time())
            if conn is not None:
                return conn
            if self._make_room():
                return await self._connect(key, timeouts.get("connect"))
            waiter = loop.create_future()
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, None if deadline is None else max(0.0, deadline - loop.time()))
            except BaseException as exc:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                elif waiter.done() and not waiter.cancelled():
                    self._wake_one()  # woken, but leaving (timed out or cancelled at once): the next one goes
                if isinstance(exc, asyncio.TimeoutError):
                    raise httpx.PoolTimeout("timed out waiting for a free connection") from None
                raise

    async def _connect(self, key: _Key, timeout: float | None) -> _Connection:
        scheme, host, port = key
        context: ssl.SSLContext | None = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = _default_ssl_context()
            context = self._ssl
        conn = _Connection(self, key)
        self._open.add(conn)  # counted while it connects
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: conn, host, port, ssl=context,
                                       server_hostname=host if context is not None else None),
                timeout,
            )
        except asyncio.TimeoutError:
            self._forget(conn)
            raise httpx.ConnectTimeout("timed out connecting") from None
        except (OSError, ssl.SSLError):
            self._forget(conn)
            raise httpx.ConnectError("could not connect") from None
        except BaseException:
            self._forget(conn)
            raise
        return conn

    async def aclose(self) -> None:
        """Close every connection (answers still arriving fail); later requests fail to connect."""
        self._closed = True
        for conn in list(self._open):
            conn.close()
        self._idle.clear()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)


def _default_ssl_context() -> ssl.SSLContext:
    """What httpx verifies with by default: certifi's CA bundle (an httpx dependency), else the system's."""
    try:
        import certifi
    except ImportError:  # pragma: no cover - httpx installs it
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())


_METHODS_WITH_BODY = frozenset((b"POST", b"PUT", b"PATCH"))
_DROPPED = frozenset((b"content-length", b"transfer-encoding"))


def _head_of(request: httpx.Request, length: int) -> bytes:
    """The request line and headers as sent (a ``Content-Length`` of our own; keep-alive is HTTP/1.1's default)."""
    method = request.method.encode("ascii")
    lines = [b"%s %s HTTP/1.1\r\n" % (method, request.url.raw_path)]
    lines.extend(b"%s: %s\r\n" % (name, value) for name, value in request.headers.raw
                 if name.lower() not in _DROPPED)
    if length or method in _METHODS_WITH_BODY:
        lines.append(b"Content-Length: %d\r\n" % length)
    lines.append(b"\r\n")
    return b"".join(lines)


async def _body_of(request: httpx.Request) -> bytes:
    # The body's parts, read without httpx keeping a copy in the request (the gateway lets a body go
    # once its answer has started: see _http._SentBody).
    stream = request.stream
    if isinstance(stream, httpx.AsyncByteStream):
        return b"".join([part async for part in stream])
    return b"".join(stream)


class AutoTransport(httpx.AsyncBaseTransport):
    """This module's client on asyncio, httpx's own transport elsewhere, chosen at the first request.

    Args:
        limits: the pool's size and keep-alive expiry (as for httpx): on trio, and on asyncio
            without ``shared``.
        shared: the pool to use on asyncio, shared with other transports (closing any of them
            closes it).
    """

    def __init__(self, *, limits: httpx.Limits, shared: H1Pool | None = None) -> None:
        self._limits = limits
        self._pool: H1Pool | None = None
        self._shared = shared
        self._fallback: httpx.AsyncHTTPTransport | None = None

    @property
    def backend(self) -> str | None:
        """Which transport serves the requests: ``"h1"``, ``"httpx"``, or None before the first."""
        if self._pool is not None:
            return "h1"
        return None if self._fallback is None else "httpx"

    def _choose(self) -> None:
        try:
            asyncio.get_running_loop()
            on_asyncio = httptools is not None
        except RuntimeError:  # trio
            on_asyncio = False
        if on_asyncio:
            self._pool = self._shared if self._shared is not None else H1Pool(self._limits)
        else:
            self._fallback = httpx.AsyncHTTPTransport(limits=self._limits, trust_env=False)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` and return its answer with the body still to read."""
        if self._pool is None and self._fallback is None:
            self._choose()
        if self._fallback is not None:
            return await self._fallback.handle_async_request(request)
        pool = self._pool
        assert pool is not None
        url = request.url
        scheme = url.scheme
        if scheme not in ("http", "https") or not url.host:
            raise httpx.UnsupportedProtocol("the URL is not an http:// or https:// URL", request=request)
        if request.method == "HEAD":
            raise httpx.UnsupportedProtocol("HEAD requests are not supported by this transport", request=request)
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        body = await _body_of(request)
        data = _head_of(request, len(body)) + body
        key = (scheme, url.host, url.port or (443 if scheme == "https" else 80))
        try:
            conn = await pool.acquire(key, timeouts)
        except httpx.TransportError as exc:
            exc.request = request
            raise
        answer = conn.answer = _Answer(conn, timeouts.get("read"))
        try:
            await conn.send(data, timeouts.get("write"))
            while (head := answer.head) is None:
                if answer._error is not None:
                    raise answer._error
                await answer._wait("waiting for the answer")
        except BaseException as exc:
            conn.close()  # failed or cancelled while asking: the connection is in an unknown state
            if isinstance(exc, httpx.TransportError):
                exc.request = request
            raise
        status, reason, headers = head
        extensions: dict[str, Any] = {
            "http_version": b"HTTP/1.1", "network_stream": answer, BODY_READ: answer.read, "reason_phrase": reason,
        }
        return httpx.Response(status_code=status, headers=headers, stream=answer, request=request,
                              extensions=extensions)

    async def aclose(self) -> None:
        """Close the pool."""
        pool, fallback = self._pool, self._fallback
        self._pool = self._fallback = None
        if pool is not None:
            await pool.aclose()
        if fallback is not None:
            await fallback.aclose()
