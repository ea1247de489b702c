"""OpenAI gpt-oss (Harmony): the ``openai`` tool dialect and the ``openai_gptoss`` reasoning dialect.

Facts (shared/dialects.md section 11): gpt-oss-20b/120b write Harmony
messages whose headers name a channel (``analysis`` = reasoning, ``final``
and recipient-less ``commentary`` = content) and, for a call, a recipient
``to=functions.NAME``. vLLM names the parsers ``openai`` (tool) and
``openai_gptoss`` (reasoning); SGLang ``gpt-oss``.

Harmony is routed in the channel router stage
(:class:`~deltaflow.parsers.drivers.harmony.HarmonyRouter`, registered for both names
in ``parsers/drivers/harmony.py``), not by text openers:

* the tool dialect declares no openers, so the tool block feeder passes the
  router's items through; its ``markers`` are every Harmony marker, so a
  detokenizer keeps them as text; its factory is the call-body parser the
  router drives;
* the reasoning spec never sees raw text either: whenever it is selected
  the router runs first and turns all text into channel items, which the
  reasoning splitter forwards. Its markers describe the first analysis
  message (what a splitter without the router would take for reasoning:
  vLLM's older text-level gpt-oss reasoning parser did the same), and it
  does not start open, so the splitter neither holds text nor overwrites the
  router's reasoning token counts.

Token prefixes: none. Every marker is one o200k_harmony special token
(``<|start|>`` 200006, ``<|channel|>`` 200005, ``<|message|>`` 200008,
``<|constrain|>`` 200003, ``<|end|>`` 200007, ``<|call|>`` 200012,
``<|return|>`` 200002), checked with tiktoken in tests/unit/parsers/test_harmony.py.
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.harmony import HarmonyFormat
from ..registry import register_reasoning_dialect
from ..spec import ReasoningDialect

__all__ = ("OPENAI", "OPENAI_GPTOSS", "PRESETS")

_FAMILIES = ("gpt-oss-20b", "gpt-oss-120b")
_TOKENIZERS = ("gpt-oss",)


OPENAI = declare(
    "openai",
    HarmonyFormat(),
    token_prefixes=(),
    tokenizers=_TOKENIZERS,
    description=(
        "gpt-oss Harmony: <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>"
        " (routed by channel headers)"
    ),
    families=_FAMILIES,
)

OPENAI_GPTOSS = register_reasoning_dialect(
    ReasoningDialect(
        name="openai_gptoss",
        start="<|channel|>analysis<|message|>",
        end="<|end|>",
        starts_open=False,
        token_prefixes=(),
        tokenizers=_TOKENIZERS,
        turn_markers=("<|start|>",),
        families=_FAMILIES,
    )
)

# gpt-oss (shared/dialects.md section 11)
PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("openai/gpt-oss-20b", "openai", "openai_gptoss"),
    ("openai/gpt-oss-120b", "openai", "openai_gptoss"),
)
