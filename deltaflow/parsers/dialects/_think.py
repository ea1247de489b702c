"""The ``<think>`` markers and their token prefixes, shared by the families that reason in ``<think>``...``</think>``.

Convention (shared/dialects.md sections 0, 1 and 8a): a ``<think>`` protocol
that starts open starts inside reasoning unless ``enable_thinking=False``
(the convention of vLLM and LMDeploy: many templates open ``<think>`` in the
prompt, so the output carries only ``</think>``; a ``<think>`` the model
writes itself is consumed as the opening marker). An output that never
closes reasoning is all reasoning.

Token prefixes, checked against shared/tokenizers (tests/unit/parsers):
Qwen3 and DeepSeek-V3.1/R1-0528 encode ``<think>``/``</think>`` as single
tokens; Qwen2.5 (QwQ, R1-Distill-Qwen) and Llama 3 (R1-Distill-Llama) split
them as ``<th`` ``ink`` ``>`` and ``</`` ``think`` ``>``, and ``>`` may merge
with the following newlines, leaving ``</think`` at a token boundary
(:data:`SPLIT_THINK_PREFIXES`). A family with no tokenizer under
shared/tokenizers declares every proper prefix of each marker
(:data:`THINK_PREFIXES`), so ``chunking="tokens"`` holds exactly what
``"any"`` holds: always correct, at the cost of holding a few characters that
a real tokenizer might never leave at a boundary.
"""

from __future__ import annotations

from ..spec import all_prefixes

__all__ = ("SPLIT_THINK_PREFIXES", "THINK_END", "THINK_PREFIXES", "THINK_START")

THINK_START = "<think>"
THINK_END = "</think>"

SPLIT_THINK_PREFIXES = ("<", "<th", "<think", "</", "</think")
"""The prefixes a Qwen2.5 or Llama 3 BPE leaves at a token boundary (``<th`` ``ink`` ``>``, ``</`` ``think`` ``>``)."""

THINK_PREFIXES = all_prefixes(THINK_START, THINK_END)
"""Every proper prefix of both markers: for families without a tokenizer to check against."""
