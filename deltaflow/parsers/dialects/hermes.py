"""Hermes (NousResearch): the ``hermes`` tool dialect, also Qwen2.5's, QwQ's and Qwen3's.

* ``hermes`` (shared/dialects.md section 1; the JSON envelope driver,
  ``parsers/drivers/json_envelope.py``): ``<tool_call>{"name", "arguments"}</tool_call>``
  per call, consecutive blocks for parallel calls; ``<tool_call>`` and
  ``</tool_call>`` are single tokens in Qwen2.5/Qwen3. The Qwen presets that
  use it are in :mod:`.qwen`; Granite 4.0 (:mod:`.granite`) writes the same
  envelope.
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.json_envelope import JsonEnvelopeFormat
from ..spec import Writing

__all__ = ("HERMES", "PRESETS")


HERMES = declare(
    "hermes",
    JsonEnvelopeFormat(open=("<tool_call>",), close="</tool_call>", args_fields=("arguments", "parameters")),
    tokenizers=("qwen3", "qwen2.5"),
    description="Hermes / Qwen2.5 / Qwen3: <tool_call>{\"name\", \"arguments\"}</tool_call>",
    families=("Hermes 2 Pro / 3", "Qwen2.5", "QwQ", "Qwen3", "Qwen3-2507"),
    writing=Writing(open_gaps=("\n",), close_gap="\n", separator="\n", atomic=("<tool_call>", "</tool_call>")),
)

PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("NousResearch/Hermes-3-Llama-3.1-8B", "hermes", None),
    ("NousResearch/Hermes-2-Pro-Llama-3-8B", "hermes", None),
)
