"""Timing policy, memory probes and machine facts.

Each cell starts with a warm-up run whose result must pass the check (else
the cell fails and no time is reported). Then it is timed as the median of
several runs: at least ``min_runs`` and at least ``min_time`` seconds in
total, at most ``max_runs``; fewer when one run is long (stop after 3 runs
once 10 s are spent). A warm-up run of ``long_run`` seconds or more is the
only timed run. Every timed run's result is checked too. The garbage
collector stays enabled; ``gc.collect()`` runs before every run, outside
the clock.

Clock: by default the process CPU time (``time.process_time``), because the
benchmark machines are shared: other processes take the CPU away at random,
which inflates wall time by up to several times while the CPU time a run
needs stays put (the event loop never waits: sources and sinks are
in-memory, so CPU time is all the time a run takes). ``--clock wall`` uses
``time.perf_counter``; both are recorded.
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = (
    "Policy", "Timed", "ameasure", "atraced_peak", "machine_info", "measure", "rss_bytes", "set_clock", "traced_peak",
)

T = TypeVar("T")


@dataclass(frozen=True)
class Policy:
    """How many times to run a cell (see the module docstring)."""

    min_runs: int = 5
    min_time: float = 0.3
    max_runs: int = 30
    long_run: float = 20.0

    def more(self, times: list[float]) -> bool:
        """Whether another run is wanted after ``times`` (the first is the warm-up run)."""
        if len(times) == 1:
            return times[0] < self.long_run
        times = times[1:]
        n, spent = len(times), sum(times)
        if n >= self.max_runs:
            return False
        if n >= 3 and spent >= 10.0:
            return False
        return n < self.min_runs or spent < self.min_time


_CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.perf_counter}
_clock = time.process_time


def set_clock(name: str) -> None:
    """Choose the clock of every measurement: ``"cpu"`` (default) or ``"wall"``."""
    global _clock
    _clock = _CLOCKS[name]


@dataclass
class Timed:
    """The runs of one cell: seconds per run (chosen clock and wall clock) and the last result."""

    times: list[float]
    wall: list[float]
    result: Any

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def median_wall(self) -> float:
        return statistics.median(self.wall)


def _timed(times: list[float], wall: list[float], result: Any) -> Timed:
    # The warm-up run counts only when it is the only run.
    if len(times) > 1:
        times, wall = times[1:], wall[1:]
    return Timed(times, wall, result)


def measure(
    run: Callable[..., T], policy: Policy, check: Callable[[T], str | None], prepare: Callable[[], Any] | None = None
) -> Timed | str:
    """Time ``run()`` under ``policy``; every run's result must pass ``check``.

    With ``prepare``, each run is ``run(prepare())`` and only ``run`` is
    timed (per-response construction that the peers' harness does not time
    either).

    Returns:
        The timings, or the failure message of the first run that failed
        (then no time is reported).
    """
    times: list[float] = []
    wall: list[float] = []
    result: Any = None
    clock = _clock
    while policy.more(times):
        state = prepare() if prepare is not None else None
        gc.collect()
        w0, t0 = time.perf_counter(), clock()
        result = run(state) if prepare is not None else run()
        times.append(clock() - t0)
        wall.append(time.perf_counter() - w0)
        problem = check(result)
        if problem is not None:
            return problem
    return _timed(times, wall, result)


async def ameasure(run: Callable[[], Awaitable[T]], policy: Policy, check: Callable[[T], str | None]) -> Timed | str:
    """:func:`measure` for a coroutine function, inside a running event loop."""
    times: list[float] = []
    wall: list[float] = []
    result: Any = None
    clock = _clock
    while policy.more(times):
        gc.collect()
        w0, t0 = time.perf_counter(), clock()
        result = await run()
        times.append(clock() - t0)
        wall.append(time.perf_counter() - w0)
        problem = check(result)
        if problem is not None:
            return problem
    return _timed(times, wall, result)


def traced_peak(run: Callable[..., Any], prepare: Callable[[], Any] | None = None) -> int:
    """The tracemalloc peak, in bytes, of one call of ``run()`` (or ``run(prepare())``), untimed."""
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        if prepare is not None:
            run(prepare())
        else:
            run()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - base


async def atraced_peak(run: Callable[[], Awaitable[Any]]) -> int:
    """:func:`traced_peak` for a coroutine function."""
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        await run()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - base


def clock() -> float:
    """The chosen clock, now (for measurements made outside :func:`measure`)."""
    return _clock()


def rss_bytes() -> int:
    """The resident set size of this process (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _git_commit() -> str | None:
    """The checkout's commit, with ``+dirty`` when deltaflow/ has uncommitted changes (None outside git)."""
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "deltaflow"], cwd=repo, capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def machine_info() -> dict[str, Any]:
    """CPU model, cores, Python and the versions of the packages that matter here."""
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info: dict[str, Any] = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
    }
    try:
        info["load_avg_at_start"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    info["deltaflow_commit"] = _git_commit()
    from importlib.metadata import PackageNotFoundError, version

    for pkg in ("deltaflow", "anyio", "trio", "msgspec", "tokenizers"):
        try:
            info[pkg] = version(pkg)
        except PackageNotFoundError:
            info[pkg] = None
    return info
