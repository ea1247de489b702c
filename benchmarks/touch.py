"""``python -m benchmarks.touch``: what a token costs when each stream touches its own memory.

No deltaflow here: N tasks in one event loop each read the W3 scale
workload's tokens from the engine-like source of :mod:`benchmarks.scale`
(one event-loop turn per token) and, per token, update ``--touch`` small
objects spread over ``--kb`` KB of objects of their own. With nothing
touched the cost per token is the event loop's and does not grow with N;
with a working set per stream, it grows once N streams' working sets no
longer fit the caches: what a real pipeline pays at 1,000 streams (see the
README's Performance section).

Example::

    python -m benchmarks.touch --streams 100,1000 --kb 30 --touch 0,40
"""

from __future__ import annotations

import argparse
import gc
import time

import anyio

from .scale import _chunks, _source
from .workloads import make_w3


async def _run(n: int, kb: int, touch: int, chunks: list[str]) -> float:
    async def one() -> None:
        ballast = [{"a": i, "b": str(i)} for i in range(max(1, kb * 1000 // 300))]
        step = max(1, len(ballast) // touch) if touch else 1
        hot = ballast[::step][:touch] if touch else []
        async for _ in _source(chunks):
            for o in hot:
                o["a"] += 1

    gc.collect()
    t0 = time.process_time()
    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(one)
    return (time.process_time() - t0) / (n * len(chunks)) * 1e6


def main(argv: list[str] | None = None) -> int:
    """Print the CPU µs per token for every (streams, touched objects) pair."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.touch", description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", default="100,1000", help="comma list of concurrent streams")
    ap.add_argument("--kb", type=int, default=30, help="KB of objects each stream owns (default 30)")
    ap.add_argument("--touch", default="0,40", help="comma list: objects each stream updates per token")
    a = ap.parse_args(argv)
    chunks, _ = _chunks(make_w3(4096, key="W3-scale-4096"))
    for touch in (int(x) for x in a.touch.split(",")):
        for n in (int(x) for x in a.streams.split(",")):
            us = anyio.run(_run, n, a.kb, touch, chunks)
            print(f"{n:>5} streams, {a.kb} KB each, {touch:>3} objects touched per token: {us:.2f} µs/token")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
