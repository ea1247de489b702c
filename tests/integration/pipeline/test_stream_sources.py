"""deltaflow.stream over every accepted source kind rebuilds parse_complete; runtime options never change the result."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from stream_helpers import (
    HQ,
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

from deltaflow import DeltaMessage, Pipeline, ResponseParser, TokenChunk, accumulate
from deltaflow.testing import message_key, random_chunks

pytestmark = pytest.mark.anyio

SEEDS = range(24)


def _sources(tok: Any, text: str, seed: int) -> dict[str, tuple[list[Any], Any]]:
    """Each source kind for ``text``: (items, tokenizer to pass)."""
    rnd = random.Random(seed)
    ids = tok.encode(text, add_special_tokens=False).ids
    pieces = token_pieces(tok, ids)
    grouped = groups(list(range(len(ids))), rnd, 5)
    with_text = [
        TokenChunk(token_ids=[ids[i] for i in g], text="".join(pieces[i] for i in g), logprobs=[float(i) for i in g])
        for g in grouped
    ]
    without_text = [TokenChunk(token_ids=[ids[i] for i in g], logprobs=[-float(i) for i in g]) for g in grouped]
    # Id chunks and plain text alternating: an id chunk that decodes to a held marker prefix is silent,
    # and its ids and logprobs must still reach the next delta when that delta comes from a text item.
    mixed = [
        without_text[k] if k % 2 == 0 else "".join(pieces[i] for i in g) for k, g in enumerate(grouped)
    ]
    return {
        "str": (random_chunks(text, seed, 8), None),
        "int": (list(ids), tok),
        "list[int]": ([[ids[i] for i in g] for g in grouped], tok),
        "tuple[int]": ([tuple(ids[i] for i in g) for g in grouped], tok),
        "TokenChunk(text)": (with_text, None),
        "TokenChunk(text)+tokenizer": (with_text, tok),
        "TokenChunk(ids)": (without_text, tok),
        "mixed": (mixed, tok),
    }


# "mixed" is left out here: a text item right after an id chunk that ends inside a multi-byte character
# is not a well-formed source (the decoder still holds that character's first bytes).
KINDS = ["str", "int", "list[int]", "tuple[int]", "TokenChunk(text)", "TokenChunk(text)+tokenizer", "TokenChunk(ids)"]


@pytest.mark.parametrize("kind", KINDS)
async def test_every_source_kind_rebuilds_parse_complete(shared: Path, kind: str) -> None:
    """Streaming a generated hermes/qwen3 output from any source kind rebuilds what parse_complete returns."""
    tok = load_hf(shared, "qwen3")
    for seed in SEEDS:
        text = hermes_qwen3_output(seed)
        items, tokenizer = _sources(tok, text, seed)[kind]
        deltas, _ = await collect(aiter_items(items), tokenizer=tokenizer, **HQ)
        assert key(deltas) == message_key(expected(text)), f"seed={seed} kind={kind}"


@pytest.mark.parametrize("kind", ["str", "TokenChunk(ids)", "TokenChunk(text)"])
async def test_finish_reason_of_the_last_chunk_reaches_the_rebuilt_message(shared: Path, kind: str) -> None:
    """The engine's "stop" on its last chunk becomes "tool_calls" exactly when an offered call was emitted."""
    tok = load_hf(shared, "qwen3")
    for seed in SEEDS:
        text = hermes_qwen3_output(seed)
        items, tokenizer = _sources(tok, text, seed)[kind]
        items = [*items, TokenChunk(finish_reason="stop")]
        deltas, _ = await collect(aiter_items(items), tokenizer=tokenizer, **HQ)
        want = "tool_calls" if expected(text).tool_calls else "stop"
        assert accumulate(deltas).finish_reason == want, f"seed={seed}"
        assert [d.finish_reason for d in deltas if d.finish_reason is not None] == [want]


OPTIONS = [
    pytest.param({"prefetch": 0}, id="prefetch=0"),
    pytest.param({"prefetch": 0, "buffer_size": 0}, id="prefetch=0,buffer=0"),
    pytest.param({"prefetch": 1, "buffer_size": 0}, id="prefetch=1,buffer=0"),
    pytest.param({"prefetch": 3, "buffer_size": 1, "max_batch": 2}, id="prefetch=3,buffer=1,batch=2"),
    pytest.param({"prefetch": 64, "buffer_size": 64, "max_batch": 1}, id="prefetch=64,buffer=64,batch=1"),
    pytest.param({"prefetch": 256, "buffer_size": 2, "max_batch": 1000}, id="prefetch=256,buffer=2,batch=1000"),
]


@pytest.mark.parametrize("options", OPTIONS)
async def test_runtime_options_give_the_same_deltas(shared: Path, options: dict[str, Any]) -> None:
    """prefetch, buffer_size and max_batch change scheduling only: the delta list equals the default run's."""
    tok = load_hf(shared, "qwen3")
    for seed in range(12):
        text = hermes_qwen3_output(seed)
        for kind in ("str", "TokenChunk(ids)", "mixed"):
            items, tokenizer = _sources(tok, text, seed)[kind]
            items = [*items, TokenChunk(finish_reason="stop")]
            base = Pipeline.for_model(**HQ, tokenizer=tokenizer, id_factory=fixed_id)
            other = Pipeline.for_model(**HQ, tokenizer=tokenizer, id_factory=fixed_id, **options)
            want, want_usage = await collect_pipeline(base, aiter_items(items))
            got, got_usage = await collect_pipeline(other, aiter_items(items))
            assert got == want, f"seed={seed} kind={kind}"
            assert got_usage == want_usage


def _sync_deltas(chunks: list[str], finish_reason: str, **options: Any) -> list[DeltaMessage]:
    parser = ResponseParser(**options)
    out: list[DeltaMessage] = []
    for c in chunks:
        out += parser.feed(c)
    out += parser.feed("", final=True, finish_reason=finish_reason)
    return out


@pytest.mark.parametrize(
    "options",
    [
        pytest.param(HQ, id="hermes+qwen3+tools"),
        pytest.param({"tool_parser": "hermes"}, id="hermes"),
        pytest.param({"reasoning_parser": "qwen3"}, id="qwen3"),
        pytest.param({**HQ, "enable_thinking": False}, id="thinking-off"),
        pytest.param({}, id="no-parsers"),
    ],
)
async def test_sync_response_parser_equals_async_stream(options: dict[str, Any]) -> None:
    """The sync ResponseParser and the async stream give the identical delta list for the same text chunks."""
    make: Callable[[], str] = fixed_id
    for seed in SEEDS:
        text = hermes_qwen3_output(seed)
        chunks = random_chunks(text, seed, 6)
        want = _sync_deltas(chunks, "stop", id_factory=make, **options)
        pipeline = Pipeline.for_model(**options, id_factory=make)
        got, _ = await collect_pipeline(pipeline, aiter_items([*chunks, TokenChunk(finish_reason="stop")]))
        assert got == want, f"seed={seed}"


async def test_an_empty_source_gives_no_delta() -> None:
    """A source that yields nothing ends the stream with no delta and zero usage."""
    deltas, usage = await collect(aiter_items([]), **HQ)
    assert deltas == []
    assert (usage.completion_tokens, usage.reasoning_tokens) == (0, 0)


async def test_a_source_of_only_a_finish_reason_gives_one_empty_final_delta() -> None:
    """A chunk carrying only a finish reason still reaches the consumer, as one empty delta."""
    deltas, _ = await collect(aiter_items([TokenChunk(finish_reason="stop")]), **HQ)
    assert deltas == [DeltaMessage(finish_reason="stop")]


async def test_empty_text_chunks_carry_metadata_to_the_next_delta() -> None:
    """Chunks with ids and logprobs but empty text (an engine mid-character) lose nothing."""
    chunks = [
        TokenChunk(token_ids=[1], text="", logprobs=[-1.0]),
        TokenChunk(token_ids=[2], text="", logprobs=[-2.0]),
        TokenChunk(token_ids=[3], text="🦜 hi", logprobs=[-3.0], finish_reason="stop"),
    ]
    deltas, usage = await collect(aiter_items(chunks), tool_parser="hermes")
    assert deltas[0] == DeltaMessage(content="🦜 hi", token_ids=[1, 2, 3], logprobs=[-1.0, -2.0, -3.0])
    assert [d.finish_reason for d in deltas] == [None] * (len(deltas) - 1) + ["stop"]
    assert accumulate(deltas).content == "🦜 hi"
    assert usage.completion_tokens == 3


async def test_a_text_source_parses_the_same_whether_or_not_a_tokenizer_is_given(shared: Path) -> None:
    """Passing tokenizer= does not change how text chunks (split anywhere) are parsed: they are not decoded ids."""
    tok = load_hf(shared, "qwen3")
    for seed in range(12):
        text = hermes_qwen3_output(seed)
        chunks = random_chunks(text, seed, 8)
        without, _ = await collect(aiter_items(chunks), **HQ)
        with_tok, _ = await collect(aiter_items(chunks), tokenizer=tok, **HQ)
        assert key(without) == message_key(expected(text))
        assert key(with_tok) == key(without), f"seed={seed}: {chunks!r}"
