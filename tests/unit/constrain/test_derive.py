"""Layouts derived from declarations: a JSON-envelope or XML-function dialect is constrained from its
format and its Writing alone, with no layout written for it; a new dialect of either format gets its
grammar and canonical text without an edit in deltaflow.constrain."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from grammar_check import encode, gbnf_accepts, special_markers

from deltaflow import parse_complete, prepare_request
from deltaflow.constrain import layouts, render_tool_calls, supported_constraint_dialects
from deltaflow.constrain.derive import derivable, derive_layout
from deltaflow.parsers import JsonEnvelopeFormat, Writing, declare, registry
from deltaflow.parsers.drivers.xml_function import XmlFunctionFormat

llguidance = pytest.importorskip("llguidance", reason="llguidance is not installed (pip install deltaflow[grammar])")

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {
                "type": "object",
                "properties": {"q": {"type": "string"}, "n": {"type": "integer"}, "tags": {"type": "array"}},
                "required": ["q"],
            },
        },
    }
]
ARGS = {"q": "tides at Brest", "n": 3, "tags": ["sea", 1]}


@pytest.fixture(scope="module")
def tok(shared: Path) -> Any:
    return llguidance.LLTokenizer(gzip.open(shared / "tokenizers" / "qwen3" / "tokenizer.json.gz", "rt").read())


def _accepts(tok: Any, dialect: str, text: str) -> bool:
    c = prepare_request(TOOLS, "required", tool_parser=dialect).constraint
    assert c is not None
    grammar = c.lark_grammar()
    m = llguidance.LLMatcher(tok, llguidance.grammar_from("lark", grammar), log_level=0)
    assert not m.is_error(), m.get_error()
    lark = bool(m.consume_tokens(encode(tok, text, special_markers(grammar)))) and m.is_accepting()
    assert lark == gbnf_accepts(c.gbnf, text), text
    return lark


def _calls(text: str, dialect: str) -> list[tuple[str, Any]]:
    msg = parse_complete(text, tool_parser=dialect, tools=TOOLS)
    return [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or []]


def test_every_json_envelope_and_xml_function_dialect_is_derived_unless_written() -> None:
    derived = [n for n in registry.tool_dialect_names() if n not in layouts.LAYOUTS]
    for name in derived:
        d = registry.get_tool_dialect(name)
        assert derivable(d), f"{name}: neither a written layout nor a format to derive one from"
        assert layouts.layout_of(name) is not None and name in supported_constraint_dialects()
    # the written ones among these two formats are the three whose templates write more than the markers
    written = {n for n in layouts.LAYOUTS if derivable(registry.get_tool_dialect(n))}
    assert written == {"command_r7b", "gigachat3", "step3"}
    assert len(derived) >= 25


def test_derived_markers_are_the_formats_own() -> None:
    """The canonical text of a derived dialect is its format's markers and the Writing's blanks: change the
    declaration and the grammar follows (here: Qwen3-Coder's markers, read from its format)."""
    qwen = registry.get_tool_dialect("qwen3_coder")
    lay = derive_layout(qwen)
    assert lay is not None and lay.trigger == "<tool_call>"
    text = render_tool_calls("qwen3_coder", [("lookup", ARGS)], TOOLS)
    assert text.startswith("<tool_call>\n<function=lookup>\n<parameter=q>\n")
    assert text.endswith("</function>\n</tool_call>")


@pytest.fixture
def new_dialects() -> Iterator[tuple[str, str]]:
    """Two dialects declared the way a user declares one: no layout written anywhere."""
    env = declare(
        "scratch_envelope",
        JsonEnvelopeFormat(open=("<act>",), close="</act>", args_fields=("args",)),
        writing=Writing(open_gaps=("\n",), close_gap="\n", separator="\n"),
    )
    xml = declare(
        "scratch_xml",
        XmlFunctionFormat(
            block_open="<calls>", block_close="</calls>", call_open="<call", call_close="</call>",
            name_style="attr", param_open="<arg", key_style="attr", key_end=">", value_open=None,
            value_close="</arg>",
        ),
    )  # no Writing: the tightest form
    try:
        yield env.name, xml.name
    finally:
        registry._TOOL.pop(env.name, None)
        registry._TOOL.pop(xml.name, None)


def test_a_new_dialect_of_an_existing_format_is_constrained_with_no_layout(
    tok: Any, new_dialects: tuple[str, str]
) -> None:
    env, xml = new_dialects
    assert env in supported_constraint_dialects() and xml in supported_constraint_dialects()
    text = render_tool_calls(env, [("lookup", ARGS), ("lookup", {"q": "x"})], TOOLS)
    assert text == ('<act>\n{"name": "lookup", "args": {"q": "tides at Brest", "n": 3, "tags": ["sea", 1]}}\n</act>\n'
                    '<act>\n{"name": "lookup", "args": {"q": "x"}}\n</act>')
    assert _calls(text, env) == [("lookup", ARGS), ("lookup", {"q": "x"})]
    assert _accepts(tok, env, text)
    assert not _accepts(tok, env, text.replace('"args"', '"arguments"'))
    text = render_tool_calls(xml, [("lookup", ARGS)], TOOLS)
    assert text.startswith('<calls><call name="lookup"><arg name="q">tides at Brest</arg>')
    assert _calls(text, xml) == [("lookup", ARGS)]
    assert _accepts(tok, xml, text)
    assert not _accepts(tok, xml, text.replace("</calls>", ""))


def test_a_writing_the_format_cannot_hold_is_refused() -> None:
    d = declare("scratch_bare", JsonEnvelopeFormat(open=("<x>",), close="</x>"), writing=Writing(bare=True),
                register=False)
    with pytest.raises(ValueError, match="bare=True"):
        derive_layout(d)


@pytest.mark.parametrize("dialect", ["gigachat3", "internlm", "openai"])
def test_several_calls_in_a_one_call_dialect_are_refused(dialect: str) -> None:
    from deltaflow import UnsupportedConstraintError

    assert render_tool_calls(dialect, [("lookup", {"q": "x"})], TOOLS)
    with pytest.raises(UnsupportedConstraintError, match="one call per block; got 2 calls"):
        render_tool_calls(dialect, [("lookup", {"q": "x"}), ("lookup", {"q": "y"})], TOOLS)
