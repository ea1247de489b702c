"""OpenAI Responses on a real server with the official openai SDK: incomplete responses and reasoning summaries."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import pytest
from conftest_server import start_server

from deltaflow import TokenChunk
from deltaflow.server import EngineRequest, create_app

REASONING = "Let me think about it. "
ANSWER = "Hello world"


def _chunks(finish: str) -> list[TokenChunk]:
    """Reasoning, then an answer the engine stops inside with ``finish``."""
    return [
        TokenChunk(text="<think>Let me think "),
        TokenChunk(text="about it. </think>"),
        TokenChunk(text="Hello "),
        TokenChunk(text="world", finish_reason=finish),
    ]


async def engine(request: EngineRequest) -> AsyncIterator[Any]:
    """Finishes with the finish reason the request's ``metadata.finish`` names (default ``stop``)."""
    finish = (request.body.get("metadata") or {}).get("finish", "stop")
    for chunk in _chunks(finish):
        yield chunk


@pytest.fixture(scope="module")
def oai() -> Iterator[openai.OpenAI]:
    """An openai client for a server whose engine function stops where the request says."""
    server, thread, base = start_server(create_app(engine, reasoning_parser="qwen3", model="m", heartbeat=5.0))
    try:
        with openai.OpenAI(base_url=base + "/v1", api_key="t", max_retries=0) as client:
            yield client
    finally:
        server.should_exit = True
        thread.join(10)


def _final_or_none(stream: Any) -> Any:
    """``get_final_response()``; None when the SDK only finalizes on ``response.completed``.

    openai-python up to at least 3.57 raises "Didn't receive a `response.completed` event" after a
    ``response.incomplete`` (openai/openai-python#3538 proposes the fix); the event itself carries
    the whole response object, which the tests check instead.
    """
    try:
        return stream.get_final_response()
    except RuntimeError as exc:
        assert "response.completed" in str(exc)
        return None


@pytest.mark.parametrize(("finish", "reason"), [("length", "max_output_tokens"), ("content_filter", "content_filter")])
def test_a_cut_response_streams_response_incomplete(oai: openai.OpenAI, finish: str, reason: str) -> None:
    """A length / content_filter finish ends with response.incomplete, status incomplete and the reason; never completed."""
    with oai.responses.stream(model="m", input="go", metadata={"finish": finish}) as stream:
        events = list(stream)
        final = _final_or_none(stream)
    types = [e.type for e in events]
    assert "response.completed" not in types
    assert types[-1] == "response.incomplete"
    response = events[-1].response
    assert response.status == "incomplete"
    assert response.incomplete_details is not None and response.incomplete_details.reason == reason
    assert response.output_text == ANSWER
    statuses = {item.type: item.status for item in response.output}
    assert statuses == {"reasoning": "completed", "message": "incomplete"}  # the cut fell inside the message
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [i.status for i in done] == ["completed", "incomplete"]
    if final is not None:
        assert final.status == "incomplete"


def test_a_finished_response_still_streams_response_completed(oai: openai.OpenAI) -> None:
    """A stop finish is response.completed with status completed, every item completed and no incomplete_details."""
    with oai.responses.stream(model="m", input="go") as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert events[-1].type == "response.completed" and "response.incomplete" not in [e.type for e in events]
    assert final.status == "completed" and final.incomplete_details is None
    assert [i.status for i in final.output] == ["completed", "completed"]


@pytest.mark.parametrize(("finish", "reason"), [("length", "max_output_tokens"), ("content_filter", "content_filter"), ("stop", None)])
def test_non_streaming_body_has_the_same_status(oai: openai.OpenAI, finish: str, reason: str) -> None:
    """responses.create(stream=False): status, incomplete_details and item statuses as in the stream."""
    r = oai.responses.create(model="m", input="go", metadata={"finish": finish})
    assert r.status == ("completed" if reason is None else "incomplete")
    assert (r.incomplete_details.reason if r.incomplete_details else None) == reason
    assert r.output_text == ANSWER
    assert r.output[-1].status == ("completed" if reason is None else "incomplete")


@pytest.mark.parametrize("mode", ["auto", "concise", "detailed"])
def test_reasoning_summary_parts_carry_the_reasoning(oai: openai.OpenAI, mode: str) -> None:
    """With reasoning.summary the reasoning also streams as summary part 0, and the item's summary holds it."""
    with oai.responses.stream(model="m", input="go", reasoning={"summary": mode}) as stream:
        events = list(stream)
        final = stream.get_final_response()
    by_type: dict[str, list[Any]] = {}
    for e in events:
        by_type.setdefault(e.type, []).append(e)
    (added,) = by_type["response.reasoning_summary_part.added"]
    assert added.summary_index == 0 and added.part.type == "summary_text" and added.part.text == ""
    deltas = by_type["response.reasoning_summary_text.delta"]
    assert [d.delta for d in deltas] == [d.delta for d in by_type["response.reasoning_text.delta"]]
    assert {d.summary_index for d in deltas} == {0} and {d.item_id for d in deltas} == {added.item_id}
    assert "".join(d.delta for d in deltas) == REASONING
    (text_done,) = by_type["response.reasoning_summary_text.done"]
    (part_done,) = by_type["response.reasoning_summary_part.done"]
    assert text_done.text == REASONING and part_done.part.text == REASONING and part_done.summary_index == 0
    order = [e.type for e in events if e.type.startswith("response.reasoning_summary")]
    assert order[0].endswith("part.added") and order[-2:] == [
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
    ]
    reasoning = next(i for i in final.output if i.type == "reasoning")
    assert [(s.type, s.text) for s in reasoning.summary] == [("summary_text", REASONING)]
    assert [c.text for c in reasoning.content or []] == [REASONING]  # reasoning_text stays


def test_without_summary_request_no_summary_is_sent(oai: openai.OpenAI) -> None:
    """Without reasoning.summary (or with an unknown mode) the item's summary stays empty and no summary event is sent."""
    for extra in ({}, {"reasoning": {"effort": "low"}}):
        with oai.responses.stream(model="m", input="go", **extra) as stream:
            events = list(stream)
            final = stream.get_final_response()
        assert not [e for e in events if "summary" in e.type]
        assert next(i for i in final.output if i.type == "reasoning").summary == []


def test_non_streaming_summary_and_reasoning_field_validation(oai: openai.OpenAI) -> None:
    """The non-streaming body carries the summary too; a 'reasoning' that is not an object is a 400."""
    r = oai.responses.create(model="m", input="go", reasoning={"summary": "auto"})
    item = next(i for i in r.output if i.type == "reasoning")
    assert [s.text for s in item.summary] == [REASONING] and [c.text for c in item.content or []] == [REASONING]
    with pytest.raises(openai.BadRequestError, match="'reasoning' must be an object"):
        oai.responses.create(model="m", input="go", extra_body={"reasoning": "auto"})
