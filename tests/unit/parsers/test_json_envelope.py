"""The JSON envelope driver (hermes, internlm, llama3_json): the consumed-prefix contract and the payload rules."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest

from deltaflow import ResponseParser, accumulate, parse_complete
from deltaflow.items import Channel, ToolDelta
from deltaflow.parsers import DriverContext, JsonEnvelopeDriver, registry
from deltaflow.testing import check_chunkings, feed_chunks, message_key, split_at


def new_parser(dialect: str = "hermes") -> JsonEnvelopeDriver:
    """A parser for one block of ``dialect``."""
    counter = itertools.count()
    ctx = DriverContext(channel=Channel.CONTENT, new_call=lambda: next(counter), tools=None, dialect=dialect)
    parser = registry.get_tool_dialect(dialect).factory(ctx)
    assert isinstance(parser, JsonEnvelopeDriver)
    return parser


def calls(text: str, **kwargs: object) -> list[tuple[str, str]]:
    """(name, arguments) of the calls parsed from ``text``, checked on every chunking."""
    m = check_chunkings(text, **kwargs)  # type: ignore[arg-type]
    return [(c.function.name, c.function.arguments) for c in m.tool_calls]


# -- the consumed-prefix contract ----------------------------------------------------------


def test_unconsumed_tail_is_short_while_not_done() -> None:
    """Fed piece by piece, a block never leaves more than a short tail unconsumed."""
    text = (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "a long city name in a string", '
        '"n": 12345, "ok": true, "s": "\\u00e9\\n"}}\n</tool_call>'
    )
    p = new_parser()
    buf = ""
    for ch in text:
        buf += ch
        out: list[object] = []
        end = p.feed_tool_block(buf, out, False)
        buf = buf[end:]
        if p.done:
            break
        assert len(buf) <= len("</tool_call>\n"), repr(buf)
    assert p.done and buf == ""


def test_partial_closer_is_left_to_the_caller() -> None:
    """A partial closer at the chunk end is not consumed; the rest of the closer completes the block."""
    p = new_parser()
    text = '<tool_call>{"name": "f", "arguments": {}}</tool_'
    out: list[object] = []
    end = p.feed_tool_block(text, out, False)
    assert not p.done and text[end:].strip() == "</tool_"
    end2 = p.feed_tool_block(text[end:] + "call>rest", out, False)
    assert p.done and (text[end:] + "call>rest")[end2:] == "rest"


def test_malformed_block_gives_the_rest_back() -> None:
    """Malformed JSON ends the block at the offending character; nothing is consumed past it."""
    p = new_parser()
    text = "<tool_call>not json</tool_call>"
    out: list[object] = []
    end = p.feed_tool_block(text, out, False)
    assert p.done
    events = [e for e in out if isinstance(e, ToolDelta)]
    assert "".join(e.raw for e in events) + text[end:] == text
    assert any(e.abort for e in events) and not any(e.name for e in events)


# -- arguments are the model's own source text ----------------------------------------------


@dataclass(frozen=True)
class Args:
    """A hermes payload and the arguments text it must give."""

    label: str
    payload: str
    arguments: str


ARGS = [
    Args("spacing kept", '{"name": "f", "arguments": { "a" : [ 1 ,2 ] }}', '{ "a" : [ 1 ,2 ] }'),
    Args("key order kept", '{"name": "f", "arguments": {"z": 1, "a": 2}}', '{"z": 1, "a": 2}'),
    Args("duplicate keys kept", '{"name": "f", "arguments": {"a": 1, "a": 2}}', '{"a": 1, "a": 2}'),
    Args("escapes kept", '{"name": "f", "arguments": {"s": "caf\\u00e9 \\"q\\" \\n"}}', '{"s": "caf\\u00e9 \\"q\\" \\n"}'),
    Args("numbers kept", '{"name": "f", "arguments": {"n": -1.50e+10, "m": 0.0}}', '{"n": -1.50e+10, "m": 0.0}'),
    Args("literals", '{"name": "f", "arguments": {"t": true, "f": false, "z": null}}', '{"t": true, "f": false, "z": null}'),
    Args("nested", '{"name": "f", "arguments": {"a": {"b": [{"c": []}, {}]}}}', '{"a": {"b": [{"c": []}, {}]}}'),
    Args("unicode", '{"name": "f", "arguments": {"city": "東京 😀"}}', '{"city": "東京 😀"}'),
    Args("no arguments field", '{"name": "f"}', "{}"),
    Args("empty arguments", '{"name": "f", "arguments": {}}', "{}"),
    Args("arguments null", '{"name": "f", "arguments": null}', "{}"),
    Args("arguments as a JSON string", '{"name": "f", "arguments": "{\\"a\\": [1, \\"x\\"]}"}', '{"a": [1, "x"]}'),
    Args("arguments before name", '{"arguments": {"a": 1}, "name": "f"}', '{"a": 1}'),
    Args("parameters field", '{"name": "f", "parameters": {"a": 1}}', '{"a": 1}'),
    Args("other fields skipped", '{"id": 7, "name": "f", "meta": {"x": [1]}, "arguments": {"a": 1}}', '{"a": 1}'),
    Args("first arguments field wins", '{"name": "f", "arguments": {"a": 1}, "arguments": {"b": 2}}', '{"a": 1}'),
    Args("name with escape", '{"name": "f", "arguments": {"k": "\\\\"}}', '{"k": "\\\\"}'),
]


@pytest.mark.parametrize("case", ARGS, ids=[c.label for c in ARGS])
def test_arguments_are_source_text(case: Args) -> None:
    """The arguments are the model's own text, never re-serialized, on every chunking."""
    text = f"<tool_call>\n{case.payload}\n</tool_call>"
    assert calls(text, tool_parser="hermes") == [("f", case.arguments)]


def test_no_arguments_field_gives_braces_once() -> None:
    """Without an arguments field, "{}" is emitted exactly once, as the first delta's arguments or after it."""
    text = '<tool_call>{"name": "f"}</tool_call>'
    for chunks in ([text], list(text)):
        frags = [tc.function.arguments for d in feed_chunks(chunks, tool_parser="hermes") for tc in d.tool_calls]
        assert [a for a in frags if a] == ["{}"]


def test_decoded_name() -> None:
    """The function name is the decoded JSON string."""
    assert calls('<tool_call>{"name": "caf\\u00e9", "arguments": {}}</tool_call>', tool_parser="hermes") == [
        ("café", "{}")
    ]


# -- final=True and malformed payloads -----------------------------------------------------


@dataclass(frozen=True)
class Cut:
    """A block cut short by the end of the output, and what must come out."""

    label: str
    text: str
    arguments: str | None  # None: no call
    content: str | None


CUTS = [
    Cut("inside a string value", '<tool_call>{"name": "f", "arguments": {"a": "xy', '{"a": "xy"}', None),
    Cut("after a complete member", '<tool_call>{"name": "f", "arguments": {"a": 1', '{"a": 1}', None),
    Cut("inside a nested array", '<tool_call>{"name": "f", "arguments": {"a": [1, 2', '{"a": [1, 2]}', None),
    Cut("just after the arguments brace", '<tool_call>{"name": "f", "arguments": {', "{}", None),
    Cut("key without value", '<tool_call>{"name": "f", "arguments": {"a": 1, "b', '{"a": 1}', ', "b'),
    Cut("partial literal", '<tool_call>{"name": "f", "arguments": {"a": tr', "{}", '"a": tr'),
    Cut("before the closer", '<tool_call>{"name": "f", "arguments": {"a": 1}}', '{"a": 1}', None),
    Cut("partial closer", '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_c', '{"a": 1}', None),
    Cut("no name yet", '<tool_call>{"arguments": {"a": "xy', None, '<tool_call>{"arguments": {"a": "xy'),
    Cut("name cut short", '<tool_call>{"name": "f', None, '<tool_call>{"name": "f'),
    Cut("empty block", "<tool_call>", None, "<tool_call>"),
    Cut("only a brace", "<tool_call>{", None, "<tool_call>{"),
]


@pytest.mark.parametrize("case", CUTS, ids=[c.label for c in CUTS])
def test_final_closes_started_arguments_and_never_invents(case: Cut) -> None:
    """final=True closes an arguments object already started, never invents a name or value, and loses no text."""
    m = check_chunkings(case.text, tool_parser="hermes")
    got = [(c.function.name, c.function.arguments) for c in m.tool_calls]
    assert got == ([] if case.arguments is None else [("f", case.arguments)])
    assert m.content == case.content


@dataclass(frozen=True)
class Unused:
    """A named block whose remaining text the call cannot use."""

    label: str
    text: str
    surfaced: str  # must appear in the content
    committed: bool  # the arguments began: the call is completed; else it is no call and all of it is text


UNUSED = [
    Unused("string arguments not holding an object", '<tool_call>{"name": "f", "arguments": "not an object"}</tool_call>',
           '"not an object"', False),
    Unused("number arguments", '<tool_call>{"name": "f", "arguments": 5}</tool_call>', "5}", False),
    Unused("arguments key cut short at the end", '<tool_call>{"name": "f", "argu', '"argu', False),
    Unused("other field cut short at the end", '<tool_call>{"name": "f", "extra": "abc', '"abc', False),
    Unused("garbage after the arguments", '<tool_call>{"name": "f", "arguments": {"a": 1} 12}</tool_call>', "12}", True),
]


@pytest.mark.parametrize("case", UNUSED, ids=[c.label for c in UNUSED])
def test_text_a_named_call_cannot_use_is_surfaced(case: Unused) -> None:
    """Text of a named block that the call cannot use is surfaced as content on every chunking, never lost.

    A call whose arguments never began is no call: the whole block is content.
    """
    m = check_chunkings(case.text, tool_parser="hermes")
    assert [c.function.name for c in m.tool_calls] == (["f"] if case.committed else [])
    assert m.content is not None and case.surfaced in m.content
    if not case.committed:
        assert m.content == case.text


@pytest.mark.parametrize(
    "text",
    ["<tool_call>not json</tool_call>", "<tool_call>[1, 2]</tool_call>", '<tool_call>{"name": 5}</tool_call>',
     '<tool_call>{"name": ""}</tool_call>', '<tool_call>{"arguments": {}}</tool_call>'],
    ids=["prose", "array", "name not a string", "empty name", "no name"],
)
def test_block_without_a_usable_name_is_content(text: str) -> None:
    """A block that cannot name a call is surfaced whole as content."""
    m = check_chunkings("a" + text + "b", tool_parser="hermes")
    assert m.tool_calls == [] and m.content == "a" + text + "b"


def test_malformed_arguments_close_the_named_call() -> None:
    """Malformed JSON inside the arguments closes the named call at the last safe position; the rest is content."""
    m = check_chunkings('<tool_call>{"name": "f", "arguments": {"a": [1, "x"], "b" 2}}</tool_call>', tool_parser="hermes")
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [("f", '{"a": [1, "x"]}')]
    assert m.content == ', "b" 2}}</tool_call>'


def test_malformed_payload_on_the_final_chunk() -> None:
    """A malformed payload arriving with final=True is surfaced as content."""
    p = ResponseParser("hermes")
    deltas = p.feed("ok <tool_call>") + p.feed("{oops</tool_call>", final=True)
    assert "".join(d.content or "" for d in deltas) == "ok <tool_call>{oops</tool_call>"
    assert not any(d.tool_calls for d in deltas)


def test_raw_newline_inside_a_string_value() -> None:
    """A raw newline inside an argument string closes the call the same way on every chunking."""
    m = check_chunkings('<tool_call>{"name": "f", "arguments": {"a": "xy\nz"}}</tool_call>', tool_parser="hermes")
    assert [c.function.name for c in m.tool_calls] == ["f"]
    assert m.content is not None and m.content.endswith("</tool_call>")


# -- dialects ------------------------------------------------------------------------------


@pytest.mark.parametrize("sep", ["", " ", "\n", " \n\t"], ids=repr)
@pytest.mark.parametrize("field", ["parameters", "arguments"])
def test_internlm(sep: str, field: str) -> None:
    """internlm: optional whitespace between <|action_start|> and <|plugin|>; parameters or arguments."""
    text = f'hi<|action_start|>{sep}<|plugin|>\n{{"name": "f", "{field}": {{"a": 1}}}}<|action_end|>bye'
    m = check_chunkings(text, tool_parser="internlm")
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [("f", '{"a": 1}')]
    assert m.content == "hibye"


def test_internlm_missing_plugin_marker_is_content() -> None:
    """An action start not followed by the plugin marker is content."""
    text = "<|action_start|>oops"
    m = check_chunkings(text, tool_parser="internlm")
    assert m.tool_calls == [] and m.content == text


@dataclass(frozen=True)
class Llama:
    """A llama3_json output and what it must give."""

    label: str
    text: str
    calls: list[tuple[str, str]]
    content: str | None


LLAMA = [
    Llama("bare object", '{"name": "f", "parameters": {"a": 1}}', [("f", '{"a": 1}')], None),
    Llama("python tag", '<|python_tag|>{"name": "f", "parameters": {"a": 1}}', [("f", '{"a": 1}')], None),
    Llama("arguments field", '{"name": "f", "arguments": {"a": 1}}', [("f", '{"a": 1}')], None),
    Llama("leading whitespace", '  \n{"name": "f", "parameters": {}}', [("f", "{}")], "  \n"),
    Llama(
        "semicolon joined",
        '<|python_tag|>{"name": "f", "parameters": {"a": 1}}; {"name": "g", "parameters": {"b": 2}}',
        [("f", '{"a": 1}'), ("g", '{"b": 2}')],
        None,
    ),
    Llama(
        "semicolon joined without tag",
        '{"name": "f", "parameters": {}};{"name": "g", "parameters": {}}',
        [("f", "{}"), ("g", "{}")],
        None,
    ),
    Llama(
        "repeated python tag",
        '<|python_tag|>{"name": "f", "parameters": {}}<|python_tag|>{"name": "g", "parameters": {}}',
        [("f", "{}"), ("g", "{}")],
        None,
    ),
    Llama("prose then JSON stays content", 'Here: {"name": "f", "parameters": {}}', [], 'Here: {"name": "f", "parameters": {}}'),
    Llama("text after a call stays content", '{"name": "f", "parameters": {}} and more', [("f", "{}")], " and more"),
    Llama("trailing semicolon stays content", '{"name": "f", "parameters": {}};', [("f", "{}")], ";"),
    Llama("tag after prose", 'Sure. <|python_tag|>{"name": "f", "parameters": {}}', [("f", "{}")], "Sure. "),
    Llama("object without name is content", '{"nope": 1}', [], '{"nope": 1}'),
]


@pytest.mark.parametrize("case", LLAMA, ids=[c.label for c in LLAMA])
def test_llama3_json(case: Llama) -> None:
    """llama3_json: optional <|python_tag|>, ";"-joined calls, bare "{" only at the start."""
    m = check_chunkings(case.text, tool_parser="llama3_json")
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == case.calls
    assert m.content == case.content


@pytest.mark.parametrize("dialect", ["hermes", "internlm", "llama3_json"])
def test_every_marker_split_at_every_position(dialect: str) -> None:
    """Markers split at every position across two chunks give the same message."""
    texts = {
        "hermes": 'a<tool_call>{"name": "f", "arguments": {"x": "y"}}</tool_call>\n<tool_call>{"name": "g"}</tool_call>b',
        "internlm": 'a<|action_start|> <|plugin|>{"name": "f", "parameters": {"x": 1}}<|action_end|>b',
        "llama3_json": '<|python_tag|>{"name": "f", "parameters": {"x": 1}}; {"name": "g", "parameters": {}}',
    }
    text = texts[dialect]
    want = parse_complete(text, tool_parser=dialect)
    assert want.tool_calls
    for i in range(1, len(text)):
        for j in (i + 1, i + 5):
            got = feed_chunks(split_at(text, [i, j]), tool_parser=dialect)
            assert message_key(accumulate(got)) == message_key(want), (i, j)
