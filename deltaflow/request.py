"""The request side of tool calling: ``tools`` + ``tool_choice`` -> what the engine needs.

:func:`prepare_request` validates a request's ``tools`` (OpenAI and Anthropic
forms, through :func:`~deltaflow.tools.normalize_tools`) and ``tool_choice``
and returns a frozen :class:`PreparedRequest`: the normalized tools, the names
the name filter allows, whether tool parsing is on, and, for ``"required"``,
a named function and (lazily) ``"auto"``, a :class:`ToolConstraint` written in
the dialect's exact syntax:

* ``structural_tag``: XGrammar's structural tag (the ``format`` form of
  XGrammar >= 0.1.25, with the XML argument styles ``qwen_xml``,
  ``glm_xml``, ``minimax_xml`` and ``deepseek_xml`` of XGrammar 0.2);
  consumed by vLLM and LMDeploy (``structured_outputs`` / ``response_format``
  ``{"type": "structural_tag", ...}``) and SGLang;
* ``legacy_structural_tag``: the older ``{"type": "structural_tag",
  "structures": [{"begin", "schema", "end"}], "triggers": [...]}`` form, for
  dialects whose calls are a fixed begin string, a JSON object and a fixed
  end string (None otherwise). It never forces a call: free text is allowed
  until a trigger;
* ``lark``: an equivalent Lark grammar for llguidance, the arguments of
  JSON dialects embedded as ``%json{...}``. Markers that are single tokens
  in the dialect's tokenizers are written as special-token references
  (``<tool_call>``); :meth:`ToolConstraint.lark_grammar` renders it for
  another set (e.g. token ids ``<[151657]>`` or plain text).

Both describe the output *from the tool section on*. For ``"required"`` and
a named function the engine applies them to the whole output, or, when the
reasoning comes first, from the end of the reasoning on:
``ToolConstraint.after_reasoning_end`` names the end marker, and an engine
finds that point on token ids with
:class:`~deltaflow.parsers.token_reasoning.TokenReasoning`
(``is_reasoning_end`` / ``extract_content_ids``) before switching the
constraint on. For ``"auto"`` the constraint is lazy: the structural tag is
a ``triggered_tags`` format (any text until a trigger), and the Lark grammar
is meant to be started at the first trigger (llama.cpp's lazy grammars).

The same declaration renders canonical text (:func:`render_tool_calls`), so
the grammar, the renderer and the parsers can be checked against one another.
Argument grammars follow the schema: XML key/value dialects write a string
parameter as raw text without the closing tag, other types as their JSON
literal; parameters come in the schema's ``properties`` order, required ones
mandatory, optional ones optional, no others (JSON arguments too: llguidance
and XGrammar keep the schema's property order). Schema keywords on raw XML
strings other than ``enum``/``const`` (``pattern``, ``maxLength``) are not
enforced by the Lark grammar.

Per dialect (shared/dialects.md): ``hermes``, ``internlm``, ``llama3_json``
(no ``<|python_tag|>``; calls joined by ``; ``), ``deepseek_v3``,
``deepseek_v31``, ``kimi_k2`` (id ``functions.NAME:N``), ``mistral`` (v11+:
``[TOOL_CALLS]NAME[CALL_ID]id[ARGS]{...}``, the id optional, i.e. the v13
form too) and ``openai`` (Harmony, one call, an optional ``<|start|>assistant``
first) have JSON arguments; ``qwen3_coder``, ``seed_oss``, ``glm45``,
``glm47``, ``minimax_m2``, ``deepseek_v32`` and ``xml_tools`` XML key/value
ones (``xml_tools``: every value is text, triggers are ``<NAME>`` per tool);
``granite4``, ``granite-20b-fc``, ``ernie45``, ``longcat`` (one JSON envelope per
call), ``granite``, ``hunyuan_a13b``, ``jamba``, ``apriel``, ``nemotron``,
``xlam`` (the bare array), ``phi4_mini_json``, ``firefunction_v2``,
``apertus`` (``{"NAME": {...}}`` elements) and ``command_r_plus``
(``Action:`` and a ```` ```json ```` fence) one JSON array of calls;
``functionary_v3_1`` one ``<function=NAME>{...}</function>`` per call
(``gigachat3`` has none: GigaChat 3 and 3.1 frame a call differently);
``pythonic`` and ``llama4_pythonic`` keyword arguments (string, integer,
number, boolean and null parameters only; Lark grammar only, XGrammar has no
such style). A registered dialect without a layout raises
:class:`UnsupportedConstraintError` for ``required``/named.
"""

from __future__ import annotations

import json
import re
import secrets
import string
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union

from .errors import DeltaflowError
from .parsers import registry
from .tools import ToolSpec, normalize_tools

__all__ = (
    "PreparedRequest",
    "ToolChoiceError",
    "ToolConstraint",
    "UnsupportedConstraintError",
    "prepare_request",
    "render_tool_calls",
    "supported_constraint_dialects",
)

Mode = Literal["none", "auto", "required", "named"]


class ToolChoiceError(DeltaflowError, ValueError):
    """An invalid ``tool_choice`` (unknown form, or a function not among the tools)."""


class UnsupportedConstraintError(DeltaflowError, ValueError):
    """The dialect cannot express the requested constraint (the message names the dialect and why)."""


# --------------------------------------------------------------------------- pieces


@dataclass(frozen=True)
class _Lit:
    text: str


@dataclass(frozen=True)
class _Re:
    pattern: str  # a regex (no anchors)
    sample: Callable[[int], str]  # canonical value for call number i


@dataclass(frozen=True)
class _Json:
    schema: Mapping[str, Any]


@dataclass(frozen=True)
class _Opt:
    pieces: tuple[Any, ...]


@dataclass(frozen=True)
class _Xml:
    schema: Mapping[str, Any]
    style: _XmlStyle
    tool: str
    dialect: str


@dataclass(frozen=True)
class _Py:
    schema: Mapping[str, Any]
    tool: str
    dialect: str


_Piece = Union[_Lit, _Re, _Json, _Opt, _Xml, _Py]


@dataclass(frozen=True)
class _XmlStyle:
    """How one XML key/value parameter is written."""

    open: Callable[[str, bool], str]  # (key, is_string) -> opening text
    close: str
    after: str  # text after each parameter
    wrap: str  # written around a value in canonical output (qwen: "\n")
    excludes: tuple[str, ...]  # substrings a raw string value may not contain (besides ``close``)
    xgrammar_style: str | None
    key_close: bool = False  # the closer is </KEY> (xml_tools), not ``close``
    all_raw: bool = False  # every value is raw text, whatever the schema type (xml_tools)

    def closer(self, key: str) -> str:
        return f"</{key}>" if self.key_close else self.close

    def raw(self, schema: Mapping[str, Any]) -> bool:
        return self.all_raw or _is_raw_string(schema)


_QWEN_XML = _XmlStyle(
    open=lambda k, s: f"<parameter={k}>",
    close="</parameter>",
    after="\n",
    wrap="\n",
    excludes=("<parameter=", "</function>"),
    xgrammar_style="qwen_xml",
)
_GLM45_XML = _XmlStyle(
    open=lambda k, s: f"<arg_key>{k}</arg_key>\n<arg_value>",
    close="</arg_value>",
    after="\n",
    wrap="",
    excludes=("<arg_key>", "</tool_call>"),
    xgrammar_style="glm_xml",
)
_GLM47_XML = _XmlStyle(
    open=lambda k, s: f"<arg_key>{k}</arg_key><arg_value>",
    close="</arg_value>",
    after="",
    wrap="",
    excludes=("<arg_key>", "</tool_call>"),
    xgrammar_style="glm_xml",
)
_MINIMAX_XML = _XmlStyle(
    open=lambda k, s: f'<parameter name="{k}">',
    close="</parameter>",
    after="\n",
    wrap="",
    excludes=("</invoke>",),
    xgrammar_style="minimax_xml",
)
_XML_TOOLS = _XmlStyle(
    open=lambda k, s: f"<{k}>",
    close="",
    after="\n",
    wrap="",
    excludes=(),
    xgrammar_style=None,
    key_close=True,
    all_raw=True,
)
_DSML = "｜DSML｜"
_DSML_XML = _XmlStyle(
    open=lambda k, s: f'<{_DSML}parameter name="{k}" string="{"true" if s else "false"}">',
    close=f"</{_DSML}parameter>",
    after="\n",
    wrap="",
    excludes=(f"</{_DSML}invoke>",),
    xgrammar_style="deepseek_xml",
)


@dataclass(frozen=True)
class _Call:
    begin: str
    body: tuple[_Piece, ...]
    end: str


@dataclass(frozen=True)
class _Layout:
    """One dialect's tool section, from its declaration (see the ``_LAYOUTS`` table)."""

    call: Callable[[ToolSpec], _Call]
    trigger: str
    prefix: str = ""
    suffix: str = ""
    separator: str = ""
    multi: bool = True
    atomic: tuple[str, ...] = ()  # markers that are single tokens in the dialect's tokenizers
    legacy: bool = False  # expressible as the legacy begin/schema/end structures
    lead: str = ""  # optional text before the first call (Harmony: a new message after an analysis one)


def _params(tool: ToolSpec) -> dict[str, Any]:
    p = dict(tool.parameters) if tool.parameters else {}
    if not p:
        p = {"type": "object", "properties": {}}
    return p


def _js(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False)


def _json_env(open_: str, close: str, args_key: str) -> Callable[[ToolSpec], _Call]:
    def call(t: ToolSpec) -> _Call:
        return _Call(f'{open_}{{"name": {_js(t.name)}, "{args_key}": ', (_Json(_params(t)),), f"}}{close}")

    return call


def _xml(begin: Callable[[str], str], end: str, style: _XmlStyle, dialect: str) -> Callable[[ToolSpec], _Call]:
    def call(t: ToolSpec) -> _Call:
        return _Call(begin(t.name), (_Xml(_params(t), style, t.name, dialect),), end)

    return call


def _alnum9(i: int) -> str:
    return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(9))


_DS_CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
_DS_CALLS_END = "<｜tool▁calls▁end｜>"
_DS_CALL_BEGIN = "<｜tool▁call▁begin｜>"
_DS_CALL_END = "<｜tool▁call▁end｜>"
_DS_SEP = "<｜tool▁sep｜>"
_KIMI = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
         "<|tool_call_argument_begin|>", "<|tool_call_end|>")
_HARMONY = ("<|start|>", "<|channel|>", "<|constrain|>", "<|message|>", "<|call|>")


def _kimi_call(t: ToolSpec) -> _Call:
    return _Call(
        f"{_KIMI[2]}functions.{t.name}:",
        (_Re("[0-9]+", str), _Lit(_KIMI[3]), _Json(_params(t))),
        _KIMI[4],
    )


def _mistral_call(t: ToolSpec) -> _Call:
    return _Call(
        f"[TOOL_CALLS]{t.name}",
        (_Opt((_Lit("[CALL_ID]"), _Re("[A-Za-z0-9]{9}", _alnum9))), _Lit("[ARGS]"), _Json(_params(t))),
        "",
    )


def _pythonic_call(t: ToolSpec) -> _Call:
    return _Call(f"{t.name}(", (_Py(_params(t), t.name, "pythonic"),), ")")


_LAYOUTS: dict[str, _Layout] = {
    # json_array_family: JSON envelopes, per call or as one JSON array of calls.
    "granite": _Layout(
        call=_json_env("", "", "arguments"),
        trigger="<|tool_call|>",
        prefix="<|tool_call|>[",
        suffix="]",
        separator=", ",
        atomic=("<|tool_call|>",),
    ),
    "granite4": _Layout(
        call=_json_env("<tool_call>\n", "\n</tool_call>", "arguments"),
        trigger="<tool_call>",
        separator="\n",
        atomic=("<tool_call>", "</tool_call>"),  # special tokens of Granite 4.0 (vLLM keeps specials for them)
        legacy=True,
    ),
    "granite-20b-fc": _Layout(
        call=_json_env("<function_call> ", "", "arguments"),
        trigger="<function_call>",
        separator="\n",
        legacy=True,
    ),
    "ernie45": _Layout(
        call=_json_env("<tool_call>\n", "\n</tool_call>\n", "arguments"),
        trigger="<tool_call>",
        atomic=("<tool_call>", "</tool_call>"),
        legacy=True,
    ),
    "longcat": _Layout(
        call=_json_env("<longcat_tool_call>", "</longcat_tool_call>", "arguments"),
        trigger="<longcat_tool_call>",
        separator="\n",
        legacy=True,
    ),
    **{
        name: _Layout(
            call=_json_env("", "", "arguments"),
            trigger=opener,
            prefix=opener + "[",
            suffix="]" + closer,
            separator=", ",
            atomic=atomic,
        )
        for name, opener, closer, atomic in (
            ("hunyuan_a13b", "<tool_calls>", "</tool_calls>", ()),
            ("jamba", "<tool_calls>", "</tool_calls>", ("<tool_calls>", "</tool_calls>")),
            ("apriel", "<tool_calls>", "</tool_calls>", ()),
            ("nemotron", "<TOOLCALL>", "</TOOLCALL>", ()),
            ("phi4_mini_json", "functools", "", ()),
            ("firefunction_v2", "functools", "", ()),
        )
    },
    "xlam": _Layout(  # xLAM-2 writes the bare array (its other framings are parsed, not generated)
        call=_json_env("", "", "arguments"),
        trigger="[",
        prefix="[",
        suffix="]",
        separator=", ",
    ),
    # functionary_family: Functionary v3.1's <function=NAME>{json}</function>, Command R+'s fenced array.
    "functionary_v3_1": _Layout(
        call=lambda t: _Call(f"<function={t.name}>", (_Json(_params(t)),), "</function>"),
        trigger="<function=",
        legacy=True,
    ),
    "command_r_plus": _Layout(
        call=lambda t: _Call('{"tool_name": ' + _js(t.name) + ', "parameters": ', (_Json(_params(t)),), "}"),
        trigger="Action:",
        prefix="Action:\n```json\n[",
        suffix="]\n```",
        separator=", ",
    ),
    "apertus": _Layout(
        call=lambda t: _Call("{" + _js(t.name) + ": ", (_Json(_params(t)),), "}"),
        trigger="<|tools_prefix|>",
        prefix="<|tools_prefix|>[",
        suffix="]<|tools_suffix|>",
        separator=", ",
    ),
    # more_tool_families: layouts of the drivers they reuse, with their own markers.
    "step3p5": _Layout(
        call=_xml(lambda n: f"<tool_call>\n<function={n}>\n", "</function>\n</tool_call>", _QWEN_XML, "step3p5"),
        trigger="<tool_call>",
        separator="\n",
        atomic=("<tool_call>", "</tool_call>"),  # as in Qwen3-Coder, whose format Step-3.5 writes (unverified)
    ),
    "ling3": _Layout(
        call=_xml(lambda n: f"<tool_call>{n}\n", "</tool_call>", _GLM45_XML, "ling3"),
        trigger="<tool_call>",
        separator="\n",
        atomic=("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),  # as GLM (unverified)
    ),
    "deepseek_v4": _Layout(
        call=_xml(lambda n: f'<{_DSML}invoke name="{n}">\n', f"</{_DSML}invoke>\n", _DSML_XML, "deepseek_v4"),
        trigger=f"<{_DSML}tool_calls>",
        prefix=f"<{_DSML}tool_calls>\n",
        suffix=f"</{_DSML}tool_calls>",
    ),
    "lfm2": _Layout(
        call=_pythonic_call,
        trigger="<|tool_call_start|>",
        prefix="<|tool_call_start|>[",
        suffix="]<|tool_call_end|>",
        separator=", ",
        atomic=("<|tool_call_start|>", "<|tool_call_end|>"),
    ),
    "olmo3": _Layout(
        call=_pythonic_call,
        trigger="<function_calls>",
        prefix="<function_calls>",
        suffix="</function_calls>",
        separator="\n",
    ),
    "hermes": _Layout(
        call=_json_env("<tool_call>\n", "\n</tool_call>", "arguments"),
        trigger="<tool_call>",
        separator="\n",
        atomic=("<tool_call>", "</tool_call>"),
        legacy=True,
    ),
    "internlm": _Layout(
        call=_json_env("<|action_start|><|plugin|>\n", "<|action_end|>", "parameters"),
        trigger="<|action_start|>",
        multi=False,
        atomic=("<|action_start|>", "<|plugin|>", "<|action_end|>"),
        legacy=True,
    ),
    "llama3_json": _Layout(
        call=_json_env("", "", "parameters"),
        trigger='{"name": ',
        separator="; ",
        legacy=True,
    ),
    "qwen3_coder": _Layout(
        call=_xml(lambda n: f"<tool_call>\n<function={n}>\n", "</function>\n</tool_call>", _QWEN_XML, "qwen3_coder"),
        trigger="<tool_call>",
        separator="\n",
        atomic=("<tool_call>", "</tool_call>"),
    ),
    "seed_oss": _Layout(
        call=_xml(lambda n: f"<seed:tool_call>\n<function={n}>\n", "</function>\n</seed:tool_call>", _QWEN_XML,
                  "seed_oss"),
        trigger="<seed:tool_call>",
        separator="\n",
        atomic=("<seed:tool_call>", "</seed:tool_call>"),
    ),
    "glm45": _Layout(
        call=_xml(lambda n: f"<tool_call>{n}\n", "</tool_call>", _GLM45_XML, "glm45"),
        trigger="<tool_call>",
        separator="\n",
        atomic=("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),
    ),
    "glm47": _Layout(
        call=_xml(lambda n: f"<tool_call>{n}", "</tool_call>", _GLM47_XML, "glm47"),
        trigger="<tool_call>",
        atomic=("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),
    ),
    "minimax_m2": _Layout(
        call=_xml(lambda n: f'<invoke name="{n}">\n', "</invoke>\n", _MINIMAX_XML, "minimax_m2"),
        trigger="<minimax:tool_call>",
        prefix="<minimax:tool_call>\n",
        suffix="</minimax:tool_call>",
        atomic=("<minimax:tool_call>", "</minimax:tool_call>"),
    ),
    "deepseek_v32": _Layout(
        call=_xml(lambda n: f'<{_DSML}invoke name="{n}">\n', f"</{_DSML}invoke>\n", _DSML_XML, "deepseek_v32"),
        trigger=f"<{_DSML}function_calls>",
        prefix=f"<{_DSML}function_calls>\n",
        suffix=f"</{_DSML}function_calls>",
    ),
    "deepseek_v3": _Layout(
        call=lambda t: _Call(
            f"{_DS_CALL_BEGIN}function{_DS_SEP}{t.name}\n```json\n", (_Json(_params(t)),), f"\n```{_DS_CALL_END}"
        ),
        trigger=_DS_CALLS_BEGIN,
        prefix=_DS_CALLS_BEGIN,
        suffix=_DS_CALLS_END,
        separator="\n",
        atomic=(_DS_CALLS_BEGIN, _DS_CALLS_END, _DS_CALL_BEGIN, _DS_CALL_END, _DS_SEP),
        legacy=True,
    ),
    "deepseek_v31": _Layout(
        call=lambda t: _Call(f"{_DS_CALL_BEGIN}{t.name}{_DS_SEP}", (_Json(_params(t)),), _DS_CALL_END),
        trigger=_DS_CALLS_BEGIN,
        prefix=_DS_CALLS_BEGIN,
        suffix=_DS_CALLS_END,
        atomic=(_DS_CALLS_BEGIN, _DS_CALLS_END, _DS_CALL_BEGIN, _DS_CALL_END, _DS_SEP),
        legacy=True,
    ),
    "kimi_k2": _Layout(
        call=_kimi_call,
        trigger=_KIMI[0],
        prefix=_KIMI[0],
        suffix=_KIMI[1],
        atomic=_KIMI,
    ),
    "mistral": _Layout(
        call=_mistral_call,
        trigger="[TOOL_CALLS]",
        # [TOOL_CALLS], [CALL_ID], [ARGS] are control tokens, but not written <...>:
        # pass their ids to ToolConstraint.lark_grammar(special_tokens={...}).
    ),
    "openai": _Layout(
        call=lambda t: _Call(
            f"<|channel|>commentary to=functions.{t.name} <|constrain|>json<|message|>", (_Json(_params(t)),),
            "<|call|>",
        ),
        trigger="<|channel|>commentary to=functions.",
        multi=False,
        atomic=_HARMONY,
        legacy=True,
        lead="<|start|>assistant",
    ),
    "pythonic": _Layout(
        call=_pythonic_call,
        trigger="[",
        prefix="[",
        suffix="]",
        separator=", ",
    ),
    "xml_tools": _Layout(
        call=lambda t: _Call(f"<{t.name}>\n", (_Xml(_params(t), _XML_TOOLS, t.name, "xml_tools"),), f"</{t.name}>"),
        trigger="",  # per tool: <NAME>
        separator="\n",
    ),
    "llama4_pythonic": _Layout(
        call=_pythonic_call,
        trigger="[",
        prefix="[",
        suffix="]",
        separator=", ",
    ),
}

_UNSUPPORTED: dict[str, str] = {}


def supported_constraint_dialects() -> tuple[str, ...]:
    """The registered tool dialects for which ``required``/named constraints can be built, sorted."""
    return tuple(n for n in registry.tool_parser_names() if n in _LAYOUTS)


# --------------------------------------------------------------------------- schema helpers


def _types(schema: Mapping[str, Any]) -> set[str]:
    t = schema.get("type")
    if isinstance(t, str):
        return {t}
    if isinstance(t, list):
        return {x for x in t if isinstance(x, str)}
    if "enum" in schema and all(isinstance(x, str) for x in schema["enum"]):
        return {"string"}
    if "const" in schema and isinstance(schema["const"], str):
        return {"string"}
    return set()


def _is_raw_string(schema: Mapping[str, Any]) -> bool:
    """A parameter written as raw text: string-typed, or untyped (parsers keep unknown values as strings)."""
    ts = _types(schema)
    return ts == {"string"} or not ts or "string" in ts and len(ts) > 1


def _props(schema: Mapping[str, Any]) -> tuple[list[tuple[str, Mapping[str, Any]]], set[str]]:
    props = schema.get("properties") or {}
    req = set(schema.get("required") or ())
    return [(k, v if isinstance(v, Mapping) else {}) for k, v in props.items()], req


# --------------------------------------------------------------------------- Lark rendering


def _lark_str(s: str) -> str:
    return _js(s)


def _re_escape(s: str) -> str:
    return re.escape(s).replace("/", "\\/")


class _LarkWriter:
    def __init__(self, specials: Mapping[str, str]) -> None:
        self.specials = specials  # marker -> Lark reference
        self.rules: list[str] = []
        self.n = 0

    def fresh(self, kind: str) -> str:
        self.n += 1
        return f"{kind}_{self.n}"

    def lit(self, s: str) -> str:
        if not s:
            return ""
        parts: list[str] = []
        i = 0
        while i < len(s):
            best: tuple[int, str] | None = None
            for m in self.specials:
                j = s.find(m, i)
                if j >= 0 and (best is None or j < best[0] or j == best[0] and len(m) > len(best[1])):
                    best = (j, m)
            if best is None:
                parts.append(_lark_str(s[i:]))
                break
            j, m = best
            if j > i:
                parts.append(_lark_str(s[i:j]))
            parts.append(self.specials[m])
            i = j + len(m)
        return " ".join(parts)

    def pieces(self, ps: Iterable[_Piece]) -> str:
        return " ".join(x for x in (self.piece(p) for p in ps) if x)

    def piece(self, p: _Piece) -> str:
        if isinstance(p, _Lit):
            return self.lit(p.text)
        if isinstance(p, _Re):
            name = self.fresh("RE").upper()
            self.rules.append(f"{name}: /{p.pattern}/")
            return name
        if isinstance(p, _Json):
            return "%json" + json.dumps(p.schema, ensure_ascii=False, sort_keys=False)
        if isinstance(p, _Opt):
            inner = self.pieces(p.pieces)
            return f"({inner})?"
        if isinstance(p, _Xml):
            return self.xml(p)
        return self.py(p)

    def raw_value(self, close: str, excludes: Sequence[str]) -> str:
        """A terminal: raw text ending with ``close``, with no ``close`` or excluded text before."""
        name = self.fresh("RAW").upper()
        c = _re_escape(close)
        terms = [f"/(?s:.*){c}/", f"~/(?s:.*){c}(?s:.)+/"]
        terms += [f"~/(?s:.*){_re_escape(x)}(?s:.*)/" for x in excludes]
        self.rules.append(f"{name}: " + " & ".join(terms))
        return name

    def xml_value(self, sub: Mapping[str, Any], style: _XmlStyle, key: str, tool: str) -> str:
        closer = style.closer(key)
        close = self.lit(closer)
        excludes = (*style.excludes, f"</{tool}>") if style.key_close else style.excludes
        if style.raw(sub):
            alts = sub.get("enum") if isinstance(sub.get("enum"), list) else (
                [sub["const"]] if "const" in sub else None)
            if alts is not None:
                choices = [self.lit(str(a)) for a in alts]
                if style.wrap:
                    choices += [self.lit(style.wrap + str(a) + style.wrap) for a in alts]
                return f"({' | '.join(choices)}) {close}"
            if closer in self.specials:
                # the closer is a special token: the raw text is any text without it
                name = self.fresh("TXT").upper()
                ex = [f"~/(?s:.*){_re_escape(x)}(?s:.*)/" for x in excludes]
                self.rules.append(f"{name}: " + " & ".join(["/(?s:.*)/", *ex]))
                return f"{name}? {close}"
            return self.raw_value(closer, excludes)
        w = f"{self.lit(style.wrap)}? " if style.wrap else ""
        return f"{w}%json{json.dumps(sub, ensure_ascii=False)} {w}{close}"

    def xml(self, p: _Xml) -> str:
        props, req = _props(p.schema)
        items: list[str] = []
        for k, sub in props:
            raw = p.style.raw(sub)
            value = self.xml_value(sub, p.style, k, p.tool)
            item = f"{self.lit(p.style.open(k, raw))} {value} {self.lit(p.style.after)}".strip()
            items.append(item if k in req else f"({item})?")
        return " ".join(items)

    def py_value(self, sub: Mapping[str, Any], p: _Py, key: str) -> str:
        ts = _types(sub)
        if ts == {"boolean"}:
            return '("True" | "False")'
        if ts == {"null"}:
            return '"None"'
        if ts and ts <= {"string", "integer", "number"}:
            return "%json" + json.dumps(dict(sub), ensure_ascii=False)
        raise UnsupportedConstraintError(
            f"tool parser {p.dialect!r}: parameter {key!r} of tool {p.tool!r} has type "
            f"{sorted(ts) or 'unspecified'}; a pythonic grammar is built only for string, integer, "
            "number, boolean and null parameters"
        )

    def py(self, p: _Py) -> str:
        props, req = _props(p.schema)
        # rest(i, any_before): the keyword arguments i.. given whether one was written before
        memo: dict[tuple[int, bool], str] = {}

        def rest(i: int, before: bool) -> str:
            if i == len(props):
                return ""
            if (i, before) in memo:
                return memo[(i, before)]
            k, sub = props[i]
            sep = '", " ' if before else ""
            item = f'{sep}"{k}=" {self.py_value(sub, p, k)}'
            with_item = f"{item} {rest(i + 1, True)}".strip()
            if k in req:
                body = with_item
            else:
                without = rest(i + 1, before)
                body = f"({with_item})" + (f" | {without}" if without else "")
                if not without:
                    body = f"({with_item})?"
            name = self.fresh("kw")
            self.rules.append(f"{name}: {body}" if body else f"{name}: \"\"")
            memo[(i, before)] = name
            return name

        return rest(0, False)


def _render_lark(layout: _Layout, calls: Sequence[_Call], specials: Mapping[str, str], multi: bool) -> str:
    w = _LarkWriter(specials)
    names = []
    for c in calls:
        name = w.fresh("call")
        body = " ".join(x for x in (w.lit(c.begin), w.pieces(c.body), w.lit(c.end)) if x)
        w.rules.append(f"{name}: {body}")
        names.append(name)
    w.rules.insert(0, f"call: {' | '.join(names)}")
    seq = f"call ({w.lit(layout.separator)} call)*" if multi and layout.separator else ("call+" if multi else "call")
    lead = f"({w.lit(layout.lead)})?" if layout.lead else ""
    top = " ".join(x for x in ("LEAD_WS?", lead, w.lit(layout.prefix), seq, w.lit(layout.suffix)) if x)
    # whitespace may come first: templates put "\n\n" between the reasoning end and the calls
    return "\n".join([f"start: {top}", *w.rules, "LEAD_WS: /[ \\t\\r\\n]+/"]) + "\n"


def _specials_for(markers: Collection[str] | Mapping[str, int]) -> dict[str, str]:
    out: dict[str, str] = {}
    if isinstance(markers, Mapping):
        for m, tid in markers.items():
            out[m] = f"<[{int(tid)}]>"
        return out
    for m in markers:
        if not (m.startswith("<") and m.endswith(">")) or ">" in m[1:-1]:
            raise ValueError(f"special token {m!r} cannot be referenced by name in Lark; pass {{marker: id}} instead")
        out[m] = m
    return out


# --------------------------------------------------------------------------- XGrammar rendering


def _triggers(layout: _Layout, calls: Sequence[_Call]) -> tuple[str, ...]:
    """The trigger texts: the dialect's, or (xml_tools) each call's begin marker."""
    if layout.trigger:
        return (layout.trigger,)
    return tuple(dict.fromkeys(c.begin.rstrip("\n") for c in calls))


def _xg_pieces(ps: Sequence[_Piece]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in ps:
        if isinstance(p, _Lit):
            out.append({"type": "const_string", "value": p.text})
        elif isinstance(p, _Re):
            out.append({"type": "regex", "pattern": p.pattern})
        elif isinstance(p, _Json):
            out.append({"type": "json_schema", "json_schema": dict(p.schema)})
        elif isinstance(p, _Opt):
            inner = _xg_pieces(p.pieces)
            out.append({"type": "optional", "content": inner[0] if len(inner) == 1 else
                        {"type": "sequence", "elements": inner}})
        elif isinstance(p, _Xml):
            if p.style.xgrammar_style is not None:
                out.append({"type": "json_schema", "json_schema": dict(p.schema), "style": p.style.xgrammar_style})
            else:  # xml_tools: one tag per parameter, raw text up to its closer
                out.extend(_xg_raw_params(p))
        else:
            raise UnsupportedConstraintError(
                f"tool parser {p.dialect!r}: XGrammar has no pythonic argument style; use the Lark grammar"
            )
    return out


def _xg_raw_params(p: _Xml) -> list[dict[str, Any]]:
    props, req = _props(p.schema)
    out: list[dict[str, Any]] = []
    for k, _sub in props:
        item: dict[str, Any] = {"type": "sequence", "elements": [
            {"type": "tag", "begin": p.style.open(k, True),
             "content": {"type": "any_text", "excludes": [f"</{p.tool}>"]}, "end": p.style.closer(k)},
            {"type": "const_string", "value": p.style.after},
        ]}
        out.append(item if k in req else {"type": "optional", "content": item})
    return out


def _xg_tag(c: _Call) -> dict[str, Any]:
    body = _xg_pieces(c.body)
    content = body[0] if len(body) == 1 else {"type": "sequence", "elements": body}
    return {"type": "tag", "begin": c.begin, "content": content, "end": c.end}


def _xg_structural_tag(layout: _Layout, calls: Sequence[_Call], *, lazy: bool, multi: bool) -> dict[str, Any]:
    tags = [_xg_tag(c) for c in calls]
    if layout.prefix or layout.suffix:
        inner: dict[str, Any] = {"type": "tags_with_separator", "tags": tags, "separator": layout.separator,
                                 "at_least_one": True, "stop_after_first": not multi}
        if lazy:
            fmt: dict[str, Any] = {"type": "triggered_tags", "triggers": list(_triggers(layout, calls)),
                                   "tags": [{"type": "tag", "begin": layout.prefix, "content": inner,
                                             "end": layout.suffix}],
                                   "at_least_one": False, "stop_after_first": False}
        else:
            fmt = {"type": "tag", "begin": layout.prefix, "content": inner, "end": layout.suffix}
    elif lazy:
        fmt = {"type": "triggered_tags", "triggers": list(_triggers(layout, calls)), "tags": tags,
               "at_least_one": False, "stop_after_first": not multi}
    else:
        fmt = {"type": "tags_with_separator", "tags": tags, "separator": layout.separator,
               "at_least_one": True, "stop_after_first": not multi}
    if not lazy:
        # whitespace may come first: templates put "\n\n" between the reasoning end and the calls
        lead: list[dict[str, Any]] = [{"type": "regex", "pattern": "[ \\t\\r\\n]*"}]
        if layout.lead:
            lead.append({"type": "optional", "content": {"type": "const_string", "value": layout.lead}})
        fmt = {"type": "sequence", "elements": [*lead, fmt]}
    return {"type": "structural_tag", "format": fmt}


def _xg_legacy(layout: _Layout, calls: Sequence[_Call]) -> dict[str, Any] | None:
    if not layout.legacy:
        return None
    structures = []
    for c in calls:
        (piece,) = c.body
        assert isinstance(piece, _Json)
        structures.append({"begin": layout.prefix + c.begin, "schema": dict(piece.schema), "end": c.end + layout.suffix})
    return {"type": "structural_tag", "structures": structures, "triggers": list(_triggers(layout, calls))}


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class ToolConstraint:
    """A constrained-decoding spec for a dialect's tool section (see the module docstring).

    Attributes:
        dialect: the tool parser name.
        lazy: True for ``"auto"``: the constraint starts at a trigger; False
            for ``"required"``/named: the output (after reasoning) must be calls.
        triggers: the texts that start the tool section.
        structural_tag_json: XGrammar structural tag (``format`` form), JSON
            text, or None (pythonic: XGrammar has no such argument style).
        legacy_structural_tag_json: the ``structures``/``triggers`` form, JSON
            text, or None when the dialect's calls are not begin + JSON + end.
        lark: the llguidance Lark grammar, with :attr:`markers_special` as special tokens.
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
    markers: tuple[str, ...]
    markers_special: tuple[str, ...]
    after_reasoning_end: str | None
    parallel: bool
    _layout: _Layout = field(repr=False, compare=False)
    _calls: tuple[_Call, ...] = field(repr=False, compare=False)

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
        """
        if special_tokens is None:
            return self.lark
        return _render_lark(self._layout, self._calls, _specials_for(special_tokens), self.parallel)


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
            ``"auto"`` without ``lazy_auto`` or on an unsupported dialect).
        reasoning_parser: the reasoning parser name, or None.
        reasoning_end: the reasoning end marker when reasoning comes first
            and is enabled (the constraint starts after it), else None.
        thinking: whether reasoning is split for this request.
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


def _build(
    dialect: str,
    tools: Sequence[ToolSpec],
    *,
    lazy: bool,
    multi: bool,
    after: str | None,
) -> ToolConstraint:
    layout = _LAYOUTS.get(dialect)
    if layout is None:
        why = _UNSUPPORTED.get(dialect, "no constrained-decoding layout is declared for it")
        raise UnsupportedConstraintError(
            f"tool parser {dialect!r} cannot constrain tool calls (tool_choice 'required' or a named function): "
            f"{why}; supported: {', '.join(supported_constraint_dialects())}"
        )
    multi = multi and layout.multi
    calls = tuple(layout.call(t) for t in tools)
    specials = _specials_for(layout.atomic)
    lark = _render_lark(layout, calls, specials, multi)
    st: dict[str, Any] | None
    try:
        st = _xg_structural_tag(layout, calls, lazy=lazy, multi=multi)
    except UnsupportedConstraintError:
        st = None  # pythonic: XGrammar has no such argument style; the Lark grammar covers it
    legacy = _xg_legacy(layout, calls)
    markers = tuple(dict.fromkeys(
        m for m in (*layout.atomic, *_triggers(layout, calls)) if m
    ))
    return ToolConstraint(
        dialect=dialect,
        lazy=lazy,
        triggers=_triggers(layout, calls),
        structural_tag_json=_js(st) if st is not None else None,
        legacy_structural_tag_json=_js(legacy) if legacy is not None else None,
        lark=lark,
        markers=markers,
        markers_special=tuple(layout.atomic),
        after_reasoning_end=after,
        parallel=multi,
        _layout=layout,
        _calls=calls,
    )


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
        tools: OpenAI or Anthropic tool definitions (or None).
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
    registry.get_tool_parser(tool_parser)
    rspec = registry.get_reasoning_parser(reasoning_parser) if reasoning_parser is not None else None
    if enable_thinking is not None and not isinstance(enable_thinking, bool):
        raise TypeError(f"enable_thinking must be a bool or None, got {type(enable_thinking).__name__}")
    specs = normalize_tools(tools) or ()
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
                            after=reasoning_end)
    elif mode == "auto" and lazy_auto and offered:
        try:
            constraint = _build(tool_parser, offered, lazy=True, multi=parallel_tool_calls, after=None)
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
    )


# --------------------------------------------------------------------------- canonical rendering


def _xml_text(p: _Xml, args: Mapping[str, Any]) -> str:
    props, _ = _props(p.schema)
    out = []
    for k, sub in props:
        if k not in args:
            continue
        v = args[k]
        raw = p.style.raw(sub) and (isinstance(v, str) or p.style.all_raw)
        text = v if isinstance(v, str) else _js(v)
        val = f"{p.style.wrap}{text}{p.style.wrap}" if raw else _js(v)
        if not raw and p.style.wrap:
            val = f"{p.style.wrap}{val}{p.style.wrap}"
        out.append(f"{p.style.open(k, raw)}{val}{p.style.closer(k)}{p.style.after}")
    return "".join(out)


def _py_lit(v: Any) -> str:
    if v is True:
        return "True"
    if v is False:
        return "False"
    if v is None:
        return "None"
    return _js(v)


def _piece_text(p: _Piece, args: Mapping[str, Any], i: int) -> str:
    if isinstance(p, _Lit):
        return p.text
    if isinstance(p, _Re):
        return p.sample(i)
    if isinstance(p, _Json):
        # schema property order first: llguidance's %json (and XGrammar by default) keep that order
        order = list(p.schema.get("properties") or {})
        keyed = {k: args[k] for k in order if k in args}
        keyed.update((k, v) for k, v in args.items() if k not in keyed)
        return _js(keyed)
    if isinstance(p, _Opt):
        return "".join(_piece_text(q, args, i) for q in p.pieces)
    if isinstance(p, _Xml):
        return _xml_text(p, args)
    props, _ = _props(p.schema)
    return ", ".join(f"{k}={_py_lit(args[k])}" for k, _s in props if k in args)


def render_tool_calls(
    tool_parser: str,
    calls: Sequence[tuple[str, Mapping[str, Any]]],
    tools: Iterable[Any],
) -> str:
    """Render calls in a dialect's canonical syntax (what its constraint describes).

    Args:
        tool_parser: the tool dialect.
        calls: ``(name, arguments)`` pairs.
        tools: the tool definitions (their schemas decide XML value typing
            and parameter order).

    Raises:
        UnsupportedConstraintError: the dialect has no declared layout.
        ToolChoiceError: a call names a tool that is not among ``tools``.
    """
    layout = _LAYOUTS.get(tool_parser)
    if layout is None:
        raise UnsupportedConstraintError(f"tool parser {tool_parser!r} has no declared canonical layout")
    by_name = {t.name: t for t in normalize_tools(tools) or ()}
    parts = []
    for i, (name, args) in enumerate(calls):
        if name not in by_name:
            raise ToolChoiceError(f"call to {name!r}, which is not among the tools")
        c = layout.call(by_name[name])
        parts.append(c.begin + "".join(_piece_text(p, args, i) for p in c.body) + c.end)
    return layout.prefix + layout.separator.join(parts) + layout.suffix
