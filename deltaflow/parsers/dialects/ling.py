"""Ling (inclusionAI): the ``ling3`` tool dialect and the ``ling3`` reasoning dialect (llama.cpp's handler).

* ``ling3`` (Ling 3.0 / Bailing V3; llama.cpp ``ling3``; the XML function
  driver, ``parsers/drivers/xml_function.py``): GLM-4.5's
  ``<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>``,
  the same declaration as ``glm45`` (values typed by schema; a union with
  string keeps text that only starts like a number as a string). No Ling
  tokenizer is available; the prefixes of ``<tool_call>`` are declared.
* Reasoning ``ling3``: GLM's reasoning rules, including the implicit end at
  ``<tool_call>``. No tokenizer in shared/: every proper prefix is declared.
"""

from __future__ import annotations

from ..declare import declare
from ..registry import register_reasoning_dialect
from ..spec import ReasoningDialect, Writing, all_prefixes
from ._think import THINK_END, THINK_START

# Ling 3 writes GLM-4.5's format: the one declaration of it is imported from the GLM module.
from .glm import GLM_FORMAT

__all__ = ("LING3", "LING3_REASONING", "PRESETS")

LING3 = declare(
    "ling3",
    GLM_FORMAT,
    # No Ling tokenizer in shared/: every prefix of the end-of-turn token is held too.
    token_prefixes=("<", "<tool", "<tool_", "<tool_call", *all_prefixes("<|role_end|>")),
    # The end-of-turn special token is turn framing, never answer text (llama.cpp strips it).
    framing=("<|role_end|>",),
    description="Ling 3 / Bailing V3: <tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>\\n</tool_call>",
    families=("Ling-3.0", "Ring-3.0"),
    writing=Writing(
        name_gap="\n",
        key_gap="\n",
        param_gap="\n",
        separator="\n",
        atomic=("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),
        xgrammar="glm_xml",
    ),
)

# Ling 3 (inclusionAI; llama.cpp's handler): GLM's reasoning rules, including the implicit
# end at <tool_call>. No tokenizer in shared/: every proper prefix is declared.
LING3_REASONING = register_reasoning_dialect(
    ReasoningDialect(
        name="ling3",
        start=THINK_START,
        end=THINK_END,
        starts_open=True,
        token_prefixes=all_prefixes(THINK_START, THINK_END, "<tool_call>"),
        implicit_end=("<tool_call>",),
        families=("Ling 3",),
    )
)

PRESETS: tuple[tuple[str, str | None, str | None], ...] = ()
