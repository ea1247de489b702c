"""The public API: exports, messages and their JSON shape."""

from __future__ import annotations

import types
from importlib.metadata import version
from pathlib import Path

import msgspec
import pytest

import deltaflow
from deltaflow import DeltaFunctionCall, DeltaMessage, DeltaToolCall, parse_complete


def test_all_matches_exports() -> None:
    """Every name in __all__ is exported, and every public export is in __all__."""
    public = {
        n for n in dir(deltaflow) if not n.startswith("_") and not isinstance(getattr(deltaflow, n), types.ModuleType)
    }
    assert set(deltaflow.__all__) - {"__version__"} == public


def test_version_is_pyprojects() -> None:
    """deltaflow.__version__ is the installed distribution's version, which is pyproject.toml's."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    declared = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"]
    assert deltaflow.__version__ == version("deltaflow") == declared


def test_delta_encodes_as_openai_delta_shape() -> None:
    """None fields and empty tool_calls are omitted from the JSON of a delta."""
    assert msgspec.json.encode(DeltaMessage(content="hi")) == b'{"content":"hi"}'
    d = DeltaMessage(
        tool_calls=[DeltaToolCall(index=0, id="call_1", type="function", function=DeltaFunctionCall(name="f"))]
    )
    assert msgspec.json.decode(msgspec.json.encode(d)) == {
        "tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "f"}}]
    }


def test_parse_complete_hermes_with_reasoning() -> None:
    """Reasoning, content and a call come out of one complete output."""
    m = parse_complete(
        '<think>why</think>ok<tool_call>{"name": "f", "arguments": {"a": [1, "x"]}}</tool_call>',
        tool_parser="hermes",
        reasoning_parser="qwen3",
    )
    assert (m.reasoning_content, m.content) == ("why", "ok")
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [("f", '{"a": [1, "x"]}')]
    assert m.tool_calls[0].id.startswith("call_") and m.tool_calls[0].type == "function"


def test_unknown_parser_lists_registered_names() -> None:
    """An unknown parser name is a ValueError that lists the registered names."""
    with pytest.raises(ValueError, match="hermes.*internlm.*llama3_json"):
        deltaflow.ResponseParser(tool_parser="nope")
    with pytest.raises(deltaflow.UnknownParserError, match="deepseek_r1, .*qwen3"):
        deltaflow.ResponseParser(reasoning_parser="nope")
