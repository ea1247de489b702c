"""The GBNF writer: every dialect's grammar, token references, and the schema -> GBNF converter.

Checked with the tests' GBNF checker (grammar_check.py: syntax, undefined rules, exact matching
with token references) and, for grammars without token references, with llguidance (which converts
GBNF to Lark).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from grammar_check import GbnfSyntaxError, encode, gbnf_accepts, parse_gbnf, to_items

from deltaflow import prepare_request
from deltaflow.constrain import render_tool_calls, supported_constraint_dialects
from deltaflow.constrain.gbnf import gbnf_literal

llguidance = pytest.importorskip("llguidance", reason="llguidance is not installed (pip install deltaflow[grammar])")

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
SEARCH = {"name": "search", "input_schema": {"type": "object", "properties": {"query": {"type": "string"}},
                                             "required": ["query"]}}
OTHER = {"name": "delete_all", "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}
TOOLS = [WEATHER, SEARCH]
DIALECTS = supported_constraint_dialects()


class FakeVocab:
    """An object with ``token_to_id`` only (no added-token information)."""

    def __init__(self, markers: list[str]) -> None:
        self.ids = {m: 1000 + i for i, m in enumerate(markers)}

    def token_to_id(self, token: str) -> int | None:
        return self.ids.get(token)


@pytest.fixture(scope="module")
def tok(shared: Path) -> Any:
    return llguidance.LLTokenizer(gzip.open(shared / "tokenizers" / "qwen3" / "tokenizer.json.gz", "rt").read())


def _canonical(dialect: str, multi: bool) -> str:
    calls: list[tuple[str, dict[str, Any]]] = [("get_weather", {"city": "Paris </b> & <x>", "days": 3})]
    if multi:
        calls.append(("search", {"query": "two\nlines"}))
    return render_tool_calls(dialect, calls, TOOLS)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_gbnf_accepts_canonical_calls_and_rejects_junk(dialect: str) -> None:
    c = prepare_request(TOOLS, "required", tool_parser=dialect).constraint
    assert c is not None
    rules = parse_gbnf(c.gbnf)
    assert all("_" not in name for name in rules)  # llama.cpp's rule names: letters, digits, '-'
    text = _canonical(dialect, c.parallel)
    assert gbnf_accepts(rules, text), text
    assert gbnf_accepts(rules, "\n\n" + text)
    assert gbnf_accepts(rules, render_tool_calls(dialect, [("search", {"query": "x"})], TOOLS))
    unknown = render_tool_calls(dialect, [("delete_all", {"query": "x"})], [*TOOLS, OTHER])
    missing = render_tool_calls(dialect, [("get_weather", {"days": 3})], TOOLS)
    good = render_tool_calls(dialect, [("search", {"query": "x"})], TOOLS)
    trig = next(t for t in c.triggers if t in good)
    wrong_marker = good.replace(trig, trig[:-1] + "#", 1)
    for bad in (unknown, missing, wrong_marker, "Sure, here you go: " + good, "\n" * 9 + good, good[:-1]):
        assert not gbnf_accepts(rules, bad), bad
    named = prepare_request(TOOLS, {"type": "tool", "name": "search"}, tool_parser=dialect).constraint
    assert named is not None
    assert not gbnf_accepts(named.gbnf, render_tool_calls(dialect, [("get_weather", {"city": "x"})], TOOLS))


@pytest.mark.shared
@pytest.mark.parametrize("dialect", DIALECTS)
def test_llguidance_reads_the_gbnf(tok: Any, dialect: str) -> None:
    """llguidance converts our GBNF (no token references) to Lark and agrees with the checker."""
    c = prepare_request(TOOLS, "required", tool_parser=dialect).constraint
    assert c is not None
    text = _canonical(dialect, c.parallel)
    bad = render_tool_calls(dialect, [("get_weather", {"days": 3})], TOOLS)
    for sample, want in ((text, True), (bad, False)):
        m = llguidance.LLMatcher(tok, llguidance.grammar_from("gbnf", c.gbnf), log_level=0)
        assert not m.is_error(), m.get_error()
        assert (bool(m.consume_tokens(encode(tok, sample))) and m.is_accepting()) is want, sample


@pytest.mark.parametrize("dialect", [d for d in DIALECTS if prepare_request(
    TOOLS, "required", tool_parser=d).constraint.markers_special])  # type: ignore[union-attr]
def test_special_markers_as_token_ids(dialect: str) -> None:
    """With a vocabulary, the dialect's special-token markers are ``<[ID]>`` and must come as those tokens."""
    c = prepare_request(TOOLS, "required", tool_parser=dialect).constraint
    assert c is not None
    vocab = FakeVocab(list(c.markers_special))
    g = c.gbnf_grammar(vocab)
    used = {m: i for m, i in vocab.ids.items() if f"<[{i}]>" in g}
    assert used, g
    text = _canonical(dialect, c.parallel)
    assert gbnf_accepts(g, to_items(text, used)), text
    assert not gbnf_accepts(g, text)  # the same markers spelled as text are not the tokens
    by_name = c.gbnf_grammar(special_tokens=list(c.markers_special))
    assert gbnf_accepts(by_name, to_items(text, vocab.ids), names=vocab.ids)


@pytest.mark.shared
def test_hf_tokenizer_ids(shared: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.Tokenizer.from_str(gzip.open(shared / "tokenizers" / "qwen3" / "tokenizer.json.gz", "rt").read())
    c = prepare_request(TOOLS, "required", tool_parser="qwen3_coder").constraint
    assert c is not None
    g = c.gbnf_grammar(hf)
    open_id, close_id = hf.token_to_id("<tool_call>"), hf.token_to_id("</tool_call>")
    assert f"<[{open_id}]>" in g and f"<[{close_id}]>" in g and '"<tool_call>' not in g
    text = _canonical("qwen3_coder", True)
    assert gbnf_accepts(g, to_items(text, {"<tool_call>": open_id, "</tool_call>": close_id}))
    # markers that are ordinary vocabulary entries stay text (pythonic's "[")
    p = prepare_request(TOOLS, "required", tool_parser="pythonic").constraint
    assert p is not None and "<[" not in p.gbnf_grammar(hf)


def test_special_marker_names_must_be_token_shaped() -> None:
    c = prepare_request(TOOLS, "required", tool_parser="mistral").constraint
    assert c is not None
    with pytest.raises(ValueError, match="cannot be referenced by name"):
        c.gbnf_grammar(special_tokens=["[TOOL_CALLS]"])
    g = c.gbnf_grammar(special_tokens={"[TOOL_CALLS]": 9, "[ARGS]": 32, "[CALL_ID]": 33})
    assert "<[9]>" in g and "<[32]>" in g and "[TOOL_CALLS]" not in g
    text = render_tool_calls("mistral", [("search", {"query": "x"})], TOOLS)
    assert gbnf_accepts(g, to_items(text, {"[TOOL_CALLS]": 9, "[ARGS]": 32, "[CALL_ID]": 33}))


# ----------------------------------------------------------------- the schema -> GBNF converter

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 5},
        "kind": {"type": "string", "enum": ["a", "b c"]},
        "fixed": {"const": 7},
        "n": {"type": "integer"},
        "x": {"type": "number"},
        "ok": {"type": "boolean"},
        "nil": {"type": "null"},
        "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        "maybe": {"type": ["boolean", "null"]},
        "list": {"type": "array", "items": {"type": "integer"}, "maxItems": 2},
        "nested": {"type": "object", "properties": {"deep": {"$ref": "#/$defs/deep"}}, "required": ["deep"],
                   "additionalProperties": False},
        "free": {"type": "object"},
        "anything": {},
    },
    "required": ["name"],
    "$defs": {"deep": {"type": "object", "properties": {"v": {"type": "string"}}, "required": ["v"]}},
}


@pytest.mark.parametrize(
    ("args", "ok"),
    [
        ({"name": "ab"}, True),
        ({"name": "ab", "kind": "b c", "fixed": 7, "n": -12, "x": 1.5e-3, "ok": False, "nil": None}, True),
        ({"name": "ab", "either": 3, "maybe": None, "list": [1, 2], "nested": {"deep": {"v": "q"}}}, True),
        ({"name": "ab", "either": "three", "maybe": True, "free": {"k": [1, {"z": None}]}, "anything": [True]}, True),
        ({"name": "ab", "extra": "allowed after the declared keys"}, True),
        ({"name": ""}, False),  # minLength
        ({"name": "abcdef"}, False),  # maxLength
        ({"kind": "a"}, False),  # required
        ({"name": "ab", "kind": "c"}, False),  # enum
        ({"name": "ab", "fixed": 8}, False),  # const
        ({"name": "ab", "n": 1.5}, False),
        ({"name": "ab", "ok": "yes"}, False),
        ({"name": "ab", "either": True}, False),
        ({"name": "ab", "list": [1, 2, 3]}, False),  # maxItems
        ({"name": "ab", "nested": {"deep": {"v": "q"}, "more": 1}}, False),  # additionalProperties: false
        ({"name": "ab", "nested": {"deep": {}}}, False),  # required through the $ref
    ],
)
def test_schema_converter(args: dict[str, Any], ok: bool) -> None:
    tools = [{"name": "f", "parameters": SCHEMA}]
    c = prepare_request(tools, "required", tool_parser="hermes").constraint
    assert c is not None
    body = json.dumps(args, ensure_ascii=False)
    text = f'<tool_call>\n{{"name": "f", "arguments": {body}}}\n</tool_call>'
    assert gbnf_accepts(c.gbnf, text) is ok, c.gbnf
    if ok:
        assert text == render_tool_calls("hermes", [("f", args)], tools)


def test_schema_keys_out_of_order_are_rejected() -> None:
    tools = [{"name": "f", "parameters": SCHEMA}]
    c = prepare_request(tools, "required", tool_parser="hermes").constraint
    assert c is not None
    text = '<tool_call>\n{"name": "f", "arguments": {"n": 1, "name": "ab"}}\n</tool_call>'
    assert not gbnf_accepts(c.gbnf, text)


def test_literals_escape_and_the_checker_rejects_bad_grammars() -> None:
    assert gbnf_literal('a"b\\c\nd\x01') == '"a\\"b\\\\c\\nd\\x01"'
    assert gbnf_accepts("root ::= " + gbnf_literal('a"b'), 'a"b')
    for bad in ("root ::= missing", 'root ::= "x', "rule_x ::= \"a\"", 'root ::= "a"{2,1}', 'x ::= "a"'):
        with pytest.raises(GbnfSyntaxError):
            parse_gbnf(bad)
