"""A recording engine behind a real uvicorn server on loopback, and server-side probes.

The engine serves several models, each a behaviour (finish, fail, stall,
never finish, endless large chunks, random generated outputs); it counts
iterators created, started and closed (their ``finally`` blocks) and chunks
pulled. The probes run coroutines in the server thread's event loop to count
its tasks, and read memory.
"""

from __future__ import annotations

import asyncio
import gc
import random
import sys
import threading
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from deltaflow import TokenChunk
from deltaflow.server import EngineRequest, ModelInfo, create_app

sys.path.insert(0, str(Path(__file__).parents[1] / "integration" / "server"))
sys.path.insert(0, str(Path(__file__).parents[1] / "integration" / "pipeline"))

from conftest_server import start_server  # noqa: E402
from stream_helpers import TOOLS, hermes_qwen3_output  # noqa: E402

__all__ = ("BIG_CHUNK", "Live", "RecordingEngine", "live_server", "rss_bytes", "wait_until")

BIG_CHUNK = 4096


@dataclass
class Counters:
    """What the engine saw (mutated only in the server loop's thread)."""

    created: int = 0
    started: int = 0
    closed: int = 0
    pulled: dict[str, int] = field(default_factory=dict)


class RecordingEngine:
    """Models: ``ok``, ``fail`` (raises mid-stream), ``stall`` (sleeps forever), ``nofinish``,
    ``big`` (endless 4 KB chunks) and ``gen`` (a generated hermes/qwen3 output, seeded by the body's ``seed``)."""

    MODELS = ("ok", "fail", "stall", "nofinish", "big", "gen")

    def __init__(self) -> None:
        self.counters = Counters()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closed_event = threading.Event()

    def models(self) -> list[ModelInfo]:
        return [ModelInfo(m, tool_parser="hermes", reasoning_parser="qwen3") for m in self.MODELS]

    def generate(self, request: EngineRequest) -> AsyncIterator[Any]:
        self.counters.created += 1
        return self._generate(request)

    async def _generate(self, request: EngineRequest) -> AsyncIterator[Any]:
        c = self.counters
        c.started += 1
        model = request.model
        try:
            if self.loop is None:
                self.loop = asyncio.get_running_loop()
            for chunk in self._chunks(request):
                c.pulled[model] = c.pulled.get(model, 0) + 1
                yield chunk
                await anyio.lowlevel.checkpoint()
                if model == "gen":
                    await anyio.sleep(0.0005)
            if model == "stall":
                await anyio.sleep_forever()
        finally:
            c.closed += 1
            self.closed_event.set()

    def _chunks(self, request: EngineRequest) -> Iterator[Any]:
        model = request.model
        if model == "ok":
            yield from ("<think>plan</think>", "Hello ", "world")
            yield TokenChunk(text="!", finish_reason="stop")
        elif model == "fail":
            yield from ("<think>plan</think>", "Hello ")
            raise RuntimeError("engine exploded")
        elif model == "stall":
            yield "<think>thinking"
        elif model == "nofinish":
            yield from ("<think>plan</think>", "Hello ", "world")
        elif model == "big":
            piece = "a " * (BIG_CHUNK // 2)
            while True:
                yield piece
        elif model == "gen":
            seed = int(request.body.get("seed", 0))
            text = hermes_qwen3_output(seed, calls=random.Random(seed).randint(0, 3)) * 3
            rnd = random.Random(seed)
            i = 0
            while i < len(text):
                k = rnd.randint(1, 24)
                yield text[i : i + k]
                i += k
            yield TokenChunk(text="", finish_reason="stop")


@dataclass
class Live:
    """A live server: its base URL, its engine and the uvicorn server object."""

    base: str
    engine: RecordingEngine
    server: Any

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self.engine.loop is not None, "no request reached the engine yet"
        return self.engine.loop

    def run_in_server(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` in the server's event loop thread and return its result."""

        async def call() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(10)

    def task_count(self) -> int:
        """Tasks alive in the server loop (excluding the probe itself)."""
        return int(self.run_in_server(lambda: len(asyncio.all_tasks()) - 1))

    def task_names(self) -> list[str]:
        """Names and coroutines of the tasks alive in the server loop (excluding the probe)."""
        me = "probe"

        def names() -> list[str]:
            cur = asyncio.current_task()
            return [f"{t.get_name()}:{t.get_coro()!r}" for t in asyncio.all_tasks() if t is not cur] or [me]

        return list(self.run_in_server(names))


@contextmanager
def live_server(heartbeat: float | None = 0.2) -> Iterator[Live]:
    """Start the app over a fresh :class:`RecordingEngine` on a loopback port."""
    engine = RecordingEngine()
    server, thread, base = start_server(create_app(engine, heartbeat=heartbeat))
    try:
        yield Live(base=base, engine=engine, server=server)
    finally:
        server.should_exit = True
        thread.join(10)


def wait_until(cond: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll ``cond`` until it holds (a hang guard, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not hold within {timeout} s")
        time.sleep(0.01)


def rss_bytes() -> int:
    """This process's resident set size (Linux ``/proc``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def traced_now() -> int:
    """Current ``tracemalloc`` traced memory after a full collection (0 when not tracing)."""
    gc.collect()
    return tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else 0


OFFERED_TOOLS = TOOLS
