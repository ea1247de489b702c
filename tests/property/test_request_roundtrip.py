"""Round trip: arguments drawn from each tool's JSON schema, rendered canonically in a dialect,
are accepted by the dialect's llguidance grammar (Lark, and GBNF: llguidance converts GBNF without
token references, and the tests' GBNF checker reads every form) and parse back to the same arguments."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltaflow import parse_complete, prepare_request
from deltaflow.request import render_tool_calls, supported_constraint_dialects

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "constrain"))
from grammar_check import encode, gbnf_accepts, parse_gbnf, qwen3_specials, special_markers  # noqa: E402

llguidance = pytest.importorskip("llguidance", reason="llguidance is not installed (pip install deltaflow[grammar])")

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "detailed": {"type": "boolean"},
                    "radius": {"type": "number"},
                },
                "required": ["city"],
            },
        },
    },
    {
        "name": "search",
        "input_schema": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["query"],
        },
    },
]

# Raw XML values are verbatim text: keep them free of markup and of edge whitespace.
_TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="<>\r\x00", exclude_categories=("Cs", "Cc")) | st.just("\n"),
    min_size=1,
    max_size=20,
).filter(lambda s: s == s.strip() and s != "")


def _value(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    t = schema.get("type")
    if t == "integer":
        return st.integers(-(10**6), 10**6)
    if t == "number":
        return st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False).map(lambda x: round(x, 3))
    if t == "boolean":
        return st.booleans()
    return _TEXT


def _args(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    props = schema["properties"]
    req = set(schema["required"])
    fields = {k: _value(v) for k, v in props.items()}
    optional = [k for k in props if k not in req]
    return st.fixed_dictionaries(
        {k: fields[k] for k in props if k in req}, optional={k: fields[k] for k in optional}
    )


def _schema(tool: dict[str, Any]) -> dict[str, Any]:
    s = tool["function"]["parameters"] if "function" in tool else tool["input_schema"]
    assert isinstance(s, dict)
    return s


def _named(tool: dict[str, Any]) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    name = (tool.get("function") or tool)["name"]
    return _args(_schema(tool)).map(lambda a: (name, a))


_CALL = st.one_of(*[_named(t) for t in TOOLS])


@pytest.fixture(scope="module")
def tok(shared: Path) -> Any:
    return llguidance.LLTokenizer(gzip.open(shared / "tokenizers" / "qwen3" / "tokenizer.json.gz", "rt").read())


@pytest.mark.shared
@pytest.mark.parametrize("dialect", supported_constraint_dialects())
def test_roundtrip(tok: Any, dialect: str) -> None:
    c = prepare_request(TOOLS, "required", tool_parser=dialect).constraint
    assert c is not None
    lark = c.lark_grammar(qwen3_specials(tok, c.markers))
    special = special_markers(lark)
    proto = llguidance.LLMatcher(tok, llguidance.grammar_from("lark", lark), log_level=0)
    assert not proto.is_error(), proto.get_error()
    gbnf_proto = llguidance.LLMatcher(tok, llguidance.grammar_from("gbnf", c.gbnf), log_level=0)
    assert not gbnf_proto.is_error(), gbnf_proto.get_error()
    gbnf_rules = parse_gbnf(c.gbnf)
    max_calls = 3 if c.parallel else 1

    @settings(max_examples=40, deadline=None)
    @given(st.lists(_CALL, min_size=1, max_size=max_calls))
    def check(calls: list[tuple[str, dict[str, Any]]]) -> None:
        text = render_tool_calls(dialect, calls, TOOLS)
        m = proto.deep_copy()
        assert m.consume_tokens(encode(tok, text, special)) and m.is_accepting(), (text, m.get_error())
        g = gbnf_proto.deep_copy()
        assert g.consume_tokens(encode(tok, text)) and g.is_accepting(), (text, g.get_error())
        assert gbnf_accepts(gbnf_rules, text), text
        msg = parse_complete(text, tool_parser=dialect, tools=TOOLS)
        got = [(t.function.name, json.loads(t.function.arguments)) for t in msg.tool_calls or []]
        if dialect == "xml_tools":  # values are text whatever the schema type (dialects.md section 13)
            calls = [(n, {k: v if isinstance(v, str) else json.dumps(v) for k, v in a.items()}) for n, a in calls]
        assert got == calls, text

    check()


# Nested arguments: objects, arrays, nullable and union types (not for the pythonic family, whose grammar
# is built for scalar parameters only, nor xml_tools, whose values are all text).
NESTED: list[dict[str, Any]] = [
    {
        "name": "plan",
        "parameters": {
            "type": "object",
            "properties": {
                "title": {"type": "string"},
                "steps": {"type": "array", "items": {"type": "object", "properties": {
                    "n": {"type": "integer"}, "what": {"type": "string"}}, "required": ["n", "what"]}},
                "opts": {"type": "object", "properties": {"fast": {"type": "boolean"}, "w": {"type": "number"}},
                         "required": ["fast"]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "limit": {"type": ["integer", "null"]},
            },
            "required": ["title", "steps"],
        },
    },
]
_NO_NESTED = {"pythonic", "llama4_pythonic", "lfm2", "olmo3", "xml_tools"}


def _nested_value(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    t = schema.get("type")
    if t == "object":
        return _args(schema)
    if t == "array":
        return st.lists(_nested_value(schema["items"]), max_size=3)
    if t == ["integer", "null"]:
        return st.none() | st.integers(-1000, 1000)
    return _value(schema)


def _nested_args(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    props = schema["properties"]
    req = set(schema.get("required", ()))
    return st.fixed_dictionaries(
        {k: _nested_value(v) for k, v in props.items() if k in req},
        optional={k: _nested_value(v) for k, v in props.items() if k not in req},
    )


@pytest.mark.shared
@pytest.mark.parametrize("dialect", [d for d in supported_constraint_dialects() if d not in _NO_NESTED])
def test_nested_roundtrip(tok: Any, dialect: str) -> None:
    c = prepare_request(NESTED, "required", tool_parser=dialect).constraint
    assert c is not None
    lark = c.lark_grammar(qwen3_specials(tok, c.markers))
    proto = llguidance.LLMatcher(tok, llguidance.grammar_from("lark", lark), log_level=0)
    assert not proto.is_error(), proto.get_error()
    gbnf_rules = parse_gbnf(c.gbnf)

    @settings(max_examples=15, deadline=None)
    @given(_nested_args(NESTED[0]["parameters"]))
    def check(args: dict[str, Any]) -> None:
        text = render_tool_calls(dialect, [("plan", args)], NESTED)
        m = proto.deep_copy()
        assert m.consume_tokens(encode(tok, text, special_markers(lark))) and m.is_accepting(), (text, m.get_error())
        assert gbnf_accepts(gbnf_rules, text), text
        msg = parse_complete(text, tool_parser=dialect, tools=NESTED)
        got = [(t.function.name, json.loads(t.function.arguments)) for t in msg.tool_calls or []]
        assert got == [("plan", args)], text

    check()
