"""The W1 scaling plot: time per whole stream vs argument size, deltaflow and peers (log-log).

matplotlib is a benchmark-only dependency (``pip install -e .[bench]``);
it is imported here and nowhere else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ("plot_w1",)

_SIZES = {"W1-1k": 1024, "W1-16k": 16 * 1024, "W1-64k": 64 * 1024, "W1-1m": 1024 * 1024}
_STYLE = {
    "deltaflow sync": ("tab:blue", "o", "-"),
    "deltaflow stream": ("tab:cyan", "s", "-"),
    "floor-find": ("grey", ".", ":"),
    "vllm": ("tab:red", "^", "--"),
    "sglang": ("tab:orange", "v", "--"),
    "lmdeploy": ("tab:green", "D", "--"),
}


def _series(report: dict[str, Any], k: int) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for r in report["cells"]:
        if r["workload"] in _SIZES and r["k"] == k and r.get("status") == "OK":
            label = {"sync": "deltaflow sync", "stream": "deltaflow stream", "floor-find": "floor-find"}.get(r["mode"])
            if label:
                out.setdefault(label, []).append((_SIZES[r["workload"]], r["median_s"] * 1e3))
    for p in (report.get("peers") or {}).get("rows", ()):
        if p["workload"] in _SIZES and p["k"] == k and p["peer"] in ("vllm", "sglang", "lmdeploy"):
            if p["status"] == "OK" and p["median_s"] is not None:
                out.setdefault(p["peer"], []).append((_SIZES[p["workload"]], p["median_s"] * 1e3))
    return {name: sorted(pts) for name, pts in out.items()}


def plot_w1(report: dict[str, Any], path: Path, ks: tuple[int, ...] = (4, 16)) -> Path | None:
    """Write the PNG; returns its path, or None when matplotlib is missing or there is nothing to plot."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    series = {k: _series(report, k) for k in ks}
    if not any(series.values()):
        return None
    fig, axes = plt.subplots(1, len(ks), figsize=(6 * len(ks), 4.6), sharey=True)
    for ax, k in zip(axes if len(ks) > 1 else [axes], ks, strict=True):
        for name, pts in series[k].items():
            color, marker, line = _STYLE.get(name, ("black", "x", "-"))
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, linestyle=line, color=color, label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(list(_SIZES.values()), ["1 KB", "16 KB", "64 KB", "1 MB"])
        ax.set_xlabel("size of the streamed argument (W1, one hermes call)")
        ax.set_title(f"{k}-character chunks")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    (axes[0] if len(ks) > 1 else axes).set_ylabel("ms per whole stream (median, verified)")
    fig.suptitle(f"Time vs argument size — {report['date']}, {report['machine']['cpu']}", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
