"""Memory bounds on adversarial model output, for every registered tool dialect.

Each case feeds a 1 MB adversarial stream in 4 KB chunks and measures the
``tracemalloc`` peak of what the parser allocates. What a parser may hold is
at most the longest marker prefix plus what a value needs for whole
conversion:

* ``streams`` cases (an open string argument, a marker prefix repeated
  forever, reasoning that never closes, a never-closed XML string parameter)
  must hold a constant amount (below ``STREAM_BOUND``) whatever the input size;
* ``held`` cases (a name, an object key, a typed XML value, stringified
  arguments, a pythonic keyword value) may hold the value itself: the peak is
  bounded by ``4 x input + STREAM_BOUND`` (the value, one join copy, slack).

The full-size run (50 MB per case, with a table) is ``python -m benchmarks.memory_bounds``.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import AsyncIterator

import anyio
import pytest

import deltaflow
from adversarial import CASES, CHUNK, TOOLS, VIOLATIONS, Case, measure, within_bound
from deltaflow.parsers import registry

SIZE = 1024 * 1024


def _params() -> list[object]:
    out: list[object] = []
    for case in CASES:
        marks = []
        if case.id in VIOLATIONS:
            marks.append(pytest.mark.xfail(strict=True, reason=VIOLATIONS[case.id]))
        out.append(pytest.param(case, id=case.id, marks=marks))
    return out


def test_every_tool_dialect_has_adversarial_cases() -> None:
    """Every registered tool dialect has at least one streaming and one marker-prefix case."""
    covered = {c.tool_parser for c in CASES if c.kind == "streams"}
    assert set(registry.tool_dialect_names()) <= covered


@pytest.mark.parametrize("case", _params())
def test_memory_bound(case: Case) -> None:
    """A 1 MB adversarial stream holds no more than its case's documented bound."""
    m = measure(case, SIZE)
    assert m.input_bytes >= SIZE - len(case.unit) - CHUNK
    assert within_bound(case, m), f"{case.id}: peak {m.peak_bytes} B for {m.input_bytes} B of input ({case.kind})"


def _one_streaming_case_per_dialect() -> list[Case]:
    seen: dict[str | None, Case] = {}
    for c in CASES:
        if c.kind == "streams" and c.id not in VIOLATIONS:
            seen.setdefault(c.tool_parser, c)
    return list(seen.values())


@pytest.mark.parametrize("case", _one_streaming_case_per_dialect(), ids=lambda c: c.id)
def test_streaming_peak_does_not_grow_with_input(case: Case) -> None:
    """Quadrupling a streaming case's input leaves its peak within the constant bound (no growth)."""
    small = measure(case, SIZE // 8)
    big = measure(case, SIZE // 2)
    assert big.peak_bytes <= small.peak_bytes + 64 * 1024


@pytest.mark.anyio
async def test_pipeline_open_tool_block_streams_huge_argument() -> None:
    """Through ``deltaflow.stream``, a never-closed 4 MB string argument is streamed, not held."""
    size = 4 * 1024 * 1024
    head = '<tool_call>\n{"name": "search", "arguments": {"q": "'
    piece = "x" * CHUNK

    async def source() -> AsyncIterator[str]:
        yield head
        for _ in range(size // CHUNK):
            yield piece
            await anyio.lowlevel.checkpoint()

    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        args = 0
        async with deltaflow.stream(source(), tool_parser="hermes", reasoning_parser="qwen3", tools=TOOLS) as deltas:
            async for d in deltas:
                for tc in d.tool_calls:
                    args += len(tc.function.arguments or "")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert args >= size
    # Edges hold at most 16 chunks each (source -> chain, chain -> consumer): a few hundred KB.
    assert peak - base < 2 * 1024 * 1024, peak - base
