"""Disconnect soak: many raw HTTP clients that leave a real server at random points.

Used by ``tests/reliability/test_disconnects.py`` (short) and
``benchmarks/soak.py`` (1,000 streams). Each client opens a TCP connection,
sends one streaming request for the ``gen`` model (a generated hermes/qwen3
output, delivered in small chunks) on one of the three protocols, then
either leaves before sending the whole body, leaves right after the request,
leaves after a random number of response bytes, or reads to the end.
"""

from __future__ import annotations

import gc
import json
import random
import time
import tracemalloc
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import anyio

from live import Live, rss_bytes, wait_until

__all__ = ("SoakResult", "soak")

PATHS = ("/v1/chat/completions", "/v1/responses", "/v1/messages")


def _body(path: str, seed: int) -> dict[str, Any]:
    if path == "/v1/responses":
        return {"model": "gen", "input": "hi", "stream": True, "seed": seed}
    body: dict[str, Any] = {
        "model": "gen",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "seed": seed,
    }
    if path == "/v1/messages":
        body["max_tokens"] = 100
    return body


async def one_client(host: str, port: int, seed: int) -> tuple[str, int]:
    """One client; returns its disconnect mode and the response bytes it read."""
    rnd = random.Random(seed)
    path = rnd.choice(PATHS)
    payload = json.dumps(_body(path, seed)).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    ).encode()
    r = rnd.random()
    mode = "partial-body" if r < 0.05 else "after-request" if r < 0.15 else "complete" if r < 0.3 else "mid-stream"
    limit = rnd.randint(1, 6000) if mode == "mid-stream" else None
    got = 0
    async with await anyio.connect_tcp(host, port) as sock:
        if mode == "partial-body":
            await sock.send(head + payload[: len(payload) // 2])
            return mode, 0
        await sock.send(head + payload)
        if mode == "after-request":
            return mode, 0
        while limit is None or got < limit:
            try:
                data = await sock.receive(65536 if limit is None else max(1, min(65536, limit - got)))
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                break
            got += len(data)
    return mode, got


@dataclass
class SoakResult:
    """What one soak run measured."""

    streams: int
    modes: dict[str, int]
    created: int
    started: int
    closed: int
    tasks_before: int
    tasks_after: int
    leaked_tasks: list[str] = field(default_factory=list)
    traced_before: int = 0
    traced_after: int = 0
    rss_before: int = 0
    rss_after: int = 0
    seconds: float = 0.0


def _quiesce(live: Live, baseline: int, timeout: float) -> None:
    c = live.engine.counters
    wait_until(lambda: c.closed == c.started, timeout, "every started engine iterator closed")
    try:
        wait_until(lambda: live.task_count() <= baseline, timeout, "server tasks back to the baseline")
    except AssertionError:
        pass  # reported by the caller with the task names


def _memory() -> tuple[int, int]:
    gc.collect()
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else 0
    return traced, rss_bytes()


async def _run_clients(live: Live, seeds: range, concurrency: int) -> Counter[str]:
    host, port_s = live.base.removeprefix("http://").rsplit(":", 1)
    port = int(port_s)
    modes: Counter[str] = Counter()
    limiter = anyio.CapacityLimiter(concurrency)

    async def run(seed: int) -> None:
        async with limiter:
            mode, _ = await one_client(host, port, seed)
            modes[mode] += 1

    async with anyio.create_task_group() as tg:
        for s in seeds:
            tg.start_soon(run, s)
    return modes


def soak(
    live: Live, streams: int, *, concurrency: int = 16, warmup: int = 30, seed: int = 0, timeout: float = 30.0
) -> SoakResult:
    """Warm up, take the baseline (tasks, memory), run ``streams`` clients, wait for quiescence, measure again."""
    anyio.run(_run_clients, live, range(seed + 10**6, seed + 10**6 + warmup), concurrency)
    c = live.engine.counters
    wait_until(lambda: c.closed == c.started, timeout, "warm-up iterators closed")
    time.sleep(0.2)
    tasks_before = live.task_count()
    traced_before, rss_before = _memory()
    created0, started0, closed0 = c.created, c.started, c.closed
    t0 = time.perf_counter()
    modes = anyio.run(_run_clients, live, range(seed, seed + streams), concurrency)
    seconds = time.perf_counter() - t0
    _quiesce(live, tasks_before, timeout)
    tasks_after = live.task_count()
    leaked = live.task_names() if tasks_after > tasks_before else []
    traced_after, rss_after = _memory()
    return SoakResult(
        streams=streams,
        modes=dict(modes),
        created=c.created - created0,
        started=c.started - started0,
        closed=c.closed - closed0,
        tasks_before=tasks_before,
        tasks_after=tasks_after,
        leaked_tasks=leaked,
        traced_before=traced_before,
        traced_after=traced_after,
        rss_before=rss_before,
        rss_after=rss_after,
        seconds=seconds,
    )
