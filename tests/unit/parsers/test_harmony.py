"""gpt-oss Harmony (tool parser ``openai``, reasoning parser ``openai_gptoss``): channel routing, calls, tokens."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import deltaflow
from deltaflow import ResponseParser, accumulate, parse_complete
from deltaflow.items import CallDelta, Channel, ChannelText, ChunkEnd, ToolDelta
from deltaflow.parsers import DriverContext, registry
from deltaflow.parsers.drivers.harmony import MARKERS, HarmonyCallDriver, HarmonyRouter
from deltaflow.stages.detokenize import make_decoder
from deltaflow.stages.router import ChannelRouter, HarmonyOrStripped, router_factory
from deltaflow.testing import check_chunkings, feed_chunks, message_key, split_at

GPTOSS: dict[str, Any] = {"tool_parser": "openai", "reasoning_parser": "openai_gptoss"}
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]
MARKER_IDS = {
    "<|start|>": 200006,
    "<|channel|>": 200005,
    "<|message|>": 200008,
    "<|constrain|>": 200003,
    "<|end|>": 200007,
    "<|call|>": 200012,
    "<|return|>": 200002,
}

ANALYSIS = "<|channel|>analysis<|message|>"
CALL_WEATHER = "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"


@dataclass(frozen=True)
class Case:
    """A Harmony output, the parser options, and the message it must give on every chunking."""

    label: str
    text: str
    content: str | None = None
    reasoning: str | None = None
    calls: list[tuple[str, str]] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=lambda: dict(GPTOSS))


def check(case: Case) -> None:
    """Assert the case on every chunking (whole, per character, random)."""
    m = check_chunkings(case.text, **case.options)
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == case.calls
    assert m.content == case.content
    assert m.reasoning_content == case.reasoning


ROUTING = [
    Case(
        "analysis then call (harmony docs)",
        ANALYSIS + "Need weather for Paris.<|end|>" + CALL_WEATHER + '{"city":"Paris"}<|call|>',
        reasoning="Need weather for Paris.",
        calls=[("get_weather", '{"city":"Paris"}')],
    ),
    Case(
        "analysis then final",
        ANALYSIS + "Simple.<|end|><|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>",
        content="2 + 2 = 4.",
        reasoning="Simple.",
    ),
    Case("final cut short", "<|channel|>final<|message|>I'm in the middle", content="I'm in the middle"),
    Case("analysis cut short", ANALYSIS + "thinking", reasoning="thinking"),
    Case(
        "preamble then final are joined by a newline",
        "<|channel|>commentary<|message|>Let me look.<|end|><|start|>assistant<|channel|>final<|message|>42.<|end|>",
        content="Let me look.\n42.",
    ),
    Case(
        "two analysis messages are joined as written",
        ANALYSIS + "first <|end|><|start|>assistant" + ANALYSIS + "second<|end|>",
        reasoning="first second",
    ),
    Case(
        "whitespace is kept",
        ANALYSIS + "  spaced  <|end|><|start|>assistant<|channel|>final<|message|>\n answer \n",
        content="\n answer \n",
        reasoning="  spaced  ",
    ),
    Case(
        "recipient in the role part (HF template, json without constrain)",
        ANALYSIS + "a<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
        '{"city": "SF"}<|call|>',
        reasoning="a",
        calls=[("get_weather", '{"city": "SF"}')],
    ),
    Case(
        "output starting in the role part",
        ' to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{"a": 1}',
        calls=[("get_weather", '{"a": 1}')],
    ),
    Case(
        "call on the analysis channel",
        "<|channel|>analysis to=functions.get_weather<|message|>{}<|call|>",
        calls=[("get_weather", "{}")],
    ),
    Case(
        "spaces after every special token (LLM-jp)",
        "<|channel|> analysis<|message|> think<|end|><|start|> assistant to=functions.get_weather<|channel|> commentary"
        ' <|constrain|>  json<|message|> {"a": 1}<|end|><|start|> assistant<|channel|> final<|message|> done',
        content=" done",
        reasoning=" think",
        calls=[("get_weather", '{"a": 1}')],
    ),
    Case(
        "several calls, ended by <|call|> or <|end|>",
        CALL_WEATHER + '{"city": "Paris"}<|call|><|start|>assistant<|channel|>commentary to=functions.get_time'
        ' <|constrain|>json<|message|>{"tz": "UTC"}<|end|>' + CALL_WEATHER + '{"city": "Rome"}<|call|>',
        calls=[("get_weather", '{"city": "Paris"}'), ("get_time", '{"tz": "UTC"}'), ("get_weather", '{"city": "Rome"}')],
    ),
    Case("no-argument call (empty body)", CALL_WEATHER + "<|call|>", calls=[("get_weather", "{}")]),
    Case("no-argument call (empty object)", CALL_WEATHER + " {} \n<|call|>", calls=[("get_weather", "{}")]),
    Case(
        "arguments are the model's source text",
        CALL_WEATHER + '{ "z" : [1 ,2.5e3], "a": {"s": "caf\\u00e9 \\"q\\" <|x"}, "a": null }<|call|>',
        calls=[("get_weather", '{ "z" : [1 ,2.5e3], "a": {"s": "caf\\u00e9 \\"q\\" <|x"}, "a": null }')],
    ),
    Case(
        "a dotted recipient keeps its full name (vLLM)",
        '<|channel|>commentary to=math.sum <|constrain|>json<|message|>{"a": 2}',
        calls=[("math.sum", '{"a": 2}')],
    ),
    Case(
        "text after a call is kept",
        CALL_WEATHER + "{}<|call|><|start|>assistant<|channel|>final<|message|>Done",
        content="Done",
        calls=[("get_weather", "{}")],
    ),
    Case(
        "stray text after a call is content",
        CALL_WEATHER + "{}<|call|>This is normal text.",
        content="This is normal text.",
        calls=[("get_weather", "{}")],
    ),
    Case(
        "text between messages is content, verbatim",
        "Some text <|channel|>analysis<|message|>r<|end|> more text <|start|>assistant<|channel|>final<|message|>a"
        "<|return|> trailing",
        content="Some text  more text a trailing",
        reasoning="r",
    ),
    Case(
        "a one-word header fragment between messages is dropped (SGLang's filler)",
        CALL_WEATHER + "{}<|call|>commentary<|channel|>commentary to=functions.get_time<|message|>{}<|call|>"
        "commentary<|start|>assistant<|channel|>final<|message|>Done<|return|>",
        content="Done",
        calls=[("get_weather", "{}"), ("get_time", "{}")],
    ),
    Case(
        "other text before a header is content, whatever marker follows",
        "Sure<|start|>assistant<|channel|>final<|message|>x<|end|>Hello<|channel|>final<|message|>y<|end|>final",
        content="SurexHello\nyfinal",
    ),
    Case(
        "a repeated <|channel|> replaces the channel part (llama.cpp)",
        "<|channel|>commentary to=assistant<|channel|>analysis<|message|>r<|end|><|start|>assistant"
        "<|channel|>commentary to=assistant<|channel|>final<|message|>a",
        content="a",
        reasoning="r",
    ),
    Case(
        "a <|start|> inside a header restarts it",
        "<|start|>assistant<|start|>assistant<|channel|>final<|message|>a",
        content="a",
    ),
    Case(
        "a message may end where the next header begins",
        "<|channel|>final<|message|>x<|start|>assistant<|channel|>final<|message|>y<|channel|>analysis<|message|>z",
        content="x\ny",
        reasoning="z",
    ),
    Case(
        "<|message|> and <|constrain|> inside a body are text",
        ANALYSIS + "a <|message|> b<|end|><|start|>assistant<|channel|>final<|message|>c<|constrain|>d",
        content="c<|constrain|>d",
        reasoning="a <|message|> b",
    ),
    Case(
        "text that only looks like a marker is text",
        "<|channel|>final<|message|>a <|sta b <|end c <|",
        content="a <|sta b <|end c <|",
    ),
    Case("no markers at all", "Hello world", content="Hello world"),
    Case("a single word", "Hello", content="Hello"),
]

SURFACED = [
    Case(
        "malformed header (vLLM recovers it raw)",
        ANALYSIS + "t<|end|><|start|>assistant<|channel|>final {\"answer\": \"hi\"}<|return|>",
        content='<|start|>assistant<|channel|>final {"answer": "hi"}<|return|>',
        reasoning="t",
    ),
    Case(
        "a terminator before <|message|>",
        "<|start|>assistant<|channel|>final<|end|>x",
        content="<|start|>assistant<|channel|>final<|end|>x",
    ),
    Case("output ending in a header", "<|channel|>final to=functions.f", content="<|channel|>final to=functions.f"),
    Case(
        "stray markers outside messages",
        "<|channel|>final<|message|>a<|end|><|end|>b<|message|>c",
        content="a<|end|>b<|message|>c",
    ),
    Case(
        "built-in python on analysis stays in the reasoning, verbatim",
        ANALYSIS + "Run it.<|end|><|start|>assistant<|channel|>analysis to=python<|message|>print(1)<|call|>",
        reasoning="Run it.<|start|>assistant<|channel|>analysis to=python<|message|>print(1)<|call|>",
    ),
    Case(
        "built-in container on commentary is content, verbatim",
        "<|start|>assistant to=container.exec<|channel|>commentary<|message|>ls",
        content="<|start|>assistant to=container.exec<|channel|>commentary<|message|>ls",
    ),
    Case(
        "a recipient with nothing after functions. names no call",
        "<|channel|>commentary to=functions.<|message|>{}",
        content="<|channel|>commentary to=functions.<|message|>{}",
    ),
    Case(
        "unknown channel, verbatim",
        "<|channel|>unknown<|message|>content<|end|>",
        content="<|channel|>unknown<|message|>content<|end|>",
    ),
    Case(
        "call to a tool not offered",
        ANALYSIS + "a<|end|><|start|>assistant<|channel|>commentary to=functions.delete_all<|message|>{}<|call|>",
        content="<|start|>assistant<|channel|>commentary to=functions.delete_all<|message|>{}<|call|>",
        reasoning="a",
        options=dict(GPTOSS, tools=TOOLS),
    ),
    Case(
        "call to a tool not offered, on the analysis channel, stays in the reasoning",
        "<|channel|>analysis to=functions.delete_all<|message|>{}",
        reasoning="<|channel|>analysis to=functions.delete_all<|message|>{}",
        options=dict(GPTOSS, tools=TOOLS),
    ),
    Case(
        "no reasoning parser: analysis stays in the content, verbatim (llama.cpp reasoning_format=none)",
        ANALYSIS + "I'm\nthinking<|end|><|start|>assistant<|channel|>final<|message|>Hello",
        content=ANALYSIS + "I'm\nthinking<|end|>Hello",
        options={"tool_parser": "openai"},
    ),
    Case(
        "thinking disabled: analysis stays in the content, verbatim",
        ANALYSIS + "r<|end|><|start|>assistant<|channel|>final<|message|>a",
        content=ANALYSIS + "r<|end|>a",
        options=dict(GPTOSS, enable_thinking=False),
    ),
    Case(
        "no tool parser: a call stays in its channel, verbatim",
        ANALYSIS + "r<|end|>" + CALL_WEATHER + "{}<|call|>",
        content=CALL_WEATHER + "{}<|call|>",
        reasoning="r",
        options={"reasoning_parser": "openai_gptoss"},
    ),
]

MALFORMED = [
    Case(
        "arguments cut short are closed at the last safe position",
        CALL_WEATHER + '{"city": "Par',
        calls=[("get_weather", '{"city": "Par"}')],
    ),
    Case(
        "an unfinished key is surfaced",
        CALL_WEATHER + '{"a": [1, "x"], "b',
        content=', "b',
        calls=[("get_weather", '{"a": [1, "x"]}')],
    ),
    Case(
        "a call ended before its arguments closed",
        CALL_WEATHER + '{"a": {"b": 1}<|call|><|start|>assistant<|channel|>final<|message|>ok',
        content="ok",
        calls=[("get_weather", '{"a": {"b": 1}}')],
    ),
    Case(
        "invalid JSON closes the call; the rest of the body is content",
        CALL_WEATHER + '{"a": 1, "b" 2}<|call|>',
        content=', "b" 2}',
        calls=[("get_weather", '{"a": 1}')],
    ),
    Case(
        "a body that is not an object is no call, and is content",
        CALL_WEATHER + "get the weather<|call|>after",
        content=CALL_WEATHER + "get the weather<|call|>after",
        calls=[],
    ),
    Case(
        "text after the arguments object is content",
        CALL_WEATHER + '{"a": 1} and more<|call|>',
        content="and more",
        calls=[("get_weather", '{"a": 1}')],
    ),
    Case(
        "a raw newline inside a string value",
        CALL_WEATHER + '{"a": "x\ny"}<|call|>',
        content='\ny"}',
        calls=[("get_weather", '{"a": "x"}')],
    ),
]


@pytest.mark.parametrize("case", ROUTING, ids=[c.label for c in ROUTING])
def test_routing(case: Case) -> None:
    """Headers route text to reasoning, content or a call, the same way on every chunking."""
    check(case)


@pytest.mark.parametrize("case", SURFACED, ids=[c.label for c in SURFACED])
def test_what_is_not_routed_is_surfaced_verbatim(case: Case) -> None:
    """Messages that are not routed (built-ins, bad headers, rejected or unparsed calls) are surfaced, never lost."""
    check(case)


@pytest.mark.parametrize("case", MALFORMED, ids=[c.label for c in MALFORMED])
def test_malformed_call_bodies(case: Case) -> None:
    """A named call is always completed with a JSON object; body text it cannot use is content."""
    check(case)


def test_every_marker_split_at_every_position() -> None:
    """Any two-cut split of an output (markers included) gives the same message."""
    text = (
        ANALYSIS + "r<|end|><|start|>assistant<|channel|>commentary<|message|>p<|end|>"
        + CALL_WEATHER + '{"x": "y"}<|call|><|start|>assistant<|channel|>final<|message|>f<|return|>'
    )
    want = parse_complete(text, **GPTOSS)
    assert want.tool_calls and want.content == "p\nf" and want.reasoning_content == "r"
    for i in range(1, len(text)):
        for j in (i + 1, i + 7):
            got = feed_chunks(split_at(text, [i, j]), **GPTOSS)
            assert message_key(accumulate(got)) == message_key(want), (i, j)


def test_reasoning_and_call_in_one_chunk_keep_their_order() -> None:
    """One chunk holding reasoning, a call and content gives deltas in the model's order."""
    text = ANALYSIS + "think<|end|>" + CALL_WEATHER + '{"c": 1}<|call|><|start|>assistant<|channel|>final<|message|>ok'
    p = ResponseParser(**GPTOSS, tools=TOOLS)
    deltas = p.feed(text) + p.feed("", final=True)
    kinds = [
        "reasoning" if d.reasoning_content else "call" if d.tool_calls else "content" for d in deltas
        if d.reasoning_content or d.tool_calls or d.content
    ]
    assert [k for k, _ in itertools.groupby(kinds)] == ["reasoning", "call", "content"]
    assert deltas[-1].finish_reason is None or deltas[-1].finish_reason == "tool_calls"


def test_name_comes_first_then_arguments_stream() -> None:
    """The first delta of a call names it; argument fragments follow as the text arrives."""
    p = ResponseParser(**GPTOSS)
    first = p.feed(CALL_WEATHER + '{"city": "Pa')
    calls = [tc for d in first for tc in d.tool_calls]
    assert calls[0].function.name == "get_weather" and calls[0].id
    assert "".join(tc.function.arguments or "" for tc in calls) == '{"city": "Pa'
    rest = p.feed('ris"}<|call|>', final=True)
    assert "".join(tc.function.arguments or "" for d in rest for tc in d.tool_calls) == 'ris"}'


# -- the call body parser -------------------------------------------------------------------------


def new_call_parser() -> HarmonyCallDriver:
    """A call-body parser built by the dialect's factory."""
    counter = itertools.count()
    ctx = DriverContext(channel=Channel.CONTENT, new_call=lambda: next(counter), tools=None, dialect="openai")
    parser = registry.get_tool_dialect("openai").factory(ctx)
    assert isinstance(parser, HarmonyCallDriver)
    return parser


def test_call_body_consumes_its_terminator_and_nothing_after() -> None:
    """feed_tool_block consumes the body and its terminator, and leaves the next header to the caller."""
    p = new_call_parser()
    out: list[object] = []
    header = "<|channel|>commentary to=functions.f<|message|>"
    text = header + '{"a": 1}<|call|><|start|>assistant'
    p.open_call(out, text, 0, len(header), "f")
    end = p.feed_tool_block(text, out, False, len(header))
    assert p.done and text[end:] == "<|start|>assistant"
    events = [e for e in out if isinstance(e, ToolDelta)]
    assert events[0].name == "f" and events[0].raw == header
    assert "".join(e.args for e in events) == '{"a": 1}'
    assert "".join(e.raw for e in events) == text[:end]


def test_call_body_stops_at_the_next_header() -> None:
    """Without a terminator, the body ends where the next header begins; that marker is not consumed."""
    p = new_call_parser()
    out: list[object] = []
    text = '{"a": 1}<|channel|>final<|message|>x'
    p.open_call(out, text, 0, 0, "f")
    end = p.feed_tool_block(text, out, False, 0)
    assert p.done and text[end:] == "<|channel|>final<|message|>x"


def test_call_body_tail_is_short_while_not_done() -> None:
    """Fed one character at a time, a body never leaves more than a short tail unconsumed."""
    body = '{"city": "a long city name", "n": 12345, "ok": true, "s": "\\u00e9\\n"}  <|call|>'
    p = new_call_parser()
    p.open_call([], "", 0, 0, "f")
    buf = ""
    for ch in body:
        buf += ch
        end = p.feed_tool_block(buf, [], False, 0)
        buf = buf[end:]
        if p.done:
            break
        assert len(buf) <= len("<|call|>") - 1, repr(buf)
    assert p.done and buf == ""


# -- the router stage -----------------------------------------------------------------------------


def test_router_without_a_machine_forwards_items() -> None:
    """A router built for dialects without routing forwards every item unchanged and holds nothing."""
    make = router_factory("hermes", "qwen3", reasoning=True)
    assert make.make is None and make.markers == ()
    router = make()
    end = ChunkEnd()
    assert router.feed("x") == ["x"] and router.feed(end) == [end] and router.finish() == []


@pytest.mark.parametrize(
    ("tool_parser", "reasoning_parser", "tool_calls"),
    [("openai", "openai_gptoss", True), ("openai", None, True), (None, "openai_gptoss", False)],
)
def test_router_factory_picks_harmony(tool_parser: str | None, reasoning_parser: str | None, tool_calls: bool) -> None:
    """Either Harmony parser name selects the Harmony machine; calls are parsed only with the tool parser."""
    make = router_factory(tool_parser, reasoning_parser, reasoning=reasoning_parser is not None)
    assert make.make is not None and make.tool_calls is tool_calls and make.markers == MARKERS
    assert isinstance(make(), ChannelRouter)
    machine = make.make(tool_calls=tool_calls, reasoning=False, chunking="any")
    assert isinstance(machine, HarmonyRouter)  # without a reasoning split there is no stripped-token fallback
    assert isinstance(make.make(tool_calls=tool_calls, reasoning=True, chunking="any"), HarmonyOrStripped)


def test_router_forwards_chunk_ends_after_their_outputs() -> None:
    """Each chunk end follows the items its text produced, and other items pass through."""
    router = ChannelRouter(HarmonyRouter())
    marker = object()
    out = router.feed("<|channel|>final<|message|>hi") + router.feed(ChunkEnd()) + router.feed(marker)
    assert out[0] == ChannelText(Channel.CONTENT, "hi") and isinstance(out[1], ChunkEnd) and out[2] is marker
    assert router.finish() == []


def test_a_long_non_header_is_released_at_once() -> None:
    """Text that cannot be a header is not held until the end of the output."""
    router = HarmonyRouter()
    out = router.feed("<|channel|>final The answer is forty-two, and")
    assert "".join(i.text for i in out if isinstance(i, ChannelText)).startswith("<|channel|>final The answer")
    out = router.feed(" more")
    assert out == [ChannelText(Channel.CONTENT, " more")]


def test_held_text_is_a_partial_marker_only() -> None:
    """Inside a body only a partial marker is held; with token-aligned input nothing is."""
    for chunking, released in (("any", "ab"), ("tokens", "ab<|ca")):
        router = HarmonyRouter(chunking=chunking)
        out = router.feed("<|channel|>final<|message|>ab<|ca")
        assert "".join(i.text for i in out if isinstance(i, ChannelText)) == released


def test_dialect_declarations() -> None:
    """openai has no openers (routed), declares every marker, and openai_gptoss never starts open."""
    tool = registry.get_tool_dialect("openai")
    assert tool.openers == () and tool.start_openers == () and tool.markers == MARKERS and tool.token_prefixes == ()
    spec = registry.get_reasoning_dialect("openai_gptoss")
    assert not spec.starts_open and spec.token_prefixes == ()
    assert "gpt-oss-20b" in tool.families and "gpt-oss-120b" in spec.families


def test_call_events_carry_the_calls_channel() -> None:
    """A call on the analysis channel is opened from the reasoning channel; elsewhere from the content."""
    router = HarmonyRouter()
    out = router.feed("<|channel|>analysis to=functions.f<|message|>{}<|call|>" + CALL_WEATHER + "{}") + router.finish()
    events = [e for e in out if isinstance(e, ToolDelta)]
    assert {e.call: e.channel for e in events} == {0: Channel.REASONING, 1: Channel.CONTENT}
    assert not any(isinstance(e, CallDelta) for e in out)


# -- o200k_harmony ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def o200k(shared: Path) -> Any:
    """o200k_harmony loaded offline from shared/tokenizers/gpt-oss (the tokenizers README recipe)."""
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    d = shared / "tokenizers" / "gpt-oss"
    meta = json.loads((d / "o200k_harmony.json").read_text(encoding="utf-8"))
    ranks = load_tiktoken_bpe(
        os.fspath(d / "o200k_base.tiktoken"),
        expected_hash="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    )
    return tiktoken.Encoding(
        "o200k_harmony", pat_str=meta["pat_str"], mergeable_ranks=ranks, special_tokens=meta["special_tokens"]
    )


REALISTIC = (
    "<|channel|>analysis<|message|>User asks: weather in 東京 and Paris? We need get_weather; one call per message."
    " Maybe check <|ch… no. 🌦<|end|>"
    "<|start|>assistant<|channel|>commentary<|message|>**Plan**: check 東京 first.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    '{"city": "東京", "unit": "celsius", "days": [1, 2.5e3, -7], "ok": true, "note": "a \\"quoted\\" <|x\\n"}<|call|>'
    "<|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>{}<|call|>"
    "<|start|>assistant<|channel|>analysis<|message|>Both done.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>It is 18 °C in 東京. ☀️<|return|>"
)
ANALYSIS_BODIES = (
    "User asks: weather in 東京 and Paris? We need get_weather; one call per message. Maybe check <|ch… no. 🌦",
    "Both done.",
)


@pytest.mark.shared
def test_markers_are_single_o200k_harmony_tokens(o200k: Any) -> None:
    """Every Harmony marker is one special token (so no prefix is declared), also inside a real output."""
    for marker, tid in MARKER_IDS.items():
        assert o200k.encode(marker, allowed_special="all") == [tid]
    assert set(MARKERS) == set(MARKER_IDS)
    assert registry.get_tool_dialect("openai").token_prefixes == ()
    assert registry.get_reasoning_dialect("openai_gptoss").token_prefixes == ()
    ids = o200k.encode(REALISTIC, allowed_special="all")
    dec = make_decoder(o200k, keep=MARKERS)
    pieces = [dec.step(i) for i in ids]
    assert "".join(pieces) == REALISTIC
    bounds = set(itertools.accumulate(len(p) for p in pieces))
    for marker in MARKERS:
        start = REALISTIC.find(marker)
        while start >= 0:
            # no token boundary falls inside a marker: no proper prefix can end a chunk
            assert not any(start < b < start + len(marker) for b in bounds), marker
            start = REALISTIC.find(marker, start + 1)


@pytest.mark.shared
def test_token_by_token_stream_matches_parse_complete(o200k: Any) -> None:
    """A realistic output decoded token by token through chunking="tokens" rebuilds parse_complete."""
    ids = o200k.encode(REALISTIC, allowed_special="all")
    dec = make_decoder(o200k, keep=MARKERS)
    p = ResponseParser(**GPTOSS, tools=TOOLS, chunking="tokens")
    deltas = [d for i in ids for d in p.feed(dec.step(i))] + p.feed("", final=True)
    got = accumulate(deltas)
    want = parse_complete(REALISTIC, **GPTOSS, tools=TOOLS)
    assert message_key(got) == message_key(want)
    assert want.reasoning_content == "".join(ANALYSIS_BODIES)
    assert want.content == "**Plan**: check 東京 first.\nIt is 18 °C in 東京. ☀️"
    assert [c.function.name for c in want.tool_calls] == ["get_weather", "get_time"]
    assert json.loads(want.tool_calls[0].function.arguments)["note"] == 'a "quoted" <|x\n'


async def _ids(ids: list[int]) -> AsyncIterator[list[int]]:
    for i in range(0, len(ids), 3):
        yield ids[i : i + 3]


@pytest.mark.shared
@pytest.mark.anyio
async def test_stream_of_token_ids_with_tiktoken(o200k: Any) -> None:
    """deltaflow.stream over o200k_harmony token ids rebuilds parse_complete and counts reasoning tokens."""
    ids = o200k.encode(REALISTIC, allowed_special="all")
    async with deltaflow.stream(_ids(ids), **GPTOSS, tools=TOOLS, tokenizer=o200k) as deltas:
        got = accumulate([d async for d in deltas])
    assert message_key(got) == message_key(parse_complete(REALISTIC, **GPTOSS, tools=TOOLS))
    # analysis bodies and their <|end|>: headers are protocol and count as neither
    assert deltas.usage.reasoning_tokens == sum(len(o200k.encode(b)) + 1 for b in ANALYSIS_BODIES)
    assert deltas.usage.completion_tokens == len(ids)


def test_recipient_after_the_content_type() -> None:
    """A recipient written in the constrain part still names the call."""
    check(
        Case(
            "recipient in the constrain part",
            '<|channel|>commentary<|constrain|>json to=functions.get_time<|message|>{"tz": "UTC"}<|call|>',
            calls=[("get_time", '{"tz": "UTC"}')],
        )
    )


def test_an_overlong_header_part_is_surfaced() -> None:
    """A header part longer than any real header is not held: it is content, verbatim."""
    text = "<|channel|>final to=" + "x" * 300 + "<|message|>hi"
    check(Case("overlong recipient", text, content=text))


def test_reasoning_tokens_without_per_token_text() -> None:
    """Without per-token text, a chunk counts as reasoning when it begins inside a reasoning body."""
    router = HarmonyRouter()
    router.feed(ANALYSIS + "abc")
    first = router.feed(ChunkEnd(token_ids=[1, 2, 3]))
    router.feed("def")
    second = router.feed(ChunkEnd(token_ids=[4]))
    assert isinstance(first[0], ChunkEnd) and first[0].reasoning_tokens == 0
    assert isinstance(second[0], ChunkEnd) and second[0].reasoning_tokens == 1


def test_router_lifecycle() -> None:
    """Empty text gives nothing; finish() twice is an error; no parser names, no machine."""
    router = HarmonyRouter()
    assert router.feed("") == []
    router.finish()
    with pytest.raises(deltaflow.StateError):
        router.finish()
    assert router_factory(None, None, reasoning=False).make is None


def test_malformed_payload_on_the_final_chunk() -> None:
    """A call body that turns out malformed on the final chunk is closed, and its text is content."""
    p = ResponseParser(**GPTOSS)
    deltas = p.feed("ok" + CALL_WEATHER) + p.feed("{oops<|call|>", final=True)
    m = accumulate(deltas)
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [("get_weather", "{}")]
    assert m.content == "okoops"  # "{" opened the arguments, closed as "{}"


STRIPPED = "analysisThe user typed random strings.assistantfinalIt looks like you're testing."


@pytest.mark.parametrize("tool_parser", [None, "openai"])
def test_output_with_stripped_special_tokens_is_split(tool_parser: str | None) -> None:
    """An engine that skipped special tokens leaves ``analysis...assistantfinal...``: split plainly, on any chunking."""
    m = check_chunkings(STRIPPED, reasoning_parser="openai_gptoss", tool_parser=tool_parser)
    assert (m.reasoning_content, m.content) == ("The user typed random strings.", "It looks like you're testing.")
    m = check_chunkings("analysis still thinking", reasoning_parser="openai_gptoss")
    assert (m.reasoning_content, m.content) == (" still thinking", None)


@pytest.mark.parametrize("text", ["analys", "an", "Analysis: the data", "final answer", "", " analysisX"])
def test_only_a_leading_analysis_word_selects_the_plain_split(text: str) -> None:
    """Text that does not begin with ``analysis`` goes to the Harmony machine (here: all content)."""
    m = check_chunkings(text, reasoning_parser="openai_gptoss")
    assert (m.reasoning_content, m.content) == (None, text or None)


def test_stripped_output_without_reasoning_split_stays_content() -> None:
    """With thinking disabled (or no reasoning parser) nothing is split: the text is content, verbatim."""
    m = check_chunkings(STRIPPED, reasoning_parser="openai_gptoss", enable_thinking=False)
    assert (m.reasoning_content, m.content) == (None, STRIPPED)
    m = check_chunkings(STRIPPED, tool_parser="openai")
    assert (m.reasoning_content, m.content) == (None, STRIPPED)


def test_stripped_output_counts_reasoning_tokens() -> None:
    """Chunk ends held while the first word is undecided come back in order, with their reasoning tokens."""
    router = router_factory(None, "openai_gptoss", reasoning=True)()
    out: list[object] = []
    for piece, ids in (("analy", [1]), ("sisThe", [2, 3]), (" user.", [4, 5]), ("assistantfinal", [6, 7]), ("Ok", [8])):
        out += router.feed(piece)
        out += router.feed(ChunkEnd(token_ids=ids))
    out += router.finish()
    ends = [o for o in out if isinstance(o, ChunkEnd)]
    assert [e.token_ids for e in ends] == [[1], [2, 3], [4, 5], [6, 7], [8]]
    # The first chunk holds only part of the "analysis" marker, which opens no reasoning yet (as a Harmony
    # header counts as neither); the chunks from the rest of the marker to the end marker are reasoning.
    assert [e.reasoning_tokens for e in ends] == [0, 2, 2, 2, 0]
