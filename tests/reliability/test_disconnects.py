"""Disconnect soak, short version: 100 raw clients leave a real server at random points.

The full run (1,000 streams, figures printed) is ``python -m benchmarks.soak``.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator

import pytest

from live import Live, live_server
from soak_client import SoakResult, soak

STREAMS = 100


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    """A live server over the recording engine."""
    with live_server(heartbeat=0.2) as srv:
        yield srv


@pytest.fixture(scope="module")
def result(live: Live) -> SoakResult:
    """One soak of ``STREAMS`` streams with tracemalloc on."""
    tracemalloc.start()
    try:
        return soak(live, STREAMS, concurrency=16, seed=7)
    finally:
        tracemalloc.stop()


def test_every_engine_iterator_is_closed(result: SoakResult) -> None:
    """Every engine iterator that started was closed (its finally block ran), whatever the disconnect point."""
    r = result
    assert r.streams == STREAMS
    assert r.modes.get("mid-stream", 0) > 30 and r.modes.get("after-request", 0) > 0
    assert r.started >= STREAMS - r.modes.get("partial-body", 0) - 5  # a few may leave before the handler starts
    assert r.closed == r.started
    assert r.created == r.started


def test_no_task_is_left_alive(result: SoakResult) -> None:
    """The server loop has as many tasks after the soak as before it."""
    r = result
    assert r.tasks_after <= r.tasks_before, r.leaked_tasks


def test_memory_returns_to_its_start_level(result: SoakResult) -> None:
    """Python memory traced after the soak is within 256 KB of its level before (no per-stream leak)."""
    r = result
    assert r.traced_after - r.traced_before < 256 * 1024, (r.traced_before, r.traced_after)
