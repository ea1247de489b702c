"""The Chat Completions framer's rendered fast path gives the same bytes as its chunk objects."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from deltaflow.messages import DeltaFunctionCall, DeltaMessage, DeltaToolCall
from deltaflow.sinks import ChatCompletionsFramer, SSEEncoder
from deltaflow.sinks.framing.openai_chat import _PROBE

_TEXT = st.text(st.characters(codec="utf-8"), max_size=40) | st.sampled_from(["", _PROBE, '"\\', "\u2028\ud7ff"])
_MODEL = st.sampled_from(["m", "Qwen/Qwen3-8B", _PROBE, 'a"b\\c', "模型"]) | st.text(max_size=10)


def _chunk(framer: ChatCompletionsFramer, delta: dict[str, Any]) -> dict[str, Any]:
    """The chunk object the framer must send for a delta (what the official SDK parses)."""
    return {
        "id": framer.id,
        "created": framer.created,
        "model": framer.model,
        "choices": [{"delta": delta, "index": 0, "logprobs": None, "finish_reason": None}],
        "object": "chat.completion.chunk",
        "usage": None,
    }


def _slow_bytes(framer: ChatCompletionsFramer, delta: DeltaMessage) -> bytes:
    """The struct path's encoding of a delta (the reference the rendered path must equal)."""
    calls = [
        {"index": tc.index, "function": {"arguments": tc.function.arguments}} for tc in delta.tool_calls
    ] or None
    fields: dict[str, Any] = {"content": delta.content, "tool_calls": calls}
    fields[framer._reasoning_key] = delta.reasoning_content
    converted = msgspec.convert({k: v for k, v in fields.items() if v is not None}, framer._delta_cls)
    return msgspec.json.encode(framer._chunk(converted).data)


@given(model=_MODEL, text=_TEXT, field=st.sampled_from(["content", "reasoning_content"]),
       reasoning_field=st.sampled_from(["reasoning_content", "reasoning"]))
def test_text_delta_bytes_equal_struct_path(model: str, text: str, field: str, reasoning_field: str) -> None:
    """A content-only or reasoning-only delta is framed to exactly the bytes of the chunk objects."""
    framer = ChatCompletionsFramer(model, reasoning_field=reasoning_field)
    delta = DeltaMessage(**{field: text})
    (event,) = framer.feed(delta)
    sent = msgspec.json.encode(event.data)
    assert sent == _slow_bytes(framer, delta)
    key = "content" if field == "content" else reasoning_field
    assert json.loads(sent) == _chunk(framer, {key: text})


@given(model=_MODEL, args=st.lists(st.tuples(st.integers(0, 3), _TEXT), min_size=1, max_size=6))
def test_argument_deltas_bytes_equal_struct_path(model: str, args: list[tuple[int, str]]) -> None:
    """Argument fragments of several call indexes are framed like the chunk objects, each with its index."""
    framer = ChatCompletionsFramer(model)
    for index, text in args:
        delta = DeltaMessage(tool_calls=[DeltaToolCall(index=index, function=DeltaFunctionCall(arguments=text))])
        (event,) = framer.feed(delta)
        sent = msgspec.json.encode(event.data)
        assert sent == _slow_bytes(framer, delta)
        assert json.loads(sent) == _chunk(framer, {"tool_calls": [{"index": index, "function": {"arguments": text}}]})


def test_deltas_outside_the_fast_path_keep_their_fields() -> None:
    """A call's first delta (id, name), a delta with two fields and one with logprobs are framed in full."""
    framer = ChatCompletionsFramer("m", logprobs=True)
    first = DeltaToolCall(index=0, id="call_1", type="function", function=DeltaFunctionCall(name="f", arguments="{"))
    (ev,) = framer.feed(DeltaMessage(tool_calls=[first]))
    assert json.loads(msgspec.json.encode(ev.data))["choices"][0]["delta"] == {
        "tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{"}}]
    }
    (ev,) = framer.feed(DeltaMessage(content="a", reasoning_content="b"))
    assert json.loads(msgspec.json.encode(ev.data))["choices"][0]["delta"] == {"content": "a", "reasoning_content": "b"}
    (ev,) = framer.feed(DeltaMessage(content="a", logprobs=[{"token": "a", "logprob": -0.5}]))
    choice = json.loads(msgspec.json.encode(ev.data))["choices"][0]
    assert choice["logprobs"] == {"content": [{"token": "a", "logprob": -0.5}]}
    assert framer.feed(DeltaMessage()) == []


@pytest.mark.parametrize("events", [1, 2])
def test_sse_encoder_frames_rendered_and_struct_payloads_alike(events: int) -> None:
    """One rendered event, or a batch mixing rendered and struct payloads, is encoded as data lines."""
    framer = ChatCompletionsFramer("m")
    batch = framer.feed(DeltaMessage(content="hé\n"))
    if events == 2:
        batch = framer.start() + batch
    data = SSEEncoder().encode(batch)
    lines = data.split(b"\n\n")
    assert lines[-1] == b"" and len(lines) == events + 1
    payloads = [json.loads(line.removeprefix(b"data: ")) for line in lines[:-1]]
    assert payloads[-1]["choices"][0]["delta"] == {"content": "hé\n"}
    if events == 2:
        assert payloads[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
