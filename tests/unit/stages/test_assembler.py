"""The framer: items -> DeltaMessage, merging adjacent items while keeping the channels' real order."""

from __future__ import annotations

import pytest

from deltaflow import DeltaMessage, ResponseParser, StateError, accumulate
from deltaflow.items import CallDelta, Channel, ChannelText, ChunkEnd, ToolDelta
from deltaflow.stages.assembler import DeltaAssembler

C, R = Channel.CONTENT, Channel.REASONING


def kinds(deltas: list[DeltaMessage]) -> list[str]:
    """The kind of each delta: "content", "reasoning" or "tool"."""
    out = []
    for d in deltas:
        fields = (("content", d.content), ("reasoning", d.reasoning_content), ("tool", d.tool_calls))
        parts = [k for k, v in fields if v]
        assert len(parts) == 1, d
        out.append(parts[0])
    return out


def test_adjacent_text_of_one_channel_is_merged() -> None:
    """Adjacent text of the same channel becomes one delta."""
    deltas = DeltaAssembler().frame([ChannelText(C, "a"), ChannelText(C, "b"), ChannelText(C, "c")])
    assert deltas == [DeltaMessage(content="abc")]


def test_channel_order_is_kept() -> None:
    """reasoning -> call -> reasoning stay three deltas, in that order."""
    items: list[object] = [
        ChannelText(R, "r1"),
        CallDelta(index=0, id="i", name="f", args="{}"),
        ChannelText(R, "r2"),
        ChannelText(C, "c"),
        ChannelText(R, "r3"),
    ]
    deltas = DeltaAssembler().frame(items)
    assert kinds(deltas) == ["reasoning", "tool", "reasoning", "content", "reasoning"]
    assert [d.reasoning_content for d in deltas if d.reasoning_content] == ["r1", "r2", "r3"]


def test_empty_text_is_dropped() -> None:
    """Empty text makes no delta."""
    assert DeltaAssembler().frame([ChannelText(C, ""), ChannelText(R, "")]) == []


def test_first_fragment_of_a_call_has_id_type_and_name() -> None:
    """A named CallDelta becomes a tool-call delta with id, type and name; following fragments are merged."""
    items: list[object] = [
        CallDelta(index=0, id="call_x", name="f", args='{"a"'),
        CallDelta(index=0, args=": 1"),
        CallDelta(index=0, args="}"),
    ]
    (d,) = DeltaAssembler().frame(items)
    (tc,) = d.tool_calls
    got = (tc.index, tc.id, tc.type, tc.function.name, tc.function.arguments)
    assert got == (0, "call_x", "function", "f", '{"a": 1}')


def test_named_fragment_without_arguments_has_no_arguments_field() -> None:
    """A first fragment with no argument text leaves ``arguments`` unset."""
    (d,) = DeltaAssembler().frame([CallDelta(index=0, id="i", name="f")])
    assert d.tool_calls[0].function.arguments is None


def test_fragments_of_different_calls_are_not_merged() -> None:
    """Fragments of two calls stay separate deltas, and a new name starts a new delta."""
    items: list[object] = [
        CallDelta(index=0, args="{}"),
        CallDelta(index=1, id="j", name="g", args="{"),
        CallDelta(index=1, args="}"),
    ]
    deltas = DeltaAssembler().frame(items)
    assert [(tc.index, tc.function.name, tc.function.arguments) for d in deltas for tc in d.tool_calls] == [
        (0, None, "{}"),
        (1, "g", "{}"),
    ]


def test_calls_emitted_counts_named_fragments() -> None:
    """``calls_emitted`` counts the calls whose first fragment was framed."""
    f = DeltaAssembler()
    f.frame([CallDelta(index=0, id="i", name="f"), CallDelta(index=0, args="{}")])
    f.frame([CallDelta(index=1, id="j", name="g")])
    assert f.calls_emitted == 2


def test_feed_frames_a_chunk_on_its_end_marker() -> None:
    """Items fed one by one are framed, merged, when their chunk's ChunkEnd arrives."""
    f = DeltaAssembler()
    assert f.feed(ChannelText(C, "a")) == []
    assert f.feed(ChannelText(C, "b")) == []
    assert f.feed(ChunkEnd()) == [DeltaMessage(content="ab")]


def test_finish_reason_goes_on_the_last_delta() -> None:
    """At finish, the finish reason goes on the last delta; "stop" becomes "tool_calls" after a call."""
    f = DeltaAssembler()
    f.feed(CallDelta(index=0, id="i", name="f", args="{}"))
    f.feed(ChunkEnd(finish_reason="stop"))
    assert f.finish() == [DeltaMessage(finish_reason="tool_calls")]
    g = DeltaAssembler()
    g.feed(ChannelText(C, "hi"))
    g.feed(ChunkEnd(finish_reason="length"))
    assert g.finish() == [DeltaMessage(finish_reason="length")]


def test_token_ids_reach_the_client_once() -> None:
    """A chunk's token ids go on its last delta, or on the next delta emitted when it produced none."""
    f = DeltaAssembler()
    out = f.feed(ChunkEnd(token_ids=[1, 2]))  # no delta: the ids wait
    out += f.feed(ChannelText(R, "r"))
    out += f.feed(ChannelText(C, "c"))
    out += f.feed(ChunkEnd(token_ids=[3]))
    out += f.finish()
    assert [d.token_ids for d in out] == [[1, 2], [3]]
    assert f.usage.completion_tokens == 3


def test_finish_twice_is_a_state_error() -> None:
    """finish() may be called only once."""
    f = DeltaAssembler()
    f.finish()
    with pytest.raises(StateError):
        f.finish()


def test_unknown_item_is_a_type_error() -> None:
    """An item the framer does not know is a TypeError naming its type."""
    with pytest.raises(TypeError, match="ToolDelta"):
        DeltaAssembler().frame([ToolDelta(call=0, channel=C)])


def test_one_chunk_with_every_channel_keeps_model_order() -> None:
    """Reasoning (with a block only thought about inside it), content and a call in one chunk stream in the
    model's order."""
    thought = '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'
    text = "r1" + thought + "r2</think>answer" + thought.replace('"f"', '"g"')
    p = ResponseParser("hermes", "qwen3")
    deltas = p.feed(text) + p.feed("", final=True)
    collapsed = [k for i, k in enumerate(kinds(deltas)) if i == 0 or kinds(deltas)[i - 1] != k]
    assert collapsed == ["reasoning", "content", "tool"]
    m = accumulate(deltas)
    assert (m.reasoning_content, m.content) == ("r1" + thought + "r2", "answer")
    assert [c.function.name for c in m.tool_calls] == ["g"]
