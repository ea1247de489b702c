"""The tool block feeder: routing text around tool blocks in both channels."""

from __future__ import annotations

import pytest

from deltaflow import StateError
from deltaflow.items import Channel, ChannelText, ToolDelta
from deltaflow.parsers import registry
from deltaflow.stages.tool_feeder import ToolBlockFeeder

C, R = Channel.CONTENT, Channel.REASONING
CALL = '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'


def run(items: list[ChannelText], dialect: str = "hermes", chunking: str = "any") -> list[object]:
    """Feed ``items`` to a new feeder and finish it; return every output item."""
    f = ToolBlockFeeder(registry.get_tool_dialect(dialect), chunking=chunking)
    out: list[object] = []
    for it in items:
        out.extend(f.feed(it))
    out.extend(f.finish())
    return out


def texts(items: list[object]) -> list[tuple[Channel, str]]:
    """The ChannelText items; adjacent ones of the same channel (no tool event between) merged."""
    merged: list[tuple[Channel, str]] = []
    joinable = False
    for it in items:
        if isinstance(it, ChannelText) and it.text:
            if joinable and merged[-1][0] is it.channel:
                merged[-1] = (it.channel, merged[-1][1] + it.text)
            else:
                merged.append((it.channel, it.text))
            joinable = True
        elif isinstance(it, ToolDelta):
            joinable = False
    return merged


def tool_events(items: list[object]) -> list[ToolDelta]:
    """The ToolDelta items."""
    return [it for it in items if isinstance(it, ToolDelta)]


def test_plain_text_passes_through_at_once() -> None:
    """Text with no opener prefix at its end is released in the same feed."""
    f = ToolBlockFeeder(registry.get_tool_dialect("hermes"))
    assert f.feed(ChannelText(C, "hello world")) == [ChannelText(C, "hello world")]


def test_partial_opener_is_held_then_released() -> None:
    """A chunk tail that may begin the opener is held, and released as text when it is not one."""
    f = ToolBlockFeeder(registry.get_tool_dialect("hermes"))
    assert texts(f.feed(ChannelText(C, "a <tool_"))) == [(C, "a ")]
    assert texts(f.feed(ChannelText(C, "box>"))) == [(C, "<tool_box>")]


def test_partial_opener_is_released_at_finish() -> None:
    """finish() releases a held partial opener as text."""
    f = ToolBlockFeeder(registry.get_tool_dialect("hermes"))
    f.feed(ChannelText(C, "x<tool_ca"))
    assert texts(f.finish()) == [(C, "<tool_ca")]


def test_tokens_mode_does_not_hold_a_single_token_opener_prefix() -> None:
    """With chunking="tokens", hermes holds nothing ("<tool_call>" is one token)."""
    f = ToolBlockFeeder(registry.get_tool_dialect("hermes"), chunking="tokens")
    assert texts(f.feed(ChannelText(C, "a <"))) == [(C, "a <")]


def test_block_events_carry_the_channel_it_was_opened_from() -> None:
    """A block that ends unclosed reasoning yields events of the reasoning channel, after the text before it."""
    out = run([ChannelText(R, "think " + CALL + "\n")])
    assert texts(out) == [(R, "think "), (R, "\n")]
    events = tool_events(out)
    assert events and all(e.channel is R and e.call == 0 for e in events)
    assert [e.name for e in events if e.name] == ["f"]
    assert "".join(e.args for e in events) == '{"a": 1}'
    assert any(e.end for e in events)


def test_markers_and_payload_are_never_channel_text() -> None:
    """The markers and payload of a block appear only in tool events, on every chunking."""
    text = "before" + CALL + "after"
    for chunks in ([text], list(text)):
        out = run([ChannelText(C, c) for c in chunks])
        assert [t for _, t in texts(out)] == ["before", "after"]
        assert "".join(e.raw for e in tool_events(out)).startswith("<tool_call>")


def test_call_numbers_are_sequential() -> None:
    """Each call gets the next response-wide number, across blocks and channels."""
    f = ToolBlockFeeder(registry.get_tool_dialect("hermes"))
    out = f.feed(ChannelText(C, CALL)) + f.feed(ChannelText(C, "x" + CALL + CALL)) + f.finish()
    assert sorted({e.call for e in tool_events(out)}) == [0, 1, 2]
    assert f.calls == 3


@pytest.mark.parametrize(
    ("after", "label"),
    [
        (ChannelText(R, " more"), "more reasoning"),
        (ChannelText(C, ""), "the end of reasoning"),
        (ChannelText(C, "x"), "content"),
    ],
)
def test_blocks_inside_reasoning_followed_by_text_are_reasoning_text(after: ChannelText, label: str) -> None:
    """Blocks inside reasoning followed by more text were only thought: their raw text is reasoning, verbatim,
    no event is emitted and their call numbers are reused."""
    f = ToolBlockFeeder(registry.get_tool_dialect("hermes"))
    out = f.feed(ChannelText(R, "r " + CALL + "\n")) + f.feed(ChannelText(R, CALL)) + f.feed(after)
    assert tool_events(out) == [], label
    assert f.calls == 0
    out += f.feed(ChannelText(C, CALL)) + f.finish()
    assert texts(out)[0] == (R, "r " + CALL + "\n" + CALL + (after.text if after.channel is R else ""))
    assert {e.call for e in tool_events(out)} == {0}


def test_blocks_ending_unclosed_reasoning_are_held_until_the_end() -> None:
    """Blocks inside reasoning with only blanks after them are calls, emitted when the output ends."""
    f = ToolBlockFeeder(registry.get_tool_dialect("hermes"))
    out = f.feed(ChannelText(R, "r " + CALL + "\n")) + f.feed(ChannelText(R, CALL + "\n\n"))
    assert tool_events(out) == [] and texts(out) == [(R, "r ")]
    out += f.finish()
    assert sorted({e.call for e in tool_events(out)}) == [0, 1]
    assert texts(out) == [(R, "r "), (R, "\n\n")]


def test_whitespace_between_blocks_is_swallowed() -> None:
    """Whitespace between two blocks becomes raw text of the next call, not channel text."""
    out = run([ChannelText(C, CALL + "\n\n" + CALL)])
    assert texts(out) == []
    assert len({e.call for e in tool_events(out)}) == 2


def test_whitespace_after_the_last_block_stays_text() -> None:
    """Whitespace after a block that no block follows stays text of its channel."""
    assert texts(run([ChannelText(C, CALL + "\n")])) == [(C, "\n")]
    assert texts(run([ChannelText(C, CALL + "\nafter")])) == [(C, "\nafter")]
    assert texts(run([ChannelText(C, CALL), ChannelText(C, "\n"), ChannelText(C, "x")])) == [(C, "\nx")]


def test_held_whitespace_is_released_when_the_channel_changes() -> None:
    """Whitespace held after a block stays in its channel when the other channel's text arrives."""
    out = run([ChannelText(C, CALL + "\n"), ChannelText(R, "why")])
    assert texts(out) == [(C, "\n"), (R, "why")]
    out = run([ChannelText(R, CALL + "\n"), ChannelText(C, "answer")])
    assert texts(out) == [(R, CALL + "\n"), (C, "answer")]


def test_other_items_pass_through() -> None:
    """Items that are not ChannelText pass through unchanged."""
    f = ToolBlockFeeder(registry.get_tool_dialect("hermes"))
    marker = object()
    assert f.feed(marker) == [marker]


def test_llama3_bare_brace_opens_only_at_channel_start() -> None:
    """For llama3_json, a bare "{" opens a block only where nothing but whitespace came before."""
    at_start = run([ChannelText(C, '  {"name": "f", "parameters": {}}')], "llama3_json")
    assert texts(at_start) == [(C, "  ")] and tool_events(at_start)
    in_prose = run([ChannelText(C, 'see {"name": "f", "parameters": {}}')], "llama3_json")
    assert texts(in_prose) == [(C, 'see {"name": "f", "parameters": {}}')]
    assert tool_events(in_prose) == []


def test_llama3_start_rule_is_per_channel() -> None:
    """A bare "{" at the start of the content channel opens a block even after reasoning text."""
    out = run([ChannelText(R, "thinking"), ChannelText(C, '{"name": "f", "parameters": {}}')], "llama3_json")
    assert texts(out) == [(R, "thinking")]
    assert [e.name for e in tool_events(out) if e.name] == ["f"]


def test_finish_ends_an_open_block() -> None:
    """finish() ends a block cut short; a named call is completed."""
    out = run([ChannelText(C, '<tool_call>{"name": "f", "arguments": {"a": "x')])
    events = tool_events(out)
    assert "".join(e.args for e in events) == '{"a": "x"}'
    assert any(e.end for e in events)


def test_finish_twice_is_a_state_error() -> None:
    """finish() may be called only once."""
    f = ToolBlockFeeder(registry.get_tool_dialect("hermes"))
    f.finish()
    with pytest.raises(StateError):
        f.finish()


def test_whitespace_is_swallowed_only_between_blocks_of_one_channel() -> None:
    """Blank content after a reasoning block's end stays content even when a content block follows (the
    reasoning block, followed by content, is reasoning text)."""
    tight = run([ChannelText(R, "r" + CALL), ChannelText(C, "\n\n" + CALL)])
    spaced = run([ChannelText(R, "r" + CALL + " "), ChannelText(C, "\n\n" + CALL)])
    assert texts(spaced) == [(R, "r" + CALL + " "), (C, "\n\n")]
    assert texts(tight) == [(R, "r" + CALL), (C, "\n\n")]


@pytest.mark.parametrize("n", [0, 1, 256, 257, 300, 600])
def test_lead_blanks_depend_on_the_run_length_alone(n: int) -> None:
    """Blanks before a block are its framing up to BLANK_RUN_MAX; a longer run is text, whole, on every chunking
    (a run released for being too long stays text when more blanks and then an opener follow)."""
    from deltaflow.parsers.base import BLANK_RUN_MAX
    from deltaflow.testing import check_chunkings

    block = '<tool_calls>[{"name": "f", "arguments": {}}]</tool_calls>'
    m = check_chunkings("Hi" + " " * n + block, tool_parser="jamba")
    assert m.content == ("Hi" if n <= BLANK_RUN_MAX else "Hi" + " " * n)
    assert [c.function.name for c in m.tool_calls] == ["f"]
