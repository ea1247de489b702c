"""Reasoning splitter: model text -> ``ChannelText`` of the reasoning or content channel.

Stable-prefix guarantee: text is released at once, except a chunk tail that
could begin the start marker (only at the very beginning of the output), the
end marker (while reasoning), a declared start label (right after a start
marker), a content wrapper's opener with the blank before it (at the start
of the content: at most twice the opener's length) or its closer (inside a
wrapped content), and, for a reentrant dialect, either marker (in the
content). Held text is bounded by these markers' lengths.

Rules (shared/dialects.md section 0):

* The output starts inside reasoning when the dialect says so (or the
  caller's ``reasoning_starts_open`` does: whether the prompt opened the
  block), unless ``enable_thinking=False`` turns splitting off (everything
  is content).
* A start marker that is the first non-blank text is consumed as the opening
  marker; blank text before it is reasoning. A later start marker is text.
* Right after a consumed start marker, the longest declared start label
  (Gemma 4's ``thought\n``) is dropped.
* The first end marker ends reasoning; everything after it is content
  (a second end marker is content text).
* A dialect may declare implicit terminators (GLM-4.7's ``<tool_call>``
  when ``</think>`` is missing): the first of them ends reasoning too, and
  the marker itself starts the content (so the tool call is not lost).
* Content options: newlines right before the end marker (Step-3.5) and
  right after it (Granite 4.2) may be dropped; a content wrapper (Hunyuan's ``<answer>``...``</answer>``)
  is dropped when its opener is the first non-blank content (after at most
  ``len(opener)`` blank characters, dropped with it), together with the first
  closer after it; text after the closer is content. The wrapper applies
  with ``enable_thinking=False`` too (it is a content convention).
* A reentrant dialect's markers are special tokens that are never text
  (Gemma 4): a start marker in the content opens another reasoning block,
  one inside reasoning is dropped with its label, and an end marker outside
  reasoning is dropped.
* An inline dialect (``minimax_m2_append_think``) splits nothing: the output
  is content, and its start marker, which the prompt wrote, is put back in
  front of the first text (not with ``enable_thinking=False``; an empty
  output stays empty). Its reasoning is not counted as reasoning tokens.

Usage: on each :class:`~deltaflow.items.ChunkEnd` the splitter counts the
chunk's tokens that lie in a raw reasoning span (markers and any tool
payload nested in it included) and forwards the marker with
``reasoning_tokens`` set.
"""

from __future__ import annotations

import re

from .._core.holdback import MarkerHoldback
from .._core.text import skip_space, trailing_run
from ..errors import StateError
from ..items import Channel, ChannelText, ChunkEnd
from ..parsers.spec import ReasoningDialect

__all__ = ("ReasoningSplitter",)

# _LABEL: right after a start marker (labels); _LEAD: the start of the content
# (newline stripping, wrapper opener); _BODY: content scanned for markers;
# _CONTENT: content passed through; _INLINE: an inline spec before its first text (its start
# marker is put back in front of that text, then _CONTENT).
_START, _LABEL, _REASONING, _LEAD, _BODY, _CONTENT, _INLINE = range(7)
_CONTENT_CH = Channel.CONTENT
_REASONING_CH = Channel.REASONING
_INF = float("inf")
_MAX_SPANS = 32  # reasoning spans kept for one engine chunk (reentrant dialects)
_NEWLINES = re.compile("\n*")
# An empty content text, emitted where the end marker closed reasoning: stages that care (the
# tool block feeder) see the channel change even when no content follows.
_END_SIGNAL = ChannelText(_CONTENT_CH, "")


_NEWLINE_RUN_MAX = 256  # newlines before an end marker dropped at most (a longer run is text)


def _alternation(markers: tuple[str, ...]) -> re.Pattern[str]:
    # Longest first, so that a marker that begins another one never wins over it.
    return re.compile("|".join(re.escape(m) for m in sorted(set(markers), key=len, reverse=True)))


class ReasoningSplitter:
    """Splits model text into reasoning and content (see the module docstring).

    Args:
        spec: the reasoning protocol, or None for no reasoning.
        enabled: False turns splitting off (``enable_thinking=False``).
        starts_open: whether the output starts inside reasoning (the prompt
            opened the block); None: the spec's ``starts_open``.
        chunking: ``"any"`` or ``"tokens"`` (see :class:`~deltaflow._core.holdback.MarkerHoldback`).
    """

    name = "reasoning"
    __slots__ = (
        "_spec", "_mode", "_buf", "_open", "_hb_start", "_hb_end", "_finished",
        "_in_pos", "_chunk_start", "_spans", "_watched", "_labels", "_reentrant",
        "_strip_nl", "_wrap_pending", "_closing", "_hb_open", "_body_re", "_hb_body",
        "_body_close_re", "_hb_body_close", "_long_nl", "_end_first",
    )

    def __init__(
        self,
        spec: ReasoningDialect | None,
        *,
        enabled: bool = True,
        starts_open: bool | None = None,
        chunking: str = "any",
    ) -> None:
        self._spec = spec
        self._buf = ""
        self._finished = False
        self._long_nl = False  # reasoning ended in a newline run already released as too long to drop
        self._in_pos = 0  # characters received so far
        self._chunk_start = 0  # where the current engine chunk's text began
        # Raw reasoning spans [begin, end) in input positions (end infinite while inside).
        self._spans: list[list[float]] = []
        self._open = False
        self._strip_nl = False
        self._closing = False  # a wrapper opener was dropped; its closer is looked for
        self._wrap_pending = spec is not None and spec.content_wrap is not None
        self._reentrant = spec is not None and spec.reentrant and enabled
        self._labels: tuple[str, ...] = ()
        self._watched: tuple[str, ...] = ()  # markers looked for while reasoning, longest first
        self._body_re: re.Pattern[str] | None = None
        self._body_close_re: re.Pattern[str] | None = None
        self._hb_body: MarkerHoldback | None = None
        self._hb_body_close: MarkerHoldback | None = None
        self._hb_open: MarkerHoldback | None = None
        self._end_first = ""  # see below: "" where the reasoning shortcut does not apply
        if spec is None:
            self._mode = _CONTENT
            return
        prefixes = spec.token_prefixes
        if spec.content_wrap is not None:
            opener, closer = spec.content_wrap
            self._hb_open = MarkerHoldback((opener,), prefixes, chunking)
            close_markers = (closer, spec.start, spec.end) if self._reentrant else (closer,)
            self._body_close_re = _alternation(close_markers)
            self._hb_body_close = MarkerHoldback(close_markers, prefixes, chunking)
        if self._reentrant:
            self._body_re = _alternation((spec.start, spec.end))
            self._hb_body = MarkerHoldback((spec.start, spec.end), prefixes, chunking)
        if not enabled:
            self._mode = _LEAD if self._wrap_pending else _CONTENT
            return
        if spec.inline:
            self._mode = _INLINE  # content from the first character, after the start marker put back
            return
        self._mode = _START
        self._open = spec.starts_open if starts_open is None else starts_open
        if self._open:
            self._spans.append([0.0, _INF])
        self._labels = tuple(sorted(spec.start_labels, key=len, reverse=True))
        self._hb_start = MarkerHoldback((spec.start,), prefixes, chunking)
        watched = (spec.end, *spec.implicit_end, *((spec.start,) if self._reentrant else ()))
        self._hb_end = MarkerHoldback(watched, prefixes, chunking)
        self._watched = tuple(sorted(dict.fromkeys(watched), key=len, reverse=True))
        firsts = {m[0] for m in self._watched if m}
        # While reasoning, a chunk without this character holds no marker and no marker's start: it is
        # all reasoning (see feed). Only for one shared first character, and not where newlines before
        # the end marker are dropped (they are held whatever follows).
        if len(firsts) == 1 and all(self._watched) and not spec.reasoning_rstrip_newlines:
            self._end_first = firsts.pop()

    @property
    def in_reasoning(self) -> bool:
        """True while text goes to the reasoning channel."""
        mode = self._mode
        return mode == _REASONING or mode == _LABEL or (mode == _START and self._open)

    def feed(self, item: object) -> list[object]:
        """Split one piece of model text; count reasoning tokens on a chunk end; pass other items."""
        if item.__class__ is str:
            assert isinstance(item, str)
            self._in_pos += len(item)
            mode = self._mode
            if not self._buf:
                if mode == _CONTENT:
                    return [ChannelText(_CONTENT_CH, item)] if item else []
                if mode == _REASONING and self._end_first and self._end_first not in item:
                    # What _reasoning gives for it: no marker, nothing to hold (a held tail begins a
                    # marker, so it begins with its first character). Most chunks of a long thought.
                    return [ChannelText(_REASONING_CH, item)] if item else []
            return self._split(item, final=False)  # type: ignore[return-value]
        if item.__class__ is ChunkEnd:
            assert isinstance(item, ChunkEnd)
            return [self._count(item)]
        return [item]

    def _count(self, end: ChunkEnd) -> ChunkEnd:
        start = self._chunk_start
        self._chunk_start = self._in_pos
        ids = end.token_ids
        spans = self._spans
        while spans and spans[0][1] <= start:
            del spans[0]  # ended before this chunk: never counted again
        if not ids or not spans:
            return end
        if end.token_chars is None or len(end.token_chars) != len(ids):
            n = len(ids)  # no per-token text: the chunk began inside the span
        else:
            n = 0
            pos = start
            j = 0
            k = len(spans)
            for c in end.token_chars:
                while j < k and spans[j][1] <= pos:
                    j += 1
                if j == k:
                    break
                if pos >= spans[j][0]:
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
        n = len(text)
        base = self._in_pos - n  # the input position of text[0]
        pos = 0
        while pos < n:
            mode = self._mode
            if mode == _CONTENT:
                out.append(ChannelText(_CONTENT_CH, text[pos:] if pos else text))
                break
            if mode == _INLINE:
                assert self._spec is not None
                out.append(ChannelText(_CONTENT_CH, self._spec.start))
                self._mode = _CONTENT
                continue
            if mode == _REASONING:
                pos = self._reasoning(text, pos, final, out, base)
            elif mode == _BODY:
                pos = self._body(text, pos, final, out, base)
            elif mode == _START:
                pos = self._start(text, pos, final, out, base)
            elif mode == _LABEL:
                pos = self._label(text, pos, final)
            else:
                pos = self._lead(text, pos, final)
        return out

    # Each phase consumes from ``pos`` and returns where the next phase goes on;
    # ``len(text)`` when it consumed or held the rest (held text is in ``_buf``).

    def _start(self, text: str, pos: int, final: bool, out: list[ChannelText], base: int) -> int:
        spec = self._spec
        assert spec is not None
        n = len(text)
        ws = skip_space(text, pos)
        if ws > pos:
            out.append(ChannelText(_REASONING_CH if self._open else _CONTENT_CH, text[pos:ws]))
        pos = ws
        if pos >= n:
            return n
        if text.startswith(spec.start, pos):
            if not self._open:
                self._spans.append([0.0, _INF])
            self._mode = _LABEL if self._labels else _REASONING
            return pos + len(spec.start)
        if not final and spec.start.startswith(text[pos:]) and self._hb_start.holds(text[pos:]):
            self._buf = text[pos:]
            return n
        if self._open:
            self._mode = _REASONING
        else:
            if base + pos > 0:
                self._spans.append([0.0, float(base + pos)])
            self._enter_content(after_end=False)
        return pos

    def _label(self, text: str, pos: int, final: bool) -> int:
        n = len(text)
        labels = self._labels
        if not final and n - pos < len(labels[0]):
            rest = text[pos:]
            if any(len(lab) > len(rest) and lab.startswith(rest) for lab in labels):
                self._buf = rest  # may still become a (longer) label
                return n
        self._mode = _REASONING
        for lab in labels:  # longest first
            if text.startswith(lab, pos):
                return pos + len(lab)
        return pos

    def _reasoning(self, text: str, pos: int, final: bool, out: list[ChannelText], base: int) -> int:
        spec = self._spec
        assert spec is not None
        n = len(text)
        watched = self._watched
        if len(watched) == 1:
            i = text.find(spec.end, pos)
            found = spec.end
        else:
            # The first of several markers: one str.find each, each bounded by the best so far; on a
            # tie the longer marker (looked for first) wins, so a marker that begins another never does.
            i = -1
            found = ""
            for m in watched:
                j = text.find(m, pos, i + len(m) if i >= 0 else n)
                if j >= 0 and (i < 0 or j < i):
                    i, found = j, m
        if i < 0:
            k = 0 if final else self._hb_end.held(text, pos)
            if not final and spec.reasoning_rstrip_newlines:
                k = n - self._newline_run_start(text, pos, n - k)  # they may still lead into the end marker
            if n - k > pos:
                out.append(ChannelText(_REASONING_CH, text[pos : n - k]))
            if k:
                self._buf = text[n - k :]
            return n
        j = self._newline_run_start(text, pos, i) if spec.reasoning_rstrip_newlines and found == spec.end else i
        if j > pos:
            out.append(ChannelText(_REASONING_CH, text[pos:j]))  # newlines before the end marker dropped
        if found == spec.end:
            pos = i + len(found)
            self._spans[-1][1] = base + pos
            self._enter_content(after_end=True)
            out.append(_END_SIGNAL)  # tells later stages that reasoning ended here
        elif self._reentrant and found == spec.start:
            # A special token, never text: dropped, with its label.
            pos = i + len(found)
            self._mode = _LABEL if self._labels else _REASONING
        else:
            # An implicit terminator starts the content; only the end marker is consumed.
            pos = i
            self._spans[-1][1] = base + pos
            self._enter_content(after_end=False)
        return pos

    def _newline_run_start(self, text: str, pos: int, end: int) -> int:
        """Where the newlines that end ``text[pos:end]`` and may precede the end marker begin (``end``: none).

        A run longer than ``_NEWLINE_RUN_MAX`` is kept, and so are newlines that continue a run released
        earlier for being too long: the answer depends on the run's length alone, not on the chunking.
        """
        start, long = trailing_run(text, pos, end, "\n", _NEWLINE_RUN_MAX, self._long_nl)
        if long is not None:
            self._long_nl = long
        return start

    def _enter_content(self, *, after_end: bool) -> None:
        spec = self._spec
        assert spec is not None
        self._strip_nl = after_end and spec.content_lstrip_newlines
        if self._strip_nl or self._wrap_pending:
            self._mode = _LEAD
        else:
            self._mode = _BODY if self._closing or self._reentrant else _CONTENT

    def _lead(self, text: str, pos: int, final: bool) -> int:
        spec = self._spec
        assert spec is not None
        n = len(text)
        if self._strip_nl:
            m = _NEWLINES.match(text, pos)
            assert m is not None
            pos = m.end()
            if pos >= n:
                return n  # more newlines may follow
            self._strip_nl = False
        if self._wrap_pending:
            assert spec.content_wrap is not None and self._hb_open is not None
            opener = spec.content_wrap[0]
            ws = skip_space(text, pos)
            if ws - pos <= len(opener):
                if ws >= n:
                    if not final:
                        self._buf = text[pos:]
                        return n
                elif text.startswith(opener, ws):
                    self._wrap_pending = False
                    self._closing = True
                    self._mode = _BODY
                    return ws + len(opener)
                elif not final and opener.startswith(text[ws:]) and self._hb_open.holds(text[ws:]):
                    self._buf = text[pos:]
                    return n
            self._wrap_pending = False
        self._mode = _BODY if self._closing or self._reentrant else _CONTENT
        return pos

    def _body(self, text: str, pos: int, final: bool, out: list[ChannelText], base: int) -> int:
        spec = self._spec
        assert spec is not None
        n = len(text)
        if self._closing:
            rx, hb = self._body_close_re, self._hb_body_close
        else:
            rx, hb = self._body_re, self._hb_body
        assert rx is not None and hb is not None
        m = rx.search(text, pos)
        if m is None:
            k = 0 if final else hb.held(text, pos)
            if n - k > pos:
                out.append(ChannelText(_CONTENT_CH, text[pos : n - k]))
            if k:
                self._buf = text[n - k :]
            return n
        i = m.start()
        if i > pos:
            out.append(ChannelText(_CONTENT_CH, text[pos:i]))
        found = m.group()
        if self._closing and spec.content_wrap is not None and found == spec.content_wrap[1]:
            self._closing = False
            if not self._reentrant:
                self._mode = _CONTENT
        elif found == spec.start:
            spans = self._spans
            if len(spans) < _MAX_SPANS:
                spans.append([float(base + i), _INF])
            else:
                # Bounded memory when no ChunkEnd comes: the content between blocks is counted too.
                spans[-1][1] = _INF
            self._mode = _LABEL if self._labels else _REASONING
        # else: a stray end marker (reentrant), dropped
        return m.end()
