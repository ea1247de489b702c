"""Protocols llama.cpp supports: Functionary v3.1 and v3.2, Command R+.

Facts: llama.cpp's chat handlers and their conformance vectors in
shared/corpus/llamacpp.jsonl (``llamacpp:functionary_v3_1``,
``llamacpp:functionary_v3_2``, ``llamacpp:command_r_plus``); no section of shared/dialects.md covers them.

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
  ``all\n`` then content, or ``NAME\n`` then the JSON arguments; later
  messages are introduced by ``>>>`` (``>>>NAME\n{...}``). Its own small
  driver (``parsers/drivers/recipient.py``) owns the whole output: the block opens at
  the first non-blank text (``start_openers=("",)``), a first line is held
  until its newline (bounded: the longest offered name plus 16 characters)
  and decides the route; ``all\n`` and the ``>>>`` before it are framing and
  dropped. ``>>>`` is one Llama 3 token, and the parser itself holds a partial
  one at the end of content, so no prefix is declared. Not supported: a
  ``python`` recipient followed by raw code (no ``{``) stays content.
* ``command_r_plus`` (Cohere Command R+, tool-use template):
  ``Action:`` then a ```` ```json ```` fence holding a JSON array of
  ``{"tool_name": ..., "parameters": {...}}``, closed by ```` ``` ````. A
  declaration of the JSON envelope driver (as ``command_r7b``, with
  ``Action:`` / ```` ```json ```` as the opener sequence, blanks allowed
  between them). Every marker is plain text (no Cohere tokenizer is in
  shared/tokenizers), so every proper prefix of ``Action:`` is declared.
  The turn tokens ``<|CHATBOT_TOKEN|>`` / ``<|END_OF_TURN_TOKEN|>`` that
  llama.cpp strips are not removed: they are the engine's chat framing, and
  text the engine passes on is never dropped (CONFORMANCE.md).

Stable-prefix guarantee (the drivers'): outside a block only a chunk tail
that may begin an opener is held; inside one, a partial marker, a function
header until its ``>`` (at most the longest offered name plus 64), a call's
name until ``{`` follows, and the JSON arguments after their last safe
position (at most one key, a colon and a partial scalar).
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.json_envelope import JsonEnvelopeFormat
from ..drivers.recipient import RecipientFormat
from ..drivers.xml_function import XmlFunctionFormat
from ..spec import all_prefixes

__all__ = (
    "COMMAND_R_PLUS", "COMMAND_R_PLUS_FORMAT", "FUNCTIONARY_V3_1", "FUNCTIONARY_V3_1_FORMAT", "FUNCTIONARY_V3_2",
    "FUNCTIONARY_V3_2_FORMAT",
)

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

COMMAND_R_PLUS_FORMAT = JsonEnvelopeFormat(
    open=("Action:", "```json"),
    close="```",
    name_field="tool_name",
    args_fields=("parameters",),
    array=True,
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
    FUNCTIONARY_V3_2_FORMAT,
    token_prefixes=(),
    tokenizers=("llama3",),
    description="Functionary v3.2 (recipients): all\\ntext>>>NAME\\n{json}>>>NAME\\n{json}...",
    families=("functionary-small-v3.2", "functionary-medium-v3.2"),
)

_COHERE_TURN = ("<|START_OF_TURN_TOKEN|>", "<|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>")

COMMAND_R_PLUS = declare(
    "command_r_plus",
    COMMAND_R_PLUS_FORMAT,
    # No Cohere tokenizer in shared/: every prefix is declared, the turn tokens' too.
    token_prefixes=all_prefixes("Action:", *_COHERE_TURN),
    # Cohere's turn tokens are special tokens that frame the turn, never answer text (llama.cpp strips them).
    framing=_COHERE_TURN,
    description='Command R+: Action:\\n```json\\n[{"tool_name", "parameters"}, ...]\\n```',
    families=("c4ai-command-r-plus", "c4ai-command-r-v01"),
)
