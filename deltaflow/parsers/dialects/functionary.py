"""Functionary (MeetKai): the ``functionary_v3_1`` and ``functionary_v3_2`` tool dialects (llama.cpp protocols).

Facts: llama.cpp's chat handlers and their conformance vectors in
shared/corpus/llamacpp.jsonl (``llamacpp:functionary_v3_1``,
``llamacpp:functionary_v3_2``); no section of shared/dialects.md covers them.

* ``functionary_v3_1`` (MeetKai Functionary v3.1, Llama 3.1 style):
  ``<function=NAME>{json args}</function>``, several calls one after another
  (blanks between them are raw text of the next call). A declaration of the
  XML function driver (``parsers/drivers/xml_function.py``): no block wrapper, the
  call opener opens a block (``bare_call``), the body is a JSON object
  (``json_body``) streamed as its source text; there are no parameter tags
  (``param_open=""`` never matches). A missing ``</function>`` is tolerated
  at the end of the output and before the next ``<function=``. A call is
  announced only once ``{`` (or ``</function>``) follows its header, so
  prose after ``<function=x>`` stays prose. ``<function=`` is text in the
  Llama 3 tokenizer (``<`` ``function`` ``=get``...; ``.<`` and `` <`` merge
  too), so a token boundary can leave ``<`` or ``<function`` (checked against
  shared/tokenizers/llama3). Not supported: llama.cpp also reads
  ``<|python_tag|>`` followed by raw code as a call of an offered ``python``
  / ``ipython`` tool; here such output stays text (content), since raw code
  up to the end of the output is no envelope this driver reads.
* ``functionary_v3_2`` (MeetKai Functionary v3.2, recipient format; the
  prompt ends with ``>>>``): every message starts with a recipient line,
  ``all\\n`` then content, or ``NAME\\n`` then the JSON arguments; later
  messages are introduced by ``>>>`` (``>>>NAME\\n{...}``). Its own small
  driver (``parsers/drivers/recipient.py``) owns the whole output: the block opens at
  the first non-blank text (``start_openers=("",)``), a first line is held
  until its newline (bounded: the longest offered name plus 16 characters)
  and decides the route; ``all\\n`` and the ``>>>`` before it are framing and
  dropped. ``>>>`` is one Llama 3 token, and the parser itself holds a partial
  one at the end of content, so no prefix is declared. Not supported: a
  ``python`` recipient followed by raw code (no ``{``) stays content.

Command R+, which llama.cpp supports the same way, is in :mod:`.cohere`.
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.recipient import RecipientFormat
from ..drivers.xml_function import XmlFunctionFormat

__all__ = ("FUNCTIONARY_V3_1", "FUNCTIONARY_V3_1_FORMAT", "FUNCTIONARY_V3_2", "FUNCTIONARY_V3_2_FORMAT", "PRESETS")

FUNCTIONARY_V3_1_FORMAT = XmlFunctionFormat(
    block_open=None,
    block_close=None,
    call_open="<function=",
    call_close="</function>",
    name_style="equals",
    param_open="",  # no parameter tags: the body is one JSON object
    key_style="equals",
    key_end=">",
    value_open=None,
    value_close="",
    bare_call=True,
    json_body=True,
)

FUNCTIONARY_V3_1 = declare(
    "functionary_v3_1",
    FUNCTIONARY_V3_1_FORMAT,
    # Llama 3 BPE: "<" (or ".<", " <") then "function" then "=NAME...": checked against llama3.
    token_prefixes=("<", "<function"),
    tokenizers=("llama3",),
    description="Functionary v3.1 (Llama 3.1 style): <function=NAME>{json}</function>...",
    families=("functionary-medium-v3.1", "functionary-small-v3.1"),
)

FUNCTIONARY_V3_2_FORMAT = RecipientFormat(separator=">>>", content_recipient="all")

FUNCTIONARY_V3_2 = declare(
    "functionary_v3_2",
    # The format's start opener "": the output's first non-blank text opens the one block, which lasts
    # to the end of the output.
    FUNCTIONARY_V3_2_FORMAT,
    token_prefixes=(),
    tokenizers=("llama3",),
    description="Functionary v3.2 (recipients): all\\ntext>>>NAME\\n{json}>>>NAME\\n{json}...",
    families=("functionary-small-v3.2", "functionary-medium-v3.2"),
)

# Functionary v3.1 and v3.2 (protocols from llama.cpp)
PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("meetkai/functionary-medium-v3.1", "functionary_v3_1", None),
    ("meetkai/functionary-small-v3.2", "functionary_v3_2", None),
)
