"""Engine faults behind a real server: a raise mid-stream, a stall, and an end without a finish reason."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from live import Live, live_server, wait_until

MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    """One live server over the recording engine (heartbeat 0.2 s)."""
    with live_server(heartbeat=0.2) as srv:
        yield srv


def _chat_ok(oai: openai.OpenAI, model: str = "ok") -> tuple[str, str | None]:
    text, finish = "", None
    stream: Any = oai.chat.completions.create(model=model, messages=MESSAGES, stream=True)  # type: ignore[arg-type]
    for chunk in stream:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    return text, finish


def _messages_ok(claude: anthropic.Anthropic, model: str = "ok") -> tuple[str, str | None]:
    with claude.messages.stream(model=model, max_tokens=10, messages=MESSAGES) as s:  # type: ignore[arg-type]
        for _ in s:
            pass
        final = s.get_final_message()
    text = "".join(b.text for b in final.content if b.type == "text")
    return text, final.stop_reason


def _responses_events(oai: openai.OpenAI, model: str) -> list[Any]:
    return list(oai.responses.create(model=model, input="hi", stream=True))


def test_chat_engine_raise_gives_openai_error_and_next_request_succeeds(live: Live) -> None:
    """An engine raising mid-stream reaches the OpenAI SDK as an APIError; the next stream completes."""
    closed = live.engine.counters.closed
    with openai.OpenAI(base_url=live.base + "/v1", api_key="t", max_retries=0) as oai:
        with pytest.raises(openai.APIError, match="engine exploded"):
            _chat_ok(oai, "fail")
        assert _chat_ok(oai) == ("Hello world!", "stop")
    wait_until(lambda: live.engine.counters.closed >= closed + 2, what="engine iterators closed")


def test_messages_engine_raise_gives_anthropic_error_event_and_next_request_succeeds(live: Live) -> None:
    """An engine raising mid-stream reaches the Anthropic SDK as an error event; the next stream completes."""
    with anthropic.Anthropic(base_url=live.base, api_key="t", max_retries=0) as claude:
        with pytest.raises(anthropic.APIError, match="engine exploded"):
            _messages_ok(claude, "fail")
        assert _messages_ok(claude) == ("Hello world!", "end_turn")


def test_responses_engine_raise_gives_error_event_and_next_request_succeeds(live: Live) -> None:
    """An engine raising mid-stream ends a Responses stream with an ``error`` event; the next stream completes."""
    with openai.OpenAI(base_url=live.base + "/v1", api_key="t", max_retries=0) as oai:
        try:
            events = _responses_events(oai, "fail")
        except openai.APIError as exc:  # an SDK version that raises on the error event
            assert "engine exploded" in str(exc)
        else:
            errors = [e for e in events if e.type == "error"]
            assert len(errors) == 1 and "engine exploded" in errors[0].message
            assert events[-1].type == "error"
            assert not any(e.type == "response.completed" for e in events)
        ok = _responses_events(oai, "ok")
    assert ok[-1].type == "response.completed"
    assert ok[-1].response.output_text == "Hello world!"


def test_stall_heartbeats_keep_connection_and_client_cancel_closes_engine(live: Live) -> None:
    """A stalled engine's stream carries heartbeats past the client's read timeout; leaving closes the engine."""
    live.engine.closed_event.clear()
    pings = 0
    with httpx.Client(timeout=httpx.Timeout(5.0, read=0.6)) as client:
        with client.stream(
            "POST", live.base + "/v1/chat/completions", json={"model": "stall", "messages": MESSAGES, "stream": True}
        ) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith(": ping"):
                    pings += 1
                    if pings == 8:  # 1.6 s of silence from the engine, with a 0.6 s read timeout
                        break
    assert pings == 8
    assert live.engine.closed_event.wait(5), "the stalled engine iterator was not closed"


def test_stall_without_heartbeat_client_timeout_closes_engine() -> None:
    """With heartbeats off, a client read timeout on a stalled stream closes the engine iterator."""
    with live_server(heartbeat=None) as srv:
        with httpx.Client(timeout=httpx.Timeout(5.0, read=0.5)) as client:
            with pytest.raises(httpx.ReadTimeout):
                with client.stream(
                    "POST", srv.base + "/v1/messages",
                    json={"model": "stall", "messages": MESSAGES, "max_tokens": 5, "stream": True},
                ) as r:
                    for _ in r.iter_lines():
                        pass
        assert srv.engine.closed_event.wait(5), "the stalled engine iterator was not closed"
        wait_until(lambda: srv.engine.counters.closed == srv.engine.counters.started, what="all iterators closed")


def test_end_without_finish_reason_ends_cleanly_in_every_protocol(live: Live) -> None:
    """An engine that stops without a finish reason gives ``stop`` / ``end_turn`` / a completed response."""
    with openai.OpenAI(base_url=live.base + "/v1", api_key="t", max_retries=0) as oai:
        assert _chat_ok(oai, "nofinish") == ("Hello world", "stop")
        events = _responses_events(oai, "nofinish")
        assert events[-1].type == "response.completed"
        assert events[-1].response.status == "completed"
        assert events[-1].response.output_text == "Hello world"
    with anthropic.Anthropic(base_url=live.base, api_key="t", max_retries=0) as claude:
        assert _messages_ok(claude, "nofinish") == ("Hello world", "end_turn")


def test_raw_sse_error_payloads_have_the_protocol_shapes(live: Live) -> None:
    """The raw SSE error of each protocol has its documented shape and the stream ends after it."""
    bodies = {
        "/v1/chat/completions": {"model": "fail", "messages": MESSAGES, "stream": True},
        "/v1/responses": {"model": "fail", "input": "hi", "stream": True},
        "/v1/messages": {"model": "fail", "messages": MESSAGES, "max_tokens": 5, "stream": True},
    }
    with httpx.Client(timeout=10) as client:
        for path, body in bodies.items():
            r = client.post(live.base + path, json=body)
            assert r.status_code == 200
            data = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
            last = data[-1]
            if path == "/v1/chat/completions":
                assert "engine exploded" in last["error"]["message"]
                assert r.text.rstrip().endswith("data: [DONE]")
            elif path == "/v1/responses":
                assert last["type"] == "error" and "engine exploded" in last["message"]
            else:
                assert last["type"] == "error" and last["error"]["type"]
                assert "engine exploded" in last["error"]["message"]
