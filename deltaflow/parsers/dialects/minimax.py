"""MiniMax: the ``minimax_m2`` and ``minimax_m3`` tool dialects and the ``minimax_m2``,
``minimax_m2_append_think`` and ``minimax_m3`` reasoning dialects.

MiniMax-M2 (shared/dialects.md section 10):

* ``minimax_m2`` (the XML function driver, ``parsers/drivers/xml_function.py``):
  ``<minimax:tool_call><invoke name="N"><parameter name="K">V</parameter></invoke>...</minimax:tool_call>``;
  several invokes in one block are parallel calls; values verbatim (vLLM's
  tests keep surrounding whitespace). The block tags are special tokens
  (shared/tokenizers/minimax-m2/special_tokens.json, from a third-party mock;
  vLLM refuses to start without their ids); ``<invoke`` and ``<parameter``
  are text inside the block. Step3 (:mod:`.step`) writes the same invokes.
* Reasoning ``minimax_m2``: ``<think>``...``</think>``, always opened by the
  prompt. ``minimax_m2_append_think`` (vLLM's name) does not split: the
  output is content with the prompt's ``<think>`` put back in front, for
  clients that send the thinking back in the next turn.

MiniMax-M3 (llama.cpp's handler; issue 4). Facts are the corpus vector
``llamacpp:minimax_m3`` (shared/corpus/llamacpp.jsonl, from llama.cpp's
``tests/test-chat.cpp`` with ``models/templates/MiniMax-M3.jinja``):

* ``minimax_m3``: every tag behind the marker ``]<]minimax[>[``:
  ``M<tool_call>\\nM<invoke name="N">M<KEY>value M</KEY>...M</invoke>\\nM</tool_call>``;
  the parameter name is the element name, and an object parameter is written
  as one child element per key (nested), which becomes a JSON object typed by
  the schema's nested ``properties`` (an array-typed element's children are
  its items). A dedicated driver, ``parsers/drivers/xml_element.py``.
* Reasoning ``minimax_m3``: ``<mm:think>``...``</mm:think>``. It starts inside
  reasoning when thinking is on (as ``qwen3``): the vectors show a turn
  without reasoning as a bare ``</mm:think>`` before the content, i.e. the
  prompt opens the think block, and a ``<mm:think>`` the model writes itself
  is consumed as the opening marker.
* Token prefixes: shared/tokenizers has no MiniMax-M3 vocabulary
  (``minimax-m2`` holds only M2's special tokens), so every marker is taken
  to be plain text that a tokenizer may split anywhere: every proper prefix
  of every opener is declared (``all_prefixes``), for the tool and the
  reasoning markers alike. (The MiniMax marker is likely one special token;
  declaring all prefixes only holds a trailing ``]`` briefly, never changes a
  result.)
"""

from __future__ import annotations

from dataclasses import replace

from ..declare import declare
from ..drivers.xml_element import XmlElementFormat
from ..drivers.xml_function import XmlFunctionFormat
from ..registry import register_reasoning_dialect
from ..spec import ReasoningDialect, Writing, all_prefixes
from ._think import THINK_END, THINK_START

__all__ = (
    "MINIMAX_M2",
    "MINIMAX_M2_APPEND_THINK",
    "MINIMAX_M2_FORMAT",
    "MINIMAX_M2_REASONING",
    "MINIMAX_M3",
    "MINIMAX_M3_FORMAT",
    "MINIMAX_M3_MARKER",
    "MINIMAX_M3_REASONING",
    "PRESETS",
)

# -- MiniMax-M2 -------------------------------------------------------------------------------

MINIMAX_M2_FORMAT = XmlFunctionFormat(
    block_open="<minimax:tool_call>",
    block_close="</minimax:tool_call>",
    call_open="<invoke",
    call_close="</invoke>",
    name_style="attr",
    param_open="<parameter",
    key_style="attr",
    key_end=">",
    value_open=None,
    value_close="</parameter>",
)

MINIMAX_M2 = declare(
    "minimax_m2",
    MINIMAX_M2_FORMAT,
    tokenizers=("minimax-m2",),
    description='MiniMax-M2: <minimax:tool_call><invoke name="N"><parameter name="K">V</parameter></invoke>...',
    families=("MiniMax-M2", "MiniMax-M2.1"),
    writing=Writing(
        block_gap="\n",
        name_gap="\n",
        param_gap="\n",
        call_gap="\n",
        atomic=("<minimax:tool_call>", "</minimax:tool_call>"),
        xgrammar="minimax_xml",
    ),
)

MINIMAX_M2_REASONING = register_reasoning_dialect(
    ReasoningDialect(
        name="minimax_m2",
        start=THINK_START,
        end=THINK_END,
        starts_open=True,
        tokenizers=("minimax-m2",),
        turn_markers=("]~b]", "[e~["),
        families=("MiniMax-M2", "MiniMax-M2.1"),
    )
)

# vLLM's minimax_m2_append_think: no split; the content keeps the reasoning with the prompt's
# <think> put back, for clients that send the whole thinking back (MiniMax's interleaved thinking).
MINIMAX_M2_APPEND_THINK = register_reasoning_dialect(
    replace(MINIMAX_M2_REASONING, name="minimax_m2_append_think", inline=True)
)

# -- MiniMax-M3 -------------------------------------------------------------------------------

MINIMAX_M3_MARKER = "]<]minimax[>["
"""The marker MiniMax-M3 writes before every tool-call tag."""

MINIMAX_M3_FORMAT = XmlElementFormat(prefix=MINIMAX_M3_MARKER)

MINIMAX_M3 = declare(
    "minimax_m3",
    MINIMAX_M3_FORMAT,
    token_prefixes=all_prefixes(MINIMAX_M3_FORMAT.opener),
    description=(
        'MiniMax-M3: ]<]minimax[>[<tool_call> ]<]minimax[>[<invoke name="N"> ]<]minimax[>[<KEY>V]<]minimax[>[</KEY>'
    ),
    families=("MiniMax-M3",),
)

MINIMAX_M3_REASONING = register_reasoning_dialect(
    ReasoningDialect(
        name="minimax_m3",
        start="<mm:think>",
        end="</mm:think>",
        starts_open=True,
        token_prefixes=all_prefixes("<mm:think>", "</mm:think>"),
        families=("MiniMax-M3",),
    )
)

# MiniMax (shared/dialects.md section 10; M3: every tag prefixed, one element per parameter)
PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("MiniMaxAI/MiniMax-M2", "minimax_m2", "minimax_m2"),
    ("MiniMaxAI/MiniMax-M2.1", "minimax_m2", "minimax_m2"),
    ("MiniMaxAI/MiniMax-M3", "minimax_m3", "minimax_m3"),
)
