"""More tool dialects on the pythonic, JSON-envelope and XML-function drivers.

Tool parsers (names as vLLM, SGLang and llama.cpp name them; facts from
shared/dialects.md sections 4, 6, 7, 8c and 14, and the corpus vectors):

* ``lfm2`` (Liquid LFM2 / LFM2.5; SGLang ``lfm2``, llama.cpp ``lfm2``):
  ``<|tool_call_start|>[f(a=1), g()]<|tool_call_end|>``. The payload is a
  pythonic call list (the usual LFM2 output), or JSON: a list of
  ``{"name", "arguments"|"parameters"}`` objects or one such object (SGLang
  accepts both). The first non-blank character after the opener decides:
  ``{`` one JSON object, ``[`` then ``{`` a JSON list, anything else the
  pythonic list (which surfaces what is not a call list, e.g. an empty
  block). Pythonic values use :func:`python_literal_to_json` (vLLM's lfm2
  recoveries: raw control characters inside strings, leading-zero integers,
  sets as arrays, JSON ``true``/``false``/``null``) and the nested-quote rule
  of :mod:`deltaflow.parsers.drivers.pythonic`. Both markers are special tokens
  (vLLM refuses to start without their ids), so no prefix is declared.
  A block opens anywhere; a bare ``[`` never does (llama.cpp: bracketed text
  outside the markers is content).
* ``olmo3`` (OLMo 3): newline-separated pythonic calls without list brackets
  between ``<function_calls>`` and ``</function_calls>``; JSON
  ``true``/``false``/``null`` are accepted as values (vLLM). The opener is
  text in the cl100k-based OLMo vocabulary (``<`` ``function`` ``_calls``
  ``>``, checked with shared/tokenizers/cl100k), so its prefixes are declared.
* ``step3`` (StepFun Step3, section 14):
  ``<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="f"><steptml:parameter name="k">v</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>``.
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
* ``ling3`` (Ling 3.0 / Bailing V3; llama.cpp ``ling3``): GLM-4.5's
  ``<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>``,
  the same declaration as ``glm45`` (values typed by schema; a union with
  string keeps text that only starts like a number as a string). No Ling
  tokenizer is available; the prefixes of ``<tool_call>`` are declared.
* ``deepseek_v4`` (DeepSeek-V4; llama.cpp vectors): DeepSeek-V3.2's DSML
  with the block ``<｜DSML｜tool_calls>`` ... ``</｜DSML｜tool_calls>``
  (corpus README). DSML is text; the splits are those of the DeepSeek-V3.1
  vocabulary (``<`` ``｜`` ``DS`` ``ML`` ``｜`` ``tool`` ``_c`` ``alls`` ``>``).

Reasoning parsers of these families are declared elsewhere.

Stable-prefix guarantee: as the drivers state; the LFM2 dispatcher adds
only the blanks after the opener until the payload's first character (and,
for a JSON list, the blanks and ``]`` before ``<|tool_call_end|>``).
"""

from __future__ import annotations

from dataclasses import replace

from ..._core.pyliteral import lenient_literal_to_json
from ..declare import declare
from ..drivers.lfm2 import Lfm2Format
from ..drivers.pythonic import PythonicFormat
from ..drivers.xml_function import XmlFunctionFormat
from ..spec import all_prefixes
from .xml_family import DSML_FORMAT, GLM_FORMAT, QWEN3_CODER_FORMAT

__all__ = ("DEEPSEEK_V4", "DSML_V4_FORMAT", "LFM2", "LING3", "OLMO3", "OLMO3_END", "OLMO3_START", "STEP3", "STEP3P5", "STEP3_FORMAT")

OLMO3_START = "<function_calls>"
"""OLMo 3's tool block opener (text)."""
OLMO3_END = "</function_calls>"
"""OLMo 3's tool block closer (text)."""

LFM2 = declare(
    "lfm2",
    Lfm2Format(),
    lead_blanks=True,
    token_prefixes=(),
    description="LFM2: <|tool_call_start|>[f(a=1), g()]<|tool_call_end|> (or a JSON list of {name, arguments})",
    families=("LFM2", "LFM2.5", "LFM2-8B-A1B", "LFM2.5-8B-A1B"),
)

# -- OLMo 3 -----------------------------------------------------------------------------------


OLMO3 = declare(
    "olmo3",
    PythonicFormat(start=OLMO3_START, end=OLMO3_END, bracketed=False, convert=lenient_literal_to_json),
    token_prefixes=("<", "<function", "<function_calls"),
    tokenizers=("cl100k",),
    description="OLMo 3: <function_calls>f(a=1)\\ng()</function_calls> (newline-separated pythonic calls)",
    families=("OLMo-3-7B-Instruct", "OLMo-3-32B-Think", "OLMo-3.1"),
)

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

STEP3P5 = declare(
    "step3p5",
    QWEN3_CODER_FORMAT,
    token_prefixes=("<", "<tool", "<tool_", "<tool_call", "<function"),
    description="Step-3.5: <tool_call><function=NAME><parameter=KEY>value</parameter></function></tool_call>",
    families=("Step-3.5-Flash",),
)

# -- Ling 3 -----------------------------------------------------------------------------------

LING3 = declare(
    "ling3",
    GLM_FORMAT,
    # No Ling tokenizer in shared/: every prefix of the end-of-turn token is held too.
    token_prefixes=("<", "<tool", "<tool_", "<tool_call", *all_prefixes("<|role_end|>")),
    # The end-of-turn special token is turn framing, never answer text (llama.cpp strips it).
    framing=("<|role_end|>",),
    description="Ling 3 / Bailing V3: <tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>\\n</tool_call>",
    families=("Ling-3.0", "Ring-3.0"),
)

# -- DeepSeek-V4 ------------------------------------------------------------------------------

DSML_V4_FORMAT = replace(DSML_FORMAT, block_open="<｜DSML｜tool_calls>", block_close="</｜DSML｜tool_calls>")

DEEPSEEK_V4 = declare(
    "deepseek_v4",
    DSML_V4_FORMAT,
    token_prefixes=(
        "<", "<｜", "<｜DS", "<｜DSML", "<｜DSML｜", "<｜DSML｜tool", "<｜DSML｜tool_c", "<｜DSML｜tool_calls",
        # "invoke" is BPE-merged with letters glued after it, so any split of it can occur.
        "<｜DSML｜i", "<｜DSML｜in", "<｜DSML｜inv", "<｜DSML｜invo", "<｜DSML｜invok",
    ),
    tokenizers=("deepseek-v3.1",),
    description='DeepSeek-V4 DSML: <｜DSML｜tool_calls><｜DSML｜invoke name="N"><｜DSML｜parameter name="K" string="true|false">',
    families=("DeepSeek-V4",),
)
