"""Starting a real uvicorn server on a free loopback port (imported by the server tests)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(app: Any, *, lifespan: str = "off") -> tuple[uvicorn.Server, threading.Thread, str]:
    """Start ``app`` under uvicorn in a thread; returns the server, the thread and the base URL.

    ``lifespan="on"`` runs the app's startup and shutdown (the gateway closes its upstream clients there).
    uvicorn's loop is its "auto" choice (uvloop where installed), as ``deltaflow serve`` runs."""
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan=lifespan))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    return server, thread, f"http://127.0.0.1:{port}"
