"""Faults with the real engine behind the gateway: llama.cpp killed mid-stream, then restarted; llama.cpp
stalled (SIGSTOP) until the gateway's idle timeout. The clients are the official SDKs and httpx."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "server"))
from conftest_server import start_server  # noqa: E402
from llamacpp import LlamaCppServer  # noqa: E402

from deltaflow.gateway.config import ModelConfig, build_engine  # noqa: E402
from deltaflow.server import create_app  # noqa: E402

pytestmark = [pytest.mark.shared, pytest.mark.engine]

OFF = {"chat_template_kwargs": {"enable_thinking": False}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def own_engine(tiny_gguf: Any) -> Iterator[tuple[Path, int]]:
    """A model path and a fixed port, for a llama.cpp server this test may kill and restart."""
    yield tiny_gguf("qwen3"), free_port()


def gateway_for(shared: Path, url: str, **options: Any) -> tuple[Any, Any, str]:
    config = ModelConfig(name="q", upstream=url, upstream_kind="llamacpp", model=str(shared / "tokenizers" / "qwen3"),
                         context_length=2048, max_tokens=256, options=options)
    engine = anyio.run(build_engine, [config])
    return start_server(create_app(engine, heartbeat=5.0), lifespan="on")


def sse_events(r: httpx.Response) -> Iterator[tuple[str | None, str]]:
    event: str | None = None
    for line in r.iter_lines():
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            yield event, line[6:]
            event = None


def test_engine_killed_mid_stream_then_restarted(shared: Path, own_engine: tuple[Path, int]) -> None:
    model, port = own_engine
    first = LlamaCppServer(model, params={"port": port}).start()
    server, thread, base = gateway_for(shared, first.base_url)
    try:
        with httpx.Client(base_url=base, timeout=60) as http:
            body = {"model": "q", "max_tokens": 1500, "stream": True, "thinking": {"type": "disabled"},
                    "messages": [{"role": "user", "content": "hi"}]}
            events: list[tuple[str | None, str]] = []
            with http.stream("POST", "/v1/messages", json=body) as r:
                assert r.status_code == 200
                for ev in sse_events(r):
                    events.append(ev)
                    if len(events) == 8:
                        first.stop()  # SIGKILL, mid-answer
            kinds = [e for e, _ in events]
            assert kinds[-1] == "error", kinds[-5:]
            err = json.loads(events[-1][1])
            assert err["type"] == "error" and err["error"]["type"] == "api_error"
            assert str(port) not in events[-1][1]  # the upstream's address stays inside
            assert "message_stop" not in kinds
            second = LlamaCppServer(model, params={"port": port}).start()
            try:
                ok = http.post("/v1/chat/completions", json={"model": "q", "max_tokens": 8, **OFF,
                                                             "messages": [{"role": "user", "content": "hi"}]})
                assert ok.status_code == 200, ok.text
                assert ok.json()["choices"][0]["finish_reason"] in ("length", "stop")
            finally:
                second.stop()
    finally:
        first.stop()
        server.should_exit = True
        thread.join(10)


def test_a_stalled_engine_hits_the_idle_timeout(shared: Path, own_engine: tuple[Path, int]) -> None:
    """llama.cpp is frozen (SIGSTOP) mid-stream: after the upstream idle timeout (1 s here) the client gets
    the protocol's error event, a timeout, and the stream ends; the engine is thawed afterwards."""
    import time

    from deltaflow.gateway.upstreams import Timeouts

    model, port = own_engine
    with LlamaCppServer(model, params={"port": port}) as engine:
        server, thread, base = gateway_for(shared, engine.base_url, timeouts=Timeouts(idle=1.0))
        pid = engine.pid
        assert pid is not None
        try:
            with httpx.Client(base_url=base, timeout=60) as http:
                body = {"model": "q", "max_tokens": 1500, "stream": True, **OFF,
                        "messages": [{"role": "user", "content": "hi"}]}
                after: list[str] = []
                with http.stream("POST", "/v1/chat/completions", json=body) as r:
                    n = 0
                    for _, data in sse_events(r):
                        n += 1
                        if n == 5:
                            os.kill(pid, signal.SIGSTOP)  # the engine stops answering, mid-stream
                            frozen = time.monotonic()
                        elif n > 5:
                            after.append(data)
                waited = time.monotonic() - frozen
            errors = [json.loads(d)["error"] for d in after if d != "[DONE]" and "error" in json.loads(d)]
            assert len(errors) == 1, after[-3:]
            assert errors[0]["type"] == "server_error"
            assert errors[0]["message"] == "the upstream engine sent nothing for 1 s"
            assert 0.9 <= waited < 10, waited
        finally:
            os.kill(pid, signal.SIGCONT)
            server.should_exit = True
            thread.join(10)
