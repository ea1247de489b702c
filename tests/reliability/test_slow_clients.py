"""A slow client (one event per second) holds the engine back: pulls and memory per stream stay bounded."""

from __future__ import annotations

import json
import math
import socket
import time
import tracemalloc
from collections.abc import Callable, Iterator

import pytest

from live import BIG_CHUNK, Live, live_server, traced_now, wait_until

CLIENT_RCVBUF = 16 * 1024
#: Items the pipeline can hold for one stream: the source edge (prefetch 16), one coalesced batch (at most what
#: the edge held), the consumer edge (16 deltas), the delta in the framer, the SSE producer -> writer edge (1 batch)
#: and the batch being written.
PIPELINE_CHUNKS = 16 + 16 + 16 + 1 + 1 + 1
#: uvicorn pauses the ASGI send above the asyncio transport's 64 KB high-water mark.
TRANSPORT_BYTES = 64 * 1024


def _sysctl_max(name: str) -> int:
    with open(f"/proc/sys/net/ipv4/{name}") as f:
        return int(f.read().split()[2])


def engine_bound() -> int:
    """The most 4 KB chunks the engine can be ahead of a client that stopped reading.

    Pipeline items, plus bytes buffered outside Python: the transport's high-water mark, the server's
    kernel send buffer (at most ``tcp_wmem`` max), the client's receive buffer (twice ``SO_RCVBUF``, the
    kernel's doubling) and one partly read event in the client; each event carries at least 4 KB.
    """
    outside = TRANSPORT_BYTES + _sysctl_max("tcp_wmem") + 2 * CLIENT_RCVBUF + 2 * BIG_CHUNK
    return PIPELINE_CHUNKS + math.ceil(outside / BIG_CHUNK)


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    """A live server over the recording engine."""
    with live_server(heartbeat=0.2) as srv:
        yield srv


def _wait_saturated(pulled: Callable[[], int], timeout: float = 15.0) -> None:
    """Wait until the engine stops being pulled (unchanged for half a second): the buffers are full."""
    deadline = time.monotonic() + timeout
    last = -1
    while True:
        now = pulled()
        if now == last:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the engine was still being pulled after {timeout} s ({now} chunks)")
        last = now
        time.sleep(0.5)


class SlowReader:
    """A raw SSE client with a small receive buffer that takes one event at a time."""

    def __init__(self, base: str, path: str, body: dict[str, object]) -> None:
        host, port = base.removeprefix("http://").rsplit(":", 1)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, CLIENT_RCVBUF)
        self.sock.settimeout(10)
        self.sock.connect((host, int(port)))
        payload = json.dumps(body).encode()
        self.sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode() + payload
        )
        self.buf = b""

    def event(self) -> bytes:
        """Read up to the end of the next SSE event (headers and pings included as events)."""
        while b"\n\n" not in self.buf:
            data = self.sock.recv(BIG_CHUNK)
            if not data:
                raise EOFError
            self.buf += data
        ev, self.buf = self.buf.split(b"\n\n", 1)
        return ev

    def close(self) -> None:
        self.sock.close()


def test_slow_client_bounds_engine_pulls_and_stream_memory(live: Live) -> None:
    """Reading one event per second, the engine is pulled a bounded number of 4 KB chunks and memory stays flat."""
    c = live.engine.counters
    was_tracing = tracemalloc.is_tracing()
    tracemalloc.start()
    try:
        base_mem = traced_now()
        reader = SlowReader(live.base, "/v1/chat/completions", {"model": "big", "messages": [], "stream": True})
        try:
            seen = [reader.event()]
            _wait_saturated(lambda: c.pulled.get("big", 0))
            pulls = [c.pulled.get("big", 0)]
            mems = [traced_now() - base_mem]
            for _ in range(3):  # one event per second
                time.sleep(1.0)
                seen.append(reader.event())
                pulls.append(c.pulled.get("big", 0))
                mems.append(traced_now() - base_mem)
        finally:
            reader.close()
        assert any(b'"content"' in ev for ev in seen)
        bound = engine_bound()
        assert 0 < pulls[-1] <= bound, (pulls, bound)
        # Saturated: each event read frees room for about one more chunk (kernel window updates may batch a few).
        assert pulls[-1] - pulls[0] <= 3 + PIPELINE_CHUNKS, pulls
        # Python memory of the stream: the pipeline's chunks in three forms (text, delta, SSE bytes) at most.
        assert max(mems) < 3 * (PIPELINE_CHUNKS + 16) * (BIG_CHUNK + 512) + TRANSPORT_BYTES + 256 * 1024, mems
        assert mems[-1] - mems[0] < 128 * 1024, mems
        wait_until(lambda: c.closed == c.started, 10, "the slow stream's engine iterator closed")
    finally:
        if not was_tracing:
            tracemalloc.stop()
    print(f"slow client: engine pulls after each read {pulls} (bound {engine_bound()}), traced bytes {mems}")
