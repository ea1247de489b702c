"""template_messages / template_tools: the conversation in the form chat templates get; the Structs' JSON."""

from __future__ import annotations

import msgspec
import pytest
from structlog.testing import capture_logs

from deltaflow.prompt.conversation import (
    AssistantTurn,
    Conversation,
    GenerationOptions,
    Instruction,
    Reasoning,
    TextPart,
    ToolCall,
    ToolChoice,
    ToolResult,
    UserTurn,
)
from deltaflow.prompt.messages import template_messages, template_tools
from deltaflow.tools import ToolSpec


def parts(*texts: str) -> tuple[TextPart, ...]:
    return tuple(TextPart(text=t) for t in texts)


def call(arguments: str, id: str = "c1") -> ToolCall:
    return ToolCall(id=id, name="f", arguments=arguments)


FULL = Conversation(
    instructions=(Instruction(role="system", parts=parts("S")), Instruction(role="developer", parts=parts("D1", "D2"))),
    turns=(
        UserTurn(parts=parts("a", "b")),
        AssistantTurn(
            content=None,
            reasoning=(Reasoning(text="r1", signature="sig"), Reasoning(sealed="x", redacted=True), Reasoning(text="r2")),
            tool_calls=(call('{"x": [1, {"y": null}], "é": "ü"}'), call("{}", "c2")),
        ),
        ToolResult(call_id="c1", parts=parts("o1", "o2"), is_error=True, name="f"),
        ToolResult(call_id="c2", parts=()),
        Instruction(role="system", parts=parts("late")),
        UserTurn(parts=()),
        AssistantTurn(content="done", reasoning=(Reasoning(sealed="only", redacted=True),)),
    ),
    tools=(ToolSpec(name="f", description="F.", parameters={"type": "object"}), ToolSpec(name="g")),
    strict_tools=frozenset({"g"}),
    tool_choice=ToolChoice(mode="named", allowed=("f",), parallel=False),
    options=GenerationOptions(max_tokens=3, stop=("x",), chat_template_kwargs={"enable_thinking": True}),
)


def test_template_messages_shape_and_key_order() -> None:
    got = template_messages(FULL)
    assert got == [
        {"role": "system", "content": "S"},
        {"role": "developer", "content": "D1\nD2"},
        {"role": "user", "content": "a\nb"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "r1\nr2",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": [1, {"y": None}], "é": "ü"}}},
                {"id": "c2", "type": "function", "function": {"name": "f", "arguments": {}}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "o1\no2", "name": "f"},
        {"role": "tool", "tool_call_id": "c2", "content": ""},
        {"role": "system", "content": "late"},
        {"role": "user", "content": ""},
        {"role": "assistant", "content": "done"},
    ]
    # the order of keys is the Chat form's (templates that dump a message with tojson see it)
    assert list(got[3]) == ["role", "content", "reasoning_content", "tool_calls"]
    assert list(got[3]["tool_calls"][0]) == ["id", "type", "function"]
    assert list(got[3]["tool_calls"][0]["function"]["arguments"]) == ["x", "é"]
    assert list(got[4]) == ["role", "tool_call_id", "content", "name"]


def test_messages_are_fresh() -> None:
    first = template_messages(FULL)
    first[3]["tool_calls"][0]["function"]["arguments"]["x"].append(2)
    first[0]["content"] = "changed"
    assert template_messages(FULL)[3]["tool_calls"][0]["function"]["arguments"]["x"] == [1, {"y": None}]
    assert template_messages(FULL)[0]["content"] == "S"


@pytest.mark.parametrize(
    ("arguments", "warned"),
    [("{not json", "not valid JSON"), ("[1, 2]", "not a JSON object"), ('"text"', "not a JSON object"), ("", None), ("  ", None)],
)
def test_arguments_that_are_not_an_object_become_empty(arguments: str, warned: str | None) -> None:
    conv = Conversation(turns=(AssistantTurn(tool_calls=(call(arguments),)),))
    with capture_logs() as logs:
        got = template_messages(conv)
    assert got[0]["tool_calls"][0]["function"]["arguments"] == {}
    if warned is None:
        assert logs == []
    else:
        assert len(logs) == 1 and logs[0]["log_level"] == "warning" and warned in logs[0]["event"]
        assert logs[0]["tool"] == "f" and logs[0]["call_id"] == "c1"
        assert arguments not in str(logs[0])  # the text itself is not logged


SYSTEMS = Conversation(
    instructions=(Instruction(role="system", parts=parts("S")), Instruction(role="developer", parts=parts("D"))),
    turns=(
        UserTurn(parts=parts("u1")),
        Instruction(role="developer", parts=parts("D2")),
        UserTurn(parts=parts("u2")),
    ),
)


def test_developer_role_off_merges_system_messages_at_position_0() -> None:
    assert template_messages(SYSTEMS, developer_role=False) == [
        {"role": "system", "content": "S\n\nD\n\nD2"},
        {"role": "user", "content": "u1"},
        {"role": "user", "content": "u2"},
    ]
    # one system message already first: nothing moves
    one = Conversation(instructions=(Instruction(role="system", parts=parts("S")),), turns=(UserTurn(parts=parts("u")),))
    assert template_messages(one, developer_role=False) == template_messages(one)


def test_system_role_off_folds_system_text_into_the_first_user_message() -> None:
    assert template_messages(SYSTEMS, developer_role=False, system_role=False) == [
        {"role": "user", "content": "S\n\nD\n\nD2\n\nu1"},
        {"role": "user", "content": "u2"},
    ]
    # developer messages stay when the template knows them
    assert template_messages(SYSTEMS, system_role=False) == [
        {"role": "developer", "content": "D"},
        {"role": "user", "content": "S\n\nu1"},
        {"role": "developer", "content": "D2"},
        {"role": "user", "content": "u2"},
    ]
    no_user = Conversation(
        instructions=(Instruction(role="system", parts=parts("S")),), turns=(AssistantTurn(content="a"),)
    )
    assert template_messages(no_user, system_role=False) == [
        {"role": "user", "content": "S"},
        {"role": "assistant", "content": "a"},
    ]
    empty_user = Conversation(instructions=(Instruction(role="system", parts=parts("S")),), turns=(UserTurn(parts=()),))
    assert template_messages(empty_user, system_role=False) == [{"role": "user", "content": "S"}]


def test_template_tools() -> None:
    tools = template_tools(FULL)
    assert tools == [
        {"type": "function", "function": {"name": "f", "description": "F.", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "g", "parameters": {}}},
    ]
    assert tools is not None
    tools[0]["function"]["parameters"]["type"] = "changed"
    assert FULL.tools is not None and FULL.tools[0].parameters == {"type": "object"}
    assert template_tools(Conversation()) is None
    assert template_tools(Conversation(tools=())) == []


def test_conversation_round_trips_through_json() -> None:
    """The turns are tagged, so a conversation decodes back into the same types."""
    data = msgspec.json.encode(FULL)
    assert msgspec.json.decode(data, type=Conversation) == FULL
    assert b'"kind":"assistant"' in data and b'"kind":"tool_result"' in data


def test_text_properties_and_choice_name() -> None:
    assert FULL.instructions[1].text == "D1\nD2"
    assert UserTurn(parts=parts("x")).text == "x" and UserTurn(parts=()).text == ""
    assert ToolResult(call_id="c", parts=parts("a", "b")).text == "a\nb"
    assert FULL.tool_choice.name == "f"
    assert ToolChoice(mode="required", allowed=("f",)).name is None
