"""Derived figures (linearity, ratios, targets) and the markdown report."""

from __future__ import annotations

import json
from typing import Any

__all__ = ("key_figures", "render", "targets")

PEER_NAMES = ("vllm", "sglang", "lmdeploy")
SMALL = ("W2-2000str", "W3-think+3calls")
LARGE = ("W1-16k", "W1-64k", "W4-glm47-16k", "W4-qwen3coder-16k")


def find(rows: list[dict[str, Any]], workload: str, k: int | None, mode: str) -> dict[str, Any] | None:
    """The OK row of a cell, or None."""
    for r in rows:
        if r["workload"] == workload and r["k"] == k and r["mode"] == mode and r.get("status") == "OK":
            return r
    return None


def _linearity(rows: list[dict[str, Any]], mode: str, k: int, small: str, big: str) -> dict[str, Any] | None:
    a, b = find(rows, small, k, mode), find(rows, big, k, mode)
    if a is None or b is None:
        return None
    time_ratio = b["median_s"] / a["median_s"]
    size_ratio = b["chars"] / a["chars"]
    return {
        "mode": mode, "k": k, "small": small, "big": big, "time_ratio": time_ratio,
        "size_ratio": size_ratio, "normalized": time_ratio / size_ratio,
    }


def key_figures(report: dict[str, Any]) -> dict[str, Any]:
    """The headline numbers the README quotes (each also as a ratio)."""
    rows = report["cells"]
    fig: dict[str, Any] = {"sync_k4": [], "sync_k256": [], "linearity": [], "pipeline_floor": []}
    for w in ("W1-1k", "W1-16k", "W1-64k", "W1-1m"):
        r = find(rows, w, 4, "sync")
        if r:
            fig["sync_k4"].append({"workload": w, "chars_per_s": r["chars"] / r["median_s"],
                                   "us_per_chunk": r["us_per_chunk"], "floor_ratio": r.get("floor_ratio")})
        r = find(rows, w, 256, "sync")
        if r:
            fig["sync_k256"].append({"workload": w, "mb_s": r["mb_s"], "mchar_s": r["mchar_s"],
                                     "floor_ratio": r.get("floor_ratio")})
    for mode in ("sync", "stream"):
        for k in (1, 4, 16, 256):
            lin = _linearity(rows, mode, k, "W1-1k", "W1-64k")
            if lin:
                fig["linearity"].append(lin)
            lin = _linearity(rows, mode, k, "W1-64k", "W1-1m")
            if lin:
                fig["linearity"].append(lin)
    for r in rows:
        if r["mode"] in ("stream", "stream-p0", "stream-sse") and "floor_ratio" in r:
            fig["pipeline_floor"].append({"workload": r["workload"], "k": r["k"], "mode": r["mode"],
                                          "ratio": r["floor_ratio"], "us_per_chunk": r["us_per_chunk"]})
    scale = report.get("scale") or {}
    busy = [b for b in scale.get("busy", ()) if b.get("status") == "OK"]
    fig["scale"] = busy
    fig["idle"] = scale.get("idle", [])
    fig["peers"] = peer_comparison(report)
    return fig


def _best_peer(peer_rows: list[dict[str, Any]], workload: str, k: int | None) -> tuple[str, float] | None:
    """The fastest correct peer and its time per character (the texts differ in size by a few %)."""
    ok = [(p["peer"], p["median_s"] / p["chars"]) for p in peer_rows
          if p["workload"] == workload and p["k"] == k and p["peer"] in PEER_NAMES and p["status"] == "OK"
          and p.get("chars")]
    return min(ok, key=lambda x: x[1]) if ok else None


def peer_comparison(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Per (workload, K): deltaflow sync and stream next to each peer, and the speed-up over the best correct peer.

    The speed-up compares time per character: the peer harness generates its
    own texts of the same sizes (within a few per cent).
    """
    peers = report.get("peers") or {}
    prs = peers.get("rows") or []
    if not prs:
        return []
    rows = report["cells"]
    out = []
    order = {w: i for i, w in enumerate(dict.fromkeys(p["workload"] for p in prs))}
    keys = sorted({(p["workload"], p["k"]) for p in prs}, key=lambda x: (order[x[0]], -1 if x[1] is None else x[1]))
    for w, k in keys:
        mine = find(rows, w, k, "complete" if k is None else "sync")
        stream = find(rows, w, k, "stream") if k is not None else None
        entry: dict[str, Any] = {
            "workload": w, "k": k,
            "deltaflow_s": mine["median_s"] if mine else None,
            "deltaflow_stream_s": stream["median_s"] if stream else None,
        }
        cap = float((peers.get("args") or {}).get("cap") or 0)
        for p in prs:
            if p["workload"] == w and p["k"] == k:
                entry[p["peer"]] = {"status": p["status"], "median_s": p["median_s"], "error": p.get("error")}
                if mine and p.get("chars") and p["peer"] in PEER_NAMES:
                    mine_per_char = mine["median_s"] / mine["chars"]
                    if p["status"] == "TIMEOUT" and cap:
                        entry[p["peer"]]["speedup"] = cap / p["chars"] / mine_per_char
                        entry[p["peer"]]["speedup_is_lower_bound"] = True
                    elif p.get("median_s"):
                        entry[p["peer"]]["speedup"] = p["median_s"] / p["chars"] / mine_per_char
        best = _best_peer(prs, w, k)
        if best and mine:
            entry["best_peer"] = best[0]
            entry["speedup"] = best[1] / (mine["median_s"] / mine["chars"])
        out.append(entry)
    return out


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "NOT met")


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each with the measured figure and met / not met / n/a."""
    fig = key_figures(report)
    rows = report["cells"]
    out: list[dict[str, Any]] = []

    def add(name: str, ok: bool | None, figure: str) -> None:
        out.append({"target": name, "verdict": _verdict(ok), "figure": figure})

    lin = next((x for x in fig["linearity"] if x["mode"] == "sync" and x["k"] == 4 and x["small"] == "W1-1k"), None)
    add("linear: time(64 KB)/time(1 KB) at K=4 within 1.2x the size ratio",
        None if lin is None else lin["normalized"] <= 1.2,
        "—" if lin is None else f"{lin['time_ratio']:.1f}x time for {lin['size_ratio']:.1f}x size "
        f"= {lin['normalized']:.2f}x the size ratio (sync)")
    big = sorted((x for x in fig["linearity"] if x["mode"] == "sync" and x["small"] == "W1-64k"), key=lambda x: x["k"])
    head = next((x for x in big if x["k"] == 4), big[0] if big else None)
    add("linear: 1 MB at the same per-byte rate as 64 KB (within 1.2x)",
        None if head is None else head["normalized"] <= 1.2,
        "—" if head is None else f"per-char time 1 MB / 64 KB = {head['normalized']:.2f} at K={head['k']} (sync"
        + "".join(f"; K={x['k']}: {x['normalized']:.2f}" for x in big if x is not head) + ")")
    k4 = next((x for x in fig["sync_k4"] if x["workload"] == "W1-64k"), None)
    add("sync core >= 1,000,000 chars/s on W1 at K=4",
        None if k4 is None else k4["chars_per_s"] >= 1e6,
        "—" if k4 is None else f"{k4['chars_per_s'] / 1e6:.3f} M chars/s on W1-64k "
        f"({k4['us_per_chunk']:.1f} µs/chunk, {k4['floor_ratio']:.0f}x floor-find)")
    k256 = [x for x in fig["sync_k256"] if x["workload"] in ("W1-64k", "W1-1m")]
    add("sync core at K=256 moves argument text at bulk-search speed (>= 10 MB/s)",
        None if not k256 else min(x["mb_s"] for x in k256) >= 10,
        "—" if not k256 else ", ".join(f"{x['workload']} {x['mb_s']:.1f} MB/s" for x in k256))
    pf = find(rows, "W1-64k", 4, "stream")
    allr = sorted(x["ratio"] for x in fig["pipeline_floor"] if x["mode"] == "stream")
    spread = (f"; all {len(allr)} stream cells: median {allr[len(allr) // 2]:.2f}x, max {allr[-1]:.2f}x"
              if allr else "")
    add("pipeline on one stream <= 3x the memory-stream floor per chunk (W1-64k, K=4)",
        None if pf is None or "floor_ratio" not in pf else pf["floor_ratio"] <= 3,
        "—" if pf is None or "floor_ratio" not in pf else f"{pf['floor_ratio']:.2f}x "
        f"({pf['us_per_chunk']:.1f} µs/chunk){spread}")
    sse = (report.get("scale") or {}).get("sse")
    framing = "pipeline+SSE" if sse else "pipeline"
    thousand = next((b for b in fig["scale"] if b["streams"] == 1000 and b.get("framing") == framing), None)
    add("1,000 concurrent streams >= 100,000 tokens/s aggregate"
        + (" with SSE framing" if sse else " (WITHOUT SSE framing)"),
        None if thousand is None else thousand["tokens_per_s"] >= 1e5,
        "—" if thousand is None else f"{thousand['tokens_per_s']:,.0f} tokens/s")
    idle = [i for i in fig["idle"] if i["with_deltaflow"]]
    judged = next((i for i in idle if i.get("prefetch") == 0 and not i.get("shared_pipeline")), None)
    add("memory per idle stream < 20 KB (prefetch=0, the server's inline pipeline, one Pipeline per request)",
        None if judged is None else judged["traced_per_stream_kb"] < 20,
        "—" if not idle else "; ".join(
            f"prefetch={i.get('prefetch')}{' (shared Pipeline)' if i.get('shared_pipeline') else ''}: "
            f"{i['traced_per_stream_kb']:.1f} KB traced, {i['rss_per_stream_kb']:.1f} KB RSS" for i in idle))
    comp = [c for c in fig["peers"] if c["k"] is not None]
    for peer in PEER_NAMES:
        small = [(c, c[peer]) for c in comp if c["workload"] in SMALL and c.get(peer, {}).get("status") == "OK"
                 and "speedup" in c[peer]]
        add(f"not slower than {peer} on W2/W3 (every K)",
            None if not small else all(p["speedup"] >= 1 for _, p in small),
            "—" if not small else "min " + _x(min(p["speedup"] for _, p in small)) + " ("
            + ", ".join(f"{c['workload'].split('-')[0]} K={c['k']} {_x(p['speedup'])}" for c, p in small) + ")")
    for peer in PEER_NAMES:
        large = [(c, c[peer]) for c in comp if c["workload"] in LARGE and "speedup" in c.get(peer, {})
                 and c[peer]["status"] in ("OK", "TIMEOUT")]
        add(f">= 10x faster than {peer} on 16 KB+ arguments (every K; W1-16k, W1-64k, W4)",
            None if not large else all(p["speedup"] >= 10 for _, p in large),
            "—" if not large else f"{sum(p['speedup'] >= 10 for _, p in large)} of {len(large)} cells; min "
            + _x(min(p["speedup"] for _, p in large)) + ", median "
            + _x(sorted(p["speedup"] for _, p in large)[len(large) // 2]))
    return out


# -- markdown ------------------------------------------------------------------------
def _ms(s: float | None) -> str:
    if s is None:
        return ""
    ms = s * 1e3
    return f"{ms:,.0f}" if ms >= 100 else (f"{ms:.1f}" if ms >= 1 else f"{ms:.3f}")


def _x(v: float | None) -> str:
    if v is None:
        return ""
    return f"{v:,.0f}×" if v >= 10 else f"{v:.2f}×"


def _cells_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| workload | K | mode | median ms | runs | µs/chunk | M chars/s | MB/s | × floor | peak MB | result |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        k = "whole" if r["k"] is None else str(r["k"])
        if r.get("status") != "OK":
            err = str(r.get("error", "")).replace("|", "\\|")
            lines.append(f"| {r['workload']} | {k} | {r['mode']} | | | | | | | | {r.get('status')}: {err} |")
            continue
        peak = f"{r['peak_mb']:.2f}" if "peak_mb" in r else ""
        ratio = f"{_x(r.get('floor_ratio'))} {r.get('floor', '')}" if "floor_ratio" in r else ""
        lines.append(
            f"| {r['workload']} | {k} | {r['mode']} | {_ms(r['median_s'])} | {r['runs']} | "
            f"{r['us_per_chunk']:,.2f} | {r['mchar_s']:.2f} | {r['mb_s']:.2f} | {ratio} | {peak} | OK |"
        )
    return lines


def _peer_table(comp: list[dict[str, Any]]) -> list[str]:
    if not comp:
        return []
    lines = [
        "| workload | K | deltaflow sync ms | deltaflow stream ms | vLLM ms | SGLang ms | LMDeploy ms "
        "| deltaflow sync speed-up: vLLM / SGLang / LMDeploy | vs fastest correct peer |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def ratio(p: dict[str, Any] | None) -> str:
        if not p or "speedup" not in p:
            return "—"
        txt = (">" if p.get("speedup_is_lower_bound") else "") + _x(p["speedup"])
        return txt + ("*" if p["status"] not in ("OK", "TIMEOUT") else "")

    def cell(p: dict[str, Any] | None) -> str:
        if not p:
            return ""
        if p["status"] == "TIMEOUT":
            return str(p.get("error") or "capped")
        t = _ms(p["median_s"])
        return t if p["status"] == "OK" else f"{t} {p['status']}"

    for c in comp:
        k = "whole" if c["k"] is None else str(c["k"])
        sp = f"{_x(c['speedup'])} ({c['best_peer']})" if "speedup" in c else ""
        per = " / ".join(ratio(c.get(p)) for p in PEER_NAMES)
        lines.append(
            f"| {c['workload']} | {k} | {_ms(c['deltaflow_s'])} | {_ms(c['deltaflow_stream_s'])} | "
            f"{cell(c.get('vllm'))} | {cell(c.get('sglang'))} | {cell(c.get('lmdeploy'))} | {per} | {sp} |"
        )
    lines += ["", "Speed-ups compare time per character (each side generates its own texts of the same sizes); "
              "`>` = the peer hit the cell cap; `*` = the peer's result was WRONG (time for reference only)."]
    return lines


def _scale_lines(scale: dict[str, Any]) -> list[str]:
    if not scale:
        return []
    lines = [
        f"Workload {scale['workload']} ({scale['chars']:,} chars, {scale['tokens_per_stream']} chunks per stream, "
        f"{scale['chunking']}; prefetch={scale['prefetch']}). "
        + ("pipeline+SSE = the pipeline framed to OpenAI Chat Completions SSE bytes."
           if scale["sse"] else scale["sse_note"] + "."),
        "",
        "| framing | streams | s per run (clock) | aggregate tokens/s | µs/token | traced peak KB/stream "
        "| RSS growth KB/stream | result |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for b in scale["busy"]:
        if b.get("status") != "OK":
            lines.append(f"| {b.get('framing')} | {b['streams']} | | | | | | FAIL: {b.get('error', '')} |")
            continue
        tp = b.get("traced_peak_per_stream_kb")
        lines.append(
            f"| {b['framing']} | {b['streams']:,} | {b['median_s']:.3f} | {b['tokens_per_s']:,.0f} "
            f"| {b['us_per_token']:.1f} | "
            f"{'' if tp is None else f'{tp:.1f}'} | {b['rss_growth_per_stream_kb']:.1f} | OK |"
        )
    if scale.get("idle"):
        lines += ["", "| idle streams | what | traced KB/stream | RSS KB/stream |", "|---|---|---|---|"]
        for i in scale["idle"]:
            shared = ", one shared `Pipeline`" if i.get("shared_pipeline") else ""
            what = (f"deltaflow.stream, prefetch={i.get('prefetch')}{shared} (pipeline open, source silent)"
                    if i["with_deltaflow"] else "baseline: bare consumer task + silent source")
            lines.append(
                f"| {i['streams']:,} | {what} | {i['traced_per_stream_kb']:.1f} | {i['rss_per_stream_kb']:.1f} |"
            )
    return lines


def render(report: dict[str, Any]) -> str:
    """The whole report as markdown."""
    fig = key_figures(report)
    m = report["machine"]
    lines = [
        f"# deltaflow benchmarks — {report['date']}",
        "",
        f"Command: `{report['command']}` (deltaflow {m.get('deltaflow_commit')})  ",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['implementation']} {m['python']}, load average at start "
        f"{m.get('load_avg_at_start')} (at end {m.get('load_avg_at_end')}); "
        f"anyio backend {report['config']['backend']}.",
        "",
        "Clock: " + ("process CPU time (`time.process_time`; the machine is shared, wall time is recorded in the JSON)."
                     if report["config"].get("clock", "cpu") == "cpu" else "wall time (`time.perf_counter`)."),
        "Times are medians of several runs of one whole stream; each run's rebuilt result was verified first. "
        "× floor = time / the floor measured in the same run on the same chunks "
        "(sync modes: floor-find; async modes: floor-memstream).",
        "",
        "## Targets",
        "",
        "| target | verdict | measured |",
        "|---|---|---|",
    ]
    for t in targets(report):
        lines.append(f"| {t['target']} | {t['verdict']} | {t['figure']} |")
    lines += ["", "## Linearity (time ratio / size ratio; 1.0 = linear)", "",
              "| mode | K | sizes | time ratio | size ratio | normalized |", "|---|---|---|---|---|---|"]
    for x in fig["linearity"]:
        lines.append(f"| {x['mode']} | {x['k']} | {x['small']} → {x['big']} | {x['time_ratio']:.2f} | "
                     f"{x['size_ratio']:.2f} | {x['normalized']:.2f} |")
    lines += ["", "## Cells", ""] + _cells_table(report["cells"])
    if report.get("fixed"):
        lines += ["", "## Fixed costs per response (W3 configuration: hermes + qwen3, 3 tools)", "",
                  "| what | µs |", "|---|---|"]
        lines += [f"| {f['what']} | {f['us']:,.0f} |" for f in report["fixed"]]
    if report.get("scale"):
        lines += ["", "## Concurrent streams (one event loop)", ""] + _scale_lines(report["scale"])
    peers = report.get("peers") or {}
    lines += ["", "## Peers", ""]
    if peers.get("skipped"):
        lines.append(f"Skipped: {peers['skipped']}")
    elif fig["peers"]:
        lines.append(
            "Peer times are from the shared harness (`peer_bench.py`, character chunks that never split a "
            "marker token), "
            + (f"read from `{peers['source']}` (the harness's output, kept from an earlier run on this machine), "
               if peers.get("source") else "run in the same session, ")
            + "on the "
            + ("CPU-time clock" if peers.get("clock") == "cpu" else "wall clock")
            + "; deltaflow's chunks split anywhere, markers included. "
            f"Peer run arguments: `{json.dumps(peers.get('args', {}))}`."
        )
        lines += [""] + _peer_table(fig["peers"])
    if report.get("skipped"):
        lines += ["", "## Skipped", ""] + [f"- {s['what']}: {s['reason']}" for s in report["skipped"]]
    return "\n".join(lines) + "\n"
