"""GigaChat (Sber): the ``gigachat3`` tool dialect.

* ``gigachat3`` (GigaChat 3 / 3.1; SGLang and llama.cpp ``gigachat3``,
  llama.cpp ``gigachat3_1``; a declaration of the JSON envelope driver,
  ``parsers/drivers/json_envelope.py``, facts: shared/dialects.md section 14):
  ``<|message_sep|>\\n\\nfunction call<|role_sep|>\\n{...}`` (3) or
  ``<|function_call|>{...}`` (3.1), one call; a ``</s>`` written as text
  after the object is the end of the turn and is consumed with the call
  (vLLM and SGLang drop it). No GigaChat tokenizer is in shared/tokenizers,
  so a marker not known to be one token is declared with every proper prefix
  (holding more is never wrong, only later).
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.json_envelope import JsonEnvelopeFormat
from ..spec import all_prefixes

__all__ = ("GIGACHAT3", "PRESETS")

GIGACHAT3 = declare(
    "gigachat3",
    JsonEnvelopeFormat(
        open=("<|message_sep|>", "function call", "<|role_sep|>"),
        close="</s>",
        variants=((("<|function_call|>",), "</s>"),),
        args_fields=("arguments",),
    ),
    token_prefixes=all_prefixes("<|message_sep|>", "<|function_call|>"),
    description='GigaChat 3 / 3.1: <|message_sep|>function call<|role_sep|>{...} or <|function_call|>{...}',
    families=("GigaChat3", "GigaChat3.1"),
)

PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("ai-sage/GigaChat3-10B-A1.8B", "gigachat3", None),
)
