"""Kimi (Moonshot AI): the ``kimi_k2`` and ``kimi_k3`` tool dialects and the ``kimi_k2``, ``kimi_k3``
and ``kimi_vl`` reasoning dialects.

Kimi K2 (shared/dialects.md section 9; the special-token driver,
``parsers/drivers/special_tokens.py``):

* ``kimi_k2``: ``<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:N<|tool_call_argument_begin|>{...}``
  ``<|tool_call_end|>...<|tool_calls_section_end|>``.
  The id ``functions.NAME:N`` is kept as the call id; the name is the part
  between ``functions.`` (optional) and the last ``:``; an id without ``:N``
  is not a call. The singular section markers ``<|tool_call_section_begin|>``
  / ``<|tool_call_section_end|>`` occur too. A ``<|tool_call_begin|>``
  outside a section also opens a block (llama.cpp parses such real outputs;
  SGLang's negative vector has no call marker at all, and vLLM has none).
* Token prefixes (tests/unit/parsers/test_special_family.py): no vocabulary
  is available; shared/tokenizers/kimi-k2/special_tokens.json lists the
  plural section markers, the call markers and ``<think>``/``</think>`` as
  added tokens (atomic), but not the singular section variants: those are
  text, so every proper prefix of ``<|tool_call_section_begin|>`` is declared.
* Reasoning ``kimi_k2`` (K2-Thinking, K2.5): ``<think>``...``</think>``, both
  atomic. It starts open, as vLLM's ``kimi_k2`` does (thinking on by default;
  a ``<think>`` the model writes is consumed as the opener); a tool-call
  section or call marker inside unclosed reasoning ends it (vLLM K2.5, SGLang
  and llama.cpp agree) and starts the content.

Kimi K3 "XTML" sections (a protocol llama.cpp supports; the driver is
``parsers/drivers/xtml.py``). Facts: llama.cpp ``models/templates/*.jinja``,
``common/chat-parsers/*`` and the llama.cpp vectors of shared/corpus; see
CONFORMANCE.md for where we differ:

* ``kimi_k3`` (``models/templates/Kimi-K3.jinja``): sections
  ``<|open|>NAME<|sep|> ... <|close|>NAME<|sep|>``. The generation prompt ends
  ``<|open|>message role="assistant"<|sep|><|open|>think<|sep|>`` (thinking on,
  the template's default) or ``...<|open|>response<|sep|>`` (thinking off):
  the output is reasoning until ``<|close|>think<|sep|>``, then the answer in
  ``<|open|>response<|sep|>...<|close|>response<|sep|>``, then calls in
  ``<|open|>tools<|sep|><|open|>call tool="NAME" index="N"<|sep|>``
  ``<|open|>argument key="K" type="T"<|sep|>VALUE<|close|>argument<|sep|>``
  ``...<|close|>call<|sep|><|close|>tools<|sep|>``, then
  ``<|close|>message<|sep|>`` and the stop token ``<|end_of_msg|>``. The
  value types are the template's ``xtml_type`` names (string, number,
  boolean, null, object, array); a call may hold one
  ``<|open|>json type="object"<|sep|>{...}<|close|>json<|sep|>`` instead.
  The response and message markers are framing, dropped by the tool parser
  (so the answer is clean even without a reasoning parser); the reasoning
  parser (``kimi_k3``) drops the response wrapper too.
  ``<|end_of_msg|>`` is the engine's stop token: text it passes on is kept.
* Token boundaries (Kimi K3): no K3 vocabulary is in shared/tokenizers.
  Public K3 renderer tests and training-mask code (found with the code search;
  facts only) tokenize ``<|open|>``, ``<|close|>``, ``<|sep|>`` and
  ``<|end_of_msg|>`` as single special tokens (``<|close|>``, ``response``,
  ``<|sep|>`` are three tokens; literal control text stays content unless it
  is tokenized specially), and the tag words between them are text. So a chunk
  may end right after ``<|open|>`` / ``<|close|>`` or anywhere inside the tag
  word, never inside a token: :func:`xtml_prefixes` declares exactly those.

Kimi-VL:

* ``kimi_vl`` (Kimi-VL-Thinking / Kimi-K1.5 style, SGLang's ``kimi`` detector):
  ``◁think▷ ... ◁/think▷`` written by the model itself, so the output does not
  start inside reasoning. No tokenizer in shared/: every proper prefix of
  both markers is declared.
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.special_tokens import HeaderKind, SpecialTokenFormat
from ..drivers.xtml import XtmlFormat
from ..registry import register_reasoning_dialect
from ..spec import ReasoningDialect, all_prefixes
from ._think import THINK_END, THINK_START

__all__ = (
    "KIMI_K2",
    "KIMI_K2_REASONING",
    "KIMI_K3",
    "KIMI_K3_FORMAT",
    "KIMI_K3_REASONING",
    "KIMI_VL",
    "PRESETS",
    "xtml_prefixes",
)

# -- Kimi K2 ----------------------------------------------------------------------------------

_KIMI_SECTION_BEGIN = "<|tool_calls_section_begin|>"
_KIMI_SECTION_END = "<|tool_calls_section_end|>"
_KIMI_SECTION_BEGIN_SINGULAR = "<|tool_call_section_begin|>"
_KIMI_SECTION_END_SINGULAR = "<|tool_call_section_end|>"
_KIMI_CALL_BEGIN = "<|tool_call_begin|>"
_KIMI_CALL_END = "<|tool_call_end|>"
_KIMI_ARG_BEGIN = "<|tool_call_argument_begin|>"

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
        start=THINK_START,
        end=THINK_END,
        starts_open=True,
        token_prefixes=(),  # <think>, </think> and the two implicit terminators are added tokens
        tokenizers=("kimi-k2",),
        turn_markers=("<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>", "<|im_end|>"),
        implicit_end=(_KIMI_SECTION_BEGIN, _KIMI_CALL_BEGIN),
        families=("Kimi-K2-Thinking", "Kimi-K2.5"),
    )
)

# -- Kimi K3 (XTML) ---------------------------------------------------------------------------

_OPEN = "<|open|>"
_CLOSE = "<|close|>"
_SEP = "<|sep|>"


def xtml_prefixes(*markers: str) -> tuple[str, ...]:
    """The prefixes of XTML markers a token boundary can leave: the lead token plus any part of the tag word.

    Each marker is ``<|open|>WORD<|sep|>`` or ``<|close|>WORD<|sep|>``; the
    three tokens are single special tokens, the word is text a BPE may split.
    """
    out: list[str] = []
    for m in markers:
        lead = _OPEN if m.startswith(_OPEN) else _CLOSE
        word = m[len(lead) : -len(_SEP)]
        out.extend(lead + word[:k] for k in range(len(word) + 1))
    return tuple(dict.fromkeys(out))


KIMI_K3_FORMAT = XtmlFormat()

K3_THINK = (_OPEN + "think" + _SEP, _CLOSE + "think" + _SEP)
K3_RESPONSE = (_OPEN + "response" + _SEP, _CLOSE + "response" + _SEP)
K3_TOOLS_OPEN = _OPEN + "tools" + _SEP

KIMI_K3 = declare(
    "kimi_k3",
    KIMI_K3_FORMAT,
    token_prefixes=xtml_prefixes(*KIMI_K3_FORMAT.openers),
    description=(
        'Kimi K3 XTML: <|open|>tools<|sep|><|open|>call tool="NAME"<|sep|><|open|>argument key= type=<|sep|>V...'
    ),
    families=("Kimi K3",),
)

KIMI_K3_REASONING = register_reasoning_dialect(
    ReasoningDialect(
        name="kimi_k3",
        start=K3_THINK[0],
        end=K3_THINK[1],
        # The generation prompt opens the think section (thinking is on unless the request turns it off).
        starts_open=True,
        content_wrap=K3_RESPONSE,
        # The model's own channel transitions: the answer or the calls begin, so thinking is over.
        implicit_end=(K3_RESPONSE[0], K3_TOOLS_OPEN),
        token_prefixes=xtml_prefixes(*K3_THINK, *K3_RESPONSE, K3_TOOLS_OPEN),
        turn_markers=("<|end_of_msg|>",),
        families=("Kimi K3",),
    )
)

# -- Kimi-VL ----------------------------------------------------------------------------------

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

# Kimi (shared/dialects.md section 9; Kimi K3: XTML sections)
PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("moonshotai/Kimi-K2-Instruct", "kimi_k2", None),
    ("moonshotai/Kimi-K2-Instruct-0905", "kimi_k2", None),
    ("moonshotai/Kimi-K2-Thinking", "kimi_k2", "kimi_k2"),
    ("moonshotai/Kimi-K3", "kimi_k3", "kimi_k3"),  # XTML sections
)
