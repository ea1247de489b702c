"""Test helpers for constrained decoding: token encoding for llguidance, and a small GBNF checker.

There is no GBNF library here (llguidance converts GBNF to Lark, but not its
token references), so :func:`parse_gbnf` is a recursive-descent parser of
llama.cpp's grammar syntax (rules ``name ::= alternatives``, literals, character
classes, groups, ``* + ?`` and ``{m,n}`` repetition, ``.``, token references
``<[ID]>`` / ``<name>`` and their negation ``!``), and :func:`gbnf_accepts`
matches an input (characters, and tokens written as ints or names) against a
parsed grammar: the set of end positions of every node, memoized per rule and
position, so any (non-left-recursive) grammar is checked exactly.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))

# ----------------------------------------------------------------- llguidance helpers


def encode(tok: Any, text: str, special: Collection[str] = ()) -> list[int]:
    """Token ids of ``text``: the ``special`` markers as their tokens, the rest as text tokens (never a
    special token: qwen3 would read ``<tool_call>`` inside MiniMax-M3's plain-text markers as one)."""
    ids: list[int] = []
    pattern = "|".join(re.escape(m) for m in sorted(special, key=len, reverse=True))
    for i, part in enumerate(re.split(f"({pattern})", text) if pattern else [text]):
        if not part:
            continue
        if i % 2 and pattern:
            ids.extend(tok.tokenize_str(part))
            continue
        seg = tok.tokenize_str(part)
        ids.extend(tok.greedy_tokenize(part) if any(tok.is_special_token(t) for t in seg) else seg)
    return ids


def special_markers(grammar: str) -> list[str]:
    """The ``<...>`` special-token references a Lark grammar uses (outside its strings, regexes and %json)."""
    out: list[str] = []
    dec = json.JSONDecoder()
    for line in grammar.splitlines():
        body, i = line.partition(":")[2], 0
        while i < len(body):
            ch = body[i]
            if ch in "\"/":
                j = i + 1
                while j < len(body) and body[j] != ch:
                    j += 2 if body[j] == "\\" else 1
                i = j + 1
            elif body.startswith("%json", i):
                i = dec.raw_decode(body, i + 5)[1]
            elif ch == "<" and (m := re.match(r"<[^<>\s\[]+>", body[i:])):
                out.append(m.group())
                i += len(m.group())
            else:
                i += 1
    return out


def qwen3_specials(tok: Any, markers: Sequence[str]) -> list[str]:
    """The markers that are special tokens of an llguidance tokenizer (written ``<marker>`` in Lark)."""
    out = []
    for m in markers:
        ids = tok.tokenize_str(m)
        if len(ids) == 1 and tok.is_special_token(ids[0]) and m.startswith("<"):
            out.append(m)
    return out


# ----------------------------------------------------------------- GBNF


class GbnfSyntaxError(ValueError):
    """The text is not a well-formed GBNF grammar."""


@dataclass(frozen=True)
class Lit:
    text: str


@dataclass(frozen=True)
class Cls:
    negate: bool
    ranges: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Ref:
    name: str


@dataclass(frozen=True)
class Tok:
    token: int | str  # an id, or the token's text (<name>)
    negate: bool


@dataclass(frozen=True)
class AnyChar:
    pass


@dataclass(frozen=True)
class Seq:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Alt:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Rep:
    item: Node
    lo: int
    hi: int | None


Node = Lit | Cls | Ref | Tok | AnyChar | Seq | Alt | Rep
_NAME = re.compile(r"[A-Za-z0-9-]+")  # llama.cpp's rule names (no '_')


class _Parser:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def error(self, msg: str) -> GbnfSyntaxError:
        line = self.s.count("\n", 0, self.i) + 1
        return GbnfSyntaxError(f"{msg} at line {line}: {self.s[self.i:self.i + 30]!r}")

    def space(self, newlines: bool) -> None:
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in " \t" or (newlines and c in "\r\n"):
                self.i += 1
            elif c == "#":
                while self.i < len(self.s) and self.s[self.i] not in "\r\n":
                    self.i += 1
            else:
                break

    def grammar(self) -> dict[str, Node]:
        rules: dict[str, Node] = {}
        self.space(True)
        while self.i < len(self.s):
            m = _NAME.match(self.s, self.i)
            if not m:
                raise self.error("expected a rule name")
            name = m.group()
            self.i = m.end()
            self.space(False)
            if not self.s.startswith("::=", self.i):
                raise self.error("expected ::=")
            self.i += 3
            self.space(True)
            if name in rules:
                raise self.error(f"rule {name!r} defined twice")
            rules[name] = self.alternatives(nested=False)
            if self.i < len(self.s) and self.s[self.i] not in "\r\n":
                raise self.error("expected the end of the rule")
            self.space(True)
        return rules

    def alternatives(self, nested: bool) -> Node:
        items = [self.sequence(nested)]
        while self.i < len(self.s) and self.s[self.i] == "|":
            self.i += 1
            self.space(True)
            items.append(self.sequence(nested))
        return items[0] if len(items) == 1 else Alt(tuple(items))

    def sequence(self, nested: bool) -> Node:
        items: list[Node] = []
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in "|)" or (not nested and c in "\r\n"):
                break
            if c == '"':
                node: Node = Lit(self.literal())
            elif c == "[":
                node = self.char_class()
            elif c == "(":
                self.i += 1
                self.space(True)
                node = self.alternatives(nested=True)
                if self.i >= len(self.s) or self.s[self.i] != ")":
                    raise self.error("expected )")
                self.i += 1
            elif c == ".":
                self.i += 1
                node = AnyChar()
            elif c == "!" or c == "<":
                node = self.token()
            elif m := _NAME.match(self.s, self.i):
                self.i = m.end()
                node = Ref(m.group())
            else:
                raise self.error("unexpected character")
            self.space(nested)
            node = self.repetition(node)
            items.append(node)
            self.space(nested)
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def repetition(self, node: Node) -> Node:
        if self.i >= len(self.s):
            return node
        c = self.s[self.i]
        if c in "*+?":
            self.i += 1
            return Rep(node, 0 if c != "+" else 1, 1 if c == "?" else None)
        if c == "{":
            m = re.compile(r"\{\s*(\d+)\s*(?:(,)\s*(\d*)\s*)?\}").match(self.s, self.i)
            if not m:
                raise self.error("bad repetition")
            self.i = m.end()
            lo = int(m.group(1))
            hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
            if hi is not None and hi < lo:
                raise self.error("repetition max below min")
            return Rep(node, lo, hi)
        return node

    def char(self) -> str:
        s = self.s
        if self.i >= len(s):
            raise self.error("unexpected end")
        c = s[self.i]
        if c != "\\":
            self.i += 1
            return c
        e = s[self.i + 1 : self.i + 2]
        simple = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]"}
        if e in simple:
            self.i += 2
            return simple[e]
        for lead, width in (("x", 2), ("u", 4), ("U", 8)):
            if e == lead:
                digits = s[self.i + 2 : self.i + 2 + width]
                if len(digits) != width or not re.fullmatch(r"[0-9a-fA-F]+", digits):
                    raise self.error(f"bad \\{lead} escape")
                self.i += 2 + width
                return chr(int(digits, 16))
        raise self.error(f"unknown escape \\{e}")

    def literal(self) -> str:
        self.i += 1
        out = []
        while True:
            if self.i >= len(self.s):
                raise self.error("unterminated literal")
            if self.s[self.i] == '"':
                self.i += 1
                return "".join(out)
            if self.s[self.i] in "\r\n":
                raise self.error("newline in a literal")
            out.append(self.char())

    def char_class(self) -> Node:
        self.i += 1
        negate = self.s.startswith("^", self.i)
        if negate:
            self.i += 1
        ranges = []
        while True:
            if self.i >= len(self.s):
                raise self.error("unterminated character class")
            if self.s[self.i] == "]":
                self.i += 1
                break
            lo = self.char()
            hi = lo
            if self.s.startswith("-", self.i) and not self.s.startswith("-]", self.i):
                self.i += 1
                hi = self.char()
                if ord(hi) < ord(lo):
                    raise self.error("reversed range")
            ranges.append((ord(lo), ord(hi)))
        return Cls(negate, tuple(ranges))

    def token(self) -> Node:
        negate = self.s.startswith("!", self.i)
        if negate:
            self.i += 1
        m = re.compile(r"<\[(\d+)\]>|<[^<>\s]+>").match(self.s, self.i)
        if not m:
            raise self.error("bad token reference")
        self.i = m.end()
        return Tok(int(m.group(1)) if m.group(1) else m.group(), negate)


def _refs(node: Node) -> set[str]:
    if isinstance(node, Ref):
        return {node.name}
    if isinstance(node, (Seq, Alt)):
        return set().union(*(_refs(x) for x in node.items)) if node.items else set()
    if isinstance(node, Rep):
        return _refs(node.item)
    return set()


def parse_gbnf(text: str) -> dict[str, Node]:
    """Parse and check a GBNF grammar: syntax, a ``root`` rule, every referenced rule defined.

    Raises:
        GbnfSyntaxError: what is wrong, and where.
    """
    rules = _Parser(text).grammar()
    if "root" not in rules:
        raise GbnfSyntaxError("no root rule")
    for name, body in rules.items():
        missing = _refs(body) - set(rules)
        if missing:
            raise GbnfSyntaxError(f"rule {name!r} references undefined {sorted(missing)}")
    return rules


Item = str | int  # a character, or a token id


class _Matcher:
    def __init__(self, rules: dict[str, Node], items: Sequence[Item], names: dict[str, int]) -> None:
        self.rules = rules
        self.items = items
        self.names = names  # <name> token text -> id
        self.memo: dict[tuple[str, int], frozenset[int]] = {}

    def ends(self, node: Node, pos: int) -> frozenset[int]:
        items = self.items
        if isinstance(node, Lit):
            n = len(node.text)
            seg = items[pos : pos + n]
            ok = len(seg) == n and all(isinstance(x, str) and x == c for x, c in zip(seg, node.text, strict=True))
            return frozenset((pos + n,)) if ok else frozenset()
        if isinstance(node, Cls):
            if pos < len(items) and isinstance(items[pos], str):
                o = ord(items[pos])  # type: ignore[arg-type]
                inside = any(lo <= o <= hi for lo, hi in node.ranges)
                if inside != node.negate:
                    return frozenset((pos + 1,))
            return frozenset()
        if isinstance(node, AnyChar):
            return frozenset((pos + 1,)) if pos < len(items) and isinstance(items[pos], str) else frozenset()
        if isinstance(node, Tok):
            want = node.token if isinstance(node.token, int) else self.names.get(node.token, -1)
            if pos < len(items) and isinstance(items[pos], int) and (items[pos] == want) != node.negate:
                return frozenset((pos + 1,))
            return frozenset()
        if isinstance(node, Ref):
            key = (node.name, pos)
            if key not in self.memo:
                self.memo[key] = frozenset()  # a left-recursive loop matches nothing
                self.memo[key] = self.ends(self.rules[node.name], pos)
            return self.memo[key]
        if isinstance(node, Seq):
            cur = frozenset((pos,))
            for x in node.items:
                cur = frozenset().union(*(self.ends(x, p) for p in cur)) if cur else cur
                if not cur:
                    break
            return cur
        if isinstance(node, Alt):
            return frozenset().union(*(self.ends(x, pos) for x in node.items))
        assert isinstance(node, Rep)
        out: set[int] = {pos} if node.lo == 0 else set()
        cur, seen, k = {pos}, {pos}, 0
        while cur and (node.hi is None or k < node.hi):
            nxt: set[int] = set()
            for p in cur:
                nxt |= self.ends(node.item, p)
            k += 1
            if node.hi is None and k >= node.lo:
                nxt -= seen
                seen |= nxt
            if k >= node.lo:
                out |= nxt
            cur = nxt
        return frozenset(out)


def to_items(text: str, tokens: dict[str, int] | None = None) -> list[Item]:
    """``text`` as matcher input: the ``tokens`` markers (marker -> id) as ids, everything else as characters."""
    if not tokens:
        return list(text)
    pattern = "|".join(re.escape(m) for m in sorted(tokens, key=len, reverse=True))
    out: list[Item] = []
    for i, part in enumerate(re.split(f"({pattern})", text)):
        if i % 2:
            out.append(tokens[part])
        else:
            out.extend(part)
    return out


def gbnf_accepts(
    grammar: str | dict[str, Node], items: str | Sequence[Item], names: dict[str, int] | None = None
) -> bool:
    """Whether the grammar's ``root`` matches all of ``items`` (a string: its characters).

    Args:
        grammar: GBNF text or a parsed grammar.
        items: the input: characters, and ints for tokens.
        names: ids of the tokens referenced by name (``<|tool_call|>``).
    """
    rules = parse_gbnf(grammar) if isinstance(grammar, str) else grammar
    seq = list(items)
    return len(seq) in _Matcher(rules, seq, names or {}).ends(Ref("root"), 0)
