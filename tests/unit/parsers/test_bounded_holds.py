"""Bounded holds inside tool blocks: long blank runs, over-long names, long blank typed values.

Each shape is checked on every chunking (whole, per character, random splits): the
bound must never make the result depend on where chunks ended.
"""

from __future__ import annotations

import json

import pytest

from deltaflow.parsers.base import BLANK_RUN_MAX
from deltaflow.testing import check_chunkings

TOOLS = [
    {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "a": {"type": "integer"}, "o": {"type": "object"}, "s": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "g", "parameters": {"type": "object"}}},
]

RUNS = [BLANK_RUN_MAX - 1, BLANK_RUN_MAX, BLANK_RUN_MAX + 1, 3 * BLANK_RUN_MAX]


def _blank(n: int) -> str:
    return (" \n\t" * n)[:n]


@pytest.mark.parametrize("n", RUNS)
@pytest.mark.parametrize(
    "tool_parser,template",
    [
        ("pythonic", "[f({b}a=1,{b}s='x'{b}){b},{b}g(){b}]"),
        ("pythonic", "[f(a=1,{b}5)] tail"),  # a positional argument after a long run: malformed there
        ("pythonic", "[h(a=1{b}), f(a=2)]"),  # h is not offered: its raw text (blanks too) is surfaced
        ("qwen3_coder", "<tool_call>\n<function=f>{b}<parameter=a>\n1\n</parameter>{b}</function>{b}</tool_call>"),
        ("qwen3_coder", "<tool_call>\n<function=h>{b}<parameter=a>\n1\n</parameter>{b}</function>\n</tool_call>"),
        ("qwen3_coder", "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>{b}junk</tool_call>"),
        ("glm47", "<tool_call>f<arg_key>a</arg_key>{b}<arg_value>1</arg_value>{b}</tool_call>"),
        ("glm47", "<tool_call>h<arg_key>a</arg_key>{b}<arg_value>1</arg_value>{b}</tool_call>"),
        ("minimax_m2", '<minimax:tool_call>\n<invoke name="f">{b}<parameter name="a">1</parameter>{b}</invoke>'
                       '{b}<invoke name="g">{b}</invoke>\n</minimax:tool_call>'),
    ],
)
def test_long_blank_runs_give_the_same_result_on_every_chunking(tool_parser: str, template: str, n: int) -> None:
    """A blank run around the bound inside a named call gives the same message on every chunking."""
    m = check_chunkings(template.format(b=_blank(n)), tool_parser=tool_parser, tools=TOOLS, seeds=range(3))
    for c in m.tool_calls:
        assert isinstance(json.loads(c.function.arguments), dict)


@pytest.mark.parametrize("n", [1, 20, BLANK_RUN_MAX + 40])
def test_long_blank_typed_value_converts_the_same_on_every_chunking(n: int) -> None:
    """A typed XML value that starts with a long blank run is still converted whole (or surfaced) alike."""
    for value in (_blank(n) + "7", _blank(n), _blank(n) + "{}", _blank(n) + "x"):
        text = f"<tool_call>\n<function=f>\n<parameter=a>\n{value}\n</parameter>\n</function>\n</tool_call>"
        check_chunkings(text, tool_parser="qwen3_coder", tools=TOOLS, seeds=range(2))


@pytest.mark.parametrize("extra", [50, 52, 53, 54, 60, 64, 65, 100, 600])
@pytest.mark.parametrize(
    "tool_parser,template",
    [
        ("qwen3_coder", "<tool_call>\n<function={0}>\n<parameter=a>\n1\n</parameter>\n</function>\n"
                        "<function=f>\n</function>\n</tool_call>after"),
        ("minimax_m2", '<minimax:tool_call>\n<invoke name="{0}">\n</invoke>\n<invoke name="f">\n</invoke>\n'
                       "</minimax:tool_call>after"),
    ],
)
def test_header_longer_than_offered_names_is_no_call(tool_parser: str, template: str, extra: int) -> None:
    """Around the offered-name bound, a long function header is surfaced alike on every chunking."""
    name = "g" + "v" * extra
    m = check_chunkings(template.format(name), tool_parser=tool_parser, tools=TOOLS, seeds=range(2))
    assert [c.function.name for c in m.tool_calls] == ["f"]
    assert m.content is not None and name in m.content and m.content.endswith("after")


@pytest.mark.parametrize("blanks", [5, 256, 257, 1000])
@pytest.mark.parametrize(
    "tool_parser,head,tail",
    [
        ("qwen3_coder", "<tool_call>\n<function=search>", "<parameter=q>\nx\n</parameter>\n</function>\n</tool_call>"),
        ("minimax_m2", '<minimax:tool_call>\n<invoke name="search">\n</invoke>',
         '<invoke name="search">\n</invoke>\n</minimax:tool_call>'),
    ],
    ids=["after-header", "after-call"],
)
def test_blank_runs_outside_values_are_bounded_and_split_independent(
    tool_parser: str, head: str, tail: str, blanks: int
) -> None:
    """Up to 256 blanks after a header or a call change nothing; a longer run ends the call or block, on every split."""
    tools = [{"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]
    m = check_chunkings(head + " " * blanks + tail, tool_parser=tool_parser, tools=tools)
    n_calls = len(m.tool_calls)
    if blanks <= 256:
        assert n_calls == (1 if tool_parser == "qwen3_coder" else 2)
    else:
        assert n_calls == (0 if tool_parser == "qwen3_coder" else 1)
        assert m.content is not None and " " * blanks in m.content


@pytest.mark.parametrize("blanks", [3, 256, 257, 2000])
def test_blanks_between_blocks_are_the_gap_up_to_the_limit_then_content(blanks: int) -> None:
    """Up to 256 blanks between two blocks are the next call's raw text; a longer run is content, on every split."""
    block = '<tool_call>\n{"name": "search", "arguments": {"q": "x"}}\n</tool_call>'
    m = check_chunkings(block + " " * blanks + block, tool_parser="hermes")
    assert len(m.tool_calls) == 2
    assert (m.content or "") == ("" if blanks <= 256 else " " * blanks)
