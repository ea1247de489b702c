"""The exception tree."""

from __future__ import annotations

import pytest

import deltaflow
from deltaflow import DeltaflowError, ModelOutputError, StateError, ToolSpecError, UnknownParserError
from deltaflow.errors import StageError


@pytest.mark.parametrize(
    ("cls", "builtin"),
    [(UnknownParserError, ValueError), (ToolSpecError, ValueError), (StateError, RuntimeError), (ModelOutputError, ValueError)],
    ids=lambda x: x.__name__,
)
def test_errors_derive_from_root_and_builtin(cls: type[Exception], builtin: type[Exception]) -> None:
    """Every error derives from DeltaflowError and from the builtin it mirrors."""
    assert issubclass(cls, DeltaflowError)
    assert issubclass(cls, builtin)


def test_stage_error_is_a_deltaflow_error() -> None:
    """StageError derives from DeltaflowError and names the stage."""
    err = StageError("tools")
    assert isinstance(err, DeltaflowError) and err.stage == "tools" and "tools" in str(err)


def test_unknown_parser_error_attributes() -> None:
    """UnknownParserError carries kind, name and the sorted registered names, and lists them in its message."""
    err = UnknownParserError("tool", "nope", ["b", "a"])
    assert (err.kind, err.name, err.available) == ("tool", "nope", ("a", "b"))
    assert str(err) == "unknown tool parser 'nope'; registered tool parsers: a, b"


def test_tool_spec_error_index() -> None:
    """ToolSpecError carries the offending index (None by default)."""
    assert ToolSpecError("x", index=3).index == 3
    assert ToolSpecError("x").index is None


def test_model_output_error_attributes() -> None:
    """ModelOutputError names the dialect, the position and the reason."""
    err = ModelOutputError("hermes", 12, "bad JSON")
    assert (err.dialect, err.position, err.reason) == ("hermes", 12, "bad JSON")
    assert "hermes" in str(err) and "12" in str(err) and "bad JSON" in str(err)


def test_feed_after_final_is_a_state_error() -> None:
    """Feeding a parser after final=True raises StateError (also catchable as RuntimeError)."""
    p = deltaflow.ResponseParser("hermes")
    p.feed("hi", final=True)
    with pytest.raises(RuntimeError, match="after final=True"):
        p.feed("more")
    with pytest.raises(StateError):
        p.feed("", final=True)


def test_public_errors_are_exported() -> None:
    """The public errors are importable from deltaflow and present themselves as deltaflow's."""
    for cls in (DeltaflowError, UnknownParserError, ToolSpecError, StateError, ModelOutputError):
        assert getattr(deltaflow, cls.__name__) is cls
        assert cls.__module__ == "deltaflow"
