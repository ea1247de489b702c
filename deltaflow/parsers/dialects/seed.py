"""Seed (ByteDance): the ``seed_oss`` tool dialect and the ``seed_oss`` reasoning dialect.

* ``seed_oss`` (shared/dialects.md section 12; the XML function driver,
  ``parsers/drivers/xml_function.py``, values typed by the tool's JSON schema,
  ``_core/schema.py``): Qwen3-Coder's calls inside
  ``<seed:tool_call>...</seed:tool_call>`` (special tokens: vLLM raises
  without their ids; no Seed tokenizer is available here). A value written
  on its own lines (``<parameter=K>\\nV\\n</parameter>``) loses those two
  newlines; an inline value keeps a trailing newline of its own (llama.cpp).
* Reasoning ``seed_oss``: ``<seed:think>``...``</seed:think>``; starts inside
  reasoning as vLLM's parser does (with ``thinking_budget=0`` the prompt opens
  it; otherwise the model writes ``<seed:think>``, which is consumed).
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.xml_function import XmlFunctionFormat
from ..registry import register_reasoning_dialect
from ..spec import ReasoningDialect, Writing

__all__ = ("PRESETS", "SEED_OSS", "SEED_OSS_FORMAT", "SEED_OSS_REASONING")

SEED_OSS_FORMAT = XmlFunctionFormat(
    block_open="<seed:tool_call>",
    block_close="</seed:tool_call>",
    call_open="<function=",
    call_close="</function>",
    name_style="equals",
    param_open="<parameter=",
    key_style="equals",
    key_end=">",
    value_open=None,
    value_close="</parameter>",
    strip="paired",
    open_ends_value=True,
)

SEED_OSS = declare(
    "seed_oss",
    SEED_OSS_FORMAT,
    description="Seed-OSS: <seed:tool_call><function=NAME><parameter=KEY>V</parameter></function></seed:tool_call>",
    families=("Seed-OSS-36B-Instruct", "Seed-OSS-36B-Base"),
    writing=Writing(
        block_per_call=True,
        block_gap="\n",
        name_gap="\n",
        param_gap="\n",
        call_gap="\n",
        separator="\n",
        atomic=("<seed:tool_call>", "</seed:tool_call>"),
        xgrammar="qwen_xml",
    ),
)

SEED_OSS_REASONING = register_reasoning_dialect(
    ReasoningDialect(
        name="seed_oss",
        start="<seed:think>",
        end="</seed:think>",
        starts_open=True,
        turn_markers=("<seed:bos>", "<seed:eos>"),
        families=("Seed-OSS-36B-Instruct",),
    )
)

# Seed-OSS (shared/dialects.md section 12)
PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("ByteDance-Seed/Seed-OSS-36B-Instruct", "seed_oss", "seed_oss"),
)
