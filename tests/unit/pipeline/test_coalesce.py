"""Coalescing (``deltaflow.stream(..., prefetch=0, coalesce=True)``): a pump task reads the source into a
backlog, and each time the consumer needs a delta it takes everything waiting, merged into one chunk
(:func:`~deltaflow.pipeline.runner.merge_chunks`), and runs the parsers on it.

What must hold: the same message (and metadata) as without coalescing on every chunking and every
timing of the source; fewer deltas when chunks wait; no added latency when they do not; the source's
errors after the deltas before them; the source closed when the consumer leaves; a bounded read-ahead;
``take_ready`` handing over the rest of a merged chunk's deltas, and ``run_framed`` writing them at once.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import deltaflow
from deltaflow import EngineUsage, StageError, TokenChunk
from deltaflow.messages import ChatMessage, DeltaMessage
from deltaflow.pipeline.runner import merge_chunks
from deltaflow.pipeline.separators import drop_blank_separators
from deltaflow.pipeline.sources import to_chunk
from deltaflow.sinks import ChatCompletionsFramer, WireEvent, collect_async, run_framed
from deltaflow.stages.assembler import Usage

BACKENDS = ["asyncio", "trio"]

TEXT = (
    "<think>I should check</think>\n\nSure.<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
)
TOOLS = [
    {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]
DIALECT: dict[str, Any] = {"tool_parser": "hermes", "reasoning_parser": "qwen3", "tools": TOOLS}
ACCEPTED = "a str, an int token id, a list of int token ids or a TokenChunk"


def message_key(msg: ChatMessage) -> tuple[Any, ...]:
    """What a client sees of a message: content, reasoning, calls (name, parsed arguments), finish reason."""
    calls = [(tc.function.name, json.loads(tc.function.arguments)) for tc in msg.tool_calls]
    return msg.content, msg.reasoning_content, calls, msg.finish_reason


def text_of(deltas: list[DeltaMessage]) -> str:
    return "".join(d.content or "" for d in deltas)


async def run_stream(
    source: AsyncIterator[Any], *, coalesce: bool, **kwargs: Any
) -> tuple[list[DeltaMessage], Usage]:
    """Every delta of ``source`` (prefetch=0, as the server runs it) and the stream's usage."""
    async with deltaflow.stream(source, prefetch=0, coalesce=coalesce, **kwargs) as deltas:
        got = [d async for d in deltas]
    return got, deltas.usage


async def eager(items: list[Any]) -> AsyncIterator[Any]:
    """A source that never suspends: everything it has is ready at once (one socket read of many events)."""
    for it in items:
        yield it


def split(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *sorted(set(cuts)), len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if a < b]


# -- merge_chunks ------------------------------------------------------------------------------------------


def test_strings_join_into_one_string() -> None:
    assert merge_chunks(["<thi", "nk>", "a"]) == ["<think>a"]
    assert merge_chunks(["only"]) == ["only"]


def test_token_chunks_join_text_ids_and_logprobs() -> None:
    got = merge_chunks(
        [
            TokenChunk(token_ids=[1], text="a", logprobs=[{"t": 1}]),
            TokenChunk(token_ids=[2, 3], text="bc", logprobs=[{"t": 2}, {"t": 3}]),
            TokenChunk(token_ids=[], text="", logprobs=[]),
            TokenChunk(token_ids=[4], text="d", logprobs=[{"t": 4}]),
        ]
    )
    assert got == [
        TokenChunk(token_ids=[1, 2, 3, 4], text="abcd", logprobs=[{"t": 1}, {"t": 2}, {"t": 3}, {"t": 4}])
    ]


def test_a_string_joins_a_token_chunk_that_has_text() -> None:
    assert merge_chunks(["a", TokenChunk(token_ids=[5], text="b"), "c"]) == [TokenChunk(token_ids=[5], text="abc")]


def test_a_finish_reason_ends_a_run() -> None:
    got = merge_chunks(
        [
            TokenChunk(token_ids=[1], text="a"),
            TokenChunk(token_ids=[2], text="b", finish_reason="stop"),
            TokenChunk(token_ids=[3], text="c"),
            TokenChunk(token_ids=[4], text="d"),
        ]
    )
    assert got == [
        TokenChunk(token_ids=[1, 2], text="ab", finish_reason="stop", token_chars=[1, 1]),
        TokenChunk(token_ids=[3, 4], text="cd", token_chars=[1, 1]),
    ]


def test_usage_ends_a_run_and_stays_on_it() -> None:
    usage = EngineUsage(prompt_tokens=7, completion_tokens=2)
    got = merge_chunks(["a", TokenChunk(token_ids=[2], text="b", usage=usage), "c", "d"])
    assert got == [TokenChunk(token_ids=[2], text="ab", usage=usage), TokenChunk(text="cd")]
    assert got[1].usage is None and got[1].finish_reason is None


def test_chunks_with_and_without_text_are_not_joined() -> None:
    got = merge_chunks(
        [
            TokenChunk(token_ids=[1], text="a"),
            TokenChunk(token_ids=[2]),
            TokenChunk(token_ids=[3]),
            TokenChunk(token_ids=[4], text="d"),
            "e",
        ]
    )
    assert got == [
        TokenChunk(token_ids=[1], text="a"),
        TokenChunk(token_ids=[2, 3]),
        TokenChunk(token_ids=[4], text="de"),
    ]
    assert got[1].text is None  # ids to decode stay ids to decode: no "" text appears


def test_chunks_with_and_without_logprobs_are_not_joined() -> None:
    got = merge_chunks(
        [
            TokenChunk(token_ids=[1], text="a", logprobs=[0.1]),
            TokenChunk(token_ids=[2], text="b"),
            TokenChunk(token_ids=[3], text="c"),
            TokenChunk(token_ids=[4], text="d", logprobs=[0.4]),
            TokenChunk(token_ids=[5], text="e", logprobs=[0.5]),
        ]
    )
    assert got == [
        TokenChunk(token_ids=[1], text="a", logprobs=[0.1]),
        TokenChunk(token_ids=[2, 3], text="bc", token_chars=[1, 1]),
        TokenChunk(token_ids=[4, 5], text="de", logprobs=[0.4, 0.5], token_chars=[1, 1]),
    ]


def test_ints_and_lists_of_ints_are_converted_like_to_chunk() -> None:
    assert merge_chunks([1, [2, 3], (4,), []]) == [TokenChunk(token_ids=[1, 2, 3, 4])]
    assert merge_chunks([7]) == [TokenChunk(token_ids=[7])]
    assert merge_chunks([1, "x", [2]]) == [TokenChunk(token_ids=[1]), TokenChunk(text="x"), TokenChunk(token_ids=[2])]


@pytest.mark.parametrize("bad", [1.0, None, True, b"x", [1, "2"], {"a": 1}], ids=repr)
@pytest.mark.parametrize("where", ["first", "after-strings", "after-chunks"])
def test_a_bad_item_is_a_type_error_naming_what_is_accepted(bad: object, where: str) -> None:
    before: list[Any] = {"first": [], "after-strings": ["a", "b"], "after-chunks": [1, TokenChunk(text="x")]}[where]
    with pytest.raises(TypeError, match=ACCEPTED) as info:
        merge_chunks([*before, bad, "z"])
    assert type(bad).__name__ in str(info.value)


_CHUNKS = st.builds(
    TokenChunk,
    token_ids=st.lists(st.integers(0, 50), max_size=3),
    text=st.one_of(st.none(), st.text("ab<>", max_size=3)),
    logprobs=st.one_of(st.none(), st.lists(st.floats(-5, 0), max_size=2)),
    finish_reason=st.sampled_from([None, None, None, "stop"]),
    usage=st.sampled_from([None, None, None, EngineUsage(completion_tokens=3)]),
)


@settings(deadline=None, max_examples=200)
@given(st.lists(st.one_of(_CHUNKS, st.text("ab", max_size=2), st.integers(0, 9)), min_size=1, max_size=12))
def test_merge_keeps_everything_in_order_and_joins_as_far_as_allowed(items: list[Any]) -> None:
    """Text, ids, logprobs, finish reasons and usages come out in order; two neighbours that are both
    plain (no finish reason, no usage) and agree on text and logprobs never stay apart."""
    chunks = [to_chunk(i) for i in items]
    out = [to_chunk(o) for o in merge_chunks(items)]
    assert "".join(c.text or "" for c in out) == "".join(c.text or "" for c in chunks)
    assert [i for c in out for i in c.token_ids] == [i for c in chunks for i in c.token_ids]
    assert [x for c in out for x in c.logprobs or ()] == [x for c in chunks for x in c.logprobs or ()]
    assert [(c.finish_reason, c.usage) for c in out if c.finish_reason or c.usage] == [
        (c.finish_reason, c.usage) for c in chunks if c.finish_reason or c.usage
    ]
    assert len(out) <= len(chunks)
    for a, b in zip(out, out[1:], strict=False):
        ends = a.finish_reason is not None or a.usage is not None
        differ = (a.text is None) != (b.text is None) or (a.logprobs is None) != (b.logprobs is None)
        assert ends or differ, (a, b)


# -- equivalence --------------------------------------------------------------------------------------------


async def timed(items: list[Any], pauses: list[bool]) -> AsyncIterator[Any]:
    """Yields ``items``, giving the loop a turn after item k when ``pauses[k]`` (so the pump batches some)."""
    for k, it in enumerate(items):
        yield it
        if pauses[k % len(pauses)]:
            await anyio.sleep(0)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(deadline=None, max_examples=40)
@given(
    cuts=st.lists(st.integers(1, len(TEXT) - 1), max_size=40),
    pauses=st.lists(st.booleans(), min_size=1, max_size=20),
    max_batch=st.sampled_from([1, 3, 64]),
)
def test_any_chunking_and_timing_gives_the_message_of_the_plain_path(
    backend: str, cuts: list[int], pauses: list[bool], max_batch: int
) -> None:
    chunks = split(TEXT, cuts)

    async def both() -> tuple[ChatMessage, ChatMessage]:
        async with deltaflow.stream(timed(chunks, pauses), prefetch=0, coalesce=False, **DIALECT) as plain:
            want = await collect_async(plain)
        async with deltaflow.stream(
            timed(chunks, pauses), prefetch=0, coalesce=True, max_batch=max_batch, **DIALECT
        ) as merged:
            got = await collect_async(merged)
        return want, got

    want, got = anyio.run(both, backend=backend)
    assert message_key(got) == message_key(want)
    assert message_key(want) == (
        "\n\nSure.",
        "I should check",
        [("get_weather", {"city": "Paris"})],
        None,
    )


@pytest.mark.parametrize("backend", BACKENDS)
@settings(deadline=None, max_examples=40)
@given(
    cuts=st.lists(st.integers(1, len(TEXT) - 1), max_size=30),
    pauses=st.lists(st.booleans(), min_size=1, max_size=20),
    logprobs=st.lists(st.booleans(), min_size=1, max_size=5),
)
def test_token_chunks_keep_ids_logprobs_finish_reason_and_engine_usage(
    backend: str, cuts: list[int], pauses: list[bool], logprobs: list[bool]
) -> None:
    """TokenChunks (text, ids, logprobs on some): the message, every id and logprob in order, the finish
    reason and the engine's counts are those of the plain path."""
    pieces = split(TEXT, cuts)
    items: list[Any] = []
    next_id = 0
    for k, p in enumerate(pieces):
        ids = list(range(next_id, next_id + len(p)))
        next_id += len(p)
        lp = [float(-i) for i in ids] if logprobs[k % len(logprobs)] else None
        items.append(TokenChunk(token_ids=ids, text=p, logprobs=lp))
    usage = EngineUsage(prompt_tokens=11, completion_tokens=next_id)
    items.append(TokenChunk(text="", finish_reason="tool_calls", usage=usage))

    async def one(coalesce: bool) -> tuple[list[DeltaMessage], Usage]:
        return await run_stream(timed(items, pauses), coalesce=coalesce, **DIALECT)

    async def both() -> tuple[tuple[list[DeltaMessage], Usage], tuple[list[DeltaMessage], Usage]]:
        return await one(False), await one(True)

    (want, want_usage), (got, got_usage) = anyio.run(both, backend=backend)
    assert message_key(deltaflow.accumulate(got)) == message_key(deltaflow.accumulate(want))
    assert [i for d in got for i in d.token_ids or ()] == list(range(next_id))
    assert [x for d in got for x in d.logprobs or ()] == [x for d in want for x in d.logprobs or ()]
    assert [d.finish_reason for d in got if d.finish_reason] == ["tool_calls"]
    assert (got_usage.completion_tokens, got_usage.prompt_tokens) == (want_usage.completion_tokens, 11)


@pytest.mark.anyio
async def test_reasoning_tokens_are_counted_as_without_coalescing() -> None:
    """Usage is part of the response: merging chunks must not change ``usage.reasoning_tokens``.

    One token per chunk (text and id, no tokenizer, as an engine that detokenizes sends them), all ready at
    once: 17 tokens of ``<think>ab</think>`` lie in the reasoning, 6 content tokens follow."""
    text = "<think>ab</think>cdefgh"
    items = [TokenChunk(token_ids=[i], text=c) for i, c in enumerate(text)]
    _, want = await run_stream(eager(items), coalesce=False, reasoning_parser="qwen3")
    _, got = await run_stream(eager(items), coalesce=True, reasoning_parser="qwen3")
    assert want.reasoning_tokens == 17
    assert (got.completion_tokens, got.reasoning_tokens) == (want.completion_tokens, want.reasoning_tokens)


# -- batching and latency -----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_chunks_that_wait_come_out_in_far_fewer_deltas() -> None:
    chunks = [chr(ord("a") + k % 26) for k in range(300)]
    plain, _ = await run_stream(eager(chunks), coalesce=False)
    merged, _ = await run_stream(eager(chunks), coalesce=True)
    assert text_of(merged) == text_of(plain) == "".join(chunks)
    assert len(plain) == 300
    assert 1 <= len(merged) <= 300 // 64 + 2


@pytest.mark.anyio
async def test_each_delta_arrives_before_the_source_makes_the_next_chunk() -> None:
    """Handshake: the source yields chunk k and then waits until the consumer has delta k. Coalescing that
    waited for more chunks before it ran the parsers would never get there (the timeout fails it)."""
    n = 6
    seen = [anyio.Event() for _ in range(n)]

    async def source() -> AsyncIterator[str]:
        for k in range(n):
            yield f"w{k} "
            with anyio.fail_after(5):
                await seen[k].wait()

    got: list[str] = []
    async with deltaflow.stream(source(), prefetch=0, coalesce=True) as deltas:
        async for d in deltas:
            got.append(d.content or "")
            seen[len(got) - 1].set()
    assert got == [f"w{k} " for k in range(n)]


@pytest.mark.anyio
@pytest.mark.parametrize("coalesce", [False, True])
async def test_a_source_that_sleeps_gets_each_delta_out_before_its_next_chunk(coalesce: bool) -> None:
    produced = 0

    async def source() -> AsyncIterator[str]:
        nonlocal produced
        for k in range(5):
            produced += 1
            yield f"{k},"
            await anyio.sleep(0.05)

    at: list[int] = []
    async with deltaflow.stream(source(), prefetch=0, coalesce=coalesce) as deltas:
        async for d in deltas:
            assert d.content
            at.append(produced)
    assert at == [1, 2, 3, 4, 5]


# -- errors ---------------------------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("pause", [False, True], ids=["eager", "pausing"])
@pytest.mark.parametrize("coalesce", [False, True])
async def test_a_source_error_comes_after_the_deltas_before_it(coalesce: bool, pause: bool) -> None:
    async def source() -> AsyncIterator[str]:
        yield "a"
        if pause:
            await anyio.sleep(0)
        yield "b"
        if pause:
            await anyio.sleep(0)
        raise ValueError("boom")

    got: list[DeltaMessage] = []
    with pytest.raises(StageError) as info:
        async with deltaflow.stream(source(), prefetch=0, coalesce=coalesce) as deltas:
            async for d in deltas:
                got.append(d)
    assert text_of(got) == "ab"
    assert info.value.stage == "source"
    assert type(info.value.__cause__) is ValueError
    assert str(info.value.__cause__) == "boom"


@pytest.mark.anyio
@pytest.mark.parametrize("coalesce", [False, True])
async def test_a_bad_item_fails_after_the_deltas_of_the_items_before_it(coalesce: bool) -> None:
    """A source item of the wrong type is a StageError("source") (cause: the TypeError naming what is
    accepted) once the items before it went out, as with a source that raises."""
    got: list[DeltaMessage] = []
    with pytest.raises(StageError) as info:
        async with deltaflow.stream(eager(["a", "b", 1.5]), prefetch=0, coalesce=coalesce) as deltas:
            async for d in deltas:
                got.append(d)
    assert info.value.stage == "source"
    assert type(info.value.__cause__) is TypeError
    assert ACCEPTED in str(info.value)
    assert text_of(got) == "ab"


@pytest.mark.anyio
@pytest.mark.parametrize("coalesce", [False, True])
@pytest.mark.parametrize(
    "item", [["a", "b"], [TokenChunk(text="a")], [1, "2"]], ids=["strs", "token-chunks", "int-and-str"]
)
async def test_a_list_that_is_not_token_ids_is_refused_as_a_source_item(coalesce: bool, item: list[Any]) -> None:
    """A list source item means token ids; anything else in it is refused, whether or not chunks merge."""
    got: list[DeltaMessage] = []
    with pytest.raises(StageError) as info:
        async with deltaflow.stream(eager([item]), prefetch=0, coalesce=coalesce) as deltas:
            async for d in deltas:
                got.append(d)
    assert type(info.value.__cause__) is TypeError
    assert got == []


@pytest.mark.anyio
@pytest.mark.parametrize("coalesce", [False, True])
async def test_an_error_in_the_consumer_body_propagates_unchanged_and_closes_the_source(coalesce: bool) -> None:
    closed = False

    async def source() -> AsyncIterator[str]:
        nonlocal closed
        try:
            while True:
                yield "x"
        finally:
            closed = True

    with anyio.fail_after(5):
        with pytest.raises(KeyError, match="mine"):
            async with deltaflow.stream(source(), prefetch=0, coalesce=coalesce) as deltas:
                async for _ in deltas:
                    raise KeyError("mine")
    assert closed


# -- closing early --------------------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("coalesce", [False, True])
@pytest.mark.parametrize("kind", ["endless", "stalled"])
async def test_leaving_after_the_first_delta_closes_the_source(coalesce: bool, kind: str) -> None:
    """``endless`` never suspends (the pump waits for room), ``stalled`` waits forever after its first chunk
    (the pump waits in the source): leaving ``async with`` closes the source either way, promptly."""
    closed = False

    async def source() -> AsyncIterator[str]:
        nonlocal closed
        try:
            yield "first "
            if kind == "stalled":
                await anyio.sleep_forever()
            while True:
                yield "more "
        finally:
            closed = True

    with anyio.fail_after(5):
        async with deltaflow.stream(source(), prefetch=0, coalesce=coalesce) as deltas:
            first = await deltas.__anext__()
            assert (first.content or "").startswith("first ")
        assert closed


@pytest.mark.anyio
@pytest.mark.parametrize("coalesce", [False, True])
async def test_a_cancelled_consumer_closes_the_source(coalesce: bool) -> None:
    closed = False

    async def source() -> AsyncIterator[str]:
        nonlocal closed
        try:
            yield "a"
            await anyio.sleep_forever()
            yield "never"
        finally:
            closed = True

    got: list[DeltaMessage] = []
    with anyio.fail_after(5):
        with anyio.move_on_after(0.1) as scope:
            async with deltaflow.stream(source(), prefetch=0, coalesce=coalesce) as deltas:
                async for d in deltas:
                    got.append(d)
    assert scope.cancelled_caught
    assert text_of(got) == "a"
    assert closed


# -- backpressure ---------------------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("max_batch", [8, 64])
async def test_the_pump_reads_at_most_max_batch_ahead_of_a_slow_consumer(max_batch: int) -> None:
    produced = 0
    total = 1000

    async def source() -> AsyncIterator[str]:
        nonlocal produced
        for k in range(total):
            produced += 1
            yield str(k % 10)

    text = ""
    async with deltaflow.stream(source(), prefetch=0, coalesce=True, max_batch=max_batch) as deltas:
        first = await deltas.__anext__()
        text += first.content or ""
        assert produced <= max_batch + 2
        await anyio.sleep(0.05)  # a slow consumer: the pump fills the backlog once more and waits
        assert produced <= 2 * max_batch + 2
        async for d in deltas:
            text += d.content or ""
            assert produced <= len(text) + max_batch + 2
    assert text == "".join(str(k % 10) for k in range(total))


# -- take_ready and run_framed --------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_take_ready_hands_over_the_rest_of_a_merged_chunk() -> None:
    chunks = list("<think>abc</think>Hello")
    async with deltaflow.stream(eager(chunks), prefetch=0, coalesce=True, reasoning_parser="qwen3") as deltas:
        assert deltas.take_ready() == []  # nothing ran yet
        first = await deltas.__anext__()
        rest = deltas.take_ready()
        assert deltas.take_ready() == []
        after = [d async for d in deltas]
    assert first.reasoning_content == "abc"
    assert len(rest) >= 1
    out = [first, *rest, *after]
    assert "".join(d.content or "" for d in out) == "Hello"
    assert "".join(d.reasoning_content or "" for d in out) == "abc"
    # the merged chunk's deltas were all ready at once: nothing of the content waited for the source
    assert "".join(d.content or "" for d in rest) == "Hello"


@pytest.mark.anyio
async def test_take_ready_through_blank_separators() -> None:
    """``drop_blank_separators`` hands over what its inner stream has ready, filtered."""
    text = "<think>x</think>\n\nHello"
    async with deltaflow.stream(eager(list(text)), prefetch=0, coalesce=True, **DIALECT) as raw:
        deltas = drop_blank_separators(raw)
        first = await deltas.__anext__()
        rest = deltas.take_ready()
        assert deltas.take_ready() == []
        after = [d async for d in deltas]
    assert first.reasoning_content == "x"
    assert "".join(d.content or "" for d in rest) == "\n\nHello"
    assert text_of([first, *rest, *after]) == "\n\nHello"


@pytest.mark.anyio
async def test_take_ready_of_a_task_stream_gives_what_the_chain_produced() -> None:
    """With ``prefetch > 0`` (tasks and memory streams), take_ready drains the consumer edge without waiting."""
    chunks = [f"{k}," for k in range(40)]
    async with deltaflow.stream(eager(chunks), prefetch=4, buffer_size=8) as deltas:
        first = await deltas.__anext__()
        await anyio.sleep(0.05)
        ready = deltas.take_ready()
        after = [d async for d in deltas]
        assert deltas.take_ready() == []
    assert 1 <= len(ready) <= 8 + 1  # the edge's buffer, and the item a blocked sender holds
    assert text_of([first, *ready, *after]) == "".join(chunks)


def wire_text(batches: list[list[WireEvent]]) -> tuple[str, str, list[tuple[str, str]], str | None]:
    """Content, reasoning, calls (name, arguments text) and finish reason rebuilt from Chat chunks."""
    content, reasoning, finish = "", "", None
    calls: dict[int, list[str]] = {}
    for batch in batches:
        for ev in batch:
            data = json.loads(msgspec.json.encode(ev.data))
            for choice in data.get("choices", []):
                delta = choice.get("delta", {})
                content += delta.get("content") or ""
                reasoning += delta.get("reasoning_content") or ""
                for tc in delta.get("tool_calls") or []:
                    entry = calls.setdefault(tc["index"], ["", ""])
                    fn = tc.get("function") or {}
                    entry[0] += fn.get("name") or ""
                    entry[1] += fn.get("arguments") or ""
                finish = choice.get("finish_reason") or finish
    return content, reasoning, [(n, a) for _, (n, a) in sorted(calls.items())], finish


async def framed(
    make_source: Callable[[], AsyncIterator[Any]], coalesce: bool, **kwargs: Any
) -> list[list[WireEvent]]:
    """The event batches ``run_framed`` emits for the source (Chat Completions framing)."""
    batches: list[list[WireEvent]] = []

    async def emit(events: list[WireEvent]) -> None:
        batches.append(list(events))

    await run_framed(
        lambda: deltaflow.stream(make_source(), prefetch=0, coalesce=coalesce, **kwargs),
        ChatCompletionsFramer("m"),
        emit,
    )
    return batches


@pytest.mark.anyio
async def test_run_framed_writes_a_burst_in_fewer_emits_with_the_same_payload() -> None:
    chunks = list(TEXT)
    plain = await framed(lambda: eager(chunks), coalesce=False, **DIALECT)
    merged = await framed(lambda: eager(chunks), coalesce=True, **DIALECT)
    want = wire_text(plain)
    assert want[:2] == ("\n\nSure.", "I should check")
    assert [(n, json.loads(a)) for n, a in want[2]] == [("get_weather", {"city": "Paris"})]
    assert wire_text(merged) == want
    assert len(merged) * 4 <= len(plain)
    # the burst's several deltas (reasoning, content, the call) went out in one emit
    assert max(len(b) for b in merged) >= 2


@pytest.mark.anyio
async def test_run_framed_with_a_source_error_ends_with_the_error_event() -> None:
    async def source() -> AsyncIterator[str]:
        yield "Hel"
        yield "lo"
        raise ValueError("boom")

    for coalesce in (False, True):
        batches = await framed(source, coalesce=coalesce)
        assert wire_text(batches[:-1])[0] == "Hello"
        assert len(batches[-1]) == 1
        last = json.loads(msgspec.json.encode(batches[-1][0].data))
        assert "boom" in last["error"]["message"], (coalesce, last)


@pytest.mark.anyio
async def test_run_framed_starts_the_source_before_it_writes_the_head(anyio_backend: str) -> None:
    # The gateway's source is its upstream request: with a pump task (coalesce), that request goes out
    # before the response's head and first events are written, so the writing overlaps the engine's work.
    order: list[str] = []

    async def source() -> AsyncIterator[str]:
        order.append("source")
        yield "Hi"

    async def head() -> None:
        order.append("head")

    async def emit(events: list[WireEvent]) -> None:
        order.append("emit")

    for coalesce, first in ((True, "source"), (False, "head")):  # without a pump the consumer reads the source
        order.clear()
        await run_framed(lambda: deltaflow.stream(source(), prefetch=0, coalesce=coalesce),  # noqa: B023
                         ChatCompletionsFramer("m"), emit, head=head)
        assert order.count("head") == 1 and order.index("head") < order.index("emit"), (coalesce, order)
        if anyio_backend == "asyncio":  # trio runs ready tasks in a deliberately varied order: no promise there
            assert order[0] == first, (coalesce, order)


@pytest.mark.anyio
async def test_run_framed_writes_the_head_and_start_before_an_error_at_open() -> None:
    # A pipeline that fails as it opens still answers with a whole stream: head, start, the error event.
    order: list[str] = []
    batches: list[list[WireEvent]] = []

    async def head() -> None:
        order.append("head")

    async def emit(events: list[WireEvent]) -> None:
        order.append("emit")
        batches.append(list(events))

    def bad_open() -> Any:
        return deltaflow.stream(["x"], prefetch=0, tool_parser="no-such-parser")

    await run_framed(bad_open, ChatCompletionsFramer("m"), emit, head=head)
    assert order[0] == "head" and len(batches) == 2
    start = json.loads(msgspec.json.encode(batches[0][0].data))
    assert start["choices"][0]["delta"]["role"] == "assistant"
    assert "no-such-parser" in msgspec.json.encode(batches[-1][0].data).decode()
