"""The splitter's and the feeder's plain-text shortcuts give what their general paths give, item by item.

Both stages hand a chunk straight on when it cannot hold a marker: the reasoning splitter a chunk of
reasoning without the end markers' first character, the tool feeder a chunk outside any block without
the openers' first character. Each test runs the same chunks through a stage as built and through one
whose shortcut is switched off (its first-character attribute emptied), for every registered dialect,
on text made of the dialect's own markers, rendered calls and plain text, cut at random points.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltaflow.constrain import render_tool_calls
from deltaflow.constrain.errors import UnsupportedConstraintError
from deltaflow.items import Channel, ChannelText
from deltaflow.parsers.registry import (
    get_reasoning_dialect,
    get_tool_dialect,
    reasoning_dialect_names,
    tool_dialect_names,
)
from deltaflow.stages.reasoning import ReasoningSplitter
from deltaflow.stages.tool_feeder import ToolBlockFeeder

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
WORDS = ("plain words ", "x", " ", "\n", "\n\n", "<", "<<", "[", "{", "}", "é 天气 ", "</", "<|", "[TOOL")


def cut(text: str, points: list[int]) -> list[str]:
    bounds = sorted({0, len(text), *(p % (len(text) + 1) for p in points)})
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


@st.composite
def chunked(draw: st.DrawFn, markers: tuple[str, ...], whole: tuple[str, ...] = ()) -> list[str]:
    """Text of the given markers, their prefixes, plain words and blanks, and (often) the ``whole`` pieces,
    cut into chunks at some of the pieces' own boundaries (where a stage's state changes) and anywhere."""
    parts = [m for m in markers if m] + [m[: max(1, len(m) // 2)] for m in markers if m] + list(WORDS)
    parts += [w for w in whole if w] * 4 + [" ", "\n"] * 3  # calls and the blanks around them, often
    pieces = draw(st.lists(st.sampled_from(parts), max_size=14))
    text = "".join(pieces)
    points, at = [], 0
    for piece in pieces:
        at += len(piece)
        if draw(st.booleans()):
            points.append(at)
    return cut(text, points + draw(st.lists(st.integers(0, 400), max_size=6)))


# -- the reasoning splitter -----------------------------------------------------------------------------------------


def _split(name: str, chunks: list[str], shortcut: bool, starts_open: bool | None) -> list[Any]:
    sp = ReasoningSplitter(get_reasoning_dialect(name), starts_open=starts_open)
    if not shortcut:
        sp._end_first = ""
    out: list[Any] = []
    for c in chunks:
        out.extend(sp.feed(c))
    out.extend(sp.finish())
    return out


@pytest.mark.parametrize("name", reasoning_dialect_names())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_reasoning_shortcut_matches_the_general_path(name: str, data: st.DataObject) -> None:
    spec = get_reasoning_dialect(name)
    markers = (spec.start, spec.end, *spec.implicit_end, *spec.start_labels)
    chunks = data.draw(chunked(markers), label="chunks")
    starts_open = data.draw(st.sampled_from([None, True, False]), label="starts_open")
    assert _split(name, chunks, True, starts_open) == _split(name, chunks, False, starts_open)


def test_the_reasoning_shortcut_is_on_for_qwen3() -> None:
    """The shortcut exists where it should (else the equivalence above proves nothing)."""
    sp = ReasoningSplitter(get_reasoning_dialect("qwen3"), starts_open=True)
    assert sp._end_first == "<"
    assert sp.feed("plain thought") == [ChannelText(Channel.REASONING, "plain thought")]


# -- the tool block feeder ------------------------------------------------------------------------------------------


def _sample_call(name: str) -> str:
    try:
        return render_tool_calls(name, [("get_weather", {"city": "Paris"})], TOOLS)
    except (UnsupportedConstraintError, ValueError):
        return ""


def _feed(name: str, items: list[ChannelText], shortcut: bool, in_reasoning: str) -> list[Any]:
    f = ToolBlockFeeder(get_tool_dialect(name), in_reasoning=in_reasoning)
    if not shortcut:
        f._open_first = ""
    out: list[Any] = []
    for it in items:
        out.extend(f.feed(it))
    out.extend(f.finish())
    return out


@pytest.mark.parametrize("name", tool_dialect_names())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_tool_feeder_shortcut_matches_the_general_path(name: str, data: st.DataObject) -> None:
    d = get_tool_dialect(name)
    markers = (*d.openers, *d.framing, *d.restart_after, *d.start_openers)
    chunks = data.draw(chunked(markers, (_sample_call(name),)), label="chunks")
    channels = data.draw(st.lists(st.sampled_from([Channel.CONTENT, Channel.REASONING]),
                                  min_size=len(chunks), max_size=len(chunks)), label="channels")
    items = [ChannelText(ch, c) for ch, c in zip(channels, chunks, strict=True)]
    mode = data.draw(st.sampled_from(["trailing", "always", "never"]), label="in_reasoning")
    assert _feed(name, items, True, mode) == _feed(name, items, False, mode)


def test_the_feeder_shortcut_is_on_for_hermes() -> None:
    f = ToolBlockFeeder(get_tool_dialect("hermes"))
    assert f._open_first == "<"
    assert f.feed(ChannelText(Channel.CONTENT, "no call here")) == [ChannelText(Channel.CONTENT, "no call here")]
