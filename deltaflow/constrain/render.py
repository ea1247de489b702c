"""Canonical text: calls rendered in a dialect's exact syntax (what its constraint describes).

The renderer reads the same layouts as the grammar writers and the same
schema reading as the parsers, so a rendered call is accepted by the
dialect's grammar and parses back to its arguments (tests/property).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..tools import normalize_tools
from .errors import ToolChoiceError, UnsupportedConstraintError
from .grammar import CDATA_CLOSE, CDATA_OPEN, gemma_key
from .layouts import (
    XTML_TYPES,
    Elem,
    Gemma,
    Json,
    Lit,
    Opt,
    Piece,
    Py,
    Re,
    Xml,
    build_calls,
    constraint_tool,
    js,
    layout_for,
)
from .schemas import inline_refs, kinds, props, value_kind

__all__ = ("canonical_json", "render_tool_calls")

_GEMMA_Q = '<|"|>'


def _xml_text(p: Xml, args: Mapping[str, Any]) -> str:
    ps, _ = props(p.schema)
    style = p.style
    out = []
    for k, sub in ps:
        if k not in args:
            continue
        v = args[k]
        text = v if isinstance(v, str) else js(canonical_json(v, sub, p.schema))
        if style.typed:
            kind = "string" if isinstance(v, str) or style.all_raw else XTML_TYPES[value_kind(v)]
            raw = kind == "string"
        else:
            raw = style.raw(sub, p.schema) and (isinstance(v, str) or style.all_raw)
            kind = "string" if raw else "json"
        closer = style.closer(k)
        if raw:
            if style.cdata and (closer in text or text.startswith(CDATA_OPEN)) and CDATA_CLOSE not in text:
                text = f"{CDATA_OPEN}{text}{CDATA_CLOSE}"
            val = f"{style.wrap}{text}{style.wrap}"
        else:
            val = f"{style.wrap}{text}{style.wrap}"
        out.append(f"{style.open(k, kind)}{val}{closer}{style.after}")
    return "".join(out)


def _py_lit(v: Any) -> str:
    if v is True:
        return "True"
    if v is False:
        return "False"
    if v is None:
        return "None"
    return js(v)


def _ordered(schema: Mapping[str, Any], args: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The arguments in the schema's property order, then any others."""
    order = [k for k, _ in props(schema)[0]]
    keyed = [(k, args[k]) for k in order if k in args]
    keyed += [(k, v) for k, v in args.items() if k not in order]
    return keyed


def canonical_json(v: Any, schema: Mapping[str, Any], root: Mapping[str, Any]) -> Any:
    """``v`` with every object's keys in its schema's property order (others after them), as the
    JSON grammars (llguidance's ``%json``, the GBNF converter) require."""
    s = inline_refs(schema, root)
    if isinstance(v, Mapping):
        ps = dict(props(s)[0])
        return {k: canonical_json(x, ps.get(k, {}), s) for k, x in _ordered(s, v)}
    if isinstance(v, (list, tuple)):
        items = s.get("items")
        return [canonical_json(x, items if isinstance(items, Mapping) else {}, s) for x in v]
    return v


def _gemma(v: Any, schema: Mapping[str, Any], root: Mapping[str, Any]) -> str:
    s = inline_refs(schema, root)
    if isinstance(v, str):
        return f"{_GEMMA_Q}{v}{_GEMMA_Q}"
    if isinstance(v, Mapping):
        ps = dict(props(s)[0])
        return "{" + ",".join(f"{gemma_key(k)}:{_gemma(x, ps.get(k, {}), s)}" for k, x in _ordered(s, v)) + "}"
    if isinstance(v, (list, tuple)):
        items = s.get("items")
        return "[" + ",".join(_gemma(x, items if isinstance(items, Mapping) else {}, s) for x in v) + "]"
    return js(v)


def _elem(p: Elem, schema: Mapping[str, Any], args: Mapping[str, Any]) -> str:
    ps = dict(props(schema)[0])
    return "".join(_element(p, k, inline_refs(ps.get(k, {}), schema), v) for k, v in _ordered(schema, args))


def _element(p: Elem, key: str, s: Mapping[str, Any], v: Any) -> str:
    m = p.marker
    ks = kinds(s)
    if not ks or "string" in ks:
        inner = v if isinstance(v, str) else js(canonical_json(v, s, s))
    elif ks == ("object",) and isinstance(s.get("properties"), Mapping) and isinstance(v, Mapping):
        inner = _elem(p, s, v)
    elif ks == ("array",) and isinstance(s.get("items"), Mapping) and isinstance(v, (list, tuple)):
        inner = "".join(_element(p, "item", inline_refs(s["items"], s), x) for x in v)
    else:
        inner = js(canonical_json(v, s, s))
    return f"{m}<{key}>{inner}{m}</{key}>"


def _piece_text(p: Piece, args: Mapping[str, Any], i: int) -> str:
    if isinstance(p, Lit):
        return p.text
    if isinstance(p, Re):
        return p.sample(i)
    if isinstance(p, Json):
        # schema property order first: llguidance's %json (and XGrammar by default) keep that order
        return js(canonical_json(dict(args), p.schema, p.schema))
    if isinstance(p, Opt):
        return "".join(_piece_text(q, args, i) for q in p.pieces)
    if isinstance(p, Xml):
        return _xml_text(p, args)
    if isinstance(p, Gemma):
        return _gemma(dict(args), p.schema, p.schema)
    if isinstance(p, Elem):
        return _elem(p, p.schema, args)
    assert isinstance(p, Py)
    ps, _ = props(p.schema)
    return ", ".join(f"{k}={_py_lit(args[k])}" for k, _s in ps if k in args)


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
        UnsupportedConstraintError: the dialect has no declared layout, a
            tool name it cannot write, or several calls where its block
            holds one (GigaChat 3, InternLM, Harmony).
        ToolChoiceError: a call names a tool that is not among ``tools``.
    """
    layout = layout_for(tool_parser, "has no declared canonical layout")
    if len(calls) > 1 and not layout.multi:
        raise UnsupportedConstraintError(
            f"tool parser {tool_parser!r} writes one call per block; got {len(calls)} calls (render them one at a time)"
        )
    by_name = {t.name: t for t in normalize_tools(tools) or ()}
    parts = []
    for i, (name, args) in enumerate(calls):
        if name not in by_name:
            raise ToolChoiceError(f"call to {name!r}, which is not among the tools")
        (c,) = build_calls(tool_parser, layout, [constraint_tool(by_name[name])])
        parts.append(c.begin + "".join(_piece_text(p, args, i) for p in c.body) + c.end)
    return layout.prefix + layout.separator.join(parts) + layout.suffix
