"""Hunyuan (Tencent): the ``hunyuan_a13b`` tool dialect and the ``hunyuan_a13b`` and ``hy_v3`` reasoning dialects.

* ``hunyuan_a13b`` tool calls (Hunyuan-A13B; a declaration of the JSON
  envelope driver, ``parsers/drivers/json_envelope.py``, facts:
  shared/dialects.md section 14): ``<tool_calls>[...]</tool_calls>``, a JSON
  array of calls; every marker is split text (section 14), so every proper
  prefix of the opener is declared.
* Reasoning ``hunyuan_a13b`` (checked against vLLM's reasoning parser of the
  same name and its tests, shared/corpus/vllm.jsonl):
  ``<think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>``
  with vLLM's newline-inclusive markers: start ``<think>`` with an optional
  ``\\n`` label, end ``\\n</think>``, content wrapped in ``<answer>\\n`` ...
  ``\\n</answer>`` (the ``\\n`` after ``</think>`` is blank before the opener,
  dropped with it). Reasoning does not start open (an output without
  ``<think>`` is content, as in vLLM). No tokenizer under shared/tokenizers:
  every proper prefix of each marker is declared.
* Reasoning ``hy_v3`` (Tencent Hunyuan HY-V3; vLLM's ``hy_v3``): the
  ``<think>`` grammar of the vLLM ``<think>`` parsers (the prompt opens
  ``<think>``; a ``<think>`` the model writes is consumed; the first
  ``</think>`` ends reasoning, an output without it is all reasoning), but the
  model thinks only when asked (vLLM reads ``reasoning_effort``; anything
  other than ``no_think`` turns thinking on, and none given means
  ``no_think``), so reasoning is split only with ``enable_thinking=True``.
  No tokenizer under shared/tokenizers: every proper prefix of each marker is
  declared (:mod:`._think`).
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.json_envelope import JsonEnvelopeFormat
from ..registry import register_reasoning_dialect
from ..spec import ReasoningDialect, Writing, all_prefixes
from ._think import THINK_END, THINK_PREFIXES, THINK_START

__all__ = ("HUNYUAN_A13B", "HUNYUAN_A13B_REASONING", "HUNYUAN_ANSWER", "HY_V3", "PRESETS")

HUNYUAN_A13B = declare(
    "hunyuan_a13b",
    JsonEnvelopeFormat(
        open=("<tool_calls>",), close="</tool_calls>", args_fields=("arguments", "parameters"), array=True
    ),
    token_prefixes=all_prefixes("<tool_calls>"),  # section 14: every Hunyuan marker is split text
    description='Hunyuan-A13B: <tool_calls>[{"name", "arguments"}, ...]</tool_calls>',
    families=("Hunyuan-A13B",),
    writing=Writing(separator=", "),
)

HUNYUAN_ANSWER = ("<answer>\n", "\n</answer>")

HUNYUAN_A13B_REASONING = register_reasoning_dialect(
    ReasoningDialect(
        name="hunyuan_a13b",
        # vLLM matches "<think>\n" and "\n</think>\n<answer>\n" as token sequences (not single tokens).
        start=THINK_START,
        end="\n" + THINK_END,
        starts_open=False,
        start_labels=("\n",),
        content_wrap=HUNYUAN_ANSWER,
        token_prefixes=all_prefixes(THINK_START, "\n" + THINK_END, *HUNYUAN_ANSWER),
        families=("Hunyuan-A13B",),
    )
)

HY_V3 = register_reasoning_dialect(
    ReasoningDialect(
        name="hy_v3",
        start=THINK_START,
        end=THINK_END,
        starts_open=True,
        token_prefixes=THINK_PREFIXES,
        families=("Hunyuan-HY-V3",),
        # vLLM's hy_v3 parser is the identity parser unless reasoning_effort asks for thinking.
        default_enabled=False,
    )
)

PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("tencent/Hunyuan-A13B-Instruct", "hunyuan_a13b", "hunyuan_a13b"),
)
