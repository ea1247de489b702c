"""The Mistral ``[TOOL_CALLS]`` driver and the ``mistral`` reasoning parser (shared/dialects.md section 5)."""

from __future__ import annotations

import codecs
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

from deltaflow import ResponseParser, accumulate, parse_complete
from deltaflow.items import Channel
from deltaflow.parsers import DriverContext, registry
from deltaflow.parsers.drivers.mistral import ARGS, CALL_ID, MARKER, MistralDriver
from deltaflow.stages.detokenize import make_decoder
from deltaflow.testing import check_chunkings, feed_chunks, message_key, split_at

TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
    for n in ("get_weather", "add", "ping")
]


def new_parser() -> MistralDriver:
    """A parser for one ``[TOOL_CALLS]`` block."""
    counter = itertools.count()
    ctx = DriverContext(channel=Channel.CONTENT, new_call=lambda: next(counter), tools=None, dialect="mistral")
    parser = registry.get_tool_dialect("mistral").factory(ctx)
    assert isinstance(parser, MistralDriver)
    return parser


def calls(text: str, **kwargs: Any) -> list[tuple[str, str]]:
    """(name, arguments) of the calls parsed from ``text``, checked on every chunking."""
    m = check_chunkings(text, tool_parser="mistral", **kwargs)
    return [(c.function.name, c.function.arguments) for c in m.tool_calls]


# -- the three generations -------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A Mistral output and what it must give."""

    label: str
    text: str
    calls: list[tuple[str, str]]
    content: str | None


CASES = [
    Case(
        "pre-v11 array",
        '[TOOL_CALLS][{"name": "add", "arguments": {"a": 3.5, "b": 4}}]',
        [("add", '{"a": 3.5, "b": 4}')],
        None,
    ),
    Case(
        "pre-v11 space after the marker",
        '[TOOL_CALLS] [{"name": "add", "arguments": {"a": 1}}]',
        [("add", '{"a": 1}')],
        None,
    ),
    Case(
        "pre-v11 several calls",
        '[TOOL_CALLS] [{"name": "add", "arguments": {"a": 1}}, '
        '{"name": "get_weather", "arguments": {"city": "Paris"}}]',
        [("add", '{"a": 1}'), ("get_weather", '{"city": "Paris"}')],
        None,
    ),
    Case(
        "pre-v11 arguments before name",
        '[TOOL_CALLS] [{"arguments": {"name": "x"}, "name": "f"}]',
        [("f", '{"name": "x"}')],
        None,
    ),
    Case(
        "pre-v11 stringified arguments",
        '[TOOL_CALLS] [{"name": "f", "arguments": "{\\"a\\": [1]}"}]',
        [("f", '{"a": [1]}')],
        None,
    ),
    Case("pre-v11 null arguments", '[TOOL_CALLS] [{"name": "f", "arguments": null}]', [("f", "{}")], None),
    Case("pre-v11 no arguments member", '[TOOL_CALLS] [{"name": "f", "id": "abcDEF123"}]', [("f", "{}")], None),
    Case("pre-v11 bare object", '[TOOL_CALLS] {"name": "f", "arguments": {"a": 1}}', [("f", '{"a": 1}')], None),
    Case(
        "pre-v11 spacing kept",
        '[TOOL_CALLS]  [ {"name":"f" , "arguments" : { "a" : [ 1 ,2 ] } } ]',
        [("f", '{ "a" : [ 1 ,2 ] }')],
        None,
    ),
    Case("repeated marker", '[TOOL_CALLS] [TOOL_CALLS] [{"name": "f", "arguments": {}}]', [("f", "{}")], None),
    Case("v11 call id", '[TOOL_CALLS]f[CALL_ID]abcDEF123[ARGS]{"a": 1}', [("f", '{"a": 1}')], None),
    Case(
        "v13 args marker",
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}',
        [("get_weather", '{"city": "Paris"}')],
        None,
    ),
    Case(
        "v11 without the args marker",
        '[TOOL_CALLS]get_weather{"city": "Paris"}',
        [("get_weather", '{"city": "Paris"}')],
        None,
    ),
    Case(
        "v13 parallel calls",
        '[TOOL_CALLS]add[ARGS]{"a": 1}[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}',
        [("add", '{"a": 1}'), ("get_weather", '{"city": "Paris"}')],
        None,
    ),
    Case(
        "v13 whitespace between calls",
        '[TOOL_CALLS]add[ARGS]{}\n[TOOL_CALLS]ping[ARGS]{}',
        [("add", "{}"), ("ping", "{}")],
        None,
    ),
    Case("no-argument call at the end", "[TOOL_CALLS]ping", [("ping", "{}")], None),
    Case(
        "no-argument call before another",
        "[TOOL_CALLS]ping[TOOL_CALLS]add[ARGS]{}",
        [("ping", "{}"), ("add", "{}")],
        None,
    ),
    Case("args marker without object", "[TOOL_CALLS]ping[ARGS]", [("ping", "{}")], None),
    Case("content before the marker", 'Sure. [TOOL_CALLS]add[ARGS]{"a": 1}', [("add", '{"a": 1}')], "Sure."),
    Case("blanks before the marker are framing", 'Sure.\n\n[TOOL_CALLS]add[ARGS]{"a": 1}', [("add", '{"a": 1}')], "Sure."),
    Case("blanks before a non-call stay", "Sure. [TOOL_CALLS] 42", [], "Sure. [TOOL_CALLS] 42"),
    Case("text after the block", '[TOOL_CALLS]add[ARGS]{"a": 1} done', [("add", '{"a": 1}')], " done"),
    Case("text after the array", '[TOOL_CALLS] [{"name": "add", "arguments": {}}]\nextra', [("add", "{}")], "\nextra"),
    Case(
        "marker text inside a string value",
        '[TOOL_CALLS]f[ARGS]{"s": "[TOOL_CALLS]x[ARGS]{"}',
        [("f", '{"s": "[TOOL_CALLS]x[ARGS]{"}')],
        None,
    ),
    Case("unicode", '[TOOL_CALLS]f[ARGS]{"city": "東京 😀"}', [("f", '{"city": "東京 😀"}')], None),
]


@pytest.mark.parametrize("case", CASES, ids=[c.label for c in CASES])
def test_generations(case: Case) -> None:
    """Every generation's form gives its calls, the model's own argument text and the content around it."""
    m = check_chunkings(case.text, tool_parser="mistral")
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == case.calls
    assert m.content == case.content


NOT_CALLS = [
    "[TOOL_CALLS] not json at all",
    "[TOOL_CALLS] 42",
    '[TOOL_CALLS] ["add"]',
    '[TOOL_CALLS] {"foo": 1}',
    "[TOOL_CALLS] []",
    '[TOOL_CALLS] [{"arguments": {"a": 1}}]',
    '[TOOL_CALLS][ARGS]{"a": 1}',
    '[TOOL_CALLS] [{"name": "", "arguments": {}}]',
    "[TOOL_CALLS]",
    "[TOOL_CALLS]get weather",
]


@pytest.mark.parametrize("payload", NOT_CALLS)
def test_payload_without_a_name_is_content(payload: str) -> None:
    """A payload that never names a call is surfaced whole, marker included (no name is invented)."""
    text = "a " + payload + " b"
    m = check_chunkings(text, tool_parser="mistral")
    assert m.tool_calls == [] and m.content == text


def test_name_before_the_marker_is_content() -> None:
    """A name written before the marker (vLLM's name "") makes no call; the valid call after it does."""
    text = 'bash[TOOL_CALLS]{"command": "ls"}[TOOL_CALLS]submit[ARGS]{"answer": 1}'
    m = check_chunkings(text, tool_parser="mistral")
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [("submit", '{"answer": 1}')]
    assert m.content == 'bash[TOOL_CALLS]{"command": "ls"}'


def test_array_element_without_name_is_surfaced_and_the_next_one_called() -> None:
    """A nameless array element is content; the elements after it are still calls."""
    text = '[TOOL_CALLS] [{"arguments": {"a": 1}}, {"name": "f", "arguments": {}}]'
    m = check_chunkings(text, tool_parser="mistral")
    assert [c.function.name for c in m.tool_calls] == ["f"]
    assert m.content == '[TOOL_CALLS] [{"arguments": {"a": 1}}'


def test_non_object_element_ends_the_block() -> None:
    """A non-object array element is content, after the calls before it."""
    m = check_chunkings('[TOOL_CALLS] [{"name": "add", "arguments": {"a": 1}}, "junk"]', tool_parser="mistral")
    assert [c.function.name for c in m.tool_calls] == ["add"]
    assert m.content == ', "junk"]'


# -- ids -----------------------------------------------------------------------------------


def call_ids(text: str) -> list[str]:
    """The ids of the calls parsed from ``text`` (whole and one character at a time)."""
    ids = [c.id for c in parse_complete(text, tool_parser="mistral", id_factory=lambda: "ours").tool_calls]
    streamed = accumulate(feed_chunks(list(text), tool_parser="mistral", id_factory=lambda: "ours"))
    assert [c.id for c in streamed.tool_calls] == ids
    return ids


def test_v11_call_id_is_the_call_id() -> None:
    """[CALL_ID] gives the call its id."""
    text = '[TOOL_CALLS]f[CALL_ID]000000001[ARGS]{"a": 1}[TOOL_CALLS]g[CALL_ID]000000002[ARGS]{}'
    assert call_ids(text) == ["000000001", "000000002"]


def test_pre_v11_id_before_the_arguments_is_the_call_id() -> None:
    """An "id" member before "arguments" gives the call its id."""
    assert call_ids('[TOOL_CALLS] [{"name": "f", "id": "abcDEF123", "arguments": {"a": 1}}]') == ["abcDEF123"]
    assert call_ids('[TOOL_CALLS] [{"id": "abcDEF123", "arguments": {}, "name": "f"}]') == ["abcDEF123"]


def test_pre_v11_id_after_the_arguments_is_not_waited_for() -> None:
    """An "id" after the arguments comes too late: the call was announced, with an id of our own."""
    assert call_ids('[TOOL_CALLS] [{"name": "f", "arguments": {"a": 1}, "id": "abcDEF123"}]') == ["ours"]


# -- tools, reasoning, malformed and final ---------------------------------------------------


def test_unknown_name_is_filtered_when_tools_are_given() -> None:
    """A call to a tool not offered is never emitted; its text is surfaced; offered calls go on."""
    text = 'ok [TOOL_CALLS]rm_rf[ARGS]{"path": "/"}[TOOL_CALLS]add[ARGS]{"a": 1}'
    m = check_chunkings(text, tool_parser="mistral", tools=TOOLS)
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [("add", '{"a": 1}')]
    assert m.content == 'ok [TOOL_CALLS]rm_rf[ARGS]{"path": "/"}'


def test_unknown_name_in_an_array_is_filtered() -> None:
    """An array element naming a tool not offered is surfaced; the others are calls."""
    text = '[TOOL_CALLS] [{"name": "add", "arguments": {}}, {"name": "nope", "arguments": {"x": 1}}]'
    m = check_chunkings(text, tool_parser="mistral", tools=TOOLS)
    assert [c.function.name for c in m.tool_calls] == ["add"]
    assert m.content == ', {"name": "nope", "arguments": {"x": 1}}]'


def test_reasoning_and_tools_in_one_chunk() -> None:
    """[THINK]...[/THINK] then a call, all in one chunk: reasoning, then the call."""
    text = '[THINK]Need the weather tool.[/THINK][TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}'
    m = check_chunkings(text, tool_parser="mistral", reasoning_parser="mistral")
    assert m.reasoning_content == "Need the weather tool."
    assert m.content is None
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [("get_weather", '{"city": "Paris"}')]
    deltas = feed_chunks([text], tool_parser="mistral", reasoning_parser="mistral")
    assert message_key(accumulate(deltas)) == message_key(m)


def test_reasoning_is_not_opened_by_the_prompt() -> None:
    """Output without [THINK] is content (the model opens its reasoning itself)."""
    m = check_chunkings("Hello [/THINK] world", reasoning_parser="mistral")
    assert m.reasoning_content is None and m.content == "Hello [/THINK] world"


def test_unclosed_reasoning_is_all_reasoning() -> None:
    """[THINK] without [/THINK] is reasoning to the end."""
    m = check_chunkings("[THINK]still thinking", reasoning_parser="mistral")
    assert m.reasoning_content == "still thinking" and m.content is None


@dataclass(frozen=True)
class Cut:
    """An output cut by the end, and what must come out."""

    label: str
    text: str
    calls: list[tuple[str, str]]
    content: str | None


CUTS = [
    Cut("inside a string value", '[TOOL_CALLS]f[ARGS]{"a": "xy', [("f", '{"a": "xy"}')], None),
    Cut("after a member", '[TOOL_CALLS]f[ARGS]{"a": 1', [("f", '{"a": 1}')], None),
    Cut("key without value", '[TOOL_CALLS]f[ARGS]{"a": 1, "b', [("f", '{"a": 1}')], ', "b'),
    Cut("just after the brace", "[TOOL_CALLS]f[ARGS]{", [("f", "{}")], None),
    Cut("after the call id", "[TOOL_CALLS]f[CALL_ID]abc", [("f", "{}")], None),
    Cut("array element cut", '[TOOL_CALLS] [{"name": "f", "arguments": {"a": [1', [("f", '{"a": [1]}')], None),
    Cut("array before the name ends", '[TOOL_CALLS] [{"name": "f', [], '[TOOL_CALLS] [{"name": "f'),
    Cut("array after a complete call", '[TOOL_CALLS] [{"name": "f", "arguments": {}}, ', [("f", "{}")], ", "),
    Cut("partial marker", "[TOOL_CALLS]f[AR", [], "[TOOL_CALLS]f[AR"),
]


@pytest.mark.parametrize("case", CUTS, ids=[c.label for c in CUTS])
def test_final_completes_a_named_call_and_never_invents(case: Cut) -> None:
    """final=True closes started arguments, never invents a name or value, and loses no text."""
    m = check_chunkings(case.text, tool_parser="mistral")
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == case.calls
    assert m.content == case.content


def test_malformed_arguments_close_the_named_call() -> None:
    """Invalid JSON in the arguments closes the call at the last safe position; the rest is content."""
    m = check_chunkings('[TOOL_CALLS]f[ARGS]{"a": [1, "x"], "b" 2} tail', tool_parser="mistral")
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [("f", '{"a": [1, "x"]}')]
    assert m.content == ', "b" 2} tail'


SHAPES = [
    Cut("call id then a bare object", '[TOOL_CALLS]f[CALL_ID]abc{"a": 1}', [("f", '{"a": 1}')], None),
    Cut("junk after the call id", "[TOOL_CALLS]f[CALL_ID]abc junk", [], "[TOOL_CALLS]f[CALL_ID]abc junk"),
    Cut("args marker then the next call", "[TOOL_CALLS]f[ARGS][TOOL_CALLS]g[ARGS]{}", [("f", "{}"), ("g", "{}")], None),
    Cut("junk after the args marker", "[TOOL_CALLS]f[ARGS]junk", [], "[TOOL_CALLS]f[ARGS]junk"),
    Cut("array after the args marker", "[TOOL_CALLS]f[ARGS][1]", [], "[TOOL_CALLS]f[ARGS][1]"),
    Cut("junk between elements", '[TOOL_CALLS] [{"name": "f"} junk]', [("f", "{}")], " junk]"),
    Cut("empty element", "[TOOL_CALLS] [{}]", [], "[TOOL_CALLS] [{}]"),
    Cut("missing comma between members", '[TOOL_CALLS] [{"name": "f" "x"}]', [], '[TOOL_CALLS] [{"name": "f" "x"}]'),
    Cut("invalid member value", '[TOOL_CALLS] [{"name": "f", "k": tru}]', [], '[TOOL_CALLS] [{"name": "f", "k": tru}]'),
    Cut("control character in a key", '[TOOL_CALLS] [{"name": "f", "a\x01": 1}]', [],
        '[TOOL_CALLS] [{"name": "f", "a\x01": 1}]'),
    Cut("stringified arguments not an object", '[TOOL_CALLS] [{"name": "f", "arguments": "[1]"}]', [],
        '[TOOL_CALLS] [{"name": "f", "arguments": "[1]"}]'),
    Cut("arguments a number", '[TOOL_CALLS] [{"name": "f", "arguments": 5}]', [],
        '[TOOL_CALLS] [{"name": "f", "arguments": 5}]'),
    Cut("missing colon", '[TOOL_CALLS] [{"name" "f"}]', [], '[TOOL_CALLS] [{"name" "f"}]'),
    Cut("key not a string", '[TOOL_CALLS] [{"name": "f", 5: 1}]', [], '[TOOL_CALLS] [{"name": "f", 5: 1}]'),
    Cut("name not a string", '[TOOL_CALLS] [{"name": 5}]', [], '[TOOL_CALLS] [{"name": 5}]'),
    Cut("null cut short", '[TOOL_CALLS] [{"name": "f", "arguments": nul', [],
        '[TOOL_CALLS] [{"name": "f", "arguments": nul'),
    Cut("id not a string", '[TOOL_CALLS] [{"id": 7, "name": "f"}]', [("f", "{}")], None),
]


@pytest.mark.parametrize("case", SHAPES, ids=[c.label for c in SHAPES])
def test_odd_shapes(case: Cut) -> None:
    """Odd payload shapes: a call named in time is completed, the text it cannot use is content."""
    m = check_chunkings(case.text, tool_parser="mistral")
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == case.calls
    assert m.content == case.content


def test_malformed_payload_on_the_final_chunk() -> None:
    """A malformed payload arriving with final=True is surfaced as content."""
    p = ResponseParser("mistral")
    deltas = p.feed("ok [TOOL_CALLS]") + p.feed(" {oops", final=True)
    assert "".join(d.content or "" for d in deltas) == "ok [TOOL_CALLS] {oops"
    assert not any(d.tool_calls for d in deltas)


# -- the consumed-prefix contract ------------------------------------------------------------


def test_unconsumed_tail_is_short_while_not_done() -> None:
    """Fed one character at a time, a block never leaves more than a marker's length unconsumed."""
    for text in (
        '[TOOL_CALLS] [{"name": "get_weather", "id": "abcDEF123", "arguments": {"city": "a long city", "n": 12345}}]',
        '[TOOL_CALLS]get_weather[CALL_ID]abcDEF123[ARGS]{"city": "Paris", "ok": true}',
    ):
        p = new_parser()
        buf = ""
        for ch in text:
            buf += ch
            end = p.feed_tool_block(buf, [], False)
            buf = buf[end:]
            if p.done:
                break
            assert len(buf) <= len(MARKER), repr(buf)
        assert p.done and buf == ""


def test_every_marker_split_at_every_position() -> None:
    """Markers split at every position across two chunks give the same message."""
    text = 'a[TOOL_CALLS]f[CALL_ID]abcDEF123[ARGS]{"x": "y"}\n[TOOL_CALLS] [{"name": "g", "arguments": {}}]b'
    want = parse_complete(text, tool_parser="mistral")
    assert len(want.tool_calls) == 2
    for i in range(1, len(text)):
        for j in (i + 1, i + 7):
            got = feed_chunks(split_at(text, [i, j]), tool_parser="mistral")
            assert message_key(accumulate(got)) == message_key(want), (i, j)


# -- real tokenizers (shared/tokenizers/mistral) -------------------------------------------------


@lru_cache(maxsize=1)
def tekken(root: Path) -> Any:
    """Mistral-NeMo's tekken v3 as a tiktoken encoding: text ids are rank + 1000, ids < 1000 the control tokens."""
    tiktoken = pytest.importorskip("tiktoken")
    from tiktoken.load import load_tiktoken_bpe

    cfg = json.loads((root / "tekken_240718.config.json").read_text(encoding="utf-8"))
    offset = cfg["num_special_tokens"]
    ranks = load_tiktoken_bpe(str(root / "tekken_240718.tiktoken"))
    specials = {name: i for i, name in enumerate(cfg["special_tokens"])}
    return tiktoken.Encoding(
        "tekken_v3",
        pat_str=cfg["pattern"],
        mergeable_ranks={b: r + offset for b, r in ranks.items()},
        special_tokens=specials,
    )


def tekken_ids(enc: Any, text: str, markers: tuple[str, ...]) -> list[int]:
    """What the model emits for ``text``: each marker as its control id, the rest as text tokens."""
    ids: list[int] = []
    pos = 0
    while pos < len(text):
        nxt = min(((text.find(m, pos), m) for m in markers if text.find(m, pos) >= 0), default=(-1, ""))
        end = nxt[0] if nxt[0] >= 0 else len(text)
        if end > pos:
            ids += enc.encode(text[pos:end], disallowed_special=())
        if nxt[0] < 0:
            break
        ids.append(enc.encode_single_token(nxt[1]))
        pos = end + len(nxt[1])
    return ids


def sentencepiece_pieces(path: Path) -> Iterator[tuple[str, int]]:
    """(piece, type) of a SentencePiece model, read from its protobuf without the sentencepiece package."""

    def varint(b: bytes, i: int) -> tuple[int, int]:
        r = s = 0
        while True:
            x = b[i]
            i += 1
            r |= (x & 0x7F) << s
            s += 7
            if x < 0x80:
                return r, i

    def fields(b: bytes) -> Iterator[tuple[int, bytes | int]]:
        i = 0
        while i < len(b):
            key, i = varint(b, i)
            wire = key & 7
            v: bytes | int
            if wire == 0:
                v, i = varint(b, i)
            elif wire == 2:
                ln, i = varint(b, i)
                v, i = b[i : i + ln], i + ln
            elif wire == 5:
                v, i = b[i : i + 4], i + 4
            elif wire == 1:
                v, i = b[i : i + 8], i + 8
            else:  # pragma: no cover - not used by SentencePiece models
                raise ValueError(f"wire type {wire}")
            yield key >> 3, v

    for field, value in fields(path.read_bytes()):
        if field == 1 and isinstance(value, bytes):  # ModelProto.pieces
            piece, kind = "", 1
            for f, v in fields(value):
                if f == 1 and isinstance(v, bytes):
                    piece = v.decode("utf-8")
                elif f == 3 and isinstance(v, int):
                    kind = v
            yield piece, kind


@pytest.mark.shared
def test_tool_calls_marker_is_a_control_token(shared: Path) -> None:
    """[TOOL_CALLS] is one control id in tekken v3 and SentencePiece v3, and text never encodes to it."""
    root = shared / "tokenizers" / "mistral"
    enc = tekken(root)
    assert enc.encode_single_token(MARKER) == 9
    for marker_in_context in (MARKER, "Sure." + MARKER + "f", "[TOOL_CALLS] [{"):
        ids = enc.encode(marker_in_context, disallowed_special=())
        assert all(i >= 1000 for i in ids), "text must never encode to a control token"
    pieces = dict(sentencepiece_pieces(root / "mistral_instruct_tokenizer_240323.model.v3"))
    assert pieces[MARKER] == 3  # CONTROL: never produced from text, always one id
    # The markers of later tokenizer versions are not in these v3 vocabularies: nothing to check here.
    cfg = json.loads((root / "tekken_240718.config.json").read_text(encoding="utf-8"))
    assert not {ARGS, CALL_ID, "[THINK]", "[/THINK]"} & set(cfg["special_tokens"])


@pytest.mark.shared
def test_declared_token_prefixes_match_tekken(shared: Path) -> None:
    """No token boundary falls inside a marker of a real token stream, as the empty token_prefixes declare."""
    enc = tekken(shared / "tokenizers" / "mistral")
    dialect = registry.get_tool_dialect("mistral")
    assert dialect.token_prefixes == () and registry.get_reasoning_dialect("mistral").token_prefixes == ()
    text = 'Let me check.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]'
    ids = tekken_ids(enc, text, (MARKER,))
    pieces = [enc.decode_single_token_bytes(i).decode("utf-8", "replace") for i in ids]
    assert "".join(pieces) == text
    boundaries = set(itertools.accumulate(len(p) for p in pieces))
    start = text.index(MARKER)
    inside = {b for b in boundaries if start < b < start + len(MARKER)}
    assert not inside, "a token boundary inside [TOOL_CALLS]"


@pytest.mark.shared
def test_token_by_token_stream_matches_complete(shared: Path) -> None:
    """A realistic output decoded token by token and streamed with chunking="tokens" rebuilds parse_complete."""
    enc = tekken(shared / "tokenizers" / "mistral")
    text = (
        'Je vérifie la météo 🌦 pour vous.[TOOL_CALLS] [{"name": "get_weather", "arguments": '
        '{"city": "Saint-Étienne", "days": [1, 2]}}, {"name": "add", "arguments": {"a": 1.5e3}}]\nVoilà.'
    )
    ids = tekken_ids(enc, text, (MARKER,))
    dec = make_decoder(enc, keep=registry.get_tool_dialect("mistral").markers)
    pieces = [dec.step(i) for i in ids] + [dec.flush()]
    assert "".join(pieces) == text
    got = accumulate(feed_chunks(pieces, tool_parser="mistral", chunking="tokens"))
    want = parse_complete(text, tool_parser="mistral")
    assert message_key(got) == message_key(want)
    assert [c.function.name for c in want.tool_calls] == ["get_weather", "add"]
    assert want.content == "Je vérifie la météo 🌦 pour vous.\nVoilà."


@pytest.mark.shared
def test_utf8_split_across_tokens_is_decoded_whole(shared: Path) -> None:
    """Byte-level tokens of one character reach the parser as one whole character."""
    enc = tekken(shared / "tokenizers" / "mistral")
    text = '[TOOL_CALLS]f[ARGS]{"s": "𝔘𝔫𝔦"}'
    ids = tekken_ids(enc, text, (MARKER,))
    utf8 = codecs.getincrementaldecoder("utf-8")()
    pieces = [utf8.decode(enc.decode_single_token_bytes(i)) for i in ids]
    assert "".join(pieces) == text
    m = accumulate(feed_chunks(pieces, tool_parser="mistral", chunking="tokens"))
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [("f", '{"s": "𝔘𝔫𝔦"}')]
