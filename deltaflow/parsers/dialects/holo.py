"""Holo (H Company): the ``holo2`` reasoning dialect.

* ``holo2`` (H Company Holo2; checked against vLLM's reasoning parser of the
  same name and its tests, shared/corpus/vllm.jsonl): the prompt opens
  ``<think>``, so the output starts inside reasoning; a ``<think>`` the model
  writes itself is consumed; the first ``</think>`` ends reasoning, and an
  output without it is all reasoning. ``enable_thinking=False`` makes all of
  it content. Reasoning and content are kept verbatim. Token prefixes: Holo2's
  Qwen3(-VL) vocabulary encodes ``<think>``/``</think>`` as single tokens
  (checked in tests/unit/parsers/test_more_reasoning.py), so none is declared.
"""

from __future__ import annotations

from ..registry import register_reasoning_dialect
from ..spec import ReasoningDialect
from ._think import THINK_END, THINK_START

__all__ = ("HOLO2", "PRESETS")

HOLO2 = register_reasoning_dialect(
    ReasoningDialect(
        name="holo2",
        start=THINK_START,
        end=THINK_END,
        starts_open=True,
        # Holo2 is built on Qwen3-VL: <think> 151667 and </think> 151668 are single tokens.
        token_prefixes=(),
        tokenizers=("qwen3",),
        turn_markers=("<|im_start|>", "<|im_end|>"),
        families=("Holo2-4B", "Holo2-8B", "Holo2-30B-A3B"),
    )
)

PRESETS: tuple[tuple[str, str | None, str | None], ...] = ()
