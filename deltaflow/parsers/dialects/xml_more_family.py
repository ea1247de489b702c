"""More XML-like tool dialects: MiniCPM5 and MiniMax-M3 (llama.cpp's handlers; issue 4).

Facts are the corpus vectors ``llamacpp:minicpm5`` and ``llamacpp:minimax_m3``
(shared/corpus/llamacpp.jsonl, from llama.cpp's ``tests/test-chat.cpp`` with
``models/templates/openbmb-MiniCPM5-1B.jinja`` and ``MiniMax-M3.jinja``).

Tool parsers:

* ``minicpm5`` (MiniCPM5): ``<function name="N"><param name="K">V</param></function>``,
  several calls one after another (a newline between them), without an outer
  block; on the XML-function driver (``parsers/drivers/xml_function.py``), a call
  opening a block at ``<function `` (a space, as the template writes it) when
  a ``name`` attribute follows (anything else stays text). Values are raw text typed
  by the tool's schema; a value may be wrapped in ``<![CDATA[...]]>``, which
  lets it hold a literal ``</param>`` (the wrapper is dropped, the content
  kept verbatim: the ``cdata`` option of the driver). Reasoning is the
  ``qwen3`` parser (the prompt pre-opens ``<think>`` when thinking is on).
* ``minimax_m3`` (MiniMax-M3): every tag behind the marker ``]<]minimax[>[``:
  ``M<tool_call>\\nM<invoke name="N">M<KEY>value M</KEY>...M</invoke>\\nM</tool_call>``;
  the parameter name is the element name, and an object parameter is written
  as one child element per key (nested), which becomes a JSON object typed by
  the schema's nested ``properties`` (an array-typed element's children are
  its items). A dedicated driver, ``parsers/drivers/xml_element.py``.

Reasoning parser:

* ``minimax_m3``: ``<mm:think>``...``</mm:think>``. It starts inside
  reasoning when thinking is on (as ``qwen3``): the vectors show a turn
  without reasoning as a bare ``</mm:think>`` before the content, i.e. the
  prompt opens the think block, and a ``<mm:think>`` the model writes itself
  is consumed as the opening marker.

Token prefixes: shared/tokenizers has no MiniCPM or MiniMax-M3 vocabulary
(``minimax-m2`` holds only M2's special tokens), so every marker is taken to
be plain text that a tokenizer may split anywhere: every proper prefix of
every opener is declared (``all_prefixes``), for the tool and the reasoning
markers alike. (The MiniMax marker is likely one special token; declaring
all prefixes only holds a trailing ``]`` briefly, never changes a result.)

Stable-prefix guarantee: as the drivers state.
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.xml_element import XmlElementFormat
from ..drivers.xml_function import XmlFunctionFormat
from ..registry import register_reasoning_dialect
from ..spec import ReasoningDialect, all_prefixes

__all__ = ("MINICPM5_OPENER", "MINICPM5_FORMAT", "MINIMAX_M3_MARKER", "MINIMAX_M3_FORMAT")

MINICPM5_FORMAT = XmlFunctionFormat(
    block_open=None,
    block_close=None,
    call_open="<function",
    call_close="</function>",
    name_style="attr",
    param_open="<param",
    key_style="attr",
    key_end=">",
    value_open=None,
    value_close="</param>",
    bare_call=True,
    cdata=True,
)

MINIMAX_M3_MARKER = "]<]minimax[>["
"""The marker MiniMax-M3 writes before every tool-call tag."""

MINIMAX_M3_FORMAT = XmlElementFormat(prefix=MINIMAX_M3_MARKER)

# The feeder opens a block at "<function " (the space the template writes before ``name``), not at
# "<function": that is a proper prefix of Qwen3-Coder's "<function=" and OLMo 3's "<function_calls>",
# and no registered marker may be a prefix of another (tests/unit/_core/test_holdback.py). The
# driver itself starts at "<function" and reads the attributes after it.
MINICPM5_OPENER = "<function "
"""What opens a MiniCPM5 block in text."""

MINICPM5 = declare(
    "minicpm5",
    MINICPM5_FORMAT,
    openers=(MINICPM5_OPENER,),
    token_prefixes=all_prefixes(MINICPM5_OPENER),
    description='MiniCPM5: <function name="N"><param name="K">V or <![CDATA[V]]></param></function>',
    families=("MiniCPM5",),
)


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
