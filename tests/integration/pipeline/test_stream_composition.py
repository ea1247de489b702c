"""User stages compose in the middle of the chain; one Pipeline serves several concurrent streams independently."""

from __future__ import annotations

import json
import re
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from stream_helpers import HQ, aiter_items, collect_pipeline, expected, hermes_qwen3_output, key

import deltaflow
from deltaflow import DeltaMessage, Pipeline, accumulate, parse_complete
from deltaflow.items import Channel, ChannelText, ChunkEnd
from deltaflow.testing import message_key, random_chunks

pytestmark = pytest.mark.anyio

SECRET = "Paris"
MASK = "[REDACTED]"


class AsyncRedactor:
    """An async user stage that replaces a word in content text (not in reasoning, not in calls).

    Content may split the word across engine chunks, so content text is held
    until a space ends a word; held text is released, in order, before any
    other item of another kind except chunk ends, and at the end of the input.
    """

    name = "redact"

    def __init__(self, word: str = SECRET) -> None:
        self.pattern = re.compile(rf"\b{re.escape(word)}\b")
        self.held = ""

    def _redact(self, text: str) -> str:
        return self.pattern.sub(MASK, text)

    async def _release(self, send: MemoryObjectSendStream[Any], upto: int | None = None) -> None:
        cut = len(self.held) if upto is None else upto
        if cut:
            out, self.held = self.held[:cut], self.held[cut:]
            await send.send(ChannelText(Channel.CONTENT, self._redact(out)))

    async def run(self, receive: MemoryObjectReceiveStream[Any], send: MemoryObjectSendStream[Any]) -> None:
        async for item in receive:
            if isinstance(item, ChannelText) and item.channel is Channel.CONTENT:
                self.held += item.text
                last_space = max(self.held.rfind(" "), self.held.rfind("\n"))
                await self._release(send, last_space + 1)
            elif isinstance(item, ChunkEnd):
                await send.send(item)
            else:
                await self._release(send)
                await send.send(item)
        await self._release(send)


class SyncUppercaseReasoning:
    """A user sync stage that upper-cases reasoning text."""

    name = "shout"

    def feed(self, item: object) -> list[object]:
        if isinstance(item, ChannelText) and item.channel is Channel.REASONING:
            return [ChannelText(Channel.REASONING, item.text.upper())]
        return [item]

    def finish(self) -> list[object]:
        return []


def redacted_expectation(text: str) -> tuple[Any, ...]:
    full = expected(text)
    content = re.sub(rf"\b{SECRET}\b", MASK, full.content) if full.content else full.content
    return (content, full.reasoning_content, message_key(full)[2])


TEXT = (
    "<think>\nThe user asks about Paris; keep Paris in my reasoning.\n</think>\n\n"
    "Paris is sunny. I love Paris, Parisians and Paris!\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
)


@pytest.mark.parametrize(
    "runtime", [{}, {"prefetch": 0}, {"buffer_size": 0, "prefetch": 1}], ids=["default", "prefetch=0", "tight"]
)
async def test_an_async_redaction_stage_between_name_filter_and_framer_composes(runtime: dict[str, Any]) -> None:
    """A user async stage inserted before the framer redacts a word in content; reasoning and calls are untouched."""
    pipeline = Pipeline.for_model(**HQ, **runtime).insert_after("name_filter", "redact", AsyncRedactor)
    assert pipeline.names.index("redact") == pipeline.names.index("assembler") - 1
    for seed in range(10):
        deltas, _ = await collect_pipeline(pipeline, aiter_items(random_chunks(TEXT, seed, 5)))
        msg = accumulate(deltas)
        assert msg.content == "\n\n[REDACTED] is sunny. I love [REDACTED], Parisians and [REDACTED]!\n", f"seed={seed}"
        assert msg.reasoning_content == "\nThe user asks about Paris; keep Paris in my reasoning.\n"
        assert [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls] == [
            ("get_weather", {"city": "Paris"})
        ]


async def test_the_redaction_stage_on_generated_outputs() -> None:
    """On generated outputs, the redacted stream equals parse_complete with the word replaced in content only."""
    pipeline = Pipeline.for_model(**HQ).insert_after("name_filter", "redact", AsyncRedactor)
    for seed in range(20):
        text = hermes_qwen3_output(seed)
        deltas, _ = await collect_pipeline(pipeline, aiter_items(random_chunks(text, seed, 7)))
        msg = accumulate(deltas)
        assert message_key(msg) == redacted_expectation(text), f"seed={seed}"


async def test_a_user_sync_stage_composes() -> None:
    """A user sync stage (feed/finish) inserted after the reasoning splitter changes only what it is meant to."""
    pipeline = Pipeline.for_model(**HQ).insert_after("reasoning", "shout", SyncUppercaseReasoning)
    deltas, _ = await collect_pipeline(pipeline, aiter_items(random_chunks(TEXT, 3, 4)))
    want = parse_complete(TEXT, **HQ)
    got = accumulate(deltas)
    assert got.reasoning_content == (want.reasoning_content or "").upper()
    assert (got.content, message_key(got)[2]) == (want.content, message_key(want)[2])


async def test_sync_and_async_user_stages_together() -> None:
    """A sync and an async user stage in one chain both apply, and the metadata still arrives once."""
    pipeline = (
        Pipeline.for_model(**HQ)
        .insert_after("reasoning", "shout", SyncUppercaseReasoning)
        .insert_after("name_filter", "redact", AsyncRedactor)
    )
    chunks = [deltaflow.TokenChunk(text=c, logprobs=[float(k)]) for k, c in enumerate(random_chunks(TEXT, 1, 6))]
    chunks[-1] = deltaflow.TokenChunk(text=chunks[-1].text, logprobs=chunks[-1].logprobs, finish_reason="stop")
    deltas, _ = await collect_pipeline(pipeline, aiter_items(chunks))
    msg = accumulate(deltas)
    assert msg.reasoning_content is not None and msg.reasoning_content.isupper()
    assert msg.content is not None and SECRET + " " not in msg.content
    assert [lp for d in deltas for lp in (d.logprobs or [])] == [float(k) for k in range(len(chunks))]
    assert msg.finish_reason == "tool_calls"


async def test_a_call_delta_passes_an_async_stage_in_order() -> None:
    """Items an async stage forwards keep their order: content, then the call, then later content."""
    text = 'Before Paris <tool_call>{"name": "calc", "arguments": {"x": 1}}</tool_call> after Paris'
    pipeline = Pipeline.for_model(**HQ, enable_thinking=False).insert_after("name_filter", "redact", AsyncRedactor)
    deltas, _ = await collect_pipeline(pipeline, aiter_items(list(text)))
    kinds = ["call" if d.tool_calls else "content" for d in deltas if d.tool_calls or d.content]
    first_call = kinds.index("call")
    assert set(kinds[:first_call]) == {"content"} and kinds[-1] == "content"
    assert accumulate(deltas).content == "Before [REDACTED] " + " after [REDACTED]"


async def test_one_pipeline_serves_concurrent_streams_with_independent_state() -> None:
    """Several streams of one Pipeline (with a stateful async stage) run interleaved and each gets its own result."""
    pipeline = Pipeline.for_model(**HQ, buffer_size=0, prefetch=1).insert_after("name_filter", "redact", AsyncRedactor)
    texts = [hermes_qwen3_output(seed) for seed in range(40)]
    results: dict[int, list[DeltaMessage]] = {}

    async def one(k: int) -> None:
        chunks = random_chunks(texts[k], k, 3)

        async def slow() -> Any:
            for c in chunks:
                await anyio.lowlevel.checkpoint()  # interleave with the other streams
                yield c

        results[k], _ = await collect_pipeline(pipeline, slow())

    async with anyio.create_task_group() as tg:
        for k in range(len(texts)):
            tg.start_soon(one, k)
    for k, text in enumerate(texts):
        assert message_key(accumulate(results[k])) == redacted_expectation(text), f"stream {k}"


async def test_a_custom_pipeline_passed_to_stream_ignores_dialect_arguments() -> None:
    """deltaflow.stream(pipeline=...) runs that pipeline."""
    pipeline = Pipeline.for_model(**HQ).insert_after("name_filter", "redact", AsyncRedactor)
    async with deltaflow.stream(aiter_items([TEXT]), pipeline=pipeline) as deltas:
        got = [d async for d in deltas]
    assert MASK in (accumulate(got).content or "")
    assert key(got)[2] == message_key(parse_complete(TEXT, **HQ))[2]


async def test_an_async_stage_after_the_framer_sees_deltas() -> None:
    """An async stage appended after the framer receives DeltaMessages; usage is still reported."""

    class Tag:
        name = "tag"

        async def run(self, receive: MemoryObjectReceiveStream[Any], send: MemoryObjectSendStream[Any]) -> None:
            async for d in receive:
                assert isinstance(d, DeltaMessage)
                if d.content:
                    d = DeltaMessage(content=d.content.upper(), token_ids=d.token_ids, finish_reason=d.finish_reason)
                await send.send(d)

    pipeline = Pipeline.for_model(tool_parser="hermes").append("tag", Tag)
    chunks = [deltaflow.TokenChunk(token_ids=[k], text=c) for k, c in enumerate(["ab", "c", "d e"])]
    deltas, usage = await collect_pipeline(pipeline, aiter_items(chunks))
    assert accumulate(deltas).content == "ABCD E"
    assert usage.completion_tokens == 3
