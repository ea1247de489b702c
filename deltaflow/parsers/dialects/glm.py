"""GLM (Zhipu AI / Z.ai): the ``glm45`` and ``glm47`` tool dialects and the ``glm45`` reasoning dialect.

* ``glm45`` / ``glm47`` (shared/dialects.md section 7; the XML function
  driver, ``parsers/drivers/xml_function.py``):
  ``<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>``;
  GLM-4.5/4.6 put newlines after the name and after each pair, GLM-4.7 none;
  both are parsed whitespace-insensitively (a literal backslash-n counts as
  whitespace too, as SGLang accepts); ``NAME`` alone is a call with ``{}``;
  values verbatim. Every tag is a GLM special token (listed in
  shared/tokenizers/glm-4.5/special_tokens.json, partly unverified; no
  vocabulary is available), so no prefix is declared. Ling 3 (:mod:`.ling`)
  writes the same format.
* ``glm45`` reasoning (GLM-4.5 to GLM-5): ``<think>``...``</think>``, starting
  inside reasoning (vLLM's tests read tag-less output as reasoning; GLM-4.7's
  prompt opens ``<think>``); ``<tool_call>`` ends reasoning when ``</think>``
  is missing (GLM-4.7 calls tools from inside an unclosed think block).
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.xml_function import XmlFunctionFormat
from ..registry import register_reasoning_dialect
from ..spec import ReasoningDialect, Writing
from ._think import THINK_END, THINK_START

__all__ = ("GLM45", "GLM45_REASONING", "GLM47", "GLM_FORMAT", "PRESETS")


_GLM_TOKENS = ("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")

GLM_FORMAT = XmlFunctionFormat(
    block_open="<tool_call>",
    block_close="</tool_call>",
    call_open=None,
    call_close=None,
    name_style="bare",
    param_open="<arg_key>",
    key_style="text",
    key_end="</arg_key>",
    value_open="<arg_value>",
    value_close="</arg_value>",
    literal_newline_ws=True,
)

GLM45 = declare(
    "glm45",
    GLM_FORMAT,
    tokenizers=("glm-4.5",),
    description="GLM-4.5/4.6: <tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>\\n</tool_call>",
    families=("GLM-4.5", "GLM-4.5-Air", "GLM-4.6", "GLM-4.6V"),
    writing=Writing(
        name_gap="\n",
        key_gap="\n",
        param_gap="\n",
        separator="\n",
        atomic=_GLM_TOKENS,
        xgrammar="glm_xml",
    ),
)

GLM47 = declare(
    "glm47",
    GLM_FORMAT,
    tokenizers=("glm-4.5",),
    description="GLM-4.7/5: <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>",
    families=("GLM-4.7", "GLM-4.7-Flash", "GLM-5"),
    writing=Writing(atomic=_GLM_TOKENS, xgrammar="glm_xml"),
)

GLM45_REASONING = register_reasoning_dialect(
    ReasoningDialect(
        name="glm45",
        start=THINK_START,
        end=THINK_END,
        starts_open=True,
        implicit_end=("<tool_call>",),
        tokenizers=("glm-4.5",),
        turn_markers=("<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "<|endoftext|>"),
        families=("GLM-4.5", "GLM-4.5-Air", "GLM-4.6", "GLM-4.7", "GLM-4.7-Flash", "GLM-5"),
    )
)

# GLM (shared/dialects.md section 7)
PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("zai-org/GLM-4.5", "glm45", "glm45"),
    ("zai-org/GLM-4.5-Air", "glm45", "glm45"),
    ("zai-org/GLM-4.6", "glm45", "glm45"),
    ("zai-org/GLM-4.7", "glm47", "glm45"),
)
