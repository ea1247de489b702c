"""What a chat template can render, found by rendering small probe conversations.

Templates differ in what they accept: some render offered tools and others
ignore them, some raise on a ``tool`` message, some read ``content`` only
as a string and print a list of parts as its Python repr. A gateway needs
to know before it renders a request, so :func:`probe_capabilities` renders
a handful of tiny conversations with sentinel strings and checks which
sentinels come out (a template that raises on a probe lacks that
capability), as llama.cpp's ``common/jinja/caps.h`` does. One fact is read
from the template's text instead: whether it mentions a ``developer`` role
at all (vLLM turns ``developer`` messages into ``system`` ones when it does
not). :attr:`ChatTemplate.capabilities <deltaflow.prompt.template.ChatTemplate.capabilities>`
probes once per template and keeps the answer.

:func:`reasoning_left_open` tells whether a rendered prompt ends inside a
reasoning block the template opened (Qwen3's ``<think>\\n`` generation
prompt, DeepSeek-R1's), i.e. whether the model's output starts in reasoning.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jinja2.nodes

from .template import SPECIAL_TOKEN_NAMES, ChatTemplate, TemplateError

__all__ = ("TemplateCapabilities", "probe_capabilities", "reasoning_left_open")

# Sentinels: plain ASCII words no template writes itself and no string method changes.
_USER = "zqxUserProbe7"
_SYSTEM = "zqxSystemProbe7"
_PART = "zqxPartProbe7"
_TOOL = "zqx_tool_probe7"
_CALL = "zqx_call_probe7"
_ARG = "zqxArgProbe7"
_RESULT = "zqxResultProbe7"
_REASONING = "zqxReasoningProbe7"
_ANSWER = "zqxAnswerProbe7"
_CALL_ID = "a1b2c3d4e"  # alphanumeric, 9 characters: Mistral's templates refuse other ids
_PROBE_DATE = _dt.datetime(2026, 1, 15, 9, 30)


@dataclass(frozen=True)
class TemplateCapabilities:
    """What a chat template renders, each decided by rendering a probe conversation.

    Attributes:
        tools: offered tools appear in the prompt (a tool's name, given in
            ``tools``).
        tool_calls: an assistant message's ``tool_calls`` appear (arguments
            as an object or as a JSON string).
        object_arguments: tool calls render with ``function.arguments`` as an
            object (the form servers hand templates); False where only a
            JSON string works (e.g. templates that add the arguments to a
            string).
        tool_results: a ``tool`` message's content appears (after an
            assistant tool call).
        system: a ``system`` message's content appears (in its own turn or
            folded into the first user turn).
        developer: the template's text mentions a ``developer`` role.
        reasoning: an assistant turn's ``reasoning_content`` (also given as
            ``thinking``) appears, as the turn after the last user message or
            as an earlier one.
        string_content: a user message whose ``content`` is a string renders
            its text.
        part_content: a user message whose ``content`` is a list of
            ``{"type": "text", "text": ...}`` parts renders the text itself
            (not the list's repr or JSON).
    """

    tools: bool
    tool_calls: bool
    object_arguments: bool
    tool_results: bool
    system: bool
    developer: bool
    reasoning: bool
    string_content: bool
    part_content: bool


_Shape = tuple[Sequence[Mapping[str, Any]], Mapping[str, Any]]


def _render(template: ChatTemplate, messages: Sequence[Mapping[str, Any]], **kwargs: Any) -> str | None:
    """The probe's render, or None when the template raises on it."""
    try:
        return template.render(messages, date=_PROBE_DATE, **kwargs)
    except (TemplateError, ValueError, TypeError):
        return None


def _renders(template: ChatTemplate, needle: str, *shapes: _Shape) -> bool:
    """Whether any of the probe conversations ``shapes`` (messages, render keywords) renders ``needle``."""
    for messages, kwargs in shapes:
        out = _render(template, messages, **kwargs)
        if out is not None and needle in out:
            return True
    return False


def _user(text: str = _USER) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _call_message(arguments: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": _CALL_ID, "type": "function", "function": {"name": _CALL, "arguments": arguments}},
        ],
    }


def _mentions(tree: jinja2.nodes.Template, word: str) -> bool:
    """Whether a string constant or the literal text of the template contains ``word``."""
    for node in tree.find_all((jinja2.nodes.Const, jinja2.nodes.TemplateData)):
        value: object = node.data if isinstance(node, jinja2.nodes.TemplateData) else getattr(node, "value", None)
        if isinstance(value, str) and word in value:
            return True
    return False


def probe_capabilities(template: ChatTemplate) -> TemplateCapabilities:
    """Probe what ``template`` renders (see :class:`TemplateCapabilities`).

    Each capability is one to eight renders of a one- to three-message
    conversation (tool calls and results with arguments as an object and as
    a JSON string, with and without the tool offered), so probing costs tens
    of milliseconds. The date is fixed; the template's special tokens are
    used, and those of :data:`~deltaflow.prompt.template.SPECIAL_TOKEN_NAMES`
    it lacks are given placeholder text (a template that adds ``eos_token``
    to a string would otherwise fail every probe for want of a tokenizer).
    A probe the template raises on counts as "no". A template with named
    variants is probed as its default (a render with tools may use
    its ``"tool_use"`` variant: probe ``template.variant("tool_use")`` for
    that one).

    Args:
        template: the compiled template.

    Returns:
        The capabilities.
    """
    # A plain template of the same source (no variants to switch to), compiled already (cached by source).
    template = ChatTemplate(template.source, name=template.name, special_tokens=template.special_tokens)
    fill = {k: f"<probe_{k}>" for k in SPECIAL_TOKEN_NAMES if k not in template.special_tokens}
    tool = {
        "type": "function",
        "function": {
            "name": _TOOL,
            "description": "Probe tool.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        },
    }
    agp = {"add_generation_prompt": True, **fill}
    closed = {"add_generation_prompt": False, **fill}
    agp_tools = {**agp, "tools": [tool]}
    closed_tools = {**closed, "tools": [tool]}
    result = {"role": "tool", "tool_call_id": _CALL_ID, "content": _RESULT}

    def call_shapes(arguments: Any) -> list[_Shape]:
        call = _call_message(arguments)
        return [
            ([_user(), call], closed),
            ([_user(), call, result], agp),
            ([_user(), call], closed_tools),  # some render calls only when tools are offered
            ([_user(), call, result], agp_tools),
        ]

    object_shapes = call_shapes({"q": _ARG})
    string_shapes = call_shapes('{"q": "' + _ARG + '"}')
    object_arguments = _renders(template, _ARG, *object_shapes)
    tool_calls = object_arguments or _renders(template, _ARG, *string_shapes)
    tool_results = _renders(template, _RESULT, *(s for s in object_shapes + string_shapes if len(s[0]) == 3))

    # Every other probe is also tried with a tool offered: some templates fail on a render without tools.
    with_reasoning = {"role": "assistant", "content": _ANSWER, "reasoning_content": _REASONING}
    reasoning = _renders(
        template,
        _REASONING,
        ([_user(), with_reasoning], closed),
        ([_user(), with_reasoning, _user("And then?")], agp),
        ([_user(), with_reasoning], closed_tools),
        ([_user(), with_reasoning, _user("And then?")], agp_tools),
    )
    part_content = False
    part_message = {"role": "user", "content": [{"type": "text", "text": _PART}]}
    for kwargs in (agp, agp_tools):
        parts = _render(template, [part_message], **kwargs)
        if parts is not None:
            part_content = _PART in parts and f"'text': '{_PART}" not in parts and f'"text": "{_PART}' not in parts
            break
    system_message = {"role": "system", "content": _SYSTEM}

    return TemplateCapabilities(
        tools=_renders(template, _TOOL, ([_user()], agp_tools)),
        tool_calls=tool_calls,
        object_arguments=object_arguments,
        tool_results=tool_results,
        system=_renders(template, _SYSTEM, ([system_message, _user()], agp), ([system_message, _user()], agp_tools)),
        developer=_mentions(template.ast, "developer"),
        reasoning=reasoning,
        string_content=_renders(template, _USER, ([_user()], agp), ([_user()], agp_tools)),
        part_content=part_content,
    )


def reasoning_left_open(prompt: str, start: str = "<think>", end: str = "</think>") -> bool:
    """Whether ``prompt`` ends inside a reasoning block: the model's output then starts as reasoning.

    True when the last ``start`` marker comes after the last ``end`` marker
    (or there is no ``end``) and only whitespace follows it: the generation
    prompt opened the block (Qwen3 and DeepSeek-R1 write ``<think>\\n``).
    A closed block (``<think>\\n\\n</think>\\n\\n``, thinking turned off), a
    marker inside earlier text and a prompt without the marker are False.

    Args:
        prompt: the rendered prompt.
        start: the marker that opens reasoning.
        end: the marker that closes it.

    Returns:
        Whether the prompt leaves reasoning open.
    """
    if not start:
        raise ValueError("start must be a non-empty marker such as '<think>'")
    at = prompt.rfind(start)
    if at < 0:
        return False
    if end and prompt.rfind(end) > at:
        return False
    return not prompt[at + len(start) :].strip()
