"""Fixtures for the agent tests (the helpers are in agent_support.py, the engine double in engine_double.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_support import AgentGateway, start_gateway
from engine_double import Rule


@pytest.fixture
def agent_gateway(shared: Path, tmp_path: Path) -> Iterator[Callable[..., AgentGateway]]:
    """``agent_gateway(script, **create_app_options)``: the scripted double and the gateway in front of it, stopped at the test's end
    (what the gateway received and what the double was asked are left in ``tmp_path / "recorded"``)."""
    running: list[AgentGateway] = []

    def start(script: list[Rule], **app_options: Any) -> AgentGateway:
        gw = start_gateway(shared / "tokenizers" / "qwen3", script, **app_options)
        running.append(gw)
        return gw

    yield start
    for i, gw in enumerate(running):
        gw.save(tmp_path / "recorded" / str(i))
        gw.stop()
