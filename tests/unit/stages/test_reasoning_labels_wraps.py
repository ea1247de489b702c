"""The reasoning splitter's options: start labels, content wrappers, newline stripping and reentrant markers."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from deltaflow.items import Channel, ChannelText, ChunkEnd
from deltaflow.parsers.spec import ReasoningDialect
from deltaflow.stages.reasoning import ReasoningSplitter
from deltaflow.testing import random_chunks

LABELLED = ReasoningDialect(
    name="t_labels", start="<s>", end="</s>", starts_open=False, start_labels=("thought\n", "thought")
)
WRAPPED = ReasoningDialect(name="t_wrap", start="<s>", end="</s>", starts_open=True, content_wrap=("<a>", "</a>"))
STRIPPED = ReasoningDialect(name="t_strip", start="<s>", end="</s>", content_lstrip_newlines=True)
REENTRANT = ReasoningDialect(
    name="t_re", start="<c>", end="</c>", starts_open=False, start_labels=("thought\n", "thought"), reentrant=True
)
REENTRANT_WRAPPED = ReasoningDialect(
    name="t_re_wrap", start="<c>", end="</c>", starts_open=False, reentrant=True, content_wrap=("<a>", "</a>")
)


def run(spec: ReasoningDialect, chunks: Sequence[str], *, enabled: bool = True, chunking: str = "any") -> list[object]:
    """Feed ``chunks`` through a splitter for ``spec`` and return every item, finish included."""
    s = ReasoningSplitter(spec, enabled=enabled, chunking=chunking)
    out: list[object] = []
    for c in chunks:
        out.extend(s.feed(c))
    out.extend(s.finish())
    return out


def joined(items: Sequence[object]) -> tuple[str, str]:
    """(reasoning, content) text of a list of items."""
    texts = [i for i in items if isinstance(i, ChannelText)]
    return (
        "".join(i.text for i in texts if i.channel is Channel.REASONING),
        "".join(i.text for i in texts if i.channel is Channel.CONTENT),
    )


def split_all_ways(spec: ReasoningDialect, text: str, **kwargs: object) -> tuple[str, str]:
    """The (reasoning, content) of ``text``; whole, per-character, two-piece and random chunkings must agree."""
    want = joined(run(spec, [text], **kwargs))  # type: ignore[arg-type]
    ways = [list(text)] + [[text[:i], text[i:]] for i in range(1, len(text))]
    ways += [random_chunks(text, seed, 5) for seed in range(8)]
    for chunks in ways:
        assert joined(run(spec, chunks, **kwargs)) == want, chunks  # type: ignore[arg-type]
    return want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("<s>thought\nplan</s>ok", ("plan", "ok")),
        ("<s>thought</s>ok", ("", "ok")),
        ("<s>thoughtful plan</s>ok", ("ful plan", "ok")),  # the longest label that matches is dropped
        ("<s>thousand</s>ok", ("thousand", "ok")),
        ("<s>thou", ("thou", "")),  # a label prefix cut off by the end of the output is reasoning
        ("<s>thought", ("", "")),
        ("<s>plan thought\n</s>ok", ("plan thought\n", "ok")),  # only right after the start marker
        ("plain", ("", "plain")),
    ],
)
def test_start_labels(text: str, want: tuple[str, str]) -> None:
    """The longest start label right after the start marker is dropped, on every chunking."""
    assert split_all_ways(LABELLED, text) == want


def test_label_prefix_is_held_then_released() -> None:
    """A possible label is held (at most one label long) and released as reasoning when it diverges."""
    s = ReasoningSplitter(LABELLED)
    assert joined(s.feed("<s>thou")) == ("", "")
    assert joined(s.feed("ght")) == ("", "")  # "thought" may still become "thought\n"
    assert joined(s.feed("x")) == ("x", "")


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("plan</s><a>answer</a>", ("plan", "answer")),
        ("plan</s>\n\n<a>answer</a>\n", ("plan", "answer\n")),  # blank before the opener goes with it
        ("plan</s>\n\n<a>", ("plan", "")),
        ("plan</s>answer</a>", ("plan", "answer</a>")),  # no opener: no closer dropped either
        ("plan</s>x<a>answer</a>", ("plan", "x<a>answer</a>")),  # opener not first: kept
        ("plan</s>" + " " * 3 + "<a>y", ("plan", "y")),
        ("plan</s>" + " " * 4 + "<a>y", ("plan", " " * 4 + "<a>y")),  # more blank than the opener is long
        ("plan</s><a>a</a>b</a>", ("plan", "ab</a>")),  # only the first closer
        ("plan</s><a>cut </", ("plan", "cut </")),
        ("plan</s>  ", ("plan", "  ")),
        ("plan", ("plan", "")),
    ],
)
def test_content_wrap(text: str, want: tuple[str, str]) -> None:
    """A wrapper whose opener is the first non-blank content is dropped with its first closer."""
    assert split_all_ways(WRAPPED, text) == want


def test_content_wrap_applies_with_thinking_disabled() -> None:
    """With enable_thinking=False everything is content, but the content wrapper is still dropped."""
    assert split_all_ways(WRAPPED, "<a>x</s>y</a>z", enabled=False) == ("", "x</s>yz")


def test_content_wrap_holds_a_bounded_tail() -> None:
    """Blank and a partial opener are held (at most twice the opener), a partial closer while wrapped."""
    s = ReasoningSplitter(WRAPPED)
    assert joined(s.feed("r</s>\n<")) == ("r", "")
    assert joined(s.feed("a>ok</")) == ("", "ok")
    assert joined(s.feed("b")) == ("", "</b")
    s2 = ReasoningSplitter(WRAPPED)
    assert joined(s2.feed("r</s>" + " " * 3)) == ("r", "")
    assert joined(s2.feed(" " * 3)) == ("", " " * 6)  # too much blank: the wrapper is given up


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("<s>r</s>\n\n\nHello\n", ("r", "Hello\n")),
        ("r</s>\nA\nB", ("r", "A\nB")),
        ("r</s> \nx", ("r", " \nx")),  # only newlines
        ("r</s>\n\n", ("r", "")),
    ],
)
def test_content_lstrip_newlines(text: str, want: tuple[str, str]) -> None:
    """Newlines right after the end marker are dropped."""
    assert split_all_ways(STRIPPED, text) == want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("<c>thought\nr<c/>", ("r<c/>", "")),
        ("Before\n<c>r</c>\nrest", ("r", "Before\n\nrest")),
        ("<c>thought\n</c>hi<c>thought\n</c>", ("", "hi")),
        ("<c><c>thought\n</c>hi", ("", "hi")),  # a start marker inside reasoning is dropped with its label
        ("<c>a<c>b</c>c", ("ab", "c")),
        ("r</c>c", ("", "rc")),  # a stray end marker is dropped
        ("<c>a</c>b</c>c<c>d</c>e", ("ad", "bce")),
        ("x <c", ("", "x <c")),
    ],
)
def test_reentrant_markers(text: str, want: tuple[str, str]) -> None:
    """Reentrant markers are never text: blocks may open in the content, stray markers are dropped."""
    assert split_all_ways(REENTRANT, text) == want


def test_reentrant_with_wrapper() -> None:
    """A reasoning block inside a wrapped content does not end the wrapper's closer search."""
    assert split_all_ways(REENTRANT_WRAPPED, "<a>x<c>r</c>y</a>z") == ("r", "xyz")


def test_reentrant_is_off_with_thinking_disabled() -> None:
    """With enable_thinking=False reentrant markers are plain content."""
    assert split_all_ways(REENTRANT, "a<c>b</c>c", enabled=False) == ("", "a<c>b</c>c")


def test_tokens_mode_agrees_when_every_prefix_is_declared() -> None:
    """With every marker prefix declared, "tokens" chunking gives the same split as "any"."""
    from deltaflow.parsers.spec import all_prefixes

    spec = ReasoningDialect(
        name="t_tok", start="<c>", end="</c>", starts_open=False, reentrant=True,
        start_labels=("thought\n", "thought"), content_wrap=("<a>", "</a>"),
        token_prefixes=all_prefixes("<c>", "</c>", "<a>", "</a>"),
    )
    text = "<c>thought\nr</c> <a>x<c>s</c>y</a>z</c>"
    assert split_all_ways(spec, text, chunking="tokens") == split_all_ways(spec, text) == ("rs", "xyz")


def test_reasoning_tokens_count_every_block() -> None:
    """Tokens of every raw reasoning block (markers and labels included) are counted, content tokens not."""
    s = ReasoningSplitter(REENTRANT)
    pieces = ["Hi", "<c>", "thought\n", "r", "</c>", "ok", "<c>", "s", "</c>", "!"]
    out: list[object] = []
    for p in pieces:
        out.extend(s.feed(p))
    out.extend(s.feed(ChunkEnd(token_ids=list(range(len(pieces))), token_chars=[len(p) for p in pieces])))
    ends = [i for i in out if isinstance(i, ChunkEnd)]
    assert [e.reasoning_tokens for e in ends] == [7]
    # Spans that ended before a chunk are not counted again.
    assert s.feed(ChunkEnd(token_ids=[1], token_chars=[0]))[0].reasoning_tokens == 0  # type: ignore[union-attr]


def test_reasoning_tokens_across_chunks() -> None:
    """A block spanning two engine chunks is counted in both, per token."""
    s = ReasoningSplitter(REENTRANT)
    s.feed("a<c>")
    first = s.feed(ChunkEnd(token_ids=[1, 2], token_chars=[1, 3]))[0]
    s.feed("r</c>b")
    second = s.feed(ChunkEnd(token_ids=[3, 4, 5], token_chars=[1, 4, 1]))[0]
    assert (first.reasoning_tokens, second.reasoning_tokens) == (1, 2)  # type: ignore[union-attr]


def test_reasoning_spans_are_bounded_without_chunk_ends() -> None:
    """Many blocks fed as plain text keep a bounded span list (later blocks merge into the last span)."""
    s = ReasoningSplitter(REENTRANT)
    for _ in range(1000):
        s.feed("c<c>r</c>")
    assert len(s._spans) <= 32
    assert joined(s.feed("x")) == ("", "x")
