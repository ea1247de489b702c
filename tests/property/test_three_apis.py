"""One conversation, three APIs: a random canonical conversation written as a Chat Completions, a
Responses and an Anthropic Messages body reads back to itself through each reader.

Only what all three APIs can say is generated: one system instruction (text parts) first; user
turns of non-empty text parts; assistant turns (never two in a row: Responses joins a function call
to the assistant message before it) with text, at most one reasoning block and tool calls whose
arguments are JSON objects; tool results right after the turn whose calls they answer (some calls
may stay unanswered), text only; tools; tool_choice none/auto/required/named with the parallel
flag; max_tokens, temperature (0 to 1) and top_p. Anthropic thinking blocks need a signature: its
writer gives each one ``"sig"``, and the conversation read back from it has that signature (the
other APIs carry none). Argument text is ``json.dumps(arguments, ensure_ascii=False)``, the form
the Anthropic reader writes from ``input``, so it compares exactly. Each body goes through JSON
text first, as a server receives it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

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
    Turn,
    UserTurn,
)
from deltaflow.prompt.messages import template_messages
from deltaflow.prompt.readers import read_chat, read_messages, read_responses
from deltaflow.tools import ToolSpec

SIGNATURE = "sig"

# -------------------------------------------------------------------------------------------- strategies

texts = st.text(min_size=1, max_size=12).filter(lambda s: not s.startswith("x-anthropic-billing-header"))
part_lists = st.lists(texts.map(lambda t: TextPart(text=t)), min_size=1, max_size=3).map(tuple)
names = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)
json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
arguments = st.dictionaries(st.text(max_size=6), json_values, max_size=4)
schemas = st.dictionaries(names, st.sampled_from(["string", "integer", "boolean"]), max_size=3).map(
    lambda props: {"type": "object", "properties": {k: {"type": v} for k, v in props.items()}}
)


@st.composite
def tool_specs(draw: st.DrawFn) -> tuple[ToolSpec, ...] | None:
    if draw(st.booleans()):
        return None
    chosen = draw(st.lists(names, max_size=3, unique=True))
    return tuple(
        ToolSpec(name=n, description=draw(st.none() | texts), parameters=draw(schemas)) for n in chosen
    )


@dataclass(frozen=True)
class Choice:
    """A request's tool_choice as generated: the mode sent (None: none sent), the parallel flag sent."""

    mode: str | None
    name: str | None
    parallel: bool | None

    def canonical(self, tools: tuple[ToolSpec, ...] | None) -> ToolChoice:
        mode = self.mode if self.mode is not None else ("auto" if tools else "none")
        if mode == "auto" and not tools:
            mode = "none"
        allowed = (self.name,) if self.name is not None else None
        return ToolChoice(mode=mode, allowed=allowed, parallel=True if self.parallel is None else self.parallel)  # type: ignore[arg-type]


@st.composite
def choices(draw: st.DrawFn, tools: tuple[ToolSpec, ...] | None) -> Choice:
    modes: list[str | None] = [None, "none", "auto"] + (["required", "named"] if tools else [])
    mode = draw(st.sampled_from(modes))
    name = draw(st.sampled_from([t.name for t in tools or ()])) if mode == "named" else None
    parallel = draw(st.none() | st.booleans()) if mode is not None else None
    return Choice(mode, name, parallel)


@st.composite
def turn_lists(draw: st.DrawFn) -> tuple[Turn, ...]:
    turns: list[Turn] = []
    serial = 0
    for _ in range(draw(st.integers(1, 6))):
        if turns and isinstance(turns[-1], AssistantTurn) or draw(st.booleans()):
            turns.append(UserTurn(parts=draw(part_lists)))
            continue
        content = draw(st.none() | texts)
        thought = draw(st.none() | st.text(max_size=12))
        calls: list[ToolCall] = []
        for _ in range(draw(st.integers(0, 3))):
            serial += 1
            calls.append(
                ToolCall(
                    id=draw(st.from_regex(r"[A-Za-z0-9_-]{1,8}", fullmatch=True)) + f"_{serial}",
                    name=draw(names),
                    arguments=json.dumps(draw(arguments), ensure_ascii=False),
                )
            )
        if content is None and thought is None and not calls:
            content = draw(texts)
        turns.append(
            AssistantTurn(
                content=content,
                reasoning=(Reasoning(text=thought),) if thought is not None else (),
                tool_calls=tuple(calls),
            )
        )
        answered = draw(st.permutations(calls))[: draw(st.integers(0, len(calls)))]
        for c in answered:
            result_parts = draw(st.lists(texts.map(lambda t: TextPart(text=t)), max_size=2).map(tuple))
            turns.append(ToolResult(call_id=c.id, parts=result_parts))
    return tuple(turns)


@dataclass(frozen=True)
class Case:
    conversation: Conversation
    choice: Choice


@st.composite
def cases(draw: st.DrawFn) -> Case:
    system = draw(st.none() | part_lists)
    tools = draw(tool_specs())
    choice = draw(choices(tools))
    options = GenerationOptions(
        max_tokens=draw(st.integers(1, 10**6)),
        temperature=draw(st.none() | st.floats(0, 1)),
        top_p=draw(st.none() | st.floats(0, 1)),
    )
    conv = Conversation(
        instructions=(Instruction(role="system", parts=system),) if system else (),
        turns=draw(turn_lists()),
        tools=tools,
        tool_choice=choice.canonical(tools),
        options=options,
    )
    return Case(conv, choice)


# -------------------------------------------------------------------------------------------- writers


def _text_or_parts(parts: tuple[TextPart, ...], kind: str) -> Any:
    if len(parts) == 1:
        return parts[0].text
    return [{"type": kind, "text": p.text} for p in parts]


def _sampling(conv: Conversation) -> dict[str, Any]:
    o = conv.options
    return {k: v for k, v in (("temperature", o.temperature), ("top_p", o.top_p)) if v is not None}


def write_chat(case: Case) -> dict[str, Any]:
    conv = case.conversation
    messages: list[dict[str, Any]] = [
        {"role": i.role, "content": _text_or_parts(i.parts, "text")} for i in conv.instructions
    ]
    for t in conv.turns:
        if isinstance(t, UserTurn):
            messages.append({"role": "user", "content": _text_or_parts(t.parts, "text")})
        elif isinstance(t, AssistantTurn):
            m: dict[str, Any] = {"role": "assistant", "content": t.content}
            if t.reasoning:
                m["reasoning_content"] = t.reasoning[0].text
            if t.tool_calls:
                m["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in t.tool_calls
                ]
            messages.append(m)
        elif isinstance(t, ToolResult):
            messages.append({"role": "tool", "tool_call_id": t.call_id, "content": [{"type": "text", "text": p.text} for p in t.parts]})
    body: dict[str, Any] = {"model": "m", "messages": messages, **_sampling(conv)}
    key = "max_tokens" if (conv.options.max_tokens or 0) % 2 else "max_completion_tokens"
    body[key] = conv.options.max_tokens
    if conv.tools is not None:
        body["tools"] = [
            {"type": "function", "function": {"name": s.name, "parameters": s.parameters}
             | ({"description": s.description} if s.description is not None else {})}
            for s in conv.tools
        ]
    ch = case.choice
    if ch.mode is not None:
        body["tool_choice"] = {"type": "function", "function": {"name": ch.name}} if ch.mode == "named" else ch.mode
    if ch.parallel is not None:
        body["parallel_tool_calls"] = ch.parallel
    return body


def write_responses(case: Case) -> dict[str, Any]:
    conv = case.conversation
    body: dict[str, Any] = {"model": "m", "max_output_tokens": conv.options.max_tokens, **_sampling(conv)}
    items: list[dict[str, Any]] = []
    for i in conv.instructions:
        if len(i.parts) == 1:
            body["instructions"] = i.parts[0].text
        else:
            items.append({"type": "message", "role": i.role, "content": _text_or_parts(i.parts, "input_text")})
    for t in conv.turns:
        if isinstance(t, UserTurn):
            items.append({"type": "message", "role": "user", "content": _text_or_parts(t.parts, "input_text")})
        elif isinstance(t, AssistantTurn):
            for r in t.reasoning:
                items.append({"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": r.text}]})
            if t.content is not None:
                items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": t.content, "annotations": []}]})
            for c in t.tool_calls:
                items.append({"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments})
        elif isinstance(t, ToolResult):
            output: Any = t.parts[0].text if len(t.parts) == 1 else [{"type": "input_text", "text": p.text} for p in t.parts]
            items.append({"type": "function_call_output", "call_id": t.call_id, "output": output})
    body["input"] = items
    if conv.tools is not None:
        body["tools"] = [
            {"type": "function", "name": s.name, "parameters": s.parameters}
            | ({"description": s.description} if s.description is not None else {})
            for s in conv.tools
        ]
    ch = case.choice
    if ch.mode is not None:
        body["tool_choice"] = {"type": "function", "name": ch.name} if ch.mode == "named" else ch.mode
    if ch.parallel is not None:
        body["parallel_tool_calls"] = ch.parallel
    return body


def write_anthropic(case: Case) -> dict[str, Any]:
    conv = case.conversation
    body: dict[str, Any] = {"model": "m", "max_tokens": conv.options.max_tokens, **_sampling(conv)}
    if conv.instructions:
        body["system"] = _text_or_parts(conv.instructions[0].parts, "text")
    messages: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []  # tool_result blocks waiting for the user message they open
    for t in conv.turns:
        if isinstance(t, ToolResult):
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": t.call_id}
            if t.parts:
                block["content"] = [{"type": "text", "text": p.text} for p in t.parts]
            pending.append(block)
            continue
        if isinstance(t, UserTurn):
            if pending:
                messages.append({"role": "user", "content": [*pending, *({"type": "text", "text": p.text} for p in t.parts)]})
                pending = []
            else:
                messages.append({"role": "user", "content": _text_or_parts(t.parts, "text")})
            continue
        if pending:
            messages.append({"role": "user", "content": pending})
            pending = []
        assert isinstance(t, AssistantTurn)
        blocks: list[dict[str, Any]] = [
            {"type": "thinking", "thinking": r.text, "signature": SIGNATURE} for r in t.reasoning
        ]
        if t.content is not None:
            blocks.append({"type": "text", "text": t.content})
        blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": json.loads(c.arguments)} for c in t.tool_calls]
        messages.append({"role": "assistant", "content": blocks})
    if pending:
        messages.append({"role": "user", "content": pending})
    body["messages"] = messages
    if conv.tools is not None:
        body["tools"] = [
            {"name": s.name, "input_schema": s.parameters}
            | ({"description": s.description} if s.description is not None else {})
            for s in conv.tools
        ]
    ch = case.choice
    if ch.mode is not None:
        choice: dict[str, Any] = {"type": {"required": "any", "named": "tool"}.get(ch.mode, ch.mode)}
        if ch.name is not None:
            choice["name"] = ch.name
        if ch.parallel is not None:
            choice["disable_parallel_tool_use"] = not ch.parallel
        body["tool_choice"] = choice
    return body


def signed(conv: Conversation) -> Conversation:
    """The conversation as Anthropic carries it: every thinking block signed."""
    turns = tuple(
        AssistantTurn(
            content=t.content,
            reasoning=tuple(Reasoning(text=r.text, signature=SIGNATURE) for r in t.reasoning),
            tool_calls=t.tool_calls,
        )
        if isinstance(t, AssistantTurn)
        else t
        for t in conv.turns
    )
    return Conversation(
        instructions=conv.instructions,
        turns=turns,
        tools=conv.tools,
        strict_tools=conv.strict_tools,
        tool_choice=conv.tool_choice,
        options=conv.options,
    )


def over_the_wire(body: dict[str, Any]) -> Any:
    return json.loads(json.dumps(body, ensure_ascii=False))


# -------------------------------------------------------------------------------------------- properties


@given(cases())
def test_each_api_reads_back_the_same_conversation(case: Case) -> None:
    conv = case.conversation
    from_chat = read_chat(over_the_wire(write_chat(case)))
    from_responses = read_responses(over_the_wire(write_responses(case)))
    from_anthropic = read_messages(over_the_wire(write_anthropic(case)))
    assert from_chat == conv
    assert from_responses == conv
    assert from_anthropic == signed(conv)
    # and the templates see one conversation, whichever API it came in
    want = template_messages(conv)
    assert template_messages(from_responses) == want
    assert template_messages(from_anthropic) == want
