"""What the three readers share: JSON type checks with field paths, text parts, tools, tool_choice, options."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, NoReturn

from ..._core.toolspec import ToolSpec
from ...errors import ToolSpecError
from ...tools import normalize_tools
from ..conversation import (
    Conversation,
    GenerationOptions,
    Instruction,
    InstructionRole,
    TextPart,
    ToolCall,
    ToolChoice,
    ToolChoiceMode,
    Turn,
)
from .errors import RequestError, RequestProtocol

REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
"""The accepted ``reasoning_effort`` / ``reasoning.effort`` values."""

BILLING_HEADER = "x-anthropic-billing-header"
"""Claude Code's attribution line at the start of a system text; it changes every request (prefix caching)."""

MISSING = "missing_required_parameter"
WRONG_TYPE = "invalid_type"
BAD_VALUE = "invalid_value"
UNSUPPORTED = "unsupported_value"


def short(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters (an error never echoes a whole request back)."""
    text = repr(value) if not isinstance(value, str) or len(value) <= limit else repr(value[:limit])
    return text if len(text) <= limit + 5 else text[: limit - 3] + "..."


def json_kind(value: Any) -> str:
    """The JSON type of ``value`` as an error message names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "an array"
    return type(value).__name__


def at(path: str, key: str | int) -> str:
    """The path of ``key`` under ``path``: ``a.b`` or ``a[3]``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def choices(values: Iterable[str]) -> str:
    """``'a', 'b' or 'c'``."""
    quoted = [repr(v) for v in values]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


class Checks:
    """Type checks that raise :class:`RequestError` naming the field path, for one protocol."""

    __slots__ = ("protocol",)

    def __init__(self, protocol: RequestProtocol) -> None:
        self.protocol: RequestProtocol = protocol

    # -- raising ---------------------------------------------------------------------------------
    def fail(self, param: str | None, message: str, code: str = BAD_VALUE) -> NoReturn:
        """Raise a :class:`RequestError`; the message is prefixed with ``param``."""
        raise RequestError(f"{param}: {message}" if param else message, protocol=self.protocol, param=param, code=code)

    def missing(self, param: str, what: str) -> NoReturn:
        """Raise for a required field that is absent or null."""
        self.fail(param, f"is required: {what}", MISSING)

    def wrong(self, param: str, what: str, value: Any) -> NoReturn:
        """Raise for a field of the wrong JSON type."""
        if value is None:
            self.missing(param, what)
        self.fail(param, f"must be {what}, got {json_kind(value)}", WRONG_TYPE)

    # -- types -----------------------------------------------------------------------------------
    def body(self, body: Any) -> Mapping[str, Any]:
        """The request body, which must be a JSON object."""
        if not isinstance(body, Mapping):
            self.fail(None, f"the request body must be a JSON object, got {json_kind(body)}", WRONG_TYPE)
        return body

    def obj(self, value: Any, param: str, what: str = "an object") -> Mapping[str, Any]:
        """``value`` if it is an object."""
        if not isinstance(value, Mapping):
            self.wrong(param, what, value)
        return value

    def array(self, value: Any, param: str, what: str) -> Sequence[Any]:
        """``value`` if it is an array."""
        if not isinstance(value, (list, tuple)):
            self.wrong(param, what, value)
        return value

    def string(self, value: Any, param: str, what: str = "a string") -> str:
        """``value`` if it is a string (None: a missing-field error)."""
        if not isinstance(value, str):
            self.wrong(param, what, value)
        return value

    def name(self, value: Any, param: str) -> str:
        """``value`` if it is a non-empty string."""
        text = self.string(value, param, "a non-empty string")
        if not text:
            self.fail(param, "must be a non-empty string", BAD_VALUE)
        return text

    def opt_string(self, value: Any, param: str) -> str | None:
        """``value`` if it is a string or None."""
        return None if value is None else self.string(value, param)

    def opt_bool(self, value: Any, param: str) -> bool | None:
        """``value`` if it is a boolean or None."""
        if value is None:
            return None
        if not isinstance(value, bool):
            self.fail(param, f"must be a boolean, got {json_kind(value)}", WRONG_TYPE)
        return value

    def opt_int(self, value: Any, param: str, minimum: int | None = 1) -> int | None:
        """``value`` if it is an integer (at least ``minimum``) or None."""
        if value is None:
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 16.0 is an integer in JSON Schema
        if not isinstance(value, int) or isinstance(value, bool):
            self.fail(param, f"must be an integer, got {json_kind(value)}", WRONG_TYPE)
        if minimum is not None and value < minimum:
            self.fail(param, f"must be an integer of at least {minimum}, got {value}", BAD_VALUE)
        return value

    def opt_number(self, value: Any, param: str, low: float, high: float) -> float | None:
        """``value`` if it is a number from ``low`` to ``high`` or None."""
        if value is None:
            return None
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            self.fail(param, f"must be a number from {low:g} to {high:g}, got {json_kind(value)}", WRONG_TYPE)
        if not low <= value <= high:
            self.fail(param, f"must be a number from {low:g} to {high:g}, got {value!r}", BAD_VALUE)
        return float(value)

    def one_of(self, value: Any, param: str, accepted: Sequence[str]) -> str:
        """``value`` if it is one of ``accepted``."""
        if not isinstance(value, str) or value not in accepted:
            got = short(value) if isinstance(value, str) else json_kind(value)
            code = MISSING if value is None else BAD_VALUE
            self.fail(param, f"must be {choices(accepted)}, got {got}", code)
        return value

    def effort(self, value: Any, param: str) -> str | None:
        """A reasoning effort or None."""
        return None if value is None else self.one_of(value, param, REASONING_EFFORTS)

    def template_kwargs(self, value: Any, param: str) -> dict[str, Any]:
        """``chat_template_kwargs``: an object of template variables (None: none)."""
        if value is None:
            return {}
        return dict(self.obj(value, param, "an object of template variables"))

    # -- text --------------------------------------------------------------------------------------
    def text_of(self, part: Mapping[str, Any], path: str, key: str) -> str:
        """The string under ``key`` of a text part."""
        return self.string(part.get(key), at(path, key))

    def parts(
        self,
        content: Sequence[Any],
        path: str,
        *,
        text: Mapping[str, str],
        refused: Collection[str],
        noun: str = "parts",
    ) -> tuple[TextPart, ...]:
        """The text parts of a content list.

        Args:
            content: the list.
            path: its path (``messages[1].content``).
            text: accepted part types -> the key that holds their text.
            refused: media part types, refused as "not supported (text only)".
            noun: ``"parts"`` or ``"blocks"`` (Anthropic).
        """
        out: list[TextPart] = []
        for j, part in enumerate(content):
            p = at(path, j)
            part = self.obj(part, p, f"a content {noun[:-1]} (an object with a 'type')")
            kind = part.get("type")
            key = text.get(kind) if isinstance(kind, str) else None
            if key is None:
                self.bad_part(part, p, text, refused, noun)
            out.append(TextPart(text=self.text_of(part, p, key)))
        return tuple(out)

    def bad_part(
        self, part: Mapping[str, Any], path: str, text: Iterable[str], refused: Collection[str], noun: str = "parts"
    ) -> NoReturn:
        """Raise for a part whose type is not accepted here (media: "not supported (text only)")."""
        kind = part.get("type")
        if kind in refused:
            self.fail(path, f"{kind} {noun} are not supported (text only)", UNSUPPORTED)
        if kind is None:
            self.missing(at(path, "type"), f"one of {choices(text)}")
        self.fail(at(path, "type"), f"must be {choices(text)}, got {short(kind)}", BAD_VALUE)


def text_content(
    checks: Checks,
    content: Any,
    path: str,
    *,
    text: Mapping[str, str],
    refused: Collection[str],
    what: str,
) -> tuple[TextPart, ...]:
    """A required content: a string (one part) or a list of text parts."""
    if isinstance(content, str):
        return (TextPart(text=content),)
    if isinstance(content, (list, tuple)):
        return checks.parts(content, path, text=text, refused=refused)
    checks.wrong(path, what, content)


def strip_billing_header(parts: tuple[TextPart, ...]) -> tuple[TextPart, ...]:
    """System parts without Claude Code's ``x-anthropic-billing-header`` first line (a part left empty is dropped).

    The header's value changes on every request, so keeping it would defeat
    prefix caching from the system prompt on (vLLM drops it too).
    """
    if not any(p.text.startswith(BILLING_HEADER) for p in parts):
        return parts
    out: list[TextPart] = []
    for p in parts:
        if p.text.startswith(BILLING_HEADER):
            rest = p.text.partition("\n")[2]
            if rest:
                out.append(TextPart(text=rest))
        else:
            out.append(p)
    return tuple(out)


def instruction(role: InstructionRole, parts: tuple[TextPart, ...]) -> Instruction | None:
    """An instruction (a ``system`` one without the billing header; None when nothing is left of it)."""
    if role == "system":
        kept = strip_billing_header(parts)
        if not kept and parts:
            return None
        parts = kept
    return Instruction(role=role, parts=parts)


def assistant_text(texts: Sequence[str]) -> str | None:
    """An assistant turn's text: the pieces joined with ``"\\n"``; None for nothing or ``""``."""
    joined = "\n".join(texts) if len(texts) != 1 else texts[0]
    return joined or None


def arguments_text(value: Any) -> str:
    """JSON text for an arguments object (Anthropic ``input``), as OpenAI clients write it."""
    return json.dumps(value, ensure_ascii=False)


def stop_sequences(c: Checks, raw: Any, param: str) -> tuple[str, ...]:
    """``stop``: a string (one sequence), an array of strings, or null."""
    if raw is None:
        return ()
    if isinstance(raw, str):
        return (raw,)
    entries = c.array(raw, param, "a string or an array of strings")
    return tuple(c.string(s, at(param, k)) for k, s in enumerate(entries))


# -- tools ------------------------------------------------------------------------------------------


def read_tools(checks: Checks, raw: Any) -> tuple[tuple[ToolSpec, ...] | None, frozenset[str]]:
    """Validate tool entries (already shape-checked by the reader) with :func:`~deltaflow.tools.normalize_tools`.

    Args:
        checks: the reader's checks.
        raw: the request's ``tools`` (None: no tools).

    Returns:
        The specs (None without ``tools``) and the names marked ``strict: true``.
    """
    if raw is None:
        return None, frozenset()
    try:
        specs = normalize_tools(raw)
    except ToolSpecError as exc:
        # normalize_tools' message names the entry and lists the forms of all three APIs; the reader has
        # checked this API's form already, so keep what is wrong, after the entry's path.
        param = f"tools[{exc.index}]" if exc.index is not None else "tools"
        text = str(exc).partition("; accepted forms:")[0]
        if text.startswith(param):
            text = text[len(param) :].lstrip(" :")
        checks.fail(param, text, BAD_VALUE)
    strict: set[str] = set()
    for entry, spec in zip(raw, specs or (), strict=True):
        fn = entry.get("function")
        src = fn if isinstance(fn, Mapping) else entry
        if src.get("strict") is True or entry.get("strict") is True:
            strict.add(spec.name)
    return specs, frozenset(strict)


def tool_choice(
    checks: Checks,
    mode: ToolChoiceMode | None,
    allowed: tuple[str, ...] | None,
    parallel: bool | None,
    tools: tuple[ToolSpec, ...] | None,
    param: str = "tool_choice",
) -> ToolChoice:
    """The :class:`ToolChoice` of a parsed ``tool_choice``, checked against the tools.

    Args:
        checks: the reader's checks.
        mode: the mode asked for (None: not given: ``"auto"`` with tools, else ``"none"``).
        allowed: the named or allowed tools (None: all).
        parallel: whether parallel calls are allowed (None: not given: True).
        tools: the request's tools.
        param: the path of ``tool_choice`` for errors.

    Raises:
        RequestError: ``"required"`` or a named tool without tools, or a name not among the tools.
    """
    names = [t.name for t in tools or ()]
    if mode in ("required", "named") and not names:
        asked = "a named tool" if mode == "named" else "'required'"
        checks.fail(param, f"{asked} needs a non-empty 'tools' list")
    if allowed is not None:
        unknown = [n for n in allowed if n not in names]
        if unknown:
            checks.fail(
                param,
                f"names the tool {short(unknown[0])}, which is not in 'tools' (tools: {', '.join(names)})",
            )
    if mode is None or (mode == "auto" and not names):
        mode = "auto" if names else "none"
    return ToolChoice(mode=mode, allowed=allowed, parallel=True if parallel is None else parallel)


# -- tool results -------------------------------------------------------------------------------------


def calls_text(calls: Iterable[ToolCall]) -> str:
    """The ids of ``calls`` for an error message."""
    ids = [repr(c.id) for c in calls]
    return ", ".join(ids) if ids else "none"


def finish(
    turns: list[Turn],
    *,
    tools: tuple[ToolSpec, ...] | None,
    strict: frozenset[str],
    choice: ToolChoice,
    options: GenerationOptions,
) -> Conversation:
    """The conversation: the leading instructions split off the turns."""
    lead = 0
    while lead < len(turns) and isinstance(turns[lead], Instruction):
        lead += 1
    instructions = tuple(t for t in turns[:lead] if isinstance(t, Instruction))
    return Conversation(
        instructions=instructions,
        turns=tuple(turns[lead:]),
        tools=tools,
        strict_tools=strict,
        tool_choice=choice,
        options=options,
    )

