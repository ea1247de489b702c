"""Every stage follows the Stage protocol."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from deltaflow import StateError
from deltaflow.parsers import registry
from deltaflow.stages import (
    DeltaAssembler,
    IdentityFirstBuffer,
    NameFilter,
    ReasoningSplitter,
    Stage,
    ToolBlockFeeder,
)
from deltaflow.stages.detokenize import Detokenizer
from deltaflow.stages.router import ChannelRouter


@dataclass(frozen=True)
class StageCase:
    """How to build a stage, and whether a second finish() must raise."""

    label: str
    make: Callable[[], Stage]
    finish_once: bool


STAGES = [
    StageCase("detokenize", Detokenizer, True),
    StageCase("router", ChannelRouter, False),
    StageCase("reasoning", lambda: ReasoningSplitter(registry.get_reasoning_dialect("qwen3")), True),
    StageCase("tools", lambda: ToolBlockFeeder(registry.get_tool_dialect("hermes")), True),
    StageCase("identity", IdentityFirstBuffer, True),
    StageCase("name_filter", NameFilter, False),
    StageCase("assembler", DeltaAssembler, True),
]


@pytest.mark.parametrize("case", STAGES, ids=[c.label for c in STAGES])
def test_stage_has_name_feed_and_finish(case: StageCase) -> None:
    """Every stage has a string ``name``, ``feed`` and ``finish``, and satisfies Stage."""
    stage = case.make()
    assert isinstance(stage, Stage)
    assert isinstance(stage.name, str) and stage.name == type(stage).name
    assert callable(stage.feed) and callable(stage.finish)
    assert isinstance(stage.finish(), list)


def test_stage_names_are_distinct() -> None:
    """Stage names tell the stages apart (they name a stage in errors and logs)."""
    names = [c.make().name for c in STAGES]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("case", [c for c in STAGES if c.finish_once], ids=lambda c: c.label)
def test_finish_twice_raises_state_error(case: StageCase) -> None:
    """Where implemented, a second finish() is API misuse (StateError)."""
    stage = case.make()
    stage.finish()
    with pytest.raises(StateError, match="twice"):
        stage.finish()
