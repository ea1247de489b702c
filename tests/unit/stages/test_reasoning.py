"""The reasoning splitter, alone and through the whole parser."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import pytest

import deltaflow
from deltaflow import ResponseParser, StateError, accumulate, parse_complete
from deltaflow.items import Channel, ChannelText
from deltaflow.parsers import registry
from deltaflow.stages.reasoning import ReasoningSplitter
from deltaflow.testing import check_chunkings, random_chunks

QWEN3 = registry.get_reasoning_dialect("qwen3")


def split(chunks: list[str], *, enabled: bool = True, chunking: str = "any") -> list[object]:
    """Run the splitter over ``chunks`` and return every item, finish included."""
    s = ReasoningSplitter(QWEN3, enabled=enabled, chunking=chunking)
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


@dataclass(frozen=True)
class Case:
    """A reasoning case: text and the expected (reasoning, content)."""

    label: str
    text: str
    reasoning: str | None
    content: str | None


CASES = [
    Case("bare end marker", "why</think>answer", "why", "answer"),
    Case("model wrote <think>", "<think>why</think>answer", "why", "answer"),
    Case("never closed", "still thinking <b>", "still thinking <b>", None),
    Case("never closed after <think>", "<think>still thinking", "still thinking", None),
    Case("whitespace before <think> is reasoning", "\n \n<think>why</think>ok", "\n \nwhy", "ok"),
    Case("second </think> is content", "r</think>a</think>b", "r", "a</think>b"),
    Case("later <think> is text", "r <think> s</think>c", "r <think> s", "c"),
    Case("<think> after content is content", "r</think>c<think>d", "r", "c<think>d"),
    Case("empty reasoning", "<think></think>answer", None, "answer"),
    Case("only the end marker", "</think>", None, None),
    Case("trailing partial end marker released", "abc</thi", "abc</thi", None),
    Case("trailing partial start marker released", "<thi", "<thi", None),
    Case("newlines after </think> are content", "r</think>\n\nanswer", "r", "\n\nanswer"),
]


@pytest.mark.parametrize("reasoning_parser", ["qwen3", "deepseek_r1"])
@pytest.mark.parametrize("case", CASES, ids=[c.label for c in CASES])
def test_reasoning_split(case: Case, reasoning_parser: str) -> None:
    """qwen3 and deepseek_r1 start inside reasoning; the first </think> ends it, on any chunking."""
    m = check_chunkings(case.text, reasoning_parser=reasoning_parser)
    assert (m.reasoning_content, m.content) == (case.reasoning, case.content)
    assert m.tool_calls == []


@pytest.mark.parametrize("text", ["<think>why</think>answer", "why</think>answer", "  <think>x"], ids=repr)
def test_enable_thinking_false_makes_everything_content(text: str) -> None:
    """With enable_thinking=False everything, tags included, is content."""
    m = check_chunkings(text, reasoning_parser="qwen3", enable_thinking=False)
    assert (m.reasoning_content, m.content) == (None, text)


def test_enable_thinking_true_is_the_default() -> None:
    """enable_thinking=True behaves as the dialect default (starts inside reasoning)."""
    a = parse_complete("r</think>c", reasoning_parser="qwen3", enable_thinking=True)
    b = parse_complete("r</think>c", reasoning_parser="qwen3")
    assert (a.reasoning_content, a.content) == (b.reasoning_content, b.content) == ("r", "c")


CLOSED_START = [
    Case("no tag is content", "plain answer", None, "plain answer"),
    Case("a written opener starts reasoning", "<think>why</think>answer", "why", "answer"),
    Case("blank before the opener is content", "\n<think>why</think>a", "why", "\na"),
    Case("an opener later in the text is content", "a <think>b</think>", None, "a <think>b</think>"),
    Case("a bare closer is content", "why</think>answer", None, "why</think>answer"),
    Case("tag-like text is kept", "</answer", None, "</answer"),
    Case("an unclosed opener is all reasoning", "<think>still", "still", None),
]


@pytest.mark.parametrize("case", CLOSED_START, ids=[c.label for c in CLOSED_START])
def test_reasoning_starts_open_false_waits_for_the_opener(case: Case) -> None:
    """reasoning_starts_open=False: reasoning begins only at a <think> the model writes, on any chunking."""
    m = check_chunkings(case.text, reasoning_parser="qwen3", reasoning_starts_open=False)
    assert (m.reasoning_content, m.content) == (case.reasoning, case.content)


def test_reasoning_starts_open_true_opens_a_closed_dialect() -> None:
    """reasoning_starts_open=True starts mistral (whose model writes [THINK]) inside reasoning."""
    m = check_chunkings("why[/THINK]answer", reasoning_parser="mistral", reasoning_starts_open=True)
    assert (m.reasoning_content, m.content) == ("why", "answer")
    default = parse_complete("why[/THINK]answer", reasoning_parser="mistral")
    assert (default.reasoning_content, default.content) == (None, "why[/THINK]answer")


def test_enable_thinking_false_wins_over_reasoning_starts_open() -> None:
    """Thinking disabled means no split at all, whatever the prompt is said to have opened."""
    m = parse_complete("why</think>answer", reasoning_parser="qwen3", enable_thinking=False, reasoning_starts_open=True)
    assert (m.reasoning_content, m.content) == (None, "why</think>answer")


@pytest.mark.parametrize("bad", ["no", 1, 0.0])
def test_reasoning_starts_open_must_be_a_bool(bad: object) -> None:
    """A non-bool reasoning_starts_open is a TypeError naming the argument."""
    with pytest.raises(TypeError, match="reasoning_starts_open must be a bool or None"):
        ResponseParser(reasoning_parser="qwen3", reasoning_starts_open=bad)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_stream_passes_reasoning_starts_open() -> None:
    """The async pipeline honours reasoning_starts_open too."""

    async def source() -> AsyncIterator[str]:
        for piece in ("plain ", "answer"):
            yield piece

    async with deltaflow.stream(source(), reasoning_parser="qwen3", reasoning_starts_open=False) as deltas:
        items = [d async for d in deltas]
    m = accumulate(items)
    assert (m.reasoning_content, m.content) == (None, "plain answer")


def test_no_reasoning_parser_is_all_content() -> None:
    """Without a reasoning parser, think tags are plain content."""
    m = check_chunkings("<think>r</think>c")
    assert (m.reasoning_content, m.content) == (None, "<think>r</think>c")


def test_end_marker_split_at_every_position() -> None:
    """An end marker split at any position across two chunks is still found."""
    text = "<think>why</think>answer"
    for i in range(len(text) + 1):
        assert joined(split([text[:i], text[i:]])) == ("why", "answer"), i


def test_partial_end_marker_is_held_until_resolved() -> None:
    """A chunk tail that may begin </think> is held, then released as reasoning when it is not."""
    s = ReasoningSplitter(QWEN3)
    assert joined(s.feed("abc</th")) == ("abc", "")
    assert joined(s.feed("ey")) == ("</they", "")
    assert s.in_reasoning


def test_held_text_is_released_at_finish() -> None:
    """finish() releases a held partial marker as text of the current channel."""
    s = ReasoningSplitter(QWEN3)
    assert joined(s.feed("abc</thi")) == ("abc", "")
    assert joined(s.finish()) == ("</thi", "")


def test_in_reasoning_follows_the_markers() -> None:
    """``in_reasoning`` is True until the end marker, False after."""
    s = ReasoningSplitter(QWEN3)
    assert s.in_reasoning
    s.feed("<think>a")
    assert s.in_reasoning
    s.feed("</think>b")
    assert not s.in_reasoning
    assert not ReasoningSplitter(QWEN3, enabled=False).in_reasoning
    assert not ReasoningSplitter(None).in_reasoning


def test_content_mode_releases_everything_at_once() -> None:
    """After </think> (or with splitting off) nothing is held, even a tail like "</th"."""
    s = ReasoningSplitter(QWEN3)
    s.feed("r</think>")
    assert joined(s.feed("a</th")) == ("", "a</th")
    assert joined(ReasoningSplitter(QWEN3, enabled=False).feed("<thi")) == ("", "<thi")


def test_tokens_mode_holds_only_declared_prefixes() -> None:
    """In "tokens" mode a tail like "</th" (not a token boundary) is released; "</" is held."""
    s = ReasoningSplitter(QWEN3, chunking="tokens")
    assert joined(s.feed("a</th")) == ("a</th", "")
    assert joined(s.feed("b</")) == ("b", "")
    assert joined(s.feed("think>c")) == ("", "c")


def test_random_chunkings_match_the_whole_text() -> None:
    """The splitter gives the same channel texts on any chunking."""
    text = " \n<think>a </thin b</think> c </think> d"
    want = joined(split([text]))
    assert want == (" \na </thin b", " c </think> d")
    assert joined(split(list(text))) == want
    for seed in range(10):
        assert joined(split(random_chunks(text, seed))) == want


def test_finish_twice_is_a_state_error() -> None:
    """finish() may be called only once."""
    s = ReasoningSplitter(QWEN3)
    s.finish()
    with pytest.raises(StateError):
        s.finish()


def test_reasoning_only_response_streams_reasoning_deltas() -> None:
    """A never-closed reasoning streams as reasoning_content deltas only."""
    p = ResponseParser(reasoning_parser="deepseek_r1")
    deltas = p.feed("thinking") + p.feed(" more") + p.feed("", final=True)
    assert all(d.content is None for d in deltas)
    assert "".join(d.reasoning_content or "" for d in deltas) == "thinking more"


def test_qwen35_call_ends_unclosed_reasoning_and_streams() -> None:
    """qwen3 ends reasoning at Qwen3.5's ``<tool_call>\\n<function=``: the call is content, parsed and streamed at
    once; a hermes-style block inside reasoning does not end it."""
    block = "<tool_call>\n<function=bash>\n<parameter=command>\nls\n</parameter>\n</function>\n</tool_call>"
    text = "I need the listing.\n" + block
    m = check_chunkings(text, reasoning_parser="qwen3", tool_parser="qwen3_coder")
    assert (m.reasoning_content, m.content) == ("I need the listing.\n", None)
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [("bash", '{"command": "ls"}')]
    p = ResponseParser("qwen3_coder", "qwen3")
    early = p.feed(text[: text.index("ls\n")])
    assert [tc.function.name for d in early for tc in d.tool_calls if tc.function.name] == ["bash"]
    m = check_chunkings(text, reasoning_parser="qwen3")
    assert (m.reasoning_content, m.content) == ("I need the listing.\n", block)
    hermes = '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    m = check_chunkings("r " + hermes + " more", reasoning_parser="qwen3")
    assert (m.reasoning_content, m.content) == ("r " + hermes + " more", None)
