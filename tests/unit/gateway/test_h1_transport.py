"""The upstream transport (``deltaflow.gateway.upstreams._h1.AutoTransport``) under httpx.

Each test talks to a raw loopback TCP server written here, which answers with exact bytes (a whole
answer in one write, a chunked body cut short, headers and then silence), on both backends: our own
HTTP/1.1 client serves asyncio, httpx's own transport trio, and the two must look the same to the code
above them (the exception classes, the body, the headers). The pool's own behaviour (reuse, expiry, the
limit, a connection closed mid-answer) is tested on asyncio and uvloop. The adapters' own tests (``test_upstreams.py``)
run the whole gateway path over this transport.
"""

from __future__ import annotations

import importlib.util
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from anyio.abc import SocketStream

from deltaflow.gateway.upstreams._h1 import AutoTransport
from deltaflow.gateway.upstreams._http import _IdleWatch, _socket_of

pytestmark = pytest.mark.anyio

_ASYNCIO: list[Any] = ["asyncio"]
if importlib.util.find_spec("uvloop") is not None:
    _ASYNCIO.append(pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"))

Handler = Callable[[SocketStream, bytes], Awaitable[None]]


async def _request_of(stream: SocketStream) -> bytes:
    """The request's head and body (by its Content-Length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += await stream.receive()
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        body += await stream.receive()
    return head + b"\r\n\r\n" + body


@asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[str]:
    """A loopback server whose every connection is ``handler(stream, request)``; yields its base URL."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)

    async def serve(stream: SocketStream) -> None:
        async with stream:
            try:
                await handler(stream, await _request_of(stream))
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            tg.cancel_scope.cancel()


_CLOSE = b"Connection: close\r\n"


def _ok(body: bytes = b"{}", *extra: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\n" + b"".join(extra) + b"Content-Length: %d\r\n\r\n" % len(body) + body


class _KeepAlive:
    """A connection handler that answers each request on its connection with ``_ok()``; counts the connections."""

    def __init__(self) -> None:
        self.connections = 0

    async def __call__(self, stream: SocketStream, request: bytes) -> None:
        self.connections += 1
        while True:
            await stream.send(_ok(b"{}", b"Content-Type: application/json\r\n"))
            await _request_of(stream)


def client(**timeouts: float) -> tuple[httpx.AsyncClient, AutoTransport]:
    transport = AutoTransport(limits=httpx.Limits(max_connections=4))
    return httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(5.0, **timeouts)), transport


async def test_a_whole_answer_and_the_request_as_sent(anyio_backend: str) -> None:
    seen: list[bytes] = []

    async def whole(stream: SocketStream, request: bytes) -> None:
        seen.append(request)
        await stream.send(b"HTTP/1.1 201 Made\r\nContent-Type: text/plain\r\nX-Engine: e\r\n"
                          b"Content-Length: 5\r\n\r\nhello")

    http, transport = client()
    async with serving(whole) as base, http:
        assert transport.backend is None
        r = await http.post(base + "/completion", content=b'{"prompt": "p"}',
                            headers={"authorization": "Bearer k", "content-type": "application/json"})
        assert (r.status_code, r.text, r.headers["x-engine"], r.reason_phrase) == (201, "hello", "e", "Made")
        assert transport.backend == ("h1" if anyio_backend == "asyncio" else "httpx")
    head, _, body = seen[0].partition(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    assert lines[0] == b"post /completion http/1.1" and body == b'{"prompt": "p"}'
    assert b"authorization: bearer k" in lines and b"content-length: 15" in lines
    assert not any(line.startswith(b"transfer-encoding") for line in lines)


async def test_credentials_in_the_url_are_sent_as_basic_auth(anyio_backend: str) -> None:
    seen: list[bytes] = []

    async def echo(stream: SocketStream, request: bytes) -> None:
        seen.append(request)
        await stream.send(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")

    http, _ = client()
    async with serving(echo) as base, http:
        r = await http.post(base.replace("http://", "http://user:pw@") + "/x", content=b"{}")
    assert r.status_code == 200
    assert b"authorization: basic dxnlcjpwdw==" in seen[0].lower()  # base64("user:pw")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # httpx's own transport (trio) sends it chunked
async def test_a_streamed_request_body_is_sent_whole(anyio_backend: str) -> None:
    seen: list[bytes] = []

    async def echo(stream: SocketStream, request: bytes) -> None:
        seen.append(request)
        await stream.send(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")

    async def parts() -> AsyncIterator[bytes]:
        yield b"ab"
        yield b"cd"

    http, _ = client()
    async with serving(echo) as base, http:
        r = await http.post(base + "/x", content=parts())
    assert r.status_code == 200 and seen[0].endswith(b"\r\n\r\nabcd")
    assert b"content-length: 4" in seen[0].lower()


async def test_a_body_cut_short_is_a_remote_protocol_error(anyio_backend: str) -> None:
    async def cut(stream: SocketStream, request: bytes) -> None:
        await stream.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                          b"9\r\ndata: a\n\n\r\n")
        await anyio.sleep(0.05)  # then the connection closes without the last chunk

    http, _ = client()
    got = b""
    async with serving(cut) as base, http, http.stream("POST", base + "/completion", content=b"{}") as r:
        with pytest.raises(httpx.RemoteProtocolError):
            async for part in r.aiter_raw():
                got += part
    assert got == b"data: a\n\n"


async def test_a_refused_connection_is_a_connect_error(anyio_backend: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    http, _ = client()
    async with http:
        with pytest.raises(httpx.ConnectError):
            await http.post(f"http://127.0.0.1:{port}/completion", content=b"{}")


async def test_a_silent_body_is_a_read_timeout(anyio_backend: str) -> None:
    async def silent(stream: SocketStream, request: bytes) -> None:
        await stream.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await anyio.sleep(5)

    http, _ = client(read=0.2)
    async with serving(silent) as base, http, http.stream("POST", base + "/completion", content=b"{}") as r:
        with pytest.raises(httpx.ReadTimeout):
            await r.aread()


async def test_a_url_that_is_not_http_is_refused(anyio_backend: str) -> None:
    transport = AutoTransport(limits=httpx.Limits())
    try:
        with pytest.raises(httpx.UnsupportedProtocol):
            await transport.handle_async_request(httpx.Request("POST", "ftp://127.0.0.1/x"))
    finally:
        await transport.aclose()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_socket_for_the_idle_watch(anyio_backend: str) -> None:
    # An answer still arriving has its connection's socket; one that arrived whole together with its
    # head has already gone back to the pool, and shows a closed socket: the watch stays scopeless
    # (no cancel scope per event), and shutting that socket down does nothing.
    async def answer(stream: SocketStream, request: bytes) -> None:
        if b"/whole" in request:
            await stream.send(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\ndata: a\n\n")
        else:
            await stream.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\ndata: a\n\n\r\n")
            await anyio.sleep(5)

    http, _ = client()
    async with serving(answer) as base, http:
        async with http.stream("POST", base + "/open", content=b"{}") as r:
            sock = _socket_of(r)
            assert sock is not None and sock.fileno() >= 0
        async with http.stream("POST", base + "/whole", content=b"{}") as r:
            sock = _socket_of(r)
            assert sock is not None and sock.fileno() == -1
            watch = _IdleWatch(0.01, sock)
            assert watch.scopeless
            watch._abort()  # no error: nothing to shut down
            assert await r.aread() == b"data: a\n\n"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # httpx's own messages (trio) may carry the URL
async def test_failures_never_name_the_url(anyio_backend: str) -> None:
    # (the gateway writes its own messages either way: _http._transport_fault)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def malformed(stream: SocketStream, request: bytes) -> None:
        await stream.send(b"HTTP/1.1 abc\r\n\r\n")

    http, _ = client()
    async with serving(malformed) as base, http:
        errors = []
        for url in (f"http://user:secret@127.0.0.1:{port}/completion", base.replace("//", "//user:secret@") + "/x"):
            with pytest.raises(httpx.TransportError) as info:
                await http.post(url, content=b"{}")
            errors.append(info.value)
    assert isinstance(errors[0], httpx.ConnectError) and isinstance(errors[1], httpx.RemoteProtocolError)
    for err in errors:
        assert "127.0.0.1" not in str(err) and "secret" not in str(err) and err.request.url.host == "127.0.0.1"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_shards_of_an_upstream_share_one_pool(anyio_backend: str) -> None:
    # An upstream splits max_connections over httpx clients of POOL_SHARD connections (httpcore's pool is slow
    # when large); on asyncio their transports share one pool with the whole limit. A connection one shard
    # opened is reused by another.
    from deltaflow.gateway.upstreams._http import POOL_SHARD, HttpUpstream

    keep_alive = _KeepAlive()
    async with serving(keep_alive) as base:
        up = HttpUpstream(base, max_connections=POOL_SHARD * 3)
        try:
            assert len(up._clients) == 3
            for client in up._clients:
                assert (await client.post(base + "/x", content=b"{}")).json() == {}
            transports = [c._transport for c in up._clients]
            pools = {id(t._pool) for t in transports}  # type: ignore[attr-defined]
            assert len(pools) == 1 and None not in {t._pool for t in transports}  # type: ignore[attr-defined]
            pool = transports[0]._pool  # type: ignore[attr-defined]
            assert pool._max == POOL_SHARD * 3 and pool.open_connections == 1
            assert keep_alive.connections == 1  # the second and third shard reused the first one's connection
        finally:
            await up.aclose()
        assert pool.open_connections == 0


@pytest.mark.parametrize("anyio_backend", _ASYNCIO)
async def test_keep_alive_reuse_and_expiry(anyio_backend: Any) -> None:
    keep_alive = _KeepAlive()
    transport = AutoTransport(limits=httpx.Limits(max_connections=4, keepalive_expiry=0.2))
    async with serving(keep_alive) as base, httpx.AsyncClient(transport=transport) as http:
        for _ in range(3):
            assert (await http.post(base + "/x", content=b"{}")).json() == {}
        assert keep_alive.connections == 1
        await anyio.sleep(0.3)  # longer than the expiry: the idle connection is closed, a new one made
        assert (await http.post(base + "/x", content=b"{}")).json() == {}
        assert keep_alive.connections == 2 and transport._pool is not None and transport._pool.open_connections == 1


@pytest.mark.parametrize("anyio_backend", _ASYNCIO)
async def test_a_connection_the_server_closed_is_not_reused(anyio_backend: Any) -> None:
    connections = 0

    async def once(stream: SocketStream, request: bytes) -> None:
        nonlocal connections
        connections += 1
        await stream.send(_ok())  # keep-alive by HTTP/1.1's default, then closed

    transport = AutoTransport(limits=httpx.Limits(max_connections=4))
    async with serving(once) as base, httpx.AsyncClient(transport=transport) as http:
        assert (await http.post(base + "/x", content=b"{}")).json() == {}
        await anyio.sleep(0.1)  # the close arrives: the pool forgets the connection
        assert transport._pool is not None and transport._pool.open_connections == 0
        assert (await http.post(base + "/x", content=b"{}")).json() == {}
    assert connections == 2


@pytest.mark.parametrize("anyio_backend", _ASYNCIO)
async def test_the_pool_limit_waits_then_times_out(anyio_backend: Any) -> None:
    release = anyio.Event()

    async def slow(stream: SocketStream, request: bytes) -> None:
        await stream.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n")
        await release.wait()
        await stream.send(b"0\r\n\r\n")
        while True:
            await _request_of(stream)
            await stream.send(_ok())

    transport = AutoTransport(limits=httpx.Limits(max_connections=1))
    http = httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(5.0, pool=0.1))
    async with serving(slow) as base, http:
        async with http.stream("POST", base + "/x", content=b"{}") as first:
            with pytest.raises(httpx.PoolTimeout):
                await http.post(base + "/x", content=b"{}")
            got: list[bytes] = []
            async with anyio.create_task_group() as tg:
                async def second() -> None:
                    got.append((await httpx.AsyncClient(transport=transport, timeout=5.0).post(
                        base + "/x", content=b"{}")).content)

                tg.start_soon(second)
                await anyio.sleep(0.05)
                assert not got  # waiting for the only connection
                release.set()
                assert await first.aread() == b"ab"
        assert got == [b"{}"]


@pytest.mark.parametrize("anyio_backend", _ASYNCIO)
async def test_an_answer_left_unfinished_closes_its_connection(anyio_backend: Any) -> None:
    closed = anyio.Event()

    async def stream_on(stream: SocketStream, request: bytes) -> None:
        await stream.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\ndata: a\n\n\r\n")
        try:
            await stream.receive()
        except anyio.EndOfStream:
            closed.set()

    transport = AutoTransport(limits=httpx.Limits(max_connections=4))
    async with serving(stream_on) as base, httpx.AsyncClient(transport=transport) as http:
        async with http.stream("POST", base + "/x", content=b"{}") as r:
            async for part in r.aiter_raw():
                assert part == b"data: a\n\n"
                break
        with anyio.fail_after(5):
            await closed.wait()  # the engine sees its client leave
        assert transport._pool is not None and transport._pool.open_connections == 0


@pytest.mark.parametrize("anyio_backend", _ASYNCIO)
async def test_a_request_cancelled_before_its_answer_closes_its_connection(anyio_backend: Any) -> None:
    closed = anyio.Event()

    async def never(stream: SocketStream, request: bytes) -> None:
        try:
            await stream.receive()
        except anyio.EndOfStream:
            closed.set()

    transport = AutoTransport(limits=httpx.Limits(max_connections=4))
    async with serving(never) as base, httpx.AsyncClient(transport=transport) as http:
        with anyio.move_on_after(0.1):
            await http.post(base + "/x", content=b"{}")
        with anyio.fail_after(5):
            await closed.wait()
        assert transport._pool is not None and transport._pool.open_connections == 0


@pytest.mark.parametrize("anyio_backend", _ASYNCIO)
async def test_bodies_framed_every_way(anyio_backend: Any) -> None:
    big = bytes(range(256)) * 4096  # 1 MiB: more than the pool buffers before it stops reading

    async def answer(stream: SocketStream, request: bytes) -> None:  # one answer per connection
        if b"/eof" in request:  # no length, not chunked: the body ends with the connection
            await stream.send(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end")
        elif b"/interim" in request:  # an interim answer before the real one
            await stream.send(b"HTTP/1.1 100 Continue\r\n\r\n" + _ok(b"after", b"X-A: 1\r\n", _CLOSE))
        elif b"/big" in request:
            await stream.send(_ok(big, _CLOSE))
        elif b"/empty" in request:
            await stream.send(b"HTTP/1.1 204 No Content\r\n" + _CLOSE + b"\r\n")

    async with serving(answer) as base, httpx.AsyncClient(transport=AutoTransport(limits=httpx.Limits())) as http:
        assert (await http.get(base + "/eof")).content == b"until the end"
        r = await http.get(base + "/interim")
        assert (r.status_code, r.content, r.headers["x-a"]) == (200, b"after", "1")
        async with http.stream("GET", base + "/big") as r:
            await anyio.sleep(0.2)  # all of it arrives while nothing reads
            assert await r.aread() == big
        r = await http.get(base + "/empty")
        assert (r.status_code, r.content) == (204, b"")


@pytest.mark.parametrize("anyio_backend", _ASYNCIO)
async def test_a_malformed_answer_is_a_remote_protocol_error(anyio_backend: Any) -> None:
    async def garbage(stream: SocketStream, request: bytes) -> None:
        if b"/chunk" in request:
            await stream.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
        else:
            await stream.send(b"SMTP ready\r\n\r\n")
        await anyio.sleep(5)

    transport = AutoTransport(limits=httpx.Limits())
    async with serving(garbage) as base, httpx.AsyncClient(transport=transport) as http:
        for path in ("/head", "/chunk"):
            with pytest.raises(httpx.RemoteProtocolError), anyio.fail_after(2):
                await http.get(base + path)
        assert transport._pool is not None and transport._pool.open_connections == 0


def _self_signed(tmp: Any) -> tuple[str, str]:
    """A certificate for 127.0.0.1 and its key, written as PEM files (cryptography: the server extra's)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp / "cert.pem", tmp / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_file), str(key_file)


@pytest.mark.parametrize("anyio_backend", _ASYNCIO)
async def test_https_verifies_the_certificate(anyio_backend: Any, tmp_path: Any) -> None:
    import asyncio
    import ssl

    from deltaflow.gateway.upstreams._h1 import H1Pool

    cert, key = _self_signed(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(_ok(b"secure", _CLOSE))
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        # by default (certifi's bundle, as httpx) a self-signed certificate is refused
        async with httpx.AsyncClient(transport=AutoTransport(limits=httpx.Limits())) as http:
            with pytest.raises(httpx.ConnectError):
                await http.get(f"https://127.0.0.1:{port}/x")
        trusting = ssl.create_default_context(cafile=cert)
        pool = H1Pool(httpx.Limits(), ssl_context=trusting)
        async with httpx.AsyncClient(transport=AutoTransport(limits=httpx.Limits(), shared=pool)) as http:
            assert (await http.get(f"https://127.0.0.1:{port}/x")).content == b"secure"
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("anyio_backend", _ASYNCIO)
async def test_abandoning_a_whole_answer_spares_the_next_answer_on_its_connection(anyio_backend: Any) -> None:
    # A whole answer gives its connection back to the pool before it is read; the next request takes that
    # connection. Abandoning the first answer then (a client that left: the reader shuts the socket the answer
    # gave down, see _http._drain) must not cut the second one.
    from deltaflow.gateway.upstreams._http import _shutdown

    connections = 0

    async def keep_alive(stream: SocketStream, request: bytes) -> None:
        nonlocal connections
        connections += 1
        await stream.send(_ok(b"data: a\n\n"))  # the first answer, whole
        await _request_of(stream)
        await stream.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\ndata: b\n\n\r\n")
        await anyio.sleep(0.2)
        await stream.send(b"9\r\ndata: c\n\n\r\n0\r\n\r\n")

    transport = AutoTransport(limits=httpx.Limits(max_connections=4))
    async with serving(keep_alive) as base, httpx.AsyncClient(transport=transport) as http:
        async with http.stream("POST", base + "/first", content=b"{}") as first:
            sock = _socket_of(first)
            await anyio.sleep(0.05)  # the first answer has arrived whole: its connection is back in the pool
            async with http.stream("POST", base + "/second", content=b"{}") as second:
                assert connections == 1  # the same connection
                _shutdown(sock)  # the first answer abandoned
                assert await second.aread() == b"data: b\n\ndata: c\n\n"


@pytest.mark.parametrize("anyio_backend", _ASYNCIO)
async def test_a_large_request_body_waits_for_the_socket(anyio_backend: Any, monkeypatch: Any) -> None:
    # 8 MiB is more than the socket buffers take at once: the write waits for the transport to drain
    # (pause_writing / resume_writing) while the server reads slowly, and the body arrives whole.
    from deltaflow.gateway.upstreams import _h1

    body = bytes(range(256)) * (8 * 4096)
    got: list[bytes] = []
    paused: list[bool] = []
    pause = _h1._Connection.pause_writing

    def counting_pause(self: Any) -> None:
        paused.append(True)
        pause(self)

    monkeypatch.setattr(_h1._Connection, "pause_writing", counting_pause)

    async def slow_reader(stream: SocketStream, request: bytes) -> None:
        got.append(request.partition(b"\r\n\r\n")[2])
        await stream.send(_ok(b"%d" % len(got[0]), _CLOSE))

    async def serve_slowly(stream: SocketStream) -> None:
        async with stream:
            await anyio.sleep(0.3)  # the client's writes back up meanwhile
            await slow_reader(stream, await _request_of(stream))

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve_slowly)
        transport = AutoTransport(limits=httpx.Limits())
        async with httpx.AsyncClient(transport=transport, timeout=10) as http:
            r = await http.post(f"http://127.0.0.1:{port}/x", content=body)
        tg.cancel_scope.cancel()
    assert r.content == b"%d" % len(body) and got == [body]
    assert paused  # the write did wait


@pytest.mark.parametrize("anyio_backend", _ASYNCIO)
async def test_a_body_to_the_end_of_its_connection_cut_by_a_reset_is_an_error(anyio_backend: Any) -> None:
    # Without a length or chunks, a body ends where its connection ends; a reset is not such an end.
    import struct

    async def reset(stream: SocketStream, request: bytes) -> None:
        await stream.send(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\npartial")
        await anyio.sleep(0.05)
        raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset

    transport = AutoTransport(limits=httpx.Limits())
    async with serving(reset) as base, httpx.AsyncClient(transport=transport) as http:
        async with http.stream("GET", base + "/x") as r:
            with pytest.raises(httpx.RemoteProtocolError):
                await r.aread()


@pytest.mark.parametrize("anyio_backend", _ASYNCIO)
async def test_a_waiter_that_leaves_as_it_is_woken_passes_the_turn_on(anyio_backend: Any) -> None:
    # Two requests wait for the only connection. When it is freed the first is woken, but it is cancelled
    # before it runs (its client left): the freed connection must go to the second, not be lost. (On Python
    # 3.11 asyncio.wait_for itself keeps a woken waiter's result through a cancellation; from 3.12 the
    # cancellation goes through, and the pool hands the turn on.)
    from deltaflow.gateway.upstreams._h1 import H1Pool

    async with serving(_KeepAlive()) as base:
        port = int(base.rsplit(":", 1)[1])
        pool = H1Pool(httpx.Limits(max_connections=1))
        key = ("http", "127.0.0.1", port)
        busy = await pool.acquire(key, {})
        got: list[Any] = []
        async with anyio.create_task_group() as tg:
            first = anyio.CancelScope()

            async def wait(scope: anyio.CancelScope | None) -> None:
                with scope or anyio.CancelScope():
                    got.append(await pool.acquire(key, {"pool": 5.0}))

            tg.start_soon(wait, first)
            await anyio.sleep(0.01)
            tg.start_soon(wait, None)
            await anyio.sleep(0.01)
            busy.close()  # frees the pool's only place and wakes the first waiter...
            first.cancel()  # ...which leaves before it runs
        assert len(got) == 1 and got[0] is not busy  # the second waiter got the place
        await pool.aclose()
