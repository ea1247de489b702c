"""Running the workload x chunk size x mode cells, floors included.

Every cell is verified before it is timed: one run whose deltas are kept
and rebuilt by ``deltaflow.accumulate``, then a warm-up run; every timed run
is checked again. A cell reports FAIL and no time as soon as one result
differs. The floors are measured on the same
chunks, right before the modes they anchor, in the same process and (for
the async ones) in the same event loop.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from .modes import MODES, Mode, check_floor, floor_find, floor_memstream
from .timing import Policy, Timed, ameasure, atraced_peak, measure, traced_peak
from .workloads import Workload, build, missing_parsers, text_chunks, token_id_chunks

__all__ = ("Config", "run_cells")


@dataclass
class Config:
    """What to run.

    Attributes:
        workloads: workload keys, in order.
        modes: mode names (see :data:`benchmarks.modes.MODES`).
        chunks: chunk sizes per workload key (characters; tokens per item for W6).
        async_chunks: the chunk sizes at which the async modes run, when fewer
            than ``chunks`` (``--quick`` keeps the slow small-K pipeline cells out).
        policy: the timing policy.
        mem_k: the chunk size at which the tracemalloc peak is taken.
        backend: the anyio backend of the async modes.
        token_family: the shared tokenizer for token-id sources.
    """

    workloads: list[str]
    modes: list[str]
    chunks: dict[str, list[int]]
    policy: Policy
    async_chunks: dict[str, list[int]] | None = None
    mem_k: int = 16
    backend: str = "asyncio"
    token_family: str = "qwen3"
    skipped: list[dict[str, Any]] = field(default_factory=list)


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _row(wl: Workload, k: int | None, mode: str, n_chunks: int) -> dict[str, Any]:
    return {
        "workload": wl.key,
        "group": wl.group,
        "k": k,
        "mode": mode,
        "chars": wl.chars,
        "bytes": wl.utf8_bytes,
        "arg_chars": wl.arg_chars,
        "n_chunks": n_chunks,
    }


def _fill(row: dict[str, Any], outcome: Timed | str) -> dict[str, Any]:
    if isinstance(outcome, str):
        row.update(status="FAIL", error=outcome)
        return row
    med = outcome.median
    row.update(
        status="OK",
        median_s=med,
        min_s=min(outcome.times),
        wall_median_s=outcome.median_wall,
        runs=len(outcome.times),
        us_per_chunk=med / max(row["n_chunks"], 1) * 1e6,
        mchar_s=row["chars"] / med / 1e6 if med > 0 else None,
        mb_s=row["bytes"] / med / 1e6 if med > 0 else None,
    )
    return row


def _ratio(row: dict[str, Any], floor: dict[str, Any] | None) -> None:
    if floor is not None and row.get("status") == "OK" and floor.get("status") == "OK":
        row["floor"] = floor["mode"]
        row["floor_ratio"] = row["median_s"] / floor["median_s"]


def _log(row: dict[str, Any]) -> None:
    k = "whole" if row["k"] is None else f"K={row['k']}"
    if row.get("status") == "OK":
        extra = f" x{row['floor_ratio']:.1f} {row['floor']}" if "floor_ratio" in row else ""
        _say(
            f"  {row['workload']:<18} {k:<7} {row['mode']:<16} {row['median_s'] * 1e3:10.3f} ms "
            f"({row['runs']} runs, {row['us_per_chunk']:.2f} us/chunk){extra}"
        )
    else:
        _say(f"  {row['workload']:<18} {k:<7} {row['mode']:<16} {row.get('status')}: {row.get('error', '')}")


def _accumulate_check_sync(mode: Mode, wl: Workload, chunks: list[str]) -> str | None:
    """One untimed run with the deltas kept, rebuilt by ``deltaflow.accumulate`` and checked."""
    if not mode.folds:
        return None
    prepare, run = mode.sync_run(wl, chunks, keep=True)
    assert prepare is not None
    return mode.check(wl, keep=True)(run(prepare()))


def _sync_cells(wl: Workload, k: int, chunks: list[str], modes: list[Mode], cfg: Config) -> list[dict[str, Any]]:
    rows = []
    floor = _fill(
        _row(wl, k, "floor-find", len(chunks)), measure(floor_find(chunks), cfg.policy, check_floor(len(chunks)))
    )
    rows.append(floor)
    for mode in modes:
        row = _row(wl, k, mode.name, len(chunks))
        problem = _accumulate_check_sync(mode, wl, chunks)
        (prepare, run), check = mode.sync_run(wl, chunks), mode.check(wl)
        # the warm-up run is verified (and so is every timed run) before any time counts
        _fill(row, problem if problem is not None else measure(run, cfg.policy, check, prepare))
        _ratio(row, floor)
        if row["status"] == "OK" and k == cfg.mem_k:
            row["peak_mb"] = traced_peak(run, prepare) / 1e6
        rows.append(row)
    return rows


async def _async_cells(
    wl: Workload, k: int, items: Sequence[Any], modes: list[Mode], cfg: Config, tokenizer: Any
) -> list[dict[str, Any]]:
    rows = []
    n = len(items)
    floor = _fill(_row(wl, k, "floor-memstream", n), await ameasure(floor_memstream(items), cfg.policy, check_floor(n)))
    rows.append(floor)
    for mode in modes:
        row = _row(wl, k, mode.name, n)
        problem = None
        if mode.folds:  # once with the deltas kept, rebuilt by deltaflow.accumulate
            problem = mode.check(wl, keep=True)(await mode.async_run(wl, items, tokenizer, keep=True)())
        run, check = mode.async_run(wl, items, tokenizer), mode.check(wl)
        _fill(row, problem if problem is not None else await ameasure(run, cfg.policy, check))
        _ratio(row, floor)
        if row["status"] == "OK" and k == cfg.mem_k:
            row["peak_mb"] = await atraced_peak(run) / 1e6
        rows.append(row)
    return rows


def _complete_cell(wl: Workload, mode: Mode, cfg: Config) -> dict[str, Any]:
    row = _row(wl, None, mode.name, 1)
    (prepare, run), check = mode.sync_run(wl, [wl.text]), mode.check(wl)
    _fill(row, measure(run, cfg.policy, check, prepare))
    if row["status"] == "OK":
        row["peak_mb"] = traced_peak(run, prepare) / 1e6
    return row


def _skip(cfg: Config, what: str, reason: str) -> None:
    cfg.skipped.append({"what": what, "reason": reason})
    _say(f"  skip {what}: {reason}")


def _token_items(wl: Workload, cfg: Config, per_item: int) -> tuple[list[list[int]] | None, Any]:
    from deltaflow.testing import load_tokenizer

    tok = load_tokenizer(cfg.token_family)
    if tok is None:
        _skip(cfg, wl.key, f"no shared tokenizer {cfg.token_family!r} (../shared/tokenizers/{cfg.token_family})")
        return None, None
    try:
        return token_id_chunks(wl.text, tok, per_item), tok
    except ValueError as exc:
        _skip(cfg, wl.key, str(exc))
        return None, None


def _workload_cells(wl: Workload, cfg: Config) -> list[dict[str, Any]]:
    modes = [MODES[m] for m in cfg.modes]
    usable = []
    for m in modes:
        reason = m.unavailable(wl)
        if reason is None:
            usable.append(m)
        elif not (m.text_only and wl.token_source):
            _skip(cfg, f"{wl.key} / {m.name}", reason)
    rows: list[dict[str, Any]] = []
    sync = [m for m in usable if not m.is_async and not m.whole_text]
    asyncs = [m for m in usable if m.is_async]
    ks = list(cfg.chunks.get(wl.key, []))
    if cfg.async_chunks is not None:
        ks += [k for k in cfg.async_chunks.get(wl.key, ()) if k not in ks]
    for k in ks:
        run_sync = k in cfg.chunks.get(wl.key, ())
        tokenizer = None
        items: Sequence[Any]
        text_items: list[str] = []
        if wl.token_source:
            ids, tokenizer = _token_items(wl, cfg, k)
            if ids is None:
                return rows
            items = ids
        else:
            text_items = text_chunks(wl.text, k)
            items = text_items
        if sync and run_sync:
            for r in _sync_cells(wl, k, text_items, sync, cfg):
                _log(r)
                rows.append(r)
        if asyncs and (cfg.async_chunks is None or k in cfg.async_chunks.get(wl.key, ())):
            job = functools.partial(_async_cells, wl, k, items, asyncs, cfg, tokenizer)
            for r in anyio.run(job, backend=cfg.backend):
                _log(r)
                rows.append(r)
    for m in usable:
        if m.whole_text:
            r = _complete_cell(wl, m, cfg)
            _log(r)
            rows.append(r)
    return rows


def run_cells(cfg: Config) -> list[dict[str, Any]]:
    """Run every selected cell; return one row per (workload, chunk size, mode or floor)."""
    rows: list[dict[str, Any]] = []
    for key in cfg.workloads:
        wl = build(key)
        reason = missing_parsers(wl)
        if reason is not None:
            _skip(cfg, key, reason)
            continue
        _say(f"{key}: {wl.chars:,} chars, {wl.utf8_bytes:,} UTF-8 bytes — {wl.note}")
        rows += _workload_cells(wl, cfg)
    return rows
