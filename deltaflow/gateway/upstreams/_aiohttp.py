"""An httpx transport over aiohttp's client: the upstream's HTTP/1.1 in C on asyncio.

The gateway reads every engine answer through ``httpx`` and ``httpx_sse``.
httpx's own transport (httpcore over h11) parses HTTP in Python, and an
engine sends each token as its own chunk of a chunked body (llama.cpp, vLLM,
SGLang alike): with a hundred streams that parsing, not deltaflow, was the
largest share of the gateway's time (issue 19, measured). aiohttp parses HTTP
in C (llhttp) and hands over whatever bytes arrived in one read; this module
puts it under httpx, so everything above the transport (httpx's decoding,
``httpx_sse``'s event parsing, the adapters) is unchanged.

:class:`AutoTransport` chooses per event loop, at its first request: aiohttp
on asyncio (uvloop included), httpx's own transport anywhere else (trio),
where aiohttp does not run. The answer's socket is exposed as httpx's
``network_stream`` extension (``get_extra_info("socket")``), as httpcore
does, so the idle watch of :mod:`._http` can stop a silent stream by shutting
its socket down.

aiohttp's failures are mapped onto httpx's exception classes by what
happened (refused, timed out, dropped before or during the answer), so the
error mapping of :mod:`._http` is the same for both transports; the messages
are written here and never carry the URL.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx

__all__ = ("BODY_READ", "AutoTransport", "SharedSession")

BODY_READ = "deltaflow.body_read"
"""The response extension holding the body's ``read()`` (``b""`` at the end) on aiohttp: for a reader
that reads the body once, without httpx's stream generator around it, and closes the response after."""


def _mapped(exc: Exception, request: httpx.Request, *, answered: bool) -> httpx.TransportError:
    """The httpx exception for one of aiohttp's (``answered``: the response headers had arrived)."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout("timed out connecting", request=request)
    if isinstance(exc, (aiohttp.ServerTimeoutError, asyncio.TimeoutError)):
        return httpx.ReadTimeout("timed out reading", request=request)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError("could not connect", request=request)
    if isinstance(exc, (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError)):
        return httpx.UnsupportedProtocol("the URL is not an http:// or https:// URL", request=request)
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientResponseError)):
        what = "the body ended early or was malformed" if answered else "the server closed without answering"
        return httpx.RemoteProtocolError(what, request=request)
    if isinstance(exc, (aiohttp.ClientOSError, aiohttp.ClientConnectionError, OSError)):
        return httpx.ReadError("the connection failed", request=request)
    return httpx.TransportError(f"the request failed ({type(exc).__name__})", request=request)


class _Detached:
    """The "socket" of an answer whose connection has gone back to the pool or closed: a closed socket.

    aiohttp lets go of the connection as soon as the whole body has arrived,
    which at full speed is often before the answer is handed over. No read of
    such a body waits, so the idle watch never acts on it; what it sees is a
    socket that is already closed (``fileno()`` is -1, a shutdown fails)
    rather than none, which would cost it a cancel scope per event.
    """

    __slots__ = ()
    family = socket.AF_INET

    def fileno(self) -> int:
        return -1


_DETACHED = _Detached()


class _Network:
    """httpx's ``network_stream`` extension for an aiohttp answer: only ``get_extra_info``."""

    __slots__ = ("_response",)

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    def get_extra_info(self, info: str) -> Any:
        connection = self._response.connection
        transport = None if connection is None else connection.transport
        if transport is None:
            return _DETACHED if info == "socket" else None
        return transport.get_extra_info(info)


class _Body(httpx.AsyncByteStream):
    """An aiohttp answer's body as httpx reads it: each read returns what has arrived."""

    __slots__ = ("_request", "_response")

    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def read(self) -> bytes:
        """What has arrived of the body since the last read (waiting for some); ``b""`` at its end.

        The body without a generator around it: the gateway's SSE reader takes this (the
        :data:`BODY_READ` extension) instead of iterating the response.
        """
        try:
            return await self._response.content.readany()
        except Exception as exc:
            if isinstance(exc, (aiohttp.ClientError, OSError, asyncio.TimeoutError)):
                raise _mapped(exc, self._request, answered=True) from exc
            raise

    async def _chunks(self) -> AsyncIterator[bytes]:
        read = self.read
        while data := await read():
            yield data

    async def aclose(self) -> None:
        # A body read to its end has already given its connection back to the pool; one left
        # unfinished closes the connection (the engine sees the client leave and stops).
        response = self._response
        if response.content.is_eof():
            response.release()
        else:
            response.close()


class SharedSession:
    """One aiohttp session (and connection pool) for several :class:`AutoTransport` objects on asyncio.

    An upstream splits its connections over several httpx clients for httpcore's sake (see
    ``_http.POOL_SHARD``); aiohttp's pool has no cost to split, and a session per client costs each
    client its own session, connector and their tables (about 6 KB each: 0.8 KB per open stream when
    a thousand streams spread over 128 clients). The clients' transports share this one instead, with the
    whole limit.

    Args:
        limits: the shared pool's size and keep-alive expiry (as for httpx).
    """

    __slots__ = ("_limits", "_session")

    def __init__(self, limits: httpx.Limits) -> None:
        self._limits = limits
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        """The session, made at the first call (inside the running asyncio loop)."""
        if self._session is None:
            limits = self._limits
            connector = aiohttp.TCPConnector(
                limit=limits.max_connections or 0,
                keepalive_timeout=limits.keepalive_expiry if limits.keepalive_expiry is not None else 15.0,
            )
            self._session = aiohttp.ClientSession(
                connector=connector, auto_decompress=False, trust_env=False, raise_for_status=False,
                timeout=aiohttp.ClientTimeout(total=None),
            )
        return self._session

    async def aclose(self) -> None:
        """Close the session (a no-op when it is closed or was never made)."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()


class AutoTransport(httpx.AsyncBaseTransport):
    """aiohttp's client on asyncio, httpx's own transport elsewhere, chosen at the first request.

    Args:
        limits: the pool's size and keep-alive expiry (as for httpx): on trio, and on asyncio
            without ``shared``.
        shared: the aiohttp session to use on asyncio, shared with other transports (closing any
            of them closes it).
    """

    def __init__(self, *, limits: httpx.Limits, shared: SharedSession | None = None) -> None:
        self._limits = limits
        self._shared = shared
        self._session: aiohttp.ClientSession | None = None
        self._fallback: httpx.AsyncHTTPTransport | None = None

    @property
    def backend(self) -> str | None:
        """Which transport serves the requests: ``"aiohttp"``, ``"httpx"``, or None before the first."""
        if self._session is not None:
            return "aiohttp"
        return None if self._fallback is None else "httpx"

    def _choose(self) -> None:
        try:
            asyncio.get_running_loop()
            on_asyncio = True
        except RuntimeError:  # trio
            on_asyncio = False
        if on_asyncio:
            if self._shared is None:
                self._shared = SharedSession(self._limits)
            self._session = self._shared.session()
        else:
            self._fallback = httpx.AsyncHTTPTransport(limits=self._limits, trust_env=False)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` and return its answer with the body still to read."""
        if self._session is None and self._fallback is None:
            self._choose()
        if self._fallback is not None:
            return await self._fallback.handle_async_request(request)
        session = self._session
        assert session is not None
        limits: dict[str, float | None] = request.extensions.get("timeout", {})
        connect, pool = limits.get("connect"), limits.get("pool")
        timeout = aiohttp.ClientTimeout(
            total=None,
            sock_connect=connect,
            # aiohttp's "connect" is the wait for a pooled connection plus the connecting
            connect=None if pool is None else pool + (connect or 0.0),
            sock_read=limits.get("read"),
        )
        # The body's framing is aiohttp's to set: the gateway's bodies are bytes already, a stream is read whole.
        headers = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in request.headers.raw
            if k.lower() not in (b"content-length", b"transfer-encoding")
        ]
        # The body's parts, read without httpx keeping a copy in the request (the gateway lets a body go
        # once its answer has started: see _http._SentBody).
        stream = request.stream
        if isinstance(stream, httpx.AsyncByteStream):
            data = b"".join([part async for part in stream]) or None
        else:
            data = b"".join(stream) or None
        url = request.url
        if url.userinfo:  # httpx has turned it into the Authorization header; aiohttp refuses both at once
            url = url.copy_with(userinfo=b"")
        try:
            response = await session.request(
                request.method, str(url), headers=headers, data=data, allow_redirects=False,
                timeout=timeout,
            )
        except Exception as exc:  # aiohttp's, or a request it refuses (ValueError): an httpx error either way
            raise _mapped(exc, request, answered=False) from exc
        body = _Body(response, request)
        extensions: dict[str, Any] = {
            "http_version": b"HTTP/1.1", "network_stream": _Network(response), BODY_READ: body.read,
        }
        if response.reason:
            extensions["reason_phrase"] = response.reason.encode("latin-1", "replace")
        return httpx.Response(
            status_code=response.status, headers=response.raw_headers, stream=body,
            request=request, extensions=extensions,
        )

    async def aclose(self) -> None:
        """Close the pool."""
        session, fallback = self._session, self._fallback
        self._session = self._fallback = None
        if session is not None and self._shared is not None:
            await self._shared.aclose()
        if fallback is not None:
            await fallback.aclose()
