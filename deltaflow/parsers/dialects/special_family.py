"""Special-token section/call dialects: ``deepseek_v3``, ``deepseek_v31``, ``kimi_k2`` (+ ``kimi_k2`` reasoning).

Facts (shared/dialects.md):

* deepseek_v3 (section 8a, DeepSeek-V3/V3-0324/R1/R1-0528):
  ``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>``
  then more calls separated by ``\\n``, then ``<｜tool▁calls▁end｜>``. The
  fence may close right after the object (llama.cpp's R1 vectors). Text
  after the section is content (vLLM keeps it too).
* deepseek_v31 (section 8b): ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>``,
  no type field and no fence, calls concatenated inside the same section.
* kimi_k2 (section 9): ``<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:N<|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>``.
  The id ``functions.NAME:N`` is kept as the call id; the name is the part
  between ``functions.`` (optional) and the last ``:``; an id without ``:N``
  is not a call. The singular section markers ``<|tool_call_section_begin|>``
  / ``<|tool_call_section_end|>`` occur too. A ``<|tool_call_begin|>``
  outside a section also opens a block (llama.cpp parses such real outputs;
  SGLang's negative vector has no call marker at all, and vLLM has none).

Token prefixes, checked in tests/unit/parsers/test_special_family.py: every
DeepSeek marker is one special token in shared/tokenizers/deepseek-v3 and
deepseek-v3.1 (ids 128806-128809, 128814), so ``token_prefixes=()``. For Kimi
no vocabulary is available; shared/tokenizers/kimi-k2/special_tokens.json
lists the plural section markers, the call markers and ``<think>``/``</think>``
as added tokens (atomic), but not the singular section variants: those are
text, so every proper prefix of ``<|tool_call_section_begin|>`` is declared.

Reasoning ``kimi_k2`` (K2-Thinking, K2.5): ``<think>``...``</think>``, both
atomic. It starts open, as vLLM's ``kimi_k2`` does (thinking on by default;
a ``<think>`` the model writes is consumed as the opener); a tool-call
section or call marker inside unclosed reasoning ends it (vLLM K2.5, SGLang
and llama.cpp agree) and starts the content. The DeepSeek reasoning parsers
are declared elsewhere.
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.special_tokens import HeaderKind, SpecialTokenFormat
from ..registry import register_reasoning_dialect
from ..spec import ReasoningDialect

__all__ = (
    "DEEPSEEK_V3",
    "DEEPSEEK_V31",
    "KIMI_K2",
    "KIMI_K2_REASONING",
)

# DeepSeek: full-width bar U+FF5C and U+2581 (dialects.md section 0, "Full-width bars").
_DS_CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
_DS_CALLS_END = "<｜tool▁calls▁end｜>"
_DS_CALL_BEGIN = "<｜tool▁call▁begin｜>"
_DS_CALL_END = "<｜tool▁call▁end｜>"
_DS_SEP = "<｜tool▁sep｜>"

_KIMI_SECTION_BEGIN = "<|tool_calls_section_begin|>"
_KIMI_SECTION_END = "<|tool_calls_section_end|>"
_KIMI_SECTION_BEGIN_SINGULAR = "<|tool_call_section_begin|>"
_KIMI_SECTION_END_SINGULAR = "<|tool_call_section_end|>"
_KIMI_CALL_BEGIN = "<|tool_call_begin|>"
_KIMI_CALL_END = "<|tool_call_end|>"
_KIMI_ARG_BEGIN = "<|tool_call_argument_begin|>"

DEEPSEEK_V3 = declare(
    "deepseek_v3",
    SpecialTokenFormat(
        section_open=(_DS_CALLS_BEGIN,),
        section_close=(_DS_CALLS_END,),
        call_open=_DS_CALL_BEGIN,
        call_close=_DS_CALL_END,
        sep=_DS_SEP,
        header=HeaderKind.TYPE_SEP_NAME,
        fence=True,
    ),
    tokenizers=("deepseek-v3", "deepseek-v3.1"),
    description="DeepSeek-V3/R1: <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME + ```json fence, in <｜tool▁calls▁begin｜>",
    families=("DeepSeek-V3", "DeepSeek-V3-0324", "DeepSeek-R1", "DeepSeek-R1-0528"),
)

DEEPSEEK_V31 = declare(
    "deepseek_v31",
    SpecialTokenFormat(
        section_open=(_DS_CALLS_BEGIN,),
        section_close=(_DS_CALLS_END,),
        call_open=_DS_CALL_BEGIN,
        call_close=_DS_CALL_END,
        sep=_DS_SEP,
        header=HeaderKind.NAME_SEP,
    ),
    tokenizers=("deepseek-v3.1", "deepseek-v3"),
    description="DeepSeek-V3.1: <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>",
    families=("DeepSeek-V3.1", "DeepSeek-V3.1-Terminus"),
)

KIMI_K2 = declare(
    "kimi_k2",
    SpecialTokenFormat(
        section_open=(_KIMI_SECTION_BEGIN, _KIMI_SECTION_BEGIN_SINGULAR),
        section_close=(_KIMI_SECTION_END, _KIMI_SECTION_END_SINGULAR),
        call_open=_KIMI_CALL_BEGIN,
        call_close=_KIMI_CALL_END,
        sep=_KIMI_ARG_BEGIN,
        header=HeaderKind.ID_SEP,
        # "functions." is optional (vLLM's no_functions_prefix); the possessive "?+" keeps
        # "functions.:0" from reading "functions." as the name.
        call_id=r"(?:functions\.)?+(?P<name>[^\n]+):[0-9]+",
        bare_calls=True,
    ),
    # Only the singular variant is text (no added token); the other openers are atomic.
    token_prefixes=tuple(_KIMI_SECTION_BEGIN_SINGULAR[:k] for k in range(1, len(_KIMI_SECTION_BEGIN_SINGULAR))),
    tokenizers=("kimi-k2",),
    description="Kimi K2: <|tool_call_begin|>functions.NAME:N<|tool_call_argument_begin|>{json} (id kept)",
    families=("Kimi-K2-Instruct", "Kimi-K2-Instruct-0905", "Kimi-K2-Thinking", "Kimi-K2.5"),
)

KIMI_K2_REASONING = register_reasoning_dialect(
    ReasoningDialect(
        name="kimi_k2",
        start="<think>",
        end="</think>",
        starts_open=True,
        token_prefixes=(),  # <think>, </think> and the two implicit terminators are added tokens
        tokenizers=("kimi-k2",),
        turn_markers=("<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>", "<|im_end|>"),
        implicit_end=(_KIMI_SECTION_BEGIN, _KIMI_CALL_BEGIN),
        families=("Kimi-K2-Thinking", "Kimi-K2.5"),
    )
)
