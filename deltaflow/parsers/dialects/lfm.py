"""LFM (Liquid AI): the ``lfm2`` tool dialect.

* ``lfm2`` (Liquid LFM2 / LFM2.5; SGLang ``lfm2``, llama.cpp ``lfm2``;
  shared/dialects.md sections 4 and 14 and the corpus vectors):
  ``<|tool_call_start|>[f(a=1), g()]<|tool_call_end|>``. The payload is a
  pythonic call list (the usual LFM2 output), or JSON: a list of
  ``{"name", "arguments"|"parameters"}`` objects or one such object (SGLang
  accepts both); the driver, ``parsers/drivers/lfm2.py``, tells them apart and
  states how the pythonic values are read (vLLM's lfm2 recoveries). Both
  markers are special tokens (vLLM refuses to start without their ids), so
  no prefix is declared. A block opens anywhere; a bare ``[`` never does
  (llama.cpp: bracketed text outside the markers is content).
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.lfm2 import Lfm2Format

__all__ = ("LFM2", "PRESETS")

LFM2 = declare(
    "lfm2",
    Lfm2Format(),
    lead_blanks=True,  # blanks before <|tool_call_start|> are framing (SGLang strips them)
    token_prefixes=(),
    description="LFM2: <|tool_call_start|>[f(a=1), g()]<|tool_call_end|> (or a JSON list of {name, arguments})",
    families=("LFM2", "LFM2.5", "LFM2-8B-A1B", "LFM2.5-8B-A1B"),
)

# LFM2 (shared/dialects.md section 14)
PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("LiquidAI/LFM2-1.2B", "lfm2", None),
    ("LiquidAI/LFM2-8B-A1B", "lfm2", None),
)
