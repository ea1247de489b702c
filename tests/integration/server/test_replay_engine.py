"""The replay engine's pacing on a real server: non-streaming is not paced, a stream ends at its last chunk."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from conftest_server import start_server

from deltaflow.server import EngineRequest, ReplayEngine, create_app


@pytest.fixture
def serve() -> Iterator[Any]:
    """Start apps on loopback; all are stopped at the end of the test."""
    started: list[Any] = []

    def _start(app: Any) -> str:
        server, thread, base = start_server(app)
        started.append((server, thread))
        return base

    yield _start
    for server, _ in started:
        server.should_exit = True
    for _, thread in started:
        thread.join(10)


def _replay_dir(tmp_path: Path, **texts: str) -> Path:
    for name, text in texts.items():
        (tmp_path / f"{name}.txt").write_text(text, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": []}),
        ("/v1/responses", {"input": "go"}),
        ("/v1/messages", {"max_tokens": 50, "messages": []}),
    ],
)
def test_non_streaming_requests_are_not_paced(serve: Any, path: str, body: dict[str, Any]) -> None:
    """At 5 tokens/s the bundled qwen3-weather transcript takes tens of seconds to stream; its non-streaming body comes at once."""
    engine = ReplayEngine(tokens_per_second=5)
    base = serve(create_app(engine, heartbeat=5.0))
    t0 = time.monotonic()
    r = httpx.post(base + path, json={"model": "qwen3-weather", **body}, timeout=30)
    elapsed = time.monotonic() - t0
    assert r.status_code == 200, r.text
    assert elapsed < 3.0, f"a non-streaming request took {elapsed:.1f} s"


def test_a_one_chunk_answer_slower_than_the_idle_timeout_ends_with_its_finish(serve: Any, tmp_path: Path) -> None:
    """One chunk, a 0.5 s chunk delay, idle_timeout 0.25 s: the whole answer arrived, so it ends with its finish, not an idle error."""
    engine = ReplayEngine(_replay_dir(tmp_path, hello="Hello"), tokens_per_second=2)  # 0.5 s between chunks
    base = serve(create_app(engine, idle_timeout=0.25, heartbeat=5.0))
    with openai.OpenAI(base_url=base + "/v1", api_key="t", max_retries=0) as oai:
        chunks = list(oai.chat.completions.create(model="hello", messages=[], stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello"
    assert chunks[-1].choices[0].finish_reason == "stop"
    with (
        anthropic.Anthropic(base_url=base, api_key="t", max_retries=0) as claude,
        claude.messages.stream(model="hello", max_tokens=5, messages=[]) as s,
    ):
        final = s.get_final_message()
    assert final.stop_reason == "end_turn" and final.content[0].text == "Hello"  # type: ignore[union-attr]


def test_a_stream_ends_at_its_last_chunk(serve: Any, tmp_path: Path) -> None:
    """Two chunks 0.4 s apart: the stream lasts one delay after its first event, not two (no sleep after the last chunk)."""
    engine = ReplayEngine(_replay_dir(tmp_path, two="Hello world"), tokens_per_second=2.5)  # 0.4 s between chunks
    base = serve(create_app(engine, heartbeat=5.0))
    with (
        httpx.Client(timeout=10) as client,
        client.stream("POST", base + "/v1/chat/completions", json={"model": "two", "messages": [], "stream": True}) as r,
    ):
        lines = r.iter_lines()
        next(lines)  # the role chunk
        t0 = time.monotonic()
        rest = list(lines)
        elapsed = time.monotonic() - t0
    assert any('"finish_reason":"stop"' in line for line in rest) and "data: [DONE]" in rest
    assert 0.35 < elapsed < 0.7, f"the stream took {elapsed:.2f} s after its first event"


def test_streaming_is_still_paced_and_the_engine_knows_whether_the_client_streams(serve: Any, tmp_path: Path) -> None:
    """Three chunks at 0.2 s apart take about 0.4 s to stream; EngineRequest.stream tells the engine which kind of request it is."""
    engine = ReplayEngine(_replay_dir(tmp_path, three="one two three"), tokens_per_second=5)
    base = serve(create_app(engine, heartbeat=5.0))
    t0 = time.monotonic()
    r = httpx.post(base + "/v1/chat/completions", json={"model": "three", "messages": [], "stream": True}, timeout=10)
    assert r.status_code == 200 and time.monotonic() - t0 >= 0.35

    seen: list[bool] = []

    async def fn(request: EngineRequest) -> AsyncIterator[Any]:
        seen.append(request.stream)
        yield "ok"

    base2 = serve(create_app(fn, model="m", heartbeat=5.0))
    for path, body in (("/v1/chat/completions", {"messages": []}), ("/v1/responses", {"input": "x"}), ("/v1/messages", {"max_tokens": 5, "messages": []})):
        for stream in (True, False):
            assert httpx.post(base2 + path, json={"model": "m", "stream": stream, **body}, timeout=5).status_code == 200
    assert seen == [True, False] * 3
