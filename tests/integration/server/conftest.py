"""A real uvicorn server on 127.0.0.1 (a free port) running the deltaflow app."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from conftest_server import start_server

from deltaflow.server import create_app


@dataclass
class LiveServer:
    """A running server and its base URL."""

    base: str
    app: Any


@pytest.fixture(scope="module")
def live_server() -> Iterator[LiveServer]:
    """The app over the bundled replay engine (as fast as possible)."""
    app = create_app(heartbeat=5.0)
    server, thread, base = start_server(app)
    try:
        yield LiveServer(base=base, app=app)
    finally:
        server.should_exit = True
        thread.join(10)
