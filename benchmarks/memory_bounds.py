"""Memory bounds on adversarial model output: peak memory held vs input size, every tool dialect.

The cases are the ones of ``tests/reliability/adversarial.py`` (the default
suite runs them at 1 MB); here each runs at 50 MB (``--mb``), fed in 4 KB
chunks through a :class:`deltaflow.ResponseParser` under ``tracemalloc``.
A case whose time per MB grows (super-linear work) is stopped at the largest
size that fits ``--budget`` seconds and reported at that size.

Usage::

    python -m benchmarks.memory_bounds               # 50 MB per case, markdown table on stdout
    python -m benchmarks.memory_bounds --mb 8 --only hermes

Columns: input MB, peak MB held (tracemalloc peak above the start), MB
retained before the final chunk, peak / input, the documented kind
(``streams``: constant; ``held``: a value that needs whole conversion), and
whether the bound holds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "reliability"))

from adversarial import CASES, VIOLATIONS, Case, Measure, measure, within_bound  # noqa: E402

MB = 1024 * 1024


def run_case(case: Case, target: int, budget: float) -> tuple[Measure, float, float | None]:
    """Run ``case`` at ``target`` bytes, or at the largest doubling size under ``budget`` seconds.

    Returns the measure, its seconds, and the time ratio of the last doubling (None for one run).
    """
    size = min(target, 2 * MB)
    prev: float | None = None
    ratio: float | None = None
    while True:
        t = time.perf_counter()
        m = measure(case, size)
        dt = time.perf_counter() - t
        if prev is not None and prev > 0.05:
            ratio = dt / prev
        if size >= target:
            return m, dt, ratio
        nxt = min(target, size * 4 if dt < 1 else size * 2)
        # Predict the next run from the observed growth (linear: x(nxt/size); quadratic: squared).
        growth = (nxt / size) ** (2 if ratio is not None and ratio > 2.6 else 1)
        if dt * growth > budget:
            return m, dt, ratio
        prev = dt if nxt == size * 2 else None
        size = nxt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=50.0, help="input size per case in MB (default 50)")
    ap.add_argument(
        "--budget", type=float, default=120.0, help="seconds one run may take before the size stops growing"
    )
    ap.add_argument("--only", default="", help="run only cases whose id contains this text")
    args = ap.parse_args(argv)
    target = int(args.mb * MB)
    print(f"# Adversarial memory bounds ({args.mb:g} MB per case, 4 KB chunks, tracemalloc)\n")
    print("| case | kind | input MB | peak MB | retained MB | peak/input | s | MB/s | bound |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    bad = 0
    for case in CASES:
        if args.only and args.only not in case.id:
            continue
        m, dt, ratio = run_case(case, target, args.budget)
        ok = within_bound(case, m)
        verdict = "ok" if ok else ("VIOLATION (known)" if case.id in VIOLATIONS else "VIOLATION")
        if m.input_bytes < target - MB:
            verdict += (
                f"; stopped at {m.input_bytes / MB:.0f} MB (x{ratio:.1f} time per x2 input)" if ratio else "; stopped"
            )
        bad += not ok
        print(
            f"| {case.id} | {case.kind} | {m.input_bytes / MB:.1f} | {m.peak_bytes / MB:.3f} | "
            f"{m.retained_bytes / MB:.3f} | {m.peak_bytes / m.input_bytes:.3f} | {dt:.1f} | "
            f"{m.input_bytes / MB / dt if dt else 0:.1f} | {verdict} |",
            flush=True,
        )
    print(f"\n{bad} case(s) outside their bound.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
