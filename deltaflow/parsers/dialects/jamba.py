"""Jamba (AI21): the ``jamba`` tool dialect.

* ``jamba`` (AI21 Jamba; a declaration of the JSON envelope driver,
  ``parsers/drivers/json_envelope.py``, facts: shared/dialects.md section 14
  and vLLM's jamba parser): ``<tool_calls>[...]</tool_calls>``, a JSON array
  of calls; vLLM looks up both tags' ids, so they are single tokens.
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.json_envelope import JsonEnvelopeFormat
from ..spec import Writing

__all__ = ("JAMBA", "PRESETS")

JAMBA = declare(
    "jamba",
    JsonEnvelopeFormat(
        open=("<tool_calls>",), close="</tool_calls>", args_fields=("arguments", "parameters"), array=True
    ),
    lead_blanks=True,  # the space before <tool_calls> is framing (vLLM drops it)
    token_prefixes=(),  # vLLM's jamba parser looks up the ids of <tool_calls> / </tool_calls>
    description='AI21 Jamba: <tool_calls>[{"name", "arguments"}, ...]</tool_calls>',
    families=("Jamba 1.5", "Jamba 1.6", "Jamba 1.7"),
    writing=Writing(separator=", ", atomic=("<tool_calls>", "</tool_calls>")),
)

PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("ai21labs/AI21-Jamba-Mini-1.6", "jamba", None),
)
