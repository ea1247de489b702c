"""ERNIE (Baidu): the ``ernie45`` tool dialect and the ``ernie45`` reasoning dialect.

* ``ernie45`` tool calls (ERNIE-4.5; a declaration of the JSON envelope
  driver, ``parsers/drivers/json_envelope.py``, facts: shared/dialects.md
  section 14): ``<tool_call>\\n{...}\\n</tool_call>\\n`` per call, one object
  per call; vLLM looks up the ids of ``<tool_call>`` / ``</tool_call>``. The
  blanks after ``</tool_call>`` are framing, consumed with the call (vLLM's
  parser skips newline tokens around calls). ERNIE's ``</think>`` (output
  starts in reasoning) and its ``<response>...</response>`` wrapper belong to
  the ``ernie45`` reasoning parser, not to the tool dialect.
* Reasoning ``ernie45`` (ERNIE-4.5 thinking; checked against vLLM's reasoning
  parser of the same name and its tests, shared/corpus/vllm.jsonl): the output
  starts inside reasoning, ends at ``</think>``; content may be wrapped in
  ``<response>...</response>`` (kept verbatim inside, as vLLM's non-streaming
  path does). No tokenizer under shared/tokenizers: every proper prefix of
  each marker is declared.
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.json_envelope import JsonEnvelopeFormat
from ..registry import register_reasoning_dialect
from ..spec import ReasoningDialect, Writing, all_prefixes
from ._think import THINK_END, THINK_START

__all__ = ("ERNIE45", "ERNIE45_REASONING", "ERNIE_RESPONSE", "PRESETS")

ERNIE45 = declare(
    "ernie45",
    # The newlines ERNIE writes before <tool_call> and after each </tool_call> are framing (vLLM's
    # parser skips those newline tokens).
    JsonEnvelopeFormat(
        open=("<tool_call>",), close="</tool_call>", args_fields=("arguments", "parameters"), trailing_blanks=True
    ),
    lead_blanks=True,
    token_prefixes=(),  # vLLM's ernie45 parser looks up the id of <tool_call>: one token
    description='ERNIE-4.5: <tool_call>\\n{"name", "arguments"}\\n</tool_call>',
    families=("ERNIE-4.5", "ERNIE-4.5-Thinking"),
    writing=Writing(open_gaps=("\n",), close_gap="\n", after_close="\n", atomic=("<tool_call>", "</tool_call>")),
)

ERNIE_RESPONSE = ("<response>", "</response>")

ERNIE45_REASONING = register_reasoning_dialect(
    ReasoningDialect(
        name="ernie45",
        start=THINK_START,
        end=THINK_END,
        starts_open=True,
        content_wrap=ERNIE_RESPONSE,
        token_prefixes=all_prefixes(THINK_START, THINK_END, *ERNIE_RESPONSE),
        families=("ERNIE-4.5-Thinking",),
    )
)

PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("baidu/ERNIE-4.5-21B-A3B-PT", "ernie45", None),
    ("baidu/ERNIE-4.5-21B-A3B-Thinking", "ernie45", "ernie45"),
)
