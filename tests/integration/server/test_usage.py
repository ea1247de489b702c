"""Token usage on a real server with the official SDKs: unknown counts are never 0, engine counts win.

On the wire: Chat Completions sends ``null`` for a count not measured; the
Responses and Anthropic usage objects need integers, so such a count is a
placeholder 0 named in the usage's ``deltaflow_unknown`` list.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from conftest_server import start_server

from deltaflow import EngineUsage, TokenChunk
from deltaflow.server import EngineRequest, ModelInfo, ReplayEngine, create_app

NO_TOKENIZER = "deepseek-r1-weather"  # a bundled transcript replayed as text
WITH_TOKENIZER = "qwen3-weather"  # replayed as qwen3 token ids
QWEN3 = next(m.tokenizer for m in ReplayEngine().models() if m.id == WITH_TOKENIZER)
CACHED = "input_tokens_details.cached_tokens"


class Reporting:
    """An engine that reports its own counts: text chunks ("text"), or token ids it also counts differently ("ids")."""

    def models(self) -> list[ModelInfo]:
        return [ModelInfo("text", reasoning_parser="qwen3"), ModelInfo("ids", reasoning_parser="qwen3", tokenizer=QWEN3)]

    async def generate(self, request: EngineRequest) -> AsyncIterator[Any]:
        if request.model == "text":
            yield TokenChunk(text="<think>hm</think>Hi")
            yield TokenChunk(text=" there", finish_reason="stop", usage=EngineUsage(prompt_tokens=7, completion_tokens=3))
        else:
            ids = QWEN3.encode("<think>hmm</think>Hi there", add_special_tokens=False).ids
            yield TokenChunk(token_ids=ids[:-1], usage=EngineUsage(prompt_tokens=11))
            yield TokenChunk(token_ids=ids[-1:], finish_reason="stop", usage=EngineUsage(completion_tokens=99))


@pytest.fixture(scope="module")
def bases(live_server: Any) -> Iterator[dict[str, str]]:
    """The bundled replay server and a server over the reporting engine."""
    server, thread, base = start_server(create_app(Reporting(), heartbeat=5.0))
    try:
        yield {"replay": live_server.base, "reporting": base}
    finally:
        server.should_exit = True
        thread.join(10)


def _chat_stream_usage(base: str, model: str) -> Any:
    with openai.OpenAI(base_url=base + "/v1", api_key="t", max_retries=0) as oai:
        chunks = list(
            oai.chat.completions.create(model=model, messages=[], stream=True, stream_options={"include_usage": True})
        )
    assert chunks[-1].choices == []
    return chunks[-1].usage


def _responses(base: str, model: str, stream: bool) -> dict[str, Any]:
    if stream:
        with (
            openai.OpenAI(base_url=base + "/v1", api_key="t", max_retries=0) as oai,
            oai.responses.stream(model=model, input="go") as s,
        ):
            final = s.get_final_response()
        assert final.usage is not None
        return final.usage.to_dict()
    r = httpx.post(base + "/v1/responses", json={"model": model, "input": "go"}, timeout=10)
    return dict(r.json()["usage"])


def _anthropic(base: str, model: str, stream: bool) -> tuple[dict[str, Any], Any]:
    """The final usage dict (message_delta's when streaming) and the SDK's final message."""
    with anthropic.Anthropic(base_url=base, api_key="t", max_retries=0) as claude:
        if stream:
            with claude.messages.stream(model=model, max_tokens=50, messages=[]) as s:
                events = list(s)
                final = s.get_final_message()
            (delta,) = [e for e in events if e.type == "message_delta"]
            return delta.usage.to_dict(), final
        m = claude.messages.create(model=model, max_tokens=50, messages=[])
        return m.usage.to_dict(), m


# -- nothing measured: the replay engine without a tokenizer ----------------------------------


def test_chat_without_a_tokenizer_reports_null_counts(bases: dict[str, str]) -> None:
    """Stream (include_usage) and non-streaming: prompt, completion and total are null, details null; never 0."""
    u = _chat_stream_usage(bases["replay"], NO_TOKENIZER)
    assert u is not None
    assert (u.prompt_tokens, u.completion_tokens, u.total_tokens, u.completion_tokens_details) == (None, None, None, None)
    body = httpx.post(bases["replay"] + "/v1/chat/completions", json={"model": NO_TOKENIZER, "messages": []}, timeout=10).json()
    assert body["usage"] == {"prompt_tokens": None, "completion_tokens": None, "total_tokens": None, "completion_tokens_details": None}


@pytest.mark.parametrize("stream", [True, False])
def test_responses_without_a_tokenizer_names_every_placeholder(bases: dict[str, str], stream: bool) -> None:
    """The integers the protocol requires are placeholders 0, each named in deltaflow_unknown."""
    u = _responses(bases["replay"], NO_TOKENIZER, stream)
    assert (u["input_tokens"], u["output_tokens"], u["total_tokens"]) == (0, 0, 0)
    assert set(u["deltaflow_unknown"]) == {
        "input_tokens", "output_tokens", "total_tokens", "output_tokens_details.reasoning_tokens", CACHED,
    }


@pytest.mark.parametrize("stream", [True, False])
def test_anthropic_without_a_tokenizer_names_every_placeholder(bases: dict[str, str], stream: bool) -> None:
    """input_tokens and output_tokens are placeholders 0, named in deltaflow_unknown; no thinking-token detail is invented."""
    u, final = _anthropic(bases["replay"], NO_TOKENIZER, stream)
    assert u["output_tokens"] == 0 and "output_tokens_details" not in u
    assert u["deltaflow_unknown"] == ["input_tokens", "output_tokens"]
    assert u.get("input_tokens", 0) == 0 and final.usage.input_tokens == 0


# -- token ids measured: the replay engine with a tokenizer ------------------------------------


def test_with_a_tokenizer_completion_is_measured_and_the_prompt_is_not(bases: dict[str, str]) -> None:
    """Completion and reasoning tokens come from the token ids; the prompt count stays unknown in all three protocols."""
    u = _chat_stream_usage(bases["replay"], WITH_TOKENIZER)
    assert u.prompt_tokens is None and u.total_tokens is None
    assert u.completion_tokens > 0 and 0 < u.completion_tokens_details.reasoning_tokens < u.completion_tokens
    r = _responses(bases["replay"], WITH_TOKENIZER, True)
    assert r["output_tokens"] == u.completion_tokens
    assert r["output_tokens_details"]["reasoning_tokens"] == u.completion_tokens_details.reasoning_tokens
    assert set(r["deltaflow_unknown"]) == {"input_tokens", "total_tokens", CACHED}
    a, final = _anthropic(bases["replay"], WITH_TOKENIZER, True)
    assert a["output_tokens"] == u.completion_tokens == final.usage.output_tokens
    assert a["output_tokens_details"] == {"thinking_tokens": u.completion_tokens_details.reasoning_tokens}
    assert a["deltaflow_unknown"] == ["input_tokens"]


# -- counts the engine reports ------------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
def test_engine_counts_are_reported_in_chat(bases: dict[str, str], stream: bool) -> None:
    """Chat: the engine's prompt and completion counts, their total; reasoning unknown for a text engine."""
    if stream:
        u = _chat_stream_usage(bases["reporting"], "text").to_dict()
    else:
        u = httpx.post(bases["reporting"] + "/v1/chat/completions", json={"model": "text", "messages": []}, timeout=10).json()["usage"]
    assert u == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10, "completion_tokens_details": None}


@pytest.mark.parametrize("stream", [True, False])
def test_engine_counts_are_reported_in_responses(bases: dict[str, str], stream: bool) -> None:
    """Responses: input 7, output 3, total 10, and only what is still unknown in deltaflow_unknown."""
    u = _responses(bases["reporting"], "text", stream)
    assert (u["input_tokens"], u["output_tokens"], u["total_tokens"]) == (7, 3, 10)
    assert set(u["deltaflow_unknown"]) == {"output_tokens_details.reasoning_tokens", CACHED}


@pytest.mark.parametrize("stream", [True, False])
def test_engine_counts_are_reported_in_anthropic(bases: dict[str, str], stream: bool) -> None:
    """Anthropic: message_delta (and the body) carry input_tokens 7 and output_tokens 3; the SDK's final message has them."""
    u, final = _anthropic(bases["reporting"], "text", stream)
    assert (u["input_tokens"], u["output_tokens"]) == (7, 3) and "deltaflow_unknown" not in u
    assert (final.usage.input_tokens, final.usage.output_tokens) == (7, 3)


def test_engine_counts_take_priority_over_the_token_ids(bases: dict[str, str]) -> None:
    """An engine that yields token ids and reports 99 completion tokens (and the prompt on an earlier chunk): 99 and 11 are sent."""
    u = _chat_stream_usage(bases["reporting"], "ids")
    assert (u.prompt_tokens, u.completion_tokens, u.total_tokens) == (11, 99, 110)
    assert u.completion_tokens_details is not None and u.completion_tokens_details.reasoning_tokens > 0  # still counted from the ids
    a, final = _anthropic(bases["reporting"], "ids", True)
    assert (a["input_tokens"], a["output_tokens"], final.usage.input_tokens) == (11, 99, 11)
