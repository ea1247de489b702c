"""The XGrammar writers: the structural tag (``format`` form) and the legacy ``structures`` form.

The ``format`` form (XGrammar >= 0.1.25; the XML argument styles
``qwen_xml``, ``glm_xml``, ``minimax_xml`` and ``deepseek_xml`` of XGrammar
0.2) is consumed by vLLM, LMDeploy and SGLang. XML layouts without an
XGrammar style (xml_tools, Step3, MiniCPM5, Kimi K3, MiniMax-M3) are written
one ``tag`` per parameter, raw text as ``any_text`` with the excluded
markers. Pythonic and Gemma 4 arguments have no XGrammar form (None: the
Lark and GBNF grammars cover them). Blanks before a non-lazy section are
bounded (``[ \\t\\r\\n]{0,8}``); XGrammar's own JSON whitespace is not
configurable from the structural tag.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .errors import UnsupportedConstraintError
from .grammar import LEAD_WS_MAX
from .layouts import (
    XTML_TYPES,
    Call,
    Elem,
    Gemma,
    Json,
    Layout,
    Lit,
    Opt,
    Piece,
    Py,
    Re,
    Xml,
    js,
    prefixes,
    triggers,
)
from .schemas import enum_values, inline_refs, kinds, props, restrict

__all__ = ("legacy_structural_tag", "structural_tag")

_EMPTY: dict[str, Any] = {"type": "const_string", "value": ""}


def _seq(elements: list[dict[str, Any]]) -> dict[str, Any]:
    if not elements:
        return dict(_EMPTY)
    return elements[0] if len(elements) == 1 else {"type": "sequence", "elements": elements}


def _or(elements: list[dict[str, Any]]) -> dict[str, Any]:
    return elements[0] if len(elements) == 1 else {"type": "or", "elements": elements}


def _opt(content: dict[str, Any]) -> dict[str, Any]:
    return {"type": "optional", "content": content}


def _raw(closer: str, excludes: Sequence[str], sub: Mapping[str, Any], begin: str) -> dict[str, Any]:
    values = enum_values(sub)
    if values is not None:
        content = _or([{"type": "const_string", "value": v if isinstance(v, str) else js(v)} for v in values])
    else:
        content = {"type": "any_text", "excludes": list(excludes)}
    return {"type": "tag", "begin": begin, "content": content, "end": closer}


def _xml_params(p: Xml) -> list[dict[str, Any]]:
    ps, req = props(p.schema)
    style = p.style
    out: list[dict[str, Any]] = []
    for k, sub in ps:
        closer = style.closer(k)
        excludes = [*style.excludes, f"</{p.tool}>"] if style.key_close else list(style.excludes)
        s = inline_refs(sub, p.schema)
        if style.typed:
            ks = kinds(sub, p.schema) or ("string",)
            alts = []
            for t in dict.fromkeys(XTML_TYPES[x] for x in ks):
                if t == "string":
                    alts.append(_raw(closer, excludes, restrict(s, "string"), style.open(k, t)))
                else:
                    alts.append({"type": "tag", "begin": style.open(k, t),
                                 "content": {"type": "json_schema", "json_schema": restrict(s, t)}, "end": closer})
            tag = _or(alts)
        elif style.raw(sub, p.schema):
            tag = _raw(closer, excludes, s, style.open(k, "string"))
        else:
            tag = {"type": "tag", "begin": style.open(k, "json"), "content": {"type": "json_schema", "json_schema": s},
                   "end": closer}
        item = _seq([tag, {"type": "const_string", "value": style.after}] if style.after else [tag])
        out.append(item if k in req else _opt(item))
    return out


def _elem(p: Elem, schema: Mapping[str, Any]) -> list[dict[str, Any]]:
    ps, req = props(schema)
    out = []
    for k, sub in ps:
        e = _element(p, k, inline_refs(sub, schema))
        out.append(e if k in req else _opt(e))
    return out


def _element(p: Elem, key: str, s: Mapping[str, Any]) -> dict[str, Any]:
    m = p.marker
    begin, end = f"{m}<{key}>", f"{m}</{key}>"
    ks = kinds(s)
    if not ks or "string" in ks:
        return _raw(end, [m], s, begin)
    if ks == ("object",) and isinstance(s.get("properties"), Mapping):
        content = _seq(_elem(p, s))
    elif ks == ("array",) and isinstance(s.get("items"), Mapping):
        item = _element(p, "item", inline_refs(s["items"], s))
        content = {"type": "tags_with_separator", "tags": [item], "separator": "", "at_least_one": False,
                   "stop_after_first": False}
    else:
        content = {"type": "json_schema", "json_schema": dict(s)}
    return {"type": "tag", "begin": begin, "content": content, "end": end}


def _pieces(ps: Sequence[Piece]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in ps:
        if isinstance(p, Lit):
            out.append({"type": "const_string", "value": p.text})
        elif isinstance(p, Re):
            out.append({"type": "regex", "pattern": p.pattern})
        elif isinstance(p, Json):
            out.append({"type": "json_schema", "json_schema": dict(p.schema)})
        elif isinstance(p, Opt):
            out.append(_opt(_seq(_pieces(p.pieces))))
        elif isinstance(p, Xml):
            if p.style.xgrammar_style is not None:
                out.append({"type": "json_schema", "json_schema": dict(p.schema), "style": p.style.xgrammar_style})
            else:
                out.extend(_xml_params(p))
        elif isinstance(p, Elem):
            out.extend(_elem(p, p.schema))
        else:
            kind = "pythonic" if isinstance(p, Py) else "Gemma 4"
            assert isinstance(p, (Py, Gemma))
            raise UnsupportedConstraintError(
                f"tool parser {p.dialect!r}: XGrammar has no {kind} argument style; use the Lark or GBNF grammar"
            )
    return out


def _tag(c: Call) -> dict[str, Any]:
    return {"type": "tag", "begin": c.begin, "content": _seq(_pieces(c.body)), "end": c.end}


def structural_tag(layout: Layout, calls: Sequence[Call], *, lazy: bool, multi: bool) -> dict[str, Any]:
    """XGrammar's structural tag (``format`` form) of the tool section.

    Raises:
        UnsupportedConstraintError: an argument encoding XGrammar cannot express (pythonic, Gemma 4).
    """
    tags = [_tag(c) for c in calls]
    trig = list(triggers(layout, calls))
    if layout.prefix or layout.suffix:
        inner: dict[str, Any] = {"type": "tags_with_separator", "tags": tags, "separator": layout.separator,
                                 "at_least_one": True, "stop_after_first": not multi}
        sections = [{"type": "tag", "begin": pre, "content": inner, "end": layout.suffix} for pre in prefixes(layout)]
        if lazy:
            fmt: dict[str, Any] = {"type": "triggered_tags", "triggers": trig, "tags": sections,
                                   "at_least_one": False, "stop_after_first": False}
        else:
            fmt = _or(sections)
    elif lazy:
        fmt = {"type": "triggered_tags", "triggers": trig, "tags": tags,
               "at_least_one": False, "stop_after_first": not multi}
    else:
        fmt = {"type": "tags_with_separator", "tags": tags, "separator": layout.separator,
               "at_least_one": True, "stop_after_first": not multi}
    if not lazy:
        # blanks may come first: templates put "\n\n" between the reasoning end and the calls (bounded)
        lead: list[dict[str, Any]] = [{"type": "regex", "pattern": f"[ \\t\\r\\n]{{0,{LEAD_WS_MAX}}}"}]
        if layout.lead:
            lead.append(_opt({"type": "const_string", "value": layout.lead}))
        fmt = {"type": "sequence", "elements": [*lead, fmt]}
    return {"type": "structural_tag", "format": fmt}


def legacy_structural_tag(layout: Layout, calls: Sequence[Call]) -> dict[str, Any] | None:
    """The legacy ``{"structures": [{begin, schema, end}], "triggers"}`` form, or None when the
    dialect's calls are not a fixed begin text, one JSON object and a fixed end text."""
    if not layout.legacy:
        return None
    structures = []
    for pre in prefixes(layout):
        for c in calls:
            (piece,) = c.body
            assert isinstance(piece, Json)
            structures.append({"begin": pre + c.begin, "schema": dict(piece.schema), "end": c.end + layout.suffix})
    return {"type": "structural_tag", "structures": structures, "triggers": list(triggers(layout, calls))}
