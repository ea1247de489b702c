"""A :class:`~deltaflow.prompt.conversation.Conversation` -> the ``messages`` and ``tools`` a chat template gets.

The messages are OpenAI Chat shaped, in the form servers (vLLM, and the
expected prompts of ``shared/templates``) hand to templates, so a template
renders what it renders under vLLM:

* ``{"role": "system" | "developer" | "user", "content": str}``, text parts joined with ``"\\n"``;
* ``{"role": "assistant", "content": str, "reasoning_content": str, "tool_calls": [...]}``:
  content None becomes ``""``; ``reasoning_content`` (present only when the
  turn has unredacted reasoning, blocks joined with ``"\\n"``; the renderer
  aliases it to ``thinking`` and ``reasoning``, as transformers does);
  ``tool_calls`` (present only when there are calls) as ``{"id", "type":
  "function", "function": {"name", "arguments": <object>}}``, the arguments
  parsed from their JSON text;
* ``{"role": "tool", "tool_call_id", "content": str}`` (and ``"name"`` when
  the request gave one), parts joined with ``"\\n"``.

Arguments that are not a JSON object (malformed text, or JSON of another
type) are given as ``{}`` with a warning (``deltaflow.prompt`` logger), as
vLLM does: the text lives in the conversation's history, and refusing it
would refuse every later request of that conversation too; empty text is
``{}`` without a warning. No key is ever None (transformers would drop it).

:func:`chat_messages` writes the same conversation as the ``messages`` of an
OpenAI Chat Completions *request* (what a server that renders the prompt
itself is sent): the same dicts, except that an assistant turn's
``tool_calls[].function.arguments`` stay JSON *text* (as the client sent
them; blank text becomes ``"{}"``) and its missing content is ``None`` when
it made calls (``""`` when it did not).
"""

from __future__ import annotations

from collections.abc import Callable
from copy import deepcopy
from typing import Any

import msgspec
import structlog

from .conversation import AssistantTurn, Conversation, Instruction, ToolCall, ToolResult, UserTurn, join_parts

__all__ = ("chat_messages", "template_messages", "template_tools")

_log = structlog.get_logger("deltaflow.prompt")
_MERGE_SEPARATOR = "\n\n"
_decode = msgspec.json.Decoder()


def template_messages(
    conversation: Conversation, *, developer_role: bool = True, system_role: bool = True
) -> list[dict[str, Any]]:
    """The conversation as the list of message dicts a chat template gets.

    Args:
        conversation: the conversation.
        developer_role: whether the template knows the ``developer`` role.
            False (vLLM's treatment of a template that never mentions it):
            developer instructions become system ones, and all system
            messages are then merged into one at position 0, their texts
            joined with ``"\\n\\n"``.
        system_role: whether the template accepts a ``system`` role. False:
            the system messages' texts (joined with ``"\\n\\n"``) are put
            before the first user message's text, with ``"\\n\\n"`` between
            (a user message of their own at position 0 when there is no user
            message).

    Returns:
        Fresh dicts (the caller may change them).
    """
    out = _messages(conversation, _assistant)
    if not developer_role:
        for m in out:
            if m["role"] == "developer":
                m["role"] = "system"
        out = _merge_system(out)
    if not system_role:
        out = _fold_system(out)
    return out


def chat_messages(conversation: Conversation) -> list[dict[str, Any]]:
    """The conversation as the ``messages`` of an OpenAI Chat Completions request (see the module docstring).

    Instructions keep their role (``system`` or ``developer``) and their
    place; user and tool messages are those of :func:`template_messages`; an
    assistant message has ``content`` (None when it only made calls),
    ``reasoning_content`` when it has unredacted reasoning, and
    ``tool_calls`` whose arguments are the calls' JSON text.

    Returns:
        Fresh dicts (the caller may change them).
    """
    return _messages(conversation, _chat_assistant)


def _messages(
    conversation: Conversation, assistant: Callable[[AssistantTurn], dict[str, Any]]
) -> list[dict[str, Any]]:
    """Every instruction and turn as a message dict, in order (``assistant`` writes the assistant turns)."""
    out: list[dict[str, Any]] = [_instruction(i) for i in conversation.instructions]
    for turn in conversation.turns:
        if isinstance(turn, UserTurn):
            out.append({"role": "user", "content": join_parts(turn.parts)})
        elif isinstance(turn, AssistantTurn):
            out.append(assistant(turn))
        elif isinstance(turn, ToolResult):
            msg: dict[str, Any] = {"role": "tool", "tool_call_id": turn.call_id, "content": join_parts(turn.parts)}
            if turn.name is not None:
                msg["name"] = turn.name
            out.append(msg)
        else:
            out.append(_instruction(turn))
    return out


def template_tools(conversation: Conversation) -> list[dict[str, Any]] | None:
    """The conversation's tools as OpenAI-shaped dicts, in the request's order.

    Returns:
        ``[{"type": "function", "function": {"name", "description", "parameters"}}]``
        (``description`` left out when the tool has none; ``parameters`` a
        copy of the schema), or None when the request had no ``tools``.
    """
    if conversation.tools is None:
        return None
    out: list[dict[str, Any]] = []
    for t in conversation.tools:
        fn: dict[str, Any] = {"name": t.name}
        if t.description is not None:
            fn["description"] = t.description
        fn["parameters"] = _copy(t.parameters)
        out.append({"type": "function", "function": fn})
    return out


def _copy(value: Any) -> Any:
    """A deep copy of JSON data (dicts, lists and scalars by their exact type; anything else by ``deepcopy``)."""
    kind = type(value)
    if kind is dict:
        return {k: _copy(v) for k, v in value.items()}
    if kind is list:
        return [_copy(v) for v in value]
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    return deepcopy(value)


def _instruction(turn: Instruction) -> dict[str, Any]:
    return {"role": turn.role, "content": join_parts(turn.parts)}


def _reasoning(turn: AssistantTurn, msg: dict[str, Any]) -> None:
    """Set ``reasoning_content`` from the turn's unredacted reasoning blocks (joined with ``"\\n"``), if any."""
    thoughts = [r.text for r in turn.reasoning if not r.redacted]
    if thoughts:
        msg["reasoning_content"] = thoughts[0] if len(thoughts) == 1 else "\n".join(thoughts)


def _assistant(turn: AssistantTurn) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": turn.content if turn.content is not None else ""}
    _reasoning(turn, msg)
    if turn.tool_calls:
        msg["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _arguments(c)}}
            for c in turn.tool_calls
        ]
    return msg


def _chat_assistant(turn: AssistantTurn) -> dict[str, Any]:
    content = turn.content if turn.content is not None else (None if turn.tool_calls else "")
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    _reasoning(turn, msg)
    if turn.tool_calls:
        msg["tool_calls"] = [
            {"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments if c.arguments.strip() else "{}"}}
            for c in turn.tool_calls
        ]
    return msg


def _arguments(call: ToolCall) -> dict[str, Any]:
    """The call's arguments as an object; ``{}`` (with a warning) when they are not a JSON object."""
    if not call.arguments.strip():
        return {}
    try:
        value = _decode.decode(call.arguments)
    except msgspec.DecodeError:
        _log.warning(
            "tool call arguments are not valid JSON; the template gets {}",
            tool=call.name,
            call_id=call.id,
            chars=len(call.arguments),
        )
        return {}
    if not isinstance(value, dict):
        _log.warning(
            "tool call arguments are not a JSON object; the template gets {}",
            tool=call.name,
            call_id=call.id,
            json_type=type(value).__name__,
        )
        return {}
    return value


def _merge_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """All system messages merged into one at position 0 (the others in order after it)."""
    system = [m["content"] for m in messages if m["role"] == "system"]
    if not system or (len(system) == 1 and messages[0]["role"] == "system"):
        return messages
    rest = [m for m in messages if m["role"] != "system"]
    return [{"role": "system", "content": _MERGE_SEPARATOR.join(system)}, *rest]


def _fold_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The system messages' text put before the first user message's."""
    system = [m["content"] for m in messages if m["role"] == "system"]
    if not system:
        return messages
    text = _MERGE_SEPARATOR.join(system)
    rest = [m for m in messages if m["role"] != "system"]
    for m in rest:
        if m["role"] == "user":
            m["content"] = text + _MERGE_SEPARATOR + m["content"] if m["content"] else text
            return rest
    return [{"role": "user", "content": text}, *rest]
