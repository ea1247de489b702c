"""Peers: vLLM's, SGLang's and LMDeploy's streaming parsers, measured beside deltaflow.

The peers live in their own virtual environment, outside the project's
dependencies (``benchmarks/peers/setup.sh`` creates it; path in
``$DELTAFLOW_PEERS_VENV``, default ``../peers-venv`` beside the checkout).
They are driven by the shared peer harness (``../shared/peers/peer_bench.py``,
or ``$DELTAFLOW_PEER_BENCH``), run as a subprocess with the venv's Python:
it feeds each peer's streaming parser chunk by chunk the way its server
does, verifies the rebuilt calls against the expected ones, and writes JSON,
read here. Its workloads have the same keys and sizes as ours (generated
independently) and its ``floor-find`` is measured in its own run, so a
peer's ratio to its floor is as comparable as ours.

Clock: the harness times with ``time.perf_counter``. With ``clock="cpu"``
(the default, as for deltaflow's own cells) a ``sitecustomize`` shim on the
harness's ``PYTHONPATH`` points ``time.perf_counter`` at
``time.process_time`` in the harness and its per-peer child processes, so
peers are timed in process CPU time too, the harness itself unchanged.

When the venv or the harness is missing, the peers are skipped with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ("PEER_WORKLOADS", "harness_path", "load_peer_report", "peer_rows", "run_peers", "venv_python")

REPO = Path(__file__).resolve().parent.parent
PEER_WORKLOADS = (
    "W1-1k", "W1-16k", "W1-64k", "W2-2000str", "W3-think+3calls", "W4-glm47-16k", "W4-qwen3coder-16k",
)
DEFAULT_PEERS = "floor-find,vllm,sglang,lmdeploy"


def venv_python() -> tuple[Path | None, str]:
    """The peer venv's Python, or None and why not."""
    venv = Path(os.environ.get("DELTAFLOW_PEERS_VENV", REPO.parent / "peers-venv"))
    py = venv / "bin" / "python"
    if not py.exists():
        return None, f"no peer venv at {venv} (create it with benchmarks/peers/setup.sh, or set DELTAFLOW_PEERS_VENV)"
    return py, ""


def harness_path() -> tuple[Path | None, str]:
    """The shared peer harness, or None and why not."""
    env = os.environ.get("DELTAFLOW_PEER_BENCH")
    if env:
        path = Path(env)
    else:
        from deltaflow.testing import shared_dir

        root = shared_dir()
        if root is None:
            return None, "no ../shared folder (set DELTAFLOW_PEER_BENCH to peer_bench.py)"
        path = root / "peers" / "peer_bench.py"
    if not path.exists():
        return None, f"no peer harness at {path}"
    return path, ""


_CPU_SHIM = (
    "# Written by deltaflow's benchmarks/peers.py: time the peer harness in process CPU time.\n"
    "import time\n"
    "time.perf_counter = time.process_time\n"
)


def _env(tmp: Path, clock: str) -> dict[str, str]:
    env = dict(os.environ)
    if clock == "cpu":
        shim = tmp / "shim"
        shim.mkdir()
        (shim / "sitecustomize.py").write_text(_CPU_SHIM, encoding="utf-8")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(shim), env.get("PYTHONPATH", "")) if p)
    return env


def run_peers(
    workloads: list[str], chunks: list[int], *, peers: str = DEFAULT_PEERS, cap: float = 20.0, repeats: int = 3,
    log: Path | None = None, clock: str = "cpu",
) -> dict[str, Any]:
    """Run the peer harness; return its report (``{"machine", "args", "results"}``) or ``{"skipped": reason}``."""
    py, reason = venv_python()
    harness, reason2 = harness_path()
    if py is None or harness is None:
        return {"skipped": reason or reason2}
    wls = [w for w in workloads if w in PEER_WORKLOADS]
    if not wls:
        return {"skipped": "none of the selected workloads is one the peer harness has"}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "peers.json"
        cmd = [
            str(py), str(harness), "--peers", peers, "--workloads", ",".join(wls),
            "--chunks", ",".join(map(str, chunks)), "--cap", str(cap), "--repeats", str(repeats),
            "--json", str(out),
        ]
        print(f"peers: {' '.join(cmd[2:])}", file=sys.stderr, flush=True)
        with open(log or os.devnull, "w", encoding="utf-8") as sink:
            proc = subprocess.run(
                cmd, stdout=sink, stderr=subprocess.STDOUT, cwd=tmp, env=_env(Path(tmp), clock), check=False
            )
        if proc.returncode != 0 or not out.exists():
            return {"skipped": f"peer harness exited with {proc.returncode} (log: {log})"}
        report: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    report["clock"] = clock
    return report


def load_peer_report(path: str) -> dict[str, Any]:
    """Read a report saved by the peer harness (``--json``) or by a previous run of ours."""
    data: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    if "peers" in data and "results" not in data:
        peers: dict[str, Any] = data["peers"]
        return peers
    return data


def peer_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The stream/complete cells of a peer report, one dict per (peer, workload, K)."""
    rows = []
    for r in report.get("results", ()):
        if r.get("kind") not in ("stream", "complete"):
            continue
        rows.append(
            {
                "peer": r["peer"],
                "workload": r["workload"],
                "k": r["k"] if r["kind"] == "stream" else None,
                "status": r.get("status"),
                "median_s": r.get("median_s"),
                "runs": r.get("runs"),
                "n_chunks": r.get("n_chunks"),
                "chars": r.get("chars"),
                "error": r.get("error"),
                "peak_mb": r.get("traced_peak_mb"),
            }
        )
    return rows
