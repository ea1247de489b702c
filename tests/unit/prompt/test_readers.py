"""The three readers: valid bodies read onto the canonical conversation; each refusal names its field."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from deltaflow import DeltaflowError
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
from deltaflow.prompt.readers import RequestError, read_chat, read_messages, read_responses
from deltaflow.tools import ToolSpec

Reader = Callable[[Any], Conversation]

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CHAT_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": WEATHER}}
CHAT_TOOL2: dict[str, Any] = {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}
RESP_TOOL = {"type": "function", "name": "get_weather", "description": "Weather.", "parameters": WEATHER}
RESP_TOOL2 = {"type": "function", "name": "search", "parameters": {"type": "object"}}
ANTH_TOOL = {"name": "get_weather", "description": "Weather.", "input_schema": WEATHER}
ANTH_TOOL2 = {"name": "search", "input_schema": {"type": "object"}}
SPECS = (
    ToolSpec(name="get_weather", description="Weather.", parameters=WEATHER),
    ToolSpec(name="search", parameters={"type": "object"}),
)


def parts(*texts: str) -> tuple[TextPart, ...]:
    return tuple(TextPart(text=t) for t in texts)


def user(*texts: str) -> UserTurn:
    return UserTurn(parts=parts(*texts))


def refused(reader: Reader, body: Any, param: str | None, code: str | None = None, match: str = "") -> RequestError:
    """The RequestError ``reader`` raises on ``body``, checked: its param, its code, its message and its body shape."""
    with pytest.raises(RequestError) as info:
        reader(body)
    err = info.value
    assert err.param == param, str(err)
    assert err.status == 400
    assert isinstance(err, DeltaflowError) and isinstance(err, ValueError)
    if code is not None:
        assert err.code == code, str(err)
    message = str(err)
    if param is not None:
        assert message.startswith(f"{param}: "), message
    if match:
        assert re.search(match, message), message
    out = err.body()
    if err.protocol == "messages":
        assert out == {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    else:
        assert out == {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": err.code}}
    return err


# ============================================================================ Chat Completions


def chat(*messages: Any, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages), **extra}


U = {"role": "user", "content": "hi"}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}


def test_chat_reads_every_role_and_option() -> None:
    conv = read_chat(
        chat(
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "user", "content": "Rome?", "name": "alice"},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "Checking."}, {"type": "refusal", "refusal": "no"}],
                "reasoning_content": "call it",
                "tool_calls": [CALL, {"id": "call_2", "function": {"name": "search", "arguments": {"q": "é"}}}],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "28C", "name": "get_weather"},
            {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]},
            {"role": "system", "content": "late"},
            {"role": "user", "content": [{"type": "text", "text": "thanks"}]},
            {"role": "assistant", "content": None, "reasoning": "r"},
            tools=[CHAT_TOOL, {**CHAT_TOOL2, "function": {**CHAT_TOOL2["function"], "strict": True}}],
            tool_choice={"type": "function", "function": {"name": "search"}},
            parallel_tool_calls=False,
            max_tokens=10,
            max_completion_tokens=20,
            temperature=0.5,
            top_p=1,
            stop="END",
            seed=-3,
            reasoning_effort="high",
            chat_template_kwargs={"enable_thinking": False},
            logprobs=True,
            frequency_penalty=0.1,
        )
    )
    assert conv.instructions == (
        Instruction(role="system", parts=parts("Be brief.")),
        Instruction(role="developer", parts=parts("a", "b")),
    )
    assert conv.turns == (
        user("Rome?"),
        AssistantTurn(
            content="Checking.\nno",
            reasoning=(Reasoning(text="call it"),),
            tool_calls=(
                ToolCall(id="call_1", name="get_weather", arguments='{"city": "Rome"}'),
                ToolCall(id="call_2", name="search", arguments='{"q": "é"}'),
            ),
        ),
        ToolResult(call_id="call_1", parts=parts("28C"), name="get_weather"),
        ToolResult(call_id="call_2", parts=parts("x", "y")),
        Instruction(role="system", parts=parts("late")),
        user("thanks"),
        AssistantTurn(reasoning=(Reasoning(text="r"),)),
    )
    assert conv.tools == SPECS
    assert conv.strict_tools == frozenset({"search"})
    assert conv.tool_choice == ToolChoice(mode="named", allowed=("search",), parallel=False)
    assert conv.tool_choice.name == "search"
    assert conv.options == GenerationOptions(
        max_tokens=20,
        temperature=0.5,
        top_p=1.0,
        stop=("END",),
        seed=-3,
        reasoning_effort="high",
        chat_template_kwargs={"enable_thinking": False},
    )


def test_chat_small_forms() -> None:
    """Empty assistant content is None; max_tokens alone; stop lists; equal reasoning aliases; empty tool_calls."""
    conv = read_chat(
        chat(
            U,
            {"role": "assistant", "content": "", "reasoning_content": "x", "reasoning": "x", "tool_calls": []},
            {"role": "assistant", "content": []},
            max_tokens=7,
            stop=["a", "b"],
        )
    )
    assert conv.turns[1:] == (AssistantTurn(reasoning=(Reasoning(text="x"),)), AssistantTurn())
    assert conv.options.max_tokens == 7 and conv.options.stop == ("a", "b")
    assert conv.tools is None and conv.tool_choice == ToolChoice(mode="none")


@pytest.mark.parametrize(
    ("tools", "choice", "want"),
    [
        (None, None, ToolChoice(mode="none")),
        ([CHAT_TOOL], None, ToolChoice(mode="auto")),
        ([CHAT_TOOL], "none", ToolChoice(mode="none")),
        (None, "auto", ToolChoice(mode="none")),
        ([CHAT_TOOL], "required", ToolChoice(mode="required")),
        (
            [CHAT_TOOL, CHAT_TOOL2],
            {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [{"type": "function", "function": {"name": "search"}}]}},
            ToolChoice(mode="required", allowed=("search",)),
        ),
    ],
)
def test_chat_tool_choice(tools: Any, choice: Any, want: ToolChoice) -> None:
    body = chat(U, tool_choice=choice) if tools is None else chat(U, tools=tools, tool_choice=choice)
    assert read_chat(body).tool_choice == want


def test_chat_empty_tools_list_is_kept() -> None:
    """``tools: []`` is () (templates tell it from no tools); the choice is "none"."""
    conv = read_chat(chat(U, tools=[]))
    assert conv.tools == () and conv.tool_choice.mode == "none"


def test_billing_header_line_is_stripped_from_system_text() -> None:
    header = "x-anthropic-billing-header: cc_version=1.2; cch=abc"
    conv = read_chat(chat({"role": "system", "content": header + "\nYou are Claude Code."}, U))
    assert conv.instructions == (Instruction(role="system", parts=parts("You are Claude Code.")),)
    conv = read_chat(chat({"role": "system", "content": header}, U))
    assert conv.instructions == ()
    conv = read_messages({"max_tokens": 5, "system": [{"type": "text", "text": header}, {"type": "text", "text": "S"}], "messages": [U]})
    assert conv.instructions == (Instruction(role="system", parts=parts("S")),)
    # a developer message keeps it (vLLM strips system text only)
    assert read_chat(chat({"role": "developer", "content": header}, U)).instructions[0].text == header


CHAT_REFUSALS: list[tuple[Any, str | None, str, str]] = [
    ([1], None, "invalid_type", "request body must be a JSON object"),
    ({"model": "m"}, "messages", "missing_required_parameter", "is required"),
    (chat(), "messages", "invalid_value", "at least one message"),
    ({"messages": "hi"}, "messages", "invalid_type", "an array of messages, got a string"),
    (chat("hi"), "messages[0]", "invalid_type", "a message object"),
    (chat({"role": "bot", "content": "x"}), "messages[0].role", "invalid_value", "'system', 'developer', 'user', 'assistant' or 'tool', got 'bot'"),
    (chat({"content": "x"}), "messages[0].role", "missing_required_parameter", ""),
    (chat({"role": "function", "name": "f", "content": "x"}), "messages[0].role", "unsupported_value", "deprecated"),
    (chat({"role": "user"}), "messages[0].content", "missing_required_parameter", "a string or an array of text parts"),
    (chat({"role": "system", "content": 5}), "messages[0].content", "invalid_type", "got a number"),
    (chat(U, {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}), "messages[1].content[0]", "unsupported_value", "^messages\\[1\\]\\.content\\[0\\]: image_url parts are not supported \\(text only\\)$"),
    (chat({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "input_audio", "input_audio": {}}]}), "messages[0].content[1]", "unsupported_value", "input_audio parts are not supported"),
    (chat({"role": "user", "content": [{"type": "file", "file": {}}]}), "messages[0].content[0]", "unsupported_value", "file parts"),
    (chat({"role": "user", "content": [{"type": "video"}]}), "messages[0].content[0].type", "invalid_value", "must be 'text', got 'video'"),
    (chat({"role": "user", "content": [{"text": "a"}]}), "messages[0].content[0].type", "missing_required_parameter", ""),
    (chat({"role": "user", "content": [{"type": "text", "text": 3}]}), "messages[0].content[0].text", "invalid_type", ""),
    (chat({"role": "user", "content": [{"type": "refusal", "refusal": "x"}]}), "messages[0].content[0].type", "invalid_value", ""),
    (chat({"role": "assistant", "content": 3}), "messages[0].content", "invalid_type", "a string, an array of text parts or null"),
    (chat({"role": "assistant", "content": "a", "reasoning_content": "x", "reasoning": "y"}), "messages[0].reasoning", "invalid_value", "differs from reasoning_content"),
    (chat({"role": "assistant", "reasoning_content": 1}), "messages[0].reasoning_content", "invalid_type", ""),
    (chat({"role": "assistant", "tool_calls": {}}), "messages[0].tool_calls", "invalid_type", "an array of tool calls"),
    (chat({"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}), "messages[0].tool_calls[0].id", "missing_required_parameter", ""),
    (chat({"role": "assistant", "tool_calls": [{"id": "", "function": {"name": "f", "arguments": "{}"}}]}), "messages[0].tool_calls[0].id", "invalid_value", "non-empty"),
    (chat({"role": "assistant", "tool_calls": [{"id": "c", "type": "custom", "custom": {}}]}), "messages[0].tool_calls[0].type", "unsupported_value", "only 'function'"),
    (chat({"role": "assistant", "tool_calls": [{"id": "c"}]}), "messages[0].tool_calls[0].function", "missing_required_parameter", ""),
    (chat({"role": "assistant", "tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]}), "messages[0].tool_calls[0].function.name", "missing_required_parameter", ""),
    (chat({"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f"}}]}), "messages[0].tool_calls[0].function.arguments", "missing_required_parameter", ""),
    (chat({"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": 1}}]}), "messages[0].tool_calls[0].function.arguments", "invalid_type", "a string of JSON"),
    (chat(U, {"role": "tool", "content": "x"}), "messages[1].tool_call_id", "missing_required_parameter", ""),
    (chat(U, {"role": "tool", "tool_call_id": "call_1", "content": "x"}), "messages[1].tool_call_id", "invalid_value", "'call_1' answers no tool call of the assistant message before it .*ids: none"),
    (chat(U, {"role": "assistant", "tool_calls": [CALL]}, {"role": "tool", "tool_call_id": "call_9", "content": "x"}), "messages[2].tool_call_id", "invalid_value", "'call_9' answers no tool call.*'call_1'"),
    (chat(U, {"role": "assistant", "tool_calls": [CALL]}, U, {"role": "tool", "tool_call_id": "call_1", "content": "x"}), "messages[3].tool_call_id", "invalid_value", "answers no tool call"),
    (chat(U, {"role": "assistant", "tool_calls": [CALL]}, {"role": "tool", "tool_call_id": "call_1"}), "messages[2].content", "missing_required_parameter", ""),
    (chat(U, {"role": "assistant", "tool_calls": [CALL]}, {"role": "tool", "tool_call_id": "call_1", "content": "x", "name": 1}), "messages[2].name", "invalid_type", ""),
    (chat(U, tools={}), "tools", "invalid_type", "an array of tools"),
    (chat(U, tools=[{"type": "custom", "custom": {"name": "x"}}]), "tools[0].type", "unsupported_value", "only 'function' tools"),
    (chat(U, tools=[{"type": "function"}]), "tools[0].function", "missing_required_parameter", ""),
    (chat(U, tools=[ANTH_TOOL]), "tools[0].function", "missing_required_parameter", ""),
    (chat(U, tools=[{"type": "function", "function": {"name": "bad name"}}]), "tools[0]", "invalid_value", "^tools\\[0\\]: \\('bad name'\\) is invalid: function.name: .*128 characters"),
    (chat(U, tools=[CHAT_TOOL, CHAT_TOOL]), "tools[1]", "invalid_value", "duplicate tool name"),
    (chat(U, tools=[CHAT_TOOL], tool_choice="any"), "tool_choice", "invalid_value", "'none', 'auto' or 'required', got 'any'"),
    (chat(U, tools=[CHAT_TOOL], tool_choice=3), "tool_choice", "invalid_type", ""),
    (chat(U, tools=[CHAT_TOOL], tool_choice={"type": "tool", "name": "get_weather"}), "tool_choice.type", "invalid_value", "'function' or 'allowed_tools'"),
    (chat(U, tools=[CHAT_TOOL], tool_choice={"type": "function", "function": {"name": "nope"}}), "tool_choice", "invalid_value", "names the tool 'nope', which is not in 'tools' \\(tools: get_weather\\)"),
    (chat(U, tools=[CHAT_TOOL], tool_choice={"type": "function"}), "tool_choice.function", "missing_required_parameter", ""),
    (chat(U, tool_choice="required"), "tool_choice", "invalid_value", "'required' needs a non-empty 'tools' list"),
    (chat(U, tool_choice={"type": "function", "function": {"name": "f"}}), "tool_choice", "invalid_value", "a named tool needs"),
    (chat(U, tools=[CHAT_TOOL], tool_choice={"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}}), "tool_choice.allowed_tools.tools", "invalid_value", "at least one"),
    (chat(U, tools=[CHAT_TOOL], tool_choice={"type": "allowed_tools", "allowed_tools": {"mode": "none", "tools": []}}), "tool_choice.allowed_tools.mode", "invalid_value", ""),
    (chat(U, parallel_tool_calls="yes"), "parallel_tool_calls", "invalid_type", "a boolean"),
    (chat(U, max_tokens=0), "max_tokens", "invalid_value", "at least 1, got 0"),
    (chat(U, max_completion_tokens="5"), "max_completion_tokens", "invalid_type", ""),
    (chat(U, max_tokens=True), "max_tokens", "invalid_type", ""),
    (chat(U, temperature=2.5), "temperature", "invalid_value", "from 0 to 2, got 2.5"),
    (chat(U, top_p=-0.1), "top_p", "invalid_value", "from 0 to 1"),
    (chat(U, stop=["a", 1]), "stop[1]", "invalid_type", ""),
    (chat(U, stop=5), "stop", "invalid_type", "a string or an array of strings"),
    (chat(U, seed=1.5), "seed", "invalid_type", ""),
    (chat(U, reasoning_effort="extreme"), "reasoning_effort", "invalid_value", "'none', 'minimal', 'low', 'medium', 'high' or 'xhigh'"),
    (chat(U, chat_template_kwargs=[1]), "chat_template_kwargs", "invalid_type", "an object of template variables"),
]


@pytest.mark.parametrize(("body", "param", "code", "match"), CHAT_REFUSALS)
def test_chat_refusals(body: Any, param: str | None, code: str, match: str) -> None:
    err = refused(read_chat, body, param, code, match)
    assert err.protocol == "chat"


def test_error_messages_do_not_echo_long_values() -> None:
    err = refused(read_chat, chat({"role": "x" * 10_000, "content": "a"}), "messages[0].role", "invalid_value")
    assert len(str(err)) < 300


# ============================================================================ Responses


def resp(*items: Any, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "input": list(items), **extra}


RU = {"type": "message", "role": "user", "content": "hi"}
FC = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Rome"}'}
FC2 = {"type": "function_call", "call_id": "call_2", "name": "search", "arguments": "{}"}
CALL1 = ToolCall(id="call_1", name="get_weather", arguments='{"city": "Rome"}')
CALL2 = ToolCall(id="call_2", name="search", arguments="{}")


def test_responses_string_input_and_options() -> None:
    conv = read_responses(
        {
            "model": "m",
            "input": "Hello",
            "instructions": "Be brief.",
            "tools": [RESP_TOOL, {**RESP_TOOL2, "strict": True}],
            "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "search"}]},
            "parallel_tool_calls": False,
            "max_output_tokens": 64,
            "reasoning": {"effort": "low", "summary": "auto"},
            "temperature": 1.5,
            "top_p": 0.5,
            "store": False,
            "text": {"format": {"type": "text"}},
        }
    )
    assert conv.instructions == (Instruction(role="system", parts=parts("Be brief.")),)
    assert conv.turns == (user("Hello"),)
    assert conv.tools == SPECS and conv.strict_tools == frozenset({"search"})
    assert conv.tool_choice == ToolChoice(mode="auto", allowed=("search",), parallel=False)
    assert conv.options == GenerationOptions(max_tokens=64, temperature=1.5, top_p=0.5, reasoning_effort="low")


def test_responses_items_become_turns() -> None:
    conv = read_responses(
        resp(
            {"role": "developer", "content": [{"type": "input_text", "text": "d"}]},
            RU,
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "sum"}],
             "content": [{"type": "reasoning_text", "text": "r1"}, {"type": "reasoning_text", "text": "r2"}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "only summary"}], "encrypted_content": "gAAA"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me check.", "annotations": []}]},
            FC,
            FC2,
            {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "o2"}]},
            {"type": "function_call_output", "call_id": "call_1", "output": "o1"},
            FC,  # a new assistant turn (after the outputs)
            {"type": "function_call_output", "call_id": "call_1", "output": "again"},
            {"role": "system", "content": "late"},
            {"role": "assistant", "content": "plain"},
            {"type": "reasoning", "summary": []},
            FC2,  # reasoning splits: a new turn with that reasoning
            {"type": "function_call_output", "call_id": "call_2", "output": "o"},
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
            RU,
            {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "dangling"}]},
            instructions="I",
        )
    )
    assert conv.instructions == (
        Instruction(role="system", parts=parts("I")),
        Instruction(role="developer", parts=parts("d")),
    )
    assert conv.turns == (
        user("hi"),
        AssistantTurn(
            content="Let me check.",
            reasoning=(Reasoning(text="r1\nr2"), Reasoning(text="only summary", sealed="gAAA")),
            tool_calls=(CALL1, CALL2),
        ),
        ToolResult(call_id="call_2", parts=parts("o2")),
        ToolResult(call_id="call_1", parts=parts("o1")),
        AssistantTurn(tool_calls=(CALL1,)),
        ToolResult(call_id="call_1", parts=parts("again")),
        Instruction(role="system", parts=parts("late")),
        AssistantTurn(content="plain"),
        AssistantTurn(reasoning=(Reasoning(text=""),), tool_calls=(CALL2,)),
        ToolResult(call_id="call_2", parts=parts("o")),
        AssistantTurn(content="no"),
        user("hi"),
        AssistantTurn(reasoning=(Reasoning(text="dangling"),)),
    )


def test_responses_tool_choice_forms() -> None:
    body = resp(RU, tools=[RESP_TOOL])
    assert read_responses(body).tool_choice == ToolChoice(mode="auto")
    assert read_responses({**body, "tool_choice": "required"}).tool_choice == ToolChoice(mode="required")
    named = read_responses({**body, "tool_choice": {"type": "function", "name": "get_weather"}}).tool_choice
    assert named == ToolChoice(mode="named", allowed=("get_weather",))


RESP_REFUSALS: list[tuple[Any, str | None, str, str]] = [
    ({"model": "m"}, "input", "missing_required_parameter", "a string or an array of input items"),
    ({"input": 5}, "input", "invalid_type", ""),
    (resp(RU, previous_response_id="resp_1"), "previous_response_id", "unsupported_value", "stored conversations"),
    (resp(RU, conversation="conv_1"), "conversation", "unsupported_value", ""),
    (resp(RU, instructions=["x"]), "instructions", "invalid_type", ""),
    (resp("hi"), "input[0]", "invalid_type", "an input item object"),
    (resp({"type": "item_reference", "id": "msg_1"}), "input[0].type", "unsupported_value", "item references"),
    (resp({"type": "web_search_call", "id": "ws"}), "input[0].type", "unsupported_value", "'message', 'function_call', 'function_call_output' or 'reasoning', got 'web_search_call'"),
    (resp({"content": "x"}), "input[0].type", "missing_required_parameter", ""),
    (resp({"type": "message", "role": "tool", "content": "x"}), "input[0].role", "invalid_value", "'user', 'system', 'developer' or 'assistant'"),
    (resp({"type": "message", "content": "x"}), "input[0].role", "missing_required_parameter", ""),
    (resp({"role": "user"}), "input[0].content", "missing_required_parameter", ""),
    (resp({"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}), "input[0].content[0]", "unsupported_value", "^input\\[0\\]\\.content\\[0\\]: input_image parts are not supported \\(text only\\)$"),
    (resp({"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_file", "file_id": "f"}]}), "input[0].content[1]", "unsupported_value", "input_file parts"),
    (resp({"role": "user", "content": [{"type": "input_audio"}]}), "input[0].content[0]", "unsupported_value", "input_audio parts"),
    (resp({"role": "user", "content": [{"type": "text", "text": "a"}]}), "input[0].content[0].type", "invalid_value", "'input_text' or 'output_text', got 'text'"),
    (resp({"role": "user", "content": [{"type": "refusal", "refusal": "a"}]}), "input[0].content[0].type", "invalid_value", ""),
    (resp({"role": "assistant", "content": 1}), "input[0].content", "invalid_type", "output_text"),
    (resp({"type": "function_call", "name": "f", "arguments": "{}"}), "input[0].call_id", "missing_required_parameter", ""),
    (resp({"type": "function_call", "call_id": "c", "arguments": "{}"}), "input[0].name", "missing_required_parameter", ""),
    (resp({"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}), "input[0].arguments", "invalid_type", "a string of JSON"),
    (resp(RU, {"type": "function_call_output", "call_id": "c", "output": "x"}), "input[1].call_id", "invalid_value", "'c' answers no function_call .*calls since: none"),
    (resp(FC, RU, {"type": "function_call_output", "call_id": "call_1", "output": "x"}), "input[2].call_id", "invalid_value", "since the last user"),
    (resp(FC, {"type": "function_call_output", "output": "x"}), "input[1].call_id", "missing_required_parameter", ""),
    (resp(FC, {"type": "function_call_output", "call_id": "call_1"}), "input[1].output", "missing_required_parameter", ""),
    (resp(FC, {"type": "function_call_output", "call_id": "call_1", "output": [{"type": "input_image"}]}), "input[1].output[0]", "unsupported_value", "input_image parts"),
    (resp({"type": "reasoning", "summary": "x"}), "input[0].summary", "invalid_type", "summary_text"),
    (resp({"type": "reasoning", "summary": [{"type": "text", "text": "x"}]}), "input[0].summary[0].type", "invalid_value", ""),
    (resp({"type": "reasoning", "summary": [], "encrypted_content": 1}), "input[0].encrypted_content", "invalid_type", ""),
    (resp(RU, tools=[{"type": "web_search"}]), "tools[0].type", "unsupported_value", "only 'function' tools"),
    (resp(RU, tools=[{"name": "f", "parameters": {}}]), "tools[0].type", "missing_required_parameter", ""),
    (resp(RU, tools=[CHAT_TOOL]), "tools[0]", "invalid_value", "flat"),
    (resp(RU, tools=[{"type": "function"}]), "tools[0].name", "missing_required_parameter", ""),
    (resp(RU, tools=[{"type": "function", "name": "f", "parameters": []}]), "tools[0]", "invalid_value", "is invalid"),
    (resp(RU, tools=[RESP_TOOL], tool_choice={"type": "web_search_preview"}), "tool_choice.type", "invalid_value", "hosted tools are not supported"),
    (resp(RU, tools=[RESP_TOOL], tool_choice={"type": "function", "function": {"name": "get_weather"}}), "tool_choice.name", "missing_required_parameter", ""),
    (resp(RU, tools=[RESP_TOOL], tool_choice={"type": "function", "name": "nope"}), "tool_choice", "invalid_value", "not in 'tools'"),
    (resp(RU, tools=[RESP_TOOL], tool_choice={"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "nope"}]}), "tool_choice", "invalid_value", "'nope'"),
    (resp(RU, tools=[RESP_TOOL], tool_choice={"type": "allowed_tools", "mode": "auto", "tools": [{"name": "get_weather"}]}), "tool_choice.tools[0].type", "missing_required_parameter", ""),
    (resp(RU, max_output_tokens=0), "max_output_tokens", "invalid_value", ""),
    (resp(RU, reasoning="high"), "reasoning", "invalid_type", "an object"),
    (resp(RU, reasoning={"effort": "max"}), "reasoning.effort", "invalid_value", ""),
    (resp(RU, temperature="hot"), "temperature", "invalid_type", ""),
]


@pytest.mark.parametrize(("body", "param", "code", "match"), RESP_REFUSALS)
def test_responses_refusals(body: Any, param: str | None, code: str, match: str) -> None:
    err = refused(read_responses, body, param, code, match)
    assert err.protocol == "responses"


# ============================================================================ Anthropic Messages


def anth(*messages: Any, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 100, "messages": list(messages), **extra}


TU = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Zürich"}}
AU = {"role": "user", "content": "hi"}


def test_anthropic_reads_blocks_and_options() -> None:
    conv = read_messages(
        anth(
            {"role": "user", "content": [{"type": "text", "text": "Weather?", "cache_control": {"type": "ephemeral"}}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "call it", "signature": "dfs1.abc"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "text", "text": "Checking."},
                    TU,
                    {"type": "tool_use", "id": "toolu_2", "name": "search", "input": {}},
                    {"type": "text", "text": "More."},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True},
                    {"type": "text", "text": "Thanks"},
                ],
            },
            {"role": "user", "content": "And Oslo?"},
            {"role": "assistant", "content": "Oslo is"},
            system=[{"type": "text", "text": "S1"}, {"type": "text", "text": "S2"}],
            tools=[ANTH_TOOL, {**ANTH_TOOL2, "type": "custom", "strict": True}],
            tool_choice={"type": "any", "disable_parallel_tool_use": True},
            stop_sequences=["\n\nHuman:"],
            temperature=1,
            top_p=0.9,
            thinking={"type": "enabled", "budget_tokens": 2048},
            metadata={"user_id": "u"},
        )
    )
    assert conv.instructions == (Instruction(role="system", parts=parts("S1", "S2")),)
    assert conv.turns == (
        user("Weather?"),
        AssistantTurn(
            content="Checking.\nMore.",
            reasoning=(Reasoning(text="call it", signature="dfs1.abc"), Reasoning(sealed="opaque", redacted=True)),
            tool_calls=(
                ToolCall(id="toolu_1", name="get_weather", arguments='{"city": "Zürich"}'),
                ToolCall(id="toolu_2", name="search", arguments="{}"),
            ),
        ),
        ToolResult(call_id="toolu_1", parts=parts("a", "b")),
        ToolResult(call_id="toolu_2", parts=(), is_error=True),
        user("Thanks"),
        user("And Oslo?"),
        AssistantTurn(content="Oslo is"),
    )
    assert conv.tools == SPECS and conv.strict_tools == frozenset({"search"})
    assert conv.tool_choice == ToolChoice(mode="required", parallel=False)
    assert conv.options == GenerationOptions(
        max_tokens=100, temperature=1.0, top_p=0.9, stop=("\n\nHuman:",), thinking=True, thinking_budget=2048
    )


@pytest.mark.parametrize(
    ("choice", "want"),
    [
        (None, ToolChoice(mode="auto")),
        ({"type": "auto"}, ToolChoice(mode="auto")),
        ({"type": "none"}, ToolChoice(mode="none")),
        ({"type": "tool", "name": "get_weather", "disable_parallel_tool_use": False}, ToolChoice(mode="named", allowed=("get_weather",))),
    ],
)
def test_anthropic_tool_choice(choice: Any, want: ToolChoice) -> None:
    body = anth(AU, tools=[ANTH_TOOL]) if choice is None else anth(AU, tools=[ANTH_TOOL], tool_choice=choice)
    assert read_messages(body).tool_choice == want


@pytest.mark.parametrize(
    ("thinking", "flag", "budget"),
    [({"type": "disabled"}, False, None), ({"type": "adaptive"}, True, None), (None, None, None)],
)
def test_anthropic_thinking(thinking: Any, flag: bool | None, budget: int | None) -> None:
    opts = read_messages(anth(AU, thinking=thinking)).options
    assert (opts.thinking, opts.thinking_budget) == (flag, budget)


def test_anthropic_final_assistant_may_be_empty_and_system_string() -> None:
    conv = read_messages(anth(AU, {"role": "assistant", "content": []}, system="S"))
    assert conv.instructions == (Instruction(role="system", parts=parts("S")),)
    assert conv.turns == (user("hi"), AssistantTurn())


ANTH_REFUSALS: list[tuple[Any, str | None, str, str]] = [
    ("x", None, "invalid_type", ""),
    ({"messages": [AU]}, "max_tokens", "missing_required_parameter", "a positive integer"),
    (anth(AU, max_tokens=0), "max_tokens", "invalid_value", ""),
    ({"max_tokens": 5}, "messages", "missing_required_parameter", ""),
    (anth(), "messages", "invalid_value", "at least one"),
    (anth({"role": "tool", "content": "x"}), "messages[0].role", "invalid_value", "got 'tool'"),
    (anth({"role": "user"}), "messages[0].content", "missing_required_parameter", ""),
    (anth({"role": "user", "content": 5}), "messages[0].content", "invalid_type", ""),
    (anth({"role": "user", "content": ""}), "messages[0].content", "invalid_value", "must not be empty"),
    (anth({"role": "assistant", "content": []}, AU), "messages[0].content", "invalid_value", "only a final assistant"),
    (anth({"role": "user", "content": [{"type": "text", "text": ""}]}), "messages[0].content[0].text", "invalid_value", "non-empty"),
    (anth({"role": "user", "content": [{"type": "image", "source": {}}]}), "messages[0].content[0]", "unsupported_value", "^messages\\[0\\]\\.content\\[0\\]: image blocks are not supported \\(text only\\)$"),
    (anth({"role": "user", "content": [{"type": "document", "source": {}}]}), "messages[0].content[0]", "unsupported_value", "document blocks"),
    (anth({"role": "user", "content": [{"type": "thinking", "thinking": "x", "signature": "s"}]}), "messages[0].content[0].type", "invalid_value", "'text' or 'tool_result', got 'thinking'"),
    (anth({"role": "user", "content": ["hi"]}), "messages[0].content[0]", "invalid_type", "a content block"),
    (anth(AU, {"role": "assistant", "content": [{"type": "thinking", "thinking": "x"}]}), "messages[1].content[0].signature", "missing_required_parameter", ""),
    (anth(AU, {"role": "assistant", "content": [{"type": "thinking", "signature": "s"}]}), "messages[1].content[0].thinking", "missing_required_parameter", ""),
    (anth(AU, {"role": "assistant", "content": [{"type": "redacted_thinking"}]}), "messages[1].content[0].data", "missing_required_parameter", ""),
    (anth(AU, {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "{}"}]}), "messages[1].content[0].input", "invalid_type", "an object"),
    (anth(AU, {"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}), "messages[1].content[0].id", "missing_required_parameter", ""),
    (anth(AU, {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}), "messages[1].content[0].type", "invalid_value", "'text', 'thinking', 'redacted_thinking' or 'tool_use'"),
    (anth(AU, {"role": "assistant", "content": [{"type": "server_tool_use", "id": "x"}]}), "messages[1].content[0].type", "invalid_value", ""),
    (anth(AU, {"role": "assistant", "content": [TU]}, {"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "tool_result", "tool_use_id": "toolu_1"}]}), "messages[2].content[1]", "invalid_value", "must come before any other content"),
    (anth(AU, {"role": "assistant", "content": [TU]}, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9"}]}), "messages[2].content[0].tool_use_id", "invalid_value", "'toolu_9' answers no tool_use block .*'toolu_1'"),
    (anth(AU, {"role": "assistant", "content": [TU]}, AU, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]}), "messages[3].content[0].tool_use_id", "invalid_value", "just before"),
    (anth({"role": "user", "content": [{"type": "tool_result"}]}), "messages[0].content[0].tool_use_id", "missing_required_parameter", ""),
    (anth(AU, {"role": "assistant", "content": [TU]}, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "image", "source": {}}]}]}), "messages[2].content[0].content[0]", "unsupported_value", "image blocks"),
    (anth(AU, {"role": "assistant", "content": [TU]}, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": 5}]}), "messages[2].content[0].content", "invalid_type", ""),
    (anth(AU, {"role": "assistant", "content": [TU]}, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "is_error": "no"}]}), "messages[2].content[0].is_error", "invalid_type", ""),
    (anth(AU, system=[{"type": "image", "source": {}}]), "system[0]", "unsupported_value", "image blocks"),
    (anth(AU, system=5), "system", "invalid_type", ""),
    (anth(AU, tools=[{"type": "web_search_20250305", "name": "web_search"}]), "tools[0].type", "unsupported_value", "only custom tools"),
    (anth(AU, tools=[{"name": "f"}]), "tools[0].input_schema", "missing_required_parameter", ""),
    (anth(AU, tools=[{"input_schema": {}}]), "tools[0].name", "missing_required_parameter", ""),
    (anth(AU, tools=[CHAT_TOOL]), "tools[0].type", "unsupported_value", "only custom tools"),
    (anth(AU, tools=[{"name": "bad name", "input_schema": {}}]), "tools[0]", "invalid_value", "is invalid"),
    (anth(AU, tools=[ANTH_TOOL], tool_choice="auto"), "tool_choice", "invalid_type", "an object with a 'type'"),
    (anth(AU, tools=[ANTH_TOOL], tool_choice={"type": "required"}), "tool_choice.type", "invalid_value", "'auto', 'any', 'tool' or 'none'"),
    (anth(AU, tools=[ANTH_TOOL], tool_choice={"type": "tool"}), "tool_choice.name", "missing_required_parameter", ""),
    (anth(AU, tools=[ANTH_TOOL], tool_choice={"type": "tool", "name": "x"}), "tool_choice", "invalid_value", "not in 'tools'"),
    (anth(AU, tool_choice={"type": "any"}), "tool_choice", "invalid_value", "needs a non-empty 'tools'"),
    (anth(AU, tools=[ANTH_TOOL], tool_choice={"type": "auto", "disable_parallel_tool_use": 1}), "tool_choice.disable_parallel_tool_use", "invalid_type", ""),
    (anth(AU, thinking={"type": "enabled"}), "thinking.budget_tokens", "missing_required_parameter", "at least 1024"),
    (anth(AU, thinking={"type": "enabled", "budget_tokens": 100}), "thinking.budget_tokens", "invalid_value", "at least 1024"),
    (anth(AU, thinking={"type": "on"}), "thinking.type", "invalid_value", "'enabled', 'disabled' or 'adaptive'"),
    (anth(AU, thinking=True), "thinking", "invalid_type", ""),
    (anth(AU, temperature=1.5), "temperature", "invalid_value", "from 0 to 1"),
    (anth(AU, stop_sequences="END"), "stop_sequences", "invalid_value", "an array of strings"),
    (anth(AU, stop_sequences=[1]), "stop_sequences[0]", "invalid_type", ""),
]


@pytest.mark.parametrize(("body", "param", "code", "match"), ANTH_REFUSALS)
def test_anthropic_refusals(body: Any, param: str | None, code: str, match: str) -> None:
    err = refused(read_messages, body, param, code, match)
    assert err.protocol == "messages"


def test_anthropic_error_body_has_no_param() -> None:
    err = refused(read_messages, anth({"role": "user", "content": [{"type": "image", "source": {}}]}), "messages[0].content[0]")
    assert err.body() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "messages[0].content[0]: image blocks are not supported (text only)"},
    }


def test_readers_ignore_unknown_keys() -> None:
    """Extra keys at every level are ignored, as the APIs tolerate them."""
    extra = {"x_unknown": {"deep": [1]}}
    assert read_chat(chat({**U, **extra}, **extra)) == read_chat(chat(U))
    assert read_responses(resp({**RU, **extra}, **extra)) == read_responses(resp(RU))
    assert read_messages(anth({**AU, **extra}, **extra)) == read_messages(anth(AU))


def test_anthropic_system_messages_inside_messages_are_instructions_in_place() -> None:
    """Claude Code sends system messages between turns (not in Anthropic's documented API): read as instructions
    where they stand, their billing header stripped like the top-level system's."""
    conv = read_messages(anth(AU, {"role": "assistant", "content": "ok"},
                              {"role": "system", "content": [{"type": "text", "text": "# Environment\ncwd: /x",
                                                              "cache_control": {"type": "ephemeral"}}]},
                              {"role": "user", "content": "go on"}))
    kinds = [type(t).__name__ for t in conv.turns]
    assert kinds == ["UserTurn", "AssistantTurn", "Instruction", "UserTurn"]
    ins = conv.turns[2]
    assert isinstance(ins, Instruction) and ins.role == "system" and ins.text == "# Environment\ncwd: /x"


def test_anthropic_tool_reference_blocks_in_a_tool_result_are_left_out() -> None:
    """Claude Code's tool search returns tool_reference blocks: the tools are in the prompt already."""
    call = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ToolSearch", "input": {}}]}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
        {"type": "tool_reference", "tool_name": "WebFetch"}, {"type": "text", "text": "found 1"}]}]}
    conv = read_messages(anth(AU, call, result))
    (res,) = [t for t in conv.turns if isinstance(t, ToolResult)]
    assert res.call_id == "t1" and res.text == "found 1"
    only = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
        {"type": "tool_reference", "tool_name": "WebFetch"}]}]}
    (res2,) = [t for t in read_messages(anth(AU, call, only)).turns if isinstance(t, ToolResult)]
    assert res2.text == ""
