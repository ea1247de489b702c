"""The Responses and Anthropic framers' final objects, error types and usage; engine usage through the pipeline."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

import deltaflow
from deltaflow import EngineUsage, ReasoningSigner, TokenChunk
from deltaflow.errors import StageError
from deltaflow.messages import DeltaFunctionCall, DeltaMessage, DeltaToolCall
from deltaflow.server.limits import EngineIdleError
from deltaflow.sinks import AnthropicFramer, ChatCompletionsFramer, ResponsesFramer
from deltaflow.sinks.framing.base import ERROR_TYPES, anthropic_error_type, failure_status, openai_error_type
from deltaflow.stages.assembler import Usage

SIGNER = ReasoningSigner("k")


def _run(framer: Any, deltas: list[DeltaMessage], usage: Usage | None = None) -> list[dict[str, Any]]:
    batches = [framer.start()] + [framer.feed(d) for d in deltas] + [framer.finish(usage)]
    return [json.loads(msgspec.json.encode(ev.data)) for batch in batches for ev in batch]


def _call(first: bool, args: str, finish: str | None = None) -> DeltaMessage:
    tc = DeltaToolCall(index=0, id="call_1", type="function", function=DeltaFunctionCall(name="f", arguments=args)) if first else (
        DeltaToolCall(index=0, function=DeltaFunctionCall(arguments=args))
    )
    return DeltaMessage(tool_calls=[tc], finish_reason=finish)


DELTAS = [
    DeltaMessage(reasoning_content="hm"),
    DeltaMessage(content="Hi"),
    _call(True, '{"a": '),
    _call(False, "1}", "tool_calls"),
]


def test_responses_final_object_is_what_the_last_event_carries() -> None:
    """response() is response.completed's response: the non-streaming body cannot disagree with the stream."""
    framer = ResponsesFramer("m")
    events = _run(framer, DELTAS)
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"] == json.loads(msgspec.json.encode(framer.response()))
    assert [(o["type"], o["status"]) for o in framer.response()["output"]] == [
        ("reasoning", "completed"), ("message", "completed"), ("function_call", "completed"),
    ]


def test_responses_length_cut_inside_a_call() -> None:
    """A length finish inside a function call: that item is incomplete, the earlier ones completed, the response incomplete."""
    framer = ResponsesFramer("m")
    events = _run(framer, [DeltaMessage(content="Hi"), _call(True, '{"a": 1}', "length")])
    assert events[-1]["type"] == "response.incomplete"
    body = framer.response()
    assert body["status"] == "incomplete" and body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert [o["status"] for o in body["output"]] == ["completed", "incomplete"]


def test_responses_summary_part_done_marks_a_cut_reasoning() -> None:
    """Reasoning cut by the finish: its summary part's done event says incomplete, and the item is incomplete."""
    framer = ResponsesFramer("m", reasoning_summary=True)
    events = _run(framer, [DeltaMessage(reasoning_content="a"), DeltaMessage(reasoning_content="b", finish_reason="length")])
    (done,) = [e for e in events if e["type"] == "response.reasoning_summary_part.done"]
    assert done["status"] == "incomplete" and done["part"] == {"type": "summary_text", "text": "ab"}
    item = framer.response()["output"][0]
    assert item["status"] == "incomplete" and item["summary"] == [{"type": "summary_text", "text": "ab"}]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_final_objects_before_finish_are_a_state_error() -> None:
    """response() / message() before finish() raise."""
    with pytest.raises(deltaflow.StateError):
        ResponsesFramer("m").response()
    with pytest.raises(deltaflow.StateError):
        AnthropicFramer("m", signer=SIGNER).message()


def test_anthropic_stream_only_framer_sends_the_same_events_and_keeps_no_text() -> None:
    """keep_message=False (a stream that is only sent): identical events, no block text kept, no message()."""
    from deltaflow.errors import StateError

    kept, sent = AnthropicFramer("m", signer=SIGNER), AnthropicFramer("m", signer=SIGNER, keep_message=False)
    sent.id = kept.id
    strip = {"id"}
    a = [{k: v for k, v in e.items() if k not in strip} for e in _run(kept, DELTAS)]
    b = [{k: v for k, v in e.items() if k not in strip} for e in _run(sent, DELTAS)]
    assert a == b
    assert sent._blocks == [] and sent._parts == []  # the last block (a call) kept no arguments text
    with pytest.raises(StateError, match="keep_message=False"):
        sent.message()


def test_anthropic_message_keeps_the_streamed_blocks() -> None:
    """message() has the stream's blocks in order (thinking with its signature, text, tool_use with decoded input)."""
    framer = AnthropicFramer("m", signer=SIGNER)
    events = _run(framer, DELTAS, Usage(completion_tokens=4, reasoning_tokens=1, completion_known=True, reasoning_known=True))
    body = framer.message()
    assert body["content"] == [
        {"type": "thinking", "thinking": "hm", "signature": SIGNER.sign("hm")},
        {"type": "text", "text": "Hi"},
        {"type": "tool_use", "id": "call_1", "name": "f", "input": {"a": 1}},
    ]
    assert body["stop_reason"] == "tool_use" and body["id"] == framer.id
    assert body["usage"] == {"input_tokens": 0, "output_tokens": 4, "output_tokens_details": {"thinking_tokens": 1},
                             "deltaflow_unknown": ["input_tokens"]}
    (delta,) = [e for e in events if e["type"] == "message_delta"]
    assert delta["usage"] == {"output_tokens": 4, "output_tokens_details": {"thinking_tokens": 1}, "deltaflow_unknown": ["input_tokens"]}
    assert framer.message() is body


def test_prompt_count_given_to_a_framer_is_used_unless_the_engine_reports_one() -> None:
    """input_tokens / prompt_tokens of the constructor fill the prompt count; an engine's own count wins."""
    measured = Usage(completion_tokens=2, completion_known=True)
    reported = Usage(completion_tokens=2, completion_known=True, prompt_tokens=9)
    f = ResponsesFramer("m", input_tokens=5)
    _run(f, [DeltaMessage(content="x")], measured)
    assert (f.response()["usage"]["input_tokens"], f.response()["usage"]["total_tokens"]) == (5, 7)
    c = ChatCompletionsFramer("m", include_usage=True, prompt_tokens=5)
    assert _run(c, [DeltaMessage(content="x")], reported)[-1]["usage"]["prompt_tokens"] == 9
    a = AnthropicFramer("m", input_tokens=5, signer=SIGNER)
    events = _run(a, [DeltaMessage(content="x")], measured)
    assert events[0]["message"]["usage"] == {"input_tokens": 5, "output_tokens": 0}
    assert a.message()["usage"] == {"input_tokens": 5, "output_tokens": 2}


def test_one_error_table() -> None:
    """Every listed status maps to the Anthropic type; unlisted ones fall back by class; failures map to 500 / 504."""
    expected = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
                413: "request_too_large", 429: "rate_limit_error", 500: "api_error", 503: "overloaded_error",
                504: "timeout_error", 529: "overloaded_error"}
    assert {s: anthropic_error_type(s) for s in ERROR_TYPES} == expected
    assert (anthropic_error_type(502), anthropic_error_type(418)) == ("api_error", "invalid_request_error")
    assert (openai_error_type(500), openai_error_type(504), openai_error_type(400)) == ("server_error", "server_error", "invalid_request_error")
    idle = StageError("source", "the source raised")
    idle.__cause__ = EngineIdleError(0.5)
    boom = StageError("source", "the source raised")
    boom.__cause__ = RuntimeError("x")
    assert (failure_status(idle), failure_status(boom)) == (504, 500)

    class Upstream(Exception):
        http_status = 502  # what the gateway's upstream errors declare

    gone = StageError("source", "the source raised")
    gone.__cause__ = Upstream("connection refused")
    assert failure_status(gone) == 502
    events = AnthropicFramer("m", signer=SIGNER).error(idle) + AnthropicFramer("m", signer=SIGNER).error(boom)
    assert [json.loads(msgspec.json.encode(e.data))["error"]["type"] for e in events] == ["timeout_error", "api_error"]
    assert json.loads(msgspec.json.encode(ResponsesFramer("m").error(boom)[0].data))["code"] == "server_error"
    assert json.loads(msgspec.json.encode(ChatCompletionsFramer("m").error(idle)[0].data))["error"]["type"] == "server_error"


async def _source(chunks: list[TokenChunk]) -> AsyncIterator[TokenChunk]:
    for c in chunks:
        yield c


@pytest.mark.anyio
async def test_stream_usage_from_the_engine_survives_a_reasoning_span() -> None:
    """deltaflow.stream(...).usage: counts reported on a chunk whose token ids lie in reasoning reach the usage."""
    from deltaflow.server import ReplayEngine

    tok = next(m.tokenizer for m in ReplayEngine().models() if m.id == "qwen3-weather")
    ids = tok.encode("<think>a long thought", add_special_tokens=False).ids
    chunks = [TokenChunk(token_ids=ids[:2]), TokenChunk(token_ids=ids[2:], finish_reason="length",
                                                        usage=EngineUsage(prompt_tokens=4, completion_tokens=50))]
    async with deltaflow.stream(_source(chunks), reasoning_parser="qwen3", tokenizer=tok) as deltas:
        text = "".join([d.reasoning_content or "" async for d in deltas])
    assert text == "a long thought"
    u = deltas.usage
    assert (u.prompt_tokens, u.completion_tokens, u.completion_known) == (4, 50, True)
    assert u.reasoning_known and u.reasoning_tokens == len(ids)


@pytest.mark.anyio
async def test_stream_usage_without_ids_or_reports_is_unknown() -> None:
    """Text chunks and no report: completion and reasoning unknown (0 kept for compatibility), prompt None."""
    async with deltaflow.stream(_source([TokenChunk(text="hi", finish_reason="stop")])) as deltas:
        assert [d.content async for d in deltas if d.content] == ["hi"]
    u = deltas.usage
    assert (u.completion_tokens, u.completion_known, u.reasoning_known, u.prompt_tokens) == (0, False, False, None)


def test_engine_usage_validates_its_counts() -> None:
    """Counts are non-negative ints or None."""
    assert EngineUsage(prompt_tokens=0).prompt_tokens == 0
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="non-negative int"):
            EngineUsage(completion_tokens=bad)  # type: ignore[arg-type]
