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
"""

from __future__ import annotations


from .._core.holdback import MarkerHoldback
from ..errors import StateError
from ..items import Channel, ChannelText
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
    __slots__ = ("_spec", "_mode", "_buf", "_open", "_hb_start", "_hb_end", "_finished")

    def __init__(self, spec: ReasoningSpec | None, *, enabled: bool = True, chunking: str = "any") -> None:
        self._spec = spec
        self._buf = ""
        self._finished = False
        if spec is None or not enabled:
            self._mode = _CONTENT
            self._open = False
            return
        self._mode = _START
        self._open = spec.starts_open
        self._hb_start = MarkerHoldback((spec.start,), spec.token_prefixes, chunking)
        self._hb_end = MarkerHoldback((spec.end,), spec.token_prefixes, chunking)

    @property
    def in_reasoning(self) -> bool:
        """True while text goes to the reasoning channel."""
        return self._mode == _REASONING or (self._mode == _START and self._open)

    def feed(self, item: str) -> list[ChannelText]:
        """Split one chunk of model text."""
        if self._mode == _CONTENT and not self._buf:
            return [ChannelText(_CONTENT_CH, item)] if item else []
        return self._split(item, final=False)

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
            elif not final and spec.start.startswith(text[pos:]) and self._hb_start.holds(text[pos:]):
                self._buf = text[pos:]
                return out
            else:
                self._mode = _REASONING if self._open else _CONTENT
        if self._mode == _REASONING:
            assert spec is not None
            i = text.find(spec.end, pos)
            if i < 0:
                k = 0 if final else self._hb_end.held(text, pos)
                if n - k > pos:
                    out.append(ChannelText(_REASONING_CH, text[pos : n - k]))
                if k:
                    self._buf = text[n - k :]
                return out
            if i > pos:
                out.append(ChannelText(_REASONING_CH, text[pos:i]))
            pos = i + len(spec.end)
            self._mode = _CONTENT
        if pos < n:
            out.append(ChannelText(_CONTENT_CH, text[pos:] if pos else text))
        return out
