"""A stream whose client has gone stops at once, even while its engine writes as fast as it can.

Two parts, each against a real loopback socket, on asyncio, uvloop (where installed) and trio:

* the upstream reader (``_Reader.abandon`` with the response's socket): it stops after what is
  already buffered, and the engine's next writes fail (the connection is reset, not half-closed);
* the SSE response's body writer: once its watcher has seen ``http.disconnect``, a write raises
  instead of going to a server that drops it without a word.

Why these need more than a cancellation: under uvloop, socket reads are answered before the callbacks
the loop already holds, so a task whose every wait is a read that has its data by then is not cancelled
(anyio skips a task whose wait is done, and tries again later) until a wait finds nothing. An engine that
never pauses never lets that happen: the gateway read a 128 MB flood to its end after its client left
(``tests/integration/server/test_gateway_backpressure.py`` is the whole path).
"""

from __future__ import annotations

import importlib.util
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import httpx
import httpx_sse
import pytest
from anyio.abc import SocketStream

from deltaflow.gateway.upstreams._h1 import AutoTransport
from deltaflow.gateway.upstreams._http import _body_read, _Reader, _shutdown, _socket_of, _SSEData
from deltaflow.sinks.sse import _BodyWriter

_BACKENDS: list[Any] = ["asyncio", "trio"]
if importlib.util.find_spec("uvloop") is not None:
    _BACKENDS.append(pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"))

pytestmark = pytest.mark.anyio

EVENT = b"data: " + b"x" * 1000 + b"\n\n"
CHUNK = b"%x\r\n" % len(EVENT) + EVENT + b"\r\n"


class Flood:
    """A raw HTTP server that streams SSE events until a write fails; counts what it wrote."""

    def __init__(self) -> None:
        self.events = 0
        self.failed = anyio.Event()  # a write failed: the client has gone

    async def handle(self, stream: SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                data += await stream.receive()
            try:
                await stream.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                  b"Transfer-Encoding: chunked\r\n\r\n")
                while True:
                    await stream.send(CHUNK)
                    self.events += 1
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                self.failed.set()


class _Counting:
    """An event iterator that counts what it gave."""

    def __init__(self, it: AsyncIterator[Any]) -> None:
        self._it = it
        self.taken = 0

    def __aiter__(self) -> _Counting:
        return self

    async def __anext__(self) -> Any:
        item = await self._it.__anext__()
        self.taken += 1
        return item


class _CountingRead:
    """A body read (``_body_read``) that counts the events in what it gave."""

    def __init__(self, read: Callable[[], Awaitable[bytes]]) -> None:
        self._read = read
        self.taken = 0

    async def __call__(self) -> bytes:
        data = await self._read()
        self.taken += data.count(b"\n\n")
        return data


@pytest.mark.parametrize("anyio_backend", _BACKENDS)
@pytest.mark.parametrize("kind", ["iterator", "sse-reader"])
async def test_an_abandoned_stream_stops_reading_and_resets_the_connection(anyio_backend: Any, kind: str) -> None:
    # "iterator": _Reader over httpx-sse's generators; "sse-reader": the gateway's own SSE reader (_SSEData)
    # over the body's read (the h1 transport's on asyncio, a step of httpx's stream on trio)
    flood = Flood()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    http = httpx.AsyncClient(transport=AutoTransport(limits=httpx.Limits(max_connections=2)), timeout=5.0)
    async with listener, anyio.create_task_group() as tg, http:
        tg.start_soon(listener.serve, flood.handle)
        async with http.stream("POST", f"http://127.0.0.1:{port}/completion", content=b"{}") as r:
            events: _Counting | _CountingRead
            reader: _Reader[Any] | _SSEData
            if kind == "iterator":
                events = _Counting(httpx_sse.EventSource(r).aiter_sse())
                reader = _Reader(events)
            else:
                events = _CountingRead(_body_read(r))
                reader = _SSEData(events)
            for _ in range(3):
                assert (await reader.next()) is not None
            await anyio.sleep(0.2)  # the engine fills every buffer on the way
            written = flood.events
            with anyio.fail_after(5):
                await reader.abandon(_socket_of(r))
        # What was on its way when the reader gave up (in the sockets' buffers), and nothing the engine
        # wrote after: without the cut, uvloop's reader went on to its own bound of 10,000 events.
        assert events.taken <= written + 1, f"abandon read {events.taken - written} events written after it began"
        with anyio.fail_after(5):
            await flood.failed.wait()  # the engine's writes fail: it sees its client gone
        stopped = flood.events
        await anyio.sleep(0.2)
        assert flood.events == stopped
        tg.cancel_scope.cancel()


def test_a_cut_connection_is_reset_when_its_socket_closes() -> None:
    # A plain shutdown would leave the engine a half-closed connection, and its writes stuck on a full
    # window: a server that waits for its writes before it closes (uvicorn under uvloop) never gives up.
    # Cut, the connection is reset when the socket closes: the engine's very next write fails.
    with socket.create_server(("127.0.0.1", 0)) as server, \
            socket.create_connection(server.getsockname()) as ours:
        theirs, _ = server.accept()
        with theirs:
            _shutdown(ours)
            assert theirs.recv(16) == b""  # the engine sees its client go at once
            ours.close()
            time.sleep(0.05)
            with pytest.raises(OSError):  # ECONNRESET or EPIPE: not a write into a half-closed connection
                theirs.send(b"data: more\n\n")


async def test_a_write_after_the_client_left_raises(anyio_backend: str) -> None:
    sent: list[dict[str, Any]] = []
    messages = [{"type": "http.disconnect"}]

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    writer = _BodyWriter(send)
    await writer.write(b"data: 1\n\n")
    with anyio.fail_after(5):
        await writer.watch(receive, None)  # returns: the client disconnected
    assert writer.gone
    with pytest.raises(ConnectionResetError):
        await writer.write(b"data: 2\n\n")
    assert [m["body"] for m in sent] == [b"data: 1\n\n"]  # nothing went to the server after it
