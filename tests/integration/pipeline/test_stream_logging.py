"""Observability: debug events for dropped calls and malformed blocks, bound to the stream's context."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import structlog
from stream_helpers import HQ, aiter_items, collect, hermes_qwen3_output
from structlog.contextvars import get_contextvars, merge_contextvars
from structlog.testing import capture_logs

import deltaflow
from deltaflow.testing import random_chunks

pytestmark = pytest.mark.anyio

DROPPED = 'Sure.<tool_call>\n{"name": "delete_all", "arguments": {"really": true}}\n</tool_call> Done.'
MALFORMED = 'Look: <tool_call>\n{"arguments": {"a": 1}}\n</tool_call> end.'


async def _run(text: str, chunk: int = 4, **options: Any) -> tuple[list[MutableMapping[str, Any]], str]:
    """Stream ``text`` in small chunks with contextvars merged into captured events; return them and the stream id."""
    with capture_logs(processors=[merge_contextvars]) as events:
        async with deltaflow.stream(aiter_items(random_chunks(text, 0, chunk)), **options) as deltas:
            async for _ in deltas:
                pass
    return events, deltas.stream_id


async def test_a_call_to_a_tool_not_offered_logs_tool_call_dropped() -> None:
    """A dropped call produces one debug "tool_call_dropped" event with its name, the stream id and the dialects."""
    events, stream_id = await _run("<think>\nhm\n</think>\n\n" + DROPPED, **HQ)
    dropped = [e for e in events if e["event"] == "tool_call_dropped"]
    assert len(dropped) == 1
    (e,) = dropped
    assert e["name"] == "delete_all"
    assert e["log_level"] == "debug"
    assert e["stream_id"] == stream_id
    assert (e["tool_parser"], e["reasoning_parser"]) == ("hermes", "qwen3")


async def test_a_malformed_block_logs_tool_block_malformed() -> None:
    """A block surfaced as content because it has no name produces a debug "tool_block_malformed" event with context."""
    events, stream_id = await _run(MALFORMED, enable_thinking=False, **HQ)
    bad = [e for e in events if e["event"] == "tool_block_malformed"]
    assert len(bad) == 1
    assert bad[0]["log_level"] == "debug"
    assert bad[0]["stream_id"] == stream_id
    assert bad[0]["tool_parser"] == "hermes"


async def test_a_clean_stream_logs_nothing() -> None:
    """A stream with only accepted calls logs no event at all (nothing per token or per chunk)."""
    text = '<think>\nok\n</think>\n\nHi <tool_call>\n{"name": "calc", "arguments": {"x": 1}}\n</tool_call>'
    events, _ = await _run(text, chunk=1, **HQ)
    assert events == []


async def test_concurrent_streams_log_under_their_own_ids() -> None:
    """Events of interleaved streams carry the id of the stream that produced them; ids are distinct."""
    ids: dict[str, str] = {}
    with capture_logs(processors=[merge_contextvars]) as events:

        async def one(label: str, text: str) -> None:
            async def slow() -> Any:
                for c in random_chunks(text, 1, 3):
                    await anyio.lowlevel.checkpoint()
                    yield c

            async with deltaflow.stream(slow(), enable_thinking=False, **HQ) as deltas:
                ids[label] = deltas.stream_id
                async for _ in deltas:
                    pass

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "dropped", DROPPED)
            tg.start_soon(one, "malformed", MALFORMED)
    assert ids["dropped"] != ids["malformed"]
    by_event = {e["event"]: e["stream_id"] for e in events}
    assert by_event == {"tool_call_dropped": ids["dropped"], "tool_block_malformed": ids["malformed"]}


async def test_the_stream_context_does_not_leak_out_of_the_block() -> None:
    """After the stream the caller's structlog context is as it was."""
    structlog.contextvars.bind_contextvars(request="r1")
    try:
        await collect(aiter_items([DROPPED]), **HQ)
        assert get_contextvars() == {"request": "r1"}
    finally:
        structlog.contextvars.unbind_contextvars("request")


async def test_a_key_the_caller_bound_too_is_the_streams_inside_and_the_callers_after() -> None:
    """A key both bind (the model) is the stream's during the block and the caller's own value after it."""
    structlog.contextvars.bind_contextvars(model="outer")
    try:
        events, stream_id = await _run(hermes_qwen3_output(0, calls=0) + DROPPED, model="Qwen/Qwen3-8B", **HQ)
        dropped = [e for e in events if e["event"] == "tool_call_dropped"]
        assert dropped and all(e["model"] == "Qwen/Qwen3-8B" and e["stream_id"] == stream_id for e in dropped)
        assert get_contextvars() == {"model": "outer"}
    finally:
        structlog.contextvars.unbind_contextvars("model")


async def test_events_keep_the_callers_context_too() -> None:
    """Context the caller bound (e.g. a request id) is on the pipeline's events next to the stream's own."""
    with structlog.contextvars.bound_contextvars(request_id="req-42"):
        events, stream_id = await _run(hermes_qwen3_output(0, calls=0) + DROPPED, **HQ)
    dropped = [e for e in events if e["event"] == "tool_call_dropped"]
    assert dropped and all(e["request_id"] == "req-42" and e["stream_id"] == stream_id for e in dropped)


async def test_each_dropped_call_logs_once() -> None:
    """Two calls to tools not offered give two "tool_call_dropped" events, in order."""
    second = DROPPED.replace("delete_all", "format_disk")
    events, _ = await _run(DROPPED + second, enable_thinking=False, **HQ)
    assert [e["name"] for e in events if e["event"] == "tool_call_dropped"] == ["delete_all", "format_disk"]


MALFORMED_BLOCKS = {
    "no name": "<tool_call>not json</tool_call> y",
    "arguments not an object": '<tool_call>{"name": "calc", "arguments": 5}</tool_call> x',
    "junk after the arguments": '<tool_call>{"name": "calc", "arguments": {"a": 1} junk</tool_call> x',
}


@pytest.mark.parametrize("text", list(MALFORMED_BLOCKS.values()), ids=list(MALFORMED_BLOCKS))
async def test_block_text_surfaced_as_content_is_logged(text: str) -> None:
    """Whenever text of a tool block ends up in content, a "tool_block_malformed" debug event says so."""
    events, stream_id = await _run(text, chunk=3, enable_thinking=False, **HQ)
    content = "".join(
        d.content or "" for d in deltaflow.ResponseParser(**HQ, enable_thinking=False).feed(text, final=True)
    )
    assert "</tool_call>" in content, "precondition: part of the block is surfaced as content"
    bad = [e for e in events if e["event"] == "tool_block_malformed"]
    assert len(bad) == 1, events
    assert bad[0]["stream_id"] == stream_id
