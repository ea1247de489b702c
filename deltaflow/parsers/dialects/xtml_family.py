"""Kimi K3 "XTML" sections (a protocol llama.cpp supports), on the driver in ``parsers/drivers/xtml.py``.

Facts (llama.cpp ``models/templates/*.jinja``, ``common/chat-parsers/*``
and the llama.cpp vectors of shared/corpus; see CONFORMANCE.md for where we
differ):

* ``kimi_k3`` (Kimi K3 "XTML", ``models/templates/Kimi-K3.jinja``): sections
  ``<|open|>NAME<|sep|> ... <|close|>NAME<|sep|>``. The generation prompt ends
  ``<|open|>message role="assistant"<|sep|><|open|>think<|sep|>`` (thinking on,
  the template's default) or ``...<|open|>response<|sep|>`` (thinking off):
  the output is reasoning until ``<|close|>think<|sep|>``, then the answer in
  ``<|open|>response<|sep|>...<|close|>response<|sep|>``, then calls in
  ``<|open|>tools<|sep|><|open|>call tool="NAME" index="N"<|sep|>``
  ``<|open|>argument key="K" type="T"<|sep|>VALUE<|close|>argument<|sep|>``
  ``...<|close|>call<|sep|><|close|>tools<|sep|>``, then
  ``<|close|>message<|sep|>`` and the stop token ``<|end_of_msg|>``. The
  value types are the template's ``xtml_type`` names (string, number,
  boolean, null, object, array); a call may hold one
  ``<|open|>json type="object"<|sep|>{...}<|close|>json<|sep|>`` instead.
  The driver is ``parsers/drivers/xtml.py``. The response and message markers are
  framing, dropped by the tool parser (so the answer is clean even without a
  reasoning parser); the reasoning parser drops the response wrapper too.
  ``<|end_of_msg|>`` is the engine's stop token: text it passes on is kept.

Token boundaries (Kimi K3): no K3 vocabulary is in shared/tokenizers.
Public K3 renderer tests and training-mask code (found with the code search;
facts only) tokenize ``<|open|>``, ``<|close|>``, ``<|sep|>`` and
``<|end_of_msg|>`` as single special tokens (``<|close|>``, ``response``,
``<|sep|>`` are three tokens; literal control text stays content unless it
is tokenized specially), and the tag words between them are text. So a chunk
may end right after ``<|open|>`` / ``<|close|>`` or anywhere inside the tag
word, never inside a token: :func:`xtml_prefixes` declares exactly those.
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.xtml import XtmlFormat
from ..registry import register_reasoning_dialect
from ..spec import ReasoningDialect

__all__ = ("KIMI_K3", "KIMI_K3_REASONING", "xtml_prefixes")

_OPEN = "<|open|>"
_CLOSE = "<|close|>"
_SEP = "<|sep|>"


def xtml_prefixes(*markers: str) -> tuple[str, ...]:
    """The prefixes of XTML markers a token boundary can leave: the lead token plus any part of the tag word.

    Each marker is ``<|open|>WORD<|sep|>`` or ``<|close|>WORD<|sep|>``; the
    three tokens are single special tokens, the word is text a BPE may split.
    """
    out: list[str] = []
    for m in markers:
        lead = _OPEN if m.startswith(_OPEN) else _CLOSE
        word = m[len(lead) : -len(_SEP)]
        out.extend(lead + word[:k] for k in range(len(word) + 1))
    return tuple(dict.fromkeys(out))


KIMI_K3_FORMAT = XtmlFormat()

K3_THINK = (_OPEN + "think" + _SEP, _CLOSE + "think" + _SEP)
K3_RESPONSE = (_OPEN + "response" + _SEP, _CLOSE + "response" + _SEP)
K3_TOOLS_OPEN = _OPEN + "tools" + _SEP

KIMI_K3 = declare(
    "kimi_k3",
    KIMI_K3_FORMAT,
    token_prefixes=xtml_prefixes(*KIMI_K3_FORMAT.openers),
    description=(
        'Kimi K3 XTML: <|open|>tools<|sep|><|open|>call tool="NAME"<|sep|><|open|>argument key= type=<|sep|>V...'
    ),
    families=("Kimi K3",),
)

KIMI_K3_REASONING = register_reasoning_dialect(
    ReasoningDialect(
        name="kimi_k3",
        start=K3_THINK[0],
        end=K3_THINK[1],
        # The generation prompt opens the think section (thinking is on unless the request turns it off).
        starts_open=True,
        content_wrap=K3_RESPONSE,
        # The model's own channel transitions: the answer or the calls begin, so thinking is over.
        implicit_end=(K3_RESPONSE[0], K3_TOOLS_OPEN),
        token_prefixes=xtml_prefixes(*K3_THINK, *K3_RESPONSE, K3_TOOLS_OPEN),
        turn_markers=("<|end_of_msg|>",),
        families=("Kimi K3",),
    )
)
