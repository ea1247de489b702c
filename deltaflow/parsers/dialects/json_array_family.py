"""JSON-envelope tool dialects beyond Hermes: JSON arrays of calls, Granite, GigaChat, ERNIE, ...

All are declarations of the JSON envelope driver (``parsers/drivers/json_envelope.py``):
each call is ``{"name": ..., "arguments": {...}}`` (or ``{"NAME": {...}}``),
its arguments streamed as their JSON source text; in the array form each
array element is one call. Facts: shared/dialects.md section 14 and the peer
parsers named below.

JSON array of calls, ``OPEN [{call}, ...] CLOSE``:

* ``granite`` (Granite 3.0-3.3): ``<|tool_call|>`` (3.0, one special token)
  or ``<tool_call>`` (3.1+, plain text), then the array; no closer (the
  ``]`` ends it). A bare ``[`` opens the array where only whitespace came
  before in the channel (section 14: "output must start with it").
* ``hunyuan_a13b`` (Hunyuan-A13B): ``<tool_calls>[...]</tool_calls>``; every
  marker is split text (section 14).
* ``jamba`` (AI21 Jamba): ``<tool_calls>[...]</tool_calls>``; vLLM looks up
  both tags' ids, so they are single tokens.
* ``apriel`` (ServiceNow Apriel, tool side; llama.cpp ``apriel``):
  ``<tool_calls>[...]</tool_calls>``.
* ``nemotron`` (NVIDIA Nemotron-Nano v2, Llama-Nemotron; llama.cpp
  ``nemotron_nano_v2``): ``<TOOLCALL>[...]</TOOLCALL>``.
* ``xlam`` (Salesforce xLAM-2): the array bare at the start of the output, in
  a ```` ```json ```` (or ```` ``` ````) fence, after ``[TOOL_CALLS]``, or in
  ``<tool_call>...</tool_call>`` (vLLM's xlam patterns); all markers are text.
* ``phi4_mini_json`` (Phi-4-mini) and ``firefunction_v2`` (FireFunction v2,
  llama.cpp): ``functools[...]``, no closer.
* ``apertus`` (Swiss AI Apertus; llama.cpp and vLLM ``apertus``):
  ``<|tools_prefix|>[{"NAME": {args}}, ...]<|tools_suffix|>``, the function
  name is the object's one key.

One object per call:

* ``granite4`` (Granite 4.0): Hermes' ``<tool_call>{...}</tool_call>``
  (vLLM runs its Hermes tests on it).
* ``ernie45`` (ERNIE-4.5, tool side): ``<tool_call>\\n{...}\\n</tool_call>\\n``
  per call; vLLM looks up the ids of ``<tool_call>`` / ``</tool_call>``. The
  blanks after ``</tool_call>`` are framing, consumed with the call (vLLM's
  parser skips newline tokens around calls).
  ERNIE's ``</think>`` (output starts in reasoning) and its
  ``<response>...</response>`` wrapper belong to the ``ernie45`` reasoning
  parser, not to this dialect.
* ``longcat`` (Meituan LongCat-Flash):
  ``<longcat_tool_call>{...}</longcat_tool_call>``.
* ``granite-20b-fc`` (Granite-20B-FunctionCalling): ``<function_call> {...}``
  per call, no closer; calls follow each other separated by newlines.
* ``gigachat3`` (GigaChat 3 / 3.1; SGLang and llama.cpp ``gigachat3``,
  llama.cpp ``gigachat3_1``): ``<|message_sep|>\\n\\nfunction call<|role_sep|>\\n{...}``
  (3) or ``<|function_call|>{...}`` (3.1), one call; a ``</s>`` written as
  text after the object is the end of the turn and is consumed with the
  call (vLLM and SGLang drop it).

Stable-prefix guarantee (the driver's): outside a block, only a chunk tail
that may begin an opener is held; inside one, a partial marker, escape,
number or literal, the arguments text after its last safe position, a key
or a name until its closing quote, and the blanks after a call until what
follows them is known.

Token boundaries: prefixes are declared only where the real tokenizer is
known to keep a marker whole; no tokenizer of these families is in
shared/tokenizers, so a marker not known to be one token is declared with
every proper prefix (holding more is never wrong, only later).
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.json_envelope import JsonEnvelopeFormat
from ..spec import all_prefixes

__all__ = (
    "APERTUS", "APRIEL", "COMMAND_R7B", "ERNIE45", "FIREFUNCTION_V2", "GIGACHAT3", "GRANITE", "GRANITE4", "GRANITE_20B_FC",
    "HUNYUAN_A13B", "JAMBA", "LONGCAT", "NEMOTRON", "PHI4_MINI_JSON", "XLAM",
)

_ARGS = ("arguments", "parameters")

GRANITE = declare(
    "granite",
    JsonEnvelopeFormat(
        open=("<|tool_call|>",),
        close=None,
        variants=((("<tool_call>",), None),),
        args_fields=_ARGS,
        array=True,
        bare_object=True,
    ),
    start_openers=("[",),
    # <|tool_call|> is one special token (vLLM matches it by id); <tool_call> is text in Granite 3.1+.
    token_prefixes=all_prefixes("<tool_call>"),
    description='Granite 3.x: [<|tool_call|> or <tool_call>][{"name", "arguments"}, ...]',
    families=("Granite 3.0", "Granite 3.1", "Granite 3.2", "Granite 3.3"),
)

GRANITE4 = declare(
    "granite4",
    JsonEnvelopeFormat(open=("<tool_call>",), close="</tool_call>", args_fields=_ARGS),
    token_prefixes=all_prefixes("<tool_call>"),
    description='Granite 4.0: <tool_call>{"name", "arguments"}</tool_call>',
    families=("Granite 4.0",),
)

GRANITE_20B_FC = declare(
    "granite-20b-fc",
    JsonEnvelopeFormat(open=("<function_call>",), close=None, args_fields=_ARGS),
    token_prefixes=all_prefixes("<function_call>"),
    description='Granite-20B-FunctionCalling: <function_call> {"name", "arguments"} per call',
    families=("Granite-20B-FunctionCalling",),
)

HUNYUAN_A13B = declare(
    "hunyuan_a13b",
    JsonEnvelopeFormat(open=("<tool_calls>",), close="</tool_calls>", args_fields=_ARGS, array=True),
    token_prefixes=all_prefixes("<tool_calls>"),  # section 14: every Hunyuan marker is split text
    description='Hunyuan-A13B: <tool_calls>[{"name", "arguments"}, ...]</tool_calls>',
    families=("Hunyuan-A13B",),
)

ERNIE45 = declare(
    "ernie45",
    # The newlines ERNIE writes before <tool_call> and after each </tool_call> are framing (vLLM's
    # parser skips those newline tokens).
    JsonEnvelopeFormat(open=("<tool_call>",), close="</tool_call>", args_fields=_ARGS, trailing_blanks=True),
    lead_blanks=True,
    token_prefixes=(),  # vLLM's ernie45 parser looks up the id of <tool_call>: one token
    description='ERNIE-4.5: <tool_call>\\n{"name", "arguments"}\\n</tool_call>',
    families=("ERNIE-4.5", "ERNIE-4.5-Thinking"),
)

XLAM = declare(
    "xlam",
    JsonEnvelopeFormat(
        open=("<tool_call>",),
        close="</tool_call>",
        variants=((("[TOOL_CALLS]",), None), (("```json",), "```"), (("```",), "```")),
        args_fields=_ARGS,
        array=True,
        bare_object=True,
    ),
    start_openers=("[",),
    lead_blanks=True,  # the newline before a fence or <tool_call> is framing (vLLM strips it)
    # xLAM-2 may think first: after its "...</think>" a bare array opens a block as at the start (vLLM).
    restart_after=("</think>",),
    token_prefixes=all_prefixes("<tool_call>", "[TOOL_CALLS]", "```", "</think>"),
    description="xLAM-2: a JSON array of calls, bare, fenced (```json), after [TOOL_CALLS] or in <tool_call>",
    families=("xLAM-2",),
)

JAMBA = declare(
    "jamba",
    JsonEnvelopeFormat(open=("<tool_calls>",), close="</tool_calls>", args_fields=_ARGS, array=True),
    lead_blanks=True,  # the space before <tool_calls> is framing (vLLM drops it)
    token_prefixes=(),  # vLLM's jamba parser looks up the ids of <tool_calls> / </tool_calls>
    description='AI21 Jamba: <tool_calls>[{"name", "arguments"}, ...]</tool_calls>',
    families=("Jamba 1.5", "Jamba 1.6", "Jamba 1.7"),
)

COMMAND_R7B = declare(
    "command_r7b",
    JsonEnvelopeFormat(
        open=("<|START_ACTION|>",),
        close="<|END_ACTION|>",
        name_field="tool_name",
        args_fields=("parameters",),
        array=True,
    ),
    # Cohere's action markers are special tokens (llama.cpp's Command R7B handler matches them whole);
    # the model's "tool_call_id" member is read past like any other member.
    token_prefixes=(),
    # The response wrapper is framing (the command_r7b reasoning parser drops it too; llama.cpp's
    # handler strips it with or without reasoning).
    framing=("<|START_RESPONSE|>", "<|END_RESPONSE|>"),
    description='Command R7B: <|START_ACTION|>[{"tool_call_id", "tool_name", "parameters"}, ...]<|END_ACTION|>',
    families=("Command R7B", "Command A"),
)

APRIEL = declare(
    "apriel",
    JsonEnvelopeFormat(open=("<tool_calls>",), close="</tool_calls>", args_fields=_ARGS, array=True),
    token_prefixes=all_prefixes("<tool_calls>"),
    description='Apriel (tool side): <tool_calls>[{"name", "arguments"}, ...]</tool_calls>',
    families=("Apriel-1.5-Thinker", "Apriel-1.6-Thinker"),
)

NEMOTRON = declare(
    "nemotron",
    JsonEnvelopeFormat(open=("<TOOLCALL>",), close="</TOOLCALL>", args_fields=_ARGS, array=True),
    token_prefixes=all_prefixes("<TOOLCALL>"),
    description='Nemotron: <TOOLCALL>[{"name", "arguments"}, ...]</TOOLCALL>',
    families=("NVIDIA-Nemotron-Nano-v2", "Llama-Nemotron"),
)

PHI4_MINI_JSON = declare(
    "phi4_mini_json",
    JsonEnvelopeFormat(open=("functools",), close=None, args_fields=_ARGS, array=True),
    token_prefixes=all_prefixes("functools"),
    description='Phi-4-mini: functools[{"name", "arguments"}, ...]',
    families=("Phi-4-mini",),
)

FIREFUNCTION_V2 = declare(
    "firefunction_v2",
    JsonEnvelopeFormat(open=("functools",), close=None, args_fields=_ARGS, array=True),
    token_prefixes=all_prefixes("functools"),
    description='FireFunction v2: functools[{"name", "arguments"}, ...]',
    families=("FireFunction v2",),
)

APERTUS = declare(
    "apertus",
    JsonEnvelopeFormat(open=("<|tools_prefix|>",), close="<|tools_suffix|>", array=True, name_keyed=True),
    # vLLM's apertus parser buffers partial <|tools_prefix|> text: treated as splittable.
    token_prefixes=all_prefixes("<|tools_prefix|>"),
    description='Apertus: <|tools_prefix|>[{"NAME": {args}}, ...]<|tools_suffix|>',
    families=("Apertus",),
)

LONGCAT = declare(
    "longcat",
    JsonEnvelopeFormat(open=("<longcat_tool_call>",), close="</longcat_tool_call>", args_fields=_ARGS),
    token_prefixes=all_prefixes("<longcat_tool_call>"),
    description='LongCat-Flash: <longcat_tool_call>{"name", "arguments"}</longcat_tool_call>',
    families=("LongCat-Flash",),
)

GIGACHAT3 = declare(
    "gigachat3",
    JsonEnvelopeFormat(
        open=("<|message_sep|>", "function call", "<|role_sep|>"),
        close="</s>",
        variants=((("<|function_call|>",), "</s>"),),
        args_fields=("arguments",),
    ),
    token_prefixes=all_prefixes("<|message_sep|>", "<|function_call|>"),
    description='GigaChat 3 / 3.1: <|message_sep|>function call<|role_sep|>{...} or <|function_call|>{...}',
    families=("GigaChat3", "GigaChat3.1"),
)
