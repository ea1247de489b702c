"""Phi (Microsoft): the ``phi4_mini_json`` tool dialect.

* ``phi4_mini_json`` (Phi-4-mini; a declaration of the JSON envelope driver,
  ``parsers/drivers/json_envelope.py``, facts: shared/dialects.md section 14):
  ``functools[...]``, a JSON array of calls, no closer (FireFunction v2,
  :mod:`.firefunction`, writes the same). No Phi tokenizer is in
  shared/tokenizers, so every proper prefix of ``functools`` is declared
  (holding more is never wrong, only later).
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.json_envelope import JsonEnvelopeFormat
from ..spec import Writing, all_prefixes

__all__ = ("PHI4_MINI_JSON", "PRESETS")

PHI4_MINI_JSON = declare(
    "phi4_mini_json",
    JsonEnvelopeFormat(open=("functools",), close=None, args_fields=("arguments", "parameters"), array=True),
    token_prefixes=all_prefixes("functools"),
    description='Phi-4-mini: functools[{"name", "arguments"}, ...]',
    families=("Phi-4-mini",),
    writing=Writing(separator=", "),
)

PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("microsoft/Phi-4-mini-instruct", "phi4_mini_json", None),
)
