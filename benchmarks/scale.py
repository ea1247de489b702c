"""Many concurrent streams in one event loop: aggregate throughput and memory per stream.

* Busy streams: N concurrent ``deltaflow.stream`` pipelines, each over a
  W3-like output (Qwen3 reasoning, content, 3 parallel calls) in
  token-sized text chunks (split where the real Qwen3 tokenizer's tokens
  end, when ``../shared/tokenizers/qwen3`` is present). One chunk counts as
  one token. Each consumer folds its deltas into a small string sink and
  the result of every stream is verified. Reported: wall time, aggregate
  tokens/s, µs per token (on the clock of :mod:`benchmarks.timing`, CPU
  time by default: one event loop uses one core), tracemalloc peak per
  stream (a separate run) and the RSS growth during the first timed run.
* Idle streams: N pipelines open over sources that have yielded nothing
  yet (engines still in prefill). Reported: traced memory and RSS per
  stream, next to a baseline of N bare consumer tasks over the same idle
  sources without deltaflow (what any server pays per request anyway).

With an SSE framer in ``deltaflow.sinks`` the busy streams are framed to
OpenAI SSE bytes (the issue's target is with SSE framing); otherwise the
plain pipeline is measured and the report says so.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.lowlevel import checkpoint

import deltaflow
from deltaflow import accumulate

from .modes import deltas_from_sse, find_sse_framer, parser_kwargs
from .timing import clock, rss_bytes
from .verify import Fold, check_message
from .workloads import Workload, make_w3, text_chunks, token_text_chunks

__all__ = ("ScaleConfig", "run_scale")


@dataclass
class ScaleConfig:
    """What to run at scale.

    Attributes:
        streams: the numbers of concurrent busy streams.
        idle: the number of idle streams (0: skip).
        reasoning_chars: the W3 reasoning size of each stream.
        runs: timed runs per N up to 100 streams (the median is reported); one above.
        traced: also take a tracemalloc run for N up to ``traced_max`` (slower).
        traced_max: the largest N given a tracemalloc run.
        backend: the anyio backend.
        prefetch: the pipelines' prefetch (0, the server's setting: the chain runs inline).
        framings: what to measure, in this order: ``pipeline`` (deltas only) and/or
            ``pipeline+SSE`` (framed to OpenAI SSE bytes).
    """

    streams: list[int]
    idle: int = 1000
    reasoning_chars: int = 4096
    runs: int = 3
    traced: bool = True
    traced_max: int = 100
    backend: str = "asyncio"
    prefetch: int = 0
    framings: tuple[str, ...] = ("pipeline", "pipeline+SSE")


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _chunks(wl: Workload) -> tuple[list[str], str]:
    from deltaflow.testing import load_tokenizer

    tok = load_tokenizer("qwen3")
    if tok is None:
        return text_chunks(wl.text, 3), "3-character chunks (no shared Qwen3 tokenizer)"
    return token_text_chunks(wl.text, tok), "one chunk per Qwen3 token"


async def _source(chunks: Sequence[str]) -> AsyncIterator[str]:
    """An engine-like source: it gives the event loop a turn before every token, as a server's
    engine queue does, so the concurrent streams really interleave token by token."""
    for c in chunks:
        await checkpoint()
        yield c


async def _consume(
    wl: Workload, chunks: Sequence[str], kwargs: dict[str, Any], framer: Any, out: list[Any], sse_bytes: int = 0
) -> None:
    if framer is None:
        fold = Fold()
        async with deltaflow.stream(_source(chunks), **kwargs) as deltas:
            async for d in deltas:
                fold.add(d)
        out.append(fold.check(wl))
        return
    n = 0

    def write(b: bytes) -> None:
        nonlocal n
        n += len(b)

    await framer(lambda: deltaflow.stream(_source(chunks), **kwargs), write)
    out.append(None if n == sse_bytes else f"{n} SSE bytes, the verified stream had {sse_bytes}")


async def _verified_sse_bytes(wl: Workload, chunks: Sequence[str], kwargs: dict[str, Any], framer: Any) -> int | str:
    """Frame one stream, decode its SSE back and check it; return its size (or what is wrong)."""
    parts: list[bytes] = []
    await framer(lambda: deltaflow.stream(_source(chunks), **kwargs), parts.append)
    data = b"".join(parts)
    problem = check_message(wl, accumulate(deltas_from_sse(data)))
    return problem if problem is not None else len(data)


async def _busy_once(
    n: int, wl: Workload, chunks: Sequence[str], kwargs: dict[str, Any], framer: Any, sse_bytes: int
) -> tuple[float, list[Any], int, float]:
    results: list[Any] = []
    peak_rss = rss_bytes()

    async def sample(stop: anyio.Event) -> None:
        nonlocal peak_rss
        while not stop.is_set():
            peak_rss = max(peak_rss, rss_bytes())
            with anyio.move_on_after(0.02):
                await stop.wait()

    base_rss = rss_bytes()
    w0, t0 = time.perf_counter(), clock()
    async with anyio.create_task_group() as outer:
        stop = anyio.Event()
        outer.start_soon(sample, stop)
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(_consume, wl, chunks, kwargs, framer, results, sse_bytes)
        stop.set()
    elapsed = clock() - t0
    return elapsed, results, max(peak_rss - base_rss, 0), time.perf_counter() - w0


async def _busy(cfg: ScaleConfig, n: int, wl: Workload, chunks: Sequence[str], framer: Any) -> dict[str, Any]:
    kwargs = parser_kwargs(wl) | {"prefetch": cfg.prefetch}
    sse_bytes = 0
    if framer is not None:
        verified = await _verified_sse_bytes(wl, chunks, kwargs, framer)
        if isinstance(verified, str):
            return {"streams": n, "status": "FAIL", "error": f"SSE stream wrong: {verified}"}
        sse_bytes = verified
    times: list[float] = []
    walls: list[float] = []
    rss_growth = 0
    for i in range(cfg.runs if n <= 100 else 1):
        gc.collect()
        elapsed, results, growth, wall = await _busy_once(n, wl, chunks, kwargs, framer, sse_bytes)
        if i == 0:
            rss_growth = growth
        bad = [r for r in results if r is not None]
        if len(results) != n or bad:
            return {"streams": n, "status": "FAIL", "error": f"{len(bad)} of {n} streams wrong: {bad[:1]}"}
        times.append(elapsed)
        walls.append(wall)
    med = statistics.median(times)
    tokens = n * len(chunks)
    row: dict[str, Any] = {
        "streams": n,
        "status": "OK",
        "tokens_per_stream": len(chunks),
        "median_s": med,
        "wall_median_s": statistics.median(walls),
        "runs": len(times),
        "tokens_per_s": tokens / med,
        "us_per_token": med / tokens * 1e6,
        "rss_growth_per_stream_kb": rss_growth / n / 1e3,
    }
    if cfg.traced and n <= cfg.traced_max:
        gc.collect()
        tracemalloc.start()
        try:
            base, _ = tracemalloc.get_traced_memory()
            await _busy_once(n, wl, chunks, kwargs, framer, sse_bytes)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        row["traced_peak_per_stream_kb"] = (peak - base) / n / 1e3
    return row


async def _idle(n: int, wl: Workload, with_deltaflow: bool, prefetch: int, shared: bool = False) -> dict[str, Any]:
    """Open ``n`` streams over sources that yield nothing yet; measure, then release them.

    With ``shared``, every stream runs one prebuilt ``Pipeline`` (``stream(pipeline=...)``,
    what a server can build once per dialect and tool set) instead of building its own.
    """
    release = anyio.Event()
    started = 0
    kwargs: dict[str, Any] = parser_kwargs(wl) | {"prefetch": prefetch}
    if shared:
        kwargs = {"pipeline": deltaflow.Pipeline.for_model(**kwargs)}

    async def idle_source() -> AsyncIterator[str]:
        nonlocal started
        started += 1
        await release.wait()
        return
        yield ""  # an async generator that ends without yielding

    async def consumer() -> None:
        if with_deltaflow:
            async with deltaflow.stream(idle_source(), **kwargs) as deltas:
                async for _ in deltas:
                    pass
        else:
            async for _ in idle_source():
                pass

    gc.collect()
    tracemalloc.start()
    try:
        base_traced, _ = tracemalloc.get_traced_memory()
        base_rss = rss_bytes()
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(consumer)
            while started < n:
                await anyio.sleep(0.01)
            await anyio.wait_all_tasks_blocked()
            gc.collect()
            traced, _ = tracemalloc.get_traced_memory()
            rss = rss_bytes()
            release.set()
    finally:
        tracemalloc.stop()
    return {
        "streams": n,
        "with_deltaflow": with_deltaflow,
        "prefetch": prefetch if with_deltaflow else None,
        "shared_pipeline": shared,
        "traced_per_stream_kb": (traced - base_traced) / n / 1e3,
        "rss_per_stream_kb": (rss - base_rss) / n / 1e3,
    }


async def _scale(cfg: ScaleConfig) -> dict[str, Any]:
    wl = make_w3(cfg.reasoning_chars, key=f"W3-scale-{cfg.reasoning_chars}")
    chunks, how = _chunks(wl)
    framer, reason = find_sse_framer()
    out: dict[str, Any] = {
        "workload": wl.key,
        "chars": wl.chars,
        "chunking": how,
        "tokens_per_stream": len(chunks),
        "sse": framer is not None,
        "sse_note": "" if framer is not None else f"no SSE framing measured: {reason}",
        "prefetch": cfg.prefetch,
        "busy": [],
        "idle": [],
    }
    known = {"pipeline": None, "pipeline+SSE": framer}
    framings = [(f, known[f]) for f in cfg.framings if f == "pipeline" or framer is not None]
    for label, fr in framings:
        for n in cfg.streams:
            row = await _busy(cfg, n, wl, chunks, fr)
            row["framing"] = label
            out["busy"].append(row)
            if row["status"] == "OK":
                traced = row.get("traced_peak_per_stream_kb")
                _say(
                    f"  scale {label:<12} {n:>5} streams: {row['tokens_per_s']:>10,.0f} tokens/s aggregate, "
                    f"{row['us_per_token']:.1f} us/token"
                    + ("" if traced is None else f", traced peak {traced:.1f} KB/stream")
                )
            else:
                _say(f"  scale {label:<12} {n:>5} streams: FAIL {row['error']}")
    if cfg.idle:
        for with_df, prefetch, shared in ((False, 0, False), (True, 16, False), (True, 0, False), (True, 0, True)):
            row = await _idle(cfg.idle, wl, with_df, prefetch, shared)
            out["idle"].append(row)
            what = (
                f"deltaflow prefetch={prefetch}{', shared Pipeline' if shared else ''}"
                if with_df
                else "bare task+source"
            )
            _say(
                f"  idle  {cfg.idle:>5} streams ({what}): "
                f"{row['traced_per_stream_kb']:.1f} KB traced, {row['rss_per_stream_kb']:.1f} KB RSS per stream"
            )
    return out


def run_scale(cfg: ScaleConfig) -> dict[str, Any]:
    """Run the scale measurements (see the module docstring)."""
    _say(f"scale: {cfg.streams} concurrent streams, {cfg.idle} idle")
    result: dict[str, Any] = anyio.run(_scale, cfg, backend=cfg.backend)
    return result


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.scale``: the scale measurements alone, in a fresh interpreter.

    The suite measures scale after every other workload, in the same process; at 1,000 streams
    the result depends on how scattered the interpreter's heap already is (see the README), so
    this entry point exists to measure it without that history, or with a chosen one (the
    framings run in the order given).
    """
    import argparse

    ap = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=main.__doc__.split("\n\n")[0])
    ap.add_argument("--streams", default="1,100,1000", help="comma list of concurrent stream counts")
    ap.add_argument("--framings", default="pipeline,pipeline+SSE",
                    help="comma list, run in this order, from: pipeline, pipeline+SSE")
    ap.add_argument("--idle", type=int, default=0, help="idle streams to open (default 0: skip)")
    ap.add_argument("--runs", type=int, default=3, help="timed runs per N up to 100 streams (one above)")
    ap.add_argument("--backend", default="asyncio", choices=("asyncio", "trio"))
    a = ap.parse_args(argv)
    framings = tuple(f.strip() for f in a.framings.split(",") if f.strip())
    bad = [f for f in framings if f not in ("pipeline", "pipeline+SSE")]
    if bad:
        ap.error(f"unknown framing {bad[0]!r}; known: pipeline, pipeline+SSE")
    cfg = ScaleConfig(streams=[int(x) for x in a.streams.split(",")], idle=a.idle, runs=a.runs, traced=False,
                      backend=a.backend, framings=framings)
    result = run_scale(cfg)
    return 1 if any(r["status"] != "OK" for r in result["busy"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
