"""Apriel (ServiceNow): the ``apriel`` tool dialect.

* ``apriel`` (ServiceNow Apriel, tool side; llama.cpp ``apriel``; a
  declaration of the JSON envelope driver, ``parsers/drivers/json_envelope.py``,
  facts: shared/dialects.md section 14): ``<tool_calls>[...]</tool_calls>``,
  a JSON array of calls. No Apriel tokenizer is in shared/tokenizers, so the
  opener, not known to be one token, is declared with every proper prefix
  (holding more is never wrong, only later).

Not declared: Apriel's reasoning, ``[BEGIN FINAL RESPONSE]`` with a
prompt-prefilled label.
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.json_envelope import JsonEnvelopeFormat
from ..spec import Writing, all_prefixes

__all__ = ("APRIEL", "PRESETS")

APRIEL = declare(
    "apriel",
    JsonEnvelopeFormat(
        open=("<tool_calls>",), close="</tool_calls>", args_fields=("arguments", "parameters"), array=True
    ),
    token_prefixes=all_prefixes("<tool_calls>"),
    description='Apriel (tool side): <tool_calls>[{"name", "arguments"}, ...]</tool_calls>',
    families=("Apriel-1.5-Thinker", "Apriel-1.6-Thinker"),
    writing=Writing(separator=", "),
)

PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("ServiceNow-AI/Apriel-1.5-15b-Thinker", "apriel", None),
)
