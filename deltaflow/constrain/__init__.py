"""The request side of tool calling: ``tools`` + ``tool_choice`` -> what the engine needs.

:func:`prepare_request` validates a request's ``tools`` (OpenAI and Anthropic
forms, through :func:`~deltaflow.tools.normalize_tools`) and ``tool_choice``
and returns a frozen :class:`PreparedRequest`: the normalized tools, the names
the name filter allows, whether tool parsing is on, and, for ``"required"``,
a named function and (lazily) ``"auto"``, a :class:`ToolConstraint` written in
the dialect's exact syntax:

* ``structural_tag``: XGrammar's structural tag (the ``format`` form of
  XGrammar >= 0.1.25, with the XML argument styles ``qwen_xml``,
  ``glm_xml``, ``minimax_xml`` and ``deepseek_xml`` of XGrammar 0.2);
  consumed by vLLM and LMDeploy (``structured_outputs`` / ``response_format``
  ``{"type": "structural_tag", ...}``) and SGLang;
* ``legacy_structural_tag``: the older ``{"type": "structural_tag",
  "structures": [{"begin", "schema", "end"}], "triggers": [...]}`` form, for
  dialects whose calls are a fixed begin string, a JSON object and a fixed
  end string (None otherwise). It never forces a call: free text is allowed
  until a trigger;
* ``lark``: an equivalent Lark grammar for llguidance, the arguments of
  JSON dialects embedded as ``%json{...}``. Markers that are single tokens
  in the dialect's tokenizers are written as special-token references
  (``<tool_call>``); :meth:`ToolConstraint.lark_grammar` renders it for
  another set (e.g. token ids ``<[151657]>`` or plain text);
* ``gbnf``: the same grammar in llama.cpp's GBNF (the ``grammar`` field of
  ``/completion``), JSON arguments converted from the schema, markers as
  quoted literals; :meth:`ToolConstraint.gbnf_grammar` writes the markers
  that are tokens of a given tokenizer as ``<[ID]>``.

All describe the output *from the tool section on*. For ``"required"`` and
a named function the engine applies them to the whole output, or, when the
reasoning comes first, from the end of the reasoning on:
``ToolConstraint.after_reasoning_end`` names the end marker, and an engine
finds that point on token ids with
:class:`~deltaflow.parsers.token_reasoning.TokenReasoning`
(``is_reasoning_end`` / ``extract_content_ids``) before switching the
constraint on. For ``"auto"`` the constraint is lazy: the structural tag is
a ``triggered_tags`` format (any text until a trigger), and the Lark and GBNF
grammars are meant to be started at the first trigger (llama.cpp's lazy
grammars). ``functionary_v3_2`` has no lazy form (its calls follow the
prompt's ``>>>`` without a trigger): ``"auto"`` gets no constraint there.

The same declaration renders canonical text (:func:`render_tool_calls`), so
the grammar, the renderer and the parsers can be checked against one another.
Parameter types are read as the parsers read them (``_core/schema.py``:
``"str"`` is a string, ``"int"`` an integer ...), and schemas handed to JSON
grammars are normalized the same way. Argument grammars follow the schema:
XML key/value dialects write a string parameter as raw text without the
closing tag, other types as their JSON literal; parameters come in the
schema's ``properties`` order, required ones mandatory, optional ones
optional, no others. JSON arguments keep the schema's property order too
(llguidance and XGrammar do); other keys are allowed after them unless the
schema says ``additionalProperties: false``, which a ``strict`` tool gets on
every object that lists properties. Schema keywords on raw XML strings
other than ``enum``/``const`` (``pattern``, ``maxLength``) are not enforced.

What a misbehaving model can spin on is bounded: at most 8 blanks before the
section, at most 20 at each place of a JSON value, call ids of at most 9
digits; separators between calls are exact. Raw text values and the number
of calls are not bounded.

Per dialect (shared/dialects.md, and the declarations in deltaflow/parsers):
``hermes``, ``internlm``, ``llama3_json`` (no ``<|python_tag|>``; calls
joined by ``; ``), ``deepseek_v3``, ``deepseek_v31``, ``kimi_k2`` (id
``functions.NAME:N``), ``mistral`` (v11+:
``[TOOL_CALLS]NAME[CALL_ID]id[ARGS]{...}``, the id optional, i.e. the v13
form too), ``openai`` (Harmony, one call, an optional ``<|start|>assistant``
first), ``gigachat3`` (one call after GigaChat 3's
``<|message_sep|>\\n\\nfunction call<|role_sep|>\\n`` or GigaChat 3.1's
``<|function_call|>``) and ``functionary_v3_2`` (``NAME\\n{...}`` messages
joined by ``>>>``) have JSON arguments; ``qwen3_coder``, ``seed_oss``,
``glm45``, ``glm47``, ``minimax_m2``, ``deepseek_v32``, ``step3``,
``minicpm5`` (a value may be ``<![CDATA[...]]>``), ``kimi_k3`` (XTML: each
value's ``type`` attribute from the schema) and ``xml_tools`` XML key/value
ones (``xml_tools``: every value is text, triggers are ``<NAME>`` per tool);
``minimax_m3`` element-per-parameter XML (objects and arrays as nested
elements); ``gemma4`` its own ``{key:<|"|>text<|"|>,n:1}`` serialization;
``granite4``, ``granite-20b-fc``, ``ernie45``, ``longcat`` (one JSON envelope
per call), ``granite``, ``hunyuan_a13b``, ``jamba``, ``apriel``, ``nemotron``,
``xlam`` (the bare array), ``phi4_mini_json``, ``firefunction_v2``,
``apertus`` (``{"NAME": {...}}`` elements), ``command_r_plus`` (``Action:``
and a ```` ```json ```` fence) and ``command_r7b`` (``<|START_ACTION|>``,
``tool_call_id`` / ``tool_name`` / ``parameters``) one JSON array of calls;
``functionary_v3_1`` one ``<function=NAME>{...}</function>`` per call;
``pythonic`` and ``llama4_pythonic`` keyword arguments (string, integer,
number, boolean and null parameters only; no XGrammar form, as for Gemma 4).
A registered dialect without a layout raises
:class:`UnsupportedConstraintError` for ``required``/named, quoting its
reason from :func:`unconstrainable_dialects`.

Modules: ``choice`` (tool_choice, :class:`PreparedRequest`,
:func:`prepare_request`), ``errors``, ``layouts`` (the per-dialect layouts),
``schemas`` (schema reading), ``grammar`` (the grammar IR), ``lark``,
``gbnf``, ``xgrammar`` (the writers) and ``render`` (canonical text).
"""

from .choice import PreparedRequest, TokenIds, ToolConstraint, prepare_request
from .errors import ToolChoiceError, UnsupportedConstraintError
from .layouts import supported_constraint_dialects, unconstrainable_dialects
from .render import render_tool_calls

__all__ = (
    "PreparedRequest",
    "TokenIds",
    "ToolChoiceError",
    "ToolConstraint",
    "UnsupportedConstraintError",
    "prepare_request",
    "render_tool_calls",
    "supported_constraint_dialects",
    "unconstrainable_dialects",
)
