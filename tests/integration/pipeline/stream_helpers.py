"""Helpers for the async pipeline tests: generated hermes/qwen3 outputs, sources, tokenizers, collection.

Everything here is deterministic (seeded ``random.Random``) and uses real
parts only: real tokenizers from ``shared/tokenizers``, real anyio streams.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import AsyncIterator, Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import deltaflow
from deltaflow import ChatMessage, DeltaMessage, Pipeline, accumulate, parse_complete
from deltaflow.stages.assembler import Usage
from deltaflow.testing import load_tokenizer, message_key

T = TypeVar("T")

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
    {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}},
]
OFFERED = ("get_weather", "search", "calc")
NOT_OFFERED = ("delete_all",)

#: The dialect options every generated output is parsed with.
HQ: dict[str, Any] = {"tool_parser": "hermes", "reasoning_parser": "qwen3", "tools": TOOLS}

# NFC text only: the Qwen3 tokenizer normalizes to NFC, so ids decode back to the same text.
WORDS = (
    "the",
    "weather",
    "in",
    "Paris",
    "東京",
    "は",
    "晴れ",
    "🌧",
    "🦜",
    "naïve",
    "Ünïcödé",
    "x<y",
    "a{b}",
    "50%",
    '"quoted"',
    "back\\slash",
    "tab\there",
    "</",
    "<tool",
    "{",
    "}",
    "龘",
    "𝔘",
    "done.",
)


def _words(rnd: random.Random, lo: int, hi: int) -> str:
    return " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(lo, hi)))


def _args(rnd: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {"city": rnd.choice(["Paris", "東京", "São Paulo", 'Quote"d', "🦜-ville"])}
    if rnd.random() < 0.5:
        out["unit"] = rnd.choice(["celsius", "fahrenheit"])
    if rnd.random() < 0.3:
        out["nested"] = {"list": [1, 2.5, None, True, "s"], "empty": {}}
    return out


def hermes_qwen3_output(seed: int, *, calls: int | None = None) -> str:
    """A generated Qwen3 output (hermes tool calls): reasoning, content, calls (offered, not offered, malformed)."""
    rnd = random.Random(seed)
    parts: list[str] = []
    if rnd.random() < 0.5:
        parts.append("<think>\n")
    parts.append(_words(rnd, 1, 12))
    if rnd.random() < 0.15:  # a call written inside the reasoning
        body = json.dumps({"name": "search", "arguments": {"q": _words(rnd, 1, 3)}}, ensure_ascii=False)
        parts.append(f" <tool_call>\n{body}\n</tool_call> ")
    parts.append("\n</think>\n\n")
    if rnd.random() < 0.8:
        parts.append(_words(rnd, 1, 15))
    n = rnd.randint(0, 3) if calls is None else calls
    for _ in range(n):
        r = rnd.random()
        if r < 0.1:
            parts.append('\n<tool_call>\n{"arguments": {"a": 1}}\n</tool_call>')  # malformed: no name
            continue
        name = rnd.choice(NOT_OFFERED) if r < 0.2 else rnd.choice(OFFERED)
        body = json.dumps({"name": name, "arguments": _args(rnd)}, ensure_ascii=False)
        parts.append(f"\n<tool_call>\n{body}\n</tool_call>")
    return "".join(parts)


def expected(text: str, **options: Any) -> ChatMessage:
    """The complete message of ``text`` (the sync oracle) with the default hermes/qwen3 options."""
    return parse_complete(text, **(options or HQ))


async def aiter_items(items: Iterable[T]) -> AsyncIterator[T]:
    """An async generator over ``items`` (no checkpoints of its own: a fast engine)."""
    for item in items:
        yield item


async def collect(source: Any, **kwargs: Any) -> tuple[list[DeltaMessage], Usage]:
    """Run ``deltaflow.stream(source, **kwargs)`` to the end; return the deltas and the usage."""
    async with deltaflow.stream(source, **kwargs) as deltas:
        out = [d async for d in deltas]
    return out, deltas.usage


async def collect_pipeline(pipeline: Pipeline, source: Any) -> tuple[list[DeltaMessage], Usage]:
    """Run ``pipeline.open(source)`` to the end; return the deltas and the usage."""
    async with pipeline.open(source) as deltas:
        out = [d async for d in deltas]
    return out, deltas.usage


def key(deltas: Sequence[DeltaMessage]) -> tuple[Any, ...]:
    """The message key (content, reasoning, calls) the deltas rebuild."""
    return message_key(accumulate(deltas))


def fixed_id() -> str:
    """A constant call id, so that delta lists of two runs compare equal."""
    return "call_fixed"


def groups(seq: Sequence[T], rnd: random.Random, max_size: int) -> list[list[T]]:
    """Split ``seq`` into consecutive groups of 1..max_size items."""
    out: list[list[T]] = []
    i = 0
    while i < len(seq):
        k = rnd.randint(1, max_size)
        out.append(list(seq[i : i + k]))
        i += k
    return out


def token_pieces(tok: Any, ids: Sequence[int]) -> list[str]:
    """The text each token adds, as an engine that detokenizes reports it ("" while a character is incomplete)."""
    from tokenizers.decoders import DecodeStream

    ds = DecodeStream(skip_special_tokens=False)
    return [ds.step(tok, i) or "" for i in ids]


def load_hf(shared: Path, family: str) -> Any:
    """``shared/tokenizers/<family>/tokenizer.json.gz`` loaded with HF tokenizers (cached per session)."""
    tok = load_tokenizer(family)
    assert tok is not None, f"{shared}/tokenizers/{family}/tokenizer.json.gz is missing"
    return tok


CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


@cache
def load_o200k_harmony(shared: Path) -> Any:
    """o200k_harmony from shared/tokenizers/gpt-oss, offline (the tokenizers README recipe)."""
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    d = shared / "tokenizers" / "gpt-oss"
    meta = json.loads((d / "o200k_harmony.json").read_text(encoding="utf-8"))
    ranks = load_tiktoken_bpe(os.fspath(d / "o200k_base.tiktoken"), expected_hash=O200K_SHA256)
    return tiktoken.Encoding(
        "o200k_harmony", pat_str=meta["pat_str"], mergeable_ranks=ranks, special_tokens=meta["special_tokens"]
    )


@cache
def load_cl100k_hermes_surrogate(shared: Path) -> Any:
    """cl100k ranks with the hermes/qwen3 markers as tiktoken special tokens (the README's surrogate recipe).

    The markers get ids above cl100k's range; ``<|endoftext|>`` keeps its cl100k id.
    """
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    meta = json.loads((shared / "tokenizers" / "gpt-oss" / "o200k_harmony.json").read_text(encoding="utf-8"))
    ranks = load_tiktoken_bpe(
        os.fspath(shared / "tokenizers" / "cl100k" / "cl100k_base.tiktoken"), expected_hash=CL100K_SHA256
    )
    special = {
        "<|endoftext|>": 100257,
        "<think>": 100300,
        "</think>": 100301,
        "<tool_call>": 100302,
        "</tool_call>": 100303,
    }
    return tiktoken.Encoding("cl100k-hermes", pat_str=meta["pat_str"], mergeable_ranks=ranks, special_tokens=special)
