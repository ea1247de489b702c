"""Hypothesis strategies that build model outputs of each declared dialect from its grammar.

A generated output is a sequence of *pieces*: visible text of one channel,
reasoning markers, and tool blocks (each made of calls whose ``raw`` text it
accounts for). The pieces know what a correct parser must return, so a
well-formed output (no mutation) comes with its expected message:

* text pieces are surfaced verbatim in their channel;
* reasoning markers (``<think>``, ``</think>``) are consumed;
* a call whose name is offered (or any name when ``tools`` is None) is emitted
  with its arguments; a call to another name is surfaced as its raw text, in
  the channel its block was opened from;
* whitespace between two blocks of one channel is raw text of the next call
  (the generator puts it there, never in a text piece).

Grammar facts (shared/dialects.md sections 0-3 and the declarations in
``deltaflow/parsers/dialects``): hermes ``<tool_call>{...}</tool_call>``;
internlm ``<|action_start|>[ws]<|plugin|>{...}<|action_end|>``; llama3_json
``[<|python_tag|>]{...}`` with calls joined by ``;`` and a bare ``{`` opening
a call only where nothing but whitespace (and blocks) came before in the
channel. The envelope is ``{"name": ..., ARGS_FIELD: {...}}`` in any key order.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from deltaflow import DeltaMessage
from deltaflow.parsers import registry
from deltaflow.parsers.dialects.qwen import QWEN35_CALL

__all__ = (
    "CONTENT",
    "ENVELOPES",
    "FREE_NAMES",
    "LOOKALIKES",
    "REASONING",
    "TOOL_NAMES",
    "UNICODE",
    "UNICODE_BLANKS",
    "UNOFFERED_NAMES",
    "Config",
    "Envelope",
    "Expected",
    "GenCall",
    "Generated",
    "Piece",
    "args_object_src",
    "check_delta_invariants",
    "chunkings",
    "configs",
    "generated_outputs",
    "json_string_src",
    "json_value_src",
    "object_src",
    "think_parsers",
    "tool_defs",
)

CONTENT = "content"
REASONING = "reasoning"


@dataclass(frozen=True)
class Envelope:
    """The JSON-envelope grammar of one tool dialect."""

    openers: tuple[str, ...]
    close: str | None
    args_fields: tuple[str, ...]
    bare_object: bool
    separator: str | None


# Mirrors deltaflow/parsers/dialects/hermes.py, internlm.py and llama.py (test_grammar_matches_registry checks the openers).
ENVELOPES: dict[str, Envelope] = {
    "hermes": Envelope(("<tool_call>",), "</tool_call>", ("arguments", "parameters"), False, None),
    "internlm": Envelope(
        ("<|action_start|>", "<|plugin|>"), "<|action_end|>", ("parameters", "arguments"), False, None
    ),
    "llama3_json": Envelope(("<|python_tag|>",), None, ("parameters", "arguments"), True, ";"),
}

TOOL_NAMES = ("get_weather", "search", "calc.v2", "ns:lookup", "f")
UNOFFERED_NAMES = ("delete_all", "rm-rf", "other_tool")
FREE_NAMES = ("天气", "naïve")  # valid when no ``tools`` are given (the model may say anything)

WS_CHARS = " \t\r\n"
_WS_ONLY = re.compile(r"[ \t\r\n]*\Z")
_LLAMA_CONTINUATION = re.compile(r"[ \t\r\n]*;[ \t\r\n]*\{")

# Things that look like markers or JSON structure, for strings and free text.
LOOKALIKES = (
    "</tool_call>", "<tool_call>", "<think>", "</think>", "<thinking>", "</thinking>", "<th", "</", "<",
    "{", "}", "[", "]", '"', "\\", ";", ":", ",", "<|python_tag|>", "<|python_tag|", "<|action_start|>",
    "<|action_start|", "<|plugin|>", "<|action_end|>", "<tool_call", "< think>", "\\u00e9", "null", "\n",
)
UNICODE = ("天气", "北京市", "😀", "👍🏽", "é", "ñandú", "Ω", "\u00a0", "\u3000", "‮", "🇫🇷")
# Whitespace to Python and to the regex ``\s``, but not JSON whitespace.
UNICODE_BLANKS = ("\u3000", "\u00a0", "\x0b", "\x0c", "\x85", "\u2028", "\u2003")

_WS = st.sampled_from(("", "", "", " ", "\n", "  ", "\t", "\r\n", " \n "))
_WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789.,!?-_'()/=+*", min_size=1, max_size=12)
_ANY_CHARS = st.text(alphabet=st.characters(codec="utf-8"), max_size=6)


# -- JSON source text ------------------------------------------------------------------------------


@st.composite
def json_string_src(draw: st.DrawFn, value: str | None = None) -> str:
    """A JSON string literal, written in one of several legal styles (raw, \\u-escaped, ``\\/``)."""
    if value is None:
        value = "".join(
            draw(st.lists(st.one_of(_WORDS, _ANY_CHARS, st.sampled_from(LOOKALIKES), st.sampled_from(UNICODE)),
                          max_size=4))
        )
    style = draw(st.sampled_from(("raw", "raw", "ascii", "slash", "angles")))
    if style == "ascii":
        return json.dumps(value)  # non-ASCII as \uXXXX, astral characters as surrogate pairs
    src = json.dumps(value, ensure_ascii=False)
    if style == "slash":
        return src.replace("/", "\\/")
    if style == "angles":
        return src.replace("<", "\\u003c").replace(">", "\\u003E")
    return src


_NUMBERS = st.one_of(
    st.integers(-(10**20), 10**20).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(json.dumps),
    st.sampled_from(("0", "-0", "1.5e3", "2E-2", "-0.0", "12.50", "1e+2")),
)
_SCALARS = st.one_of(json_string_src(), _NUMBERS, st.sampled_from(("true", "false", "null")))
_KEYS = st.one_of(st.sampled_from(("a", "b", "city", "x")).map(json.dumps), json_string_src())


@st.composite
def _array_src(draw: st.DrawFn, children: st.SearchStrategy[str]) -> str:
    items = draw(st.lists(children, max_size=4))
    if not items:
        return "[" + draw(_WS) + "]"
    body = "".join((draw(_WS) + "," if i else "") + draw(_WS) + v for i, v in enumerate(items))
    return "[" + body + draw(_WS) + "]"


@st.composite
def object_src(draw: st.DrawFn, children: st.SearchStrategy[str], *, duplicates: bool = True) -> str:
    """A JSON object's source text; keys come from a small pool, so duplicate keys occur (kept as raw text)."""
    pairs = draw(st.lists(st.tuples(_KEYS, children), max_size=4))
    if duplicates and pairs and draw(st.booleans()):
        pairs.append((pairs[0][0], draw(children)))  # the same key written twice
    if not pairs:
        return "{" + draw(_WS) + "}"
    body = "".join(
        (draw(_WS) + "," if i else "") + draw(_WS) + k + draw(_WS) + ":" + draw(_WS) + v
        for i, (k, v) in enumerate(pairs)
    )
    return "{" + body + draw(_WS) + "}"


json_value_src: st.SearchStrategy[str] = st.recursive(
    _SCALARS, lambda children: st.one_of(_array_src(children), object_src(children)), max_leaves=8
)
args_object_src: st.SearchStrategy[str] = object_src(json_value_src)


# -- configurations ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """One parser configuration: dialects, ``enable_thinking`` and the offered tool names."""

    tool_parser: str | None
    reasoning_parser: str | None
    enable_thinking: bool | None
    tools: tuple[str, ...] | None
    in_reasoning: str = "trailing"  # tool_calls_in_reasoning

    @property
    def reasoning_active(self) -> bool:
        """Reasoning is split: a reasoning parser, and thinking enabled (explicitly or by the dialect's default)."""
        if self.reasoning_parser is None:
            return False
        if self.enable_thinking is None:
            return registry.get_reasoning_dialect(self.reasoning_parser).default_enabled
        return self.enable_thinking

    def accepts(self, name: str) -> bool:
        """Whether a call to ``name`` is emitted."""
        return self.tools is None or name in self.tools

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``ResponseParser`` / ``parse_complete``."""
        return {
            "tool_parser": self.tool_parser,
            "reasoning_parser": self.reasoning_parser,
            "tools": tool_defs(self.tools),
            "enable_thinking": self.enable_thinking,
            "tool_calls_in_reasoning": self.in_reasoning,
        }


def tool_defs(names: Sequence[str] | None) -> list[dict[str, Any]] | None:
    """OpenAI-format tool definitions for ``names``."""
    if names is None:
        return None
    return [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in names]


def think_parsers() -> tuple[str, ...]:
    """Registered reasoning parsers with the ``<think>``/``</think>`` grammar generated here.

    (Starts open, no implicit terminator but Qwen3.5's call form, which the
    generated text never contains, since a JSON string holds no raw newline
    and reasoning text is sanitized of it: qwen3 and deepseek_r1, and any
    later dialect declared the same way.)
    """
    out = []
    for name in registry.reasoning_dialect_names():
        spec = registry.get_reasoning_dialect(name)
        if (spec.start, spec.end, spec.starts_open) == ("<think>", "</think>", True) and spec.implicit_end in (
            (), (QWEN35_CALL,)
        ) and (
            spec.start_labels, spec.content_wrap, spec.content_lstrip_newlines, spec.reasoning_rstrip_newlines,
            spec.reentrant, spec.inline,
        ) == ((), None, False, False, False, False):  # no splitter option changing the text (ernie45, step3p5 ...)
            out.append(name)
    return tuple(out)


def configs(
    tool_parsers: Sequence[str | None] = (*ENVELOPES, None),
    reasoning_parsers: Sequence[str | None] = (*think_parsers(), None),
    pairs: Sequence[tuple[str | None, str | None]] | None = None,
) -> st.SearchStrategy[Config]:
    """Configurations over the given dialects (never both None), or over explicit ``pairs``."""
    if pairs is None:
        pairs = [(t, r) for t in tool_parsers for r in reasoning_parsers if t is not None or r is not None]
    return st.builds(
        lambda pair, et, tools: Config(pair[0], pair[1], et if pair[1] is not None else None, tools),
        st.sampled_from(list(pairs)),
        st.sampled_from((None, None, True, False)),
        st.one_of(st.none(), st.lists(st.sampled_from(TOOL_NAMES), min_size=1, max_size=4, unique=True).map(tuple)),
    )


# -- generated outputs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class GenCall:
    """One generated call.

    Attributes:
        name: the decoded name.
        args: the arguments text the parser must emit (the object's source
            text verbatim; the decoded text of a string-form value; ``{}``
            when the field is absent or null).
        raw: the model text the call accounts for (for the first call of a
            block: whitespace swallowed before it, the opener, the object and
            the closer; for a later ``;``-joined call: the separator and its object).
        verbatim: ``args`` is a slice of ``raw`` (an object-form value).
    """

    name: str
    args: str
    raw: str
    verbatim: bool


@dataclass(frozen=True)
class Piece:
    """A piece of the output: ``text`` of a channel, a reasoning ``marker``, or a tool ``block``."""

    kind: str
    channel: str
    text: str
    calls: tuple[GenCall, ...] = ()


@dataclass(frozen=True)
class Expected:
    """The message a correct parser returns for a well-formed generated output."""

    content: str | None
    reasoning: str | None
    calls: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Generated:
    """A generated output, its pieces and the mutation applied to its text (if any)."""

    config: Config
    pieces: tuple[Piece, ...]
    text: str
    mutation: str | None

    def expected(self) -> Expected:
        """What parsing the (unmutated) output must give."""
        out: dict[str, list[str]] = {CONTENT: [], REASONING: []}
        calls: list[tuple[str, str]] = []
        for p in self.pieces:
            if p.kind == "text":
                out[p.channel].append(p.text)
            elif p.kind == "block":
                for c in p.calls:
                    if self.config.accepts(c.name):
                        calls.append((c.name, c.args))
                    else:
                        out[p.channel].append(c.raw)
        return Expected("".join(out[CONTENT]) or None, "".join(out[REASONING]) or None, tuple(calls))


def _name_src(draw: st.DrawFn, name: str) -> str:
    if draw(st.booleans()) or not name.isascii():
        return json.dumps(name, ensure_ascii=draw(st.booleans()))
    return f'"\\u{ord(name[0]):04x}' + json.dumps(name)[2:]  # the first letter \u-escaped


@st.composite
def envelope_src(
    draw: st.DrawFn, env: Envelope, name: str, *, in_reasoning: bool, broken: str | None
) -> tuple[str, str, bool]:
    """The ``{"name", ARGS}`` object; returns its source, the expected arguments text and whether it is verbatim.

    Inside open reasoning, a ``</think>`` inside a JSON string is written
    ``<\\/think>`` (the reasoning splitter would rightly end reasoning at it).
    """

    def guard(src: str) -> str:
        return src.replace("</think>", "<\\/think>") if in_reasoning else src

    fields: list[tuple[str, str]] = [('"name"', guard(_name_src(draw, name)))]
    form = draw(st.sampled_from(("object", "object", "object", "empty", "missing", "null", "string")))
    field = json.dumps(draw(st.sampled_from(env.args_fields)))
    verbatim = False
    if form == "object":
        args = guard(draw(args_object_src))
        fields.append((field, args))
        verbatim = True
    elif form == "empty":
        args = "{" + draw(_WS) + "}"
        fields.append((field, args))
        verbatim = True
    elif form == "null":
        args = "{}"
        fields.append((field, "null"))
    elif form == "string":  # some fine-tunes write the arguments as a JSON string holding the object
        args = draw(args_object_src)
        fields.append((field, guard(json.dumps(args, ensure_ascii=draw(st.booleans())))))
    else:
        args = "{}"
    for key in draw(st.lists(st.sampled_from(('"id"', '"type"', '"extra"', '"\\u0069d"')), max_size=2, unique=True)):
        fields.append((key, guard(draw(json_value_src))))
    if broken == "dup_field":
        fields.append(draw(st.sampled_from([('"name"', json.dumps(draw(st.sampled_from(TOOL_NAMES)))),
                                            (field, guard(draw(args_object_src)))])))
    elif broken == "bad_args":
        fields = [f for f in fields if f[0] != field] + [(field, draw(st.sampled_from(("[1, 2]", "5", "true", '"x"'))))]
    fields = draw(st.permutations(fields))
    body = "".join(
        (draw(_WS) + "," if i else "") + draw(_WS) + k + draw(_WS) + ":" + draw(_WS) + v
        for i, (k, v) in enumerate(fields)
    )
    return "{" + body + draw(_WS) + "}", args, verbatim


@st.composite
def block_piece(
    draw: st.DrawFn, cfg: Config, channel: str, lead_ws: str, bare: bool, *, in_reasoning: bool,
    offered_only: bool, broken: str | None,
) -> Piece:
    """One tool block (one call; for llama3_json, 1-2 calls joined by ``;``)."""
    assert cfg.tool_parser is not None
    env = ENVELOPES[cfg.tool_parser]
    ncalls = draw(st.integers(1, 2)) if env.separator else 1
    calls: list[GenCall] = []
    for i in range(ncalls):
        name = draw(call_names(cfg, offered_only))
        obj, args, verbatim = draw(envelope_src(env, name, in_reasoning=in_reasoning,
                                                broken=broken if i == 0 else None))
        if i == 0:
            head = lead_ws
            if not bare:
                head += env.openers[0]
                for marker in env.openers[1:]:
                    head += draw(_WS) + marker
                head += draw(_WS)
            raw = head + obj
        else:
            assert env.separator is not None
            raw = draw(_WS) + env.separator + draw(_WS) + obj
        if env.close is not None:
            raw += draw(_WS) + env.close
        calls.append(GenCall(name, args, raw, verbatim))
    return Piece("block", channel, "".join(c.raw for c in calls), tuple(calls))


def call_names(cfg: Config, offered_only: bool) -> st.SearchStrategy[str]:
    """Names a call may carry: offered ones, and (unless ``offered_only``) others."""
    if cfg.tools is None:
        return st.sampled_from(TOOL_NAMES + UNOFFERED_NAMES + FREE_NAMES)
    if offered_only:
        return st.sampled_from(cfg.tools)
    others = tuple(n for n in TOOL_NAMES + UNOFFERED_NAMES if n not in cfg.tools)
    return st.one_of(st.sampled_from(cfg.tools), st.sampled_from(others))


_FREE_TEXT = st.lists(
    st.one_of(
        _WORDS, _WORDS, st.sampled_from(LOOKALIKES), st.sampled_from(UNICODE), st.sampled_from(UNICODE_BLANKS),
        _ANY_CHARS, _WS,
    ),
    max_size=5,
).map("".join)


_GAP_TEXT = st.one_of(st.just(""), _WS, _FREE_TEXT, _FREE_TEXT)  # adjacent blocks and blank gaps are common


def _sanitize(text: str, forbidden: Sequence[str], fixes: Sequence[Callable[[str], bool]]) -> str:
    """Break every forbidden marker in ``text`` and prefix ``x`` while a fix predicate holds."""
    changed = True
    while changed:
        changed = False
        for m in forbidden:
            if m in text:
                text = text.replace(m, m[:-1] + " " + m[-1])
                changed = True
        for bad in fixes:
            if bad(text):
                text = "x" + text
                changed = True
    return text


@dataclass
class _State:
    """Generation state of one channel segment."""

    channel: str
    started: bool = False  # non-blank text came before in this channel (llama3_json's bare "{" rule)
    after_llama_block: bool = False  # only blanks since a llama3 block in this channel
    first_of_output: bool = False  # the next text is the first of the output (reasoning start rule)


@st.composite
def _segment(
    draw: st.DrawFn, cfg: Config, state: _State, nblocks: int, *, in_reasoning: bool, offered_only: bool,
    broken: str | None,
) -> list[Piece]:
    """Text and blocks of one channel: ``[text] (block [text])*``."""
    pieces: list[Piece] = []
    forbidden: list[str] = []
    if cfg.reasoning_active and state.channel == REASONING:
        rspec = registry.get_reasoning_dialect(cfg.reasoning_parser or "")
        forbidden += [rspec.end, *rspec.implicit_end]
    env = ENVELOPES.get(cfg.tool_parser or "")
    if env is not None:
        forbidden.append(env.openers[0])
    for i in range(nblocks + 1):
        text = draw(_GAP_TEXT)
        prev_block = bool(pieces) and pieces[-1].kind == "block"
        fixes: list[Callable[[str], bool]] = []
        if state.first_of_output and cfg.reasoning_active:
            fixes.append(lambda t: t.lstrip().startswith("<think>"))  # would be consumed as the opening marker
        if env is not None and env.bare_object and not state.started:
            fixes.append(lambda t: t.lstrip(WS_CHARS).startswith("{"))  # a bare "{" would open a call
        if state.after_llama_block:
            fixes.append(lambda t: bool(_LLAMA_CONTINUATION.match(t)))  # would continue the block with a call
        text = _sanitize(text, forbidden, fixes)
        lead_ws = ""
        if i < nblocks and prev_block and _WS_ONLY.match(text):
            lead_ws, text = text, ""  # whitespace between two blocks is raw text of the next call
        if text:
            pieces.append(Piece("text", state.channel, text))
            state.first_of_output = False
            if text.strip(WS_CHARS):
                state.started = True
                state.after_llama_block = False
        if i == nblocks:
            break
        assert env is not None
        bare = env.bare_object and not state.started and draw(st.booleans())
        pieces.append(draw(block_piece(cfg, state.channel, lead_ws, bare, in_reasoning=in_reasoning,
                                       offered_only=offered_only, broken=broken)))
        broken = None
        state.first_of_output = False
        state.after_llama_block = env.separator is not None
    return pieces


MUTATIONS = ("truncate", "drop_closer", "delete_char", "insert", "dup_field", "bad_args")


def settle_thought_blocks(
    pieces: Sequence[Any], make_text: Callable[[str], Any], block_kinds: tuple[str, ...] = ("block",)
) -> list[Any]:
    """Turn each reasoning block that the model went on after into reasoning text (the tool block feeder's
    rule: a block inside reasoning is a call only when nothing but JSON blanks and more blocks follow it to the
    end of the output; any other text, a marker or content after it means it was only thought about)."""
    out = list(pieces)
    real = True
    for i in range(len(out) - 1, -1, -1):
        p = out[i]
        if p.kind in block_kinds and p.channel == REASONING:
            if not real:
                out[i] = make_text(p.text)
        elif not (p.kind == "text" and p.channel == REASONING and not p.text.strip(WS_CHARS)):
            real = False
    return out


@st.composite
def generated_outputs(
    draw: st.DrawFn,
    config_strategy: st.SearchStrategy[Config] | None = None,
    *,
    mutations: bool = True,
    offered_only: bool = False,
    in_reasoning: str = "trailing",
) -> Generated:
    """An output of the drawn configuration's dialects, possibly mutated.

    ``in_reasoning`` is the ``tool_calls_in_reasoning`` policy the expected result follows: ``"trailing"``
    (blocks inside reasoning that the model went on after are reasoning text), ``"always"`` (they are calls),
    ``"never"`` (every block inside reasoning is reasoning text).
    """
    cfg = draw(config_strategy if config_strategy is not None else configs())
    if in_reasoning != cfg.in_reasoning:
        cfg = dataclasses.replace(cfg, in_reasoning=in_reasoning)
    mutation = draw(st.sampled_from((None,) * 6 + MUTATIONS)) if mutations else None
    broken = mutation if mutation in ("dup_field", "bad_args") else None
    nblocks = draw(st.integers(0, 3)) if cfg.tool_parser is not None else 0
    pieces: list[Piece] = []
    if cfg.reasoning_active:
        spec = registry.get_reasoning_dialect(cfg.reasoning_parser or "")
        in_r = draw(st.integers(0, nblocks))
        if draw(st.booleans()):  # the model writes the opening marker itself
            lead = draw(st.sampled_from(("", "", "\n", " \n", "\u3000")))  # blank text before it is reasoning
            if lead:
                pieces.append(Piece("text", REASONING, lead))
            pieces.append(Piece("marker", REASONING, spec.start))
            if draw(st.booleans()):
                pieces.append(Piece("text", REASONING, "\n"))
            # "\u3000" is Unicode whitespace (the reasoning rule skips it before the marker) but not JSON
            # whitespace, so a bare "{" after it is no longer at the start of the channel.
            rstate = _State(REASONING, started=bool(lead.strip(" \t\r\n")))
        else:
            rstate = _State(REASONING, first_of_output=True)
        pieces += draw(_segment(cfg, rstate, in_r, in_reasoning=True, offered_only=offered_only, broken=broken))
        if in_r:
            broken = None
        if draw(st.booleans()):  # reasoning closed
            pieces.append(Piece("marker", REASONING, spec.end))
            cstate = _State(CONTENT)  # the consumed marker ends a block's lookahead and the between-blocks state
            pieces += draw(_segment(cfg, cstate, nblocks - in_r, in_reasoning=False, offered_only=offered_only,
                                    broken=broken))
    else:
        pieces += draw(_segment(cfg, _State(CONTENT), nblocks, in_reasoning=False, offered_only=offered_only,
                                broken=broken))
    if in_reasoning == "trailing":
        pieces = settle_thought_blocks(pieces, lambda t: Piece("text", REASONING, t))
    elif in_reasoning == "never":
        pieces = [Piece("text", REASONING, p.text) if p.kind == "block" and p.channel == REASONING else p
                  for p in pieces]
    text = "".join(p.text for p in pieces)
    if mutation == "truncate":
        text = text[: draw(st.integers(0, len(text)))]
    elif mutation == "drop_closer":
        closers = [m for m in ("</tool_call>", "<|action_end|>", "</think>") if m in text]
        if closers:
            m = draw(st.sampled_from(closers))
            starts = [i.start() for i in re.finditer(re.escape(m), text)]
            i = draw(st.sampled_from(starts))
            text = text[:i] + text[i + len(m):]
    elif mutation == "delete_char" and text:
        i = draw(st.integers(0, len(text) - 1))
        text = text[:i] + text[i + 1:]
    elif mutation == "insert":
        i = draw(st.integers(0, len(text)))
        text = text[:i] + draw(st.sampled_from(LOOKALIKES + ("}", "]", '"', "}}", "\\", ";{"))) + text[i:]
    return Generated(cfg, tuple(pieces), text, mutation)


# -- chunkings and delta invariants ------------------------------------------------------------------


@st.composite
def chunkings(draw: st.DrawFn, text: str) -> list[str]:
    """Any split of ``text``: random cut points (repeats give empty chunks), fixed sizes, or one character each."""
    how = draw(st.sampled_from(("points", "points", "points", "size", "chars")))
    if how == "chars":
        return list(text) or [""]
    if how == "size":
        k = draw(st.integers(1, 12))
        return [text[i : i + k] for i in range(0, len(text), k)] or [""]
    points = sorted(draw(st.lists(st.integers(0, len(text)), max_size=max(1, min(len(text), 80)))))
    out: list[str] = []
    prev = 0
    for p in points:
        out.append(text[prev:p])
        prev = p
    out.append(text[prev:])
    return out


def check_delta_invariants(deltas: Sequence[DeltaMessage], tools: Sequence[str] | None) -> list[tuple[str, str]]:
    """Assert the delta contract for tool calls; return ``(name, arguments)`` of each call.

    The first delta of an index carries id, ``type="function"`` and the
    name, later ones none of them; indexes are dense from 0 and first seen
    in order; ids are distinct; each call's concatenated arguments decode
    to a JSON object; with ``tools``, every name is offered.
    """
    names: list[str] = []
    args: list[list[str]] = []
    ids: set[str] = set()
    for d in deltas:
        for tc in d.tool_calls:
            if tc.index == len(names):
                assert tc.id, f"first delta of call {tc.index} has no id: {tc!r}"
                assert tc.type == "function", f"first delta of call {tc.index}: type {tc.type!r}"
                assert tc.function.name, f"first delta of call {tc.index} has no name: {tc!r}"
                assert tc.id not in ids, f"call id {tc.id!r} used twice"
                ids.add(tc.id)
                names.append(tc.function.name)
                args.append([])
            else:
                assert 0 <= tc.index < len(names), f"index {tc.index} is not dense (seen {len(names)} calls)"
                assert tc.id is None and tc.type is None and tc.function.name is None, (
                    f"a later delta of call {tc.index} repeats its identity: {tc!r}"
                )
            args[tc.index].append(tc.function.arguments or "")
    out = []
    for name, parts in zip(names, args, strict=True):
        joined = "".join(parts)
        try:
            value = json.loads(joined)
        except ValueError as exc:
            raise AssertionError(f"arguments of {name!r} are not JSON: {joined!r} ({exc})") from None
        assert isinstance(value, dict), f"arguments of {name!r} are not an object: {joined!r}"
        if tools is not None:
            assert name in tools, f"call to {name!r}, which is not among the offered tools {list(tools)}"
        out.append((name, joined))
    return out
