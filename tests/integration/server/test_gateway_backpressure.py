"""Backpressure end to end: a client that stops reading stops the gateway reading its upstream, and so stops
the upstream writing; a client that leaves closes the upstream request.

The upstream is a double that speaks llama.cpp's ``POST /completion`` stream over a real loopback HTTP
server (uvicorn) and writes events as fast as its connection takes them: 4,000 events of 32 KB (128 MB in
all), counting each one its server accepted. No real engine can be made to write that fast on cue, and the
point is the flow control, not the model. Between the double and the client are the real gateway (Qwen3
template and tokenizer of ``../shared``, the Hermes parser) and uvicorn, and the client is httpx reading
the SSE stream. What the sockets of two loopback connections buffer is bounded (a few MB each); a gateway
that read its upstream ahead of its client would take all 128 MB in well under the pause.

Both servers run on uvloop where installed (as ``deltaflow serve`` does), which is where leaving went
wrong: the gateway went on reading until the double had written everything, because a cancellation can
wait indefinitely there for a task whose every read finds its data (``tests/unit/gateway/test_leaving.py``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from conftest_server import start_server
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from deltaflow.gateway.config import ModelConfig, build_engine
from deltaflow.server import create_app

pytestmark = pytest.mark.shared

EVENTS = 4000
RESUMED = 200  # the upstream's events the client reads after its pause, before it leaves
TEXT = ("word " * 6553)[:32768]  # 32 KB of plain text per event


class FloodUpstream:
    """llama.cpp's ``/completion`` stream, written as fast as the connection takes it; counts what it wrote.

    It stops when its client has gone, as llama.cpp does (uvicorn would take the rest and drop it)."""

    def __init__(self) -> None:
        self.written = 0
        self.finished = threading.Event()  # the response ended (all written, or the client left)
        self.completed = False

    async def completion(self, request: Request) -> Response:
        body = await request.json()
        assert body.get("stream") is True

        async def events() -> Any:
            try:
                for _ in range(EVENTS):
                    if await request.is_disconnected():  # uvicorn drops writes after a disconnect silently
                        return
                    yield b"data: " + json.dumps({"content": TEXT, "stop": False}).encode() + b"\n\n"
                    self.written += 1
                yield b"data: " + json.dumps({"content": "", "stop": True, "stop_type": "eos"}).encode() + b"\n\n"
                self.completed = True
            finally:
                self.finished.set()

        return StreamingResponse(events(), media_type="text/event-stream")

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/completion", self.completion, methods=["POST"]),
                                 Route("/health", self.health)])


@pytest.fixture
def flood(shared: Path) -> Iterator[tuple[FloodUpstream, str]]:
    """The double behind the gateway; yields the double and the gateway's base URL."""
    double = FloodUpstream()
    up_server, up_thread, up_base = start_server(double.app())
    config = ModelConfig(name="flood", upstream=up_base, upstream_kind="llamacpp",
                         model=str(shared / "tokenizers" / "qwen3"), tool_parser="hermes", reasoning_parser="qwen3",
                         context_length=32768)
    engine = anyio.run(build_engine, [config])
    server, thread, base = start_server(create_app(engine), lifespan="on")
    try:
        yield double, base
    finally:
        server.should_exit = up_server.should_exit = True
        thread.join(10)
        up_thread.join(10)


def settled(double: FloodUpstream, quiet: float = 0.5, limit: float = 10.0) -> int:
    """The double's count once it has not moved for ``quiet`` seconds (the buffers are full)."""
    last, since, start = -1, time.monotonic(), time.monotonic()
    while time.monotonic() - start < limit:
        now = double.written
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return now
        time.sleep(0.05)
    pytest.fail(f"the upstream kept writing for {limit} s while the client read nothing ({double.written} events)")


def test_a_client_that_stops_reading_stops_the_upstream(flood: tuple[FloodUpstream, str]) -> None:
    double, base = flood
    body = {"model": "flood", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 30000, "stream": True,
            "chat_template_kwargs": {"enable_thinking": False}}
    with httpx.Client(base_url=base, timeout=30) as http, \
            http.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        got = 0
        for line in lines:
            if line.startswith("data: ") and "content" in line:
                got += 1
                if got == 3:
                    break
        held = settled(double)  # the client reads nothing now
        print(f"backpressure: the upstream wrote {held} of {EVENTS} events of 32 KB while the client read 3")
        assert held < EVENTS // 4, f"the gateway read {held} of {EVENTS} events ahead of a client that stopped"
        time.sleep(1.0)
        assert double.written == held, "the upstream went on writing while the client read nothing"

        # Reading again lets the upstream go on: the flow was held, not broken. What is read is counted in
        # the upstream's events (32 KB of text each), not in the client's: the gateway joins the events
        # waiting when its client reads (up to 64 a delta), so 200 deltas may carry the whole answer.
        chars = 0
        for line in lines:
            if line.startswith("data: ") and "content" in line:
                for choice in json.loads(line[6:]).get("choices", ()):
                    chars += len(choice.get("delta", {}).get("content") or "")
                if chars >= RESUMED * len(TEXT):
                    break
        assert double.written > held
    # The client left: the gateway closes the upstream request, which ends before all of it was written.
    assert double.finished.wait(10), "the upstream response did not end after the client left"
    assert not double.completed and double.written < EVENTS, (
        f"the upstream wrote {double.written} of {EVENTS} events while the client read about {held + RESUMED}")
