"""Nemotron (NVIDIA): the ``nemotron`` tool dialect and the ``nemotron_v3`` reasoning dialect.

* ``nemotron`` (NVIDIA Nemotron-Nano v2, Llama-Nemotron; llama.cpp
  ``nemotron_nano_v2``; a declaration of the JSON envelope driver,
  ``parsers/drivers/json_envelope.py``, facts: shared/dialects.md section 14):
  ``<TOOLCALL>[...]</TOOLCALL>``, a JSON array of calls. No Nemotron tokenizer
  is in shared/tokenizers, so the opener, not known to be one token, is
  declared with every proper prefix (holding more is never wrong, only later).
  Nemotron-Nano v2 reasons with Qwen3's ``<think>`` (``qwen3``, :mod:`.qwen`).
* Reasoning ``nemotron_v3`` (NVIDIA Nemotron 3; checked against vLLM's
  reasoning parser of the same name and its tests, shared/corpus/vllm.jsonl):
  the prompt opens ``<think>``, so the output starts inside reasoning; a
  ``<think>`` the model writes itself is consumed; the first ``</think>`` ends
  reasoning, and an output without it is all reasoning.
  ``enable_thinking=False`` makes all of it content. Reasoning and content are
  kept verbatim. No tokenizer under shared/tokenizers: every proper prefix of
  each marker is declared (:mod:`._think`). Granite 4.2's
  ``granite_thinking_parser`` (:mod:`.granite`) is this protocol with the
  newlines after ``</think>`` dropped.
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.json_envelope import JsonEnvelopeFormat
from ..registry import register_reasoning_dialect
from ..spec import ReasoningDialect, Writing, all_prefixes
from ._think import THINK_END, THINK_PREFIXES, THINK_START

__all__ = ("NEMOTRON", "NEMOTRON_V3", "PRESETS")

NEMOTRON = declare(
    "nemotron",
    JsonEnvelopeFormat(open=("<TOOLCALL>",), close="</TOOLCALL>", args_fields=("arguments", "parameters"), array=True),
    token_prefixes=all_prefixes("<TOOLCALL>"),
    description='Nemotron: <TOOLCALL>[{"name", "arguments"}, ...]</TOOLCALL>',
    families=("NVIDIA-Nemotron-Nano-v2", "Llama-Nemotron"),
    writing=Writing(separator=", "),
)

NEMOTRON_V3 = register_reasoning_dialect(
    ReasoningDialect(
        name="nemotron_v3",
        start=THINK_START,
        end=THINK_END,
        starts_open=True,
        token_prefixes=THINK_PREFIXES,
        families=("NVIDIA-Nemotron-3-Nano-30B-A3B",),
    )
)

PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", None, "nemotron_v3"),
    ("nvidia/NVIDIA-Nemotron-Nano-9B-v2", "nemotron", "qwen3"),
)
