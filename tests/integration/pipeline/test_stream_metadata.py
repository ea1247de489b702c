"""Token ids, logprobs and the finish reason of each engine chunk reach the consumer exactly once; usage counts."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from stream_helpers import (
    HQ,
    TOOLS,
    aiter_items,
    collect,
    collect_pipeline,
    expected,
    fixed_id,
    groups,
    hermes_qwen3_output,
    key,
    load_hf,
    token_pieces,
)

from deltaflow import DeltaMessage, Pipeline, TokenChunk
from deltaflow.pipeline import SyncChain
from deltaflow.testing import message_key

pytestmark = pytest.mark.anyio

IM_END = 151645  # Qwen3 <|im_end|>: a special token, dropped from the text
THINK_END = 151668  # Qwen3 </think>: a single (non-special) added token
SEEDS = range(30)


def _chunks(ids: list[int], seed: int, finish_reason: str | None, max_size: int = 6) -> list[TokenChunk]:
    """Random groupings of ``ids`` into chunks with logprob ``i`` for token ``i``; the last carries the reason."""
    rnd = random.Random(seed)
    idx = groups(list(range(len(ids))), rnd, max_size)
    out = [TokenChunk(token_ids=[ids[i] for i in g], logprobs=[float(i) for i in g]) for g in idx]
    last = out[-1]
    out[-1] = TokenChunk(token_ids=last.token_ids, logprobs=last.logprobs, finish_reason=finish_reason)
    return out


def _flat_ids(deltas: list[DeltaMessage]) -> list[int]:
    return [i for d in deltas for i in (d.token_ids or [])]


def _flat_logprobs(deltas: list[DeltaMessage]) -> list[Any]:
    return [lp for d in deltas for lp in (d.logprobs or [])]


def _ids(shared: Path, text: str, *, im_end: bool = True) -> list[int]:
    ids: list[int] = load_hf(shared, "qwen3").encode(text, add_special_tokens=False).ids
    return [*ids, IM_END] if im_end else ids


async def test_ids_and_logprobs_reach_the_consumer_exactly_once_in_order(shared: Path) -> None:
    """For random groupings, the deltas' token_ids and logprobs concatenate to the source's, each exactly once."""
    tok = load_hf(shared, "qwen3")
    for seed in SEEDS:
        ids = _ids(shared, hermes_qwen3_output(seed))
        deltas, usage = await collect(aiter_items(_chunks(ids, seed, "stop")), tokenizer=tok, **HQ)
        assert _flat_ids(deltas) == ids, f"seed={seed}"
        assert _flat_logprobs(deltas) == [float(i) for i in range(len(ids))], f"seed={seed}"
        assert all(d.logprobs is None or len(d.logprobs) == len(d.token_ids or []) for d in deltas)
        assert usage.completion_tokens == len(ids)


async def test_finish_reason_appears_once_on_the_last_delta(shared: Path) -> None:
    """The finish reason is on the last delta and on no other."""
    tok = load_hf(shared, "qwen3")
    for seed in SEEDS:
        ids = _ids(shared, hermes_qwen3_output(seed))
        deltas, _ = await collect(aiter_items(_chunks(ids, seed, "length")), tokenizer=tok, **HQ)
        assert [k for k, d in enumerate(deltas) if d.finish_reason is not None] == [len(deltas) - 1], f"seed={seed}"
        assert deltas[-1].finish_reason == "length"


async def test_finish_reason_on_a_trailing_empty_chunk(shared: Path) -> None:
    """A finish reason that arrives on a chunk of its own (no ids) still lands once, on the last delta."""
    tok = load_hf(shared, "qwen3")
    text = hermes_qwen3_output(1, calls=0)
    ids = _ids(shared, text)
    chunks = [*_chunks(ids, 1, None), TokenChunk(finish_reason="stop")]
    deltas, _ = await collect(aiter_items(chunks), tokenizer=tok, **HQ)
    assert [d.finish_reason for d in deltas if d.finish_reason] == ["stop"]
    assert deltas[-1].finish_reason == "stop"
    assert _flat_ids(deltas) == ids


CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
UNOFFERED = '<tool_call>\n{"name": "delete_all", "arguments": {}}\n</tool_call>'


@pytest.mark.parametrize(
    ("body", "engine_reason", "want"),
    [
        pytest.param("Hi." + CALL, "stop", "tool_calls", id="stop+call"),
        pytest.param("Hi, no call.", "stop", "stop", id="stop-no-call"),
        pytest.param("Hi." + UNOFFERED, "stop", "stop", id="stop+dropped-call"),
        pytest.param("Hi." + CALL, "length", "length", id="length+call"),
        pytest.param("Hi." + CALL[:40], "length", "length", id="length+cut-call"),
    ],
)
async def test_finish_reason_mapping(shared: Path, body: str, engine_reason: str, want: str) -> None:
    """ "stop" becomes "tool_calls" only when an accepted call was emitted; other reasons pass unchanged."""
    tok = load_hf(shared, "qwen3")
    ids = _ids(shared, "<think>\nok\n</think>\n\n" + body)
    for seed in range(5):
        deltas, _ = await collect(aiter_items(_chunks(ids, seed, engine_reason)), tokenizer=tok, **HQ)
        assert deltas[-1].finish_reason == want
        assert sum(d.finish_reason is not None for d in deltas) == 1


def _sync_outputs(pipeline: Pipeline, chunks: list[TokenChunk]) -> list[list[DeltaMessage]]:
    """What each chunk produced when the same stages run synchronously, one chunk per run; last: finish()."""
    chain = SyncChain(pipeline.build())
    outs = [chain.run([c]) for c in chunks]
    outs.append(chain.finish())
    return outs


def _carriers(shared: Path, seed: int) -> tuple[list[TokenChunk], list[list[DeltaMessage]], list[int]]:
    """Chunks, the deltas each produced (sync, chunk by chunk), and per chunk the index of the delta with its ids."""
    tok = load_hf(shared, "qwen3")
    ids = _ids(shared, hermes_qwen3_output(seed))
    chunks = _chunks(ids, seed, "stop", max_size=4)
    pipeline = Pipeline.for_model(**HQ, tokenizer=tok, id_factory=fixed_id)
    per_chunk = _sync_outputs(pipeline, chunks)
    flat = [d for out in per_chunk for d in out]
    owner: list[int] = []  # which delta carries each token position
    for k, d in enumerate(flat):
        owner += [k] * len(d.token_ids or [])
    assert len(owner) == len(ids)
    carriers: list[int] = []
    pos = 0
    for c in chunks:
        n = len(c.token_ids)
        found = set(owner[pos : pos + n])
        assert len(found) == 1, f"seed={seed}: one chunk's ids split over deltas {found}"
        carriers.append(found.pop())
        logprobs = flat[carriers[-1]].logprobs
        assert logprobs is not None and float(pos) in logprobs
        pos += n
    return chunks, per_chunk, carriers


async def test_the_stream_equals_the_same_stages_run_chunk_by_chunk(shared: Path) -> None:
    """The async stream's deltas equal those of its stages run synchronously one chunk at a time."""
    tok = load_hf(shared, "qwen3")
    for seed in SEEDS:
        chunks, per_chunk, _ = _carriers(shared, seed)
        pipeline = Pipeline.for_model(**HQ, tokenizer=tok, id_factory=fixed_id)
        streamed, _ = await collect_pipeline(pipeline, aiter_items(chunks))
        assert streamed == [d for out in per_chunk for d in out], f"seed={seed}"


def test_chunk_metadata_is_on_its_last_delta_or_a_later_one(shared: Path) -> None:
    """A chunk's ids and logprobs ride on the last delta it produced, or on a later delta."""
    for seed in SEEDS:
        _, per_chunk, carriers = _carriers(shared, seed)
        start = 0  # index of the first delta the current chunk produced
        for out, carrier in zip(per_chunk, carriers, strict=False):  # per_chunk ends with finish()'s output
            if out:
                assert carrier == start + len(out) - 1, f"seed={seed}: not on the chunk's last delta"
            else:
                assert carrier >= start, f"seed={seed}: a silent chunk's metadata on an earlier delta"
            start += len(out)


def test_metadata_of_a_silent_chunk_is_on_the_next_delta_emitted(shared: Path) -> None:
    """A chunk that produced no delta has its ids on the next delta emitted (the issue's rule), not a later one."""
    for seed in SEEDS:
        chunks, per_chunk, carriers = _carriers(shared, seed)
        start = 0
        for k, (out, carrier) in enumerate(zip(per_chunk, carriers, strict=False)):  # and finish()'s output
            if not out:
                later = [d for o in per_chunk[k + 1 :] for d in o]
                assert carrier == start, (
                    f"seed={seed}: chunk {k} {chunks[k].token_ids} produced no delta; its ids are on delta "
                    f"{carrier}, but the next delta emitted is {start}: {later[0]!r}"
                )
            start += len(out)


def _reasoning_span_tokens(ids: list[int]) -> int:
    return ids.index(THINK_END) + 1


REASONING_CASES = [
    pytest.param("<think>\nLet me think about 東京 🌧.\n</think>\n\nIt rains." + CALL, id="think-open-in-output"),
    pytest.param("Prompt opened it; 晴れ.\n</think>\n\nSunny.", id="think-opened-by-prompt"),
    pytest.param("<think>\nI call " + CALL + " inside.\n</think>\n\nDone." + CALL, id="call-nested-in-reasoning"),
    pytest.param("<think>\n🦜</think>🦜 after", id="emoji-at-both-sides-of-the-marker"),
]


@pytest.mark.parametrize("text", REASONING_CASES)
async def test_usage_reasoning_tokens_count_the_raw_span_for_decoded_ids(shared: Path, text: str) -> None:
    """With ids decoded by the pipeline, reasoning_tokens is the number of tokens up to and including </think>."""
    tok = load_hf(shared, "qwen3")
    ids = _ids(shared, text)
    for seed in range(10):
        for max_size in (1, 3, 8):
            _, usage = await collect(aiter_items(_chunks(ids, seed, "stop", max_size)), tokenizer=tok, **HQ)
            assert usage.completion_tokens == len(ids)
            assert usage.reasoning_tokens == _reasoning_span_tokens(ids), f"seed={seed} max_size={max_size}"


@pytest.mark.parametrize("text", REASONING_CASES)
async def test_usage_reasoning_tokens_for_one_token_text_chunks(shared: Path, text: str) -> None:
    """With engine text, one token per chunk, reasoning_tokens is the same exact count."""
    tok = load_hf(shared, "qwen3")
    ids = _ids(shared, text)
    pieces = token_pieces(tok, ids)
    chunks = [TokenChunk(token_ids=[i], text=p) for i, p in zip(ids, pieces, strict=True)]
    _, usage = await collect(aiter_items(chunks), **HQ)
    assert usage.completion_tokens == len(ids)
    assert usage.reasoning_tokens == _reasoning_span_tokens(ids)


async def test_usage_reasoning_tokens_for_multi_token_text_chunks_with_a_tokenizer(shared: Path) -> None:
    """With engine text of several tokens per chunk and the tokenizer at hand, reasoning_tokens is still exact."""
    tok = load_hf(shared, "qwen3")
    for case in REASONING_CASES:
        (text,) = case.values
        assert isinstance(text, str)
        ids = _ids(shared, text)
        pieces = token_pieces(tok, ids)
        for seed in range(5):
            idx = groups(list(range(len(ids))), random.Random(seed), 4)
            chunks = [TokenChunk(token_ids=[ids[i] for i in g], text="".join(pieces[i] for i in g)) for g in idx]
            _, usage = await collect(aiter_items(chunks), tokenizer=tok, **HQ)
            assert usage.reasoning_tokens == _reasoning_span_tokens(ids), f"{case.id} seed={seed}: {idx}"


async def test_usage_without_reasoning(shared: Path) -> None:
    """Thinking disabled, or no reasoning parser: reasoning_tokens is 0 and completion_tokens counts every id."""
    tok = load_hf(shared, "qwen3")
    ids = _ids(shared, "<think>\nx\n</think>\n\nHello.")
    for options in ({**HQ, "enable_thinking": False}, {"tool_parser": "hermes", "tools": TOOLS}):
        _, usage = await collect(aiter_items(_chunks(ids, 0, "stop")), tokenizer=tok, **options)
        assert (usage.completion_tokens, usage.reasoning_tokens) == (len(ids), 0)


async def test_usage_when_reasoning_never_ends(shared: Path) -> None:
    """An output cut inside reasoning counts all its tokens as reasoning."""
    tok = load_hf(shared, "qwen3")
    ids = _ids(shared, "<think>\nStill thinking about 東京 and", im_end=False)
    _, usage = await collect(aiter_items(_chunks(ids, 3, "length")), tokenizer=tok, **HQ)
    assert (usage.completion_tokens, usage.reasoning_tokens) == (len(ids), len(ids))


async def test_special_token_ids_are_delivered_though_dropped_from_text(shared: Path) -> None:
    """<|im_end|> and <|endoftext|> add no text but their ids reach the consumer, once, in order."""
    tok = load_hf(shared, "qwen3")
    text = hermes_qwen3_output(5)
    ids = [*_ids(shared, text, im_end=False), IM_END, 151643]
    deltas, _ = await collect(aiter_items([[i] for i in ids]), tokenizer=tok, **HQ)
    assert _flat_ids(deltas) == ids
    visible = json.dumps([(d.content, d.reasoning_content) for d in deltas])
    assert "<|im_end|>" not in visible and "<|endoftext|>" not in visible
    assert key(deltas) == message_key(expected(text))
