"""Qwen (Alibaba): the ``qwen3_coder`` tool dialect and the ``qwen3`` reasoning dialect.

Qwen2.5, QwQ and Qwen3 call tools in Hermes' format (``hermes``, in
:mod:`.hermes`); the presets of all Qwen models are here.

* ``qwen3_coder`` (shared/dialects.md section 6; the XML function driver,
  ``parsers/drivers/xml_function.py``, values typed by the tool's JSON schema,
  ``_core/schema.py``):
  ``<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>``;
  exactly one leading and one trailing newline of a value are framing; a
  missing ``</parameter>``, ``</function>`` or ``</tool_call>`` is
  tolerated, and so is a call that starts at ``<function=`` without
  ``<tool_call>`` (vLLM, llama.cpp). ``<tool_call>`` is one Qwen token;
  ``<function=`` is text (``<`` ``function`` ``=get``...), so a token
  boundary can leave ``<`` or ``<function`` (checked against the qwen3
  tokenizer). Step-3.5 (:mod:`.step`) writes the same format.
* ``qwen3`` reasoning (shared/dialects.md sections 0 and 1): ``<think>``...``</think>``,
  starting inside reasoning unless ``enable_thinking=False`` (the convention
  in :mod:`._think`). It also ends reasoning at ``<tool_call>\\n<function=``,
  the call form of Qwen3.5 and Qwen3-Coder, which call tools without closing
  their thinking (vLLM's qwen3 parser): the call starts the content, so it
  streams. Token prefixes: Qwen3 encodes ``<think>``/``</think>`` as single
  tokens, Qwen2.5 (QwQ) splits them (:mod:`._think`). MiniCPM5
  (:mod:`.minicpm`), Intern-S1 and Nemotron-Nano v2 use this parser too.
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.xml_function import XmlFunctionFormat
from ..registry import register_reasoning_dialect
from ..spec import ReasoningDialect, Writing
from ._think import SPLIT_THINK_PREFIXES, THINK_END, THINK_START

__all__ = ("PRESETS", "QWEN3", "QWEN35_CALL", "QWEN3_CODER", "QWEN3_CODER_FORMAT", "QWEN3_CODER_WRITING")


QWEN3_CODER_WRITING = Writing(
    block_per_call=True,
    block_gap="\n",
    name_gap="\n",
    param_gap="\n",
    call_gap="\n",
    separator="\n",
    atomic=("<tool_call>", "</tool_call>"),
    xgrammar="qwen_xml",
)
"""How Qwen3-Coder's template lays its calls out (Step-3.5 writes the same)."""

QWEN3_CODER_FORMAT = XmlFunctionFormat(
    block_open="<tool_call>",
    block_close="</tool_call>",
    call_open="<function=",
    call_close="</function>",
    name_style="equals",
    param_open="<parameter=",
    key_style="equals",
    key_end=">",
    value_open=None,
    value_close="</parameter>",
    strip="each",
    bare_call=True,
    open_ends_value=True,
)

QWEN3_CODER = declare(
    "qwen3_coder",
    QWEN3_CODER_FORMAT,
    token_prefixes=("<", "<function"),
    tokenizers=("qwen3",),
    description="Qwen3-Coder XML: <tool_call><function=NAME><parameter=KEY>value</parameter></function></tool_call>",
    families=("Qwen3-Coder-30B-A3B", "Qwen3-Coder-480B-A35B", "Qwen3-Coder-Next", "Qwen3.5"),
    writing=QWEN3_CODER_WRITING,
)

# Qwen3.5 (and Qwen3-Coder in thinking mode) may call a tool without closing its thinking; the
# call starts the content (vLLM's qwen3 parser). Only the XML call form ends reasoning: a
# hermes-style <tool_call>{...} inside reasoning stays a tentative block (tool block feeder rule).
QWEN35_CALL = "<tool_call>\n<function="

QWEN3 = register_reasoning_dialect(
    ReasoningDialect(
        name="qwen3",
        start=THINK_START,
        end=THINK_END,
        starts_open=True,
        # <tool_call> is one Qwen token; "<function=" is split as "<" "function" "=..." (checked).
        token_prefixes=(
            *SPLIT_THINK_PREFIXES, "<tool_call>", "<tool_call>\n", "<tool_call>\n<", "<tool_call>\n<function",
        ),
        tokenizers=("qwen3", "qwen2.5"),
        turn_markers=("<|im_start|>", "<|im_end|>"),
        implicit_end=(QWEN35_CALL,),
        families=("Qwen3", "Qwen3-Thinking-2507", "QwQ", "Intern-S1"),
    )
)

# Qwen (shared/dialects.md sections 1 and 6)
PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("Qwen/Qwen2.5-7B-Instruct", "hermes", None),
    ("Qwen/Qwen2.5-72B-Instruct", "hermes", None),
    ("Qwen/QwQ-32B", "hermes", "qwen3"),
    ("Qwen/Qwen3-0.6B", "hermes", "qwen3"),
    ("Qwen/Qwen3-1.7B", "hermes", "qwen3"),
    ("Qwen/Qwen3-4B", "hermes", "qwen3"),
    ("Qwen/Qwen3-8B", "hermes", "qwen3"),
    ("Qwen/Qwen3-14B", "hermes", "qwen3"),
    ("Qwen/Qwen3-32B", "hermes", "qwen3"),
    ("Qwen/Qwen3-30B-A3B", "hermes", "qwen3"),
    ("Qwen/Qwen3-235B-A22B", "hermes", "qwen3"),
    ("Qwen/Qwen3-30B-A3B-Instruct-2507", "hermes", None),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507", "hermes", None),
    ("Qwen/Qwen3-30B-A3B-Thinking-2507", "hermes", "qwen3"),
    ("Qwen/Qwen3-235B-A22B-Thinking-2507", "hermes", "qwen3"),
    ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3_coder", None),
    ("Qwen/Qwen3-Coder-480B-A35B-Instruct", "qwen3_coder", None),
)
