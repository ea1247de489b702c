"""The name filter and reindexer."""

from __future__ import annotations

import itertools

from deltaflow.items import CallDelta, Channel, ChannelText, ToolDelta
from deltaflow.stages.name_filter import NameFilter, new_call_id
from deltaflow.testing import check_chunkings, feed_chunks

C, R = Channel.CONTENT, Channel.REASONING


def ids() -> NameFilter:
    """A filter accepting f and h, with predictable ids."""
    counter = itertools.count()
    return NameFilter({"f", "h"}, id_factory=lambda: f"id{next(counter)}")


def test_new_call_id_shape() -> None:
    """Generated ids are "call_" and 24 hex digits, and differ."""
    a, b = new_call_id(), new_call_id()
    assert a != b
    for i in (a, b):
        assert i.startswith("call_") and len(i) == 29
        int(i[5:], 16)


def test_text_passes_through() -> None:
    """Channel text is never held or changed."""
    assert ids().feed(ChannelText(R, "x")) == [ChannelText(R, "x")]


def test_accepted_call_gets_index_id_and_name() -> None:
    """The named event of an accepted call becomes a CallDelta with index, id and name."""
    nf = ids()
    assert nf.feed(ToolDelta(call=0, channel=C, name="f", args="{", raw="...")) == [
        CallDelta(index=0, id="id0", name="f", args="{")
    ]
    assert nf.feed(ToolDelta(call=0, channel=C, args="}", raw="}")) == [CallDelta(index=0, args="}")]
    assert nf.feed(ToolDelta(call=0, channel=C, raw="</tool_call>", end=True)) == []
    assert nf.accepted == 1


def test_model_written_id_is_kept() -> None:
    """An id the model wrote is used instead of a generated one."""
    assert ids().feed(ToolDelta(call=0, channel=C, name="f", id="model-id")) == [
        CallDelta(index=0, id="model-id", name="f")
    ]


def test_rejected_call_is_surfaced_as_text_of_its_channel() -> None:
    """A call to a name not offered is never emitted; all its raw text is surfaced in its channel."""
    nf = ids()
    out = nf.feed(ToolDelta(call=0, channel=R, name="g", args="{", raw='<tool_call>{"name": "g", "arguments": {'))
    out += nf.feed(ToolDelta(call=0, channel=R, args="}", raw="}"))
    out += nf.feed(ToolDelta(call=0, channel=R, raw="}</tool_call>", end=True))
    assert all(isinstance(o, ChannelText) and o.channel is R for o in out)
    assert "".join(o.text for o in out if isinstance(o, ChannelText)) == (
        '<tool_call>{"name": "g", "arguments": {}}</tool_call>'
    )
    assert nf.accepted == 0


def test_indexes_are_dense_across_rejected_calls() -> None:
    """Accepted calls get indexes 0, 1, ... whatever calls were rejected between them."""
    nf = ids()
    out: list[object] = []
    for call, name in enumerate(["f", "g", "h", "x", "f"]):
        out += nf.feed(ToolDelta(call=call, channel=C, name=name, raw="r"))
        out += nf.feed(ToolDelta(call=call, channel=C, args="{}", raw="{}"))
    named = [o for o in out if isinstance(o, CallDelta) and o.name]
    assert [(o.index, o.name, o.id) for o in named] == [(0, "f", "id0"), (1, "h", "id1"), (2, "f", "id2")]
    frags = [o for o in out if isinstance(o, CallDelta) and not o.name]
    assert [o.index for o in frags] == [0, 1, 2]


def test_no_allowed_list_accepts_every_name() -> None:
    """Without an allowed list every name is accepted."""
    nf = NameFilter(None)
    (d,) = nf.feed(ToolDelta(call=0, channel=C, name="anything"))
    assert isinstance(d, CallDelta) and d.name == "anything" and d.index == 0


def test_empty_allowed_list_rejects_every_name() -> None:
    """An empty allowed list offers nothing."""
    assert NameFilter(()).feed(ToolDelta(call=0, channel=C, name="f", raw="raw")) == [ChannelText(C, "raw")]


def test_finish_holds_nothing() -> None:
    """finish() returns nothing (the filter holds nothing)."""
    assert ids().finish() == []


TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def block(name: str, args: str = "{}") -> str:
    """A hermes tool block."""
    return f'<tool_call>{{"name": "{name}", "arguments": {args}}}</tool_call>'


def test_allowed_rejected_allowed_gets_indexes_0_and_1() -> None:
    """Through the parser, allowed, rejected, allowed calls come out as indexes 0 and 1; the rejected one is content."""
    text = block("f", '{"n": 1}') + block("g", '{"n": 2}') + block("f", '{"n": 3}')
    m = check_chunkings(text, tool_parser="hermes", tools=TOOLS)
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [("f", '{"n": 1}'), ("f", '{"n": 3}')]
    assert m.content == block("g", '{"n": 2}')
    for chunks in ([text], list(text)):
        deltas = feed_chunks(chunks, tool_parser="hermes", tools=TOOLS)
        indexes = [tc.index for d in deltas for tc in d.tool_calls]
        assert sorted(set(indexes)) == [0, 1] and indexes == sorted(indexes)
        assert all(tc.function.name != "g" for d in deltas for tc in d.tool_calls)


def test_tools_empty_list_offers_nothing() -> None:
    """tools=[] offers no tool: every call is surfaced as content."""
    text = "hi " + block("f")
    m = check_chunkings(text, tool_parser="hermes", tools=[])
    assert m.tool_calls == [] and m.content == text


def test_unknown_name_without_tools_is_accepted() -> None:
    """Without ``tools``, a call to any name is emitted."""
    m = check_chunkings(block("anything_at_all"), tool_parser="hermes")
    assert [c.function.name for c in m.tool_calls] == ["anything_at_all"]


def test_rejected_call_inside_reasoning_stays_reasoning() -> None:
    """A rejected call opened inside reasoning is surfaced as reasoning text (its channel), never emitted."""
    text = "r " + block("g") + " r2</think>answer"
    m = check_chunkings(text, tool_parser="hermes", reasoning_parser="qwen3", tools=TOOLS)
    assert m.tool_calls == []
    assert m.reasoning_content == "r " + block("g") + " r2"
    assert m.content == "answer"
