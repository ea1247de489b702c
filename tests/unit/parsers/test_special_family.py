"""Special-token dialects (deepseek_v3, deepseek_v31, kimi_k2 and the kimi_k2 reasoning): grammar, recovery, token boundaries."""

from __future__ import annotations

import codecs
import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from deltaflow import ResponseParser, accumulate, parse_complete
from deltaflow.items import Channel, ToolDelta
from deltaflow.messages import ChatMessage
from deltaflow.parsers import DriverContext, declare, registry
from deltaflow.parsers.drivers.special_tokens import HeaderKind, SpecialTokenDriver, SpecialTokenFormat
from deltaflow.testing import check_chunkings, feed_chunks, load_tokenizer, message_key, split_at

# DeepSeek markers: U+FF5C "｜" and U+2581 "▁" (shared/dialects.md section 8).
DS_CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
DS_CALLS_END = "<｜tool▁calls▁end｜>"
DS_CALL_BEGIN = "<｜tool▁call▁begin｜>"
DS_CALL_END = "<｜tool▁call▁end｜>"
DS_SEP = "<｜tool▁sep｜>"

K_SECTION = "<|tool_calls_section_begin|>"
K_SECTION_END = "<|tool_calls_section_end|>"
K_CALL = "<|tool_call_begin|>"
K_ARG = "<|tool_call_argument_begin|>"
K_CALL_END = "<|tool_call_end|>"


def v3_call(name: str, args: str = '{"a": 1}', *, fence_nl: bool = True) -> str:
    """One DeepSeek-V3/R1 call (``function<｜tool▁sep｜>NAME`` and a ```json fence)."""
    return f"{DS_CALL_BEGIN}function{DS_SEP}{name}\n```json\n{args}{chr(10) if fence_nl else ''}```{DS_CALL_END}"


def v3_block(*calls: str, sep: str = "\n") -> str:
    """A DeepSeek-V3 section holding ``calls``."""
    return DS_CALLS_BEGIN + sep.join(calls) + DS_CALLS_END


def v31_call(name: str, args: str = '{"a": 1}') -> str:
    """One DeepSeek-V3.1 call."""
    return f"{DS_CALL_BEGIN}{name}{DS_SEP}{args}{DS_CALL_END}"


def v31_block(*calls: str) -> str:
    """A DeepSeek-V3.1 section holding ``calls`` (concatenated)."""
    return DS_CALLS_BEGIN + "".join(calls) + DS_CALLS_END


def k_call(name: str, args: str = '{"a": 1}', index: int = 0, *, prefix: str = "functions.") -> str:
    """One Kimi K2 call with the id ``functions.NAME:INDEX``."""
    return f"{K_CALL}{prefix}{name}:{index}{K_ARG}{args}{K_CALL_END}"


def k_block(*calls: str) -> str:
    """A Kimi K2 section holding ``calls``."""
    return K_SECTION + "".join(calls) + K_SECTION_END


def tools(*names: str) -> list[dict[str, Any]]:
    """OpenAI-format definitions for ``names``."""
    return [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in names]


def calls_of(m: ChatMessage) -> list[tuple[str, str]]:
    """(name, arguments) of a message's calls."""
    return [(c.function.name, c.function.arguments) for c in m.tool_calls]


def new_parser(dialect: str) -> SpecialTokenDriver:
    """A parser for one block of ``dialect``."""
    counter = itertools.count()
    ctx = DriverContext(channel=Channel.CONTENT, new_call=lambda: next(counter), tools=None, dialect=dialect)
    parser = registry.get_tool_dialect(dialect).factory(ctx)
    assert isinstance(parser, SpecialTokenDriver)
    return parser


# -- registration -----------------------------------------------------------------------------------


def test_registered_names_and_declarations() -> None:
    """The three tool dialects and the kimi_k2 reasoning parser are registered with their markers."""
    v3 = registry.get_tool_dialect("deepseek_v3")
    assert v3.openers == (DS_CALLS_BEGIN,)
    assert set(v3.markers) == {DS_CALLS_BEGIN, DS_CALLS_END, DS_CALL_BEGIN, DS_CALL_END, DS_SEP}
    assert registry.get_tool_dialect("deepseek_v31").openers == (DS_CALLS_BEGIN,)
    kimi = registry.get_tool_dialect("kimi_k2")
    assert kimi.openers == (K_SECTION, "<|tool_call_section_begin|>", K_CALL)
    spec = registry.get_reasoning_dialect("kimi_k2")
    assert (spec.start, spec.end, spec.starts_open) == ("<think>", "</think>", True)
    assert spec.implicit_end == (K_SECTION, K_CALL)
    for name in ("deepseek_v3", "deepseek_v31", "kimi_k2"):
        d = registry.get_tool_dialect(name)
        assert d.description and d.families and d.tokenizers


def test_id_dialect_needs_an_id_pattern() -> None:
    """Declaring an ID_SEP dialect without a call_id pattern fails at declaration time."""
    spec = SpecialTokenFormat(("<s>",), ("</s>",), "<c>", "</c>", "<sep>", HeaderKind.ID_SEP)
    with pytest.raises(ValueError, match="call_id"):
        declare("x", spec, register=False)


def test_markers_are_byte_compared() -> None:
    """ASCII look-alikes of DeepSeek's full-width markers are text, never normalized into markers."""
    text = "<|tool▁calls▁begin|><|tool▁call▁begin|>function<|tool▁sep|>f\n```json\n{}\n```<|tool▁call▁end|>"
    text += "<｜tool_calls_begin｜>"
    for dialect in ("deepseek_v3", "deepseek_v31"):
        m = check_chunkings(text, tool_parser=dialect)
        assert m.tool_calls == [] and m.content == text


# -- the consumed-prefix contract ---------------------------------------------------------------------


def test_first_event_names_the_call_and_carries_the_kimi_id() -> None:
    """The first event of a Kimi call sets the name and the model's own id."""
    p = new_parser("kimi_k2")
    out: list[object] = []
    p.feed_tool_block(k_block(k_call("get_weather", index=3)), out, False)
    first = out[0]
    assert isinstance(first, ToolDelta)
    assert (first.name, first.id) == ("get_weather", "functions.get_weather:3")


@pytest.mark.parametrize(
    ("dialect", "text"),
    [
        ("deepseek_v3", v3_block(v3_call("get_weather", '{"city": "a long city", "n": 12345, "s": "\\u00e9"}'), v3_call("g"))),
        ("deepseek_v31", v31_block(v31_call("f", '{"x": [1, 2.5e3, true], "y": "<div>"}'), v31_call("g"))),
        ("kimi_k2", k_block(k_call("f", '{"x": "<p>", "n": -1}'), k_call("g", index=1))),
    ],
)
def test_unconsumed_tail_is_short_while_not_done(dialect: str, text: str) -> None:
    """Fed one character at a time, a block never leaves more than a marker's length unconsumed."""
    longest = max(len(m) for m in registry.get_tool_dialect(dialect).markers)
    p = new_parser(dialect)
    buf = ""
    for ch in text:
        buf += ch
        end = p.feed_tool_block(buf, [], False)
        buf = buf[end:]
        if p.done:
            break
        assert len(buf) < longest, repr(buf)
    assert p.done and buf == ""


HEADS = {
    "deepseek_v3": f"{DS_CALLS_BEGIN}{DS_CALL_BEGIN}function{DS_SEP}f\n```json\n",
    "deepseek_v31": f"{DS_CALLS_BEGIN}{DS_CALL_BEGIN}f{DS_SEP}",
    "kimi_k2": f"{K_SECTION}{K_CALL}functions.f:0{K_ARG}",
}


@pytest.mark.parametrize("dialect", list(HEADS))
def test_name_first_then_arguments_stream(dialect: str) -> None:
    """The name is emitted with the first argument text (the call is committed), then text as soon as it is safe."""
    p = ResponseParser(dialect)

    def frags(chunk: str) -> list[tuple[str | None, str | None]]:
        return [(tc.function.name, tc.function.arguments) for d in p.feed(chunk) for tc in d.tool_calls]

    assert frags(HEADS[dialect]) == []  # the header alone does not commit the call
    assert frags('{"city": "Par') == [("f", '{"city": "Par')]
    assert frags('is", "n": 12') == [(None, 'is"')]  # the number may go on
    assert frags("}") == [(None, ', "n": 12}')]


@pytest.mark.parametrize(("dialect", "held"), [("deepseek_v3", ""), ("deepseek_v31", ""), ("kimi_k2", "<")])
def test_tokens_mode_holds_only_text_marker_prefixes(dialect: str, held: str) -> None:
    """With chunking="tokens", DeepSeek holds nothing (atomic openers); Kimi holds prefixes of its text-only variant."""
    p = ResponseParser(dialect, chunking="tokens")
    first = "".join(d.content or "" for d in p.feed("a <"))
    assert first == "a <"[: 3 - len(held)]
    assert first + "".join(d.content or "" for d in p.feed("b", final=True)) == "a <b"


# -- DeepSeek V3 / R1 ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """An output of a dialect and the message it must give."""

    label: str
    text: str
    calls: list[tuple[str, str]]
    content: str | None = None


V3_CASES = [
    Case("one call", v3_block(v3_call("get_weather", '{"city": "Paris"}')), [("get_weather", '{"city": "Paris"}')]),
    Case("fence closed right after the object (llama.cpp R1)", v3_block(v3_call("f", '{"arg1": 1}', fence_nl=False)),
         [("f", '{"arg1": 1}')]),
    Case("several calls separated by newlines", v3_block(v3_call("f"), v3_call("g", "{}"), v3_call("h", '{"b": [1]}')),
         [("f", '{"a": 1}'), ("g", "{}"), ("h", '{"b": [1]}')]),
    Case("calls concatenated", v3_block(v3_call("f"), v3_call("g"), sep=""), [("f", '{"a": 1}'), ("g", '{"a": 1}')]),
    Case("pretty-printed arguments", v3_block(v3_call("f", '{\n  "city": "Tokyo",\n  "unit": "c"\n}')),
         [("f", '{\n  "city": "Tokyo",\n  "unit": "c"\n}')]),
    Case("no-argument call (empty object)", v3_block(v3_call("now", "{}")), [("now", "{}")]),
    Case("no-argument call (no fence at all)", v3_block(f"{DS_CALL_BEGIN}function{DS_SEP}now\n{DS_CALL_END}"),
         [("now", "{}")]),
    Case("no-argument call (empty fence)", v3_block(f"{DS_CALL_BEGIN}function{DS_SEP}now\n```json\n```{DS_CALL_END}"),
         [("now", "{}")]),
    Case("object without a fence", v3_block(f"{DS_CALL_BEGIN}function{DS_SEP}f\n{{\"a\": 1}}{DS_CALL_END}"),
         [("f", '{"a": 1}')]),
    Case("text before and after the section", "let me check." + v3_block(v3_call("f")) + "It is 30 degrees.",
         [("f", '{"a": 1}')], "let me check.It is 30 degrees."),
    Case("arguments kept verbatim", v3_block(v3_call("f", '{ "z":1 , "a" : [ ], "z": "dup" }')),
         [("f", '{ "z":1 , "a" : [ ], "z": "dup" }')]),
    Case("backticks and markers inside a string value", v3_block(v3_call("f", '{"md": "```py\\nx```", "t": "<｜"}')),
         [("f", '{"md": "```py\\nx```", "t": "<｜"}')]),
]


@pytest.mark.parametrize("case", V3_CASES, ids=[c.label for c in V3_CASES])
def test_deepseek_v3(case: Case) -> None:
    """DeepSeek-V3/R1 calls parse the same on every chunking."""
    m = check_chunkings(case.text, tool_parser="deepseek_v3")
    assert calls_of(m) == case.calls
    assert m.content == case.content


# -- DeepSeek V3.1 ------------------------------------------------------------------------------------


V31_CASES = [
    Case("one call with prose before", "normal text" + v31_block(v31_call("foo", '{"x":1}')), [("foo", '{"x":1}')],
         "normal text"),
    Case("several calls", v31_block(v31_call("foo", '{"x":1}'), v31_call("bar", '{"y":2}')),
         [("foo", '{"x":1}'), ("bar", '{"y":2}')]),
    Case("whitespace between calls", v31_block(v31_call("f"), "\n", v31_call("g")), [("f", '{"a": 1}'), ("g", '{"a": 1}')]),
    Case("no-argument call", v31_block(v31_call("now", "{}")), [("now", "{}")]),
    Case("no arguments written", v31_block(f"{DS_CALL_BEGIN}now{DS_SEP}{DS_CALL_END}"), [("now", "{}")]),
    Case("text after the section is content", v31_block(v31_call("f")) + " some suffix text", [("f", '{"a": 1}')],
         " some suffix text"),
    Case("multiline arguments", v31_block(v31_call("foo", '{\n  "x": 1,\n  "y": [\n    1,\n    2\n  ]\n}')),
         [("foo", '{\n  "x": 1,\n  "y": [\n    1,\n    2\n  ]\n}')]),
]


@pytest.mark.parametrize("case", V31_CASES, ids=[c.label for c in V31_CASES])
def test_deepseek_v31(case: Case) -> None:
    """DeepSeek-V3.1 calls parse the same on every chunking."""
    m = check_chunkings(case.text, tool_parser="deepseek_v31")
    assert calls_of(m) == case.calls
    assert m.content == case.content


# -- Kimi K2 ------------------------------------------------------------------------------------------


KIMI_CASES = [
    Case("one call", "I'll check. " + k_block(k_call("get_weather", '{"city": "Beijing"}')),
         [("get_weather", '{"city": "Beijing"}')], "I'll check. "),
    Case("three calls", k_block(k_call("a"), k_call("b", "{}", 1), k_call("c", '{"to": "x@y.z"}', 2)),
         [("a", '{"a": 1}'), ("b", "{}"), ("c", '{"to": "x@y.z"}')]),
    Case("no functions. prefix", k_block(k_call("get_weather", prefix="")), [("get_weather", '{"a": 1}')]),
    Case("dots and colons in the name", k_block(k_call("calc.v2"), k_call("ns:lookup", index=1)),
         [("calc.v2", '{"a": 1}'), ("ns:lookup", '{"a": 1}')]),
    Case("space before the argument marker", k_block(f"{K_CALL}functions.f:0 {K_ARG}{{}} {K_CALL_END}"), [("f", "{}")]),
    Case("singular section markers", "<|tool_call_section_begin|>" + k_call("f") + "<|tool_call_section_end|>",
         [("f", '{"a": 1}')]),
    Case("a call without a section", k_call("f") + k_call("g", index=1) + " after", [("f", '{"a": 1}'), ("g", '{"a": 1}')],
         " after"),
    Case("calls without section or end markers (llama.cpp)",
         f'{K_CALL}functions.f:0{K_ARG}{{"arg1": 1}}{K_CALL}functions.g:1{K_ARG}{{"code": "x"}}',
         [("f", '{"arg1": 1}'), ("g", '{"code": "x"}')]),
    Case("noise between section begin and the call is framing",
         K_SECTION + " spurious noise " + k_call("test", '{"k": "v"}') + K_SECTION_END, [("test", '{"k": "v"}')]),
    Case("markup inside the arguments", k_block(k_call("html", '{"markup": "<p>a</p>", "s": "<|"}')),
         [("html", '{"markup": "<p>a</p>", "s": "<|"}')]),
    Case("text after the section is content", "Before. " + k_block(k_call("f")) + " After tools.", [("f", '{"a": 1}')],
         "Before.  After tools."),
    Case("an empty section is surfaced", "Hi " + K_SECTION + K_SECTION_END, [], "Hi " + K_SECTION + K_SECTION_END),
    Case("an id without :N is not a call; the next one is",
         k_block(f"{K_CALL}functions.bad.0{K_ARG}{{}}{K_CALL_END}", k_call("good", index=1)),
         [("good", '{"a": 1}')], f"{K_SECTION}{K_CALL}functions.bad.0{K_ARG}{{}}{K_CALL_END}"),
    Case("no section begin: text", f'invalid_tool:0{K_ARG}{{"city": "Paris"}}{K_CALL_END}{K_SECTION_END}', [],
         f'invalid_tool:0{K_ARG}{{"city": "Paris"}}{K_CALL_END}{K_SECTION_END}'),
]


@pytest.mark.parametrize("case", KIMI_CASES, ids=[c.label for c in KIMI_CASES])
def test_kimi_k2(case: Case) -> None:
    """Kimi K2 calls parse the same on every chunking."""
    m = check_chunkings(case.text, tool_parser="kimi_k2")
    assert calls_of(m) == case.calls
    assert m.content == case.content


def test_kimi_ids_are_kept() -> None:
    """The id the model wrote (``functions.NAME:N``, or ``NAME:N``) is the call's id."""
    text = k_block(k_call("f", index=7), k_call("g", index=8, prefix=""))
    m = parse_complete(text, tool_parser="kimi_k2")
    assert [c.id for c in m.tool_calls] == ["functions.f:7", "g:8"]
    deltas = feed_chunks(list(text), tool_parser="kimi_k2")
    assert [tc.id for d in deltas for tc in d.tool_calls if tc.id] == ["functions.f:7", "g:8"]


# -- all three: names, malformed and truncated payloads --------------------------------------------------


BLOCKS = {
    "deepseek_v3": lambda *cs: v3_block(*(v3_call(n, a) for n, a in cs)),
    "deepseek_v31": lambda *cs: v31_block(*(v31_call(n, a) for n, a in cs)),
    "kimi_k2": lambda *cs: k_block(*(k_call(n, a, i) for i, (n, a) in enumerate(cs))),
}
DIALECTS = list(BLOCKS)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_unknown_name_is_filtered_and_surfaced(dialect: str) -> None:
    """With tools given, a call to another name is not emitted; its text is surfaced and later calls survive."""
    block = BLOCKS[dialect](("delete_all", '{"x": 1}'), ("get_weather", '{"city": "Paris"}'))
    m = check_chunkings("a" + block + "b", tool_parser=dialect, tools=tools("get_weather"))
    assert calls_of(m) == [("get_weather", '{"city": "Paris"}')]
    assert m.content is not None and m.content.startswith("a") and m.content.endswith("b")
    assert "delete_all" in m.content and '{"x": 1}' in m.content and "Paris" not in m.content


@pytest.mark.parametrize("dialect", DIALECTS)
def test_malformed_arguments_close_the_call_and_the_section_goes_on(dialect: str) -> None:
    """Invalid JSON closes the named call at its last safe position, surfaces the rest, and the next call parses."""
    block = BLOCKS[dialect](("f", '{"a": [1, "x"], "b" 2}'), ("g", '{"c": 3}'))
    m = check_chunkings(block, tool_parser=dialect)
    assert calls_of(m) == [("f", '{"a": [1, "x"]}'), ("g", '{"c": 3}')]
    assert m.content is not None and '"b" 2}' in m.content


@pytest.mark.parametrize("dialect", DIALECTS)
def test_object_cut_by_a_marker_is_closed(dialect: str) -> None:
    """A marker ends an unfinished object (vLLM's invalid_json_still_extracted); nothing of the call is lost."""
    block = BLOCKS[dialect](("bad", '{"city": "Beijing"'), ("good", '{"city": "Shanghai"}'))
    m = check_chunkings("Help. " + block, tool_parser=dialect)
    # The model's own blanks before the cut stay part of the arguments text; the JSON is the same.
    assert [(n, json.loads(a)) for n, a in calls_of(m)] == [("bad", {"city": "Beijing"}), ("good", {"city": "Shanghai"})]
    assert m.content == "Help. "
    cut_in_string = BLOCKS[dialect](("bad", '{"city": "Bei'), ("good", "{}"))
    assert calls_of(check_chunkings(cut_in_string, tool_parser=dialect)) == [("bad", '{"city": "Bei"}'), ("good", "{}")]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_arguments_that_are_not_an_object(dialect: str) -> None:
    """A value that is not an object never began the call's arguments: no call, its text is content; the next parses."""
    m = check_chunkings(BLOCKS[dialect](("f", "[1, 2]"), ("g", "{}")), tool_parser=dialect)
    assert calls_of(m) == [("g", "{}")]
    end = {"deepseek_v3": "\n```" + DS_CALL_END, "deepseek_v31": DS_CALL_END, "kimi_k2": K_CALL_END}[dialect]
    # Everything the model wrote up to the second call is content: the header with the name, the value, its close.
    assert m.content is not None and m.content.endswith("[1, 2]" + end)
    header = {"deepseek_v3": f"{DS_SEP}f\n", "deepseek_v31": f"f{DS_SEP}", "kimi_k2": "functions.f:0"}[dialect]
    assert header in m.content


@dataclass(frozen=True)
class Cut:
    """A block cut short by the end of the output."""

    label: str
    dialect: str
    text: str
    calls: list[tuple[str, str]]
    content: str | None


CUTS = [
    Cut("v3 inside a string value", "deepseek_v3", DS_CALLS_BEGIN + v3_call("f", '{"a": "xy')[: -len(f"\n```{DS_CALL_END}")],
        [("f", '{"a": "xy"}')], None),
    Cut("v3 key without value", "deepseek_v3", f'{DS_CALLS_BEGIN}{DS_CALL_BEGIN}function{DS_SEP}f\n```json\n{{"a": 1, "b',
        [("f", '{"a": 1}')], ', "b'),
    Cut("v3 name without its newline", "deepseek_v3", f"{DS_CALLS_BEGIN}{DS_CALL_BEGIN}function{DS_SEP}get_wea", [],
        f"{DS_CALLS_BEGIN}{DS_CALL_BEGIN}function{DS_SEP}get_wea"),
    Cut("v3 after the fence opener", "deepseek_v3", f"{DS_CALLS_BEGIN}{DS_CALL_BEGIN}function{DS_SEP}f\n```json\n",
        [], f"{DS_CALLS_BEGIN}{DS_CALL_BEGIN}function{DS_SEP}f\n```json\n"),
    Cut("v3 before the section close", "deepseek_v3", DS_CALLS_BEGIN + v3_call("f") + "\n", [("f", '{"a": 1}')], None),
    Cut("v31 partial literal", "deepseek_v31", f'{DS_CALLS_BEGIN}{DS_CALL_BEGIN}f{DS_SEP}{{"a": tr',
        [("f", "{}")], '"a": tr'),
    Cut("v31 only the opener", "deepseek_v31", DS_CALLS_BEGIN, [], DS_CALLS_BEGIN),
    Cut("kimi partial arguments (vLLM stream_truncated)", "kimi_k2",
        f'I\'ll check. {K_SECTION}{K_CALL}functions.get_weather:0 {K_ARG}{{"city": "Bei', [("get_weather", '{"city": "Bei"}')],
        "I'll check. "),
    Cut("kimi id without the argument marker", "kimi_k2", f"{K_SECTION}{K_CALL}functions.get_weather:0", [],
        f"{K_SECTION}{K_CALL}functions.get_weather:0"),
    Cut("kimi bare call without its end", "kimi_k2", f'{K_CALL}functions.x:0{K_ARG}{{"cmd": "ls", "t": 10}}',
        [("x", '{"cmd": "ls", "t": 10}')], None),
]


@pytest.mark.parametrize("case", CUTS, ids=[c.label for c in CUTS])
def test_final_closes_started_arguments_and_never_invents(case: Cut) -> None:
    """The end of the output closes a named call's arguments, never invents a name, and loses no text."""
    m = check_chunkings(case.text, tool_parser=case.dialect)
    assert calls_of(m) == case.calls
    assert m.content == case.content


@pytest.mark.parametrize("dialect", DIALECTS)
def test_malformed_payload_on_the_final_chunk(dialect: str) -> None:
    """A malformed payload arriving with final=True is surfaced as content, nothing lost."""
    opener = K_SECTION + K_CALL if dialect == "kimi_k2" else DS_CALLS_BEGIN + DS_CALL_BEGIN
    p = ResponseParser(dialect)
    deltas = p.feed("ok " + opener) + p.feed("no separator here" + DS_CALL_END, final=True)
    assert "".join(d.content or "" for d in deltas) == "ok " + opener + "no separator here" + DS_CALL_END
    assert not any(d.tool_calls for d in deltas)


def test_header_without_separator_is_skipped_to_the_next_call() -> None:
    """A DeepSeek call whose header never reaches its separator is surfaced; the next call still parses."""
    block = v31_block(f"{DS_CALL_BEGIN}garbage{DS_CALL_END}", v31_call("g"))
    m = check_chunkings(block, tool_parser="deepseek_v31")
    assert calls_of(m) == [("g", '{"a": 1}')]
    assert m.content == f"{DS_CALLS_BEGIN}{DS_CALL_BEGIN}garbage{DS_CALL_END}"


def test_junk_after_the_arguments_is_surfaced() -> None:
    """Text between a complete object and the call close is surfaced; the call stands."""
    block = v31_block(f'{DS_CALL_BEGIN}f{DS_SEP}{{"a": 1}} oops{DS_CALL_END}', v31_call("g"))
    m = check_chunkings(block, tool_parser="deepseek_v31")
    assert calls_of(m) == [("f", '{"a": 1}'), ("g", '{"a": 1}')]
    assert m.content == "oops"


def test_bare_kimi_call_followed_by_text() -> None:
    """After a bare Kimi call, text that starts no marker ends the block and stays content, whitespace included."""
    m = check_chunkings(k_call("f") + "  then <|tool_call text", tool_parser="kimi_k2")
    assert calls_of(m) == [("f", '{"a": 1}')]
    assert m.content == "  then <|tool_call text"


def test_empty_v3_name_is_skipped_to_the_next_call() -> None:
    """A DeepSeek-V3 call with an empty name is surfaced; the next call of the section still parses."""
    bad = f"{DS_CALL_BEGIN}function{DS_SEP}\n```json\n{{}}\n```{DS_CALL_END}"
    m = check_chunkings(v3_block(bad, v3_call("g")), tool_parser="deepseek_v3")
    assert calls_of(m) == [("g", '{"a": 1}')]
    assert m.content == DS_CALLS_BEGIN + bad


def test_unusable_text_up_to_the_next_call_is_surfaced() -> None:
    """Without a call close, unusable text is surfaced up to the next call, which parses.

    The first call's arguments never began (``[1]`` is not an object): it is no call, all of its text is content.
    """
    block = DS_CALLS_BEGIN + f"{DS_CALL_BEGIN}f{DS_SEP}[1]" + v31_call("g") + DS_CALLS_END
    m = check_chunkings(block, tool_parser="deepseek_v31")
    assert calls_of(m) == [("g", '{"a": 1}')]
    assert m.content == f"{DS_CALLS_BEGIN}{DS_CALL_BEGIN}f{DS_SEP}[1]"


def test_bare_kimi_calls_then_a_stray_section_close() -> None:
    """A section close after bare Kimi calls is taken as part of the block."""
    m = check_chunkings(k_call("f") + "\n" + K_SECTION_END + "ok", tool_parser="kimi_k2")
    assert calls_of(m) == [("f", '{"a": 1}')]
    assert m.content == "ok"


def test_bad_bare_kimi_call_gives_the_rest_back() -> None:
    """A bare Kimi call without a usable header ends the block; its text is content and a later call parses."""
    text = f"{K_CALL}no id here{K_CALL_END} then " + k_call("g")
    m = check_chunkings(text, tool_parser="kimi_k2")
    assert calls_of(m) == [("g", '{"a": 1}')]
    assert m.content == f"{K_CALL}no id here{K_CALL_END} then "


def test_a_channel_change_ends_a_complete_section() -> None:
    """A section opened in reasoning whose reasoning ends before the section close ends there; since the model
    went on after it, the section was only thought and stays reasoning text. At the end of unclosed reasoning
    the same section is a call."""
    text = "<think>r" + DS_CALLS_BEGIN + v31_call("f") + "\n</think>after" + DS_CALLS_END
    m = check_chunkings(text, tool_parser="deepseek_v31", reasoning_parser="deepseek_r1")
    assert calls_of(m) == []
    assert m.reasoning_content == "r" + DS_CALLS_BEGIN + v31_call("f") + "\n"
    assert m.content == "after" + DS_CALLS_END
    m = check_chunkings("<think>r" + DS_CALLS_BEGIN + v31_call("f") + "\n", tool_parser="deepseek_v31", reasoning_parser="deepseek_r1")
    assert calls_of(m) == [("f", '{"a": 1}')]
    assert (m.reasoning_content, m.content) == ("r", None)


# -- reasoning ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dialect", "reasoning", "block"),
    [
        ("deepseek_v3", "deepseek_r1", v3_block(v3_call("f"))),
        ("deepseek_v31", "deepseek_r1", v31_block(v31_call("f"))),
        ("kimi_k2", "kimi_k2", k_block(k_call("f"))),
    ],
)
def test_reasoning_and_tools_in_one_chunk(dialect: str, reasoning: str, block: str) -> None:
    """Reasoning, content and a section arriving in one chunk are split and parsed as when streamed."""
    text = "<think>Plan: call f.</think>Sure. " + block + " Done."
    m = check_chunkings(text, tool_parser=dialect, reasoning_parser=reasoning)
    assert m.reasoning_content == "Plan: call f."
    assert m.content == "Sure.  Done."
    assert calls_of(m) == [("f", '{"a": 1}')]


@pytest.mark.parametrize("opener", [K_SECTION, K_CALL])
def test_kimi_call_inside_unclosed_reasoning_ends_it(opener: str) -> None:
    """A Kimi section or call marker inside unclosed reasoning ends the reasoning; the calls are parsed."""
    body = k_call("f") + k_call("g", index=1)
    text = "<think>I need to call two functions" + (K_SECTION + body + K_SECTION_END if opener == K_SECTION else body)
    m = check_chunkings(text, tool_parser="kimi_k2", reasoning_parser="kimi_k2")
    assert m.reasoning_content == "I need to call two functions"
    assert calls_of(m) == [("f", '{"a": 1}'), ("g", '{"a": 1}')]
    assert m.content is None


@pytest.mark.parametrize(
    ("text", "reasoning", "content"),
    [
        ("<think>step by step</think>final answer", "step by step", "final answer"),
        ("<think></think>final answer", None, "final answer"),
        ("implicit reasoning with no tags", "implicit reasoning with no tags", None),
        ("some reasoning" + K_SECTION + "tool data", "some reasoning", K_SECTION + "tool data"),
        ("r" + K_CALL + "x", "r", K_CALL + "x"),
        ("r<|tool_call_section_begin|>x", "r<|tool_call_section_begin|>x", None),
    ],
    ids=["tags", "empty think", "starts open", "section ends reasoning", "call ends reasoning", "singular is text"],
)
def test_kimi_reasoning_alone(text: str, reasoning: str | None, content: str | None) -> None:
    """The kimi_k2 reasoning parser on its own (no tool parser): markers it ends at stay in the content."""
    m = check_chunkings(text, reasoning_parser="kimi_k2")
    assert (m.reasoning_content, m.content) == (reasoning, content)


def test_kimi_reasoning_disabled() -> None:
    """enable_thinking=False makes everything content."""
    m = check_chunkings("no reasoning here</think>", reasoning_parser="kimi_k2", enable_thinking=False)
    assert (m.reasoning_content, m.content) == (None, "no reasoning here</think>")


# -- token boundaries -----------------------------------------------------------------------------------


def token_texts(tok: Any, ids: list[int]) -> list[str]:
    """The text each token adds, decoded incrementally with special tokens kept."""
    from tokenizers.decoders import DecodeStream

    ds = DecodeStream(skip_special_tokens=False)
    return [ds.step(tok, i) or "" for i in ids]


def boundary_prefixes(tok: Any, marker: str, contexts: list[tuple[str, str]]) -> set[str]:
    """Proper prefixes of ``marker`` that end at a token boundary when it is encoded in each context."""
    found: set[str] = set()
    for before, after in contexts:
        text = before + marker + after
        start = len(before)
        for a, b in tok.encode(text, add_special_tokens=False).offsets:
            for edge in (a, b):
                if start < edge < start + len(marker):
                    found.add(marker[: edge - start])
    return found


CONTEXTS = [("", ""), ("x", "y"), ("Sure. ", "\n"), ("\n", "function"), ("}\n```", "\n"), ("東京", "{"), (" ", " ")]


@pytest.mark.shared
@pytest.mark.parametrize("family", ["deepseek-v3", "deepseek-v3.1"])
@pytest.mark.parametrize("dialect", ["deepseek_v3", "deepseek_v31"])
def test_deepseek_markers_are_single_tokens(shared: Path, family: str, dialect: str) -> None:
    """Every DeepSeek marker encodes to one token in every context, so the declared token_prefixes are empty."""
    tok = load_tokenizer(family)
    if tok is None:
        pytest.skip(f"shared/tokenizers/{family} is absent")
    d = registry.get_tool_dialect(dialect)
    assert family in d.tokenizers
    for marker in d.markers:
        tid = tok.token_to_id(marker)
        assert tid is not None, marker
        for before, after in CONTEXTS:
            assert tid in tok.encode(before + marker + after, add_special_tokens=False).ids, (marker, before, after)
        assert boundary_prefixes(tok, marker, CONTEXTS) == set()
    found = set().union(*(boundary_prefixes(tok, o, CONTEXTS) for o in d.openers))
    assert set(d.token_prefixes) == found == set()


def deepseek_output(dialect: str) -> str:
    """A realistic DeepSeek output: reasoning, prose, two calls with non-ASCII arguments, trailing text."""
    if dialect == "deepseek_v3":
        block = v3_block(
            v3_call("get_weather", '{"city": "東京", "unit": "celsius", "days": 3}'),
            v3_call("search_hotels", '{\n  "location": "東京 👍🏽",\n  "check_in": "2025-01-15"\n}', fence_nl=False),
        )
    else:
        block = v31_block(
            v31_call("get_weather", '{"city": "東京", "unit": "celsius", "days": 3}'),
            v31_call("search_hotels", '{"location": "東京 👍🏽", "note": "a <b> ```c```"}'),
        )
    return "<think>\nThe user asks about 東京 < 3 days; check ``` and </th tags.\n</think>\n\nLet me check." + block + "\nDone."


@pytest.mark.shared
@pytest.mark.parametrize(("dialect", "family"), [("deepseek_v3", "deepseek-v3"), ("deepseek_v31", "deepseek-v3.1")])
def test_deepseek_output_streamed_token_by_token(shared: Path, dialect: str, family: str) -> None:
    """A real tokenization streamed token by token (and split once at every token boundary) rebuilds parse_complete."""
    tok = load_tokenizer(family)
    if tok is None:
        pytest.skip(f"shared/tokenizers/{family} is absent")
    text = deepseek_output(dialect)
    opts: dict[str, Any] = {"tool_parser": dialect, "reasoning_parser": "deepseek_r1"}
    want = parse_complete(text, **opts)
    assert [c.function.name for c in want.tool_calls] == ["get_weather", "search_hotels"]
    assert want.content == "\n\nLet me check.\nDone."
    ids = tok.encode(text, add_special_tokens=False).ids
    pieces = token_texts(tok, ids)
    assert "".join(pieces) == text
    assert DS_CALLS_BEGIN in pieces and DS_SEP in pieces  # the markers arrive as whole tokens
    streamed = accumulate(feed_chunks(pieces, chunking="tokens", **opts))
    assert message_key(streamed) == message_key(want)
    bounds = list(itertools.accumulate(len(p) for p in pieces))
    for b in bounds[:-1]:
        got = accumulate(feed_chunks(split_at(text, [b]), chunking="tokens", **opts))
        assert message_key(got) == message_key(want), b


def kimi_special_tokens(shared: Path) -> dict[str, Any]:
    """shared/tokenizers/kimi-k2/special_tokens.json (added tokens with verified ids; no vocabulary)."""
    path = shared / "tokenizers" / "kimi-k2" / "special_tokens.json"
    if not path.exists():
        pytest.skip("shared/tokenizers/kimi-k2 is absent")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


@pytest.mark.shared
def test_kimi_token_prefixes_follow_the_added_tokens(shared: Path) -> None:
    """Kimi openers that are added tokens declare no prefix; the text-only singular variant declares all of its own."""
    atomic = {t["content"] for t in kimi_special_tokens(shared)["tokens"]}
    d = registry.get_tool_dialect("kimi_k2")
    assert {K_SECTION, K_SECTION_END, K_CALL, K_ARG, K_CALL_END} <= atomic
    text_openers = [o for o in d.openers if o not in atomic]
    assert text_openers == ["<|tool_call_section_begin|>"]
    assert set(d.token_prefixes) == {o[:k] for o in text_openers for k in range(1, len(o))}
    spec = registry.get_reasoning_dialect("kimi_k2")
    assert {spec.start, spec.end, *spec.implicit_end, *spec.turn_markers} <= atomic
    assert spec.token_prefixes == ()


@pytest.mark.shared
def test_kimi_vocabulary_check(shared: Path) -> None:
    """Kimi markers in context against a real Kimi vocabulary (skipped: shared/tokenizers has none for Kimi K2)."""
    tok = load_tokenizer("kimi-k2")
    if tok is None:
        pytest.skip("no Kimi K2 vocabulary in shared/tokenizers (special_tokens.json only); see the surrogate test")
    d = registry.get_tool_dialect("kimi_k2")  # pragma: no cover - runs once a vocabulary is added
    found = set().union(*(boundary_prefixes(tok, o, CONTEXTS) for o in d.openers))
    assert found <= set(d.token_prefixes)


CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"


@pytest.mark.shared
def test_kimi_output_streamed_through_a_surrogate_tokenizer(shared: Path) -> None:
    """Streamed token by token through a Kimi surrogate tokenizer, an output rebuilds parse_complete with chunking="tokens"."""
    # The surrogate (shared/tokenizers/README.md): Kimi's added tokens at their real ids and Kimi's
    # pre-tokenizer over cl100k text ranks. Its text ids are NOT Kimi's (no vocabulary is available).
    tiktoken = pytest.importorskip("tiktoken")
    from tiktoken.load import load_tiktoken_bpe

    kimi = kimi_special_tokens(shared)
    ranks_path = shared / "tokenizers" / "cl100k" / "cl100k_base.tiktoken"
    if not ranks_path.exists():
        pytest.skip("shared/tokenizers/cl100k is absent")
    enc = tiktoken.Encoding(
        "kimi-surrogate",
        pat_str=kimi["pat_str"],
        mergeable_ranks=load_tiktoken_bpe(os.fspath(ranks_path), expected_hash=CL100K_SHA256),
        special_tokens={t["content"]: t["id"] for t in kimi["tokens"]},
    )
    text = (
        "<think>Check 東京 <| and <|tool_call, then call.</think>I'll check. "
        + k_block(k_call("get_weather", '{"city": "東京 👍🏽"}'), k_call("html", '{"m": "<|tool|>"}', 1))
        + " then <|tool_call_section_begin|>"
        + k_call("f", "{}", 2)
        + "<|tool_call_section_end|>"
    )
    utf8 = codecs.getincrementaldecoder("utf-8")()
    pieces = [utf8.decode(enc.decode_single_token_bytes(i)) for i in enc.encode(text, allowed_special="all")]
    assert "".join(pieces) == text
    opts: dict[str, Any] = {"tool_parser": "kimi_k2", "reasoning_parser": "kimi_k2"}
    want = parse_complete(text, **opts)
    assert [c.function.name for c in want.tool_calls] == ["get_weather", "html", "f"]
    assert want.content == "I'll check.  then "
    assert message_key(accumulate(feed_chunks(pieces, chunking="tokens", **opts))) == message_key(want)
