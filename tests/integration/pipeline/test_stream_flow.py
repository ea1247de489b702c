"""Flow control of one stream: backpressure, coalescing under load, and how many tasks and memory streams it uses."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream, _MemoryObjectStreamState
from stream_helpers import HQ, aiter_items, collect_pipeline, fixed_id

import deltaflow
from deltaflow import DeltaMessage, Pipeline

pytestmark = pytest.mark.anyio

SOURCE_LENGTH = 10_000


class CountingSource:
    """An async iterator of words that counts how often it was pulled and records aclose."""

    def __init__(self, n: int = SOURCE_LENGTH) -> None:
        self.n = n
        self.pulls = 0
        self.closed = False

    def __aiter__(self) -> CountingSource:
        return self

    async def __anext__(self) -> str:
        if self.pulls >= self.n:
            raise StopAsyncIteration
        self.pulls += 1
        return f"word{self.pulls} "  # each item gives exactly one delta (no marker prefix is held)

    async def aclose(self) -> None:
        self.closed = True


class PassThrough:
    """An async user stage that forwards every item."""

    name = "passthrough"

    async def run(self, receive: MemoryObjectReceiveStream[Any], send: MemoryObjectSendStream[Any]) -> None:
        async for item in receive:
            await send.send(item)


def pull_bound(pipeline: Pipeline, consumed: int, async_stages: int = 0) -> int:
    """The most source items a stream may have pulled when its consumer took ``consumed`` deltas and stopped.

    Every item gives one delta, and every place an item can wait is bounded:
    """
    if pipeline.prefetch == 0:
        in_chain = 1  # the chain pulls one item itself (inline: when the consumer asks) and blocks sending its delta
        pumped = 0
    else:
        pumped = pipeline.prefetch + 1  # the pump's edge buffer, plus the item the pump blocks on sending
        in_chain = min(pipeline.max_batch, pipeline.prefetch + 1)  # one coalesced batch whose deltas wait to be sent
    per_async_stage = pipeline.buffer_size + 1  # its input edge buffer, plus the item it blocks on sending
    return consumed + pipeline.buffer_size + in_chain + pumped + async_stages * per_async_stage


CONFIGS = [
    pytest.param({}, id="default"),
    pytest.param({"prefetch": 0}, id="prefetch=0"),
    pytest.param({"prefetch": 0, "buffer_size": 0}, id="prefetch=0,buffer=0"),
    pytest.param({"prefetch": 4, "buffer_size": 2}, id="prefetch=4,buffer=2"),
    pytest.param({"prefetch": 1, "buffer_size": 0, "max_batch": 1}, id="prefetch=1,buffer=0,batch=1"),
    pytest.param({"prefetch": 64, "buffer_size": 64, "max_batch": 8}, id="prefetch=64,buffer=64,batch=8"),
]


@pytest.mark.parametrize("options", CONFIGS)
@pytest.mark.parametrize("dialect", [pytest.param({}, id="plain"), pytest.param(HQ, id="hermes+qwen3")])
async def test_a_blocked_consumer_bounds_how_far_the_source_is_read(
    options: dict[str, Any], dialect: dict[str, Any]
) -> None:
    """While the consumer holds one delta and waits, the source is pulled a bounded number of times, then closed."""
    source = CountingSource()
    pipeline = Pipeline.for_model(**dialect, **options)
    release = anyio.Event()
    first: list[DeltaMessage] = []

    async def consumer() -> None:
        async with pipeline.open(source) as deltas:
            first.append(await deltas.receive())
            await release.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(consumer)
        await anyio.wait_all_tasks_blocked()
        pulls = source.pulls
        await anyio.wait_all_tasks_blocked()
        assert source.pulls == pulls, "the source kept being read while everything was blocked"
        release.set()
    assert first and (first[0].content or first[0].reasoning_content) == "word1 "
    assert 1 <= pulls <= pull_bound(pipeline, consumed=1)
    assert pulls < SOURCE_LENGTH // 20
    assert source.closed


async def test_the_bound_holds_after_every_read() -> None:
    """Each delta the consumer takes lets the source advance by a bounded amount, never more."""
    source = CountingSource()
    pipeline = Pipeline.for_model(prefetch=3, buffer_size=2)
    async with pipeline.open(source) as deltas:
        for consumed in range(1, 6):
            await deltas.receive()
            await anyio.wait_all_tasks_blocked()
            assert source.pulls <= pull_bound(pipeline, consumed)
    assert source.closed


async def test_an_async_user_stage_adds_one_bounded_edge() -> None:
    """With an async stage in the chain, the source is still read only a bounded number of items ahead."""
    source = CountingSource()
    pipeline = Pipeline.for_model(**HQ).insert_after("name_filter", "passthrough", PassThrough)
    async with pipeline.open(source) as deltas:
        await deltas.receive()
        await anyio.wait_all_tasks_blocked()
        pulls = source.pulls
    assert pulls <= pull_bound(pipeline, consumed=1, async_stages=1)
    assert source.closed


class BatchProbe:
    """Observes how many source chunks each fused run took, from two stages placed first in the chain.

    SyncChain feeds a whole batch to one stage before the next, so the count
    the first stage saw when the second is fed is the batch size.
    """

    def __init__(self) -> None:
        self.pending = 0
        self.batches: list[int] = []

    def close_batch(self) -> None:
        if self.pending:
            self.batches.append(self.pending)
            self.pending = 0

    def counter(self) -> Any:
        probe = self

        class Counter:
            name = "count"

            def feed(self, item: object) -> list[object]:
                probe.pending += 1
                return [item]

            def finish(self) -> list[object]:
                return []

        return Counter()

    def observer(self) -> Any:
        probe = self

        class Observer:
            name = "observe"

            def feed(self, item: object) -> list[object]:
                probe.close_batch()
                return [item]

            def finish(self) -> list[object]:
                probe.close_batch()
                return []

        return Observer()


def probed(probe: BatchProbe, **options: Any) -> Pipeline:
    return (
        Pipeline.for_model(**HQ, id_factory=fixed_id, **options)
        .insert_before("detokenize", "count", probe.counter)
        .insert_after("count", "observe", probe.observer)
    )


async def _slow_consumer(pipeline: Pipeline, items: list[str]) -> list[DeltaMessage]:
    out: list[DeltaMessage] = []
    async with pipeline.open(aiter_items(items)) as deltas:
        async for d in deltas:
            out.append(d)
            if len(out) % 100 == 1:  # the consumer is slow: let the engine run ahead, then read on
                await anyio.wait_all_tasks_blocked()
    return out


async def test_a_slow_consumer_makes_the_chain_coalesce_and_the_output_is_unchanged() -> None:
    """A fast source and a slow consumer: the chain runs batches of several chunks; deltas equal item-by-item runs."""
    items = [f"w{i} " for i in range(300)]
    probe = BatchProbe()
    got = await _slow_consumer(probed(probe), items)
    assert sum(probe.batches) == len(items)
    assert max(probe.batches) > 1, probe.batches
    assert max(probe.batches) <= Pipeline().max_batch
    for options in ({"prefetch": 0}, {"max_batch": 1}):
        one = BatchProbe()
        want = await _slow_consumer(probed(one, **options), items)
        assert set(one.batches) == {1}
        assert got == want


async def test_max_batch_caps_a_coalesced_batch() -> None:
    """No fused run takes more than max_batch chunks."""
    probe = BatchProbe()
    await _slow_consumer(probed(probe, prefetch=32, max_batch=5), [f"w{i} " for i in range(200)])
    assert max(probe.batches) == 5


def _states() -> list[_MemoryObjectStreamState[Any]]:
    # type(), not isinstance(): isinstance reads __class__, which some proxies (torch) answer with a warning
    return [o for o in gc.get_objects() if type(o) is _MemoryObjectStreamState]


@pytest.mark.parametrize(
    ("make", "tasks", "streams"),
    [
        pytest.param(lambda: Pipeline.for_model(**HQ), 2, 2, id="default"),
        pytest.param(lambda: Pipeline.for_model(**HQ, prefetch=0), 0, 0, id="prefetch=0,inline"),
        pytest.param(
            lambda: Pipeline.for_model(**HQ).insert_after("name_filter", "passthrough", PassThrough),
            4,
            4,
            id="async-stage",
        ),
        pytest.param(
            lambda: Pipeline.for_model(**HQ, prefetch=0).insert_before("detokenize", "passthrough", PassThrough),
            3,
            3,
            id="async-stage-first,prefetch=0",
        ),
    ],
)
async def test_tasks_and_memory_streams_of_one_stream(make: Callable[[], Pipeline], tasks: int, streams: int) -> None:
    """A default stream runs 2 tasks over 2 memory streams; all end and close with it.

    With prefetch=0 there are none: the consumer runs the chain inline.
    """
    before = weakref.WeakSet(_states())
    base = len(anyio.get_running_tasks())
    pipeline = make()
    async with pipeline.open(CountingSource(1000)) as deltas:
        await deltas.receive()
        assert len(anyio.get_running_tasks()) - base == tasks
        mine = [s for s in _states() if s not in before]
        assert len(mine) == streams
    assert len(anyio.get_running_tasks()) == base
    assert [(s.open_send_channels, s.open_receive_channels) for s in mine] == [(0, 0)] * streams
    del mine


async def test_statistics_of_the_consumer_edge() -> None:
    """DeltaStream.statistics() reports the consumer edge: its buffer size and one open reader."""
    async with deltaflow.stream(CountingSource(100), buffer_size=3) as deltas:
        await deltas.receive()
        await anyio.wait_all_tasks_blocked()
        stats = deltas.statistics()
        assert stats.max_buffer_size == 3
        assert stats.current_buffer_used == 3
        assert stats.open_receive_streams == 1


async def test_a_drained_stream_rebuilds_the_same_text_at_any_speed() -> None:
    """The default pipeline delivers every word once, in order, to a consumer that reads as fast as it can."""
    items = [f"w{i} " for i in range(2000)]
    deltas, _ = await collect_pipeline(Pipeline.for_model(), aiter_items(items))
    assert "".join(d.content or "" for d in deltas) == "".join(items)
