"""What the gateway tests on a real llama.cpp engine share: the forced tool and its check, and a gateway on loopback.

A random-weight model writes nothing useful, so these tests force a call with ``tool_choice``; the tool's
schema is bounded (a short string, an enum, no other keys) so that the constrained engine finishes it
within a few dozen tokens, and :func:`valid` checks what a client received against it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "server"))
from conftest_server import start_server  # noqa: E402

from deltaflow.gateway.config import ModelConfig, build_engine  # noqa: E402
from deltaflow.server import create_app  # noqa: E402

__all__ = ("CHAT_TOOLS", "SCHEMA", "gateway_on", "valid")

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
CHAT_TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": SCHEMA}}]


def valid(args: dict[str, Any]) -> bool:
    """``args`` satisfy :data:`SCHEMA`."""
    return (
        set(args) == {"city", "unit"}
        and isinstance(args["city"], str)
        and len(args["city"]) <= 12
        and args["unit"] in ("celsius", "fahrenheit")
    )


@contextmanager
def gateway_on(config: ModelConfig) -> Iterator[str]:
    """deltaflow's app serving ``config`` on loopback (uvicorn in a thread); yields its base URL."""
    engine = anyio.run(build_engine, [config])
    server, thread, base = start_server(create_app(engine, heartbeat=5.0), lifespan="on")
    try:
        yield base
    finally:
        server.should_exit = True
        thread.join(10)
