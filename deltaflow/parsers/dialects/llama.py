"""Llama (Meta): the ``llama3_json``, ``pythonic`` and ``llama4_pythonic`` tool dialects.

* ``llama3_json`` (shared/dialects.md section 3; the JSON envelope driver,
  ``parsers/drivers/json_envelope.py``): an optional ``<|python_tag|>`` (one
  token) then a bare ``{"name", "parameters"}`` object (``arguments`` also
  seen); calls may be joined by ``;`` or by repeating the tag. A bare ``{``
  opens a call only where nothing but whitespace came before (vLLM's
  streaming rule), so JSON quoted inside prose stays prose.
* ``pythonic`` and ``llama4_pythonic`` (shared/dialects.md section 4): a
  Python list literal of calls with keyword arguments,
  ``[get_weather(city="Paris"), get_time(tz="UTC")]``, parsed by
  :mod:`deltaflow.parsers.drivers.pythonic` without evaluation. Llama 4 may
  wrap the list in ``<|python_start|>``...``<|python_end|>`` (special tokens);
  both dialects accept the wrapper (SGLang's ``pythonic`` does too), and the
  wrapper opens a block anywhere, since it cannot be ordinary text.

  A bare ``[`` is ordinary text (``[``, ``(`` and ``=`` are split BPE tokens),
  so it opens a block only at the start of a channel, after whitespace at
  most: vLLM only recognises output that starts with ``[``, and a bracket in
  prose stays prose. The exception is ``[NAME(`` where NAME is a tool the
  request offers: that opens a block anywhere (``Let me check: [get_weather(
  city="Paris")]``), as SGLang finds such lists after prose. Without tools,
  or for any other name, a bracket after prose stays prose, so ``[1, 2]``,
  ``[see above]`` and ``[print(x)]`` in an explanation are never calls.

  Token prefixes: ``[`` is one character and the wrapper markers are special
  tokens in Llama 4, so ``llama4_pythonic`` holds nothing
  in ``chunking="tokens"`` mode. ``pythonic`` serves Llama 3.2, whose
  vocabulary (shared/tokenizers/llama3) has no ``<|python_start|>``: written
  out it is six ordinary tokens, so their prefixes are declared. A call
  list's first token begins with ``[`` (tests/unit/parsers/test_pythonic.py).

The Llama-based Functionary models are in :mod:`.functionary`, xLAM's
Llama-xLAM in :mod:`.xlam`, FireFunction in :mod:`.firefunction`.
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.json_envelope import JsonEnvelopeFormat
from ..drivers.pythonic import PythonicFormat
from ..spec import Writing

__all__ = ("LLAMA3_JSON", "LLAMA4_PYTHONIC", "PRESETS", "PYTHONIC")


LLAMA3_JSON = declare(
    "llama3_json",
    JsonEnvelopeFormat(
        open=("<|python_tag|>",),
        close=None,
        args_fields=("parameters", "arguments"),
        bare_object=True,
        separator=";",
    ),
    start_openers=("{",),
    tokenizers=("llama3",),
    description="Llama 3.x JSON: [<|python_tag|>]{\"name\", \"parameters\"}[; ...]",
    families=("Llama 3.1", "Llama 3.2", "Llama 3.3"),
    writing=Writing(bare=True, separator="; "),
)

PYTHONIC = declare(
    "pythonic",
    PythonicFormat(),
    # Llama 3.2's vocabulary has no <|python_start|>: written out, it is
    # '<' '|' 'python' '_start' '|' '>' (checked with shared/tokenizers/llama3).
    token_prefixes=("<", "<|", "<|python", "<|python_start", "<|python_start|"),
    tokenizers=("llama3",),
    description='Pythonic call list: [f(a=1, b="x"), g()] (Llama 3.2 small, ToolACE, ...)',
    families=("Llama-3.2-1B/3B-Instruct", "ToolACE-8B", "Llama-4 (pythonic)"),
)

LLAMA4_PYTHONIC = declare(
    "llama4_pythonic",
    PythonicFormat(),
    token_prefixes=(),
    tokenizers=(),
    description='Llama 4 pythonic: [<|python_start|>][f(a=1), g()][<|python_end|>]',
    families=("Llama-4-Scout-17B-16E-Instruct", "Llama-4-Maverick-17B-128E-Instruct"),
)

# Llama (shared/dialects.md sections 3 and 4)
PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("meta-llama/Llama-3.1-8B-Instruct", "llama3_json", None),
    ("meta-llama/Llama-3.1-70B-Instruct", "llama3_json", None),
    ("meta-llama/Llama-3.2-3B-Instruct", "llama3_json", None),
    ("meta-llama/Llama-3.3-70B-Instruct", "llama3_json", None),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama4_pythonic", None),
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct", "llama4_pythonic", None),
)
