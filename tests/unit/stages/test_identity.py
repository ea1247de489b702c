"""The identity-first buffer: the first event of every call names it."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from deltaflow import ResponseParser, StateError
from deltaflow.items import Channel, ChannelText, ToolDelta
from deltaflow.stages.identity import IdentityFirstBuffer
from deltaflow.testing import check_chunkings

C, R = Channel.CONTENT, Channel.REASONING


def feed_all(buf: IdentityFirstBuffer, items: Sequence[object]) -> list[object]:
    """Feed every item and collect the outputs."""
    out: list[object] = []
    for it in items:
        out.extend(buf.feed(it))
    return out


def test_text_passes_through() -> None:
    """Channel text is not held."""
    assert IdentityFirstBuffer().feed(ChannelText(C, "hi")) == [ChannelText(C, "hi")]


def test_named_first_event_is_held_until_the_arguments_begin() -> None:
    """A named call is held until its payload begins; then it passes through, its first event naming it."""
    buf = IdentityFirstBuffer()
    first = ToolDelta(call=0, channel=C, name="f", raw="<tool_call>")
    assert buf.feed(first) == []
    frag = ToolDelta(call=0, channel=C, args='{"a"', raw='{"a"')
    assert buf.feed(frag) == [ToolDelta(call=0, channel=C, name="f", args='{"a"', raw='<tool_call>{"a"')]
    more = ToolDelta(call=0, channel=C, args=": 1}", raw=": 1}")
    assert buf.feed(more) == [more]


def test_arguments_written_with_the_name_do_not_commit() -> None:
    """Argument text a driver writes together with the name (a synthetic opener) does not commit the call."""
    buf = IdentityFirstBuffer()
    assert buf.feed(ToolDelta(call=0, channel=C, name="f", args="{", raw="call:f{")) == []
    assert buf.feed(ToolDelta(call=0, channel=C, raw="junk", abort=True)) == [ChannelText(C, "call:f{junk")]


def test_a_call_ended_at_its_name_is_committed() -> None:
    """A call that ends with its name event (an object closed without arguments) is released at once."""
    buf = IdentityFirstBuffer()
    named = ToolDelta(call=0, channel=C, name="f", args="{}", raw='{"name": "f"}', end=True)
    assert buf.feed(named) == [named]


def test_named_call_whose_arguments_never_began_is_surfaced_whole() -> None:
    """An abort (with or without a closer) or the end of input before the payload: no call, all raw text."""
    buf = IdentityFirstBuffer()
    buf.diagnostics = []
    buf.feed(ToolDelta(call=0, channel=R, name="get_weather", raw="[get_weather("))
    closing = ToolDelta(call=0, channel=R, args="{}", end=True, raw="city=__import__", abort=True)
    assert buf.feed(closing) == [ChannelText(R, "[get_weather(city=__import__")]
    assert buf.diagnostics == [("tool_block_malformed", {"reason": "the arguments never began", "chars": 28})]
    buf = IdentityFirstBuffer()
    buf.feed(ToolDelta(call=0, channel=C, name="f", raw="<tool_call>f"))
    assert buf.finish() == [ChannelText(C, "<tool_call>f")]


def test_events_of_a_surfaced_call_stay_text_in_order() -> None:
    """After a call was surfaced, its later events are text at once (never held behind later text)."""
    buf = IdentityFirstBuffer()
    buf.feed(ToolDelta(call=0, channel=C, name="f", raw="f("))
    assert buf.feed(ToolDelta(call=0, channel=C, raw="1", abort=True)) == [ChannelText(C, "f(1")]
    assert buf.feed(ToolDelta(call=0, channel=C, raw=")", end=True)) == [ChannelText(C, ")")]
    assert buf.feed(ChannelText(C, " ok")) == [ChannelText(C, " ok")]


def test_arguments_before_the_name_are_held_and_released_in_order() -> None:
    """Fragments written before the name are held, then released in order with the name."""
    buf = IdentityFirstBuffer()
    held = [
        ToolDelta(call=0, channel=C, raw="<tool_call>{"),
        ToolDelta(call=0, channel=C, args='{"a": ', raw='{"a": '),
        ToolDelta(call=0, channel=C, args="1}", raw="1}"),
    ]
    assert feed_all(buf, held) == []
    named = ToolDelta(call=0, channel=C, name="f", args="", raw=', "name": "f"')
    (released,) = buf.feed(named)
    assert isinstance(released, ToolDelta)
    assert released.name == "f" and released.call == 0
    assert released.args == '{"a": 1}'
    assert released.raw == '<tool_call>{{"a": 1}, "name": "f"'
    later = ToolDelta(call=0, channel=C, end=True, raw="}")
    assert buf.feed(later) == [later]


def test_model_written_id_is_kept_from_held_events() -> None:
    """An id seen on a held event is carried by the released named event."""
    buf = IdentityFirstBuffer()
    buf.feed(ToolDelta(call=0, channel=C, id="abc", raw="x"))
    assert buf.feed(ToolDelta(call=0, channel=C, name="f", raw="y")) == []
    (released,) = buf.feed(ToolDelta(call=0, channel=C, args="{", raw="{"))
    assert isinstance(released, ToolDelta) and released.id == "abc" and released.name == "f"


def test_unnamed_call_that_ends_is_surfaced_as_text() -> None:
    """A call that ends without a name is surfaced as its raw text, in its channel."""
    buf = IdentityFirstBuffer()
    out = feed_all(
        buf,
        [
            ToolDelta(call=0, channel=R, args="{}", raw='<tool_call>{"arguments": {}'),
            ToolDelta(call=0, channel=R, raw="}</tool_call>", end=True),
        ],
    )
    assert out == [ChannelText(R, '<tool_call>{"arguments": {}}</tool_call>')]


def test_unnamed_call_that_aborts_is_surfaced_as_text() -> None:
    """An aborted unnamed call surfaces all its held raw text."""
    buf = IdentityFirstBuffer()
    out = feed_all(
        buf,
        [ToolDelta(call=0, channel=C, raw="<tool_call>"), ToolDelta(call=0, channel=C, raw="oops", abort=True)],
    )
    assert out == [ChannelText(C, "<tool_call>oops")]


def test_abort_of_a_committed_call_closes_it_and_surfaces_its_raw_text() -> None:
    """An abort event of a committed call: its closer ends the arguments, its raw text becomes text."""
    buf = IdentityFirstBuffer()
    buf.feed(ToolDelta(call=0, channel=C, name="f", raw="<tool_call>"))
    buf.feed(ToolDelta(call=0, channel=C, args='{"a": 1', raw='{"a": 1'))
    assert buf.feed(ToolDelta(call=0, channel=C, args="}", end=True, raw="junk", abort=True)) == [
        ToolDelta(call=0, channel=C, args="}", end=True),
        ChannelText(C, "junk"),
    ]
    assert buf.feed(ToolDelta(call=0, channel=C, raw="", abort=True)) == []


def test_finish_surfaces_an_unnamed_call() -> None:
    """At finish, the raw text held for a call without a name is surfaced."""
    buf = IdentityFirstBuffer()
    buf.feed(ToolDelta(call=0, channel=C, raw='<tool_call>{"arguments": {"a": 1'))
    assert buf.finish() == [ChannelText(C, '<tool_call>{"arguments": {"a": 1')]


def test_finish_with_nothing_held() -> None:
    """finish() returns nothing when no call is held."""
    assert IdentityFirstBuffer().finish() == []


def test_finish_twice_is_a_state_error() -> None:
    """finish() may be called only once."""
    buf = IdentityFirstBuffer()
    buf.finish()
    with pytest.raises(StateError):
        buf.finish()


HERMES2PRO = '<tool_call>{"arguments": {"city": "Paris", "n": [1, 2]}, "name": "get_weather"}</tool_call>'


def test_name_after_arguments_streams_identity_first() -> None:
    """With the name after the arguments, the first tool delta still has id, type and name, on any chunking."""
    m = check_chunkings(HERMES2PRO, tool_parser="hermes")
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [
        ("get_weather", '{"city": "Paris", "n": [1, 2]}')
    ]
    for chunks in ([HERMES2PRO], list(HERMES2PRO)):
        p = ResponseParser("hermes")
        deltas = [d for c in chunks for d in p.feed(c)] + p.feed("", final=True)
        fragments = [tc for d in deltas for tc in d.tool_calls]
        assert fragments[0].id and fragments[0].type == "function" and fragments[0].function.name == "get_weather"
        assert all(tc.id is None and tc.function.name is None for tc in fragments[1:])
        assert "".join(tc.function.arguments or "" for tc in fragments) == '{"city": "Paris", "n": [1, 2]}'


def test_nameless_block_is_surfaced_as_content() -> None:
    """A complete block without a name is surfaced as content, never as a call."""
    text = 'a<tool_call>{"arguments": {"x": 1}}</tool_call>b'
    m = check_chunkings(text, tool_parser="hermes")
    assert m.tool_calls == [] and m.content == text
