"""Stream == complete for MiniCPM5 and MiniMax-M3 outputs generated from their grammars.

Grammar facts (``deltaflow/parsers/dialects/minicpm.py`` and ``minimax.py``):

* minicpm5: prose, then calls ``<function name="N"><param name="K">V</param></function>``
  separated by newlines, then prose; V is raw text without ``<``, or any text
  without ``]]>`` wrapped in ``<![CDATA[...]]>``.
* minimax_m3: prose, then ``M<tool_call>\\n`` invokes
  ``M<invoke name="N">`` elements ``M</invoke>\\n`` and ``M</tool_call>``,
  where an element is ``M<K>V M</K>`` for a string, and for an object or an
  array one child element per member or item (``item`` for arrays), nested.
  Each call's tool schema is built from its arguments (strings, objects with
  ``properties``, arrays of strings), so the arguments parse back exactly.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from deltaflow import accumulate, parse_complete
from deltaflow.parsers.dialects.minimax import MINIMAX_M3_MARKER as M
from deltaflow.testing import feed_chunks, message_key

from .strategies import check_delta_invariants, chunkings, tool_defs

NAMES = ("get_weather", "search", "f", "ns_lookup")
KEYS = ("city", "q", "n", "flag", "items", "obj")
PROSE = st.text(alphabet="abcdefghij XYZ.,!?()[]'\"=\n0123", max_size=12)
RAW = st.text(alphabet=st.characters(codec="utf-8", blacklist_characters="<"), max_size=10)
CDATA_BODY = st.lists(st.sampled_from(("a", " ", "</param>", "<", "]", "]]", ">", "\n", "é")), max_size=8).map("".join).filter(
    lambda s: "]]>" not in s
)
Calls = list[tuple[str, dict[str, Any]]]


@st.composite
def minicpm5_output(draw: st.DrawFn) -> tuple[str, Calls]:
    """Prose, MiniCPM5 calls with raw or CDATA string values, prose."""
    calls: Calls = []
    srcs = []
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(NAMES))
        args: dict[str, Any] = {}
        params = ""
        for key in draw(st.lists(st.sampled_from(KEYS), max_size=3, unique=True)):
            if draw(st.booleans()):
                value = draw(CDATA_BODY)
                params += f'<param name="{key}"><![CDATA[{value}]]></param>'
            else:
                value = draw(RAW)
                params += f'<param name="{key}">{value}</param>'
            args[key] = value
        srcs.append(f'<function name="{name}">{params}</function>')
        calls.append((name, args))
    return draw(PROSE) + draw(st.sampled_from(("\n", ""))).join(srcs) + draw(PROSE), calls


STR = st.text(alphabet=st.characters(codec="utf-8", blacklist_characters="<"), max_size=8)
VALUE = st.recursive(
    STR,
    lambda ch: st.one_of(
        st.dictionaries(st.sampled_from(("a", "b", "x_1", "$k")), ch, min_size=1, max_size=2),
        st.lists(STR, min_size=1, max_size=3),
    ),
    max_leaves=5,
)


def element(key: str, value: Any, ws: str) -> str:
    """One MiniMax-M3 element for ``value``."""
    if isinstance(value, dict):
        inner = ws + "".join(element(k, v, ws) for k, v in value.items())
    elif isinstance(value, list):
        inner = ws + "".join(element("item", v, ws) for v in value)
    else:
        inner = value
    return f"{M}<{key}>{inner}{M}</{key}>{ws}"


def schema(value: Any) -> dict[str, Any]:
    """The JSON schema a value is typed by."""
    if isinstance(value, dict):
        return {"type": "object", "properties": {k: schema(v) for k, v in value.items()}}
    if isinstance(value, list):
        return {"type": "array", "items": {"type": "string"}}
    return {"type": "string"}


@st.composite
def minimax_m3_output(draw: st.DrawFn) -> tuple[str, Calls, list[dict[str, Any]]]:
    """Prose, a MiniMax-M3 block (one distinct tool per call), prose; with the tools that type it."""
    calls: Calls = []
    tools = []
    body = ""
    ws = draw(st.sampled_from(("", "\n")))
    for i in range(draw(st.integers(1, 3))):
        name = f"{NAMES[i]}"
        args = draw(st.dictionaries(st.sampled_from(KEYS), VALUE, max_size=3))
        body += f'{M}<invoke name="{name}">{ws}' + "".join(element(k, v, ws) for k, v in args.items()) + f"{M}</invoke>\n"
        calls.append((name, args))
        tools.append({"type": "function", "function": {"name": name, "parameters": schema(args) | {"type": "object"}}})
    text = draw(PROSE) + f"{M}<tool_call>\n" + body + f"{M}</tool_call>" + draw(PROSE)
    return text, calls, tools


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_minicpm5_outputs_stream_as_complete_and_parse_back(data: st.DataObject) -> None:
    """On any chunking, stream == complete; arguments are JSON objects; well-formed calls parse back."""
    text, want = data.draw(minicpm5_output(), label="output")
    offered = data.draw(st.one_of(st.none(), st.just(NAMES)), label="tools")
    kw: dict[str, Any] = {"tool_parser": "minicpm5", "tools": tool_defs(offered)}
    complete = parse_complete(text, **kw)
    deltas = feed_chunks(data.draw(chunkings(text), label="chunks"), **kw)
    assert message_key(accumulate(deltas)) == message_key(complete)
    got = check_delta_invariants(deltas, offered)
    assert [(n, json.loads(a)) for n, a in got] == want


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_minimax_m3_outputs_stream_as_complete_and_parse_back(data: st.DataObject) -> None:
    """On any chunking (both modes), stream == complete; with the schemas, nested arguments parse back exactly."""
    text, want, tools = data.draw(minimax_m3_output(), label="output")
    typed = data.draw(st.booleans(), label="typed")
    mode = data.draw(st.sampled_from(("any", "tokens")), label="mode")
    kw: dict[str, Any] = {"tool_parser": "minimax_m3", "tools": tools if typed else None}
    complete = parse_complete(text, **kw)
    deltas = feed_chunks(data.draw(chunkings(text), label="chunks"), chunking=mode, **kw)
    assert message_key(accumulate(deltas)) == message_key(complete)
    got = check_delta_invariants(deltas, [n for n, _ in want] if typed else None)
    assert [n for n, _ in got] == [n for n, _ in want]
    if typed:
        assert [json.loads(a) for _, a in got] == [a for _, a in want]
