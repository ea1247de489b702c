"""``python -m benchmarks.profile``: where one cell's time goes (cProfile or pyinstrument).

Examples::

    python -m benchmarks.profile                                  # sync core, W1-64k, K=4, cProfile
    python -m benchmarks.profile --mode stream --tool pyinstrument
    python -m benchmarks.profile --mode stream-sse --workload W3-think+3calls --k 16

The cell is verified first (as in the suite), then profiled over ``--runs``
runs. cProfile (on process CPU time) gives exact call counts but inflates
the cost of small calls; pyinstrument (``pip install pyinstrument``)
samples, so its shares are closer to the real ones.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from collections.abc import Callable
from typing import Any

import anyio

from .modes import MODES
from .workloads import build, missing_parsers, text_chunks


def _runner(workload: str, k: int, mode_name: str, runs: int) -> Callable[[], Any]:
    wl = build(workload)
    reason = missing_parsers(wl)
    if reason:
        sys.exit(f"{workload}: {reason}")
    mode = MODES[mode_name]
    chunks = text_chunks(wl.text, k)
    check = mode.check(wl)
    if mode.is_async:
        arun = mode.async_run(wl, chunks)

        async def many() -> None:
            problem = check(await arun())
            if problem:
                sys.exit(f"FAIL before profiling: {problem}")
            for _ in range(runs):
                await arun()

        return lambda: anyio.run(many)
    prepare, run = mode.sync_run(wl, chunks)
    problem = check(run(prepare()) if prepare else run())
    if problem:
        sys.exit(f"FAIL before profiling: {problem}")

    def many_sync() -> None:
        for _ in range(runs):
            run(prepare()) if prepare else run()

    return many_sync


def main(argv: list[str] | None = None) -> int:
    """Profile one cell and print its top functions."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="W1-64k")
    ap.add_argument("--k", type=int, default=4, help="chunk size in characters")
    ap.add_argument("--mode", default="sync", choices=sorted(MODES))
    ap.add_argument("--tool", default="cprofile", choices=("cprofile", "pyinstrument"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args(argv)
    go = _runner(a.workload, a.k, a.mode, a.runs)
    if a.tool == "pyinstrument":
        try:
            from pyinstrument import Profiler
        except ImportError:
            sys.exit("pyinstrument is not installed: pip install pyinstrument")
        prof = Profiler(interval=0.0005)
        prof.start()
        go()
        prof.stop()
        print(prof.output_text(unicode=False, color=False))
        return 0
    pr = cProfile.Profile(time.process_time)  # CPU time: the machine may be shared
    pr.enable()
    go()
    pr.disable()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(a.top)
    print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
