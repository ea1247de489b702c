"""Granite (IBM): the ``granite``, ``granite4`` and ``granite-20b-fc`` tool dialects and the ``granite``
and ``granite_thinking_parser`` reasoning dialects.

Tool dialects: declarations of the JSON envelope driver
(``parsers/drivers/json_envelope.py``; facts: shared/dialects.md section 14
and the peer parsers named below):

* ``granite`` (Granite 3.0-3.3): ``<|tool_call|>`` (3.0, one special token)
  or ``<tool_call>`` (3.1+, plain text), then a JSON array of calls; no
  closer (the ``]`` ends it). A bare ``[`` opens the array where only
  whitespace came before in the channel (section 14: "output must start with
  it").
* ``granite4`` (Granite 4.0): Hermes' ``<tool_call>{...}</tool_call>``, one
  object per call (vLLM runs its Hermes tests on it).
* ``granite-20b-fc`` (Granite-20B-FunctionCalling): ``<function_call> {...}``
  per call, no closer; calls follow each other separated by newlines.
* Token boundaries: prefixes are declared only where the real tokenizer is
  known to keep a marker whole; no Granite tokenizer is in shared/tokenizers,
  so a marker not known to be one token is declared with every proper prefix
  (holding more is never wrong, only later).

Reasoning dialects (checked against the vLLM reasoning parser of the same
name and its tests, shared/corpus/vllm.jsonl):

* ``granite`` (IBM Granite 3.2/3.3 with ``thinking=True``): plain-text
  markers the chat template asks for, ``Here is my thought process:`` and
  ``Here is my response:``. Reasoning does not start open: an output that
  does not begin with the first marker is all content. Prose markers: every
  proper prefix is declared.
* ``granite_thinking_parser`` (Granite 4.2, vLLM's name): Nemotron 3's
  protocol (open ``<think>``, ``</think>``) with the newlines right after
  ``</think>`` dropped. No tokenizer under shared/tokenizers: every proper
  prefix of each marker is declared (:mod:`._think`).
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.json_envelope import JsonEnvelopeFormat
from ..registry import register_reasoning_dialect
from ..spec import ReasoningDialect, Writing, all_prefixes
from ._think import THINK_END, THINK_PREFIXES, THINK_START

__all__ = (
    "GRANITE", "GRANITE4", "GRANITE_20B_FC", "GRANITE_END", "GRANITE_REASONING", "GRANITE_START", "GRANITE_THINKING",
    "PRESETS",
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
    writing=Writing(separator=", ", atomic=("<|tool_call|>",)),
)

GRANITE4 = declare(
    "granite4",
    JsonEnvelopeFormat(open=("<tool_call>",), close="</tool_call>", args_fields=_ARGS),
    token_prefixes=all_prefixes("<tool_call>"),
    description='Granite 4.0: <tool_call>{"name", "arguments"}</tool_call>',
    families=("Granite 4.0",),
    writing=Writing(open_gaps=("\n",), close_gap="\n", separator="\n", atomic=("<tool_call>", "</tool_call>")),
)

GRANITE_20B_FC = declare(
    "granite-20b-fc",
    JsonEnvelopeFormat(open=("<function_call>",), close=None, args_fields=_ARGS),
    token_prefixes=all_prefixes("<function_call>"),
    description='Granite-20B-FunctionCalling: <function_call> {"name", "arguments"} per call',
    families=("Granite-20B-FunctionCalling",),
    writing=Writing(open_gaps=(" ",), separator="\n"),
)

GRANITE_START = "Here is my thought process:"
GRANITE_END = "Here is my response:"

GRANITE_REASONING = register_reasoning_dialect(
    ReasoningDialect(
        name="granite",
        start=GRANITE_START,
        end=GRANITE_END,
        starts_open=False,
        # Prose markers: a BPE tokenizer may stop after any word (or inside one).
        token_prefixes=all_prefixes(GRANITE_START, GRANITE_END),
        families=("granite-3.2-8b-instruct", "granite-3.3-8b-instruct"),
    )
)

GRANITE_THINKING = register_reasoning_dialect(
    ReasoningDialect(
        name="granite_thinking_parser",
        start=THINK_START,
        end=THINK_END,
        starts_open=True,
        content_lstrip_newlines=True,
        token_prefixes=THINK_PREFIXES,
        families=("Granite 4.2 (thinking)",),
    )
)

# Granite 3.x (JSON arrays of calls; 3.2 also reasons), 4.0 and 20B-FunctionCalling (section 14)
PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("ibm-granite/granite-3.2-8b-instruct", "granite", "granite"),
    ("ibm-granite/granite-3.1-8b-instruct", "granite", None),
    ("ibm-granite/granite-3.3-8b-instruct", "granite", None),
    ("ibm-granite/granite-4.0-h-small", "granite4", None),
    ("ibm-granite/granite-4.0-h-tiny", "granite4", None),
    ("ibm-granite/granite-4.0-micro", "granite4", None),
    ("ibm-granite/granite-20b-functioncalling", "granite-20b-fc", None),
)
