"""A small grammar IR built from a layout, rendered by the Lark and GBNF writers.

:func:`build_grammar` turns a dialect's :class:`~deltaflow.constrain.layouts.Layout`
and the offered tools' calls into a :class:`Grammar`: a start expression and
named rules over a handful of node kinds: fixed text (:class:`GLit`, which a
writer may split into special-token references), sequences, alternatives,
bounded or unbounded repetition, a terminal given as a regex
(:class:`GRegex`, with its GBNF spelling), raw text up to a closer
(:class:`GText`), a JSON value of a schema (:class:`GJson`: llguidance's
``%json`` in Lark, a converted rule in GBNF) and rule references.

Both writers render the same tree, so the Lark and the GBNF grammar of a
constraint describe the same language (up to what ``%json`` and the GBNF
JSON converter each accept of a schema).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import UnsupportedConstraintError
from .layouts import XTML_TYPES, Call, Elem, Gemma, Json, Layout, Lit, Opt, Piece, Py, Re, Xml, XmlStyle, js, prefixes
from .schemas import enum_values, inline_refs, kinds, props, restrict

__all__ = (
    "CDATA_CLOSE",
    "CDATA_OPEN",
    "GAlt",
    "GEMMA_KEY",
    "GJson",
    "GLit",
    "GRef",
    "GRegex",
    "GRep",
    "GSeq",
    "GText",
    "Grammar",
    "LEAD_WS_MAX",
    "Node",
    "build_grammar",
    "gemma_key",
)

LEAD_WS_MAX = 8
"""At most this many blanks before the tool section (templates put ``"\\n\\n"`` after the reasoning end)."""

CDATA_OPEN = "<![CDATA["
CDATA_CLOSE = "]]>"

GEMMA_KEY = re.compile(r'[^\s:{}\[\],<>"|]+')
"""A key Gemma 4 writes bare (the parser's key characters); other keys are written between ``<|"|>``."""
_GEMMA_Q = '<|"|>'
_GEMMA_END = "<tool_call|>"


@dataclass(frozen=True)
class GLit:
    """Fixed text (markers in it may be written as special-token references)."""

    text: str


@dataclass(frozen=True)
class GSeq:
    """A sequence."""

    items: tuple[Node, ...]


@dataclass(frozen=True)
class GAlt:
    """Alternatives."""

    items: tuple[Node, ...]


@dataclass(frozen=True)
class GRep:
    """``item`` repeated ``lo`` to ``hi`` times (``hi`` None: unbounded)."""

    item: Node
    lo: int
    hi: int | None


@dataclass(frozen=True)
class GRegex:
    """A terminal: the regex (Lark/llguidance syntax, no slashes) and the same language in GBNF."""

    lark: str
    gbnf: str


@dataclass(frozen=True)
class GText:
    """Raw text, then ``closer``: the text holds none of ``closer`` and ``excludes`` and does not
    start with ``forbid_start`` (the value ends at the first ``closer``, as the parsers read it)."""

    closer: str
    excludes: tuple[str, ...] = ()
    forbid_start: str = ""


@dataclass(frozen=True, eq=False)
class GJson:
    """A JSON value of ``schema`` (self-contained: local ``$ref`` s resolve inside it)."""

    schema: Mapping[str, Any]


@dataclass(frozen=True)
class GRef:
    """A reference to a named rule."""

    name: str


Node = GLit | GSeq | GAlt | GRep | GRegex | GText | GJson | GRef
"""One node of the IR."""

_EMPTY = GSeq(())
_INT = GRegex(r"-?(?:0|[1-9][0-9]{0,19})", '"-"? ("0" | [1-9] [0-9]{0,19})')
_NUM = GRegex(
    r"-?(?:0|[1-9][0-9]{0,19})(?:\.[0-9]{1,20})?(?:[eE][-+]?[0-9]{1,4})?",
    '"-"? ("0" | [1-9] [0-9]{0,19}) ("." [0-9]{1,20})? ([eE] [-+]? [0-9]{1,4})?',
)
_GEMMA_BARE = GRegex(r'[^\s:{}\[\],<>"|]{1,256}', '[^ \\t\\r\\n\\x0B\\x0C:{}\\[\\],<>"|]{1,256}')


@dataclass
class Grammar:
    """A start expression and named rules (in definition order)."""

    start: Node
    rules: dict[str, Node] = field(default_factory=dict)


def _opt(x: Node) -> Node:
    return GRep(x, 0, 1)


def _seq(*xs: Node | None) -> Node:
    items = tuple(x for x in xs if x is not None and x != _EMPTY and x != GLit(""))
    return items[0] if len(items) == 1 else GSeq(items)


def _alt(xs: Sequence[Node]) -> Node:
    return xs[0] if len(xs) == 1 else GAlt(tuple(xs))


def gemma_key(key: str) -> str:
    """A key as Gemma 4 writes it: bare when it can be, else between ``<|"|>``."""
    return key if GEMMA_KEY.fullmatch(key) else f"{_GEMMA_Q}{key}{_GEMMA_Q}"


class _Builder:
    def __init__(self) -> None:
        self.rules: dict[str, Node] = {}
        self.n = 0

    def fresh(self, kind: str) -> str:
        self.n += 1
        return f"{kind}_{self.n}"

    def rule(self, kind: str, body: Node) -> GRef:
        name = self.fresh(kind)
        self.rules[name] = body
        return GRef(name)

    # -- pieces ------------------------------------------------------------------------------
    def pieces(self, ps: Sequence[Piece]) -> Node:
        return _seq(*(self.piece(p) for p in ps))

    def piece(self, p: Piece) -> Node:
        if isinstance(p, Lit):
            return GLit(p.text)
        if isinstance(p, Re):
            return GRegex(p.pattern, p.gbnf)
        if isinstance(p, Json):
            return GJson(p.schema)
        if isinstance(p, Opt):
            return _opt(self.pieces(p.pieces))
        if isinstance(p, Xml):
            return self.xml(p)
        if isinstance(p, Py):
            return self.py(p)
        if isinstance(p, Gemma):
            return self.gemma_object(p.schema, p.schema)
        return self.elem_members(p, p.schema, p.schema)

    # -- keyword lists (pythonic, Gemma): optional members with separators between them ------------
    def members(self, items: Sequence[tuple[Node, bool]], sep: str, kind: str) -> Node:
        """The members in order (each ``(node, required)``), ``sep`` between two written ones."""
        memo: dict[tuple[int, bool], Node | None] = {}

        def rest(i: int, before: bool) -> Node | None:
            if i == len(items):
                return None
            if (i, before) in memo:
                return memo[(i, before)]
            node, required = items[i]
            item = _seq(GLit(sep) if before else None, node)
            nxt = rest(i + 1, True)
            with_item = _seq(item, nxt)
            if required:
                body = with_item
            else:
                without = rest(i + 1, before)
                body = _alt([with_item, without]) if without is not None else _opt(with_item)
            ref = self.rule(kind, body)
            memo[(i, before)] = ref
            return ref

        first = rest(0, False)
        return first if first is not None else _EMPTY

    # -- XML key/value -------------------------------------------------------------------------------
    def xml(self, p: Xml) -> Node:
        ps, req = props(p.schema)
        items: list[Node] = []
        for k, sub in ps:
            item = _seq(self.xml_param(p, k, sub), GLit(p.style.after))
            items.append(item if k in req else _opt(item))
        return _seq(*items)

    def raw_value(self, style: XmlStyle, sub: Mapping[str, Any], closer: str, excludes: tuple[str, ...]) -> Node:
        """A raw text value and its closer (an enum/const as its choices)."""
        alts = enum_values(sub)
        if alts is not None:
            texts = [a if isinstance(a, str) else js(a) for a in alts]
            choices: list[Node] = [GLit(t) for t in texts]
            if style.wrap:
                choices += [GLit(style.wrap + t + style.wrap) for t in texts]
            return _seq(_alt(choices or [GLit("")]), GLit(closer))
        text = GText(closer, excludes, CDATA_OPEN if style.cdata else "")
        if style.cdata:
            return GAlt((text, _seq(GLit(CDATA_OPEN), GText(CDATA_CLOSE), GLit(closer))))
        return text

    def xml_param(self, p: Xml, key: str, sub: Mapping[str, Any]) -> Node:
        style, root = p.style, p.schema
        closer = style.closer(key)
        excludes = (*style.excludes, f"</{p.tool}>") if style.key_close else style.excludes
        s = inline_refs(sub, root)
        if style.typed:
            ks = kinds(sub, root) if not style.all_raw else ()
            alts: list[Node] = []
            for t in dict.fromkeys(XTML_TYPES[k] for k in (ks or ("string",))):
                if t == "string":
                    value = self.raw_value(style, restrict(s, "string") if ks else s, closer, excludes)
                else:
                    value = _seq(GJson(restrict(s, t)), GLit(closer))
                alts.append(_seq(GLit(style.open(key, t)), value))
            return _alt(alts)
        if style.raw(sub, root):
            return _seq(GLit(style.open(key, "string")), self.raw_value(style, s, closer, excludes))
        w = _opt(GLit(style.wrap)) if style.wrap else None
        return _seq(GLit(style.open(key, "json")), w, GJson(s), w, GLit(closer))

    # -- pythonic ------------------------------------------------------------------------------------
    def py(self, p: Py) -> Node:
        ps, req = props(p.schema)
        items = [(_seq(GLit(f"{k}="), self.py_value(p, k, sub)), k in req) for k, sub in ps]
        return self.members(items, ", ", "kw")

    def py_value(self, p: Py, key: str, sub: Mapping[str, Any]) -> Node:
        ks = set(kinds(sub, p.schema))
        if not ks or not ks <= {"string", "integer", "number", "boolean", "null"}:
            raise UnsupportedConstraintError(
                f"tool parser {p.dialect!r}: parameter {key!r} of tool {p.tool!r} has type "
                f"{sorted(ks) or 'unspecified'}; a pythonic grammar is built only for string, integer, "
                "number, boolean and null parameters"
            )
        s = inline_refs(sub, p.schema)
        alts: list[Node] = []
        jk = [k for k in ("string", "integer", "number") if k in ks]
        if jk:
            alts.append(GJson(s) if ks == set(jk) else _alt([GJson(restrict(s, k)) for k in jk]))
        if "boolean" in ks:
            alts.append(GAlt((GLit("True"), GLit("False"))))
        if "null" in ks:
            alts.append(GLit("None"))
        return _alt(alts)

    # -- Gemma 4 -------------------------------------------------------------------------------------
    def gemma_object(self, schema: Mapping[str, Any], root: Mapping[str, Any]) -> Node:
        ps, req = props(schema)
        if not ps:
            if schema.get("additionalProperties") is False:
                return GLit("{}")
            return self.gemma_generic()
        items = [(_seq(GLit(gemma_key(k) + ":"), self.gemma_value(sub, root)), k in req) for k, sub in ps]
        return _seq(GLit("{"), self.members(items, ",", "gm"), GLit("}"))

    def gemma_string(self) -> Node:
        return _seq(GLit(_GEMMA_Q), GText(_GEMMA_Q, (_GEMMA_END,)))

    def gemma_value(self, sub: Mapping[str, Any], root: Mapping[str, Any]) -> Node:
        s = inline_refs(sub, root)
        ks = kinds(s)
        if not ks:
            return self.gemma_generic()
        alts: list[Node] = []
        for k in ks:
            if k == "string":
                values = enum_values(restrict(s, "string"))
                if values is not None:
                    alts.extend(GLit(f"{_GEMMA_Q}{v}{_GEMMA_Q}") for v in values if isinstance(v, str))
                else:
                    alts.append(self.gemma_string())
            elif k == "object":
                alts.append(self.gemma_object(restrict(s, "object"), root))
            elif k == "array":
                items = s.get("items")
                item = self.gemma_value(items, root) if isinstance(items, Mapping) else self.gemma_generic()
                alts.append(_seq(GLit("["), _opt(_seq(item, GRep(_seq(GLit(","), item), 0, None))), GLit("]")))
            else:  # integer, number, boolean, null: written as their JSON text
                alts.append(GJson(restrict(s, k)))
        return _alt(alts)

    def gemma_generic(self) -> Node:
        """Any Gemma 4 value (a recursive rule, defined once)."""
        if "gemma_value" not in self.rules:
            v = GRef("gemma_value")
            self.rules["gemma_value"] = _EMPTY  # reserve the name (recursion)
            key = GAlt((_GEMMA_BARE, self.gemma_string()))
            member = _seq(key, GLit(":"), v)
            obj = _seq(GLit("{"), _opt(_seq(member, GRep(_seq(GLit(","), member), 0, None))), GLit("}"))
            arr = _seq(GLit("["), _opt(_seq(v, GRep(_seq(GLit(","), v), 0, None))), GLit("]"))
            self.rules["gemma_value"] = GAlt(
                (self.gemma_string(), _NUM, GLit("true"), GLit("false"), GLit("null"), obj, arr)
            )
        return GRef("gemma_value")

    # -- MiniMax-M3 elements --------------------------------------------------------------------------
    def elem_members(self, p: Elem, schema: Mapping[str, Any], root: Mapping[str, Any]) -> Node:
        ps, req = props(schema)
        items: list[Node] = []
        for k, sub in ps:
            e = self.element(p, k, sub, root)
            items.append(e if k in req else _opt(e))
        return _seq(*items)

    def element(self, p: Elem, key: str, sub: Mapping[str, Any], root: Mapping[str, Any]) -> Node:
        m = p.marker
        closer = f"{m}</{key}>"
        s = inline_refs(sub, root)
        ks = kinds(s)
        if not ks or "string" in ks:
            values = enum_values(s)
            if values is not None:
                texts = [v if isinstance(v, str) else js(v) for v in values]
                content: Node = _seq(_alt([GLit(t) for t in texts] or [GLit("")]), GLit(closer))
            else:
                content = GText(closer, (m,))
        elif ks == ("object",) and isinstance(s.get("properties"), Mapping):
            content = _seq(self.elem_members(p, s, s), GLit(closer))
        elif ks == ("array",) and isinstance(s.get("items"), Mapping):
            content = _seq(GRep(self.element(p, "item", s["items"], s), 0, None), GLit(closer))
        else:
            content = _seq(GJson(s), GLit(closer))
        return _seq(GLit(f"{m}<{key}>"), content)


def build_grammar(layout: Layout, calls: Sequence[Call], multi: bool) -> Grammar:
    """The grammar of a tool section: optional bounded blanks, the lead, a section opener, the calls, the closer.

    The call rules are named ``call_1``, ``call_2``... in the tools' order and
    ``call`` is their alternative.
    """
    b = _Builder()
    names: list[str] = []
    for c in calls:
        name = b.fresh("call")
        names.append(name)
        b.rules[name] = _EMPTY
        b.rules[name] = _seq(GLit(c.begin), b.pieces(c.body), GLit(c.end))
    rules = {"call": _alt([GRef(n) for n in names]), **b.rules}
    call = GRef("call")
    if multi and layout.separator:
        seq: Node = _seq(call, GRep(_seq(GLit(layout.separator), call), 0, None))
    elif multi:
        seq = GRep(call, 1, None)
    else:
        seq = call
    lead = _opt(GLit(layout.lead)) if layout.lead else None
    opener = _alt([GLit(x) for x in prefixes(layout)])
    # blanks may come first: templates put "\n\n" between the reasoning end and the calls (bounded)
    ws = _opt(GRegex(f"[ \\t\\r\\n]{{1,{LEAD_WS_MAX}}}", f"[ \\t\\r\\n]{{1,{LEAD_WS_MAX}}}"))
    start = _seq(ws, lead, opener, seq, GLit(layout.suffix))
    return Grammar(start, rules)

