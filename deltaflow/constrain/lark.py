"""The Lark writer: a constraint's grammar for llguidance (llama.cpp's llguidance build, guidance, mistral.rs).

JSON arguments are embedded as ``%json{...}`` (llguidance keeps the schema's
property order), with JSON whitespace bounded to :data:`JSON_WS` per place.
Markers that are special tokens are written as references: by name
(``<tool_call>``, for ``<...>``-shaped markers) or by id (``<[151657]>``).
Raw text values are lexemes that end at their closer
(``/(?s:.*)CLOSE/ & ~/(?s:.*)CLOSE(?s:.)+/``, the excluded markers
subtracted), or, when the closer is a special token, any text without the
excluded markers followed by the token.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from typing import Any

from .grammar import GAlt, GJson, GLit, Grammar, GRef, GRegex, GRep, GSeq, GText, Node

__all__ = ("JSON_WS", "render_lark", "specials_for")

JSON_WS = "[ \\t\\r\\n]{0,20}"
"""The whitespace llguidance allows at each place of a JSON value (``x-guidance`` ``whitespace_pattern``)."""


def specials_for(markers: Collection[str] | Mapping[str, int]) -> dict[str, str]:
    """Marker -> Lark reference: ``<marker>`` for names, ``<[id]>`` for ``{marker: id}``.

    Raises:
        ValueError: a name that is not ``<...>``-shaped (pass its id instead).
    """
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


def _re_escape(s: str) -> str:
    return re.escape(s).replace("/", "\\/")


def split_specials(s: str, specials: Collection[str]) -> list[tuple[bool, str]]:
    """``s`` as ``(is_special, text)`` segments, the leftmost-longest special marker first."""
    parts: list[tuple[bool, str]] = []
    i = 0
    while i < len(s):
        best: tuple[int, str] | None = None
        for m in specials:
            j = s.find(m, i)
            if j >= 0 and (best is None or j < best[0] or j == best[0] and len(m) > len(best[1])):
                best = (j, m)
        if best is None:
            parts.append((False, s[i:]))
            break
        j, m = best
        if j > i:
            parts.append((False, s[i:j]))
        parts.append((True, m))
        i = j + len(m)
    return parts


class _LarkWriter:
    def __init__(self, specials: Mapping[str, str]) -> None:
        self.specials = specials  # marker -> Lark reference
        self.terminals: list[str] = []
        self.memo: dict[Any, str] = {}
        self.n = 0

    def terminal(self, kind: str, body: str) -> str:
        key = (kind, body)
        if key not in self.memo:
            self.n += 1
            name = f"{kind}_{self.n}".upper()
            self.terminals.append(f"{name}: {body}")
            self.memo[key] = name
        return self.memo[key]

    def lit(self, s: str) -> str:
        return " ".join(
            self.specials[t] if special else json.dumps(t, ensure_ascii=False)
            for special, t in split_specials(s, self.specials)
        )

    def expr(self, g: Node, top: bool = False) -> str:
        if isinstance(g, GLit):
            return self.lit(g.text) or '""'
        if isinstance(g, GSeq):
            parts = [self.expr(x) for x in g.items]
            return " ".join(p for p in parts if p != '""') or '""'
        if isinstance(g, GAlt):
            inner = " | ".join(self.expr(x) for x in g.items)
            return inner if top else f"({inner})"
        if isinstance(g, GRep):
            inner = self.expr(g.item)
            if (g.lo, g.hi) == (0, 1):
                return f"({inner})?"
            if (g.lo, g.hi) == (0, None):
                return f"({inner})*"
            if (g.lo, g.hi) == (1, None):
                return f"({inner})+"
            return f"({inner}){{{g.lo},{'' if g.hi is None else g.hi}}}"
        if isinstance(g, GRegex):
            return self.terminal("re", f"/{g.lark}/")
        if isinstance(g, GText):
            return self.text(g)
        if isinstance(g, GJson):
            schema = {**g.schema, "x-guidance": {"whitespace_pattern": JSON_WS}}
            return "%json" + json.dumps(schema, ensure_ascii=False)
        assert isinstance(g, GRef)
        return g.name

    def text(self, g: GText) -> str:
        segments = split_specials(g.closer, self.specials)
        forbid = [f"~/{_re_escape(g.forbid_start)}(?s:.*)/"] if g.forbid_start else []
        if segments and segments[0][0]:
            # the closer starts with a special token: the text is any text without the excluded markers
            ex = [f"~/(?s:.*){_re_escape(x)}(?s:.*)/" for x in dict.fromkeys((g.closer, *g.excludes)) if x]
            name = self.terminal("txt", " & ".join(["/(?s:.+)/", *ex, *forbid]))
            return f"{name}? {self.lit(g.closer)}"
        head = segments[0][1] if segments else ""
        rest = g.closer[len(head):]
        c = _re_escape(head)
        terms = [f"/(?s:.*){c}/", f"~/(?s:.*){c}(?s:.)+/"]
        others = [x for x in dict.fromkeys((*g.excludes, g.closer)) if x and x != head]
        terms += [f"~/(?s:.*){_re_escape(x)}(?s:.*){c}/" for x in others]
        name = self.terminal("raw", " & ".join([*terms, *forbid]))
        return f"{name} {self.lit(rest)}".strip()


def render_lark(grammar: Grammar, specials: Mapping[str, str]) -> str:
    """The Lark text of ``grammar``, with ``specials`` (marker -> reference) as special tokens."""
    w = _LarkWriter(specials)
    start = w.expr(grammar.start)
    rules = [f"{name}: {w.expr(body, top=True)}" for name, body in grammar.rules.items()]
    return "\n".join([f"start: {start}", *rules, *w.terminals]) + "\n"
