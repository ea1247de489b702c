"""OLMo (Allen AI): the ``olmo3`` tool dialect and the ``olmo3`` reasoning dialect.

* ``olmo3`` (OLMo 3; shared/dialects.md section 14 and the corpus vectors; the
  pythonic driver, ``parsers/drivers/pythonic.py``): newline-separated
  pythonic calls without list brackets between ``<function_calls>`` and
  ``</function_calls>``; JSON ``true``/``false``/``null`` are accepted as
  values (vLLM). The opener is text in the cl100k-based OLMo vocabulary
  (``<`` ``function`` ``_calls`` ``>``, checked with shared/tokenizers/cl100k),
  so its prefixes are declared.
* Reasoning ``olmo3`` (OLMo 3 Think; checked against vLLM's ``olmo3``
  reasoning parser and its tests, shared/corpus/vllm.jsonl): the prompt opens
  ``<think>``, so the output starts inside reasoning; a ``<think>`` the model
  writes itself is consumed; the first ``</think>`` ends reasoning, and an
  output without it is all reasoning. ``enable_thinking=False`` makes all of
  it content. Reasoning and content are kept verbatim. The family has no
  tokenizer under shared/tokenizers for the reasoning markers, so every proper
  prefix of each marker is declared (:mod:`._think`).
"""

from __future__ import annotations

from ..._core.pyliteral import lenient_literal_to_json
from ..declare import declare
from ..drivers.pythonic import PythonicFormat
from ..registry import register_reasoning_dialect
from ..spec import ReasoningDialect
from ._think import THINK_END, THINK_PREFIXES, THINK_START

__all__ = ("OLMO3", "OLMO3_END", "OLMO3_REASONING", "OLMO3_START", "PRESETS")

OLMO3_START = "<function_calls>"
"""OLMo 3's tool block opener (text)."""
OLMO3_END = "</function_calls>"
"""OLMo 3's tool block closer (text)."""

OLMO3 = declare(
    "olmo3",
    PythonicFormat(start=OLMO3_START, end=OLMO3_END, bracketed=False, convert=lenient_literal_to_json),
    # cl100k (OLMo's base vocabulary): '<' 'function' '_calls' '>' (tests check it).
    token_prefixes=("<", "<function", "<function_calls"),
    tokenizers=("cl100k",),
    description="OLMo 3: <function_calls>f(a=1)\\ng()</function_calls> (newline-separated pythonic calls)",
    families=("OLMo-3-7B-Instruct", "OLMo-3-32B-Think", "OLMo-3.1"),
)

OLMO3_REASONING = register_reasoning_dialect(
    ReasoningDialect(
        name="olmo3",
        start=THINK_START,
        end=THINK_END,
        starts_open=True,
        token_prefixes=THINK_PREFIXES,
        families=("Olmo-3-7B-Think", "Olmo-3-32B-Think"),
    )
)

# OLMo 3 Instruct and Think (shared/dialects.md section 14)
PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("allenai/Olmo-3-7B-Instruct", "olmo3", None),
    ("allenai/Olmo-3-7B-Think", "olmo3", "olmo3"),
    ("allenai/Olmo-3-32B-Think", "olmo3", "olmo3"),
)
