"""Stream == complete for the special-token dialects (deepseek_v3, deepseek_v31, kimi_k2), over outputs built from their grammar.

Grammar (shared/dialects.md 8a, 8b, 9; deltaflow/parsers/drivers/special_tokens.py)::

    section := SECTION_OPEN gap (call gap)* SECTION_CLOSE       gap: whitespace or noise (no marker)
    bare    := call (ws call)*                                   (kimi_k2 only)
    v3 call := <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n[```json\\n]{...}[\\n]```<｜tool▁call▁end｜>
    v31 call:= <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>
    k2 call := <|tool_call_begin|>[functions.]NAME:N[ ]<|tool_call_argument_begin|>{...}[ ]<|tool_call_end|>

A well-formed output comes with what a correct parser returns: text pieces
verbatim in their channel; offered calls with their object's source text
(``{}`` when a call writes none) and, for Kimi, the id the model wrote; a
rejected call surfaced as its raw text, where a call's raw text is the gap
before it (the section opener and the whitespace before the block for the
first one) and, for the last one, the gap and the section close after it;
a section without calls surfaced whole; whitespace between two blocks is raw
text of the next call. Reasoning (``deepseek_r1`` / ``kimi_k2``) starts open
and ends at ``</think>``, or for Kimi at the block that follows it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from deltaflow import accumulate, parse_complete
from deltaflow.messages import ChatMessage
from deltaflow.parsers import registry
from deltaflow.testing import feed_chunks, message_key

from .strategies import (
    FREE_NAMES,
    TOOL_NAMES,
    UNICODE,
    UNOFFERED_NAMES,
    check_delta_invariants,
    chunkings,
    json_string_src,
    json_value_src,
    object_src,
)

CONTENT = "content"
REASONING = "reasoning"
DIALECTS = ("deepseek_v3", "deepseek_v31", "kimi_k2")
REASONING_OF = {"deepseek_v3": "deepseek_r1", "deepseek_v31": "deepseek_r1", "kimi_k2": "kimi_k2"}

DS_CALLS_BEGIN, DS_CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
DS_CALL_BEGIN, DS_CALL_END, DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
K_SECTIONS = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")
K_SECTION_ENDS = ("<|tool_calls_section_end|>", "<|tool_call_section_end|>")
K_CALL, K_ARG, K_CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"

# Every marker of the three dialects and of the reasoning parsers: never written inside text or strings.
MARKERS = tuple(
    sorted({m for d in DIALECTS for m in registry.get_tool_dialect(d).markers} | {"<think>", "</think>"}, key=len)
)
# Partial markers and fences: what a parser must hold, then release, at a chunk end.
LOOKALIKES = (
    "<｜tool▁call", "<｜tool▁calls▁end", "<｜", "｜", "▁", "<|tool_call_", "<|tool_calls_section_end|", "<|",
    "```", "``", "`", "```json\n", "functions.f:0", "<think", "</", "{", "}", "\n", "<", "|>", ":0",
)
WS = st.sampled_from(("", "", "", " ", "\n", "  ", "\t", "\r\n", " \n "))


def sanitize(text: str) -> str:
    """Break every complete marker in ``text`` (a space before its last character), until none is left."""
    changed = True
    while changed:
        changed = False
        for m in MARKERS:
            if m in text:
                text = text.replace(m, m[:-1] + " " + m[-1])
                changed = True
    return text


_WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789.,!?-_'()/=+*", min_size=1, max_size=10)
_FREE = st.lists(st.one_of(_WORDS, _WORDS, st.sampled_from(LOOKALIKES), st.sampled_from(UNICODE), WS), max_size=5).map(
    lambda parts: sanitize("".join(parts))
)
_NOISE = _FREE.filter(lambda t: bool(t.strip(" \t\r\n")))
_STRING = _FREE.flatmap(json_string_src)
_VALUES: st.SearchStrategy[str] = st.recursive(
    st.one_of(json_value_src, _STRING),
    lambda children: st.one_of(st.lists(children, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
                               object_src(children)),
    max_leaves=6,
)
ARGS = object_src(_VALUES)


@dataclass(frozen=True)
class Config:
    """A dialect, its reasoning parser (or none), ``enable_thinking`` and the offered tools."""

    dialect: str
    reasoning: str | None
    enable_thinking: bool | None
    tools: tuple[str, ...] | None

    @property
    def reasoning_active(self) -> bool:
        """The output starts inside reasoning."""
        return self.reasoning is not None and self.enable_thinking is not False

    def accepts(self, name: str) -> bool:
        """Whether a call to ``name`` is emitted."""
        return self.tools is None or name in self.tools

    def kwargs(self) -> dict[str, Any]:
        """Arguments of ``parse_complete`` / ``ResponseParser``."""
        return {
            "tool_parser": self.dialect,
            "reasoning_parser": self.reasoning,
            "enable_thinking": self.enable_thinking,
            "tools": None if self.tools is None else [
                {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in self.tools
            ],
        }


@dataclass(frozen=True)
class GenCall:
    """A generated call: name, expected arguments, the model's id (Kimi) and the raw text it accounts for."""

    name: str
    args: str
    id: str | None
    raw: str


@dataclass(frozen=True)
class Piece:
    """Text of a channel, a reasoning marker, or a tool block (``calls`` empty: an empty section)."""

    kind: str
    channel: str
    text: str
    calls: tuple[GenCall, ...] = ()


@dataclass(frozen=True)
class Generated:
    """A generated output and its pieces."""

    config: Config
    pieces: tuple[Piece, ...]
    text: str

    def expected(self) -> tuple[str | None, str | None, list[tuple[str, str, str | None]]]:
        """Content, reasoning and ``(name, arguments, id)`` of the accepted calls."""
        out: dict[str, list[str]] = {CONTENT: [], REASONING: []}
        calls: list[tuple[str, str, str | None]] = []
        for p in self.pieces:
            if p.kind == "text":
                out[p.channel].append(p.text)
            elif p.kind == "block":
                if not p.calls:
                    out[p.channel].append(p.text)
                for c in p.calls:
                    if self.config.accepts(c.name):
                        calls.append((c.name, c.args, c.id))
                    else:
                        out[p.channel].append(c.raw)
        return "".join(out[CONTENT]) or None, "".join(out[REASONING]) or None, calls


@st.composite
def configs(draw: st.DrawFn) -> Config:
    """A dialect with or without its reasoning parser, ``enable_thinking`` and offered tools."""
    dialect = draw(st.sampled_from(DIALECTS))
    reasoning = draw(st.sampled_from((REASONING_OF[dialect], None)))
    thinking = draw(st.sampled_from((None, None, True, False))) if reasoning else None
    tools = draw(st.one_of(st.none(), st.lists(st.sampled_from(TOOL_NAMES), min_size=1, max_size=4, unique=True).map(tuple)))
    return Config(dialect, reasoning, thinking, tools)


def _names(cfg: Config) -> st.SearchStrategy[str]:
    if cfg.tools is None:
        return st.sampled_from(TOOL_NAMES + UNOFFERED_NAMES + FREE_NAMES)
    return st.one_of(st.sampled_from(cfg.tools), st.sampled_from(TOOL_NAMES + UNOFFERED_NAMES))


@st.composite
def call_text(draw: st.DrawFn, cfg: Config, index: int, *, close: bool) -> tuple[str, str, str, str | None]:
    """One call of the dialect: (name, its text, the expected arguments, the id)."""
    name = draw(_names(cfg))
    form = draw(st.sampled_from(("object", "object", "object", "empty", "none")))
    if not close and form == "none":
        form = "empty"  # a bare call with neither arguments nor its end marker never began: it is no call
    obj = draw(ARGS) if form == "object" else "{" + draw(WS) + "}" if form == "empty" else ""
    args = obj or "{}"
    end = DS_CALL_END if cfg.dialect != "kimi_k2" else K_CALL_END
    if cfg.dialect == "deepseek_v3":
        fence = draw(st.sampled_from(("```json\n", "```json\n", "```\n", ""))) if obj else ""
        tail = draw(st.sampled_from(("\n```", "```"))) if fence else ""
        return name, f"{DS_CALL_BEGIN}function{DS_SEP}{name}\n{fence}{obj}{tail}{end}", args, None
    if cfg.dialect == "deepseek_v31":
        return name, f"{DS_CALL_BEGIN}{name}{DS_SEP}{draw(WS)}{obj}{draw(WS)}{end}", args, None
    call_id = draw(st.sampled_from(("functions.", "functions.", ""))) + f"{name}:{index}"
    text = f"{K_CALL}{call_id}{draw(st.sampled_from(('', ' ')))}{K_ARG}{draw(WS)}{obj}{draw(WS)}{end if close else ''}"
    return name, text, args, call_id


@st.composite
def block_piece(draw: st.DrawFn, cfg: Config, channel: str, lead: str, counter: list[int], *, last: bool) -> Piece:
    """A section (any dialect) or, for Kimi, a run of bare calls."""
    bare = cfg.dialect == "kimi_k2" and draw(st.booleans())
    if bare:
        calls: list[GenCall] = []
        n = draw(st.integers(1, 3))
        for i in range(n):
            gap = lead if i == 0 else draw(WS)
            # A bare call may lack its end marker only at the very end of the output.
            close = not (last and i == n - 1) or draw(st.booleans())
            name, text, args, cid = draw(call_text(cfg, counter[0], close=close))
            counter[0] += 1
            calls.append(GenCall(name, args, cid, gap + text))
        return Piece("block", channel, "".join(c.raw for c in calls), tuple(calls))
    if cfg.dialect == "kimi_k2":
        opener, closer = draw(st.sampled_from(K_SECTIONS)), draw(st.sampled_from(K_SECTION_ENDS))
    else:
        opener, closer = DS_CALLS_BEGIN, DS_CALLS_END
    gaps = st.one_of(WS, WS, _NOISE)
    n = draw(st.integers(0, 3))
    if n == 0:
        return Piece("block", channel, lead + opener + draw(gaps) + closer)
    calls = []
    for i in range(n):
        gap = draw(gaps)
        name, text, args, cid = draw(call_text(cfg, counter[0], close=True))
        counter[0] += 1
        calls.append(GenCall(name, args, cid, (lead + opener if i == 0 else "") + gap + text))
    tail = draw(gaps) + closer
    calls[-1] = GenCall(calls[-1].name, calls[-1].args, calls[-1].id, calls[-1].raw + tail)
    return Piece("block", channel, "".join(c.raw for c in calls), tuple(calls))


@st.composite
def outputs(draw: st.DrawFn) -> Generated:
    """A well-formed output: optional reasoning, then content text and blocks."""
    cfg = draw(configs())
    pieces: list[Piece] = []
    counter = [0]
    nblocks = draw(st.integers(0, 3))
    content = True
    implicit = False
    if cfg.reasoning_active:
        if draw(st.booleans()):
            pieces.append(Piece("marker", REASONING, "<think>"))
        text = draw(_FREE)
        if text:
            pieces.append(Piece("text", REASONING, text))
        how = draw(st.sampled_from(("close", "close", "implicit", "open")))
        if how == "implicit" and cfg.dialect == "kimi_k2" and nblocks:
            implicit = True  # the block's first marker ends the reasoning (atomic openers only, below)
        elif how == "open":
            content = False
        else:
            pieces.append(Piece("marker", REASONING, "</think>"))
    if not content:
        return Generated(cfg, tuple(pieces), "".join(p.text for p in pieces))
    for i in range(nblocks + 1):
        text = "" if implicit and i == 0 else draw(_FREE)
        lead = ""
        prev_block = bool(pieces) and pieces[-1].kind == "block"
        if i < nblocks and prev_block and not text.strip(" \t\r\n"):
            lead, text = text, ""  # whitespace between two blocks is raw text of the next call
        if text:
            pieces.append(Piece("text", CONTENT, text))
        if i == nblocks:
            break
        piece = draw(block_piece(cfg, CONTENT, lead, counter, last=i == nblocks - 1 and draw(st.booleans())))
        if implicit and i == 0 and piece.text.startswith(K_SECTIONS[1]):
            piece = Piece(piece.kind, piece.channel, K_SECTIONS[0] + piece.text[len(K_SECTIONS[1]):], tuple(
                GenCall(c.name, c.args, c.id, K_SECTIONS[0] + c.raw[len(K_SECTIONS[1]):] if j == 0 else c.raw)
                for j, c in enumerate(piece.calls)
            ))  # the singular variant is text: it does not end reasoning
        pieces.append(piece)
        if piece.calls and not piece.calls[-1].raw.endswith((DS_CALL_END, K_CALL_END, DS_CALLS_END, *K_SECTION_ENDS)):
            break  # a bare call without its end marker ends the output
    return Generated(cfg, tuple(pieces), "".join(p.text for p in pieces))


MUTATIONS = ("truncate", "delete_char", "insert", "drop_marker")


@st.composite
def mutated(draw: st.DrawFn) -> Generated:
    """A generated output broken by one mutation (truncation, a lost or an inserted character or marker)."""
    g = draw(outputs())
    text = g.text
    how = draw(st.sampled_from(MUTATIONS))
    if how == "truncate":
        text = text[: draw(st.integers(0, len(text)))]
    elif how == "delete_char" and text:
        i = draw(st.integers(0, len(text) - 1))
        text = text[:i] + text[i + 1 :]
    elif how == "insert":
        i = draw(st.integers(0, len(text)))
        text = text[:i] + draw(st.sampled_from(MARKERS + LOOKALIKES + ('"', "]", "\\"))) + text[i:]
    else:
        found = [(m, k) for m in MARKERS for k in range(len(text)) if text.startswith(m, k)]
        if found:
            m, k = draw(st.sampled_from(found))
            text = text[:k] + text[k + len(m) :]
    return Generated(g.config, g.pieces, text)


def streamed(text: str, chunks: list[str], kwargs: dict[str, Any]) -> tuple[ChatMessage, ChatMessage, list[Any]]:
    """The complete message, the streamed rebuild and the deltas."""
    deltas = feed_chunks(chunks, **kwargs)
    return parse_complete(text, **kwargs), accumulate(deltas), deltas


@given(g=outputs(), data=st.data())
def test_well_formed_outputs_parse_back(g: Generated, data: st.DataObject) -> None:
    """A well-formed output gives, on any chunking, exactly the generated text, reasoning and calls (with Kimi ids)."""
    kwargs = g.config.kwargs()
    chunks = data.draw(chunkings(g.text), label="chunks")
    full, rebuilt, deltas = streamed(g.text, chunks, kwargs)
    assert message_key(rebuilt) == message_key(full)
    check_delta_invariants(deltas, g.config.tools)
    content, reasoning, calls = g.expected()
    assert (full.content, full.reasoning_content) == (content, reasoning)
    assert [(c.function.name, c.function.arguments) for c in full.tool_calls] == [(n, a) for n, a, _ in calls]
    for got, (_, _args, call_id) in zip(full.tool_calls, calls, strict=True):
        assert isinstance(json.loads(got.function.arguments), dict)
        if call_id is not None:
            assert got.id == call_id
    assert [tc.id for d in deltas for tc in d.tool_calls if tc.id and not tc.id.startswith("call_")] == [
        i for _, _, i in calls if i is not None
    ]


@given(g=mutated(), data=st.data())
def test_broken_outputs_stream_like_complete(g: Generated, data: st.DataObject) -> None:
    """A broken output streams, on any chunking, to what parse_complete gives; every call's arguments are an object."""
    kwargs = g.config.kwargs()
    chunks = data.draw(chunkings(g.text), label="chunks")
    full, rebuilt, _ = streamed(g.text, chunks, kwargs)
    assert message_key(rebuilt) == message_key(full)
    for c in full.tool_calls:
        assert isinstance(json.loads(c.function.arguments), dict), c
        assert c.function.name and (g.config.tools is None or c.function.name in g.config.tools)


@given(g=outputs())
def test_nothing_is_lost(g: Generated) -> None:
    """Without a tools filter, every generated call comes out and the text pieces are exactly the content and reasoning."""
    cfg = Config(g.config.dialect, g.config.reasoning, g.config.enable_thinking, None)
    m = parse_complete(g.text, **cfg.kwargs())
    content, reasoning, calls = Generated(cfg, g.pieces, g.text).expected()
    assert (m.content, m.reasoning_content) == (content, reasoning)
    assert len(m.tool_calls) == len(calls)
