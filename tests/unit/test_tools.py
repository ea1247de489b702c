"""Validation of a request's tools (OpenAI and Anthropic formats)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pytest

import deltaflow.tools
from deltaflow import ResponseParser, ToolSpec, ToolSpecError, normalize_tools
from deltaflow._core import toolspec

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}


@dataclass(frozen=True)
class Form:
    """One accepted tool form and the spec it must give."""

    label: str
    entry: Any
    spec: ToolSpec


FORMS = [
    Form(
        "openai",
        {"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": SCHEMA}},
        ToolSpec(name="get_weather", description="d", parameters=SCHEMA),
    ),
    Form("openai without type", {"function": {"name": "f"}}, ToolSpec(name="f")),
    Form(
        "anthropic",
        {"name": "get_weather", "description": "d", "input_schema": SCHEMA},
        ToolSpec(name="get_weather", description="d", parameters=SCHEMA),
    ),
    Form("anthropic with type", {"type": "custom", "name": "f", "input_schema": {}}, ToolSpec(name="f")),
    Form("bare function", {"name": "f.v2:x-y", "parameters": SCHEMA}, ToolSpec(name="f.v2:x-y", parameters=SCHEMA)),
    Form("spec passes through", ToolSpec(name="f"), ToolSpec(name="f")),
]


@pytest.mark.parametrize("form", FORMS, ids=[f.label for f in FORMS])
def test_accepted_forms(form: Form) -> None:
    """OpenAI, Anthropic and bare function entries normalize to a ToolSpec."""
    assert normalize_tools([form.entry]) == (form.spec,)


def test_none_and_empty() -> None:
    """None means "no tools given"; an empty list offers nothing."""
    assert normalize_tools(None) is None
    assert normalize_tools([]) == ()


@dataclass(frozen=True)
class Bad:
    """An invalid tools list, the index to blame, and a fragment of the message."""

    label: str
    tools: Any
    index: int | None
    match: str


BAD = [
    Bad(
        "not an object", [{"name": "ok", "parameters": {}}, "get_weather"], 1, r"tools\[1\] must be an object, got str"
    ),
    Bad("no known key", [{"description": "x"}], 0, r"tools\[0\] has none of 'function', 'input_schema' or 'name'"),
    Bad(
        "wrong type",
        [{"type": "retrieval", "function": {"name": "f"}}],
        0,
        r"tools\[0\] \('f'\) is invalid.*'type' must be 'function'",
    ),
    Bad("function without name", [{"type": "function", "function": {}}], 0, r"tools\[0\] is invalid: function.name"),
    Bad(
        "bad name chars",
        [{"name": "has space", "parameters": {}}],
        0,
        r"tools\[0\] \('has space'\) is invalid.*1 to 128",
    ),
    Bad("name too long", [{"name": "x" * 129, "parameters": {}}], 0, r"tools\[0\].*1 to 128"),
    Bad("anthropic schema not an object", [{"name": "f", "input_schema": "nope"}], 0, r"tools\[0\].*input_schema"),
    Bad(
        "parameters not an object",
        [{"type": "function", "function": {"name": "f", "parameters": [1]}}],
        0,
        r"tools\[0\].*parameters",
    ),
    Bad(
        "duplicate names",
        [{"name": "f", "parameters": {}}, {"function": {"name": "f"}}],
        1,
        r"tools\[1\]: duplicate tool name 'f'",
    ),
    Bad("a dict, not a list", {"name": "f"}, None, "tools must be a list of tool definitions, got dict"),
    Bad("a string", "f", None, "tools must be a list"),
    Bad("a number", 3, None, "tools must be a list"),
]


@pytest.mark.parametrize("bad", BAD, ids=[b.label for b in BAD])
def test_bad_tools_raise_tool_spec_error(bad: Bad) -> None:
    """A bad entry raises ToolSpecError (a ValueError) naming the offending index."""
    with pytest.raises(ValueError, match=bad.match) as info:
        normalize_tools(bad.tools)
    assert isinstance(info.value, ToolSpecError)
    assert info.value.index == bad.index


@pytest.mark.parametrize(
    "bad", [b for b in BAD if b.index is not None and "duplicate" not in b.label], ids=lambda b: b.label
)
def test_bad_entry_message_says_what_is_accepted(bad: Bad) -> None:
    """The message of a bad entry lists the accepted forms."""
    with pytest.raises(ToolSpecError, match="accepted forms: OpenAI.*Anthropic.*bare"):
        normalize_tools(bad.tools)


def test_response_parser_validates_tools() -> None:
    """ResponseParser raises ToolSpecError on bad tools, before parsing anything."""
    with pytest.raises(ToolSpecError, match=r"tools\[0\]"):
        ResponseParser("hermes", tools=[{"nope": 1}])


def test_both_formats_filter_calls() -> None:
    """Tools in OpenAI and Anthropic format both make their names callable."""
    tools = [
        {"type": "function", "function": {"name": "a", "parameters": {}}},
        {"name": "b", "input_schema": {"type": "object"}},
    ]
    p = ResponseParser("hermes", tools=tools)
    text = "".join(f'<tool_call>{{"name": "{n}", "arguments": {{}}}}</tool_call>' for n in "abc")
    deltas = p.feed(text, final=True)
    names = [tc.function.name for d in deltas for tc in d.tool_calls if tc.function.name]
    assert names == ["a", "b"]
    assert "".join(d.content or "" for d in deltas) == '<tool_call>{"name": "c", "arguments": {}}</tool_call>'


def test_tool_spec_is_one_class_everywhere() -> None:
    """deltaflow.ToolSpec, deltaflow.tools.ToolSpec and the core's ToolSpec are the same class."""
    assert ToolSpec is deltaflow.tools.ToolSpec is toolspec.ToolSpec


@pytest.mark.parametrize(
    "module",
    ["deltaflow", "deltaflow.stages.tool_feeder", "deltaflow.parsers", "deltaflow.pipeline.sync"],
)
def test_importing_the_core_does_not_import_pydantic(module: str) -> None:
    """pydantic stays at the edge: importing the package, its parsers and stages leaves it unimported."""
    code = f"import sys, {module}; assert 'pydantic' not in sys.modules, 'pydantic was imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_normalize_tools_imports_pydantic_when_it_validates() -> None:
    """The first entry to validate brings pydantic in (in a fresh interpreter), and validation works there."""
    code = (
        "import sys, deltaflow\n"
        "assert deltaflow.normalize_tools([deltaflow.ToolSpec(name='f')]) is not None\n"
        "assert 'pydantic' not in sys.modules\n"
        "assert deltaflow.normalize_tools([{'name': 'f'}])[0] == deltaflow.ToolSpec(name='f')\n"
        "assert 'pydantic' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
