"""Round trip: arguments drawn from each tool's JSON schema, rendered canonically in a dialect,
are accepted by the dialect's llguidance grammar and parse back to the same arguments."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltaflow import parse_complete, prepare_request
from deltaflow.request import render_tool_calls, supported_constraint_dialects

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


_CALL = st.one_of(*[_args(_schema(t)).map(lambda a, n=(t.get("function") or t)["name"]: (n, a)) for t in TOOLS])


@pytest.fixture(scope="module")
def tok(shared: Path) -> Any:
    return llguidance.LLTokenizer(gzip.open(shared / "tokenizers" / "qwen3" / "tokenizer.json.gz", "rt").read())


@pytest.mark.shared
@pytest.mark.parametrize("dialect", supported_constraint_dialects())
def test_roundtrip(tok: Any, dialect: str) -> None:
    c = prepare_request(TOOLS, "required", tool_parser=dialect).constraint
    assert c is not None
    specials = [
        m for m in c.markers
        if m.startswith("<") and len(ids := tok.tokenize_str(m)) == 1 and tok.is_special_token(ids[0])
    ]
    grammar = llguidance.grammar_from("lark", c.lark_grammar(specials))
    proto = llguidance.LLMatcher(tok, grammar, log_level=0)
    assert not proto.is_error(), proto.get_error()
    max_calls = 3 if c.parallel else 1

    @settings(max_examples=40, deadline=None)
    @given(st.lists(_CALL, min_size=1, max_size=max_calls))
    def check(calls: list[tuple[str, dict[str, Any]]]) -> None:
        text = render_tool_calls(dialect, calls, TOOLS)
        m = proto.deep_copy()
        assert m.consume_tokens(tok.tokenize_str(text)) and m.is_accepting(), (text, m.get_error())
        msg = parse_complete(text, tool_parser=dialect, tools=TOOLS)
        got = [(t.function.name, json.loads(t.function.arguments)) for t in msg.tool_calls or []]
        if dialect == "xml_tools":  # values are text whatever the schema type (dialects.md section 13)
            calls = [(n, {k: v if isinstance(v, str) else json.dumps(v) for k, v in a.items()}) for n, a in calls]
        assert got == calls, text

    check()
