"""Gemma 4 tool calls (``gemma4``): <|tool_call>call:NAME{key:value}<tool_call|>, converted to JSON while streaming."""

from __future__ import annotations

import json
from typing import Any

import pytest

from deltaflow import ResponseParser, parse_complete
from deltaflow.parsers import registry
from deltaflow.parsers.drivers.gemma4 import GEMMA4_CLOSE, GEMMA4_OPEN, GEMMA4_QUOTE, gemma4_scalar
from deltaflow.testing import check_chunkings

Q = GEMMA4_QUOTE


def tools(*names: str) -> list[dict[str, Any]]:
    """OpenAI-format tool definitions without parameters."""
    return [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in names]


def call(name: str, body: str) -> str:
    """One Gemma 4 call block."""
    return f"{GEMMA4_OPEN}call:{name}{body}{GEMMA4_CLOSE}"


def args_of(text: str, **kwargs: Any) -> list[tuple[str, Any]]:
    """The calls parsed from ``text`` (checked on every chunking) as (name, decoded arguments)."""
    m = check_chunkings(text, tool_parser="gemma4", **kwargs)
    return [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls]


def test_dialect_declaration() -> None:
    """The dialect opens at <|tool_call> only and declares no token prefixes (every marker is one special token)."""
    d = registry.get_tool_dialect("gemma4")
    assert d.openers == (GEMMA4_OPEN,)
    assert set(d.markers) == {GEMMA4_OPEN, GEMMA4_CLOSE, Q}
    assert d.token_prefixes == ()


def test_string_number_bool_null_values() -> None:
    """Strings, numbers, literals and null convert to their JSON values, in the model's key order."""
    text = call("f", f"{{city:{Q}San Francisco{Q},n:-7,x:1.5e10,on:true,off:false,v:null}}")
    assert args_of(text) == [("f", {"city": "San Francisco", "n": -7, "x": 1.5e10, "on": True, "off": False, "v": None})]
    m = parse_complete(text, tool_parser="gemma4")
    assert list(json.loads(m.tool_calls[0].function.arguments)) == ["city", "n", "x", "on", "off", "v"]


def test_nested_objects_and_arrays() -> None:
    """Objects with bare keys and arrays nest; empty ones stay empty."""
    text = call("f", f"{{config:{{theme:{Q}dark{Q},count:3,deep:{{}}}},todos:[{Q}a{Q},[1,2],{{k:[]}}],e:[]}}")
    assert args_of(text) == [
        ("f", {"config": {"theme": "dark", "count": 3, "deep": {}}, "todos": ["a", [1, 2], {"k": []}], "e": []})
    ]


def test_string_values_are_raw_text_json_escaped() -> None:
    """A string value is raw text: quotes, backslashes, newlines, braces and colons are escaped or kept as text."""
    raw = 'say "hi"\\n\n{a:1}, [x] <b>'
    assert args_of(call("f", f"{{s:{Q}{raw}{Q}}}")) == [("f", {"s": raw})]


def test_quoted_keys_and_whitespace() -> None:
    """Keys quoted with <|"|> are accepted, and whitespace between tokens is insignificant."""
    text = call("f", f"{{ {Q}my key{Q} : 1 ,\n b : {Q}x{Q} }}")
    assert args_of(text) == [("f", {"my key": 1, "b": "x"})]


def test_no_argument_call() -> None:
    """``call:NAME{}`` is a call with an empty arguments object."""
    assert args_of(call("empty_args", "{}")) == [("empty_args", {})]


def test_several_calls_and_text_around() -> None:
    """Concatenated blocks are several calls; text before, between and after them is content."""
    text = "Let me check." + call("a", f"{{q:{Q}x{Q}}}") + call("b", "{n:1}") + "\n" + call("a", "{}") + " Done."
    m = check_chunkings(text, tool_parser="gemma4", tools=tools("a", "b"))
    assert [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls] == [
        ("a", {"q": "x"}), ("b", {"n": 1}), ("a", {})
    ]
    assert m.content == "Let me check. Done."


def test_unknown_name_is_filtered_and_surfaced() -> None:
    """With tools given, a call to another name is not emitted: its text is surfaced as content."""
    bad = call("rm_rf", f"{{path:{Q}/{Q}}}")
    m = check_chunkings("x " + bad + call("ok", "{}"), tool_parser="gemma4", tools=tools("ok"))
    assert [c.function.name for c in m.tool_calls] == ["ok"]
    assert m.content == "x " + bad


@pytest.mark.parametrize(
    ("body", "want"),
    [
        (f"{{s:{Q}cut", {"s": "cut"}),  # the output ends inside a string
        ("{n:12", {"n": 12}),  # inside a bare scalar that converts
        ("{a:{b:[1", {"a": {"b": [1]}}),  # inside nested containers
        ("{a:1,", {"a": 1}),  # after a separator
    ],
)
def test_final_completes_a_named_call(body: str, want: dict[str, Any]) -> None:
    """An output that ends inside the arguments completes the named call with what was written."""
    assert args_of(f"{GEMMA4_OPEN}call:f{body}") == [("f", want)]


def test_closer_inside_open_string_ends_the_call() -> None:
    """<tool_call|> inside an unclosed string ends the call there (open string and containers closed)."""
    assert args_of(call("f", f"{{a:[{Q}x") + " after") == [("f", {"a": ["x"]})]
    assert parse_complete(call("f", f"{{a:[{Q}x") + " after", tool_parser="gemma4").content == " after"


def test_malformed_payload_is_surfaced() -> None:
    """Malformed structure completes the named call and surfaces the rest; text that is no call stays content."""
    m = check_chunkings(call("f", "{a:[1},b:2}") + " tail", tool_parser="gemma4")
    assert [json.loads(c.function.arguments) for c in m.tool_calls] == [{"a": [1]}]
    assert m.content == "},b:2}" + GEMMA4_CLOSE + " tail"
    for text in (f"{GEMMA4_OPEN}hello{GEMMA4_CLOSE}", f"{GEMMA4_OPEN}call:f(x=1){GEMMA4_CLOSE}"):
        m = check_chunkings(text, tool_parser="gemma4")
        assert m.tool_calls == [] and m.content == text


def test_scalar_conversion() -> None:
    """Bare scalars: JSON numbers and literals as written, vLLM's null spellings, loose numbers, words as strings."""
    assert [gemma4_scalar(s) for s in ("42", "-0.5", "1e3", "true", "null", "None", "nil")] == [
        "42", "-0.5", "1e3", "true", "null", "null", "null"
    ]
    assert [gemma4_scalar(s) for s in ("+1", "1.", ".5", "007", "celsius", "True", " ")] == [
        "1", "1.0", "0.5", "7", '"celsius"', '"True"', None
    ]


def test_reasoning_and_tools_in_one_chunk() -> None:
    """Reasoning of a <think> protocol, content and a call arrive in one chunk and split correctly."""
    text = "plan</think>Sure." + call("f", f"{{q:{Q}x{Q}}}")
    m = check_chunkings(text, tool_parser="gemma4", reasoning_parser="olmo3")
    assert (m.reasoning_content, m.content) == ("plan", "Sure.")
    assert [json.loads(c.function.arguments) for c in m.tool_calls] == [{"q": "x"}]


def test_every_marker_boundary_in_tokens_mode() -> None:
    """In "tokens" mode (markers are atomic tokens), splitting at every marker boundary rebuilds the whole parse."""
    text = "Hi " + call("f", f"{{s:{Q}a b{Q},n:[1,{{k:{Q}v{Q}}}]}}") + call("g", "{}") + " bye"
    want = parse_complete(text, tool_parser="gemma4")
    cuts = sorted({i for m in (GEMMA4_OPEN, GEMMA4_CLOSE, Q) for i in _bounds(text, m)})
    chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True) if b > a]
    p = ResponseParser("gemma4", chunking="tokens")
    deltas = [d for c in chunks for d in p.feed(c)] + p.feed("", final=True)
    from deltaflow import accumulate
    from deltaflow.testing import message_key

    assert message_key(accumulate(deltas)) == message_key(want)


def _bounds(text: str, marker: str) -> list[int]:
    out = []
    i = text.find(marker)
    while i >= 0:
        out += [i, i + len(marker)]
        i = text.find(marker, i + 1)
    return out


def test_streaming_emits_string_text_before_the_value_ends() -> None:
    """A long string value streams as it arrives (only a possible partial marker is held)."""
    p = ResponseParser("gemma4")
    p.feed(f"{GEMMA4_OPEN}call:f{{q:{Q}")
    deltas = p.feed("hello wor")
    args = "".join(tc.function.arguments or "" for d in deltas for tc in d.tool_calls)
    assert args.endswith("hello wor")
    deltas = p.feed("ld<|")
    args = "".join(tc.function.arguments or "" for d in deltas for tc in d.tool_calls)
    assert args == "ld"
