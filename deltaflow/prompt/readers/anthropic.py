"""Anthropic Messages body -> :class:`~deltaflow.prompt.conversation.Conversation`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from ..conversation import (
    AssistantTurn,
    Conversation,
    GenerationOptions,
    Reasoning,
    TextPart,
    ToolCall,
    ToolChoiceMode,
    ToolResult,
    Turn,
    UserTurn,
)
from ._common import (
    BAD_VALUE,
    UNSUPPORTED,
    Checks,
    arguments_text,
    assistant_text,
    at,
    calls_text,
    choices,
    finish,
    instruction,
    read_tools,
    short,
    stop_sequences,
    tool_choice,
)

__all__ = ("read_messages",)

_ROLES = ("user", "assistant", "system")
_USER_BLOCKS = ("text", "tool_result")
_ASSISTANT_BLOCKS = ("text", "thinking", "redacted_thinking", "tool_use")
_MEDIA = frozenset({"image", "document", "file", "audio", "container_upload"})
_TOOL_CHOICES = ("auto", "any", "tool", "none")
_THINKING = ("enabled", "disabled", "adaptive")
_MIN_BUDGET = 1024


def read_messages(body: Any) -> Conversation:
    """Read an Anthropic Messages request body.

    Read: ``system`` (a string or text blocks), ``messages`` (roles ``user``
    and ``assistant``, and ``system`` between them as Claude Code sends it,
    read as an instruction in place; content a string or blocks: ``text``, ``tool_use``,
    ``tool_result`` (string or text-block content, ``is_error``),
    ``thinking`` (with its ``signature``), ``redacted_thinking``), ``tools``
    (custom tools: ``name``, ``description``, ``input_schema``),
    ``tool_choice`` (``auto``, ``any``, ``tool``, ``none``;
    ``disable_parallel_tool_use``), ``max_tokens`` (required),
    ``stop_sequences``, ``temperature``, ``top_p`` and ``thinking``. Other
    keys (``metadata``, ``cache_control`` on blocks, ...) are ignored.

    A user message's ``tool_result`` blocks become
    :class:`~deltaflow.prompt.conversation.ToolResult` turns, followed by a
    user turn with its other blocks (if any); as the API requires, they come
    first in the message and answer ``tool_use`` blocks of the assistant
    message just before. Consecutive messages of one role stay separate
    turns (the API would join them; templates render them as sent). Refused
    as the API refuses them: empty content (except a final assistant
    message), empty text blocks, a ``thinking`` block without its
    ``signature``, a ``budget_tokens`` under 1024. Tool ids are not held to
    the API's ``^[a-zA-Z0-9_-]+$``: the ids deltaflow's own responses carry
    are the model's (``functions.get_weather:0`` for Kimi K2) and must come back.

    Args:
        body: the decoded JSON body.

    Returns:
        The conversation.

    Raises:
        RequestError: a field of the wrong type, a missing required field
            (``messages``, ``max_tokens``, ...), an unknown role or block
            type, an image/document block (text only), a ``tool_result``
            answering no ``tool_use``, a ``tool_choice`` naming a tool not in
            ``tools``; ``param`` names the field.
    """
    c = Checks("messages")
    body = c.body(body)
    turns: list[Turn] = []
    system = body.get("system")
    if system is not None:
        if isinstance(system, str):
            parts: tuple[TextPart, ...] = (TextPart(text=system),)
        else:
            blocks = c.array(system, "system", "a string or an array of text blocks")
            parts = c.parts(blocks, "system", text={"text": "text"}, refused=_MEDIA, noun="blocks")
        ins = instruction("system", parts) if parts else None
        if ins is not None:
            turns.append(ins)
    messages = c.array(body.get("messages"), "messages", "an array of messages")
    if not messages:
        c.fail("messages", "must hold at least one message")
    previous: tuple[ToolCall, ...] = ()  # the tool_use blocks of the message before, when it is an assistant's
    last = len(messages) - 1
    for i, raw in enumerate(messages):
        path = at("messages", i)
        m = c.obj(raw, path, "a message object ({'role', 'content'})")
        role = c.one_of(m.get("role"), at(path, "role"), _ROLES)
        content_path = at(path, "content")
        content = m.get("content")
        if not isinstance(content, (str, list, tuple)):
            c.wrong(content_path, "a string or an array of content blocks", content)
        if not content and not (role == "assistant" and i == last):
            c.fail(content_path, "must not be empty (only a final assistant message may be)")
        if role == "system":
            # Not in Anthropic's documented API, but Claude Code sends mid-conversation system messages
            # (its environment notes): an instruction at that point of the conversation, as the
            # template renders a system turn there (or folds it, where it has no system role).
            parts = c.parts(content if not isinstance(content, str) else [{"type": "text", "text": content}],
                            content_path, text={"text": "text"}, refused=_MEDIA, noun="blocks")
            ins = instruction("system", parts) if parts else None
            if ins is not None:
                turns.append(ins)
            previous = ()
        elif role == "user":
            _user(c, content, content_path, previous, turns)
            previous = ()
        else:
            turn = _assistant(c, content, content_path)
            turns.append(turn)
            previous = turn.tool_calls
    tools, strict = _tools(c, body.get("tools"))
    mode, allowed, parallel = _tool_choice(c, body.get("tool_choice"))
    return finish(
        turns,
        tools=tools,
        strict=strict,
        choice=tool_choice(c, mode, allowed, parallel, tools),
        options=_options(c, body),
    )


def _text(c: Checks, block: Mapping[str, Any], path: str) -> str:
    text = c.text_of(block, path, "text")
    if not text:
        c.fail(at(path, "text"), "text content blocks must be non-empty")
    return text


def _user(c: Checks, content: Any, path: str, calls: Sequence[ToolCall], turns: list[Turn]) -> None:
    if isinstance(content, str):
        turns.append(UserTurn(parts=(TextPart(text=content),)))
        return
    parts: list[TextPart] = []
    for j, raw in enumerate(content):
        p = at(path, j)
        block = c.obj(raw, p, "a content block (an object with a 'type')")
        kind = block.get("type")
        if kind == "text":
            parts.append(TextPart(text=_text(c, block, p)))
        elif kind == "tool_result":
            if parts:
                c.fail(p, "tool_result blocks must come before any other content of a user message")
            turns.append(_tool_result(c, block, p, calls))
        else:
            c.bad_part(block, p, _USER_BLOCKS, _MEDIA, "blocks")
    if parts:
        turns.append(UserTurn(parts=tuple(parts)))


def _tool_result(c: Checks, block: Mapping[str, Any], path: str, calls: Sequence[ToolCall]) -> ToolResult:
    id_path = at(path, "tool_use_id")
    call_id = c.name(block.get("tool_use_id"), id_path)
    if all(call.id != call_id for call in calls):
        c.fail(
            id_path,
            f"{short(call_id)} answers no tool_use block of the assistant message just before "
            f"(its tool_use ids: {calls_text(calls)})",
        )
    content = block.get("content")
    content_path = at(path, "content")
    parts: tuple[TextPart, ...]
    if content is None:
        parts = ()
    elif isinstance(content, str):
        parts = (TextPart(text=content),)
    elif isinstance(content, (list, tuple)):
        # Claude Code's tool search answers with tool_reference blocks ("this tool is loaded now"): every
        # offered tool is in the prompt already, so they carry nothing to render and are left out.
        kept = [b for b in content if not (isinstance(b, Mapping) and b.get("type") == "tool_reference")]
        parts = c.parts(kept, content_path, text={"text": "text"}, refused=_MEDIA, noun="blocks") if kept else ()
    else:
        c.wrong(content_path, "a string or an array of text blocks", content)
    is_error = c.opt_bool(block.get("is_error"), at(path, "is_error"))
    return ToolResult(call_id=call_id, parts=parts, is_error=bool(is_error))


def _assistant(c: Checks, content: Any, path: str) -> AssistantTurn:
    if isinstance(content, str):
        return AssistantTurn(content=content or None)
    texts: list[str] = []
    reasoning: list[Reasoning] = []
    calls: list[ToolCall] = []
    for j, raw in enumerate(content):
        p = at(path, j)
        block = c.obj(raw, p, "a content block (an object with a 'type')")
        kind = block.get("type")
        if kind == "text":
            texts.append(_text(c, block, p))
        elif kind == "thinking":
            reasoning.append(
                Reasoning(
                    text=c.text_of(block, p, "thinking"),
                    signature=c.string(block.get("signature"), at(p, "signature")),
                )
            )
        elif kind == "redacted_thinking":
            reasoning.append(Reasoning(sealed=c.string(block.get("data"), at(p, "data")), redacted=True))
        elif kind == "tool_use":
            args = block.get("input")
            if not isinstance(args, Mapping):
                c.wrong(at(p, "input"), "an object (the tool's arguments)", args)
            calls.append(
                ToolCall(
                    id=c.name(block.get("id"), at(p, "id")),
                    name=c.name(block.get("name"), at(p, "name")),
                    arguments=arguments_text(args),
                )
            )
        else:
            c.bad_part(block, p, _ASSISTANT_BLOCKS, _MEDIA, "blocks")
    return AssistantTurn(content=assistant_text(texts), reasoning=tuple(reasoning), tool_calls=tuple(calls))


def _tools(c: Checks, raw: Any) -> tuple[Any, frozenset[str]]:
    if raw is not None:
        for k, entry in enumerate(c.array(raw, "tools", "an array of tools")):
            p = at("tools", k)
            t = c.obj(entry, p, "a tool object ({'name', 'description', 'input_schema'})")
            kind = t.get("type")
            if kind is not None and kind != "custom":
                c.fail(
                    at(p, "type"),
                    f"only custom tools ({{'name', 'input_schema'}}) are supported, got {short(kind)}",
                    UNSUPPORTED,
                )
            c.name(t.get("name"), at(p, "name"))
            c.obj(t.get("input_schema"), at(p, "input_schema"), "a JSON schema object")
    return read_tools(c, raw)


def _tool_choice(c: Checks, raw: Any) -> tuple[ToolChoiceMode | None, tuple[str, ...] | None, bool | None]:
    if raw is None:
        return None, None, None
    choice = c.obj(raw, "tool_choice", f"an object with a 'type' ({choices(_TOOL_CHOICES)})")
    kind = c.one_of(choice.get("type"), "tool_choice.type", _TOOL_CHOICES)
    disable = c.opt_bool(choice.get("disable_parallel_tool_use"), "tool_choice.disable_parallel_tool_use")
    parallel = None if disable is None else not disable
    if kind == "tool":
        return "named", (c.name(choice.get("name"), "tool_choice.name"),), parallel
    mode = {"auto": "auto", "any": "required", "none": "none"}[kind]
    return cast(ToolChoiceMode, mode), None, parallel


def _options(c: Checks, body: Mapping[str, Any]) -> GenerationOptions:
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        c.missing("max_tokens", "a positive integer")
    thinking: bool | None = None
    budget: int | None = None
    raw = body.get("thinking")
    if raw is not None:
        spec = c.obj(raw, "thinking", "an object {'type': 'enabled', 'budget_tokens': ...} or {'type': 'disabled'}")
        kind = c.one_of(spec.get("type"), "thinking.type", _THINKING)
        thinking = kind != "disabled"
        if kind == "enabled":
            budget = c.opt_int(spec.get("budget_tokens"), "thinking.budget_tokens", minimum=_MIN_BUDGET)
            if budget is None:
                c.missing("thinking.budget_tokens", f"an integer of at least {_MIN_BUDGET}")
    stop = body.get("stop_sequences")
    if isinstance(stop, str):
        c.fail("stop_sequences", "must be an array of strings, got a string", BAD_VALUE)
    return GenerationOptions(
        max_tokens=c.opt_int(max_tokens, "max_tokens"),
        temperature=c.opt_number(body.get("temperature"), "temperature", 0, 1),
        top_p=c.opt_number(body.get("top_p"), "top_p", 0, 1),
        stop=stop_sequences(c, stop, "stop_sequences"),
        thinking=thinking,
        thinking_budget=budget,
        # a deltaflow extension here (vLLM and SGLang take it on Chat): the template variables
        chat_template_kwargs=c.template_kwargs(body.get("chat_template_kwargs"), "chat_template_kwargs"),
    )
