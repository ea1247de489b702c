"""``<think>`` reasoning protocols (shared/dialects.md sections 0, 1 and 8a).

Both start inside reasoning unless ``enable_thinking=False`` (the convention
of vLLM and LMDeploy: many templates open ``<think>`` in the prompt, so the
output carries only ``</think>``; a ``<think>`` the model writes itself is
consumed as the opening marker). An output that never closes reasoning is all
reasoning. ``qwen3`` also ends reasoning at ``<tool_call>\n<function=``, the
call form of Qwen3.5 and Qwen3-Coder, which call tools without closing their
thinking (vLLM's qwen3 parser): the call starts the content, so it streams.

Token prefixes, checked against shared/tokenizers (tests/unit/parsers):
Qwen3 and DeepSeek-V3.1/R1-0528 encode ``<think>``/``</think>`` as single
tokens; Qwen2.5 (QwQ, R1-Distill-Qwen) and Llama 3 (R1-Distill-Llama) split
them as ``<th`` ``ink`` ``>`` and ``</`` ``think`` ``>``, and ``>`` may merge
with the following newlines, leaving ``</think`` at a token boundary.
"""

from __future__ import annotations

from ..registry import register_reasoning_dialect
from ..spec import ReasoningDialect, all_prefixes

_SPLIT_THINK_PREFIXES = ("<", "<th", "<think", "</", "</think")

# Qwen3.5 (and Qwen3-Coder in thinking mode) may call a tool without closing its thinking; the
# call starts the content (vLLM's qwen3 parser). Only the XML call form ends reasoning: a
# hermes-style <tool_call>{...} inside reasoning stays a tentative block (tool block feeder rule).
QWEN35_CALL = "<tool_call>\n<function="

QWEN3 = register_reasoning_dialect(
    ReasoningDialect(
        name="qwen3",
        start="<think>",
        end="</think>",
        starts_open=True,
        # <tool_call> is one Qwen token; "<function=" is split as "<" "function" "=..." (checked).
        token_prefixes=(
            *_SPLIT_THINK_PREFIXES, "<tool_call>", "<tool_call>\n", "<tool_call>\n<", "<tool_call>\n<function",
        ),
        tokenizers=("qwen3", "qwen2.5"),
        turn_markers=("<|im_start|>", "<|im_end|>"),
        implicit_end=(QWEN35_CALL,),
        families=("Qwen3", "Qwen3-Thinking-2507", "QwQ", "Intern-S1"),
    )
)

DEEPSEEK_R1 = register_reasoning_dialect(
    ReasoningDialect(
        name="deepseek_r1",
        start="<think>",
        end="</think>",
        starts_open=True,
        token_prefixes=_SPLIT_THINK_PREFIXES,
        tokenizers=("deepseek-v3.1", "qwen2.5", "llama3"),
        turn_markers=("<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"),
        families=("DeepSeek-R1", "DeepSeek-R1-0528", "DeepSeek-R1-Distill"),
    )
)

# DeepSeek-V4 (llama.cpp's handler; the corpus assumes the name): the DeepSeek <think>
# protocol, and a call section inside unclosed reasoning ends it, as for Kimi K2, so
# the calls are parsed and the reasoning before them stays reasoning.
_DSML_V4 = "<｜DSML｜tool_calls>"
DEEPSEEK_V4 = register_reasoning_dialect(
    ReasoningDialect(
        name="deepseek_v4",
        start="<think>",
        end="</think>",
        starts_open=True,
        # <think>/</think> are single DeepSeek tokens; the DSML opener is split text.
        token_prefixes=all_prefixes(_DSML_V4),
        tokenizers=("deepseek-v3.1",),
        turn_markers=("<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"),
        implicit_end=(_DSML_V4,),
        families=("DeepSeek-V4",),
    )
)

# Ling 3 (inclusionAI; llama.cpp's handler): GLM's reasoning rules, including the implicit
# end at <tool_call>. No tokenizer in shared/: every proper prefix is declared.
LING3 = register_reasoning_dialect(
    ReasoningDialect(
        name="ling3",
        start="<think>",
        end="</think>",
        starts_open=True,
        token_prefixes=all_prefixes("<think>", "</think>", "<tool_call>"),
        implicit_end=("<tool_call>",),
        families=("Ling 3",),
    )
)

# Kimi-VL-Thinking / Kimi-K1.5 style (SGLang's ``kimi`` detector): ◁think▷ ... ◁/think▷ written by the
# model itself, so the output does not start inside reasoning. No tokenizer in shared/: every proper
# prefix of both markers is declared.
_KIMI_VL_MARKERS = ("◁think▷", "◁/think▷")
KIMI_VL = register_reasoning_dialect(
    ReasoningDialect(
        name="kimi_vl",
        start=_KIMI_VL_MARKERS[0],
        end=_KIMI_VL_MARKERS[1],
        starts_open=False,
        token_prefixes=all_prefixes(*_KIMI_VL_MARKERS),
        families=("Kimi-VL-A3B-Thinking",),
    )
)
