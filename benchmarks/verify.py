"""Checking a rebuilt message against a workload's expected result.

A time is only reported next to a passing check. Calls must match exactly:
the same number, in order, the same names, and arguments whose
``json.loads`` equals the expected dict. Content and reasoning are compared
after ``strip()`` (the whitespace right around markers is dialect policy);
``None`` and an empty string both mean "none".
"""

from __future__ import annotations

import json
from typing import Any

from deltaflow import ChatMessage

from .workloads import Workload

__all__ = ("Fold", "check_message", "check_parts")


def _clip(value: Any, n: int = 60) -> str:
    s = repr(value)
    return s if len(s) <= n else s[: n // 2] + " ... " + s[-n // 2 :]


def _first_difference(got: Any, want: Any) -> str:
    if isinstance(got, dict) and isinstance(want, dict):
        for key in want:
            if key not in got:
                return f"missing key {key!r}"
            if got[key] != want[key]:
                g, w = got[key], want[key]
                if isinstance(g, str) and isinstance(w, str):
                    i = next((j for j, (a, b) in enumerate(zip(g, w, strict=False)) if a != b), min(len(g), len(w)))
                    return f"{key!r} differs at char {i} (len {len(g)} vs {len(w)}): {_clip(g[i:i + 20])}"
                return f"{key!r}: {_clip(g)} != {_clip(w)}"
        return f"extra keys {sorted(set(got) - set(want))}"
    return f"{_clip(got)} != {_clip(want)}"


def check_parts(
    wl: Workload, names: list[str | None], arguments: list[str], content: str | None, reasoning: str | None
) -> str | None:
    """Compare a rebuilt result with ``wl``; return None when it matches, else what differs."""
    if len(names) != len(wl.calls):
        return f"{len(names)} calls {names}, expected {len(wl.calls)}"
    for i, (name, raw, (want_name, want_args)) in enumerate(zip(names, arguments, wl.calls, strict=True)):
        if name != want_name:
            return f"call {i}: name {name!r} != {want_name!r}"
        try:
            got = json.loads(raw)
        except ValueError as exc:
            return f"call {i}: arguments are not JSON ({exc}): {_clip(raw)}"
        if got != want_args:
            return f"call {i}: arguments differ: {_first_difference(got, want_args)}"
    if (content or "").strip() != (wl.content or ""):
        return f"content {_clip((content or '').strip())} != {_clip(wl.content or '')}"
    if (reasoning or "").strip() != (wl.reasoning or ""):
        return f"reasoning ({len((reasoning or '').strip())} chars) != expected ({len(wl.reasoning or '')} chars)"
    return None


def check_message(wl: Workload, msg: ChatMessage) -> str | None:
    """Check a :class:`deltaflow.ChatMessage` (e.g. ``deltaflow.accumulate`` of the deltas)."""
    return check_parts(
        wl,
        [c.function.name for c in msg.tool_calls],
        [c.function.arguments for c in msg.tool_calls],
        msg.content,
        msg.reasoning_content,
    )


class Fold:
    """What a client keeps of one stream, folded in as each delta arrives (for many streams at once).

    Keeping every delta of 1,000 concurrent streams alive would make memory
    per stream measure the client, not deltaflow; this keeps strings only.
    """

    __slots__ = ("content", "reasoning", "names", "args", "deltas")

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.names: dict[int, str] = {}
        self.args: dict[int, list[str]] = {}
        self.deltas = 0

    def add(self, d: Any) -> None:
        """Fold one :class:`deltaflow.DeltaMessage` in."""
        self.deltas += 1
        if d.content:
            self.content.append(d.content)
        if d.reasoning_content:
            self.reasoning.append(d.reasoning_content)
        for tc in d.tool_calls:
            if tc.function.name:
                self.names[tc.index] = tc.function.name
            if tc.function.arguments:
                self.args.setdefault(tc.index, []).append(tc.function.arguments)

    def check(self, wl: Workload) -> str | None:
        """Compare with ``wl`` (see :func:`check_parts`)."""
        idx = sorted({*self.names, *self.args})
        return check_parts(
            wl,
            [self.names.get(i) for i in idx],
            ["".join(self.args.get(i, ())) for i in idx],
            "".join(self.content),
            "".join(self.reasoning),
        )
