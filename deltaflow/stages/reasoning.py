"""Reasoning splitter: model text -> ``ChannelText`` of the reasoning or content channel.

Stable-prefix guarantee: text is released at once, except a chunk tail that
could begin the start marker (only at the very beginning of the output) or
the end marker (while reasoning). Nothing else is held, and held text is at
most one marker long.

Rules (shared/dialects.md section 0):

* The output starts inside reasoning when the dialect says so, unless
  ``enable_thinking=False`` turns splitting off (everything is content).
* A start marker that is the first non-blank text is consumed as the opening
  marker; blank text before it is reasoning. A later start marker is text.
* The first end marker ends reasoning; everything after it is content
  (a second end marker is content text).
* A dialect may declare implicit terminators (GLM-4.7's ``<tool_call>``
  when ``</think>`` is missing): the first of them ends reasoning too, and
  the marker itself starts the content (so the tool call is not lost).

Usage: on each :class:`~deltaflow.items.ChunkEnd` the splitter counts the
chunk's tokens that lie in the raw reasoning span (markers and any tool
payload nested in it included) and forwards the marker with
``reasoning_tokens`` set.
"""

from __future__ import annotations

import re


from .._core.holdback import MarkerHoldback
from ..errors import StateError
from ..items import Channel, ChannelText, ChunkEnd
from ..parsers.spec import ReasoningSpec
from .._core.text import skip_space

__all__ = ("ReasoningSplitter",)

_START, _REASONING, _CONTENT = range(3)
_CONTENT_CH = Channel.CONTENT
_REASONING_CH = Channel.REASONING


class ReasoningSplitter:
    """Splits model text into reasoning and content (see the module docstring).

    Args:
        spec: the reasoning protocol, or None for no reasoning.
        enabled: False turns splitting off (``enable_thinking=False``).
        chunking: ``"any"`` or ``"tokens"`` (see :class:`~deltaflow._core.holdback.MarkerHoldback`).
    """

    name = "reasoning"
    __slots__ = (
        "_spec", "_mode", "_buf", "_open", "_hb_start", "_hb_end", "_finished",
        "_in_pos", "_chunk_start", "_reasoning_until", "_end_re",
    )

    def __init__(self, spec: ReasoningSpec | None, *, enabled: bool = True, chunking: str = "any") -> None:
        self._spec = spec
        self._buf = ""
        self._finished = False
        self._in_pos = 0  # characters received so far
        self._chunk_start = 0  # where the current engine chunk's text began
        if spec is None or not enabled:
            self._mode = _CONTENT
            self._open = False
            self._reasoning_until = 0.0
            return
        # End of the raw reasoning span, once known (infinite while inside it).
        self._reasoning_until = float("inf") if spec.starts_open else 0.0
        self._mode = _START
        self._open = spec.starts_open
        self._hb_start = MarkerHoldback((spec.start,), spec.token_prefixes, chunking)
        self._hb_end = MarkerHoldback((spec.end, *spec.implicit_end), spec.token_prefixes, chunking)
        self._end_re = (
            re.compile("|".join(re.escape(m) for m in (spec.end, *spec.implicit_end)))
            if spec.implicit_end
            else None
        )

    @property
    def in_reasoning(self) -> bool:
        """True while text goes to the reasoning channel."""
        return self._mode == _REASONING or (self._mode == _START and self._open)

    def feed(self, item: object) -> list[object]:
        """Split one piece of model text; count reasoning tokens on a chunk end; pass other items."""
        if item.__class__ is str:
            assert isinstance(item, str)
            self._in_pos += len(item)
            if self._mode == _CONTENT and not self._buf:
                return [ChannelText(_CONTENT_CH, item)] if item else []
            return self._split(item, final=False)  # type: ignore[return-value]
        if item.__class__ is ChunkEnd:
            assert isinstance(item, ChunkEnd)
            return [self._count(item)]
        return [item]

    def _count(self, end: ChunkEnd) -> ChunkEnd:
        start = self._chunk_start
        self._chunk_start = self._in_pos
        ids = end.token_ids
        if not ids or self._reasoning_until <= start:
            return end
        if end.token_chars is None or len(end.token_chars) != len(ids):
            n = len(ids)  # no per-token text: the chunk began inside the span
        else:
            n = 0
            pos = start
            until = self._reasoning_until
            for c in end.token_chars:
                if pos >= until:
                    break
                n += 1
                pos += c
        return ChunkEnd(
            token_ids=ids,
            logprobs=end.logprobs,
            finish_reason=end.finish_reason,
            token_chars=end.token_chars,
            reasoning_tokens=n,
        )

    def finish(self) -> list[ChannelText]:
        """The output ended: release held text."""
        if self._finished:
            raise StateError("ReasoningSplitter.finish() called twice")
        self._finished = True
        return self._split("", final=True)

    def _split(self, item: str, final: bool) -> list[ChannelText]:
        text = self._buf + item if self._buf else item
        self._buf = ""
        out: list[ChannelText] = []
        pos = 0
        n = len(text)
        spec = self._spec
        if self._mode == _START:
            assert spec is not None
            first = _REASONING_CH if self._open else _CONTENT_CH
            ws_end = skip_space(text)
            if ws_end:
                out.append(ChannelText(first, text[:ws_end]))
            pos = ws_end
            if pos >= n:
                return out
            if text.startswith(spec.start, pos):
                pos += len(spec.start)
                self._mode = _REASONING
                self._reasoning_until = float("inf")
            elif not final and spec.start.startswith(text[pos:]) and self._hb_start.holds(text[pos:]):
                self._buf = text[pos:]
                return out
            else:
                self._mode = _REASONING if self._open else _CONTENT
                if not self._open:
                    self._reasoning_until = self._in_pos - n + pos
        if self._mode == _REASONING:
            assert spec is not None
            if self._end_re is None:
                i = text.find(spec.end, pos)
                skip = len(spec.end)
            else:
                m = self._end_re.search(text, pos)
                i = m.start() if m is not None else -1
                # An implicit terminator starts the content; only the end marker is consumed.
                skip = len(spec.end) if m is not None and m.group() == spec.end else 0
            if i < 0:
                k = 0 if final else self._hb_end.held(text, pos)
                if n - k > pos:
                    out.append(ChannelText(_REASONING_CH, text[pos : n - k]))
                if k:
                    self._buf = text[n - k :]
                return out
            if i > pos:
                out.append(ChannelText(_REASONING_CH, text[pos:i]))
            pos = i + skip
            # ``text`` starts at input position _in_pos - len(text).
            self._reasoning_until = self._in_pos - n + pos
            self._mode = _CONTENT
        if pos < n:
            out.append(ChannelText(_CONTENT_CH, text[pos:] if pos else text))
        return out
