"""Gemma 4 tool calls: tool parser ``gemma4`` (llama.cpp ``llamacpp:gemma4``).

Facts (vLLM ``gemma4`` tool parser, llama.cpp's Gemma 4 handler and its
tests, shared/corpus/llamacpp.jsonl): Gemma 4 writes one call per block,
blocks concatenated without separators::

    <|tool_call>call:NAME{key:value,...}<tool_call|>

in its own serialization, not JSON: keys are bare (``<|"|>``-quoted keys are
accepted too, as vLLM does), strings are delimited by the special token
``<|"|>`` and hold raw text (no escapes), numbers, ``true``, ``false`` and
``null`` are bare, and objects ``{k:v}`` and arrays ``[v,...]`` nest. The
block markers and ``<|"|>`` are single special tokens of the Gemma 4
vocabulary, so ``token_prefixes`` is empty (no Gemma 4 tokenizer is under
shared/tokenizers to check it against; the vocabulary ids are the ones vLLM
looks up by name).

Rules of this driver:

* The name (``[\\w.-]+`` after ``call:``) is announced with the ``{`` that
  opens the arguments; text that is not ``call:NAME{`` is not a call and is
  surfaced as content.
* The arguments are converted to JSON while they stream, in the model's key
  order (duplicate keys kept): a key is held until its value starts; a string
  value streams at once, JSON-escaped (only a possible partial ``<|"|>`` or
  ``<tool_call|>`` at a chunk end is held); a bare scalar is held until the
  ``,``, ``}`` or ``]`` after it and converted whole (a JSON number or literal
  as written, ``none``/``nil`` as null like vLLM, a looser number such as
  ``+1`` or ``1.`` as its JSON number, anything else as the string it
  spells). Objects and arrays stream their brackets. The fragments always
  form a prefix of one JSON object.
* Lenient endings: ``<tool_call|>`` inside an unclosed string or container
  ends the call there (open strings and containers are closed); a missing
  ``<tool_call|>`` after the arguments ends the block where they end.
  Trailing commas are accepted.
* Malformed structure ends the block where it goes wrong: the named call is
  completed (its open strings and containers closed), what it cannot use is
  surfaced, the rest goes back to the caller as text. ``final=True`` does
  the same where the text ended (a bare scalar cut by the end is taken as
  written if it converts).

Stable-prefix guarantee: held back are a partial marker (at most 11
characters), ``call:`` and the name until the ``{`` (at most 512
characters), an object key until its value starts, and one bare scalar until
its end (each at most 512 characters, else the block is malformed).
Everything else is emitted at once; consumed text is never scanned again.

Reasoning (``<|channel>thought\\n...<channel|>``) is not declared here: see
``more_reasoning.py`` for why.
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.gemma4 import Gemma4Format

GEMMA4 = declare(
    "gemma4",
    Gemma4Format(),
    token_prefixes=(),
    tokenizers=(),
    description='Gemma 4: <|tool_call>call:NAME{key:<|"|>text<|"|>,n:1}<tool_call|> (bare keys, <|"|> strings)',
    families=("gemma-4-E2B-it", "gemma-4-E4B-it", "gemma-4-26B-A4B-it", "gemma-4-31B-it"),
)
