"""``python -m benchmarks.roundrobin``: the cost per token of N interleaved responses, without any async.

N ``ResponseParser``s with OpenAI Chat Completions framers and one SSE
encoder are fed the W3 scale workload (one chunk per Qwen3 token) round
robin: token 1 of every response, then token 2 of every response, and so
on, as N concurrent streams interleave in one event loop. Nothing is
awaited, so what grows with N is only the working set the responses keep
(parsers, framers, the partial results), not the event loop. Each
response's rebuilt message is checked before the time is reported.

Example::

    python -m benchmarks.roundrobin --streams 1,100,300,1000
"""

from __future__ import annotations

import argparse
import time

from deltaflow import ResponseParser
from deltaflow.sinks import ChatCompletionsFramer, SSEEncoder

from .modes import parser_kwargs
from .scale import _chunks
from .verify import Fold
from .workloads import make_w3


def run(n: int) -> tuple[float, int]:
    """Feed ``n`` interleaved responses; return (CPU seconds, tokens), after checking every result."""
    wl = make_w3(4096, key="W3-scale-4096")
    chunks, _ = _chunks(wl)
    kwargs = parser_kwargs(wl)
    parsers = [ResponseParser(**kwargs) for _ in range(n)]
    framers = [ChatCompletionsFramer("bench") for _ in range(n)]
    folds = [Fold() for _ in range(n)]
    encode = SSEEncoder().encode
    pairs = list(zip(parsers, framers, folds, strict=True))
    t0 = time.process_time()
    for c in [*chunks, None]:
        for parser, framer, fold in pairs:
            for d in parser.feed("", final=True) if c is None else parser.feed(c):
                fold.add(d)
                events = framer.feed(d)
                if events:
                    encode(events)
    elapsed = time.process_time() - t0
    bad = [p for p in (f.check(wl) for f in folds) if p is not None]
    if bad:
        raise SystemExit(f"{len(bad)} of {n} responses wrong: {bad[0]}")
    return elapsed, n * len(chunks)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.roundrobin", description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", default="1,100,300,1000", help="comma list of N (default 1,100,300,1000)")
    a = ap.parse_args()
    for n in (int(x) for x in a.streams.split(",")):
        elapsed, tokens = run(n)
        print(
            f"{n:>5} interleaved responses: {tokens / elapsed:>10,.0f} tokens/s, {elapsed / tokens * 1e6:.2f} µs/token"
        )


if __name__ == "__main__":
    main()
