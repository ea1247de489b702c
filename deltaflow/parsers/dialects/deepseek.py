"""DeepSeek: the ``deepseek_v3``, ``deepseek_v31``, ``deepseek_v32`` and ``deepseek_v4`` tool dialects
and the ``deepseek_r1``, ``deepseek_v3`` and ``deepseek_v4`` reasoning dialects.

Tool dialects (``｜`` is U+FF5C and ``▁`` U+2581, shared/dialects.md section 0,
"Full-width bars"):

* ``deepseek_v3`` (section 8a, DeepSeek-V3/V3-0324/R1/R1-0528; the special-token
  driver, ``parsers/drivers/special_tokens.py``): ``<｜tool▁calls▁begin｜>``,
  then per call
  ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>``,
  more calls separated by ``\\n``, then ``<｜tool▁calls▁end｜>``. The
  fence may close right after the object (llama.cpp's R1 vectors). Text
  after the section is content (vLLM keeps it too).
* ``deepseek_v31`` (section 8b, the same driver):
  ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>``,
  no type field and no fence, calls concatenated inside the same section.
* Token prefixes of these two, checked in tests/unit/parsers/test_special_family.py:
  every DeepSeek marker is one special token in shared/tokenizers/deepseek-v3
  and deepseek-v3.1 (ids 128806-128809, 128814), so ``token_prefixes=()``.
* ``deepseek_v32`` (section 8c, DSML; the XML function driver,
  ``parsers/drivers/xml_function.py``, values typed by the tool's JSON schema,
  ``_core/schema.py``): ``<｜DSML｜function_calls>`` / ``<｜DSML｜invoke name="N">`` /
  ``<｜DSML｜parameter name="K" string="true|false">V</｜DSML｜parameter>``.
  ``string="true"``: raw text; ``"false"``: a JSON value;
  a schema for the parameter wins over the attribute (vLLM). A bare invoke
  without the wrapper is a call; a JSON object as the invoke body is
  accepted (SGLang); a lone ``arguments`` / ``input`` parameter the schema
  does not know, holding an object of the schema's keys, is unwrapped
  (vLLM). DSML is text in the DeepSeek tokenizer, split at ``<`` ``｜``
  ``DS`` ``ML`` ``｜`` ``function`` ``_c`` ``alls`` ``>`` and ``inv`` ``oke``
  (checked against deepseek-v3.1; "invoke" merges with letters glued to it,
  so every split of it is declared).
* ``deepseek_v4`` (DeepSeek-V4; llama.cpp vectors): DeepSeek-V3.2's DSML
  with the block ``<｜DSML｜tool_calls>`` ... ``</｜DSML｜tool_calls>``
  (corpus README). DSML is text; the splits are those of the DeepSeek-V3.1
  vocabulary (``<`` ``｜`` ``DS`` ``ML`` ``｜`` ``tool`` ``_c`` ``alls`` ``>``).

Reasoning dialects (``<think>``...``</think>``; token prefixes in :mod:`._think`):

* ``deepseek_r1`` (shared/dialects.md sections 0 and 8a; DeepSeek-R1, R1-0528
  and the R1-Distill models): starts inside reasoning unless
  ``enable_thinking=False`` (the convention in :mod:`._think`).
  DeepSeek-V3.1/R1-0528 encode ``<think>``/``</think>`` as single tokens;
  R1-Distill-Qwen (Qwen2.5) and R1-Distill-Llama (Llama 3) split them, so the
  split prefixes are declared.
* ``deepseek_v3`` (DeepSeek-V3.1/V3.2 hybrid): reasoning only when
  ``enable_thinking=True`` (vLLM's and LMDeploy's default is off); then the
  output starts inside reasoning (the prompt ends ``<｜Assistant｜><think>``).
* ``deepseek_v4`` (llama.cpp's handler; the corpus assumes the name): the
  DeepSeek ``<think>`` protocol, and a call section inside unclosed reasoning
  ends it, as for Kimi K2.
"""

from __future__ import annotations

from dataclasses import replace

from ..declare import declare
from ..drivers.special_tokens import HeaderKind, SpecialTokenFormat
from ..drivers.xml_function import XmlFunctionFormat
from ..registry import register_reasoning_dialect
from ..spec import ReasoningDialect, Writing, all_prefixes
from ._think import SPLIT_THINK_PREFIXES, THINK_END, THINK_START

__all__ = (
    "DEEPSEEK_R1",
    "DEEPSEEK_V3",
    "DEEPSEEK_V31",
    "DEEPSEEK_V32",
    "DEEPSEEK_V3_REASONING",
    "DEEPSEEK_V4",
    "DEEPSEEK_V4_REASONING",
    "DSML_FORMAT",
    "DSML_V4_FORMAT",
    "DSML_V4_OPEN",
    "PRESETS",
)

# -- DeepSeek-V3 / R1, V3.1: special-token sections ------------------------------------------

# DeepSeek: full-width bar U+FF5C and U+2581 (dialects.md section 0, "Full-width bars").
_DS_CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
_DS_CALLS_END = "<｜tool▁calls▁end｜>"
_DS_CALL_BEGIN = "<｜tool▁call▁begin｜>"
_DS_CALL_END = "<｜tool▁call▁end｜>"
_DS_SEP = "<｜tool▁sep｜>"

_DS_TURN = ("<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>")

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
    description=(
        "DeepSeek-V3/R1: <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME + ```json fence, in <｜tool▁calls▁begin｜>"
    ),
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

# -- DeepSeek-V3.2, V4: DSML ------------------------------------------------------------------

DSML_WRITING = Writing(block_gap="\n", name_gap="\n", param_gap="\n", call_gap="\n", xgrammar="deepseek_xml")
"""How DeepSeek's templates lay DSML out."""

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
    description=(
        'DeepSeek-V3.2 DSML: <｜DSML｜function_calls><｜DSML｜invoke name="N">'
        '<｜DSML｜parameter name="K" string="true|false">'
    ),
    families=("DeepSeek-V3.2", "DeepSeek-V3.2-Exp", "DeepSeek-V3.2-Speciale"),
    writing=DSML_WRITING,
)

DSML_V4_OPEN = "<｜DSML｜tool_calls>"
"""DeepSeek-V4's DSML block opener (text)."""

DSML_V4_FORMAT = replace(DSML_FORMAT, block_open=DSML_V4_OPEN, block_close="</｜DSML｜tool_calls>")

DEEPSEEK_V4 = declare(
    "deepseek_v4",
    DSML_V4_FORMAT,
    token_prefixes=(
        "<", "<｜", "<｜DS", "<｜DSML", "<｜DSML｜", "<｜DSML｜tool", "<｜DSML｜tool_c", "<｜DSML｜tool_calls",
        # "invoke" is BPE-merged with letters glued after it, so any split of it can occur.
        "<｜DSML｜i", "<｜DSML｜in", "<｜DSML｜inv", "<｜DSML｜invo", "<｜DSML｜invok",
    ),
    tokenizers=("deepseek-v3.1",),
    description=(
        'DeepSeek-V4 DSML: <｜DSML｜tool_calls><｜DSML｜invoke name="N">'
        '<｜DSML｜parameter name="K" string="true|false">'
    ),
    families=("DeepSeek-V4",),
    writing=DSML_WRITING,
)

# -- reasoning --------------------------------------------------------------------------------

DEEPSEEK_R1 = register_reasoning_dialect(
    ReasoningDialect(
        name="deepseek_r1",
        start=THINK_START,
        end=THINK_END,
        starts_open=True,
        token_prefixes=SPLIT_THINK_PREFIXES,
        tokenizers=("deepseek-v3.1", "qwen2.5", "llama3"),
        turn_markers=_DS_TURN,
        families=("DeepSeek-R1", "DeepSeek-R1-0528", "DeepSeek-R1-Distill"),
    )
)

DEEPSEEK_V3_REASONING = register_reasoning_dialect(
    ReasoningDialect(
        name="deepseek_v3",
        start=THINK_START,
        end=THINK_END,
        starts_open=True,
        default_enabled=False,
        tokenizers=("deepseek-v3.1",),
        turn_markers=_DS_TURN,
        families=("DeepSeek-V3.1", "DeepSeek-V3.1-Terminus", "DeepSeek-V3.2"),
    )
)

# DeepSeek-V4 (llama.cpp's handler; the corpus assumes the name): the DeepSeek <think>
# protocol, and a call section inside unclosed reasoning ends it, as for Kimi K2, so
# the calls are parsed and the reasoning before them stays reasoning.
DEEPSEEK_V4_REASONING = register_reasoning_dialect(
    ReasoningDialect(
        name="deepseek_v4",
        start=THINK_START,
        end=THINK_END,
        starts_open=True,
        # <think>/</think> are single DeepSeek tokens; the DSML opener is split text.
        token_prefixes=all_prefixes(DSML_V4_OPEN),
        tokenizers=("deepseek-v3.1",),
        turn_markers=_DS_TURN,
        implicit_end=(DSML_V4_OPEN,),
        families=("DeepSeek-V4",),
    )
)

# DeepSeek (shared/dialects.md section 8)
PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("deepseek-ai/DeepSeek-R1", "deepseek_v3", "deepseek_r1"),
    ("deepseek-ai/DeepSeek-R1-0528", "deepseek_v3", "deepseek_r1"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", None, "deepseek_r1"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", None, "deepseek_r1"),
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", None, "deepseek_r1"),
    ("deepseek-ai/DeepSeek-V3", "deepseek_v3", None),
    ("deepseek-ai/DeepSeek-V3-0324", "deepseek_v3", None),
    ("deepseek-ai/DeepSeek-V3.1", "deepseek_v31", "deepseek_v3"),
    ("deepseek-ai/DeepSeek-V3.1-Terminus", "deepseek_v31", "deepseek_v3"),
    ("deepseek-ai/DeepSeek-V3.2-Exp", "deepseek_v32", "deepseek_v3"),
    ("deepseek-ai/DeepSeek-V3.2", "deepseek_v32", "deepseek_v3"),
)
