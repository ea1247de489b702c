"""Public test helpers: chunkings, the stream-equals-complete check, the shared corpus and tokenizers.

Modelled on h11's ``tr()``: run a case whole, one character at a time, at
given split points, and assert that the streamed deltas rebuild what
:func:`deltaflow.parse_complete` returns.
"""

from __future__ import annotations

import gzip
import json
import os
import random
from collections.abc import Iterable, Iterator, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from ..messages import ChatMessage, DeltaMessage
from ..pipeline.sync import ResponseParser, accumulate, parse_complete

__all__ = (
    "check_chunkings",
    "check_tool_dialect",
    "PEER_NAME_ALIASES",
    "corpus_vectors",
    "vector_thinking",
    "feed_chunks",
    "load_tokenizer",
    "message_key",
    "random_chunks",
    "shared_dir",
    "shown_complete",
    "split_at",
)


def shown_complete(text: str, **parser_options: Any) -> ChatMessage:
    """What deltaflow's server shows of a complete model output by default: :func:`deltaflow.parse_complete`'s
    message less the blank separators the server drops (``create_app(blank_separators="drop")``, see
    :mod:`deltaflow.pipeline.separators`).

    Args:
        text: the whole output.
        **parser_options: :class:`~deltaflow.ResponseParser`'s arguments (``tool_parser``,
            ``reasoning_parser``, ``tools``, ...).
    """
    from ..pipeline.separators import BlankSeparators

    blanks = BlankSeparators()
    deltas = ResponseParser(**parser_options).feed(text, final=True)
    return accumulate([d for delta in deltas for d in blanks.feed(delta)] + blanks.finish())


def split_at(text: str, points: Iterable[int]) -> list[str]:
    """Split ``text`` at the given positions (duplicates and out-of-range points ignored)."""
    cuts = sorted({p for p in points if 0 < p < len(text)})
    out = []
    prev = 0
    for c in cuts:
        out.append(text[prev:c])
        prev = c
    out.append(text[prev:])
    return out


def random_chunks(text: str, seed: int, max_size: int = 8) -> list[str]:
    """Split ``text`` into chunks of 1..max_size characters, reproducibly from ``seed``."""
    rnd = random.Random(seed)
    out = []
    i = 0
    while i < len(text):
        k = rnd.randint(1, max_size)
        out.append(text[i : i + k])
        i += k
    return out or [""]


def feed_chunks(chunks: Sequence[str], **kwargs: Any) -> list[DeltaMessage]:
    """Feed ``chunks`` to a new :class:`~deltaflow.ResponseParser` built with ``kwargs``; return all deltas."""
    parser = ResponseParser(**kwargs)
    deltas: list[DeltaMessage] = []
    for c in chunks:
        deltas.extend(parser.feed(c))
    deltas.extend(parser.feed("", final=True))
    return deltas


def message_key(m: ChatMessage) -> tuple[Any, ...]:
    """What two messages must share to be equal (call ids are random, so they are left out)."""
    return (
        m.content,
        m.reasoning_content,
        tuple((c.type, c.function.name, c.function.arguments) for c in m.tool_calls),
    )


def check_chunkings(text: str, *, seeds: Iterable[int] = range(5), **kwargs: Any) -> ChatMessage:
    """Assert that whole, per-character and random chunkings all rebuild ``parse_complete``.

    Returns:
        The complete message.
    """
    chunking = kwargs.pop("chunking", "any")
    full = parse_complete(text, **kwargs)
    want = message_key(full)
    runs: list[tuple[str, list[str]]] = [("whole", [text]), ("chars", list(text) or [""])]
    runs += [(f"seed={s}", random_chunks(text, s)) for s in seeds]
    for label, chunks in runs:
        got = message_key(accumulate(feed_chunks(chunks, chunking=chunking, **kwargs)))
        assert got == want, f"{label} chunking of {text!r}: {got!r} != {want!r}"
    return full


def shared_dir() -> Path | None:
    """The ``shared/`` folder beside the checkout (or ``$DELTAFLOW_SHARED``), if present."""
    env = os.environ.get("DELTAFLOW_SHARED")
    candidates = [Path(env)] if env else []
    here = Path(__file__).resolve()
    candidates += [p / "shared" for p in here.parents[:4]] + [Path.cwd().parent / "shared"]
    for c in candidates:
        if (c / "corpus").is_dir() or (c / "tokenizers").is_dir():
            return c
    return None


PEER_NAME_ALIASES: dict[str, str] = {
    "llamacpp:gemma4": "gemma4",
    "llamacpp:command_r7b": "command_r7b",
    "sglang:lfm2": "lfm2",
    "llamacpp:lfm2": "lfm2",
    "llamacpp:ling3": "ling3",
    "sglang:gigachat3": "gigachat3",
    "llamacpp:gigachat3": "gigachat3",
    "llamacpp:gigachat3_1": "gigachat3",
    "llamacpp:apriel": "apriel",
    "llamacpp:nemotron_nano_v2": "nemotron",
    "llamacpp:firefunction_v2": "firefunction_v2",
    "llamacpp:apertus": "apertus",
    "sglang:kimi": "kimi_vl",
    "llamacpp:minicpm5": "minicpm5",
    "llamacpp:minimax_m3": "minimax_m3",
    "llamacpp:kimi_k3": "kimi_k3",
    "llamacpp:functionary_v3_1": "functionary_v3_1",
    "llamacpp:functionary_v3_2": "functionary_v3_2",
    "llamacpp:command_r_plus": "command_r_plus",
}
"""Peer-only parser names of the corpus (``sglang:X``, ``llamacpp:X``: no vLLM name exists)
mapped to the deltaflow parser that implements the same protocol. Only listed names are
mapped; a prefix is never stripped blindly (SGLang's ``kimi`` reasoning detector reads
Kimi-VL's ``◁think▷``, which ``kimi_k2`` does not)."""


def corpus_vectors(files: Iterable[str] = ("vllm", "sglang", "lmdeploy", "llamacpp")) -> Iterator[dict[str, Any]]:
    """Yield the conformance vectors of ``shared/corpus/<file>.jsonl`` (nothing when absent).

    ``tool_parser`` and ``reasoning_parser`` are given as deltaflow names
    (:data:`PEER_NAME_ALIASES`); the peer's own name is kept as ``peer_tool_parser``
    / ``peer_reasoning_parser`` when it differs.
    """
    root = shared_dir()
    if root is None:
        return
    for name in files:
        path = root / "corpus" / f"{name}.jsonl"
        if not path.exists():
            continue
        with path.open(encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield _our_names(json.loads(line))


def vector_thinking(request: dict[str, Any]) -> bool | None:
    """The ``enable_thinking`` a corpus vector's request asks for (None: the dialect's default).

    Read from ``enable_thinking``, then ``chat_template_kwargs.enable_thinking``, then
    ``chat_template_kwargs.reasoning_effort`` / ``reasoning_effort`` (any effort but
    ``no_think`` / ``none`` asks for thinking, as vLLM's ``hy_v3`` parser reads it).
    """
    kwargs = request.get("chat_template_kwargs") or {}
    for value in (request.get("enable_thinking"), kwargs.get("enable_thinking")):
        if value is not None:
            return bool(value)
    effort = kwargs.get("reasoning_effort", request.get("reasoning_effort"))
    if effort is None:
        return None
    return effort not in ("no_think", "none")


def _our_names(vector: dict[str, Any]) -> dict[str, Any]:
    for key in ("tool_parser", "reasoning_parser"):
        name = vector.get(key)
        if name in PEER_NAME_ALIASES:
            vector[f"peer_{key}"] = name
            vector[key] = PEER_NAME_ALIASES[name]
    return vector


@cache
def load_tokenizer(family: str) -> Any:
    """Load ``shared/tokenizers/<family>/tokenizer.json.gz`` with HF ``tokenizers`` (None when absent)."""
    root = shared_dir()
    if root is None:
        return None
    path = root / "tokenizers" / family / "tokenizer.json.gz"
    if not path.exists():
        return None
    from tokenizers import Tokenizer

    with gzip.open(path, "rt", encoding="utf-8") as f:
        return Tokenizer.from_str(f.read())


# The driver contract checker (deltaflow.testing.contract) uses the helpers above: imported after them.
from .contract import check_tool_dialect as check_tool_dialect  # noqa: E402
