"""XML-like, function-first tool dialects and their reasoning protocols.

Tool parsers (one driver, ``parsers/drivers/xml_function.py``; values typed by the
tool's JSON schema, ``_core/schema.py``):

* ``qwen3_coder`` (shared/dialects.md section 6):
  ``<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>``;
  exactly one leading and one trailing newline of a value are framing; a
  missing ``</parameter>``, ``</function>`` or ``</tool_call>`` is
  tolerated, and so is a call that starts at ``<function=`` without
  ``<tool_call>`` (vLLM, llama.cpp). ``<tool_call>`` is one Qwen token;
  ``<function=`` is text (``<`` ``function`` ``=get``...), so a token
  boundary can leave ``<`` or ``<function`` (checked against the qwen3
  tokenizer).
* ``glm45`` / ``glm47`` (section 7):
  ``<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>``;
  GLM-4.5/4.6 put newlines after the name and after each pair, GLM-4.7 none;
  both are parsed whitespace-insensitively (a literal backslash-n counts as
  whitespace too, as SGLang accepts); ``NAME`` alone is a call with ``{}``;
  values verbatim. Every tag is a GLM special token (listed in
  shared/tokenizers/glm-4.5/special_tokens.json, partly unverified; no
  vocabulary is available), so no prefix is declared.
* ``minimax_m2`` (section 10):
  ``<minimax:tool_call><invoke name="N"><parameter name="K">V</parameter></invoke>...</minimax:tool_call>``;
  several invokes in one block are parallel calls; values verbatim (vLLM's
  tests keep surrounding whitespace). The block tags are special tokens
  (shared/tokenizers/minimax-m2/special_tokens.json, from a third-party mock;
  vLLM refuses to start without their ids); ``<invoke`` and ``<parameter``
  are text inside the block.
* ``seed_oss`` (section 12): Qwen3-Coder's calls inside
  ``<seed:tool_call>...</seed:tool_call>`` (special tokens: vLLM raises
  without their ids; no Seed tokenizer is available here). A value written
  on its own lines (``<parameter=K>\\nV\\n</parameter>``) loses those two
  newlines; an inline value keeps a trailing newline of its own (llama.cpp).
* ``deepseek_v32`` (section 8c, DSML):
  ``<｜DSML｜function_calls>`` / ``<｜DSML｜invoke name="N">`` /
  ``<｜DSML｜parameter name="K" string="true|false">V</｜DSML｜parameter>``
  (``｜`` is U+FF5C). ``string="true"``: raw text; ``"false"``: a JSON value;
  a schema for the parameter wins over the attribute (vLLM). A bare invoke
  without the wrapper is a call; a JSON object as the invoke body is
  accepted (SGLang); a lone ``arguments`` / ``input`` parameter the schema
  does not know, holding an object of the schema's keys, is unwrapped
  (vLLM). DSML is text in the DeepSeek tokenizer, split at ``<`` ``｜``
  ``DS`` ``ML`` ``｜`` ``function`` ``_c`` ``alls`` ``>`` and ``inv`` ``oke``
  (checked against deepseek-v3.1; "invoke" merges with letters glued to it,
  so every split of it is declared).

Reasoning parsers:

* ``glm45`` (GLM-4.5 to GLM-5): ``<think>``...``</think>``, starting inside
  reasoning (vLLM's tests read tag-less output as reasoning; GLM-4.7's prompt
  opens ``<think>``); ``<tool_call>`` ends reasoning when ``</think>`` is
  missing (GLM-4.7 calls tools from inside an unclosed think block).
* ``minimax_m2``: ``<think>``...``</think>``, always opened by the prompt.
  ``minimax_m2_append_think`` (vLLM's name) does not split: the output is
  content with the prompt's ``<think>`` put back in front, for clients that
  send the thinking back in the next turn.
* ``seed_oss``: ``<seed:think>``...``</seed:think>``; starts inside
  reasoning as vLLM's parser does (with ``thinking_budget=0`` the prompt opens
  it; otherwise the model writes ``<seed:think>``, which is consumed).
* ``deepseek_v3`` (DeepSeek-V3.1/V3.2 hybrid): reasoning only when
  ``enable_thinking=True`` (vLLM's and LMDeploy's default is off); then the
  output starts inside reasoning (the prompt ends ``<｜Assistant｜><think>``).
"""

from __future__ import annotations

from dataclasses import replace

from ..declare import declare
from ..drivers.xml_function import XmlFunctionFormat
from ..registry import register_reasoning_dialect
from ..spec import ReasoningDialect

__all__ = ("DSML_FORMAT", "GLM_FORMAT", "MINIMAX_M2_FORMAT", "QWEN3_CODER_FORMAT", "SEED_OSS_FORMAT")


QWEN3_CODER_FORMAT = XmlFunctionFormat(
    block_open="<tool_call>",
    block_close="</tool_call>",
    call_open="<function=",
    call_close="</function>",
    name_style="equals",
    param_open="<parameter=",
    key_style="equals",
    key_end=">",
    value_open=None,
    value_close="</parameter>",
    strip="each",
    bare_call=True,
    open_ends_value=True,
)

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

DSML_FORMAT = XmlFunctionFormat(
    block_open="<｜DSML｜function_calls>",
    block_close="</｜DSML｜function_calls>",
    call_open="<｜DSML｜invoke",
    call_close="</｜DSML｜invoke>",
    name_style="attr",
    param_open="<｜DSML｜parameter",
    key_style="attr",
    key_end=">",
    value_open=None,
    value_close="</｜DSML｜parameter>",
    bare_call=True,
    type_attr="string",
    json_body=True,
    unwrap_keys=("arguments", "input"),
)

QWEN3_CODER = declare(
    "qwen3_coder",
    QWEN3_CODER_FORMAT,
    token_prefixes=("<", "<function"),
    tokenizers=("qwen3",),
    description="Qwen3-Coder XML: <tool_call><function=NAME><parameter=KEY>value</parameter></function></tool_call>",
    families=("Qwen3-Coder-30B-A3B", "Qwen3-Coder-480B-A35B", "Qwen3-Coder-Next", "Qwen3.5"),
)

GLM45 = declare(
    "glm45",
    GLM_FORMAT,
    tokenizers=("glm-4.5",),
    description="GLM-4.5/4.6: <tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>\\n</tool_call>",
    families=("GLM-4.5", "GLM-4.5-Air", "GLM-4.6", "GLM-4.6V"),
)

GLM47 = declare(
    "glm47",
    GLM_FORMAT,
    tokenizers=("glm-4.5",),
    description="GLM-4.7/5: <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>",
    families=("GLM-4.7", "GLM-4.7-Flash", "GLM-5"),
)

MINIMAX_M2 = declare(
    "minimax_m2",
    MINIMAX_M2_FORMAT,
    tokenizers=("minimax-m2",),
    description='MiniMax-M2: <minimax:tool_call><invoke name="N"><parameter name="K">V</parameter></invoke>...',
    families=("MiniMax-M2", "MiniMax-M2.1"),
)

SEED_OSS = declare(
    "seed_oss",
    SEED_OSS_FORMAT,
    description="Seed-OSS: <seed:tool_call><function=NAME><parameter=KEY>V</parameter></function></seed:tool_call>",
    families=("Seed-OSS-36B-Instruct", "Seed-OSS-36B-Base"),
)

DEEPSEEK_V32 = declare(
    "deepseek_v32",
    DSML_FORMAT,
    token_prefixes=(
        "<", "<｜", "<｜DS", "<｜DSML", "<｜DSML｜", "<｜DSML｜function", "<｜DSML｜function_c",
        "<｜DSML｜function_calls",
        # "invoke" is BPE-merged with letters glued after it, so any split of it can occur.
        "<｜DSML｜i", "<｜DSML｜in", "<｜DSML｜inv", "<｜DSML｜invo", "<｜DSML｜invok",
    ),
    tokenizers=("deepseek-v3.1",),
    description='DeepSeek-V3.2 DSML: <｜DSML｜function_calls><｜DSML｜invoke name="N"><｜DSML｜parameter name="K" string="true|false">',
    families=("DeepSeek-V3.2", "DeepSeek-V3.2-Exp", "DeepSeek-V3.2-Speciale"),
)

GLM45_REASONING = register_reasoning_dialect(
    ReasoningDialect(
        name="glm45",
        start="<think>",
        end="</think>",
        starts_open=True,
        implicit_end=("<tool_call>",),
        tokenizers=("glm-4.5",),
        turn_markers=("<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "<|endoftext|>"),
        families=("GLM-4.5", "GLM-4.5-Air", "GLM-4.6", "GLM-4.7", "GLM-4.7-Flash", "GLM-5"),
    )
)

MINIMAX_M2_REASONING = register_reasoning_dialect(
    ReasoningDialect(
        name="minimax_m2",
        start="<think>",
        end="</think>",
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

DEEPSEEK_V3_REASONING = register_reasoning_dialect(
    ReasoningDialect(
        name="deepseek_v3",
        start="<think>",
        end="</think>",
        starts_open=True,
        default_enabled=False,
        tokenizers=("deepseek-v3.1",),
        turn_markers=("<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"),
        families=("DeepSeek-V3.1", "DeepSeek-V3.1-Terminus", "DeepSeek-V3.2"),
    )
)
