"""Per-dialect call layouts: each registered tool dialect's tool section, as pieces.

A :class:`Layout` says how a dialect writes its tool section: an optional
prefix (the section opener), the calls (one :class:`Call` per offered tool:
a fixed begin text, a body of pieces, a fixed end text) joined by a
separator, and an optional suffix. The body's pieces are fixed text
(:class:`Lit`), a regular expression (:class:`Re`, e.g. a call id), JSON
arguments (:class:`Json`), an optional group (:class:`Opt`), and the
argument encodings that are not JSON: XML key/value parameters
(:class:`Xml`), Python keyword arguments (:class:`Py`), Gemma 4's own
serialization (:class:`Gemma`) and MiniMax-M3's element-per-parameter XML
(:class:`Elem`). The grammar writers (``lark``, ``gbnf``, ``xgrammar``) and
the renderer (``render``) all read the same layout, so the grammar and the
canonical text agree by construction; the tests check both against the
dialect's parser.

The facts come from the dialects' declarations (``registry.get_tool_dialect``:
openers, markers) and shared/dialects.md. ``UNSUPPORTED`` names the
registered dialects that have no layout, each with the reason
:class:`~deltaflow.constrain.errors.UnsupportedConstraintError` quotes
(empty today: every registered dialect has a layout); ``NO_LAZY`` the
dialects whose ``"auto"`` cannot be a lazy constraint.
"""

from __future__ import annotations

import json
import re
import secrets
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._core.toolspec import ToolSpec
from ..parsers import registry
from .derive import derive_layout
from .errors import UnsupportedConstraintError
from .schemas import is_raw_string, normalized, strictified

__all__ = (
    "DIGITS",
    "LAYOUTS",
    "NO_LAZY",
    "UNSUPPORTED",
    "XTML_TYPES",
    "Call",
    "Elem",
    "Gemma",
    "Json",
    "Layout",
    "Lit",
    "Opt",
    "Piece",
    "Py",
    "Re",
    "Xml",
    "XmlStyle",
    "build_calls",
    "constraint_tool",
    "js",
    "layout_for",
    "layout_of",
    "params",
    "prefixes",
    "supported_constraint_dialects",
    "triggers",
    "unconstrainable_dialects",
)

# --------------------------------------------------------------------------- pieces


@dataclass(frozen=True)
class Lit:
    """Fixed text."""

    text: str


@dataclass(frozen=True)
class Re:
    """Text matching a regular expression (a call id), with its canonical value.

    Attributes:
        pattern: the regex (no anchors; Lark and XGrammar syntax).
        sample: the canonical value for call number ``i`` (0-based).
        gbnf: the same language as a GBNF expression.
    """

    pattern: str
    sample: Callable[[int], str]
    gbnf: str


@dataclass(frozen=True)
class Json:
    """The arguments as one JSON object of the tool's (normalized) schema."""

    schema: Mapping[str, Any]


@dataclass(frozen=True)
class Opt:
    """Optional pieces: the grammar allows them or not; canonical text writes them (a Mistral call id)."""

    pieces: tuple[Piece, ...]


@dataclass(frozen=True)
class XmlStyle:
    """How one XML key/value parameter is written.

    Attributes:
        open: ``(key, kind) -> opening text``; ``kind`` is ``"string"`` for a
            raw value and ``"json"`` for a JSON one, or (``typed``) the
            value's XTML type name.
        close: the value's closer (unless ``key_close``).
        after: text after each parameter.
        wrap: written around a value in canonical output (qwen: ``"\\n"``).
        excludes: substrings a raw string value may not contain (besides its closer).
        xgrammar_style: XGrammar's argument style for this layout, or None
            (then one tag per parameter).
        key_close: the closer is ``</KEY>`` (xml_tools), not ``close``.
        all_raw: every value is raw text, whatever the schema type (xml_tools).
        typed: the opener names the value's type (Kimi K3's ``type="number"``):
            a parameter of several types is one alternative per type.
        cdata: a raw value may be wrapped in ``<![CDATA[...]]>`` (MiniCPM5),
            so a plain one may not start with that opener.
    """

    open: Callable[[str, str], str]
    close: str
    after: str
    wrap: str
    excludes: tuple[str, ...]
    xgrammar_style: str | None
    key_close: bool = False
    all_raw: bool = False
    typed: bool = False
    cdata: bool = False

    def closer(self, key: str) -> str:
        """The text that ends the value of ``key``."""
        return f"</{key}>" if self.key_close else self.close

    def raw(self, schema: Mapping[str, Any], root: Mapping[str, Any] | None = None) -> bool:
        """Whether the value is written as raw text (else as its JSON literal)."""
        return self.all_raw or is_raw_string(schema, root)


@dataclass(frozen=True)
class Xml:
    """XML key/value parameters, in the schema's ``properties`` order."""

    schema: Mapping[str, Any]
    style: XmlStyle
    tool: str
    dialect: str


@dataclass(frozen=True)
class Py:
    """Python keyword arguments (``k="v", n=1, ok=True``)."""

    schema: Mapping[str, Any]
    tool: str
    dialect: str


@dataclass(frozen=True)
class Gemma:
    """Gemma 4's arguments: ``{key:value,...}``, bare keys, strings between ``<|"|>``, JSON-like otherwise."""

    schema: Mapping[str, Any]
    tool: str
    dialect: str


@dataclass(frozen=True)
class Elem:
    """MiniMax-M3's element-per-parameter arguments: ``M<KEY>value M</KEY>``, objects and arrays nested.

    Attributes:
        schema: the tool's (normalized) parameters schema.
        marker: the prefix of every tag (``]<]minimax[>[``).
        tool: the tool name.
        dialect: the dialect name.
    """

    schema: Mapping[str, Any]
    marker: str
    tool: str
    dialect: str


Piece = Lit | Re | Json | Opt | Xml | Py | Gemma | Elem
"""One piece of a call's body."""


@dataclass(frozen=True)
class Call:
    """One tool's call: fixed begin text, a body of pieces, fixed end text."""

    begin: str
    body: tuple[Piece, ...]
    end: str


@dataclass(frozen=True)
class Layout:
    """One dialect's tool section, from its declaration (see :data:`LAYOUTS`).

    Attributes:
        call: builds the call of one tool (a :class:`ToolSpec` whose
            parameters were normalized by :func:`constraint_tool`).
        trigger: the text that starts the section ("": each call's begin).
        prefix: the section opener (written once, before the calls).
        suffix: the section closer.
        separator: text between two calls.
        multi: whether the section may hold several calls.
        atomic: markers that are single tokens in the dialect's tokenizers.
        legacy: expressible as XGrammar's legacy begin/schema/end structures.
        lead: optional text before the first call (Harmony: a new message after an analysis one).
        alt_prefixes: other accepted section openers, each its own trigger
            (GigaChat 3.1's ``<|function_call|>`` beside GigaChat 3's header);
            canonical text uses ``prefix``.
        no_lazy: why ``"auto"`` has no lazy constraint ("" when it has).
        name_pattern: the tool names the dialect's parser reads (a regex), or "" for any.
    """

    call: Callable[[ToolSpec], Call]
    trigger: str
    prefix: str = ""
    suffix: str = ""
    separator: str = ""
    multi: bool = True
    atomic: tuple[str, ...] = ()
    legacy: bool = False
    lead: str = ""
    alt_prefixes: tuple[str, ...] = ()
    no_lazy: str = ""
    name_pattern: str = ""


# --------------------------------------------------------------------------- helpers


def js(v: Any) -> str:
    """``v`` as JSON text, as the canonical text writes it (``", "`` and ``": "`` separators)."""
    return json.dumps(v, ensure_ascii=False)


def params(tool: ToolSpec) -> dict[str, Any]:
    """The tool's parameters schema (an empty object schema when it has none)."""
    p = dict(tool.parameters) if tool.parameters else {}
    if not p:
        p = {"type": "object", "properties": {}}
    return p


def constraint_tool(tool: ToolSpec, strict: bool = False) -> ToolSpec:
    """``tool`` with its parameters normalized (type names as the parsers read them) and, for a
    ``strict`` tool, ``additionalProperties: false`` on every object schema that lists properties."""
    p = normalized(params(tool))
    if strict:
        p = strictified(p)
    return ToolSpec(name=tool.name, description=tool.description, parameters=p)


DIGITS = "[0-9]{1,9}"
"""A call id or index: at most nine digits (bounded, like every repetition of the grammars)."""
_DIGITS_GBNF = "[0-9]{1,9}"


def _json_env(open_: str, close: str, args_key: str) -> Callable[[ToolSpec], Call]:
    def call(t: ToolSpec) -> Call:
        return Call(f'{open_}{{"name": {js(t.name)}, "{args_key}": ', (Json(params(t)),), f"}}{close}")

    return call


def _xml(begin: Callable[[str], str], end: str, style: XmlStyle, dialect: str) -> Callable[[ToolSpec], Call]:
    def call(t: ToolSpec) -> Call:
        return Call(begin(t.name), (Xml(params(t), style, t.name, dialect),), end)

    return call


def _alnum9(i: int) -> str:
    return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(9))


def _attr(s: str) -> str:
    """An XTML attribute value, escaped as the Kimi K3 template's ``escape_attr`` does."""
    return s.replace("&", "&amp;").replace('"', "&quot;")


# --------------------------------------------------------------------------- XML styles

_XML_TOOLS = XmlStyle(
    open=lambda k, s: f"<{k}>",
    close="",
    after="\n",
    wrap="",
    excludes=(),
    xgrammar_style=None,
    key_close=True,
    all_raw=True,
)
# Step3 (parsers/dialects/step.py): a value ends at its closer or the section closer.
_STEP3 = ("<｜tool_calls_begin｜>", "<｜tool_call_begin｜>", "function<｜tool_sep｜>", "<｜tool_call_end｜>",
          "<｜tool_calls_end｜>")
_STEP3_XML = XmlStyle(
    open=lambda k, s: f'<steptml:parameter name="{k}">',
    close="</steptml:parameter>",
    after="",
    wrap="",
    excludes=(_STEP3[4],),
    xgrammar_style=None,
)
# Kimi K3 XTML (parsers/xtml.py): <|open|>argument key="K" type="T"<|sep|>V<|close|>argument<|sep|>;
# a value ends at the next <|open|> or <|close|>.
_K3 = ("<|open|>", "<|close|>", "<|sep|>")
XTML_TYPES: dict[str, str] = {
    "string": "string", "integer": "number", "number": "number", "boolean": "boolean", "null": "null",
    "object": "object", "array": "array",
}
"""JSON Schema type -> the Kimi K3 template's ``type`` attribute (``xtml_type``)."""
_XTML = XmlStyle(
    open=lambda k, t: f'{_K3[0]}argument key="{_attr(k)}" type="{t}"{_K3[2]}',
    close=f"{_K3[1]}argument{_K3[2]}",
    after="",
    wrap="",
    excludes=(_K3[0], _K3[1]),
    xgrammar_style=None,
    typed=True,
)

# --------------------------------------------------------------------------- markers

_DS_CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
_DS_CALLS_END = "<｜tool▁calls▁end｜>"
_DS_CALL_BEGIN = "<｜tool▁call▁begin｜>"
_DS_CALL_END = "<｜tool▁call▁end｜>"
_DS_SEP = "<｜tool▁sep｜>"
_KIMI = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
         "<|tool_call_argument_begin|>", "<|tool_call_end|>")
_HARMONY = ("<|start|>", "<|channel|>", "<|constrain|>", "<|message|>", "<|call|>")
_MINIMAX_M3 = "]<]minimax[>["
_GEMMA4 = ("<|tool_call>", "<tool_call|>", '<|"|>')
_R7B = ("<|START_ACTION|>", "<|END_ACTION|>")
_GIGACHAT3 = "<|message_sep|>\n\nfunction call<|role_sep|>\n"
_GIGACHAT31 = "<|function_call|>"


def _kimi_call(t: ToolSpec) -> Call:
    return Call(
        f"{_KIMI[2]}functions.{t.name}:",
        (Re(DIGITS, str, _DIGITS_GBNF), Lit(_KIMI[3]), Json(params(t))),
        _KIMI[4],
    )


def _mistral_call(t: ToolSpec) -> Call:
    return Call(
        f"[TOOL_CALLS]{t.name}",
        (Opt((Lit("[CALL_ID]"), Re("[A-Za-z0-9]{9}", _alnum9, "[A-Za-z0-9]{9}"))), Lit("[ARGS]"), Json(params(t))),
        "",
    )


def _pythonic_call(t: ToolSpec) -> Call:
    return Call(f"{t.name}(", (Py(params(t), t.name, "pythonic"),), ")")


def _r7b_call(t: ToolSpec) -> Call:
    # Cohere's template: {"tool_call_id": "0", "tool_name": "NAME", "parameters": {...}} (the id is read past).
    return Call(
        '{"tool_call_id": "',
        (Re(DIGITS, str, _DIGITS_GBNF), Lit(f'", "tool_name": {js(t.name)}, "parameters": '), Json(params(t))),
        "}",
    )


def _k3_call(t: ToolSpec) -> Call:
    # The K3 template numbers calls from 1 (index="1"); the parser reads the attribute past.
    return Call(
        f'{_K3[0]}call tool="{_attr(t.name)}" index="',
        (Re(DIGITS, lambda i: str(i + 1), _DIGITS_GBNF), Lit(f'"{_K3[2]}'), Xml(params(t), _XTML, t.name, "kimi_k3")),
        f"{_K3[1]}call{_K3[2]}",
    )


LAYOUTS: dict[str, Layout] = {
    # Command R7B / Command A: <|START_ACTION|>[ {...}, ... ]<|END_ACTION|>, laid out as its template does.
    "command_r7b": Layout(
        call=_r7b_call,
        trigger=_R7B[0],
        prefix=_R7B[0] + "[\n    ",
        suffix="\n]" + _R7B[1],
        separator=",\n    ",
        atomic=_R7B,  # special tokens (llama.cpp's Command R7B handler matches them whole)
    ),
    # GigaChat 3 writes a header message, GigaChat 3.1 a <|function_call|> token: both are accepted, one call.
    "gigachat3": Layout(
        call=_json_env("", "", "arguments"),
        trigger="<|message_sep|>",
        prefix=_GIGACHAT3,
        alt_prefixes=(_GIGACHAT31,),
        multi=False,
        legacy=True,
    ),
    # Functionary v3.2: the prompt ends with ">>>"; each call is "NAME\n{json}", later ones after ">>>".
    "functionary_v3_2": Layout(
        call=lambda t: Call(f"{t.name}\n", (Json(params(t)),), ""),
        trigger="",
        separator=">>>",
        no_lazy=(
            "its first message starts right after the prompt's '>>>' with a recipient line, not with a "
            "trigger text a lazy constraint could start at"
        ),
        name_pattern=r"[A-Za-z_][\w.:-]*",
    ),
    # Gemma 4: <|tool_call>call:NAME{key:value,...}<tool_call|> per call, no separator.
    "gemma4": Layout(
        call=lambda t: Call(f"{_GEMMA4[0]}call:{t.name}", (Gemma(params(t), t.name, "gemma4"),), _GEMMA4[1]),
        trigger=_GEMMA4[0],
        atomic=_GEMMA4,  # single special tokens of the Gemma 4 vocabulary
        name_pattern=r"[\w.\-]+",
    ),
    # Step3: an XML-function format whose calls sit between filler markers (kept written: fillers are
    # whitespace to its driver, but its template writes them around every invoke).
    "step3": Layout(
        call=_xml(lambda n: f'{_STEP3[1]}{_STEP3[2]}<steptml:invoke name="{n}">', f"</steptml:invoke>{_STEP3[3]}",
                  _STEP3_XML, "step3"),
        trigger=_STEP3[0],
        prefix=_STEP3[0],
        suffix=_STEP3[4],
        atomic=(_STEP3[0], _STEP3[4], _STEP3[1], "<｜tool_sep｜>", _STEP3[3]),  # vLLM lists them as special
    ),
    # LFM2, OLMo 3: the pythonic layout with their own markers.
    "lfm2": Layout(
        call=_pythonic_call,
        trigger="<|tool_call_start|>",
        prefix="<|tool_call_start|>[",
        suffix="]<|tool_call_end|>",
        separator=", ",
        atomic=("<|tool_call_start|>", "<|tool_call_end|>"),
    ),
    "olmo3": Layout(
        call=_pythonic_call,
        trigger="<function_calls>",
        prefix="<function_calls>",
        suffix="</function_calls>",
        separator="\n",
    ),
    # MiniMax-M3: M<tool_call>\nM<invoke name="N">M<KEY>V M</KEY>...M</invoke>\nM</tool_call> (M = the marker).
    "minimax_m3": Layout(
        call=lambda t: Call(f'{_MINIMAX_M3}<invoke name="{t.name}">',
                            (Elem(params(t), _MINIMAX_M3, t.name, "minimax_m3"),), f"{_MINIMAX_M3}</invoke>\n"),
        trigger=f"{_MINIMAX_M3}<tool_call>",
        prefix=f"{_MINIMAX_M3}<tool_call>\n",
        suffix=f"{_MINIMAX_M3}</tool_call>",
        # The marker is likely one special token, but not <...>-shaped: pass its id to lark_grammar / gbnf_grammar.
    ),
    "deepseek_v3": Layout(
        call=lambda t: Call(
            f"{_DS_CALL_BEGIN}function{_DS_SEP}{t.name}\n```json\n", (Json(params(t)),), f"\n```{_DS_CALL_END}"
        ),
        trigger=_DS_CALLS_BEGIN,
        prefix=_DS_CALLS_BEGIN,
        suffix=_DS_CALLS_END,
        separator="\n",
        atomic=(_DS_CALLS_BEGIN, _DS_CALLS_END, _DS_CALL_BEGIN, _DS_CALL_END, _DS_SEP),
        legacy=True,
    ),
    "deepseek_v31": Layout(
        call=lambda t: Call(f"{_DS_CALL_BEGIN}{t.name}{_DS_SEP}", (Json(params(t)),), _DS_CALL_END),
        trigger=_DS_CALLS_BEGIN,
        prefix=_DS_CALLS_BEGIN,
        suffix=_DS_CALLS_END,
        atomic=(_DS_CALLS_BEGIN, _DS_CALLS_END, _DS_CALL_BEGIN, _DS_CALL_END, _DS_SEP),
        legacy=True,
    ),
    "kimi_k2": Layout(
        call=_kimi_call,
        trigger=_KIMI[0],
        prefix=_KIMI[0],
        suffix=_KIMI[1],
        atomic=_KIMI,
    ),
    # Kimi K3 XTML: <|open|>tools<|sep|><|open|>call tool="N" index="1"<|sep|>...<|close|>call<|sep|>
    # <|close|>tools<|sep|>
    "kimi_k3": Layout(
        call=_k3_call,
        trigger=f"{_K3[0]}tools{_K3[2]}",
        prefix=f"{_K3[0]}tools{_K3[2]}",
        suffix=f"{_K3[1]}tools{_K3[2]}",
        atomic=_K3,  # single special tokens of the K3 tokenizer; the tag words between them are text
    ),
    "mistral": Layout(
        call=_mistral_call,
        trigger="[TOOL_CALLS]",
        # [TOOL_CALLS], [CALL_ID], [ARGS] are control tokens, but not written <...>:
        # pass their ids to ToolConstraint.lark_grammar(special_tokens={...}).
    ),
    "openai": Layout(
        call=lambda t: Call(
            f"<|channel|>commentary to=functions.{t.name} <|constrain|>json<|message|>", (Json(params(t)),),
            "<|call|>",
        ),
        trigger="<|channel|>commentary to=functions.",
        multi=False,
        atomic=_HARMONY,
        legacy=True,
        lead="<|start|>assistant",
    ),
    "pythonic": Layout(
        call=_pythonic_call,
        trigger="[",
        prefix="[",
        suffix="]",
        separator=", ",
    ),
    "xml_tools": Layout(
        call=lambda t: Call(f"<{t.name}>\n", (Xml(params(t), _XML_TOOLS, t.name, "xml_tools"),), f"</{t.name}>"),
        trigger="",  # per tool: <NAME>
        separator="\n",
    ),
    "llama4_pythonic": Layout(
        call=_pythonic_call,
        trigger="[",
        prefix="[",
        suffix="]",
        separator=", ",
    ),
}
"""The written layouts, by registry name: dialects whose format's syntax is code (Harmony, Gemma 4,
pythonic, special-token sections, ...), and three JSON-envelope / XML-function dialects whose template
writes more than their format's markers (Command R7B's call ids, GigaChat 3's header message, Step3's
fillers). Every other JSON-envelope and XML-function dialect's layout is derived from its declaration
(:mod:`.derive`); :func:`layout_of` gives either."""

UNSUPPORTED: dict[str, str] = {}
"""Registered dialects that cannot be constrained, each with the one-line reason the error quotes.

Empty: every registered dialect has a layout. A dialect registered without a
layout and not listed here is refused with a generic reason."""

NO_LAZY: dict[str, str] = {name: lay.no_lazy for name, lay in LAYOUTS.items() if lay.no_lazy}
"""Dialects whose ``"auto"`` gets no lazy constraint (``"required"`` and named still do), with the reason."""

_DERIVED: dict[str, tuple[object, Layout]] = {}


def layout_of(dialect: str) -> Layout | None:
    """The registered dialect's layout: its written one, else the one derived from its declaration, else None."""
    written = LAYOUTS.get(dialect)
    if written is not None:
        return written
    try:
        d = registry.get_tool_dialect(dialect)
    except ValueError:
        return None
    cached = _DERIVED.get(dialect)
    if cached is not None and cached[0] is d:  # re-registered under the same name: derive again
        return cached[1]
    layout = derive_layout(d)
    if layout is not None:
        _DERIVED[dialect] = (d, layout)
    return layout


def supported_constraint_dialects() -> tuple[str, ...]:
    """The registered tool dialects for which ``required``/named constraints can be built, sorted."""
    return tuple(n for n in registry.tool_dialect_names() if n not in UNSUPPORTED and layout_of(n) is not None)


def unconstrainable_dialects() -> dict[str, str]:
    """The registered tool dialects that have no layout, each with the reason it cannot be constrained."""
    return {
        n: UNSUPPORTED.get(n, "no constrained-decoding layout is declared for it")
        for n in registry.tool_dialect_names()
        if n in UNSUPPORTED or layout_of(n) is None
    }


def layout_for(dialect: str, what: str = "cannot constrain tool calls") -> Layout:
    """The dialect's layout (written or derived).

    Raises:
        UnsupportedConstraintError: the dialect has none (the message quotes why).
    """
    layout = None if dialect in UNSUPPORTED else layout_of(dialect)
    if layout is None:
        why = UNSUPPORTED.get(dialect, "no constrained-decoding layout is declared for it")
        raise UnsupportedConstraintError(
            f"tool parser {dialect!r} {what}: {why}; supported: {', '.join(supported_constraint_dialects())}"
        )
    return layout


def build_calls(dialect: str, layout: Layout, tools: Sequence[ToolSpec]) -> tuple[Call, ...]:
    """Each tool's :class:`Call` in the dialect's layout.

    Raises:
        UnsupportedConstraintError: a tool name the dialect's parser would not read.
    """
    if layout.name_pattern:
        pat = re.compile(layout.name_pattern)
        for t in tools:
            if not pat.fullmatch(t.name):
                raise UnsupportedConstraintError(
                    f"tool parser {dialect!r}: tool name {t.name!r} cannot be written in this dialect "
                    f"(its parser reads names matching {layout.name_pattern})"
                )
    return tuple(layout.call(t) for t in tools)


def prefixes(layout: Layout) -> tuple[str, ...]:
    """The accepted section openers, canonical first (``("",)`` when the layout has none)."""
    return (layout.prefix, *layout.alt_prefixes)


def triggers(layout: Layout, calls: Sequence[Call]) -> tuple[str, ...]:
    """The trigger texts: the dialect's (and its other openers'), or (xml_tools, functionary_v3_2) each
    call's begin text without its trailing newline."""
    if layout.trigger:
        return (layout.trigger, *layout.alt_prefixes)
    return tuple(dict.fromkeys(c.begin.rstrip("\n") for c in calls))
