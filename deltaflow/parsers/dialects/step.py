"""Step (StepFun): the ``step3`` and ``step3p5`` tool dialects and the ``step3p5`` reasoning dialect.

Step3 reasons with DeepSeek-R1's ``<think>`` (``deepseek_r1``, :mod:`.deepseek`).

* ``step3`` (StepFun Step3, shared/dialects.md section 14; the XML function
  driver, ``parsers/drivers/xml_function.py``):
  ``<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜>``
  ``<steptml:invoke name="f"><steptml:parameter name="k">v</steptml:parameter></steptml:invoke>``
  ``<｜tool_call_end｜><｜tool_calls_end｜>``.
  MiniMax-style invokes inside a section; the per-call wrapper
  (``<｜tool_call_begin｜>``, an optional ``function<｜tool_sep｜>``,
  ``<｜tool_call_end｜>``) is filler between invokes (vLLM's own tests omit
  ``function<｜tool_sep｜>``). ``｜`` is U+FF5C with ASCII ``_``; the section
  markers are special tokens (vLLM lists them), so no prefix is declared.
  Values are typed by the tool's schema.
* ``step3p5`` (Step-3.5): Qwen3-Coder's XML
  (``<tool_call><function=N><parameter=K>V</parameter></function></tool_call>``),
  the same declaration as ``qwen3_coder``. No Step-3.5 tokenizer is
  available: the declared prefixes cover ``<tool_call>`` written as text too.
* Reasoning ``step3p5`` (StepFun Step-3.5; checked against vLLM's ``step3p5``
  reasoning parser and its tests, shared/corpus/vllm.jsonl): the prompt opens
  ``<think>``, so the output starts inside reasoning; a ``<think>`` the model
  writes itself is consumed; the first ``</think>`` ends reasoning, and an
  output without it is all reasoning. ``enable_thinking=False`` makes all of
  it content. Reasoning and content are kept verbatim, except the newlines
  right before ``</think>``, which are its template's framing and dropped
  (vLLM's parser trims them; the newline after ``</think>`` stays content, as
  in vLLM's vectors). No Step-3.5 tokenizer is under shared/tokenizers: every
  proper prefix of each marker is declared (:mod:`._think`).
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.xml_function import XmlFunctionFormat
from ..registry import register_reasoning_dialect
from ..spec import ReasoningDialect
from ._think import THINK_END, THINK_PREFIXES, THINK_START

# Step-3.5 writes Qwen3-Coder's format: the one declaration of it is imported from the Qwen module.
from .qwen import QWEN3_CODER_FORMAT, QWEN3_CODER_WRITING

__all__ = ("PRESETS", "STEP3", "STEP3P5", "STEP3P5_REASONING", "STEP3_FORMAT")

# -- Step3 ------------------------------------------------------------------------------------

STEP3_FORMAT = XmlFunctionFormat(
    block_open="<｜tool_calls_begin｜>",
    block_close="<｜tool_calls_end｜>",
    call_open="<steptml:invoke",
    call_close="</steptml:invoke>",
    name_style="attr",
    param_open="<steptml:parameter",
    key_style="attr",
    key_end=">",
    value_open=None,
    value_close="</steptml:parameter>",
    fillers=("<｜tool_call_begin｜>", "function<｜tool_sep｜>", "<｜tool_call_end｜>"),
)
"""Step3's section: MiniMax-style invokes, each wrapped in Step3's per-call markers (fillers)."""


STEP3 = declare(
    "step3",
    STEP3_FORMAT,
    markers=("<｜tool_call_begin｜>", "<｜tool_sep｜>", "<｜tool_call_end｜>"),
    token_prefixes=(),
    description='Step3: <｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="N">...',
    families=("Step3",),
)

# -- Step-3.5 ---------------------------------------------------------------------------------

STEP3P5 = declare(
    "step3p5",
    QWEN3_CODER_FORMAT,
    token_prefixes=("<", "<tool", "<tool_", "<tool_call", "<function"),
    description="Step-3.5: <tool_call><function=NAME><parameter=KEY>value</parameter></function></tool_call>",
    families=("Step-3.5-Flash",),
    writing=QWEN3_CODER_WRITING,
)

STEP3P5_REASONING = register_reasoning_dialect(
    ReasoningDialect(
        name="step3p5",
        start=THINK_START,
        end=THINK_END,
        starts_open=True,
        # The template's newlines before </think> are framing (vLLM's Step-3.5 parser trims them).
        reasoning_rstrip_newlines=True,
        token_prefixes=THINK_PREFIXES,
        families=("Step-3.5",),
    )
)

# Step3 / Step-3.5 (shared/dialects.md section 14)
PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("stepfun-ai/step3", "step3", "deepseek_r1"),
    ("stepfun-ai/Step-3.5-Flash", "step3p5", "step3p5"),
)
