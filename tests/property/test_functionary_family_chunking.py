"""Stream == complete for Functionary v3.1 / v3.2 and Command R+ outputs generated from their grammars.

Grammar facts (``deltaflow/parsers/dialects/functionary.py`` and ``cohere.py``):

* functionary_v3_1: prose, then calls ``<function=NAME>{json}</function>``
  one after another (nothing or a newline between them), then prose.
* functionary_v3_2: messages joined by ``>>>``: ``all\\n`` then prose (no
  ``>``), or ``NAME\\n{json}``; the first message has no ``>>>``.
* command_r_plus: prose, ``Action:``, blanks, ```` ```json ````, a JSON array of
  ``{"tool_name": NAME, "parameters": {...}}``, ```` ``` ````, prose.

Prose never holds ``<`` or a backtick or ``Action:``, so every generated call is well formed.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from deltaflow import accumulate, parse_complete
from deltaflow.testing import feed_chunks, message_key

from .strategies import check_delta_invariants, chunkings, tool_defs

NAMES = ("get_weather", "search", "f", "ns_lookup")
PROSE = st.text(alphabet="abcdefghij XYZ.,!?()[]'\"=\n0123{}", max_size=12)
LEAF = st.one_of(
    st.text(max_size=8), st.integers(-1000, 1000), st.floats(allow_nan=False, allow_infinity=False), st.booleans(), st.none()
)
VALUE = st.recursive(
    LEAF, lambda ch: st.one_of(st.lists(ch, max_size=3), st.dictionaries(st.text(max_size=4), ch, max_size=3)), max_leaves=6
)
ARGS = st.dictionaries(st.text(max_size=6), VALUE, max_size=3)
Calls = list[tuple[str, dict[str, Any]]]


def dumps(draw: st.DrawFn, value: Any) -> str:
    """JSON source text, ASCII-escaped or raw, compact or spaced."""
    return json.dumps(
        value,
        ensure_ascii=draw(st.booleans()),
        separators=draw(st.sampled_from(((",", ":"), (", ", ": ")))),
    )


@st.composite
def functionary_v3_1_output(draw: st.DrawFn) -> tuple[str, Calls]:
    """Prose, Functionary v3.1 calls, prose."""
    calls: Calls = []
    srcs = []
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(NAMES))
        args = draw(ARGS)
        srcs.append(f"<function={name}>" + dumps(draw, args) + "</function>")
        calls.append((name, args))
    return draw(PROSE) + draw(st.sampled_from(("\n", ""))).join(srcs) + draw(PROSE), calls


@st.composite
def command_r_plus_output(draw: st.DrawFn) -> tuple[str, Calls]:
    """Prose, an Action block with a JSON array of calls, prose."""
    calls: Calls = []
    elems = []
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(NAMES))
        args = draw(ARGS)
        elems.append(dumps(draw, {"tool_name": name, "parameters": args}))
        calls.append((name, args))
    head = "Action:" + draw(st.sampled_from(("\n", " ", ""))) + "```json" + draw(st.sampled_from(("\n", "")))
    block = head + "[" + draw(st.sampled_from((", ", ",\n", ","))).join(elems) + "]" + draw(st.sampled_from(("\n", ""))) + "```"
    return draw(PROSE) + block + draw(PROSE), calls


@st.composite
def functionary_v3_2_output(draw: st.DrawFn) -> tuple[str, Calls, str]:
    """Messages addressed to ``all`` (content) or to a function (a call), joined by ``>>>``; with the content."""
    calls: Calls = []
    msgs = []
    content = ""
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            text = draw(PROSE.filter(lambda t: ">" not in t))
            msgs.append("all\n" + text)
            content += text
        else:
            name = draw(st.sampled_from(NAMES))
            args = draw(ARGS)
            msgs.append(f"{name}\n" + draw(st.sampled_from(("", " ", "\n"))) + dumps(draw, args))
            calls.append((name, args))
    return ">>>".join(msgs), calls, content


def _check(parser: str, text: str, want: Calls, data: st.DataObject, modes: tuple[str, ...] = ("any", "tokens")) -> None:
    """Stream == complete on a drawn chunking; the delta contract holds; the calls parse back to ``want``."""
    offered = data.draw(st.one_of(st.none(), st.just(NAMES)), label="tools")
    mode = data.draw(st.sampled_from(modes), label="mode")
    kw: dict[str, Any] = {"tool_parser": parser, "tools": tool_defs(offered)}
    complete = parse_complete(text, **kw)
    deltas = feed_chunks(data.draw(chunkings(text), label="chunks"), chunking=mode, **kw)
    assert message_key(accumulate(deltas)) == message_key(complete)
    got = check_delta_invariants(deltas, offered)
    assert [(n, json.loads(a)) for n, a in got] == want


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_functionary_v3_1_outputs_stream_as_complete_and_parse_back(data: st.DataObject) -> None:
    """On any chunking, stream == complete; arguments are JSON objects; well-formed calls parse back."""
    text, want = data.draw(functionary_v3_1_output(), label="output")
    # "any" mode only: "tokens" mode trusts the llama3 boundaries ("<", "<function"), not every split.
    _check("functionary_v3_1", text, want, data, modes=("any",))


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_functionary_v3_2_outputs_stream_as_complete_and_parse_back(data: st.DataObject) -> None:
    """On any chunking (both modes), stream == complete; the calls and the content addressed to ``all`` parse back."""
    text, want, content = data.draw(functionary_v3_2_output(), label="output")
    _check("functionary_v3_2", text, want, data)
    if not text[:1].isspace():  # leading blanks of the output stay text before the block
        assert (parse_complete(text, tool_parser="functionary_v3_2").content or "") == content


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_command_r_plus_outputs_stream_as_complete_and_parse_back(data: st.DataObject) -> None:
    """On any chunking (both modes: every prefix of ``Action:`` is declared), stream == complete; calls parse back."""
    text, want = data.draw(command_r_plus_output(), label="output")
    _check("command_r_plus", text, want, data)
