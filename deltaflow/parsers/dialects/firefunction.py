"""FireFunction (Fireworks AI): the ``firefunction_v2`` tool dialect.

* ``firefunction_v2`` (FireFunction v2, llama.cpp; a declaration of the JSON
  envelope driver, ``parsers/drivers/json_envelope.py``, facts:
  shared/dialects.md section 14): ``functools[...]``, a JSON array of calls,
  no closer (Phi-4-mini, :mod:`.phi`, writes the same). No FireFunction
  tokenizer is in shared/tokenizers, so every proper prefix of ``functools``
  is declared (holding more is never wrong, only later).
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.json_envelope import JsonEnvelopeFormat
from ..spec import Writing, all_prefixes

__all__ = ("FIREFUNCTION_V2", "PRESETS")

FIREFUNCTION_V2 = declare(
    "firefunction_v2",
    JsonEnvelopeFormat(open=("functools",), close=None, args_fields=("arguments", "parameters"), array=True),
    token_prefixes=all_prefixes("functools"),
    description='FireFunction v2: functools[{"name", "arguments"}, ...]',
    families=("FireFunction v2",),
    writing=Writing(separator=", "),
)

PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("fireworks-ai/llama-3-firefunction-v2", "firefunction_v2", None),
)
