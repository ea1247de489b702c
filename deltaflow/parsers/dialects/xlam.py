"""xLAM (Salesforce): the ``xlam`` tool dialect.

* ``xlam`` (Salesforce xLAM-2; a declaration of the JSON envelope driver,
  ``parsers/drivers/json_envelope.py``, facts: shared/dialects.md section 14
  and vLLM's xlam parser): a JSON array of calls, bare at the start of the
  output, in a ```` ```json ```` (or ```` ``` ````) fence, after
  ``[TOOL_CALLS]``, or in ``<tool_call>...</tool_call>`` (vLLM's xlam
  patterns); all markers are text. No xLAM tokenizer is in shared/tokenizers,
  so every proper prefix of each marker is declared (holding more is never
  wrong, only later).
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.json_envelope import JsonEnvelopeFormat
from ..spec import Writing, all_prefixes

__all__ = ("PRESETS", "XLAM")

XLAM = declare(
    "xlam",
    JsonEnvelopeFormat(
        open=("<tool_call>",),
        close="</tool_call>",
        variants=((("[TOOL_CALLS]",), None), (("```json",), "```"), (("```",), "```")),
        args_fields=("arguments", "parameters"),
        array=True,
        bare_object=True,
    ),
    start_openers=("[",),
    lead_blanks=True,  # the newline before a fence or <tool_call> is framing (vLLM strips it)
    # xLAM-2 may think first: after its "...</think>" a bare array opens a block as at the start (vLLM).
    restart_after=("</think>",),
    token_prefixes=all_prefixes("<tool_call>", "[TOOL_CALLS]", "```", "</think>"),
    description="xLAM-2: a JSON array of calls, bare, fenced (```json), after [TOOL_CALLS] or in <tool_call>",
    families=("xLAM-2",),
    writing=Writing(bare=True, separator=", "),
)

PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("Salesforce/Llama-xLAM-2-8b-fc-r", "xlam", None),
    ("Salesforce/xLAM-2-32b-fc-r", "xlam", None),
)
