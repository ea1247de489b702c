"""The public message shapes: JSON round trips of deltas and complete messages."""

from __future__ import annotations

import msgspec

from deltaflow import (
    ChatMessage,
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
    FunctionCall,
    ToolCall,
    parse_complete,
)


def test_delta_json_round_trip() -> None:
    """A delta encoded to JSON decodes back to an equal DeltaMessage (clients read the stream this way)."""
    d = DeltaMessage(
        tool_calls=[
            DeltaToolCall(index=0, id="call_1", type="function", function=DeltaFunctionCall(name="f", arguments="{"))
        ],
        finish_reason="tool_calls",
    )
    assert msgspec.json.decode(msgspec.json.encode(d), type=DeltaMessage) == d


def test_chat_message_json_round_trip() -> None:
    """A complete message encoded to JSON decodes back to an equal ChatMessage."""
    m = ChatMessage(content="hi", tool_calls=[ToolCall(id="call_1", function=FunctionCall(name="f", arguments="{}"))])
    assert msgspec.json.decode(msgspec.json.encode(m), type=ChatMessage) == m


def test_to_dict_shape() -> None:
    """to_dict gives content, reasoning_content and OpenAI-shaped tool_calls; absent text is None, never ""."""
    m = parse_complete(
        '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>', tool_parser="hermes", id_factory=lambda: "call_x"
    )
    assert m.to_dict() == {
        "content": None,
        "reasoning_content": None,
        "tool_calls": [{"id": "call_x", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}],
    }
