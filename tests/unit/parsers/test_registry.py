"""The parser registry: built-in names, lookups, registration."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from deltaflow import UnknownParserError
from deltaflow.parsers import JsonEnvelopeFormat, ReasoningDialect, declare, registry
from deltaflow.testing import check_chunkings


@pytest.fixture
def clean_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Registrations made by a test are undone after it."""
    monkeypatch.setattr(registry, "_TOOL", dict(registry._TOOL))
    monkeypatch.setattr(registry, "_REASONING", dict(registry._REASONING))
    yield


def test_builtin_names() -> None:
    """The built-in tool and reasoning parsers are registered under their server names, sorted."""
    assert {"hermes", "internlm", "llama3_json"} <= set(registry.tool_dialect_names())
    assert {"qwen3", "deepseek_r1"} <= set(registry.reasoning_dialect_names())
    assert list(registry.tool_dialect_names()) == sorted(registry.tool_dialect_names())
    assert list(registry.reasoning_dialect_names()) == sorted(registry.reasoning_dialect_names())


def test_lookup_returns_the_declaration() -> None:
    """get_* return the declaration registered under the name."""
    assert registry.get_tool_dialect("hermes").name == "hermes"
    assert registry.get_tool_dialect("hermes").openers == ("<tool_call>",)
    spec = registry.get_reasoning_dialect("qwen3")
    assert (spec.start, spec.end, spec.starts_open) == ("<think>", "</think>", True)


@pytest.mark.parametrize("name", ["nope", "", "HERMES"])
def test_unknown_tool_parser_lists_names(name: str) -> None:
    """An unknown tool parser is an UnknownParserError (a ValueError) listing the registered names."""
    with pytest.raises(ValueError, match=re.escape(", ".join(registry.tool_dialect_names()))) as info:
        registry.get_tool_dialect(name)
    err = info.value
    assert isinstance(err, UnknownParserError)
    assert (err.kind, err.name) == ("tool", name)
    assert err.available == registry.tool_dialect_names()


def test_unknown_reasoning_parser_lists_names() -> None:
    """An unknown reasoning parser is an UnknownParserError listing the registered names."""
    with pytest.raises(UnknownParserError, match=re.escape(", ".join(registry.reasoning_dialect_names()))) as info:
        registry.get_reasoning_dialect("nope")
    assert info.value.kind == "reasoning"


def test_unhashable_name_is_an_unknown_parser() -> None:
    """A name that is not even hashable is reported as unknown, not as a TypeError."""
    with pytest.raises(UnknownParserError):
        registry.get_tool_dialect(["hermes"])  # type: ignore[arg-type]


@pytest.mark.usefixtures("clean_registry")
def test_register_a_new_dialect_and_use_it() -> None:
    """A dialect declared with declare() is registered and usable by name."""
    d = declare("my_model", JsonEnvelopeFormat(open=("<call>",), close="</call>"))
    assert registry.get_tool_dialect("my_model") is d
    assert "my_model" in registry.tool_dialect_names()
    m = check_chunkings('x<call>{"name": "f", "arguments": {"a": 1}}</call>y', tool_parser="my_model")
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [("f", '{"a": 1}')]
    assert m.content == "xy"


@pytest.mark.usefixtures("clean_registry")
def test_duplicate_registration_needs_replace() -> None:
    """Registering a taken name is a ValueError unless replace=True."""
    with pytest.raises(ValueError, match="already registered"):
        declare("hermes", JsonEnvelopeFormat(open=("<x>",), close="</x>"))
    again = declare("hermes", JsonEnvelopeFormat(open=("<x>",), close="</x>"), register=False)
    with pytest.raises(ValueError, match="already registered"):
        registry.register_tool_dialect(again)
    assert registry.register_tool_dialect(again, replace=True) is again
    assert registry.get_tool_dialect("hermes") is again
    with pytest.raises(ValueError, match="already registered"):
        registry.register_reasoning_dialect(ReasoningDialect(name="qwen3", start="<a>", end="</a>"))


@pytest.mark.usefixtures("clean_registry")
def test_register_a_reasoning_protocol() -> None:
    """A registered reasoning protocol is usable by name, including one the model must open itself."""
    registry.register_reasoning_dialect(ReasoningDialect(name="mine", start="<r>", end="</r>", starts_open=False))
    m = check_chunkings("<r>why</r>answer", reasoning_parser="mine")
    assert (m.reasoning_content, m.content) == ("why", "answer")
    m2 = check_chunkings("plain <r>x</r>", reasoning_parser="mine")
    assert (m2.reasoning_content, m2.content) == (None, "plain <r>x</r>")


def test_register_rejects_wrong_types() -> None:
    """Registering something that is not a declaration is a TypeError."""
    with pytest.raises(TypeError, match="ToolDialect"):
        registry.register_tool_dialect("hermes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ReasoningDialect"):
        registry.register_reasoning_dialect(object())  # type: ignore[arg-type]
