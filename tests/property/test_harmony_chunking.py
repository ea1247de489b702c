"""Harmony (``openai`` / ``openai_gptoss``): outputs generated from the message grammar, streamed on any chunking."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from deltaflow import ResponseParser, accumulate, parse_complete
from deltaflow.parsers.drivers.harmony import MARKERS
from deltaflow.testing import feed_chunks, message_key

from .strategies import UNICODE, args_object_src, check_delta_invariants, chunkings, tool_defs

NAMES = ("get_weather", "search", "calc.v2", "ns:lookup", "天气")
OFFERED = ("get_weather", "search", "calc.v2")
_MARKER_RE = re.compile("|".join(re.escape(m) for m in MARKERS))

# Body text: words, whitespace, unicode and marker look-alikes (never a whole marker).
_PIECES = st.one_of(
    st.text(alphabet="abcdefghij XYZ0123.,!?{}[]\"'\\:", min_size=1, max_size=10),
    st.sampled_from(("\n", "  ", "\t", "<|", "|>", "<|sta", "<|end", "<|call|", "|message|>", "<", "|", "to=x")),
    st.sampled_from(UNICODE),
)
_TEXT = st.lists(_PIECES, max_size=5).map("".join).filter(lambda s: _MARKER_RE.search(s) is None)


@dataclass(frozen=True)
class Msg:
    """One generated message: its source text and what it must give."""

    src: str
    kind: str  # "reasoning", "content", "call", "raw_reasoning", "raw_content"
    text: str = ""
    name: str = ""


@st.composite
def headers(draw: st.DrawFn, channel: str, recipient: str | None) -> str:
    """A header from the role part on (the ``<|start|>`` is added by the caller), in one of the seen forms."""
    if recipient is None:
        return f"<|channel|>{channel}<|message|>"
    form = draw(st.sampled_from(("channel", "channel_constrain", "role_json", "role_constrain", "spaced")))
    if form == "channel":
        return f"<|channel|>{channel} to={recipient}<|message|>"
    if form == "channel_constrain":
        return f"<|channel|>{channel} to={recipient} <|constrain|>json<|message|>"
    if form == "role_json":
        return f" to={recipient}<|channel|>{channel} json<|message|>"
    if form == "role_constrain":
        return f" to={recipient}<|channel|>{channel}<|constrain|>json<|message|>"
    return f" to={recipient}<|channel|> {channel} <|constrain|>  json<|message|> "


@st.composite
def messages(draw: st.DrawFn, offered: tuple[str, ...] | None) -> Msg:
    """One message of a gpt-oss output (without ``<|start|>assistant`` and terminator)."""
    kind = draw(st.sampled_from(("analysis", "final", "preamble", "call", "call", "builtin")))
    if kind == "analysis":
        text = draw(_TEXT)
        return Msg(draw(headers("analysis", None)) + text, "reasoning", text)
    if kind in ("final", "preamble"):
        text = draw(_TEXT)
        channel = "final" if kind == "final" else "commentary"
        return Msg(draw(headers(channel, None)) + text, "content", text)
    if kind == "builtin":
        recipient = draw(st.sampled_from(("python", "browser.search", "container.exec")))
        src = draw(headers("analysis", recipient)) + draw(_TEXT)
        return Msg(src, "raw_reasoning", src)
    name = draw(st.sampled_from(NAMES))
    channel = draw(st.sampled_from(("commentary", "commentary", "analysis")))
    args = draw(args_object_src)
    assume(_MARKER_RE.search(args) is None)
    src = draw(headers(channel, "functions." + name)) + args + draw(st.sampled_from(("", " ", "\n")))
    if offered is None or name in offered:
        return Msg(src, "call", args, name)
    return Msg(src, "raw_reasoning" if channel == "analysis" else "raw_content", src)


@dataclass(frozen=True)
class Output:
    """A generated output, its parser options, and the message it must parse to."""

    text: str
    options: dict[str, Any]
    content: str | None
    reasoning: str | None
    calls: list[tuple[str, str]]


@st.composite
def outputs(draw: st.DrawFn) -> Output:
    """A well-formed Harmony output: messages joined by terminators and ``<|start|>assistant``."""
    offered = draw(st.sampled_from((None, OFFERED)))
    msgs = draw(st.lists(messages(offered), min_size=1, max_size=5))
    parts: list[str] = []
    content: list[str] = []
    reasoning: list[str] = []
    calls: list[tuple[str, str]] = []
    seen_content = False
    for i, m in enumerate(msgs):
        last = i == len(msgs) - 1
        if m.kind == "call":
            term = draw(st.sampled_from(("<|call|>", "<|end|>", "") if last else ("<|call|>", "<|end|>")))
        else:
            term = draw(st.sampled_from(("<|end|>", "<|return|>", "") if last else ("<|end|>",)))
        parts.append(("<|start|>assistant" if i else "") + m.src + term)
        if m.kind == "reasoning":
            reasoning.append(m.text)
        elif m.kind == "content":
            if m.text:
                content.append(("\n" if seen_content else "") + m.text)
                seen_content = True
        elif m.kind == "call":
            calls.append((m.name, m.text))
        else:  # surfaced verbatim, header (with its <|start|>) to terminator
            raw = ("<|start|>assistant" if i else "") + m.src + term
            (reasoning if m.kind == "raw_reasoning" else content).append(raw)
    options = {"tool_parser": "openai", "reasoning_parser": "openai_gptoss", "tools": tool_defs(offered)}
    return Output("".join(parts), options, "".join(content) or None, "".join(reasoning) or None, calls)


def _atoms(text: str) -> list[str]:
    """``text`` as markers and single characters (the units token-aligned input never splits)."""
    out: list[str] = []
    pos = 0
    for m in _MARKER_RE.finditer(text):
        out.extend(text[pos : m.start()])
        out.append(m.group())
        pos = m.end()
    out.extend(text[pos:])
    return out


@given(data=st.data(), out=outputs())
def test_generated_outputs_parse_back_on_any_chunking(data: st.DataObject, out: Output) -> None:
    """A well-formed output gives its generated reasoning, content and calls, streamed on any chunking."""
    want = parse_complete(out.text, **out.options)
    assert [(c.function.name, c.function.arguments) for c in want.tool_calls] == out.calls
    assert want.content == out.content
    assert want.reasoning_content == out.reasoning
    chunks = data.draw(chunkings(out.text))
    deltas = feed_chunks(chunks, **out.options)
    assert message_key(accumulate(deltas)) == message_key(want)
    offered = [t["function"]["name"] for t in out.options["tools"]] if out.options["tools"] else None
    for _, args in check_delta_invariants(deltas, offered):
        assert isinstance(json.loads(args), dict)


@given(data=st.data(), out=outputs())
def test_token_aligned_chunks_in_tokens_mode(data: st.DataObject, out: Output) -> None:
    """With chunking="tokens", any split that keeps markers whole rebuilds parse_complete."""
    atoms = _atoms(out.text)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(atoms)), max_size=30)))
    chunks = ["".join(atoms[a:b]) for a, b in zip([0, *cuts], [*cuts, len(atoms)], strict=True)]
    p = ResponseParser(**out.options, chunking="tokens")
    deltas = [d for c in chunks for d in p.feed(c)] + p.feed("", final=True)
    assert message_key(accumulate(deltas)) == message_key(parse_complete(out.text, **out.options))


_MUTATIONS = ("truncate", "delete", "insert_marker", "insert_text")


@given(data=st.data(), out=outputs())
def test_mutated_outputs_stream_like_complete(data: st.DataObject, out: Output) -> None:
    """Damaged output (cut, a character lost, a stray marker or text) streams like complete; calls stay JSON objects."""
    text = out.text
    for _ in range(data.draw(st.integers(1, 3))):
        how = data.draw(st.sampled_from(_MUTATIONS))
        i = data.draw(st.integers(0, len(text)))
        if how == "truncate":
            text = text[:i]
        elif how == "delete":
            text = text[:i] + text[i + 1 :]
        elif how == "insert_marker":
            text = text[:i] + data.draw(st.sampled_from(MARKERS)) + text[i:]
        else:
            text = text[:i] + data.draw(st.sampled_from(("analysis", " to=functions.f", "json", "{", "x y", " "))) + text[i:]
    options = {**out.options, "reasoning_parser": data.draw(st.sampled_from(("openai_gptoss", None)))}
    want = parse_complete(text, **options)
    deltas = feed_chunks(data.draw(chunkings(text)), **options)
    assert message_key(accumulate(deltas)) == message_key(want)
    offered = [t["function"]["name"] for t in options["tools"]] if options["tools"] else None
    check_delta_invariants(deltas, offered)
