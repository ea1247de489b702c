"""The GBNF writer: a constraint's grammar in llama.cpp's format (the ``grammar`` field of ``/completion``).

The same grammar IR as the Lark writer (``grammar.py``), rendered as GBNF
rules (``root ::= ...``). What llguidance's ``%json`` does in Lark is done
here by a schema converter (:class:`_Json`) for the subset the layouts use:
objects with ``properties`` (in order; ``required`` ones mandatory, optional
ones optional; other keys after them unless ``additionalProperties`` is
false), strings (``enum`` / ``const``, ``minLength`` / ``maxLength``),
integers, numbers, booleans, null, arrays with ``items`` (``minItems`` /
``maxItems``), nested objects, ``anyOf`` / ``oneOf`` and type lists, local
``$ref`` s (inlined); any other schema is a generic JSON value. JSON
whitespace is at most 20 blanks per place, digits and exponents are bounded.

Raw text up to a closer (an XML value) is a small deterministic automaton
written as right-recursive rules, one per state: it never holds the closer
or an excluded marker and ends at the first closer.

Markers that are special tokens are token references: ``<[ID]>`` with the
ids of a tokenizer, or ``<marker>`` by name (llama.cpp's token syntax);
without either, every marker is a quoted literal.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from .grammar import GAlt, GJson, GLit, Grammar, GRef, GRegex, GRep, GSeq, GText, Node
from .lark import split_specials
from .schemas import enum_values, inline_refs, props

__all__ = ("JSON_WS_MAX", "gbnf_literal", "render_gbnf")

_ONE_TO_N = re.compile(r"(\[[^\]]*\])\{1,(\d+)\}")

JSON_WS_MAX = 20
"""At most this many blanks at each place of a JSON value."""

_JSON_RULES = {
    "json-ws": f"[ \\t\\r\\n]{{0,{JSON_WS_MAX}}}",
    "json-value": 'json-object | json-array | json-string | json-number | "true" | "false" | "null"',
    "json-object": '"{" json-ws ( json-member ( json-ws "," json-ws json-member )* )? json-ws "}"',
    "json-member": 'json-string json-ws ":" json-ws json-value',
    "json-array": '"[" json-ws ( json-value ( json-ws "," json-ws json-value )* )? json-ws "]"',
    "json-string": '"\\"" json-char* "\\""',
    "json-char": '[^"\\\\\\x00-\\x1F\\x7F] | "\\\\" ( ["\\\\/bfnrt] | "u" [0-9a-fA-F]{4} )',
    "json-int": '"-"? ( "0" | [1-9] [0-9]{0,19} )',
    "json-number": 'json-int ( "." [0-9]{1,20} )? ( [eE] [-+]? [0-9]{1,4} )?',
}
# The rules each generic rule uses (emitted on demand, in dependency order).
_JSON_DEPS = {
    "json-value": ("json-object", "json-array", "json-string", "json-number"),
    "json-object": ("json-ws", "json-member"),
    "json-member": ("json-string", "json-ws", "json-value"),
    "json-array": ("json-ws", "json-value"),
    "json-string": ("json-char",),
    "json-number": ("json-int",),
}


def gbnf_literal(s: str) -> str:
    """``s`` as a GBNF string literal."""
    out = []
    for ch in s:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _class_char(ch: str) -> str:
    if ch in "\\]^-[":
        return f"\\x{ord(ch):02X}" if ch in "^-" else "\\" + ch
    if ch == "\n":
        return "\\n"
    if ch == "\r":
        return "\\r"
    if ch == "\t":
        return "\\t"
    if ord(ch) < 0x20 or ord(ch) == 0x7F:
        return f"\\x{ord(ch):02X}"
    return ch


def _name(rule: str) -> str:
    return rule.replace("_", "-")


class _GbnfWriter:
    def __init__(self, specials: Mapping[str, str]) -> None:
        self.specials = specials  # marker -> GBNF token reference
        self.rules: dict[str, str] = {}
        self.memo: dict[Any, str] = {}
        self.n = 0

    def fresh(self, kind: str) -> str:
        self.n += 1
        return f"{kind}-{self.n}"

    def lit(self, s: str) -> str:
        return " ".join(
            self.specials[t] if special else gbnf_literal(t) for special, t in split_specials(s, self.specials)
        )

    def expr(self, g: Node, top: bool = False) -> str:
        if isinstance(g, GLit):
            return self.lit(g.text) or '""'
        if isinstance(g, GSeq):
            parts = [self.expr(x) for x in g.items]
            return " ".join(p for p in parts if p != '""') or '""'
        if isinstance(g, GAlt):
            inner = " | ".join(self.expr(x) for x in g.items)
            return inner if top else f"( {inner} )"
        if isinstance(g, GRep):
            if (g.lo, g.hi) == (0, 1) and isinstance(g.item, GRegex):
                m = _ONE_TO_N.fullmatch(g.item.gbnf)
                if m:  # x{1,n}? is x{0,n}
                    return f"{m.group(1)}{{0,{m.group(2)}}}"
            inner = self.expr(g.item)
            if (g.lo, g.hi) == (0, 1):
                return f"( {inner} )?"
            if (g.lo, g.hi) == (0, None):
                return f"( {inner} )*"
            if (g.lo, g.hi) == (1, None):
                return f"( {inner} )+"
            return f"( {inner} ){{{g.lo},{'' if g.hi is None else g.hi}}}"
        if isinstance(g, GRegex):
            return f"( {g.gbnf} )"
        if isinstance(g, GText):
            return self.text(g)
        if isinstance(g, GJson):
            return _Json(self).value(inline_refs(g.schema, g.schema))
        assert isinstance(g, GRef)
        return _name(g.name)

    # -- generic JSON rules ------------------------------------------------------------------
    def json_rule(self, name: str) -> str:
        if name not in self.rules:
            self.rules[name] = ""  # reserve (recursion)
            for dep in _JSON_DEPS.get(name, ()):
                self.json_rule(dep)
            self.rules[name] = _JSON_RULES[name]
        return name

    # -- raw text up to a closer -------------------------------------------------------------
    def text(self, g: GText) -> str:
        """The rule of raw text then ``g.closer``: a DFA, one rule per state (see the module docstring)."""
        segments = split_specials(g.closer, self.specials)
        token_close = any(special for special, _ in segments)
        memo_key = ("text", g.closer, g.excludes, g.forbid_start, token_close)
        if memo_key in self.memo:
            return self.memo[memo_key]
        closer, forbid = g.closer, g.forbid_start
        pats = tuple(dict.fromkeys(x for x in (closer, *g.excludes) if x))
        alphabet = sorted(set("".join(pats) + forbid))
        base = self.fresh("txt")

        def t_step(s: str, fk: int, c: str) -> tuple[str, int] | None:
            u = s + c
            if any(u.endswith(p) for p in pats):
                return None  # the text would hold the closer or an excluded marker
            while u and not any(p.startswith(u) for p in pats):
                u = u[1:]
            nfk = -1
            if fk >= 0 and c == forbid[fk]:
                nfk = fk + 1
                if nfk == len(forbid):
                    return None
            return u, nfk

        def may_close(s: str) -> bool:
            """The closer may follow text ending in ``s``: no marker straddles the text and the closer."""
            for j in range(1, len(closer) + 1):
                u = s + closer[:j]
                if any(len(p) > j and u.endswith(p) for p in pats):
                    return False
            return True

        # NFA states: ("t", suffix, forbid progress) in the text; ("c", j) j characters of the closer read.
        NState = tuple[Any, ...]
        start: frozenset[NState] = frozenset({("t", "", 0 if forbid else -1)})
        names: dict[frozenset[NState], str] = {start: base}
        order = [start]
        bodies: dict[str, str] = {}
        i = 0
        while i < len(order):
            state = order[i]
            i += 1
            alts: list[str] = []

            def target(nxt: frozenset[NState]) -> str:
                if nxt not in names:
                    names[nxt] = f"{base}-{len(names)}"
                    order.append(nxt)
                return names[nxt]

            # per character: (closes here, next state); characters with the same outcome share one class
            groups: dict[tuple[bool, frozenset[NState]], list[str]] = {}
            other_key: tuple[bool, frozenset[NState]] | None = None
            for c in [*alphabet, None]:
                nxt: set[NState] = set()
                done = False
                for st in state:
                    if st[0] == "t":
                        _, s, fk = st
                        if c is None:
                            nxt.add(("t", "", -1))
                            continue
                        step = t_step(s, fk, c)
                        if step is not None:
                            nxt.add(("t", *step))
                        if not token_close and closer and c == closer[0] and may_close(s):
                            if len(closer) == 1:
                                done = True
                            else:
                                nxt.add(("c", 1))
                    elif c is not None and c == closer[st[1]]:
                        if st[1] + 1 == len(closer):
                            done = True
                        else:
                            nxt.add(("c", st[1] + 1))
                if not done and not nxt:
                    continue  # a dead end: the character is not allowed here
                outcome = (done, frozenset(nxt))
                if c is None:
                    other_key = outcome
                else:
                    groups.setdefault(outcome, []).append(c)
            if other_key is not None:
                groups.setdefault(other_key, [])
            for outcome, chars in groups.items():
                if outcome == other_key:
                    outside = [x for x in alphabet if x not in chars]
                    head = f"[^{''.join(_class_char(x) for x in outside)}]" if outside else "."
                elif len(chars) == 1:
                    head = gbnf_literal(chars[0])
                else:
                    head = f"[{''.join(_class_char(x) for x in chars)}]"
                done, nxt_state = outcome
                if done:
                    alts.append(head)
                if nxt_state:
                    alts.append(f"{head} {target(nxt_state)}")
            if token_close and any(st[0] == "t" and may_close(st[1]) for st in state):
                alts.append(self.lit(closer))
            bodies[names[state]] = " | ".join(alts) if alts else '""'
        for name in names.values():
            self.rules[name] = bodies[name]
        self.memo[memo_key] = base
        return base


class _Json:
    """Schema -> GBNF expression (see the module docstring for the subset)."""

    def __init__(self, w: _GbnfWriter) -> None:
        self.w = w

    def ref(self, name: str) -> str:
        return self.w.json_rule(name)

    def named(self, kind: str, schema: Any, build: Any) -> str:
        key = (kind, json.dumps(schema, sort_keys=True, default=str))
        if key not in self.w.memo:
            name = self.w.fresh(kind)
            self.w.memo[key] = name
            self.w.rules[name] = ""
            self.w.rules[name] = build()
        return self.w.memo[key]

    def value(self, schema: Any, depth: int = 0) -> str:
        if not isinstance(schema, Mapping) or not schema or depth > 32:
            return self.ref("json-value")
        values = enum_values(schema)
        if values is not None:
            alts = [gbnf_literal(json.dumps(v, ensure_ascii=False)) for v in values]
            return f"( {' | '.join(alts)} )" if alts else '""'
        for key in ("anyOf", "oneOf"):
            members = schema.get(key)
            if isinstance(members, list) and members:
                return "( " + " | ".join(self.value(m, depth + 1) for m in members) + " )"
        t = schema.get("type")
        if isinstance(t, list):
            if not t:
                return self.ref("json-value")
            return "( " + " | ".join(self.value({**schema, "type": x}, depth + 1) for x in t) + " )"
        if t is None:
            if isinstance(schema.get("properties"), Mapping):
                t = "object"
            elif isinstance(schema.get("items"), Mapping):
                t = "array"
            else:
                return self.ref("json-value")
        if t == "string":
            lo, hi = schema.get("minLength"), schema.get("maxLength")
            if isinstance(lo, int) or isinstance(hi, int):
                lo_n = lo if isinstance(lo, int) else 0
                hi_s = str(hi) if isinstance(hi, int) else ""
                return f'( "\\"" {self.ref("json-char")}{{{lo_n},{hi_s}}} "\\"" )'
            return self.ref("json-string")
        if t == "integer":
            return self.ref("json-int")
        if t == "number":
            return self.ref("json-number")
        if t == "boolean":
            return '( "true" | "false" )'
        if t == "null":
            return '"null"'
        if t == "object":
            return self.object(schema, depth)
        if t == "array":
            return self.array(schema, depth)
        return self.ref("json-value")

    def object(self, schema: Mapping[str, Any], depth: int) -> str:
        ps, req = props(schema)
        extra = schema.get("additionalProperties", True) is not False
        if not ps:
            if not extra:
                return f'( "{{" {self.ref("json-ws")} "}}" )'
            return self.ref("json-object")

        def build() -> str:
            ws = self.ref("json-ws")
            sep = f'{ws} "," {ws}'
            members = [(f'{gbnf_literal(json.dumps(k, ensure_ascii=False))} {ws} ":" {ws} {self.value(s, depth + 1)}',
                        k in req) for k, s in ps]
            memo: dict[tuple[int, bool], str] = {}

            def rest(i: int, before: bool) -> str:
                if i == len(members):
                    if not extra:
                        return ""
                    m = self.other_member([k for k, _ in ps])
                    return f"( {sep} {m} )*" if before else f"( {m} ( {sep} {m} )* )?"
                if (i, before) in memo:
                    return memo[(i, before)]
                text, required = members[i]
                item = f"{sep} {text}" if before else text
                with_item = f"{item} {rest(i + 1, True)}".strip()
                if required:
                    body = with_item
                else:
                    without = rest(i + 1, before)
                    body = f"( {with_item} ) | {without}" if without else f"( {with_item} )?"
                name = self.w.fresh("json-kv")
                self.w.rules[name] = body
                memo[(i, before)] = name
                return name

            return f'"{{" {ws} {rest(0, False)} {ws} "}}"'

        return self.named("json-obj", schema, build)

    def other_member(self, names: list[str]) -> str:
        """A member whose key is none of ``names`` (other keys, after the declared ones)."""
        contents = [json.dumps(n, ensure_ascii=False)[1:-1] for n in names]
        if any("\\" in c for c in contents):  # an escaped key: not told apart here
            return self.ref("json-member")
        key = ("other-member", tuple(sorted(contents)))
        if key in self.w.memo:
            return self.w.memo[key]
        base = self.w.fresh("json-other")
        self.w.memo[key] = base
        self.ref("json-char")
        self.ref("json-value")
        ws = self.ref("json-ws")
        free = f"{base}-free"
        self.w.rules[free] = f'{self.ref("json-char")}* "\\""'
        names_of: dict[str, str] = {}

        def node(prefix: str) -> str:
            if prefix in names_of:
                return names_of[prefix]
            name = f"{base}-k{len(names_of)}"
            names_of[prefix] = name
            self.w.rules[name] = ""
            children = sorted({c[len(prefix)] for c in contents if c.startswith(prefix) and len(c) > len(prefix)})
            alts = [] if prefix in contents else ['"\\""']
            alts += [f"{gbnf_literal(ch)} {node(prefix + ch)}" for ch in children]
            excluded = "".join(_class_char(ch) for ch in children)
            other = f'[^"\\\\\\x00-\\x1F\\x7F{excluded}] | "\\\\" ( ["\\\\/bfnrt] | "u" [0-9a-fA-F]{{4}} )'
            alts.append(f"( {other} ) {free}")
            self.w.rules[name] = " | ".join(alts)
            return name

        self.w.rules[base] = f'"\\"" {node("")} {ws} ":" {ws} json-value'
        return base

    def array(self, schema: Mapping[str, Any], depth: int) -> str:
        items = schema.get("items")

        def build() -> str:
            ws = self.ref("json-ws")
            item = self.value(items, depth + 1) if isinstance(items, Mapping) else self.ref("json-value")
            lo_v, hi_v = schema.get("minItems"), schema.get("maxItems")
            lo = lo_v if isinstance(lo_v, int) else 0
            hi = hi_v if isinstance(hi_v, int) else None
            if hi == 0:
                return f'"[" {ws} "]"'
            more_hi = "" if hi is None else str(hi - 1)
            tail = f'( {ws} "," {ws} {item} ){{{max(lo - 1, 0)},{more_hi}}}'
            body = f"{item} {tail}" if lo > 0 else f"( {item} {tail} )?"
            return f'"[" {ws} {body} {ws} "]"'

        return self.named("json-arr", schema, build)


def render_gbnf(grammar: Grammar, specials: Mapping[str, str]) -> str:
    """The GBNF text of ``grammar``; ``specials`` maps markers to token references (``<[ID]>``, ``<name>``)."""
    w = _GbnfWriter(specials)
    root = w.expr(grammar.start)
    rules: list[tuple[str, str]] = []
    for name, body in grammar.rules.items():
        rules.append((_name(name), w.expr(body, top=True)))
    lines = [f"root ::= {root}", *(f"{n} ::= {b}" for n, b in rules), *(f"{n} ::= {b}" for n, b in w.rules.items())]
    return "\n".join(lines) + "\n"

