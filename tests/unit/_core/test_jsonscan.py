"""The incremental JSON scanner: completion on any split, errors, and closable safe positions."""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from typing import Any

import pytest

from deltaflow._core.jsonscan import MAX_NUMBER, JsonScanner


@dataclass(frozen=True)
class ScanRun:
    """The outcome of feeding a text to one scanner in pieces."""

    scanner: JsonScanner
    consumed: int  # absolute position in the whole text
    last_safe: int  # absolute, -1 if no safe position was reached


def scan_pieces(pieces: list[str], final: bool = True) -> ScanRun:
    """Feed ``pieces`` as a consumer following the contract would.

    The unconsumed tail of a call is given again, followed by the next piece;
    the last call has ``final`` set.
    """
    s = JsonScanner()
    base = 0  # absolute position of buf[0]
    buf = ""
    last_safe = -1
    for k, piece in enumerate(pieces):
        buf += piece
        consumed, safe = s.scan(buf, 0, final and k == len(pieces) - 1)
        if safe >= 0:
            last_safe = base + safe
        if s.done or s.error:
            return ScanRun(s, base + consumed, last_safe)
        base += consumed
        buf = buf[consumed:]
    return ScanRun(s, base, last_safe)


def splits(text: str) -> list[tuple[str, list[str]]]:
    """Whole, per-character, and every two-way split of ``text``."""
    out: list[tuple[str, list[str]]] = [("whole", [text]), ("chars", list(text))]
    out += [(f"cut={i}", [text[:i], text[i:]]) for i in range(1, len(text))]
    return out


VALID = [
    '{}',
    '[]',
    '""',
    '"plain"',
    '"esc \\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\uD83D\\uDE00"',
    'true',
    'false',
    'null',
    '0',
    '-0',
    '7',
    '-12',
    '3.25',
    '-0.5',
    '1e10',
    '1E+2',
    '-2.5e-3',
    '{"a": 1}',
    '{"a": 1, "a": 2}',
    '[1, "x", true, false, null, -1.5e+10, {"k": [], "m": {}}]',
    ' { "nested" : { "deep" : [ [ [ "x" ] ] ] } , "n" : 12 } ',
    '{"\\u00e9\\n": "caf\\u00e9", "s": "a\\"b"}',
    '["東京", "emoji 😀"]',
]


@pytest.mark.parametrize("text", VALID, ids=[repr(v) for v in VALID])
def test_valid_values_complete_on_every_split(text: str) -> None:
    """Every kind of valid JSON value is done on any split, and consumption stops right after it."""
    end = len(text.rstrip())
    for label, pieces in splits(text):
        run = scan_pieces(pieces)
        assert run.scanner.done and not run.scanner.error, label
        assert run.consumed == end, label


@pytest.mark.parametrize("value", ["12", "-3", "1.5", "1e5", "true", "null"], ids=str)
def test_top_level_scalar_waits_for_more_unless_final(value: str) -> None:
    """A top-level number or literal at the chunk end is not done until more text or the final flag."""
    s = JsonScanner()
    consumed, _ = s.scan(value[:-1], 0)
    assert not s.done and not s.error and consumed == 0
    s2 = JsonScanner()
    s2.scan(value, 0, final=True)
    assert s2.done


def test_scanning_stops_after_the_value() -> None:
    """Text after a complete value is not consumed (it belongs to the caller)."""
    s = JsonScanner()
    consumed, safe = s.scan('{"a": [1]}</tool_call>', 0)
    assert s.done and consumed == safe == len('{"a": [1]}')
    assert s.scan('{"a": [1]}</tool_call>', consumed) == (consumed, -1)


def test_started_flag() -> None:
    """``started`` turns True once the first character of the value is consumed."""
    s = JsonScanner()
    assert not s.started
    s.scan("   ", 0)
    assert not s.started
    s.scan("[", 0)
    assert s.started


@dataclass(frozen=True)
class Invalid:
    """An invalid JSON text and the offset of its offending character."""

    label: str
    text: str
    error_at: int


INVALID = [
    Invalid("missing colon", '{"a" 1}', 5),
    Invalid("trailing comma in array", "[1,]", 3),
    Invalid("trailing comma in object", '{"a": 1,}', 8),
    Invalid("bad literal", '{"a": tru}', 6),
    Invalid("raw control char in string", '["a\x01b"]', 3),
    Invalid("raw newline in string", '{"a": "x\ny"}', 8),
    Invalid("bad escape", '["a\\qb"]', 3),
    Invalid("short unicode escape", '["\\u12G4"]', 2),
    Invalid("unquoted key", "{a: 1}", 1),
    Invalid("leading plus", "[+1]", 1),
    Invalid("number then dot", "[1.]", 2),
    Invalid("stray closer", "]", 0),
    Invalid("wrong closer", '{"a": 1]', 7),
    Invalid("missing comma", "[1 2]", 3),
]


@pytest.mark.parametrize("case", INVALID, ids=[c.label for c in INVALID])
def test_invalid_json_sets_error_on_every_split(case: Invalid) -> None:
    """Invalid JSON sets ``error`` (never ``done``) whatever the split, at the offending character."""
    for label, pieces in splits(case.text):
        run = scan_pieces(pieces)
        assert run.scanner.error and not run.scanner.done, label
        assert run.scanner.error_pos >= 0
    whole = JsonScanner()
    whole.scan(case.text, 0, final=True)
    assert whole.error_pos == case.error_at


def test_error_refuses_further_input() -> None:
    """After an error, nothing more is consumed."""
    s = JsonScanner()
    s.scan("[1,]", 0)
    assert s.error
    assert s.scan("[1,]", 3) == (3, -1)
    assert s.error


def _random_value(rnd: random.Random, depth: int = 0) -> Any:
    kind = rnd.randrange(8 if depth < 3 else 6)
    if kind == 0:
        return rnd.choice([True, False, None])
    if kind == 1:
        return rnd.randint(-10**6, 10**6)
    if kind == 2:
        return rnd.choice([0.5, -2.25, 1e21, 3.0e-7, 123.456])
    if kind in (3, 4, 5):
        alphabet = 'ab "\\/\n\t\u00e9東😀'
        return "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 6)))
    if kind == 6:
        return [_random_value(rnd, depth + 1) for _ in range(rnd.randint(0, 4))]
    return {
        "".join(rnd.choice("kéy\"") for _ in range(rnd.randint(1, 4))): _random_value(rnd, depth + 1)
        for _ in range(rnd.randint(0, 4))
    }


@dataclass(frozen=True)
class Sample:
    """A random JSON text, reproducible from its seed."""

    seed: int
    text: str

    def __repr__(self) -> str:
        return f"Sample(seed={self.seed})"


def _sample(seed: int) -> Sample:
    rnd = random.Random(seed)
    value = {"root": _random_value(rnd)} if seed % 2 else [_random_value(rnd), _random_value(rnd)]
    sep = rnd.choice([(",", ":"), (", ", ": "), (" , ", " : ")])
    return Sample(seed, json.dumps(value, separators=sep, ensure_ascii=bool(seed % 3), indent=rnd.choice([None, 1])))


SAMPLES = [_sample(seed) for seed in range(40)]


def test_random_values_complete_on_random_splits() -> None:
    """Random valid JSON is done on per-character and random splits."""
    for sample in SAMPLES:
        rnd = random.Random(sample.seed)
        cuts = sorted(rnd.sample(range(1, len(sample.text)), min(6, len(sample.text) - 1)))
        pieces = [sample.text[a:b] for a, b in zip([0, *cuts], [*cuts, len(sample.text)], strict=True)]
        for label, pcs in (("chars", list(sample.text)), ("random", pieces)):
            run = scan_pieces(pcs)
            assert run.scanner.done and run.consumed == len(sample.text), f"{sample!r} {label}: {sample.text!r}"


@pytest.mark.parametrize("sample", SAMPLES[:20], ids=repr)
def test_safe_prefixes_are_closable(sample: Sample) -> None:
    """For every prefix of valid JSON, the text up to the last safe position plus closer() parses."""
    text = sample.text
    for end in range(1, len(text)):
        prefix = text[:end]
        s = JsonScanner()
        _, safe = s.scan(prefix, 0)
        if safe >= 0:
            json.loads(prefix[:safe] + s.closer())
        # The same, fed one character at a time (as a streaming consumer sees it).
        run = scan_pieces(list(prefix), final=False)
        if run.last_safe >= 0:
            json.loads(prefix[: run.last_safe] + run.scanner.closer())


@pytest.mark.parametrize(
    "text",
    ['{"a": [1, 2', '{"a": "xy', '["x", "y', '{"a": {"b": tr', '{"k": "v\\u00', '[{"a": 1}, {"b"'],
    ids=str,
)
def test_closer_completes_cut_text(text: str) -> None:
    """closer() completes a cut text at its last safe position without inventing a key or value."""
    s = JsonScanner()
    _, safe = s.scan(text, 0)
    closed = text[:safe] + s.closer()
    json.loads(closed)
    assert len(closed) - safe <= text.count("{") + text.count("[") + 1  # closing characters only


def test_closer_after_error_keeps_emitted_prefix_closable() -> None:
    """After an error, the text up to the last safe position plus closer() still parses."""
    for text in ['{"a": [1, "x"], "b" 2}', '{"a": "x\\q"}', '{"a": "x\x01"}', "[[1, 2], [3,]]"]:
        run = scan_pieces(list(text))
        assert run.scanner.error
        json.loads(text[: run.last_safe] + run.scanner.closer())


@pytest.mark.parametrize(
    "text",
    ['{"a": "xy\nz"}', '{"a": "xy\\qz"}', '{"a": [1, 25, "long string", tru]}', '{"a": "abc", "b": 1,}'],
    ids=["raw newline", "bad escape", "bad literal", "trailing comma"],
)
def test_last_safe_position_does_not_depend_on_the_split(text: str) -> None:
    """The last safe position reached before an error is the same whether the text comes whole or in pieces."""
    positions = {label: scan_pieces(pieces).last_safe for label, pieces in splits(text)}
    assert len(set(positions.values())) == 1, positions


NUMBER_TEXTS = [
    "[" + n + "]"
    for n in (
        "0", "-0", "12", "-12.50", "1.5e10", "1E+5", "2e-07", "0.0e0", "-9.99E-999",
        "01", "-", "1.", "1.e5", "1e", "1e+", "--1", "1.2.3", "1e5e5", "-.5", "00.1", "1e+-2",
    )
] + ['{"a": -12.5e+3, "b": [0, 1e2]}', "123456789"]


@pytest.mark.parametrize("text", NUMBER_TEXTS, ids=repr)
def test_numbers_scan_the_same_on_every_split(text: str) -> None:
    """A number resumed where the last chunk cut it gives the whole text's outcome on every split."""
    whole = scan_pieces([text])
    for label, pieces in splits(text):
        got = scan_pieces(pieces)
        # On an error, ``consumed`` is the absolute error position.
        assert (got.consumed, got.last_safe, got.scanner.done, got.scanner.error) == (
            whole.consumed, whole.last_safe, whole.scanner.done, whole.scanner.error,
        ), label


def test_long_number_resumes_where_it_stopped() -> None:
    """A number given again with each chunk is resumed where the last scan stopped, not reread."""
    s = JsonScanner()
    consumed, _ = s.scan("[", 0)
    assert consumed == 1
    buf = ""
    for _ in range(MAX_NUMBER // 100):
        buf += "7" * 100
        consumed, safe = s.scan(buf, 0)
        assert (consumed, safe) == (0, -1)  # the number may go on: given again with more text
        assert s._num_seen == len(buf)  # the next scan reads from here on (internal bookkeeping)
    consumed, safe = s.scan(buf + "]", 0)
    assert s.done and consumed == safe == len(buf) + 1


@pytest.mark.parametrize("length", [MAX_NUMBER, MAX_NUMBER + 1, 3 * MAX_NUMBER])
def test_a_number_over_the_limit_is_an_error_at_the_limit_on_every_split(length: int) -> None:
    """A number longer than MAX_NUMBER characters fails at that length, whole or in chunks of any size."""
    text = '{"n": ' + "9" * length + "}"
    over = length > MAX_NUMBER
    for size in (1, 7, 1000, len(text)):
        got = scan_pieces([text[i : i + size] for i in range(0, len(text), size)])
        assert got.scanner.error is over and got.scanner.done is not over, size
        if over:
            assert got.consumed == 6 + MAX_NUMBER and got.last_safe == 1, size  # consumed: the error position


RUN_TEXTS = [
    '["a", "b" , "c","d"]',
    '{"k": "v", "n": true, "m": null,"x": false}',
    '["a", "b", "c\x01", "d"]',
    '{"a": "x", "b": tru, "c": 1}',
    '["a" , "b",]',
    '["a","b" "c"]',
    '{"a": "x", "k\\n": "y", "z": "w"}',
    '["a", true, 12, "b\\"q", [1], "c"]',
    '{"a": "x",  \n "b": "y"  ,"c":{"d": "e"}}',
    '["a", truex]',
]


@pytest.mark.parametrize("text", RUN_TEXTS, ids=repr)
def test_runs_of_simple_members_scan_the_same_on_every_split(text: str) -> None:
    """Runs of short strings and literals crossed by one match give the per-character outcome on every split."""
    chars = scan_pieces(list(text))
    for label, pieces in [("whole", [text]), *splits(text)]:
        got = scan_pieces(pieces)
        assert (got.consumed, got.last_safe, got.scanner.done, got.scanner.error) == (
            chars.consumed, chars.last_safe, chars.scanner.done, chars.scanner.error,
        ), label


def _trace(pieces: list[str], *, shortcuts: bool) -> list[tuple[int, int, int, str]]:
    """Every call's (consumed, safe, state, closer) for a contract-following consumer of ``pieces``.

    Without ``shortcuts`` each call's text is given behind one extra character (``pos=1``, which
    the all-plain-string shortcut never takes) and the cut-member patterns never match, so only
    the general loop runs; positions are reported relative to the piece either way.
    """
    import deltaflow._core.jsonscan as jsonscan

    saved = jsonscan._ARRAY_CUT, jsonscan._OBJECT_CUT
    if not shortcuts:
        jsonscan._ARRAY_CUT = jsonscan._OBJECT_CUT = re.compile(r"(?!)")
    try:
        s = JsonScanner()
        out: list[tuple[int, int, int, str]] = []
        buf = ""
        for k, piece in enumerate(pieces):
            buf += piece
            final = k == len(pieces) - 1
            if shortcuts:
                consumed, safe = s.scan(buf, 0, final)
            else:
                consumed, safe = s.scan("\x00" + buf, 1, final)
                consumed, safe = consumed - 1, safe - 1 if safe >= 0 else -1
            out.append((consumed, safe, s.state, s.closer()))
            if s.done or s.error:
                break
            buf = buf[consumed:]
        return out
    finally:
        jsonscan._ARRAY_CUT, jsonscan._OBJECT_CUT = saved


TRACE_TEXTS = [
    '["alpha-0", "b\\"x-1", "数据-2", "tab\\t-3", "a\\\\b-4"]',
    '{"path": "a.py", "content": "line \\"one\\"\\n\\tline two <div> 東京 😀"}',
    '{"a": "x", "b": tru, "c": 1}',
    '["a", "b\x01c", "d"]',
    '{"k": "v", "k2": "v\\u00e9", "k3" : "w"}',
    '[ "a" ,  "b" , 1, "c\\',
]


@pytest.mark.parametrize("text", TRACE_TEXTS + [s.text for s in SAMPLES[:12]], ids=repr)
def test_shortcuts_give_the_general_loops_answer_on_every_call(text: str) -> None:
    """The all-plain-string shortcut and the cut-member match return, call by call, what the general loop does."""
    rnd = random.Random(len(text))
    chunkings = [[text], list(text)]
    for size in (2, 3, 4, 7, 16):
        chunkings.append([text[i : i + size] for i in range(0, len(text), size)])
    for _ in range(8):
        cuts = sorted(rnd.sample(range(1, len(text)), min(5, len(text) - 1)))
        chunkings.append([text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)])
    for pieces in chunkings:
        assert _trace(pieces, shortcuts=True) == _trace(pieces, shortcuts=False), pieces
