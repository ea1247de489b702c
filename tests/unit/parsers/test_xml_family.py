"""XML-like, function-first dialects (qwen3_coder, glm45, glm47, minimax_m2, seed_oss, deepseek_v32) and their reasoning parsers."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from deltaflow import ResponseParser, accumulate, parse_complete
from deltaflow.items import Channel, ToolDelta
from deltaflow.parsers import DriverContext, registry
from deltaflow.parsers.drivers.xml_function import XmlFunctionDriver
from deltaflow.testing import check_chunkings, feed_chunks, load_tokenizer, message_key, split_at
from deltaflow.tools import normalize_tools

DIALECTS = ("qwen3_coder", "glm45", "glm47", "minimax_m2", "seed_oss", "deepseek_v32")


def tool(name: str, **props: Any) -> dict[str, Any]:
    """An OpenAI tool definition whose parameters have the given property schemas."""
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": props}}}


TOOLS = [
    tool("get_weather", city={"type": "string"}, days={"type": "integer"}, unit={"type": ["string", "null"]}),
    tool(
        "search",
        query={"type": "string"},
        limit={"anyOf": [{"type": "integer"}, {"type": "null"}]},
        exact={"type": "boolean"},
        filters={"type": "object"},
        ids={"type": "array"},
        ratio={"type": "number"},
    ),
    tool("get_time"),
]


def new_parser(dialect: str, tools: list[dict[str, Any]] | None = None) -> XmlFunctionDriver:
    """A parser for one block of ``dialect``."""
    counter = itertools.count()
    specs = normalize_tools(tools)
    ctx = DriverContext(
        channel=Channel.CONTENT,
        new_call=lambda: next(counter),
        tools={s.name: s for s in specs} if specs is not None else None,
        dialect=dialect,
    )
    parser = registry.get_tool_dialect(dialect).factory(ctx)
    assert isinstance(parser, XmlFunctionDriver)
    return parser


def calls(text: str, **kwargs: Any) -> list[tuple[str, Any]]:
    """(name, decoded arguments) of the calls in ``text``, checked on every chunking."""
    m = check_chunkings(text, **kwargs)
    return [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls]


# One realistic block per dialect: two parameters, one string and one integer.
BLOCKS = {
    "qwen3_coder": "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
    "glm45": "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
    "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
    "glm47": "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
    "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>",
    "minimax_m2": '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
    '<parameter name="days">3</parameter>\n</invoke>\n</minimax:tool_call>',
    "seed_oss": "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n"
    "<parameter=days>3</parameter>\n</function>\n</seed:tool_call>",
    "deepseek_v32": '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
    '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
    '<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n'
    "</｜DSML｜invoke>\n</｜DSML｜function_calls>",
}
WEATHER = ("get_weather", {"city": "Paris", "days": 3})

# -- the consumed-prefix contract ------------------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS)
def test_text_after_the_block_is_not_consumed(dialect: str) -> None:
    """feed_tool_block stops right after the block and returns the rest to the caller."""
    p = new_parser(dialect, TOOLS)
    text = BLOCKS[dialect] + " and more"
    out: list[object] = []
    end = p.feed_tool_block(text, out, False)
    assert p.done and text[end:] == " and more"
    events = [e for e in out if isinstance(e, ToolDelta)]
    assert "".join(e.raw for e in events) == BLOCKS[dialect]
    assert json.loads("".join(e.args for e in events)) == WEATHER[1]
    assert [e.name for e in events if e.name] == ["get_weather"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_unconsumed_tail_is_short_while_not_done(dialect: str) -> None:
    """Fed one character at a time, a block never leaves more than one tag unconsumed."""
    text = BLOCKS[dialect]
    p = new_parser(dialect, TOOLS)
    longest = max(len(m) for m in registry.get_tool_dialect(dialect).markers) + 1
    buf = ""
    for ch in text:
        buf += ch
        end = p.feed_tool_block(buf, [], False)
        buf = buf[end:]
        if p.done:
            break
        assert len(buf) <= longest, repr(buf)
    assert p.done and buf == ""


@pytest.mark.parametrize("dialect", ["minimax_m2", "deepseek_v32"])
def test_partial_closer_is_left_to_the_caller(dialect: str) -> None:
    """After a complete call, a partial block closer is not consumed; its rest completes the block."""
    p = new_parser(dialect)
    block = BLOCKS[dialect]
    cut = block.rindex("\n") + 4
    out: list[object] = []
    end = p.feed_tool_block(block[:cut], out, False)
    assert not p.done and block[:cut][end:].strip() == block[end:cut].strip()
    rest = block[:cut][end:] + block[cut:] + "tail"
    end2 = p.feed_tool_block(rest, out, False)
    assert p.done and rest[end2:] == "tail"


# -- each dialect ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """An output of one dialect and the message it must give."""

    label: str
    dialect: str
    text: str
    calls: list[tuple[str, Any]]
    content: str | None = None
    tools: list[dict[str, Any]] | None = None
    reasoning: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)


CASES = [
    # qwen3_coder (shared/dialects.md section 6)
    Case("qwen: realistic block", "qwen3_coder", BLOCKS["qwen3_coder"], [WEATHER], tools=TOOLS),
    Case("qwen: untyped values are strings", "qwen3_coder", BLOCKS["qwen3_coder"], [("get_weather", {"city": "Paris", "days": "3"})]),
    Case("qwen: inline values", "qwen3_coder", "<tool_call>\n<function=f>\n<parameter=a>x y</parameter>\n</function>\n</tool_call>", [("f", {"a": "x y"})]),
    Case(
        "qwen: one framing newline each side",
        "qwen3_coder",
        "<tool_call>\n<function=f>\n<parameter=a>\n\n  code\n\n</parameter>\n<parameter=b>\n\n</parameter>\n</function>\n</tool_call>",
        [("f", {"a": "\n  code\n", "b": ""})],
    ),
    Case(
        "qwen: two blocks",
        "qwen3_coder",
        "<tool_call>\n<function=f>\n</function>\n</tool_call>\n<tool_call>\n<function=g>\n<parameter=a>1</parameter>\n</function>\n</tool_call>",
        [("f", {}), ("g", {"a": "1"})],
    ),
    Case(
        "qwen: two functions in one block",
        "qwen3_coder",
        "<tool_call>\n<function=f>\n</function>\n<function=g>\n</function>\n</tool_call>",
        [("f", {}), ("g", {})],
    ),
    Case("qwen: no arguments", "qwen3_coder", "<tool_call>\n<function=get_time>\n</function>\n</tool_call>", [("get_time", {})], tools=TOOLS),
    Case(
        "qwen: missing </parameter>",
        "qwen3_coder",
        "<tool_call>\n<function=f>\n<parameter=a>\nx\n<parameter=b>\ny\n</function>\n</tool_call>",
        [("f", {"a": "x", "b": "y"})],
    ),
    Case(
        "qwen: missing </function> and </tool_call>",
        "qwen3_coder",
        "<tool_call>\n<function=f>\n<parameter=a>x</parameter>\n<tool_call>\n<function=g>\n</function>\n</tool_call>",
        [("f", {"a": "x"}), ("g", {})],
    ),
    Case(
        "qwen: bare <function= without <tool_call>",
        "qwen3_coder",
        "Let me call it.\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>\nDone.",
        [("f", {"a": "1"})],
        content="Let me call it.\n\nDone.",
    ),
    Case(
        "qwen: tags inside a value are text",
        "qwen3_coder",
        "<tool_call>\n<function=f>\n<parameter=a>\nDocument <tool_call> and <b>bold</b>\n</parameter>\n</function>\n</tool_call>",
        [("f", {"a": "Document <tool_call> and <b>bold</b>"})],
    ),
    Case("qwen: text after the block", "qwen3_coder", "Hi. <tool_call>\n<function=f>\n</function>\n</tool_call> Bye.", [("f", {})], content="Hi.  Bye."),
    Case(
        "qwen: schema types",
        "qwen3_coder",
        "<tool_call>\n<function=search>\n<parameter=query>\n42\n</parameter>\n<parameter=limit>\nNone\n</parameter>\n"
        "<parameter=exact>\nTrue\n</parameter>\n<parameter=filters>\n{\"a\": [1]}\n</parameter>\n<parameter=ids>\n[1, 2]\n</parameter>\n"
        "<parameter=ratio>\n5.0\n</parameter>\n<parameter=other>\n7\n</parameter>\n</function>\n</tool_call>",
        [("search", {"query": "42", "limit": None, "exact": True, "filters": {"a": [1]}, "ids": [1, 2], "ratio": 5.0, "other": "7"})],
        tools=TOOLS,
    ),
    Case(
        "qwen: duplicate keys kept in order",
        "qwen3_coder",
        "<tool_call>\n<function=f>\n<parameter=a>1</parameter>\n<parameter=a>2</parameter>\n</function>\n</tool_call>",
        [("f", {"a": "2"})],
    ),
    Case(
        "qwen: unknown name filtered",
        "qwen3_coder",
        "A<tool_call>\n<function=rm>\n<parameter=a>1</parameter>\n</function>\n</tool_call>B",
        [],
        content="A<tool_call>\n<function=rm>\n<parameter=a>1</parameter>\n</function>\n</tool_call>B",
        tools=TOOLS,
    ),
    Case(
        "qwen: name without '>' is prose",
        "qwen3_coder",
        "Use <tool_call>\n<function=name\nlater <tool_call>\n<function=f>\n</function>\n</tool_call>",
        [("f", {})],
        content="Use <tool_call>\n<function=name\nlater ",
    ),
    Case(
        "qwen: prose right after a function header is not a call",
        "qwen3_coder",
        "Use <tool_call>\n<function=name>\nWait, via <tool_call>:\n<tool_call>\n<function=f>\n</function>\n</tool_call>",
        [("f", {})],
        content="Use <tool_call>\n<function=name>\nWait, via <tool_call>:\n",
    ),
    Case("qwen: a header at the end is no call (its arguments never began)", "qwen3_coder", "<function=f>\n", [],
         content="<function=f>\n"),
    Case(
        "minimax: prose after an invoke header is not a call",
        "minimax_m2",
        'x <minimax:tool_call><invoke name="f"> is how</minimax:tool_call>',
        [],
        content='x <minimax:tool_call><invoke name="f"> is how</minimax:tool_call>',
    ),
    Case(
        "qwen: prose inside a function ends the call",
        "qwen3_coder",
        "<tool_call>\n<function=f>\n<parameter=a>x</parameter>\nWait, no.</function>",
        [("f", {"a": "x"})],
        content="\nWait, no.</function>",
    ),
    Case("qwen: cut inside a string value", "qwen3_coder", "<tool_call>\n<function=f>\n<parameter=a>\nhello wo", [("f", {"a": "hello wo"})]),
    Case(
        "qwen: cut inside a held number keeps it",
        "qwen3_coder",
        "<tool_call>\n<function=get_weather>\n<parameter=days>\n12",
        [("get_weather", {"days": 12})],
        tools=TOOLS,
    ),
    Case(
        "qwen: cut inside an object surfaces it",
        "qwen3_coder",
        '<tool_call>\n<function=search>\n<parameter=query>q</parameter>\n<parameter=filters>\n{"a": ',
        [("search", {"query": "q"})],
        content='\n<parameter=filters>\n{"a": ',
        tools=TOOLS,
    ),
    Case(
        "qwen: missing </function> before the next function",
        "qwen3_coder",
        "<tool_call>\n<function=f>\n<parameter=a>x</parameter>\n<function=g>\n</function>\n</tool_call>",
        [("f", {"a": "x"}), ("g", {})],
    ),
    Case(
        "qwen: a parameter without a key ends the call",
        "qwen3_coder",
        "<tool_call>\n<function=f>\n<parameter=a>x</parameter>\n<parameter=>y</parameter>\n</function>\n</tool_call>",
        [("f", {"a": "x"})],
        content="\n<parameter=>y</parameter>\n</function>\n</tool_call>",
    ),
    Case("qwen: an empty block is content", "qwen3_coder", "x<tool_call>\n</tool_call>y", [], content="x<tool_call>\n</tool_call>y"),
    Case("qwen: an opener cut short is content", "qwen3_coder", "x<tool_call>\n<func", [], content="x<tool_call>\n<func"),
    # GLM (section 7)
    Case("glm45: newline layout", "glm45", BLOCKS["glm45"], [WEATHER], tools=TOOLS),
    Case("glm47: compact layout", "glm47", BLOCKS["glm47"], [WEATHER], tools=TOOLS),
    Case("glm47: name alone", "glm47", "<tool_call>get_time</tool_call>", [("get_time", {})]),
    Case("glm45: name and newline", "glm45", "<tool_call>get_time\n</tool_call>", [("get_time", {})]),
    Case(
        "glm47: two blocks and text after",
        "glm47",
        "Checking.<tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value></tool_call><tool_call>g</tool_call> ok",
        [("f", {"a": "1"}), ("g", {})],
        content="Checking. ok",
    ),
    Case(
        "glm47: values verbatim",
        "glm47",
        "<tool_call>f<arg_key> a </arg_key><arg_value>  two\nlines  </arg_value></tool_call>",
        [("f", {"a": "  two\nlines  "})],
    ),
    Case("glm47: prose after <tool_call> is not a call", "glm47", "<tool_call>tool call data", [], content="<tool_call>tool call data"),
    Case("glm47: a name with a quote is not a call", "glm47", '<tool_call>get"x</tool_call>', [], content='<tool_call>get"x</tool_call>'),
    Case("glm47: a name cut short is not a call", "glm47", "<tool_call>get_ti", [], content="<tool_call>get_ti"),
    Case(
        "glm45: literal backslash-n separators and escaped JSON",
        "glm45",
        '<tool_call>search\\n<arg_key>ids</arg_key>\\n<arg_value>[{\\"id\\": 1}]</arg_value>\\n</tool_call>',
        [("search", {"ids": [{"id": 1}]})],
        tools=TOOLS,
    ),
    Case(
        "glm47: unknown name filtered",
        "glm47",
        "<tool_call>rm<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>",
        [],
        content="<tool_call>rm<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>",
        tools=TOOLS,
    ),
    Case(
        "glm47: missing </tool_call> before the next block",
        "glm47",
        "<tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value><tool_call>g</tool_call>",
        [("f", {"a": "1"}), ("g", {})],
    ),
    # MiniMax-M2 (section 10)
    Case("minimax: realistic block", "minimax_m2", BLOCKS["minimax_m2"], [WEATHER], tools=TOOLS),
    Case(
        "minimax: several invokes, one filtered",
        "minimax_m2",
        '<minimax:tool_call><invoke name="rm"><parameter name="p">x</parameter></invoke>'
        '<invoke name="get_time"></invoke></minimax:tool_call>',
        [("get_time", {})],
        content='<minimax:tool_call><invoke name="rm"><parameter name="p">x</parameter></invoke>',
        tools=TOOLS,
    ),
    Case(
        "minimax: whitespace verbatim",
        "minimax_m2",
        '<minimax:tool_call><invoke name="f"><parameter name="m">\n hi \n</parameter></invoke></minimax:tool_call>',
        [("f", {"m": "\n hi \n"})],
    ),
    Case(
        "minimax: missing block closer",
        "minimax_m2",
        'Text<minimax:tool_call><invoke name="f"><parameter name="a">1</parameter></invoke> after',
        [("f", {"a": "1"})],
        content="Text after",
    ),
    Case(
        "minimax: nameless invoke is content",
        "minimax_m2",
        "<minimax:tool_call><invoke>x</invoke></minimax:tool_call>",
        [],
        content="<minimax:tool_call><invoke>x</invoke></minimax:tool_call>",
    ),
    # Seed-OSS (section 12)
    Case("seed: realistic block", "seed_oss", BLOCKS["seed_oss"], [WEATHER], tools=TOOLS),
    Case(
        "seed: inline value keeps its trailing newline; own-line value loses its framing",
        "seed_oss",
        "<seed:tool_call>\n<function=f>\n<parameter=a>x\n</parameter>\n<parameter=b>\ny\n</parameter>\n</function>\n</seed:tool_call>",
        [("f", {"a": "x\n", "b": "y"})],
    ),
    # DeepSeek-V3.2 DSML (section 8c)
    Case("dsml: realistic block", "deepseek_v32", BLOCKS["deepseek_v32"], [WEATHER], tools=TOOLS),
    Case("dsml: string=false is JSON without a schema", "deepseek_v32", BLOCKS["deepseek_v32"], [WEATHER]),
    Case(
        "dsml: the schema wins over the attribute",
        "deepseek_v32",
        '<｜DSML｜invoke name="get_weather"><｜DSML｜parameter name="days" string="true">4</｜DSML｜parameter>'
        '<｜DSML｜parameter name="city" string="false">null</｜DSML｜parameter></｜DSML｜invoke>',
        [("get_weather", {"days": 4, "city": "null"})],
        tools=TOOLS,
    ),
    Case(
        "dsml: bare invokes, missing invoke closer",
        "deepseek_v32",
        'Sure.\n<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="k" string="true">v</｜DSML｜parameter>\n</｜DSML｜function_calls>',
        [("f", {"k": "v"})],
        content="Sure.\n",
    ),
    Case(
        "dsml: JSON body",
        "deepseek_v32",
        '<｜DSML｜function_calls>\n<｜DSML｜invoke name="f">\n{"a": [1, "x"]}\n</｜DSML｜invoke>\n</｜DSML｜function_calls>',
        [("f", {"a": [1, "x"]})],
    ),
    Case(
        "dsml: invalid JSON body",
        "deepseek_v32",
        '<｜DSML｜function_calls><｜DSML｜invoke name="f">{"a": 1 oops}</｜DSML｜invoke></｜DSML｜function_calls>',
        [("f", {"a": 1})],
        content="oops}</｜DSML｜invoke></｜DSML｜function_calls>",
    ),
    Case(
        "dsml: a lone wrapper parameter is unwrapped",
        "deepseek_v32",
        '<｜DSML｜function_calls><｜DSML｜invoke name="get_weather"><｜DSML｜parameter name="arguments" string="false">'
        '{"city": "Oslo"}</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜function_calls>',
        [("get_weather", {"city": "Oslo"})],
        tools=TOOLS,
    ),
    Case(
        "dsml: a wrapper with other parameters is a parameter",
        "deepseek_v32",
        '<｜DSML｜invoke name="get_weather"><｜DSML｜parameter name="input" string="true">{"city": "Oslo"}</｜DSML｜parameter>'
        '<｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter></｜DSML｜invoke>',
        [("get_weather", {"input": '{"city": "Oslo"}', "days": 2})],
        tools=TOOLS,
    ),
    Case(
        "dsml: a wrapper of unknown keys is a parameter",
        "deepseek_v32",
        '<｜DSML｜invoke name="get_weather"><｜DSML｜parameter name="input" string="false">{"town": "Oslo"}</｜DSML｜parameter></｜DSML｜invoke>',
        [("get_weather", {"input": {"town": "Oslo"}})],
        tools=TOOLS,
    ),
    Case(
        "dsml: an empty wrapper is a parameter",
        "deepseek_v32",
        '<｜DSML｜invoke name="get_weather"><｜DSML｜parameter name="input" string="false">{}</｜DSML｜parameter></｜DSML｜invoke>',
        [("get_weather", {"input": {}})],
        tools=TOOLS,
    ),
    Case(
        "dsml: a wrapper holding an array is a parameter",
        "deepseek_v32",
        '<｜DSML｜invoke name="get_weather"><｜DSML｜parameter name="arguments" string="false">[1]</｜DSML｜parameter></｜DSML｜invoke>',
        [("get_weather", {"arguments": [1]})],
        tools=TOOLS,
    ),
    Case(
        "dsml: JSON body with escapes",
        "deepseek_v32",
        '<｜DSML｜invoke name="f">{"a": "x\\n\\u00e9", "b": [true, null]}</｜DSML｜invoke>',
        [("f", {"a": "x\né", "b": [True, None]})],
    ),
    Case(
        "dsml: a wrapper cut short is surfaced",
        "deepseek_v32",
        '<｜DSML｜invoke name="get_weather"><｜DSML｜parameter name="arguments" string="false">{"city": "Os',
        [],  # no argument was emitted before the cut: no call, all of it is content
        content='<｜DSML｜invoke name="get_weather"><｜DSML｜parameter name="arguments" string="false">{"city": "Os',
        tools=TOOLS,
    ),
    Case(
        "dsml: a JSON body cut short is closed",
        "deepseek_v32",
        '<｜DSML｜invoke name="f">{"a": [1, "x',
        [("f", {"a": [1, "x"]})],
    ),
    Case(
        "dsml: a parameter after a JSON body ends the call",
        "deepseek_v32",
        '<｜DSML｜invoke name="f">{"a": 1}<｜DSML｜parameter name="b" string="true">2</｜DSML｜parameter></｜DSML｜invoke>',
        [("f", {"a": 1})],
        content='<｜DSML｜parameter name="b" string="true">2</｜DSML｜parameter></｜DSML｜invoke>',
    ),
    Case("dsml: a partial marker that is not one is content", "deepseek_v32", "<｜DSM some regular text", [], content="<｜DSM some regular text"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.label for c in CASES])
def test_dialect_cases(case: Case) -> None:
    """Each output gives its calls, content and reasoning, whole and on every chunking."""
    m = check_chunkings(case.text, tool_parser=case.dialect, tools=case.tools, **case.kwargs)
    assert [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls] == case.calls
    assert m.content == case.content
    assert m.reasoning_content == case.reasoning


# -- reasoning and tools in one chunk ----------------------------------------------------------

REASONING = {
    "qwen3_coder": ("qwen3", "thinking</think>\n\n", None),
    "glm45": ("glm45", "<think>thinking</think>", None),
    "glm47": ("glm45", "thinking", None),  # GLM-4.7: <tool_call> ends reasoning without </think>
    "minimax_m2": ("minimax_m2", "thinking</think>\n\n", None),
    "seed_oss": ("seed_oss", "<seed:think>thinking</seed:think>\n", None),
    "deepseek_v32": ("deepseek_v3", "thinking</think>\n\n", True),
}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_reasoning_and_tools_in_one_chunk(dialect: str) -> None:
    """Reasoning, its end and a whole block in a single chunk split into reasoning and the call."""
    parser, head, thinking = REASONING[dialect]
    text = head + BLOCKS[dialect]
    kwargs: dict[str, Any] = {"tool_parser": dialect, "reasoning_parser": parser, "tools": TOOLS, "enable_thinking": thinking}
    m = accumulate(feed_chunks([text], **kwargs))
    assert (m.reasoning_content or "").strip() == "thinking"
    assert [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls] == [WEATHER]
    assert (m.content or "").strip() == ""
    assert message_key(m) == message_key(check_chunkings(text, **kwargs))


# -- streaming behaviour ---------------------------------------------------------------------


def arg_deltas(chunks: list[str], **kwargs: Any) -> list[str]:
    """The argument fragment each chunk produced ("" when none)."""
    p = ResponseParser(**kwargs)
    out = []
    for i, c in enumerate(chunks):
        deltas = p.feed(c, final=i == len(chunks) - 1)
        out.append("".join(tc.function.arguments or "" for d in deltas for tc in d.tool_calls))
    return out


def test_string_value_streams_before_its_close_tag() -> None:
    """A string value is emitted as it arrives, JSON-escaped, before its close tag."""
    chunks = ["<tool_call>\n<function=f>\n<parameter=code>\nprint(\"a\")", "\nx = 1", "\n</param", "eter>\n</function>\n</tool_call>"]
    frags = arg_deltas(chunks, tool_parser="qwen3_coder")
    # The last newline before "</param" is held (it may frame the close tag), then dropped.
    assert frags == ['{"code": "print(\\"a\\")', "\\nx = 1", "", '"}']


def test_typed_value_is_held_until_its_end_tag() -> None:
    """A value that may be a number is held until its end tag, then emitted converted."""
    chunks = ['<minimax:tool_call><invoke name="get_weather"><parameter name="days">1', "2", "</parameter></invoke>"]
    frags = arg_deltas(chunks, tool_parser="minimax_m2", tools=TOOLS)
    assert frags == ["", "", '{"days": 12}']


def test_value_that_cannot_be_typed_streams_from_its_first_character() -> None:
    """Once a held value can no longer be typed, it streams as a string from its start."""
    chunks = ["<tool_call>get_weather<arg_key>days</arg_key><arg_value>1", "2 days", " later</arg_value></tool_call>"]
    frags = arg_deltas(chunks, tool_parser="glm47", tools=TOOLS)
    assert frags == ["", '{"days": "12 days', ' later"}']


def test_names_come_first_and_once() -> None:
    """Each call's first delta names it; argument fragments follow; indexes are dense."""
    text = BLOCKS["minimax_m2"].replace("</invoke>", '</invoke><invoke name="get_time"></invoke>')
    deltas = feed_chunks(list(text), tool_parser="minimax_m2", tools=TOOLS)
    named = [(tc.index, tc.function.name) for d in deltas for tc in d.tool_calls if tc.function.name]
    assert named == [(0, "get_weather"), (1, "get_time")]


def test_malformed_payload_on_the_final_chunk() -> None:
    """A malformed block arriving with final=True closes the named call and surfaces the rest."""
    p = ResponseParser("qwen3_coder")
    deltas = p.feed("ok <tool_call>\n<function=f>\n") + p.feed("<parameter=a>1</parameter>\noops", final=True)
    m = accumulate(deltas)
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [("f", '{"a": "1"}')]
    assert m.content == "ok \noops"


# -- reasoning parsers -------------------------------------------------------------------------


@dataclass(frozen=True)
class Think:
    """A reasoning-parser case without a tool parser."""

    label: str
    parser: str
    text: str
    reasoning: str | None
    content: str | None
    enable_thinking: bool | None = None


THINKS = [
    Think("glm45 starts inside reasoning", "glm45", "a</think>b", "a", "b"),
    Think("glm45 consumes a leading <think>", "glm45", "\n<think>a</think>b", "\na", "b"),
    Think("glm45: <tool_call> ends reasoning", "glm45", "<think>a<tool_call>x", "a", "<tool_call>x"),
    Think("glm45 disabled", "glm45", "a</think>b", None, "a</think>b", False),
    Think("minimax_m2 starts inside reasoning", "minimax_m2", "a</think>\n\nb", "a", "\n\nb"),
    Think("seed_oss", "seed_oss", "<seed:think>a</seed:think>b", "a", "b"),
    Think("seed_oss without its opener", "seed_oss", "a</seed:think>b", "a", "b"),
    Think("deepseek_v3 is off by default", "deepseek_v3", "a</think>b", None, "a</think>b"),
    Think("deepseek_v3 with thinking", "deepseek_v3", "a</think>b", "a", "b", True),
]


@pytest.mark.parametrize("case", THINKS, ids=[c.label for c in THINKS])
def test_reasoning_parsers(case: Think) -> None:
    """Each reasoning parser splits reasoning and content as its family's models write them."""
    m = check_chunkings(case.text, reasoning_parser=case.parser, enable_thinking=case.enable_thinking)
    assert (m.reasoning_content, m.content) == (case.reasoning, case.content)


def test_turn_markers_are_declared() -> None:
    """Every reasoning parser of the family declares its turn-boundary tokens."""
    for name in ("glm45", "minimax_m2", "seed_oss", "deepseek_v3"):
        assert registry.get_reasoning_dialect(name).turn_markers, name


# -- token boundaries, checked against the real tokenizers ------------------------------------

CONTEXTS = ("", "text", "text ", "text.", "text\n", "a\n\n", "。", "😀", "}", ">", " ", "x:", '"', "<", "\n\n\n")


def boundary_prefixes(tok: Any, marker: str, tails: tuple[str, ...]) -> set[str]:
    """The proper prefixes of ``marker`` that a token boundary leaves, over many surrounding texts."""
    found: set[str] = set()
    for before in CONTEXTS:
        for after in tails:
            enc = tok.encode(before + marker + after, add_special_tokens=False)
            start, end = len(before), len(before) + len(marker)
            found.update(marker[: b - start] for _, b in enc.offsets if start < b < end)
    return found


@pytest.mark.shared
def test_qwen3_coder_token_prefixes(shared: Path) -> None:
    """qwen3: <tool_call> is one token, <function= splits into "<" "function" "=..."; the declared prefixes match."""
    tok = load_tokenizer("qwen3")
    dialect = registry.get_tool_dialect("qwen3_coder")
    assert "qwen3" in dialect.tokenizers
    assert tok.token_to_id("<tool_call>") is not None and tok.token_to_id("</tool_call>") is not None
    found = boundary_prefixes(tok, "<tool_call>", ("\n", "x")) | boundary_prefixes(
        tok, "<function=", ("get_weather>", "1x>", "_x>", "Read>", " x>", "=x>", "\n")
    )
    assert found == set(dialect.token_prefixes)


@pytest.mark.shared
def test_dsml_token_prefixes(shared: Path) -> None:
    """deepseek-v3.1: DSML is text (｜ is a byte-level token); <think>/</think> are single tokens."""
    tok = load_tokenizer("deepseek-v3.1")
    dialect = registry.get_tool_dialect("deepseek_v32")
    assert "deepseek-v3.1" in dialect.tokenizers
    found = boundary_prefixes(tok, "<｜DSML｜function_calls>", ("\n", "x", ">", "\n\n")) | boundary_prefixes(
        tok, "<｜DSML｜invoke", (' name="x">', "name", "\n", ">", "think", "b")
    )
    assert found <= set(dialect.token_prefixes)
    assert all(any(o.startswith(p) and o != p for o in dialect.openers) for p in dialect.token_prefixes)
    assert {"<｜DSML｜inv", "<｜DSML｜invok", "<｜DSML｜function_c"} <= found
    spec = registry.get_reasoning_dialect("deepseek_v3")
    assert spec.tokenizers == ("deepseek-v3.1",) and spec.token_prefixes == ()
    assert all(tok.token_to_id(m) is not None for m in (spec.start, spec.end, *spec.turn_markers))


@pytest.mark.shared
@pytest.mark.parametrize(
    "family, tool_parsers, reasoning_parser",
    [("glm-4.5", ("glm45", "glm47"), "glm45"), ("minimax-m2", ("minimax_m2",), "minimax_m2")],
)
def test_special_token_families(shared: Path, family: str, tool_parsers: tuple[str, ...], reasoning_parser: str) -> None:
    """Without a vocabulary, special_tokens.json shows the openers and reasoning markers are single tokens (no prefixes)."""
    listed = {t["content"] for t in json.loads((shared / "tokenizers" / family / "special_tokens.json").read_text())["tokens"]}
    for name in tool_parsers:
        dialect = registry.get_tool_dialect(name)
        assert set(dialect.openers) <= listed and dialect.token_prefixes == ()
        assert dialect.tokenizers == (family,)
    spec = registry.get_reasoning_dialect(reasoning_parser)
    assert {spec.start, spec.end, *spec.implicit_end, *spec.turn_markers} <= listed
    assert spec.token_prefixes == ()
    if family == "glm-4.5":  # every GLM tool tag is a special token too
        assert set(registry.get_tool_dialect("glm47").markers) <= listed


def token_chunks(tok: Any, text: str) -> list[str]:
    """Decode ``text``'s tokens one at a time as an engine would (special tokens kept)."""
    from tokenizers.decoders import DecodeStream

    ds = DecodeStream(skip_special_tokens=False)
    chunks = [ds.step(tok, i) for i in tok.encode(text, add_special_tokens=False).ids]
    out = [c for c in chunks if c]
    assert "".join(out) == text
    return out


STREAMED = [
    (
        "qwen3",
        "I should check.\n</think>\n\nLet me look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York, NY\n"
        "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=search>\n"
        '<parameter=filters>\n{"a": [1, 2]}\n</parameter>\n<parameter=query>\nprint("<b>")\n</parameter>\n</function>\n</tool_call>',
        {"tool_parser": "qwen3_coder", "reasoning_parser": "qwen3", "tools": TOOLS},
    ),
    (
        "deepseek-v3.1",
        "Let me check the weather</think>\n\nSure.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
        '<｜DSML｜parameter name="city" string="true">東京, 日本</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
        '<｜DSML｜invoke name="get_time">\n</｜DSML｜invoke>\n</｜DSML｜function_calls>',
        {"tool_parser": "deepseek_v32", "reasoning_parser": "deepseek_v3", "tools": TOOLS, "enable_thinking": True},
    ),
]


@pytest.mark.shared
@pytest.mark.parametrize("family, text, kwargs", STREAMED, ids=[s[0] for s in STREAMED])
def test_token_by_token_stream(shared: Path, family: str, text: str, kwargs: dict[str, Any]) -> None:
    """A realistic output decoded token by token and parsed with chunking="tokens" equals parse_complete."""
    tok = load_tokenizer(family)
    chunks = token_chunks(tok, text)
    want = parse_complete(text, **kwargs)
    assert len(want.tool_calls) == 2
    got = accumulate(feed_chunks(chunks, chunking="tokens", **kwargs))
    assert message_key(got) == message_key(want)
    # Every single token boundary as a two-way split, too.
    cuts = list(itertools.accumulate(len(c) for c in chunks))[:-1]
    for cut in cuts:
        two = accumulate(feed_chunks(split_at(text, [cut]), chunking="tokens", **kwargs))
        assert message_key(two) == message_key(want), cut
