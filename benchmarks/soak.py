"""Disconnect soak: 1,000 streams against a real server, clients leaving at random points.

Each client (raw TCP, one of the three protocols, the ``gen`` model of the
recording engine in ``tests/reliability/live.py``) leaves before sending its
whole body, right after its request, after a random number of response
bytes, or reads to the end. The run is split into rounds; after each round
the server is left to quiesce and the benchmark reports the engine iterators
started and closed, the server loop's tasks before and after, and the
memory (``tracemalloc`` traced Python memory and the process RSS, after
``gc.collect()``) against the start level.

Usage::

    python -m benchmarks.soak                  # 1,000 streams in 4 rounds, markdown on stdout
    python -m benchmarks.soak --streams 200 --rounds 2 --concurrency 32
"""

from __future__ import annotations

import argparse
import logging
import sys
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "reliability"))

import structlog  # noqa: E402

from live import live_server  # noqa: E402
from soak_client import soak  # noqa: E402

MB = 1024 * 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--no-tracemalloc", action="store_true", help="measure RSS only (faster)")
    args = ap.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    if not args.no_tracemalloc:
        tracemalloc.start()
    per = args.streams // args.rounds
    print(f"# Disconnect soak: {per * args.rounds} streams, {args.rounds} rounds, concurrency {args.concurrency}\n")
    print("| round | streams | modes | iterators started / closed | server tasks before / after "
          "| traced MB before / after | RSS MB before / after | s |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    first = None
    last = None
    leaked = 0
    unclosed = 0
    with live_server(heartbeat=0.5) as srv:
        for k in range(args.rounds):
            r = soak(srv, per, concurrency=args.concurrency, seed=k * per, warmup=30 if k == 0 else 0)
            first = first or r
            last = r
            leaked += max(0, r.tasks_after - r.tasks_before)
            unclosed += r.started - r.closed
            modes = ", ".join(f"{m} {n}" for m, n in sorted(r.modes.items()))
            print(
                f"| {k + 1} | {r.streams} | {modes} | {r.started} / {r.closed} | {r.tasks_before} / {r.tasks_after} | "
                f"{r.traced_before / MB:.3f} / {r.traced_after / MB:.3f} "
                f"| {r.rss_before / MB:.1f} / {r.rss_after / MB:.1f} | "
                f"{r.seconds:.1f} |",
                flush=True,
            )
            if r.leaked_tasks:
                print("leaked:", *r.leaked_tasks, sep="\n  ")
    assert first is not None and last is not None
    print(
        f"\nTotal: {per * args.rounds} streams; engine iterators not closed: {unclosed}; leaked tasks: {leaked}; "
        f"traced Python memory {first.traced_before / MB:.3f} MB -> {last.traced_after / MB:.3f} MB "
        f"({(last.traced_after - first.traced_before) / 1024:+.1f} KB); "
        f"RSS {first.rss_before / MB:.1f} MB -> {last.rss_after / MB:.1f} MB."
    )
    return 0 if unclosed == 0 and leaked == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
