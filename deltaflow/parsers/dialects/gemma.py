"""Gemma (Google): the ``gemma4`` tool dialect and the ``gemma4`` reasoning dialect.

* ``gemma4`` tool calls (vLLM ``gemma4`` tool parser, llama.cpp's Gemma 4
  handler and its tests, shared/corpus/llamacpp.jsonl, ``llamacpp:gemma4``):
  one call per block, blocks concatenated without separators,
  ``<|tool_call>call:NAME{key:value,...}<tool_call|>``, in Gemma 4's own
  serialization, not JSON (bare keys, ``<|"|>``-delimited raw strings); the
  driver and its rules are ``parsers/drivers/gemma4.py``. The block markers
  and ``<|"|>`` are single special tokens of the Gemma 4 vocabulary, so
  ``token_prefixes`` is empty (no Gemma 4 tokenizer is under
  shared/tokenizers to check it against; the vocabulary ids are the ones vLLM
  looks up by name).
* Reasoning ``gemma4`` (Gemma 4, llama.cpp ``gemma4``): ``<|channel>thought\\n...<channel|>``.
  The model opens the channel itself (reasoning does not start open); the
  ``thought`` label after ``<|channel>`` (with or without its newline) is
  dropped. The channel markers are special tokens that are never text
  (reentrant): a ``<|channel>`` later in the content opens another reasoning
  block, a doubled ``<|channel>`` is dropped, and a stray ``<channel|>`` in
  the content is dropped (as vLLM's streaming path and llama.cpp do). No
  Gemma 4 tokenizer is under shared/tokenizers, so every proper prefix of
  each channel marker is declared.
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.gemma4 import Gemma4Format
from ..registry import register_reasoning_dialect
from ..spec import ReasoningDialect, all_prefixes

__all__ = ("GEMMA4", "GEMMA4_END", "GEMMA4_REASONING", "GEMMA4_START", "PRESETS")

_FAMILIES = ("gemma-4-E2B-it", "gemma-4-E4B-it", "gemma-4-26B-A4B-it", "gemma-4-31B-it")

GEMMA4 = declare(
    "gemma4",
    Gemma4Format(),
    token_prefixes=(),
    tokenizers=(),
    description='Gemma 4: <|tool_call>call:NAME{key:<|"|>text<|"|>,n:1}<tool_call|> (bare keys, <|"|> strings)',
    families=_FAMILIES,
)

GEMMA4_START = "<|channel>"
GEMMA4_END = "<channel|>"

GEMMA4_REASONING = register_reasoning_dialect(
    ReasoningDialect(
        name="gemma4",
        start=GEMMA4_START,
        end=GEMMA4_END,
        # The chat template does not open the channel: the model writes <|channel>thought\n.
        starts_open=False,
        start_labels=("thought\n", "thought"),
        # The channel markers are special tokens (never text); no Gemma 4 tokenizer under
        # shared/tokenizers, so every prefix is declared.
        reentrant=True,
        token_prefixes=all_prefixes(GEMMA4_START, GEMMA4_END),
        families=_FAMILIES,
    )
)

# Gemma 4
PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("google/gemma-4-31B-it", "gemma4", "gemma4"),
    ("google/gemma-4-26B-A4B-it", "gemma4", "gemma4"),
)
