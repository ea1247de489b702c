"""``python -m benchmarks``: verify, then measure deltaflow beside its floors and its peers.

Examples::

    python -m benchmarks --quick                    # under a minute, no peers
    python -m benchmarks --save                     # the full suite (+ peers when their venv exists)
    python -m benchmarks --workloads W1 --modes sync --chunks 4,256 --no-scale
    python -m benchmarks --list                     # workloads, modes, registered parsers
    python -m benchmarks gateway [--quick]          # the gateway's overhead (benchmarks/gateway_overhead.py)

Progress goes to stderr, the markdown report to stdout.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from .fixed import fixed_costs
from .modes import MODES, find_sse_framer
from .peers import PEER_WORKLOADS, load_peer_report, peer_rows, run_peers
from .report import render
from .scale import ScaleConfig, run_scale
from .suite import Config, run_cells
from .timing import Policy, machine_info, set_clock
from .workloads import WORKLOADS, registry_names

RESULTS = Path(__file__).resolve().parent / "results"

FULL_CHUNKS = {key: [1, 4, 16, 256] for key in WORKLOADS}
FULL_CHUNKS.update({"W6-qwen3-W3": [1, 4], "W6-qwen3-W1-16k": [1, 4]})
QUICK_CHUNKS = {
    "W1-1k": [4, 256], "W1-16k": [4, 256], "W1-64k": [4, 256], "W1-1m": [256],
    "W2-2000str": [16], "W3-think+3calls": [16], "W4-qwen3coder-16k": [16], "W4-glm47-16k": [16],
    "W5-harmony-16k": [16],
}
# In --quick the async modes (slow at small K) run at these sizes only.
QUICK_ASYNC_CHUNKS = {
    "W1-1k": [16], "W1-16k": [16], "W1-64k": [256], "W2-2000str": [16], "W3-think+3calls": [16],
    "W4-qwen3coder-16k": [16], "W4-glm47-16k": [16], "W5-harmony-16k": [16], "W6-qwen3-W3": [1],
}
FULL_POLICY = Policy(min_runs=5, min_time=0.3, max_runs=30, long_run=10.0)
QUICK_POLICY = Policy(min_runs=3, min_time=0.02, max_runs=5, long_run=0.2)


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a reduced run (under a minute); no peers by default")
    ap.add_argument("--workloads", help="comma list of keys or prefixes (W1, W1-64k, W3 ...); default: all")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma list from {', '.join(MODES)}")
    ap.add_argument("--chunks", help="chunk sizes in characters for every text workload (overrides the defaults)")
    ap.add_argument("--repeats", type=int, help="minimum timed runs per cell")
    ap.add_argument("--mem-k", type=int, default=16, help="chunk size of the tracemalloc peak (default 16)")
    ap.add_argument("--backend", default="asyncio", choices=("asyncio", "trio"), help="anyio backend")
    ap.add_argument("--clock", default="cpu", choices=("cpu", "wall"),
                    help="cpu: process CPU time (default; robust on a shared machine); wall: perf_counter")
    ap.add_argument("--no-scale", action="store_true", help="skip the concurrent-streams measurements")
    ap.add_argument("--scale-streams", help="comma list of concurrent stream counts (default 1,100,1000)")
    ap.add_argument("--idle", type=int, help="idle streams to open for memory per idle stream (default 1000; 0 skips)")
    peers = ap.add_mutually_exclusive_group()
    peers.add_argument("--peers", action="store_true",
                       help="run the peers (default in full mode when their venv exists)")
    peers.add_argument("--no-peers", action="store_true", help="do not run the peers")
    peers.add_argument("--peers-json", help="use a saved peer report instead of running the peers")
    ap.add_argument("--peer-chunks", default="4,16,256", help="chunk sizes for the peers (default 4,16,256)")
    ap.add_argument("--peer-cap", type=float, default=15.0, help="seconds per peer cell (default 15)")
    ap.add_argument("--json", help="write the full report as JSON here")
    ap.add_argument("--markdown", help="write the markdown report here")
    ap.add_argument("--plot", help="write the W1 scaling PNG here")
    ap.add_argument("--save", action="store_true",
                    help="write benchmarks/results/<date>.json, .md and w1_scaling.png")
    ap.add_argument("--list", action="store_true", help="list workloads, modes and registered parsers, then exit")
    ap.add_argument("--render", metavar="JSON",
                    help="only re-render a saved report (markdown to stdout, or --markdown/--plot files)")
    return ap.parse_args(argv)


def _select(spec: str | None, quick: bool) -> list[str]:
    keys = list({**QUICK_CHUNKS, **QUICK_ASYNC_CHUNKS} if quick else WORKLOADS)
    if not spec:
        return keys
    out: list[str] = []
    for part in spec.split(","):
        part = part.strip()
        match = [k for k in WORKLOADS if k == part or k.startswith(part + "-") or k.startswith(part)]
        if not match:
            sys.exit(f"unknown workload {part!r}; known: {', '.join(WORKLOADS)}")
        out += [k for k in match if k not in out]
    return out


def _list() -> None:
    tools, reasoning = registry_names()
    print("workloads:", ", ".join(WORKLOADS))
    print("modes:", ", ".join(MODES))
    print("tool parsers registered:", ", ".join(sorted(tools)))
    print("reasoning parsers registered:", ", ".join(sorted(reasoning)))
    framer, reason = find_sse_framer()
    print("SSE framer:", framer.__qualname__ if framer else f"none ({reason})")


def _config(a: argparse.Namespace) -> Config:
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    for m in modes:
        if m not in MODES:
            sys.exit(f"unknown mode {m!r}; known: {', '.join(MODES)}")
    chunks = {k: list(v) for k, v in (QUICK_CHUNKS if a.quick else FULL_CHUNKS).items()}
    if a.chunks:
        ks = [int(x) for x in a.chunks.split(",")]
        chunks = {k: (v if k.startswith("W6") else ks) for k, v in FULL_CHUNKS.items()}
    policy = QUICK_POLICY if a.quick else FULL_POLICY
    if a.repeats:
        policy = Policy(a.repeats, policy.min_time, max(policy.max_runs, a.repeats), policy.long_run)
    async_chunks = QUICK_ASYNC_CHUNKS if a.quick and not a.chunks else None
    return Config(workloads=_select(a.workloads, a.quick), modes=modes, chunks=chunks, policy=policy,
                  async_chunks=async_chunks, mem_k=a.mem_k, backend=a.backend)


def _scale(a: argparse.Namespace) -> dict[str, Any] | None:
    if a.no_scale:
        return None
    default = [1, 100] if a.quick else [1, 100, 1000]
    streams = [int(x) for x in a.scale_streams.split(",")] if a.scale_streams else default
    idle = 1000 if a.idle is None else a.idle
    cfg = ScaleConfig(streams=streams, idle=idle, backend=a.backend,
                      reasoning_chars=256 if a.quick else 4096, runs=1 if a.quick else 3, traced=not a.quick)
    return run_scale(cfg)


def _peers(a: argparse.Namespace, workloads: list[str]) -> dict[str, Any]:
    if a.peers_json:
        rep = load_peer_report(a.peers_json)
        rep["source"] = a.peers_json
    elif a.no_peers or (a.quick and not a.peers):
        return {"skipped": "not requested (--quick runs no peers; pass --peers)"}
    else:
        chunks = [int(x) for x in a.peer_chunks.split(",")]
        log = RESULTS / f"{_dt.date.today().isoformat()}-peers.log" if a.save else None
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
        rep = run_peers([w for w in workloads if w in PEER_WORKLOADS], chunks, cap=a.peer_cap, log=log, clock=a.clock)
    if "skipped" not in rep:
        rep["rows"] = peer_rows(rep)
    return rep


def _render(a: argparse.Namespace) -> int:
    report = json.loads(Path(a.render).read_text(encoding="utf-8"))
    md = render(report)
    if a.markdown:
        Path(a.markdown).write_text(md, encoding="utf-8")
    if a.plot:
        from .plot import plot_w1

        print(f"plot: {plot_w1(report, Path(a.plot))}", file=sys.stderr)
    print(md)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; returns the exit status (1 when a cell failed its check)."""
    rest = sys.argv[1:] if argv is None else argv
    if rest and rest[0] == "gateway":  # python -m benchmarks gateway [--quick]: benchmarks/gateway_overhead.py
        from .gateway_overhead import main as gateway_main

        return gateway_main(rest[1:])
    a = _args(argv)
    if a.list:
        _list()
        return 0
    if a.render:
        return _render(a)
    cfg = _config(a)
    set_clock(a.clock)
    started = time.perf_counter()
    report: dict[str, Any] = {
        "date": _dt.date.today().isoformat(),
        "command": "python -m benchmarks "
        + " ".join(shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:])),
        "machine": machine_info(),
        "config": {"quick": a.quick, "modes": cfg.modes, "workloads": cfg.workloads, "chunks": cfg.chunks,
                   "policy": vars(cfg.policy), "mem_k": cfg.mem_k, "backend": cfg.backend, "clock": a.clock},
    }
    report["cells"] = run_cells(cfg)
    report["fixed"] = fixed_costs(cfg.backend)
    report["scale"] = _scale(a)
    report["peers"] = _peers(a, cfg.workloads)
    report["skipped"] = cfg.skipped
    report["machine"]["load_avg_at_end"] = machine_info().get("load_avg_at_start")
    report["elapsed_s"] = round(time.perf_counter() - started, 1)
    md = render(report)
    outputs = []
    if a.save:
        RESULTS.mkdir(parents=True, exist_ok=True)
        stem = report["date"] + ("-quick" if a.quick else "")
        a.json = a.json or str(RESULTS / f"{stem}.json")
        a.markdown = a.markdown or str(RESULTS / f"{stem}.md")
        a.plot = a.plot or (None if a.quick else str(RESULTS / "w1_scaling.png"))
    if a.plot:
        from .plot import plot_w1

        png = plot_w1(report, Path(a.plot))
        outputs.append(f"plot: {png}" if png else "plot: skipped (matplotlib missing: pip install -e .[bench])")
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1, ensure_ascii=False, default=str), encoding="utf-8")
        outputs.append(f"json: {a.json}")
    if a.markdown:
        Path(a.markdown).write_text(md, encoding="utf-8")
        outputs.append(f"markdown: {a.markdown}")
    print(md)
    for o in outputs:
        print(o, file=sys.stderr)
    print(f"elapsed: {report['elapsed_s']} s", file=sys.stderr)
    failed = [r for r in report["cells"] if r.get("status") == "FAIL"]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
