"""Mistral AI: the ``mistral`` tool dialect and the ``mistral`` reasoning dialect.

Facts (shared/dialects.md section 5):

* Tool calls: ``[TOOL_CALLS]`` then, depending on the tokenizer version, a
  JSON array of ``{"name", "arguments", "id"}`` (pre-v11),
  ``NAME[CALL_ID]ID[ARGS]{...}`` (v11) or ``NAME[ARGS]{...}`` (v13+), the
  marker repeated per call. The driver is :mod:`deltaflow.parsers.drivers.mistral`.
* Reasoning (v13+ reasoning models: Magistral-Small-2509, Ministral-3, ...):
  ``[THINK]...[/THINK]`` written by the model itself, not opened by the
  prompt, so output without ``[THINK]`` is plain content (vLLM's ``mistral``
  reasoning parser agrees). Older Magistral (2506/2507) wrote plain
  ``<think>...</think>``; serve those with ``deepseek_r1``-style parsers.
* Every marker (``[TOOL_CALLS]``, ``[ARGS]``, ``[CALL_ID]``, ``[THINK]``,
  ``[/THINK]``) is a control token: it never arrives split, so no prefix is
  held in ``chunking="tokens"`` mode. Checked against shared/tokenizers/mistral
  (tests/unit/parsers/test_mistral.py): in tekken v3 (Mistral-NeMo) and the
  SentencePiece v3 model (Mistral-7B-v0.3), ``[TOOL_CALLS]`` is one special id
  and text never encodes to a special id. ``[ARGS]``, ``[CALL_ID]`` and the
  think markers belong to later tokenizer versions that are not in
  shared/tokenizers; vLLM fetching them as control tokens is the evidence.
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.mistral import MistralFormat
from ..registry import register_reasoning_dialect
from ..spec import ReasoningDialect

__all__ = ("MISTRAL", "MISTRAL_REASONING", "PRESETS")

MISTRAL = declare(
    "mistral",
    MistralFormat(),
    lead_blanks=True,  # blanks before [TOOL_CALLS] are framing (SGLang strips them)
    token_prefixes=(),
    tokenizers=("mistral",),
    description="Mistral [TOOL_CALLS]: pre-v11 JSON array, v11 NAME[CALL_ID]ID[ARGS]{...}, v13+ NAME[ARGS]{...}",
    families=(
        "Mistral-7B-Instruct-v0.3",
        "Mixtral-8x7B/8x22B-Instruct",
        "Mistral-Nemo-Instruct-2407",
        "Mistral-Small-3.2-2506",
        "Magistral-Small-2509",
        "Devstral",
        "Ministral-3",
    ),
)

MISTRAL_REASONING = register_reasoning_dialect(
    ReasoningDialect(
        name="mistral",
        start="[THINK]",
        end="[/THINK]",
        starts_open=False,
        token_prefixes=(),
        tokenizers=(),  # [THINK]/[/THINK] are not in the v3 vocabularies of shared/tokenizers/mistral
        turn_markers=("[INST]", "[/INST]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "</s>"),
        families=("Magistral-Small-2509", "Magistral-Medium-2509", "Ministral-3 reasoning"),
    )
)

# Mistral (shared/dialects.md section 5)
PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("mistralai/Mistral-7B-Instruct-v0.3", "mistral", None),
    ("mistralai/Mistral-Nemo-Instruct-2407", "mistral", None),
    ("mistralai/Mistral-Small-3.2-24B-Instruct-2506", "mistral", None),
    ("mistralai/Magistral-Small-2509", "mistral", "mistral"),
    ("mistralai/Devstral-Small-2507", "mistral", None),
)
