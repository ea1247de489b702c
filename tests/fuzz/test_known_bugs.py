"""Minimal reproductions of bugs the fuzz suite found: fixed ones are regression tests.

An open one is a strict xfail (it flips to a failure once fixed); the
generators in ``grammar.py`` leave its inputs out unless
``DELTAFLOW_FUZZ_KNOWN_BUGS=1``.
"""

from __future__ import annotations

import json

import pytest

from deltaflow import parse_complete
from deltaflow.testing import check_chunkings, feed_chunks

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def _both(text: str, **kw):  # type: ignore[no-untyped-def]
    feed_chunks(list(text), **kw)
    return parse_complete(text, **kw)


@pytest.mark.parametrize(
    "tool_parser,text",
    [
        ("hermes", '<tool_call>{"name": "f\\ud800", "arguments": {}}</tool_call>'),
        ("hermes", '<tool_call>{"\\ud800": 1, "name": "f", "arguments": {}}</tool_call>'),
        ("llama3_json", '<|python_tag|>{"name": "f", "parameters": {{"\\ud800": 1}}'),
        ("mistral", '[TOOL_CALLS][{"name": "f\\ud800", "arguments": {}}]'),
    ],
)
def test_escaped_lone_surrogate_in_envelope_key_or_name(tool_parser: str, text: str) -> None:
    """An escaped lone surrogate in a key or name parses without error (a surrogate name is no call)."""
    m = _both(text, tool_parser=tool_parser, tools=TOOLS)
    for c in m.tool_calls:
        assert isinstance(json.loads(c.function.arguments), dict)


@pytest.mark.parametrize(
    "tool_parser,text",
    [
        ("glm47", "<tool_call>f<arg_key>a</arg_key><arg_value>\ud800</arg_value></tool_call>"),
        ("qwen3_coder", "<tool_call>\n<function=f>\n<parameter=a>\n\ud800\n</parameter>\n</function>\n</tool_call>"),
        ("minimax_m2", '<minimax:tool_call><invoke name="f"><parameter name="a">\ud800</parameter></invoke></minimax:tool_call>'),
        ("hermes", '<tool_call>{"name": "f\ud800", "arguments": {}}</tool_call>'),
        ("internlm", '<|action_start|><|plugin|>{"\ud800name": "f", "parameters": {}}<|action_end|>'),
    ],
)
def test_raw_lone_surrogate_in_value_key_or_name(tool_parser: str, text: str) -> None:
    """A raw lone surrogate in a value, key or name parses without error; arguments stay JSON."""
    m = _both(text, tool_parser=tool_parser, tools=TOOLS)
    for c in m.tool_calls:
        assert isinstance(json.loads(c.function.arguments), dict)


def test_bug3_harmony_long_header_part_loses_markers() -> None:
    """A Harmony header part over 256 characters is surfaced verbatim with the rest of its message."""
    text = "<|start|>assistant" + "x" * 300 + "<|channel|>final<|message|>hi<|end|>"
    m = _both(text, tool_parser="openai", tools=TOOLS)
    # Surfaced verbatim, or routed as a final message: either way no marker text vanishes half-way.
    assert m.content in (text, "hi"), m.content


@pytest.mark.parametrize(
    "text",
    [
        "<|channel|>commentary to=functions." + "x" * 300 + " <|constrain|>json<|message|>{\"a\": 1}<|call|>",
        " to=functions." + "x" * 300 + "<|channel|>commentary json<|message|>{}<|call|>",
    ],
)
def test_bug3_overlong_call_header_is_surfaced_whole_and_the_next_message_routed(text: str) -> None:
    """A call whose header part is over-long is surfaced whole; the message after it is still a call."""
    nxt = "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>"
    m = check_chunkings(text + nxt, tool_parser="openai", tools=TOOLS)
    assert m.content == text
    assert [c.function.name for c in m.tool_calls] == ["f"]


@pytest.mark.parametrize(
    "tool_parser,head",
    [("hermes", '<tool_call>{"name":"f","arguments":{"a":"A'), ("mistral", '[TOOL_CALLS]f[ARGS]{"a":"A')],
)
def test_output_ending_right_after_an_escape_streams_as_complete(tool_parser: str, head: str) -> None:
    """An output that ends right after an escape inside an arguments string gives the same result streamed."""
    from deltaflow import accumulate
    from deltaflow.testing import message_key

    chunks = [head, '\\"']
    streamed = message_key(accumulate(feed_chunks(chunks, tool_parser=tool_parser, tools=TOOLS)))
    assert streamed == message_key(parse_complete("".join(chunks), tool_parser=tool_parser, tools=TOOLS))


def test_bug5_overlong_name_in_a_shared_block_hides_the_calls_after_it() -> None:
    """After an over-long, not offered name, the next invoke of the same block is still a call."""
    tools = [{"name": "get_weather", "parameters": {"type": "object"}}]
    long = "u" + "v" * 3000
    text = (
        '<minimax:tool_call>\n<invoke name="' + long + '">\n</invoke>\n'
        '<invoke name="get_weather">\n</invoke>\n</minimax:tool_call>'
    )
    m = _both(text, tool_parser="minimax_m2", tools=tools)
    assert [c.function.name for c in m.tool_calls] == ["get_weather"]



@pytest.mark.parametrize("n", [300, 3000])
@pytest.mark.parametrize(
    "tool_parser,text,content",
    [
        (
            "minimax_m2",
            '<minimax:tool_call>\n<invoke name="{0}">\n<parameter name="a">1</parameter></invoke>\n'
            '<invoke name="get_weather">\n</invoke>\n</minimax:tool_call>bye',
            '<minimax:tool_call>\n<invoke name="{0}">\n<parameter name="a">1</parameter></invoke>bye',
        ),
        (
            "minimax_m2",
            '<minimax:tool_call>\n<invoke name="get_weather">\n</invoke>\n'
            '<invoke name="{0}">\n<parameter name="a">1</parameter></invoke>\n</minimax:tool_call>bye',
            '\n<invoke name="{0}">\n<parameter name="a">1</parameter></invoke>\n</minimax:tool_call>bye',
        ),
        (
            "qwen3_coder",
            "<tool_call>\n<function={0}>\n<parameter=a>\n1\n</parameter>\n</function>\n"
            "<function=get_weather>\n</function>\n</tool_call>bye",
            "<tool_call>\n<function={0}>\n<parameter=a>\n1\n</parameter>\n</function>bye",
        ),
        (
            "deepseek_v32",
            '<｜DSML｜function_calls>\n<｜DSML｜invoke name="{0}">\n</｜DSML｜invoke>\n'
            '<｜DSML｜invoke name="get_weather">\n</｜DSML｜invoke>\n</｜DSML｜function_calls>',
            '<｜DSML｜function_calls>\n<｜DSML｜invoke name="{0}">\n</｜DSML｜invoke>',
        ),
    ],
    ids=["minimax-first", "minimax-last", "qwen3_coder", "dsml"],
)
def test_bug5_overlong_name_is_surfaced_and_the_block_goes_on(tool_parser: str, text: str, content: str, n: int) -> None:
    """A call with an over-long name is surfaced as text, in order, and the block's other calls stay calls."""
    tools = [{"name": "get_weather", "parameters": {"type": "object"}}]
    long = "u" + "v" * n
    m = check_chunkings(text.format(long), tool_parser=tool_parser, tools=tools)
    assert [c.function.name for c in m.tool_calls] == ["get_weather"]
    assert m.content == content.format(long)
