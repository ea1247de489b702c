"""Many concurrent streams in one event loop, each checked against parse_complete."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from stream_helpers import HQ, expected, hermes_qwen3_output, key

from deltaflow import DeltaMessage, Pipeline, TokenChunk
from deltaflow.testing import message_key, random_chunks

pytestmark = pytest.mark.anyio

N_STREAMS = 1000


async def test_a_thousand_concurrent_streams() -> None:
    """1,000 streams of different generated hermes/qwen3 outputs, in small text chunks, run at once.

    Each equals parse_complete.
    """
    pipeline = Pipeline.for_model(**HQ)
    texts = [hermes_qwen3_output(10_000 + k) for k in range(N_STREAMS)]
    results: list[list[DeltaMessage] | None] = [None] * N_STREAMS
    started = 0
    peak = 0
    running = 0

    async def engine(k: int) -> Any:
        # An engine emitting small chunks (the memory streams' checkpoints interleave the streams).
        for c in random_chunks(texts[k], k, 8):
            yield c
        yield TokenChunk(finish_reason="stop")

    async def client(k: int) -> None:
        nonlocal started, peak, running
        started += 1
        out: list[DeltaMessage] = []
        async with pipeline.open(engine(k)) as deltas:
            async for d in deltas:
                if not out:  # this stream is now under way
                    running += 1
                    peak = max(peak, running)
                out.append(d)
        running -= 1
        results[k] = out

    async with anyio.create_task_group() as tg:
        for k in range(N_STREAMS):
            tg.start_soon(client, k)
    assert started == N_STREAMS
    assert peak > N_STREAMS // 2, f"the streams did not overlap (at most {peak} under way at once)"
    for k, text in enumerate(texts):
        got = results[k]
        assert got is not None
        assert key(got) == message_key(expected(text)), f"stream {k}: {text!r}"
        assert got[-1].finish_reason == ("tool_calls" if expected(text).tool_calls else "stop")
