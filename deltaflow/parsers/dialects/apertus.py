"""Apertus (Swiss AI): the ``apertus`` tool dialect.

* ``apertus`` (Swiss AI Apertus; llama.cpp and vLLM ``apertus``; a declaration
  of the JSON envelope driver, ``parsers/drivers/json_envelope.py``, facts:
  shared/dialects.md section 14): ``<|tools_prefix|>[{"NAME": {args}}, ...]<|tools_suffix|>``,
  a JSON array of calls; the function name is the object's one key.
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.json_envelope import JsonEnvelopeFormat
from ..spec import Writing, all_prefixes

__all__ = ("APERTUS", "PRESETS")

APERTUS = declare(
    "apertus",
    JsonEnvelopeFormat(open=("<|tools_prefix|>",), close="<|tools_suffix|>", array=True, name_keyed=True),
    # vLLM's apertus parser buffers partial <|tools_prefix|> text: treated as splittable.
    token_prefixes=all_prefixes("<|tools_prefix|>"),
    description='Apertus: <|tools_prefix|>[{"NAME": {args}}, ...]<|tools_suffix|>',
    families=("Apertus",),
    writing=Writing(separator=", "),
)

PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("swiss-ai/Apertus-8B-Instruct-2509", "apertus", None),
)
