"""OpenAI Responses body -> :class:`~deltaflow.prompt.conversation.Conversation`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
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
    assistant_text,
    at,
    calls_text,
    choices,
    finish,
    instruction,
    read_tools,
    short,
    text_content,
    tool_choice,
)

__all__ = ("read_responses",)

_ROLES = ("user", "system", "developer", "assistant")
_ITEMS = ("message", "function_call", "function_call_output", "reasoning")
_TEXT = {"input_text": "text", "output_text": "text"}
_ASSISTANT_TEXT = {"input_text": "text", "output_text": "text", "refusal": "refusal"}
_MEDIA = frozenset({"input_image", "input_file", "input_audio", "image_url", "input_video"})
_CONTENT = "a string or an array of input_text parts"
_STORED = ("previous_response_id", "conversation")


@dataclass
class _Draft:
    """An assistant turn being read: a message, the function calls after it, the reasoning before it."""

    texts: list[str] = field(default_factory=list)
    reasoning: list[Reasoning] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)

    def turn(self) -> AssistantTurn:
        return AssistantTurn(
            content=assistant_text(self.texts), reasoning=tuple(self.reasoning), tool_calls=tuple(self.calls)
        )


def read_responses(body: Any) -> Conversation:
    """Read an OpenAI Responses request body.

    Read: ``instructions`` (a system instruction before the input), ``input``
    (a string: one user turn; or items: ``message`` items, with or without
    ``"type": "message"``, of roles ``user``, ``system``, ``developer``,
    ``assistant``, content a string or ``input_text``/``output_text`` parts,
    assistant ``refusal`` parts read as text; ``function_call``,
    ``function_call_output`` and ``reasoning`` items), ``tools`` (type
    ``function``, the flat Responses shape), ``tool_choice``,
    ``parallel_tool_calls``, ``max_output_tokens``, ``reasoning.effort``,
    ``temperature`` and ``top_p``. Other keys are ignored.

    How items become turns: a ``message`` item of role ``assistant`` starts an
    assistant turn; a ``function_call`` joins the assistant turn just before
    it, or starts one; ``reasoning`` items belong to the assistant turn that
    follows them (their text is the ``content`` texts joined with ``"\\n"``,
    else the ``summary`` texts; ``encrypted_content`` is kept as
    :attr:`~deltaflow.prompt.conversation.Reasoning.sealed`), and become a
    reasoning-only assistant turn when no assistant item follows. A
    ``function_call_output`` must answer a ``function_call`` made since the
    last user, system or developer message.

    Stored state is refused: ``previous_response_id`` and ``conversation``
    need the conversation they name, which this reader does not have; so are
    ``item_reference`` items and hosted tools. deltaflow's server resolves
    ``previous_response_id`` itself before a request reaches this reader: it
    loads the stored response (:mod:`deltaflow.server.store`) and hands over
    the whole conversation in ``input`` (the previous input, the previous
    output items, then the new input), without the field; so a body that
    still carries it here was not resolved, and is refused. It resolves
    ``item_reference`` items the same way (each becomes the stored output
    item it names).

    Args:
        body: the decoded JSON body.

    Returns:
        The conversation.

    Raises:
        RequestError: a field of the wrong type, a missing ``input``, an
            unknown role or item type, an image/audio/file part (text only),
            an output answering no call, stored state, a ``tool_choice``
            naming a tool not in ``tools``; ``param`` names the field.
    """
    c = Checks("responses")
    body = c.body(body)
    for key in _STORED:
        if body.get(key) is not None:
            c.fail(
                key,
                "stored conversations are not supported here: send the whole conversation in 'input' "
                "(deltaflow's server resolves previous_response_id before reading)",
                UNSUPPORTED,
            )
    turns: list[Turn] = []
    given = body.get("instructions")
    if given is not None:
        ins = instruction("system", (TextPart(text=c.string(given, "instructions")),))
        if ins is not None:
            turns.append(ins)
    raw = body.get("input")
    if isinstance(raw, str):
        turns.append(UserTurn(parts=(TextPart(text=raw),)))
    else:
        _items(c, c.array(raw, "input", "a string or an array of input items"), turns)
    tools, strict = _tools(c, body.get("tools"))
    mode, allowed = _tool_choice(c, body.get("tool_choice"))
    parallel = c.opt_bool(body.get("parallel_tool_calls"), "parallel_tool_calls")
    reasoning = body.get("reasoning")
    effort = None
    if reasoning is not None:
        effort = c.effort(c.obj(reasoning, "reasoning", "an object").get("effort"), "reasoning.effort")
    options = GenerationOptions(
        max_tokens=c.opt_int(body.get("max_output_tokens"), "max_output_tokens"),
        temperature=c.opt_number(body.get("temperature"), "temperature", 0, 2),
        top_p=c.opt_number(body.get("top_p"), "top_p", 0, 1),
        reasoning_effort=effort,
        # a deltaflow extension here (vLLM and SGLang take it on Chat): the template variables
        chat_template_kwargs=c.template_kwargs(body.get("chat_template_kwargs"), "chat_template_kwargs"),
    )
    return finish(
        turns, tools=tools, strict=strict, choice=tool_choice(c, mode, allowed, parallel, tools), options=options
    )


def _items(c: Checks, items: Any, turns: list[Turn]) -> None:
    """Read the input items onto ``turns``."""
    draft: _Draft | None = None  # the assistant turn a function_call may join
    thoughts: list[Reasoning] = []  # reasoning items waiting for the assistant turn they belong to
    answerable: dict[str, ToolCall] = {}  # calls made since the last user/system/developer message

    def close() -> None:
        nonlocal draft
        if draft is not None:
            turns.append(draft.turn())
            draft = None
        if thoughts:
            turns.append(AssistantTurn(reasoning=tuple(thoughts)))
            thoughts.clear()

    for i, raw in enumerate(items):
        path = at("input", i)
        item = c.obj(raw, path, "an input item object")
        kind = item.get("type")
        if kind is None and "role" in item:
            kind = "message"
        if kind == "item_reference":
            c.fail(at(path, "type"), "item references need stored items, which this reader does not have "
                   "(deltaflow's server resolves them)", UNSUPPORTED)
        if kind not in _ITEMS:
            if kind is None:
                c.missing(at(path, "type"), f"one of {choices(_ITEMS)}")
            c.fail(at(path, "type"), f"must be {choices(_ITEMS)}, got {short(kind)}", UNSUPPORTED)
        if kind == "reasoning":
            if draft is not None:
                close()  # the reasoning belongs to what follows it
            thoughts.append(_reasoning(c, item, path))
        elif kind == "function_call":
            call = _call(c, item, path)
            if draft is None:
                draft = _Draft(reasoning=list(thoughts))
                thoughts.clear()
            draft.calls.append(call)
            answerable[call.id] = call
        elif kind == "function_call_output":
            close()
            turns.append(_output(c, item, path, answerable))
        else:
            role = c.one_of(item.get("role"), at(path, "role"), _ROLES)
            content_path = at(path, "content")
            if role == "assistant":
                text = _assistant_content(c, item.get("content"), content_path)
                reasoning = list(thoughts)
                thoughts.clear()
                close()
                draft = _Draft(texts=[text] if text is not None else [], reasoning=reasoning)
                continue
            close()
            answerable = {}
            parts = text_content(c, item.get("content"), content_path, text=_TEXT, refused=_MEDIA, what=_CONTENT)
            if role == "user":
                turns.append(UserTurn(parts=parts))
            else:
                ins = instruction(cast(InstructionRole, role), parts)
                if ins is not None:
                    turns.append(ins)
    close()


def _assistant_content(c: Checks, content: Any, path: str) -> str | None:
    if isinstance(content, str):
        return content or None
    if isinstance(content, (list, tuple)):
        parts = c.parts(content, path, text=_ASSISTANT_TEXT, refused=_MEDIA)
        return assistant_text([p.text for p in parts])
    c.wrong(path, "a string or an array of output_text parts", content)


def _reasoning(c: Checks, item: Mapping[str, Any], path: str) -> Reasoning:
    texts: list[str] = []
    for key, kind in (("content", "reasoning_text"), ("summary", "summary_text")):
        raw = item.get(key)
        if raw is None:
            continue
        key_path = at(path, key)
        parts = c.parts(c.array(raw, key_path, f"an array of {kind} parts"), key_path, text={kind: "text"}, refused=())
        if parts and not texts:
            texts = [p.text for p in parts]
    sealed = c.opt_string(item.get("encrypted_content"), at(path, "encrypted_content"))
    return Reasoning(text="\n".join(texts), sealed=sealed)


def _call(c: Checks, item: Mapping[str, Any], path: str) -> ToolCall:
    return ToolCall(
        id=c.name(item.get("call_id"), at(path, "call_id")),
        name=c.name(item.get("name"), at(path, "name")),
        arguments=c.string(item.get("arguments"), at(path, "arguments"), "a string of JSON"),
    )


def _output(c: Checks, item: Mapping[str, Any], path: str, answerable: Mapping[str, ToolCall]) -> ToolResult:
    id_path = at(path, "call_id")
    call_id = c.name(item.get("call_id"), id_path)
    if call_id not in answerable:
        c.fail(
            id_path,
            f"{short(call_id)} answers no function_call since the last user, system or developer message "
            f"(calls since: {calls_text(answerable.values())})",
        )
    parts = text_content(c, item.get("output"), at(path, "output"), text=_TEXT, refused=_MEDIA, what=_CONTENT)
    return ToolResult(call_id=call_id, parts=parts)


def _tools(c: Checks, raw: Any) -> tuple[Any, frozenset[str]]:
    if raw is not None:
        for k, entry in enumerate(c.array(raw, "tools", "an array of tools")):
            p = at("tools", k)
            t = c.obj(entry, p, "a tool object ({'type': 'function', 'name', 'parameters'})")
            kind = t.get("type")
            if kind != "function":
                if kind is None:
                    c.missing(at(p, "type"), "'function'")
                c.fail(at(p, "type"), f"only 'function' tools are supported, got {short(kind)}", UNSUPPORTED)
            if "function" in t:
                c.fail(p, "a Responses function tool is flat: 'name', 'parameters' at the top, no 'function' object")
            c.name(t.get("name"), at(p, "name"))
    return read_tools(c, raw)


def _tool_choice(c: Checks, raw: Any) -> tuple[ToolChoiceMode | None, tuple[str, ...] | None]:
    if raw is None:
        return None, None
    if isinstance(raw, str):
        return cast(ToolChoiceMode, c.one_of(raw, "tool_choice", ("none", "auto", "required"))), None
    choice = c.obj(raw, "tool_choice", "'none', 'auto', 'required' or an object")
    kind = choice.get("type")
    if kind not in ("function", "allowed_tools"):
        got = short(kind) if kind is not None else "no type"
        c.fail("tool_choice.type", f"must be 'function' or 'allowed_tools' (hosted tools are not supported), got {got}")
    if kind == "function":
        return "named", (c.name(choice.get("name"), "tool_choice.name"),)
    mode = c.one_of(choice.get("mode"), "tool_choice.mode", ("auto", "required"))
    entries = c.array(choice.get("tools"), "tool_choice.tools", "an array of {'type': 'function', 'name': ...}")
    names: list[str] = []
    for k, entry in enumerate(entries):
        p = at("tool_choice.tools", k)
        e = c.obj(entry, p, "an object {'type': 'function', 'name': ...}")
        c.one_of(e.get("type"), at(p, "type"), ("function",))
        names.append(c.name(e.get("name"), at(p, "name")))
    if not names:
        c.fail("tool_choice.tools", "must list at least one tool")
    return cast(ToolChoiceMode, mode), tuple(names)
