"""MiniCPM (OpenBMB): the ``minicpm5`` tool dialect (llama.cpp's handler; issue 4).

Facts are the corpus vector ``llamacpp:minicpm5`` (shared/corpus/llamacpp.jsonl,
from llama.cpp's ``tests/test-chat.cpp`` with
``models/templates/openbmb-MiniCPM5-1B.jinja``):

* ``minicpm5``: ``<function name="N"><param name="K">V</param></function>``,
  several calls one after another (a newline between them), without an outer
  block; on the XML-function driver (``parsers/drivers/xml_function.py``), a call
  opening a block at ``<function `` (a space, as the template writes it) when
  a ``name`` attribute follows (anything else stays text). Values are raw text typed
  by the tool's schema; a value may be wrapped in ``<![CDATA[...]]>``, which
  lets it hold a literal ``</param>`` (the wrapper is dropped, the content
  kept verbatim: the ``cdata`` option of the driver). Reasoning is the
  ``qwen3`` parser (the prompt pre-opens ``<think>`` when thinking is on).
* Token prefixes: shared/tokenizers has no MiniCPM vocabulary, so the opener
  is taken to be plain text that a tokenizer may split anywhere: every proper
  prefix of it is declared (``all_prefixes``).
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.xml_function import XmlFunctionFormat
from ..spec import Writing, all_prefixes

__all__ = ("MINICPM5", "MINICPM5_FORMAT", "MINICPM5_OPENER", "PRESETS")

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
    writing=Writing(separator="\n"),
)

PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("openbmb/MiniCPM5-1B", "minicpm5", "qwen3"),
)
