"""OpenAI Chat Completions body -> :class:`~deltaflow.prompt.conversation.Conversation`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from ..conversation import (
    AssistantTurn,
    Conversation,
    GenerationOptions,
    InstructionRole,
    Reasoning,
    TextPart,
    ToolCall,
    ToolChoiceMode,
    ToolResult,
    Turn,
    UserTurn,
)
from ._common import (
    UNSUPPORTED,
    Checks,
    arguments_text,
    assistant_text,
    at,
    calls_text,
    finish,
    instruction,
    read_tools,
    short,
    stop_sequences,
    text_content,
    tool_choice,
)

__all__ = ("read_chat",)

_ROLES = ("system", "developer", "user", "assistant", "tool")
_TEXT = {"text": "text"}
_ASSISTANT_TEXT = {"text": "text", "refusal": "refusal"}
_MEDIA = frozenset({"image_url", "input_audio", "file", "video_url", "audio_url", "input_image"})
_CONTENT = "a string or an array of text parts"


def read_chat(body: Any) -> Conversation:
    """Read an OpenAI Chat Completions request body.

    Read: ``messages`` (roles ``system``, ``developer``, ``user``,
    ``assistant``, ``tool``; content a string or text parts, assistant
    ``refusal`` parts read as text), assistant ``tool_calls`` and
    ``reasoning_content`` / ``reasoning``, ``tools``, ``tool_choice``,
    ``parallel_tool_calls``, ``max_completion_tokens`` (else ``max_tokens``),
    ``temperature``, ``top_p``, ``stop``, ``seed``, ``reasoning_effort`` and
    ``chat_template_kwargs``. Other keys are ignored, among them the
    ``name`` of a user, system or developer message (a ``tool`` message's
    ``name`` is kept), and a tool's ``type`` may be left out (as vLLM allows).

    Decisions where servers differ: a ``tool`` message must answer a call of
    the assistant message before it, only other ``tool`` messages between
    (what OpenAI enforces; vLLM checks nothing); calls left unanswered are
    accepted (OpenAI refuses them, templates render them). Arguments given
    as an object instead of JSON text are accepted (as vLLM does) and written
    as JSON text. An assistant message may have no content (vLLM accepts it).
    ``reasoning_content`` and ``reasoning`` may both be sent only if equal.

    Args:
        body: the decoded JSON body.

    Returns:
        The conversation.

    Raises:
        RequestError: a field of the wrong type, a missing required field, an
            unknown role or part type, an image/audio/file part (text only),
            a tool message whose ``tool_call_id`` answers no call, a
            ``tool_choice`` naming a tool not in ``tools``; ``param`` names the field.
    """
    c = Checks("chat")
    body = c.body(body)
    raw = body.get("messages")
    messages = c.array(raw, "messages", "an array of messages")
    if not messages:
        c.fail("messages", "must hold at least one message")
    turns: list[Turn] = []
    calls: tuple[ToolCall, ...] = ()  # the calls the next tool messages may answer
    for i, message in enumerate(messages):
        path = at("messages", i)
        m = c.obj(message, path, "a message object")
        role = m.get("role")
        if role == "function":
            c.fail(
                at(path, "role"),
                "'function' messages (deprecated) are not supported: send 'tool' messages",
                UNSUPPORTED,
            )
        role = c.one_of(role, at(path, "role"), _ROLES)
        content_path = at(path, "content")
        if role == "tool":
            turns.append(_tool_result(c, m, path, calls))
            continue
        calls = ()
        if role == "system" or role == "developer":
            ins = instruction(
                cast(InstructionRole, role),
                text_content(c, m.get("content"), content_path, text=_TEXT, refused=_MEDIA, what=_CONTENT),
            )
            if ins is not None:
                turns.append(ins)
        elif role == "user":
            parts = text_content(c, m.get("content"), content_path, text=_TEXT, refused=_MEDIA, what=_CONTENT)
            turns.append(UserTurn(parts=parts))
        else:
            turn = _assistant(c, m, path)
            turns.append(turn)
            calls = turn.tool_calls
    tools, strict = _tools(c, body.get("tools"))
    mode, allowed = _tool_choice(c, body.get("tool_choice"))
    parallel = c.opt_bool(body.get("parallel_tool_calls"), "parallel_tool_calls")
    return finish(
        turns,
        tools=tools,
        strict=strict,
        choice=tool_choice(c, mode, allowed, parallel, tools),
        options=_options(c, body),
    )


def _assistant(c: Checks, m: Mapping[str, Any], path: str) -> AssistantTurn:
    content = m.get("content")
    content_path = at(path, "content")
    text: str | None
    if content is None:
        text = None
    elif isinstance(content, str):
        text = content or None
    elif isinstance(content, (list, tuple)):
        parts = c.parts(content, content_path, text=_ASSISTANT_TEXT, refused=_MEDIA)
        text = assistant_text([p.text for p in parts])
    else:
        c.wrong(content_path, "a string, an array of text parts or null", content)
    given = c.opt_string(m.get("reasoning_content"), at(path, "reasoning_content"))
    alias = c.opt_string(m.get("reasoning"), at(path, "reasoning"))
    if given is not None and alias is not None and given != alias:
        c.fail(at(path, "reasoning"), "differs from reasoning_content: send the reasoning in one of the two")
    thought = given if given is not None else alias
    raw_calls = m.get("tool_calls")
    calls: tuple[ToolCall, ...] = ()
    if raw_calls is not None:
        calls_path = at(path, "tool_calls")
        entries = c.array(raw_calls, calls_path, "an array of tool calls")
        calls = tuple(_call(c, e, at(calls_path, k)) for k, e in enumerate(entries))
    return AssistantTurn(
        content=text,
        reasoning=(Reasoning(text=thought),) if thought is not None else (),
        tool_calls=calls,
    )


def _call(c: Checks, raw: Any, path: str) -> ToolCall:
    entry = c.obj(raw, path, "a tool call object ({'id', 'type': 'function', 'function': {'name', 'arguments'}})")
    kind = entry.get("type")
    if kind is not None and kind != "function":
        c.fail(at(path, "type"), f"only 'function' tool calls are supported, got {short(kind)}", UNSUPPORTED)
    call_id = c.name(entry.get("id"), at(path, "id"))
    fn_path = at(path, "function")
    fn = c.obj(entry.get("function"), fn_path, "an object with 'name' and 'arguments'")
    name = c.name(fn.get("name"), at(fn_path, "name"))
    args = fn.get("arguments")
    if isinstance(args, str):
        text = args
    elif isinstance(args, Mapping):
        text = arguments_text(args)
    else:
        c.wrong(at(fn_path, "arguments"), "a string of JSON (or an object)", args)
    return ToolCall(id=call_id, name=name, arguments=text)


def _tool_result(c: Checks, m: Mapping[str, Any], path: str, calls: Sequence[ToolCall]) -> ToolResult:
    id_path = at(path, "tool_call_id")
    call_id = c.name(m.get("tool_call_id"), id_path)
    if all(call.id != call_id for call in calls):
        c.fail(
            id_path,
            f"{short(call_id)} answers no tool call of the assistant message before it "
            f"(only tool messages may come between; its tool call ids: {calls_text(calls)})",
        )
    parts: tuple[TextPart, ...] = text_content(
        c, m.get("content"), at(path, "content"), text=_TEXT, refused=_MEDIA, what=_CONTENT
    )
    return ToolResult(call_id=call_id, parts=parts, name=c.opt_string(m.get("name"), at(path, "name")))


def _tools(c: Checks, raw: Any) -> tuple[Any, frozenset[str]]:
    if raw is not None:
        for k, entry in enumerate(c.array(raw, "tools", "an array of tools")):
            p = at("tools", k)
            t = c.obj(entry, p, "a tool object ({'type': 'function', 'function': {...}})")
            kind = t.get("type", "function")
            if kind != "function":
                c.fail(at(p, "type"), f"only 'function' tools are supported, got {short(kind)}", UNSUPPORTED)
            c.obj(t.get("function"), at(p, "function"), "an object with 'name', 'description' and 'parameters'")
    return read_tools(c, raw)


def _tool_choice(c: Checks, raw: Any) -> tuple[ToolChoiceMode | None, tuple[str, ...] | None]:
    if raw is None:
        return None, None
    if isinstance(raw, str):
        return cast(ToolChoiceMode, c.one_of(raw, "tool_choice", ("none", "auto", "required"))), None
    choice = c.obj(raw, "tool_choice", "'none', 'auto', 'required' or an object")
    kind = c.one_of(choice.get("type"), "tool_choice.type", ("function", "allowed_tools"))
    if kind == "function":
        fn = c.obj(choice.get("function"), "tool_choice.function", "an object with a 'name'")
        return "named", (c.name(fn.get("name"), "tool_choice.function.name"),)
    spec = c.obj(choice.get("allowed_tools"), "tool_choice.allowed_tools", "an object with 'mode' and 'tools'")
    mode = c.one_of(spec.get("mode"), "tool_choice.allowed_tools.mode", ("auto", "required"))
    list_path = "tool_choice.allowed_tools.tools"
    entries = c.array(spec.get("tools"), list_path, "an array of {'type': 'function', 'function': {'name': ...}}")
    names: list[str] = []
    for k, entry in enumerate(entries):
        p = at(list_path, k)
        e = c.obj(entry, p, "an object {'type': 'function', 'function': {'name': ...}}")
        c.one_of(e.get("type", "function"), at(p, "type"), ("function",))
        fn = c.obj(e.get("function"), at(p, "function"), "an object with a 'name'")
        names.append(c.name(fn.get("name"), at(at(p, "function"), "name")))
    if not names:
        c.fail(list_path, "must list at least one tool")
    return cast(ToolChoiceMode, mode), tuple(names)


def _options(c: Checks, body: Mapping[str, Any]) -> GenerationOptions:
    max_tokens = c.opt_int(body.get("max_completion_tokens"), "max_completion_tokens")
    legacy = c.opt_int(body.get("max_tokens"), "max_tokens")
    return GenerationOptions(
        max_tokens=max_tokens if max_tokens is not None else legacy,
        temperature=c.opt_number(body.get("temperature"), "temperature", 0, 2),
        top_p=c.opt_number(body.get("top_p"), "top_p", 0, 1),
        stop=stop_sequences(c, body.get("stop"), "stop"),
        seed=c.opt_int(body.get("seed"), "seed", minimum=None),
        reasoning_effort=c.effort(body.get("reasoning_effort"), "reasoning_effort"),
        chat_template_kwargs=c.template_kwargs(body.get("chat_template_kwargs"), "chat_template_kwargs"),
    )
