"""InternLM (Shanghai AI Lab): the ``internlm`` tool dialect.

* ``internlm`` (shared/dialects.md section 2; the JSON envelope driver,
  ``parsers/drivers/json_envelope.py``):
  ``<|action_start|><|plugin|>{"name", "parameters"}<|action_end|>``; all
  markers are special tokens, and a detokenizer may put whitespace between
  the first two. vLLM also accepts ``arguments``.

Intern-S1 reasons with Qwen3's ``<think>`` (``qwen3``, :mod:`.qwen`).
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.json_envelope import JsonEnvelopeFormat
from ..spec import Writing

__all__ = ("INTERNLM", "PRESETS")


INTERNLM = declare(
    "internlm",
    JsonEnvelopeFormat(
        open=("<|action_start|>", "<|plugin|>"),
        close="<|action_end|>",
        args_fields=("parameters", "arguments"),
    ),
    description="InternLM2/2.5/3, Intern-S1: <|action_start|><|plugin|>{\"name\", \"parameters\"}<|action_end|>",
    families=("InternLM2", "InternLM2.5", "InternLM3", "Intern-S1"),
    writing=Writing(open_gaps=("", "\n"), one_call=True, atomic=("<|action_start|>", "<|plugin|>", "<|action_end|>")),
)

# InternLM (shared/dialects.md section 2)
PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("internlm/internlm2_5-7b-chat", "internlm", None),
    ("internlm/internlm3-8b-instruct", "internlm", None),
    ("internlm/Intern-S1", "internlm", "qwen3"),
)
