"""The pythonic driver (``pythonic``, ``llama4_pythonic``): call lists parsed safely, never evaluated."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from deltaflow import ResponseParser, accumulate, parse_complete
from deltaflow.items import Channel
from deltaflow.parsers import DriverContext, registry
from deltaflow.parsers.drivers.pythonic import PYTHON_END, PYTHON_START, PythonicDriver, literal_to_json
from deltaflow.stages.detokenize import make_decoder
from deltaflow.testing import check_chunkings, feed_chunks, load_tokenizer, message_key, split_at

DIALECTS = ("pythonic", "llama4_pythonic")
TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
    for n in ("get_weather", "search", "ping")
]


def new_parser() -> PythonicDriver:
    """A parser for one call list."""
    counter = itertools.count()
    ctx = DriverContext(channel=Channel.CONTENT, new_call=lambda: next(counter), tools=None, dialect="pythonic")
    parser = registry.get_tool_dialect("pythonic").factory(ctx)
    assert isinstance(parser, PythonicDriver)
    return parser


@dataclass(frozen=True)
class Case:
    """A pythonic output and what it must give."""

    label: str
    text: str
    calls: list[tuple[str, str]]
    content: str | None


CASES = [
    Case(
        "single call",
        "[get_weather(city='Paris', unit=\"celsius\")]",
        [("get_weather", '{"city": "Paris", "unit": "celsius"}')],
        None,
    ),
    Case(
        "several calls",
        "[get_weather(city='LA'), search(query='x', n=3), ping()]",
        [("get_weather", '{"city": "LA"}'), ("search", '{"query": "x", "n": 3}'), ("ping", "{}")],
        None,
    ),
    Case("no-argument call", "[ping()]", [("ping", "{}")], None),
    Case(
        "literal types",
        "[f(i=-37, x=1.5e3, t=True, f=False, n=None, l=[1, 'a'], d={'k': {'n': [None]}}, e={}, tu=(1, 2))]",
        [("f", '{"i": -37, "x": 1500.0, "t": true, "f": false, "n": null, "l": [1, "a"], "d": {"k": {"n": [null]}}, '
               '"e": {}, "tu": [1, 2]}')],
        None,
    ),
    Case(
        "string escapes and quotes",
        "[f(a='Martha\\'s', b=\"say \\\"hi\\\"\", c='tab\\there', d='\\u00e9\\N{BULLET}', e='''tri'ple''', f=r'\\d+')]",
        [("f", '{"a": "Martha\'s", "b": "say \\"hi\\"", "c": "tab\\there", "d": "é•", '
               '"e": "tri\'ple", "f": "\\\\d+"}')],
        None,
    ),
    Case(
        "brackets and commas inside strings",
        "[f(a='x, y)]', b=[')'])]",
        [("f", '{"a": "x, y)]", "b": [")"]}')],
        None,
    ),
    Case("implicit string concatenation", "[f(a='ab' \"cd\")]", [("f", '{"a": "abcd"}')], None),
    Case("trailing commas", "[f(a=1,), g(),]", [("f", '{"a": 1}'), ("g", "{}")], None),
    Case(
        "whitespace and newlines",
        " \n[\n  f( a = 1 ,\n b=2 ),\n  g()\n]",
        [("f", '{"a": 1, "b": 2}'), ("g", "{}")],
        " \n",
    ),
    Case("dotted name", "[ns.tool(a=1)]", [("ns.tool", '{"a": 1}')], None),
    Case("unicode", "[f(city='東京 😀', naïve=1)]", [("f", '{"city": "東京 😀", "naïve": 1}')], None),
    Case("JSON literals accepted", "[f(a=true, b=null)]", [("f", '{"a": true, "b": null}')], None),
    Case("text after the list", "[f()] Here is the forecast.", [("f", "{}")], " Here is the forecast."),
    Case("two lists", "[f()]\n[g()]", [("f", "{}"), ("g", "{}")], None),
    Case("llama4 wrapper", f"{PYTHON_START}[f(a=1)]{PYTHON_END}", [("f", '{"a": 1}')], None),
    Case("wrapper without closer", f"{PYTHON_START}[f(a=1), g()]", [("f", '{"a": 1}'), ("g", "{}")], None),
    Case("wrapper after prose", f"Checking. {PYTHON_START}[f()]{PYTHON_END} Done.", [("f", "{}")], "Checking.  Done."),
]


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("case", CASES, ids=[c.label for c in CASES])
def test_call_lists(case: Case, dialect: str) -> None:
    """Call lists give their calls with JSON arguments; the text around them is content."""
    m = check_chunkings(case.text, tool_parser=dialect)
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == case.calls
    assert m.content == case.content
    for c in m.tool_calls:
        assert isinstance(json.loads(c.function.arguments), dict)


NOT_CALLS = [
    "[1, 2, 3]",
    "[see above]",
    "[]",
    "[Note (see below)]",
    "[[1, 2], [3]]",
    "[f]",
    "[1.5(a=1)]",
    f"{PYTHON_START}print('hi'){PYTHON_END}",
    "Here is a list: [f(a=1)]",
    "[",
]


@pytest.mark.parametrize("text", NOT_CALLS)
def test_text_that_is_not_a_call_list_is_content_unchanged(text: str) -> None:
    """Output that is not a call list (or a list after prose) is surfaced as content, unchanged."""
    m = check_chunkings(text, tool_parser="pythonic")
    assert m.tool_calls == [] and m.content == text


@dataclass(frozen=True)
class Broken:
    """A call list that goes wrong after a name, and what must come out."""

    label: str
    text: str
    calls: list[tuple[str, str]]
    content: str | None


BROKEN = [
    Broken("positional argument", "[f(1)]", [], "[f(1)]"),
    Broken("positional after keyword", "[f(a=1, 2)]", [("f", '{"a": 1}')], ", 2)]"),
    Broken("a name is not a literal", "[f(a=1, b=foo)]", [("f", '{"a": 1}')], ", b=foo)]"),
    Broken("a call is not a literal", "[f(a=open('x'))]", [], "[f(a=open('x'))]"),
    Broken(
        "no call for what is not a call",
        '[get_weather(city=__import__("os").system("id"))]',
        [],
        '[get_weather(city=__import__("os").system("id"))]',
    ),
    Broken("a set is not JSON", "[f(a={1, 2})]", [], "[f(a={1, 2})]"),
    Broken("mismatched bracket", "[f(a=[1)]", [], "[f(a=[1)]"),
    Broken("junk between calls", "[f() g()]", [("f", "{}")], " g()]"),
    Broken("keyword without '='", "[f(a b)]", [], "[f(a b)]"),
    Broken("junk after a call", "[f(), 5]", [("f", "{}")], ", 5]"),
    Broken("cut inside a string", "[f(a=1, b='unfinished", [("f", '{"a": 1}')], ", b='unfinished"),
    Broken("cut inside a list value", "[f(a=1, b=[2, 3", [("f", '{"a": 1}')], ", b=[2, 3"),
    Broken("cut after a complete list value", "[f(a=1, b=[2, 3]", [("f", '{"a": 1, "b": [2, 3]}')], None),
    Broken("cut after a scalar", "[f(a=1, b=2", [("f", '{"a": 1, "b": 2}')], None),
    Broken("cut after the parenthesis", "[f(", [], "[f("),
    Broken("cut before the parenthesis", "[f", [], "[f"),
]


@pytest.mark.parametrize("case", BROKEN, ids=[c.label for c in BROKEN])
def test_malformed_or_cut_call_is_completed_and_the_rest_surfaced(case: Broken) -> None:
    """A committed call is completed with the arguments read so far; text it cannot use is content, never lost.

    A call whose payload never began (no literal after its name) is no call: it is content, whole.
    """
    m = check_chunkings(case.text, tool_parser="pythonic")
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == case.calls
    assert m.content == case.content


def test_unknown_name_is_filtered_when_tools_are_given() -> None:
    """A call to a tool not offered is never emitted; its text is surfaced; offered calls go on."""
    m = check_chunkings("[rm_rf(path='/'), ping()]", tool_parser="pythonic", tools=TOOLS)
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [("ping", "{}")]
    assert m.content == "[rm_rf(path='/')"


AFTER_PROSE = [
    Case(
        "offered name after prose",
        "Let me check: [get_weather(city='Paris')]",
        [("get_weather", '{"city": "Paris"}')],
        "Let me check: ",
    ),
    Case(
        "two lists with prose between",
        "[ping()] and then [search(query='x')] done",
        [("ping", "{}"), ("search", '{"query": "x"}')],
        " and then  done",
    ),
    Case("another name after prose is prose", "Use [print(x)] here", [], "Use [print(x)] here"),
    Case("a list of values after prose is prose", "See [1, 2] and [ping]", [], "See [1, 2] and [ping]"),
    Case(
        "an offered name cut at the end is surfaced",
        "Checking: [get_weath",
        [],
        "Checking: [get_weath",
    ),
]


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("case", AFTER_PROSE, ids=[c.label for c in AFTER_PROSE])
def test_offered_name_opens_a_list_after_prose(case: Case, dialect: str) -> None:
    """With tools, ``[NAME(`` of an offered tool opens a call list anywhere; other brackets in prose stay prose."""
    for chunking in ("any", "tokens"):
        m = check_chunkings(case.text, tool_parser=dialect, tools=TOOLS, chunking=chunking)
        assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == case.calls
        assert m.content == case.content


def test_without_tools_a_list_after_prose_stays_prose() -> None:
    """Without tools no name is known, so only a list at the start of the output is a call list."""
    m = check_chunkings("Let me check: [get_weather(city='Paris')]", tool_parser="pythonic")
    assert (m.tool_calls, m.content) == ([], "Let me check: [get_weather(city='Paris')]")


def test_reasoning_and_tools_in_one_chunk() -> None:
    """A reasoning block then a call list, in one chunk: the list opens at the start of the content."""
    text = "<think>Use the tool.</think>\n[get_weather(city='Paris')]"
    m = check_chunkings(text, tool_parser="pythonic", reasoning_parser="qwen3")
    assert m.reasoning_content == "Use the tool."
    assert m.content == "\n"
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [("get_weather", '{"city": "Paris"}')]
    one_chunk = accumulate(feed_chunks([text], tool_parser="pythonic", reasoning_parser="qwen3"))
    assert message_key(one_chunk) == message_key(m)


def test_malformed_payload_on_the_final_chunk() -> None:
    """A malformed list arriving with final=True is surfaced as content."""
    p = ResponseParser("pythonic")
    deltas = p.feed("[") + p.feed("1, oops(", final=True)
    assert "".join(d.content or "" for d in deltas) == "[1, oops("
    assert not any(d.tool_calls for d in deltas)


def test_name_then_each_value_is_streamed() -> None:
    """The name comes with "name(", each keyword when its value ends; fragments form one JSON object."""
    chunks = ["[get_weather(", "city='Par", "is', unit=", "'c'", ")", "]"]
    deltas = feed_chunks(chunks, tool_parser="pythonic")
    per_chunk = [[(tc.function.name, tc.function.arguments or "") for tc in d.tool_calls] for d in deltas]
    flat = [x for xs in per_chunk for x in xs]
    assert flat[0][0] == "get_weather"
    assert "".join(a for _, a in flat) == '{"city": "Paris", "unit": "c"}'
    # A value ends at the "," or ")" after it: "'c'" waits for ")", which also closes the object.
    assert [a for _, a in flat if a] == ['{"city": "Paris"', ', "unit": "c"}']


def test_literal_to_json_never_evaluates() -> None:
    """Names, calls, operators and attribute access are refused, not evaluated."""
    refused = ("__import__('os')", "open('x')", "1 + 2", "x", "(lambda: 1)()", "[].__class__", "2 ** 10")
    for src in refused + ("{1, 2}", "b'x'", "1j"):
        assert literal_to_json(src) is None, src
    assert literal_to_json(" -1 ") == "-1"
    assert literal_to_json("float('nan')") is None
    assert literal_to_json("'\\ud800'") == '"\\ud800"'  # a lone surrogate is escaped, never raw


# -- the consumed-prefix contract ------------------------------------------------------------


def test_unconsumed_tail_is_short_while_not_done() -> None:
    """Fed one character at a time, a list never leaves more than a short tail unconsumed."""
    text = f"{PYTHON_START}[get_weather(city='''a long\ncity''', days=[1, 2], note=\"x\\\"y\"), ping()]{PYTHON_END}"
    p = new_parser()
    buf = ""
    for ch in text:
        buf += ch
        end = p.feed_tool_block(buf, [], False)
        buf = buf[end:]
        if p.done:
            break
        assert len(buf) < len(PYTHON_START), repr(buf)
    assert p.done and buf == ""


def test_every_split_position() -> None:
    """Splitting a list at every pair of positions gives the same message."""
    text = f"  {PYTHON_START}[f(a='x, y', b=[1, {{'k': \"\"\"v\"\"\"}}]), g()]{PYTHON_END} bye"
    want = parse_complete(text, tool_parser="llama4_pythonic")
    assert len(want.tool_calls) == 2
    for i in range(1, len(text)):
        for j in (i + 1, i + 4):
            got = feed_chunks(split_at(text, [i, j]), tool_parser="llama4_pythonic")
            assert message_key(accumulate(got)) == message_key(want), (i, j)


# -- real tokenizers (shared/tokenizers/llama3) ----------------------------------------------


def llama3() -> Any:
    """The Llama 3.2 tokenizer (skips when shared/ is absent)."""
    tok = load_tokenizer("llama3")
    if tok is None:
        pytest.skip("shared/tokenizers/llama3 is not beside this checkout")
    return tok


@pytest.mark.shared
def test_declared_token_prefixes_match_llama3(shared: Path) -> None:
    """A call list's first token begins with "["; the Llama 4 wrapper tokens are not in Llama 3.2's vocabulary."""
    tok = llama3()
    assert registry.get_tool_dialect("llama4_pythonic").token_prefixes == ()
    assert tok.token_to_id("<|python_tag|>") == 128010  # the right family
    assert tok.token_to_id(PYTHON_START) is None and tok.token_to_id(PYTHON_END) is None
    # Written out in Llama 3.2 text, the wrapper splits into ordinary tokens: their prefixes are declared.
    pieces = [tok.decode([i]) for i in tok.encode(PYTHON_START, add_special_tokens=False).ids]
    spelled = {"".join(pieces[:k]) for k in range(1, len(pieces))}
    assert spelled <= set(registry.get_tool_dialect("pythonic").token_prefixes)
    for text in ("[get_weather(city=\"Paris\")]", " [f()]", "\n\n[search(query='x'), ping()]"):
        offsets = tok.encode(text, add_special_tokens=False).offsets
        a, b = next((a, b) for a, b in offsets if text[a:b].strip())
        # The first visible token begins with "[" (" [" and "[" are both tokens): the start opener,
        # one character, is never split, and nothing before it needs holding back.
        assert text[a:b].lstrip().startswith("["), (text, text[a:b])


@pytest.mark.shared
def test_token_by_token_stream_matches_complete(shared: Path) -> None:
    """A realistic output decoded token by token and streamed with chunking="tokens" rebuilds parse_complete."""
    tok = llama3()
    text = (
        "[get_weather(city='São Paulo 🌧', days=[1, 2], opts={'unit': \"celsius\", 'alerts': True}), "
        "search(query='''multi\nline''', n=None)]"
    )
    ids = tok.encode(text, add_special_tokens=False).ids
    dec = make_decoder(tok, keep=registry.get_tool_dialect("pythonic").markers)
    pieces = [dec.step(i) for i in ids] + [dec.flush()]
    assert "".join(pieces) == text
    got = accumulate(feed_chunks(pieces, tool_parser="pythonic", chunking="tokens"))
    want = parse_complete(text, tool_parser="pythonic")
    assert message_key(got) == message_key(want)
    assert [(c.function.name, json.loads(c.function.arguments)) for c in want.tool_calls] == [
        ("get_weather", {"city": "São Paulo 🌧", "days": [1, 2], "opts": {"unit": "celsius", "alerts": True}}),
        ("search", {"query": "multi\nline", "n": None}),
    ]
    assert want.content is None
