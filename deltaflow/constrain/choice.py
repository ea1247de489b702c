"""``tools`` + ``tool_choice`` -> what the engine needs: :func:`prepare_request`.

:func:`prepare_request` validates a request's ``tools`` (OpenAI and Anthropic
forms, through :func:`~deltaflow.tools.normalize_tools`) and ``tool_choice``
and returns a frozen :class:`PreparedRequest`; for ``"required"``, a named
function and (lazily) ``"auto"`` it carries a :class:`ToolConstraint`: the
dialect's tool section as an XGrammar structural tag, a Lark grammar for
llguidance and a GBNF grammar for llama.cpp, all from one layout
(``layouts.py``).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from .._core.toolspec import ToolSpec
from ..parsers import registry
from ..tools import normalize_tools
from .errors import ToolChoiceError, UnsupportedConstraintError
from .gbnf import render_gbnf
from .grammar import Grammar, build_grammar
from .lark import render_lark, specials_for
from .layouts import Call, Layout, build_calls, constraint_tool, js, layout_for, triggers
from .xgrammar import legacy_structural_tag, structural_tag

__all__ = (
    "Mode",
    "PreparedRequest",
    "TokenIds",
    "ToolChoiceError",
    "ToolConstraint",
    "UnsupportedConstraintError",
    "prepare_request",
    "strict_tool_names",
)

Mode = Literal["none", "auto", "required", "named"]
"""What ``tool_choice`` asks for."""


class TokenIds(Protocol):
    """Anything that maps a token's text to its id (a ``tokenizers.Tokenizer``, a vocabulary wrapper)."""

    def token_to_id(self, token: str) -> int | None:
        """The id of the token spelled ``token``, or None."""
        ...


@dataclass(frozen=True)
class ToolConstraint:
    """A constrained-decoding spec for a dialect's tool section.

    Both grammars and the structural tag describe the output *from the tool
    section on* (for ``"required"``/named: the whole output after the
    reasoning, blanks first allowed; for ``"auto"``: from the first trigger).

    Attributes:
        dialect: the tool parser name.
        lazy: True for ``"auto"``: the constraint starts at a trigger; False
            for ``"required"``/named: the output (after reasoning) must be calls.
        triggers: the texts that start the tool section.
        structural_tag_json: XGrammar structural tag (``format`` form), JSON
            text, or None (pythonic and Gemma 4: XGrammar has no such argument style).
        legacy_structural_tag_json: the ``structures``/``triggers`` form, JSON
            text, or None when the dialect's calls are not begin + JSON + end.
        lark: the llguidance Lark grammar, with :attr:`markers_special` as special tokens.
        gbnf: the llama.cpp GBNF grammar, every marker a quoted literal
            (:meth:`gbnf_grammar` writes special tokens as token references).
        markers: the fixed markers of the format (candidates for special tokens).
        markers_special: the markers written as special-token references in :attr:`lark`.
        after_reasoning_end: the reasoning end marker after which an engine
            applies a non-lazy constraint (None: from the start of the output).
        parallel: whether the constraint allows several calls.
    """

    dialect: str
    lazy: bool
    triggers: tuple[str, ...]
    structural_tag_json: str | None
    legacy_structural_tag_json: str | None
    lark: str
    gbnf: str
    markers: tuple[str, ...]
    markers_special: tuple[str, ...]
    after_reasoning_end: str | None
    parallel: bool
    _layout: Layout = field(repr=False, compare=False)
    _calls: tuple[Call, ...] = field(repr=False, compare=False)
    _grammar: Grammar = field(repr=False, compare=False)

    @property
    def structural_tag(self) -> dict[str, Any] | None:
        """The XGrammar structural tag as a fresh dict, or None."""
        if self.structural_tag_json is None:
            return None
        out: dict[str, Any] = json.loads(self.structural_tag_json)
        return out

    @property
    def legacy_structural_tag(self) -> dict[str, Any] | None:
        """The legacy structural tag as a fresh dict, or None."""
        if self.legacy_structural_tag_json is None:
            return None
        out: dict[str, Any] = json.loads(self.legacy_structural_tag_json)
        return out

    def lark_grammar(self, special_tokens: Collection[str] | Mapping[str, int] | None = None) -> str:
        """The Lark grammar with another choice of special-token markers.

        Args:
            special_tokens: markers to write as special tokens: names (written
                ``<marker>``, for markers of that shape) or ``{marker: id}``
                (written ``<[id]>``); an empty collection writes every marker
                as text. None: the dialect's defaults (:attr:`lark`).

        Raises:
            ValueError: a name that is not ``<...>``-shaped.
        """
        if special_tokens is None:
            return self.lark
        return render_lark(self._grammar, specials_for(special_tokens))

    def gbnf_grammar(
        self,
        tokenizer: TokenIds | None = None,
        special_tokens: Collection[str] | Mapping[str, int] | None = None,
    ) -> str:
        """The GBNF grammar, special-token markers written as llama.cpp token references.

        Args:
            tokenizer: a ``tokenizers.Tokenizer`` or anything with
                ``token_to_id``: each of :attr:`markers` that is one token of
                it is written ``<[ID]>`` (with a ``tokenizers.Tokenizer``, only
                its added tokens; with another object, only
                :attr:`markers_special`).
            special_tokens: instead, the markers to write as tokens: names
                (``<marker>``, for markers of that shape) or ``{marker: id}``
                (``<[id]>``).
            With neither: :attr:`gbnf` (every marker a quoted literal).

        Raises:
            ValueError: a name that is not ``<...>``-shaped.
        """
        if special_tokens is not None:
            return render_gbnf(self._grammar, specials_for(special_tokens))
        if tokenizer is None:
            return self.gbnf
        return render_gbnf(self._grammar, specials_for(marker_ids(tokenizer, self.markers, self.markers_special)))


def marker_ids(tokenizer: TokenIds, markers: Sequence[str], atomic: Collection[str]) -> dict[str, int]:
    """The markers that are single tokens of ``tokenizer``, with their ids (see :meth:`ToolConstraint.gbnf_grammar`)."""
    added: Collection[int] | None = None
    get_added = getattr(tokenizer, "get_added_tokens_decoder", None)
    if callable(get_added):
        try:
            added = set(get_added())
        except Exception:  # noqa: BLE001 - a lookalike method: fall back to the declared markers
            added = None
    out: dict[str, int] = {}
    for m in markers:
        tid = tokenizer.token_to_id(m)
        if tid is None:
            continue
        if (int(tid) in added) if added is not None else (m in atomic):
            out[m] = int(tid)
    return out


@dataclass(frozen=True)
class PreparedRequest:
    """What :func:`prepare_request` returns.

    Attributes:
        tools: the normalized tools (empty when none were given).
        mode: ``"none"``, ``"auto"``, ``"required"`` or ``"named"``.
        function_name: the forced function for ``"named"``, else None.
        allowed_names: the names the name filter lets through (only the
            forced one for ``"named"``; none for ``"none"``).
        tool_parser: the tool dialect.
        tool_parser_enabled: False for ``"none"`` (and without tools): parse
            no tool calls.
        parallel_tool_calls: whether several calls are allowed.
        constraint: the decoding constraint, or None (``"none"``, or
            ``"auto"`` without ``lazy_auto`` or on a dialect that has no lazy one).
        reasoning_parser: the reasoning parser name, or None.
        reasoning_end: the reasoning end marker when reasoning comes first
            and is enabled (the constraint starts after it), else None.
        thinking: whether reasoning is split for this request.
        strict_tools: the names of the tools marked ``strict`` (OpenAI
            ``function.strict``, or ``strict`` on an Anthropic or bare tool):
            their JSON arguments allow no other keys.
    """

    tools: tuple[ToolSpec, ...]
    mode: Mode
    function_name: str | None
    allowed_names: frozenset[str]
    tool_parser: str
    tool_parser_enabled: bool
    parallel_tool_calls: bool
    constraint: ToolConstraint | None
    reasoning_parser: str | None
    reasoning_end: str | None
    thinking: bool
    strict_tools: frozenset[str] = frozenset()

    @property
    def parse_tools(self) -> list[dict[str, Any]] | None:
        """The tools to hand to the response parser (only the allowed ones), or None."""
        if not self.tool_parser_enabled:
            return None
        return [
            {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
            for t in self.tools
            if t.name in self.allowed_names
        ]


def _parse_choice(tool_choice: Any, names: Collection[str]) -> tuple[Mode, str | None, bool | None]:
    """(mode, forced name, parallel override) from an OpenAI or Anthropic ``tool_choice``."""
    if tool_choice is None:
        return ("auto" if names else "none"), None, None
    if isinstance(tool_choice, str):
        if tool_choice == "none":
            return "none", None, None
        if tool_choice == "auto":
            return "auto", None, None
        if tool_choice == "required":
            return "required", None, None
        if tool_choice == "any":
            return "required", None, None
        raise ToolChoiceError(
            f"unknown tool_choice {tool_choice!r}; expected 'none', 'auto', 'required', "
            "{'type': 'function', 'function': {'name': ...}} (OpenAI) or "
            "{'type': 'auto'|'any'|'none'|'tool', ...} (Anthropic)"
        )
    if not isinstance(tool_choice, Mapping):
        raise ToolChoiceError(f"tool_choice must be a string or an object, got {type(tool_choice).__name__}")
    kind = tool_choice.get("type")
    parallel: bool | None = None
    dis = tool_choice.get("disable_parallel_tool_use")
    if dis is not None:
        if not isinstance(dis, bool):
            raise ToolChoiceError("tool_choice.disable_parallel_tool_use must be a boolean")
        parallel = not dis
    if kind == "function":
        fn = tool_choice.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else tool_choice.get("name")
        if not isinstance(name, str):
            raise ToolChoiceError("tool_choice of type 'function' needs function.name (a string)")
        return "named", name, parallel
    if kind == "tool":
        name = tool_choice.get("name")
        if not isinstance(name, str):
            raise ToolChoiceError("tool_choice of type 'tool' needs 'name' (a string)")
        return "named", name, parallel
    if kind == "auto":
        return "auto", None, parallel
    if kind == "none":
        return "none", None, parallel
    if kind in ("any", "required"):
        return "required", None, parallel
    raise ToolChoiceError(
        f"unknown tool_choice type {kind!r}; OpenAI: {{'type': 'function', 'function': {{'name': ...}}}}, "
        "Anthropic: {'type': 'auto'|'any'|'none'|'tool'}"
    )


def strict_tool_names(tools: Iterable[Any] | None) -> frozenset[str]:
    """The names of the raw tool definitions marked ``strict: true`` (OpenAI's ``function.strict``,
    or a top-level ``strict`` on an Anthropic or bare tool)."""
    out: set[str] = set()
    for entry in tools or ():
        if not isinstance(entry, Mapping):
            continue
        fn = entry.get("function")
        src = fn if isinstance(fn, Mapping) else entry
        if src.get("strict") is True or entry.get("strict") is True:
            name = src.get("name")
            if isinstance(name, str):
                out.add(name)
    return frozenset(out)


def _build(
    dialect: str,
    tools: Sequence[ToolSpec],
    *,
    lazy: bool,
    multi: bool,
    after: str | None,
    strict: Collection[str] = frozenset(),
) -> ToolConstraint:
    layout = layout_for(dialect, "cannot constrain tool calls (tool_choice 'required' or a named function)")
    if lazy and layout.no_lazy:
        raise UnsupportedConstraintError(f"tool parser {dialect!r} has no lazy constraint for 'auto': {layout.no_lazy}")
    multi = multi and layout.multi
    calls = build_calls(dialect, layout, [constraint_tool(t, t.name in strict) for t in tools])
    grammar = build_grammar(layout, calls, multi)
    lark = render_lark(grammar, specials_for(layout.atomic))
    gbnf = render_gbnf(grammar, {})
    st: dict[str, Any] | None
    try:
        st = structural_tag(layout, calls, lazy=lazy, multi=multi)
    except UnsupportedConstraintError:
        st = None  # pythonic, Gemma 4: XGrammar has no such argument style; the grammars cover them
    legacy = legacy_structural_tag(layout, calls)
    trig = triggers(layout, calls)
    declared = registry.get_tool_dialect(dialect).markers
    markers = tuple(dict.fromkeys(m for m in (*layout.atomic, *trig, *declared) if m))
    return ToolConstraint(
        dialect=dialect,
        lazy=lazy,
        triggers=trig,
        structural_tag_json=js(st) if st is not None else None,
        legacy_structural_tag_json=js(legacy) if legacy is not None else None,
        lark=lark,
        gbnf=gbnf,
        markers=markers,
        markers_special=tuple(layout.atomic),
        after_reasoning_end=after,
        parallel=multi,
        _layout=layout,
        _calls=calls,
        _grammar=grammar,
    )


def _materialize(tools: Iterable[Any] | None) -> Iterable[Any] | None:
    """A one-shot iterable as a list (read twice: validated, and for ``strict``); other values as given."""
    if tools is None or isinstance(tools, (str, bytes, Mapping, list, tuple)) or not isinstance(tools, Iterable):
        return tools
    return list(tools)


def prepare_request(
    tools: Iterable[Any] | None,
    tool_choice: Any = None,
    *,
    tool_parser: str,
    reasoning_parser: str | None = None,
    enable_thinking: bool | None = None,
    parallel_tool_calls: bool = True,
    lazy_auto: bool = True,
) -> PreparedRequest:
    """Validate a request's ``tools`` and ``tool_choice`` and build the decoding constraint.

    Args:
        tools: OpenAI or Anthropic tool definitions (or None). A tool marked
            ``strict`` gets ``additionalProperties: false`` on its argument
            objects in the constraint.
        tool_choice: ``"none"``, ``"auto"``, ``"required"``, OpenAI
            ``{"type": "function", "function": {"name": ...}}``, Anthropic
            ``{"type": "auto"|"any"|"none"}`` or ``{"type": "tool", "name": ...}``
            (``disable_parallel_tool_use`` honoured). None: ``"auto"`` when
            there are tools, else ``"none"``.
        tool_parser: the registered tool dialect.
        reasoning_parser: the registered reasoning parser, if any.
        enable_thinking: as for the parsers (None: the reasoning parser's default).
        parallel_tool_calls: allow several calls (OpenAI's flag).
        lazy_auto: build a lazy constraint for ``"auto"`` (skipped silently
            when the dialect has none).

    Raises:
        ToolChoiceError: an unknown ``tool_choice`` form, a named function not
            among the tools, or ``required``/named without tools.
        ToolSpecError: an invalid ``tools`` entry.
        UnknownParserError: an unregistered parser name.
        UnsupportedConstraintError: ``required``/named on a dialect that cannot express it.
    """
    registry.get_tool_dialect(tool_parser)
    rspec = registry.get_reasoning_dialect(reasoning_parser) if reasoning_parser is not None else None
    if enable_thinking is not None and not isinstance(enable_thinking, bool):
        raise TypeError(f"enable_thinking must be a bool or None, got {type(enable_thinking).__name__}")
    tools = _materialize(tools)
    specs = normalize_tools(tools) or ()
    strict = strict_tool_names(tools)
    names = [s.name for s in specs]
    mode, name, par = _parse_choice(tool_choice, names)
    if par is not None:
        parallel_tool_calls = par
    if mode in ("required", "named") and not specs:
        raise ToolChoiceError(f"tool_choice {mode!r} needs a non-empty tools list")
    if mode == "named" and name not in names:
        raise ToolChoiceError(
            f"tool_choice names function {name!r}, which is not among the tools ({', '.join(names)})"
        )
    thinking = (rspec.default_enabled if rspec is not None else False) if enable_thinking is None else enable_thinking
    thinking = thinking and rspec is not None
    reasoning_end = rspec.end if rspec is not None and thinking else None
    if mode == "none":
        allowed: frozenset[str] = frozenset()
    elif mode == "named":
        assert name is not None
        allowed = frozenset((name,))
    else:
        allowed = frozenset(names)
    constraint: ToolConstraint | None = None
    offered = [s for s in specs if s.name in allowed]
    if mode in ("required", "named"):
        constraint = _build(tool_parser, offered, lazy=False, multi=parallel_tool_calls and mode == "required",
                            after=reasoning_end, strict=strict)
    elif mode == "auto" and lazy_auto and offered:
        try:
            constraint = _build(tool_parser, offered, lazy=True, multi=parallel_tool_calls, after=None, strict=strict)
        except UnsupportedConstraintError:
            constraint = None
    return PreparedRequest(
        tools=tuple(specs),
        mode=mode,
        function_name=name if mode == "named" else None,
        allowed_names=allowed,
        tool_parser=tool_parser,
        tool_parser_enabled=mode != "none" and bool(specs),
        parallel_tool_calls=parallel_tool_calls,
        constraint=constraint,
        reasoning_parser=reasoning_parser,
        reasoning_end=reasoning_end,
        thinking=thinking,
        strict_tools=strict,
    )
