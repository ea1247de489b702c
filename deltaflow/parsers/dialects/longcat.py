"""LongCat (Meituan): the ``longcat`` tool dialect.

* ``longcat`` (Meituan LongCat-Flash; a declaration of the JSON envelope
  driver, ``parsers/drivers/json_envelope.py``, facts: shared/dialects.md
  section 14): ``<longcat_tool_call>{...}</longcat_tool_call>``, one object
  per call. No LongCat tokenizer is in shared/tokenizers, so the opener, not
  known to be one token, is declared with every proper prefix (holding more
  is never wrong, only later).
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.json_envelope import JsonEnvelopeFormat
from ..spec import Writing, all_prefixes

__all__ = ("LONGCAT", "PRESETS")

LONGCAT = declare(
    "longcat",
    JsonEnvelopeFormat(
        open=("<longcat_tool_call>",), close="</longcat_tool_call>", args_fields=("arguments", "parameters")
    ),
    token_prefixes=all_prefixes("<longcat_tool_call>"),
    description='LongCat-Flash: <longcat_tool_call>{"name", "arguments"}</longcat_tool_call>',
    families=("LongCat-Flash",),
    writing=Writing(separator="\n"),
)

PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("meituan-longcat/LongCat-Flash-Chat", "longcat", None),
)
