"""Errors and cancellation: a failing stage or source reaches the consumer named; leaving early closes everything."""

from __future__ import annotations

import gc
import weakref
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream, _MemoryObjectStreamState
from stream_helpers import HQ, hermes_qwen3_output

import deltaflow
from deltaflow import DeltaflowError, Pipeline, StageError, TokenChunk
from deltaflow.items import ChannelText

pytestmark = pytest.mark.anyio

RUNTIMES = [pytest.param({}, id="default"), pytest.param({"prefetch": 0}, id="prefetch=0")]


class Recorder:
    """What a source went through."""

    def __init__(self) -> None:
        self.pulled = 0
        self.finally_ran = False
        self.aclosed = False


async def gen_source(
    rec: Recorder, items: list[Any], *, fail_at: int | None = None, exc: BaseException | None = None
) -> AsyncIterator[Any]:
    """An async generator source that records its ``finally`` (it runs on aclose or cancellation)."""
    try:
        for k, item in enumerate(items):
            if k == fail_at:
                assert exc is not None
                raise exc
            rec.pulled += 1
            yield item
    finally:
        rec.finally_ran = True


class IteratorSource:
    """A custom async iterator class with aclose, optionally hanging (an engine that went quiet) after some items."""

    def __init__(self, rec: Recorder, items: list[Any], hang_after: int | None = None) -> None:
        self.rec = rec
        self.items = items
        self.hang_after = hang_after
        self.never = anyio.Event()

    def __aiter__(self) -> IteratorSource:
        return self

    async def __anext__(self) -> Any:
        if self.hang_after is not None and self.rec.pulled >= self.hang_after:
            await self.never.wait()
        if self.rec.pulled >= len(self.items):
            raise StopAsyncIteration
        self.rec.pulled += 1
        return self.items[self.rec.pulled - 1]

    async def aclose(self) -> None:
        self.rec.aclosed = True


ITEMS = [f"w{i} " for i in range(500)]


def _states() -> list[_MemoryObjectStreamState[Any]]:
    # type(), not isinstance(): isinstance reads __class__, which some proxies (torch) answer with a warning
    return [o for o in gc.get_objects() if type(o) is _MemoryObjectStreamState]


@contextmanager
def leaves_nothing_open(runtime: dict[str, Any] | None = None) -> Iterator[None]:
    """Assert that the block leaves no extra task running and every memory stream it created closed.

    With ``prefetch=0`` the default chain runs inline and creates no memory stream at all.
    """
    before = weakref.WeakSet(_states())
    base = len(anyio.get_running_tasks())
    yield
    assert len(anyio.get_running_tasks()) == base, "a pipeline task is still running"
    mine = [s for s in _states() if s not in before]
    inline = runtime is not None and runtime.get("prefetch") == 0
    assert bool(mine) != inline, "an inline stream created a memory stream" if inline else "no memory stream?"
    open_ = [s.statistics() for s in mine if s.open_send_channels or s.open_receive_channels]
    assert open_ == [], "memory streams left open"


class RaiseOn:
    """A sync stage that raises ``exc`` when it is fed its ``at``-th text item."""

    def __init__(self, exc: Exception, at: int = 5, name: str = "boom", in_finish: bool = False) -> None:
        self.exc = exc
        self.at = at
        self.name = name
        self.in_finish = in_finish
        self.seen = 0

    def feed(self, item: object) -> list[object]:
        if isinstance(item, (str, ChannelText)):
            self.seen += 1
            if not self.in_finish and self.seen == self.at:
                raise self.exc
        return [item]

    def finish(self) -> list[object]:
        if self.in_finish:
            raise self.exc
        return []


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("after", ["router", "name_filter"])
async def test_a_sync_stage_that_raises_reaches_the_consumer_as_stage_error(
    runtime: dict[str, Any], after: str
) -> None:
    """A user sync stage raising mid-stream gives StageError(stage=its name) from the original; the source is closed."""
    original = KeyError("bad item")
    rec = Recorder()
    pipeline = Pipeline.for_model(**HQ, **runtime).insert_after(after, "boom", lambda: RaiseOn(original))
    got: list[Any] = []
    with leaves_nothing_open(runtime), pytest.raises(StageError) as info:
        async with pipeline.open(gen_source(rec, ITEMS)) as deltas:
            async for d in deltas:
                got.append(d)
    assert info.value.stage == "boom"
    assert info.value.__cause__ is original
    assert isinstance(info.value, DeltaflowError)
    assert "boom" in str(info.value)
    assert rec.finally_ran
    assert rec.pulled < len(ITEMS)


async def test_a_stage_that_raises_in_finish_is_named() -> None:
    """An exception in a stage's finish() is a StageError naming that stage."""
    original = ValueError("cannot finish")
    pipeline = Pipeline.for_model(**HQ).insert_before(
        "assembler", "late", lambda: RaiseOn(original, name="late", in_finish=True)
    )
    with leaves_nothing_open(), pytest.raises(StageError) as info:
        async with pipeline.open(gen_source(Recorder(), ITEMS[:20])) as deltas:
            async for _ in deltas:
                pass
    assert (info.value.stage, info.value.__cause__) == ("late", original)


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_a_source_that_raises_is_stage_error_source(runtime: dict[str, Any]) -> None:
    """An exception from the source reaches the consumer as StageError(stage="source") with the original as cause."""
    original = ConnectionResetError("engine died")
    rec = Recorder()
    with leaves_nothing_open(runtime), pytest.raises(StageError) as info:
        async with deltaflow.stream(gen_source(rec, ITEMS, fail_at=7, exc=original), **HQ, **runtime) as deltas:
            async for _ in deltas:
                pass
    assert info.value.stage == "source"
    assert info.value.__cause__ is original
    assert rec.finally_ran


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_a_bad_source_item_names_the_accepted_types(runtime: dict[str, Any]) -> None:
    """A source item of another type is StageError(stage="source").

    Its message lists the accepted types and the one it got.
    """
    for bad in (3.5, b"bytes", None, True, [1, "x"], {"text": "hi"}):
        rec = Recorder()
        with leaves_nothing_open(runtime), pytest.raises(StageError) as info:
            async with deltaflow.stream(gen_source(rec, ["ok ", bad, "never "]), **runtime) as deltas:
                async for _ in deltas:
                    pass
        assert info.value.stage == "source"
        msg = str(info.value)
        for accepted in ("str", "int", "list of int", "TokenChunk"):
            assert accepted in msg
        assert type(bad).__name__ in msg, msg
        assert isinstance(info.value.__cause__, TypeError)
        assert rec.finally_ran


class AsyncRaiser:
    """An async user stage that raises after forwarding a few items."""

    name = "async_boom"

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    async def run(self, receive: MemoryObjectReceiveStream[Any], send: MemoryObjectSendStream[Any]) -> None:
        n = 0
        async for item in receive:
            n += 1
            if n == 6:
                raise self.exc
            await send.send(item)


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_an_async_user_stage_that_raises_is_named(runtime: dict[str, Any]) -> None:
    """An async user stage raising gives StageError naming it, with the original as cause; every task ends."""
    original = RuntimeError("redaction service down")
    rec = Recorder()
    pipeline = Pipeline.for_model(**HQ, **runtime).insert_after(
        "name_filter", "async_boom", lambda: AsyncRaiser(original)
    )
    with leaves_nothing_open(), pytest.raises(StageError) as info:  # an async stage: never inline
        async with pipeline.open(IteratorSource(rec, ITEMS)) as deltas:
            async for _ in deltas:
                pass
    assert info.value.stage == "async_boom"
    assert info.value.__cause__ is original
    assert rec.aclosed


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("kind", ["async-generator", "iterator-class"])
async def test_leaving_early_closes_the_source_and_ends_every_task(runtime: dict[str, Any], kind: str) -> None:
    """Breaking out after the first delta closes the source (finally / aclose) and leaves no task or stream open."""
    rec = Recorder()
    source: Any = gen_source(rec, ITEMS) if kind == "async-generator" else IteratorSource(rec, ITEMS)
    with leaves_nothing_open(runtime):
        async with deltaflow.stream(source, **HQ, **runtime) as deltas:
            async for _ in deltas:
                break
    assert rec.finally_ran if kind == "async-generator" else rec.aclosed
    assert rec.pulled < len(ITEMS)


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_leaving_while_the_source_hangs_closes_it(runtime: dict[str, Any]) -> None:
    """A client leaving while the engine is silent (the source blocks) still ends the stream and closes the source."""
    rec = Recorder()
    source = IteratorSource(rec, ITEMS, hang_after=3)
    with leaves_nothing_open(runtime):
        async with deltaflow.stream(source, **runtime) as deltas:
            await deltas.receive()
            await anyio.wait_all_tasks_blocked()
    assert rec.aclosed
    # Read-ahead runs up to the hang; inline (prefetch=0), the source is read only for the delta asked for.
    assert rec.pulled == (1 if runtime.get("prefetch") == 0 else 3)


async def test_an_async_stage_is_cancelled_when_the_consumer_leaves() -> None:
    """Leaving early also ends an async user stage's task and closes its streams."""

    class Slow:
        name = "slow"

        async def run(self, receive: MemoryObjectReceiveStream[Any], send: MemoryObjectSendStream[Any]) -> None:
            async for item in receive:
                await send.send(item)

    rec = Recorder()
    pipeline = Pipeline.for_model(**HQ).insert_after("router", "slow", Slow)
    with leaves_nothing_open():
        async with pipeline.open(gen_source(rec, ITEMS)) as deltas:
            await deltas.receive()
    assert rec.finally_ran


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_the_consumers_exception_propagates_as_is(runtime: dict[str, Any]) -> None:
    """An exception raised inside the block comes out as the same object, and the source is closed."""
    mine = LookupError("consumer failed")
    rec = Recorder()
    with leaves_nothing_open(runtime), pytest.raises(LookupError) as info:
        async with deltaflow.stream(gen_source(rec, ITEMS), **HQ, **runtime) as deltas:
            async for _ in deltas:
                raise mine
    assert info.value is mine
    assert info.value.__cause__ is None
    assert rec.finally_ran


async def test_the_consumers_exception_keeps_its_own_context() -> None:
    """An exception raised in the block while handling another keeps that one as __context__ (not the task group's)."""
    rec = Recorder()
    with pytest.raises(ValueError) as info:
        async with deltaflow.stream(gen_source(rec, ITEMS)) as deltas:
            async for _ in deltas:
                empty: dict[str, int] = {}
                try:
                    empty["missing"]
                except KeyError:
                    raise ValueError("while handling a KeyError")  # noqa: B904 - implicit __context__: the KeyError
    assert isinstance(info.value.__context__, KeyError), repr(info.value.__context__)
    assert info.value.__suppress_context__ is False


async def test_an_outer_cancel_ends_the_stream_without_an_error() -> None:
    """Cancelling the scope around the stream ends its tasks and closes the source; cancellation is not wrapped."""
    rec = Recorder()
    with leaves_nothing_open():
        with anyio.CancelScope() as scope:
            async with deltaflow.stream(gen_source(rec, ITEMS), **HQ) as deltas:
                await deltas.receive()
                scope.cancel()
                await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert rec.finally_ran


async def test_closing_the_delta_stream_inside_the_block_is_quiet() -> None:
    """DeltaStream.aclose() inside the block stops the pipeline without an error at exit."""
    rec = Recorder()
    with leaves_nothing_open():
        async with deltaflow.stream(IteratorSource(rec, ITEMS), **HQ) as deltas:
            await deltas.receive()
            await deltas.aclose()
            await anyio.wait_all_tasks_blocked()
    assert rec.aclosed


async def test_an_error_after_a_complete_message_still_surfaces() -> None:
    """A source that fails after the whole output was sent still reports StageError(stage="source")."""
    text = hermes_qwen3_output(2)
    original = TimeoutError("late")
    items: list[Any] = [text, TokenChunk(finish_reason="stop"), "unused"]
    with pytest.raises(StageError) as info:
        async with deltaflow.stream(gen_source(Recorder(), items, fail_at=2, exc=original), **HQ) as deltas:
            async for _ in deltas:
                pass
    assert info.value.__cause__ is original


async def test_a_source_that_is_not_async_iterable_is_a_type_error() -> None:
    """A plain list is not accepted as a source: TypeError naming the type."""
    with pytest.raises(TypeError, match="async iterable.*list"):
        async with deltaflow.stream(["a", "b"]):  # type: ignore[arg-type]
            pass


async def test_the_leak_check_itself_detects_an_open_memory_stream() -> None:
    """The open-stream check used above fails when a memory stream created inside its block is left open."""
    with pytest.raises(AssertionError, match="memory streams left open"), leaves_nothing_open():
        send, receive = anyio.create_memory_object_stream[int](1)
    send.close()
    receive.close()
