"""Fixed costs per response: what one response pays before its first chunk.

Measured with the W3 configuration (``hermes`` + ``qwen3``, three tools):
building a ``ResponseParser``, ``parse_complete`` of an empty output, and
opening and closing ``deltaflow.stream`` over a source that ends at once
(``prefetch=16`` and ``0``). These costs are outside the sync core's timed
runs (as in the peers' harness) but inside the pipeline's and
``parse_complete``'s, and they dominate small responses.
"""

from __future__ import annotations

import gc
import statistics
from collections.abc import AsyncIterator
from typing import Any

import anyio

import deltaflow
from deltaflow import ResponseParser, parse_complete

from .modes import parser_kwargs
from .timing import clock
from .workloads import make_w3

__all__ = ("fixed_costs",)


async def _empty() -> AsyncIterator[str]:
    return
    yield ""


def _per_call_us(fn: Any, n: int) -> float:
    samples = []
    for _ in range(5):
        gc.collect()
        t0 = clock()
        for _ in range(n):
            fn()
        samples.append((clock() - t0) / n * 1e6)
    return statistics.median(samples)


async def _stream_us(kwargs: dict[str, Any], n: int) -> float:
    samples = []
    for _ in range(5):
        gc.collect()
        t0 = clock()
        for _ in range(n):
            async with deltaflow.stream(_empty(), **kwargs) as deltas:
                async for _ in deltas:
                    pass
        samples.append((clock() - t0) / n * 1e6)
    return statistics.median(samples)


def fixed_costs(backend: str = "asyncio", n: int = 200) -> list[dict[str, Any]]:
    """µs per response of each fixed cost (see the module docstring)."""
    kwargs = parser_kwargs(make_w3(256))
    rows = [
        {"what": "ResponseParser(...) construction", "us": _per_call_us(lambda: ResponseParser(**kwargs), n)},
        {"what": 'parse_complete("")', "us": _per_call_us(lambda: parse_complete("", **kwargs), n)},
    ]
    for prefetch in (16, 0):
        us = anyio.run(_stream_us, kwargs | {"prefetch": prefetch}, n // 4, backend=backend)
        rows.append({"what": f"deltaflow.stream open + close, empty source, prefetch={prefetch}", "us": us})
    return rows
