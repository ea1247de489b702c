"""The recipient driver: messages addressed by a first line (MeetKai Functionary v3.2).

The prompt ends with ``>>>``; the output is a sequence of messages::

    output  := message (">>>" message)*
    message := RECIPIENT "\\n" body
    body    := content text (RECIPIENT == "all")  |  JSON object (RECIPIENT == a function name)

Rules of this driver (facts: llama.cpp's Functionary v3.2 handler and its
conformance vectors, ``llamacpp:functionary_v3_2``):

* The parser owns the whole output of its channel: the dialect opens its
  block at the first non-blank text (``start_openers=("",)``) and the block
  ends only with the output, or where its channel's text ends (``complete``
  is always True: reasoning before the content is parsed as its own block).
  Content is passed on as content text as it arrives (not surfaced as the
  raw text of a broken call: it is the answer).
* A message's first line is held until its newline, and decides the route:
  ``all`` (the content recipient) is framing and dropped with its newline
  and the ``>>>`` before it; a function name (``[A-Za-z_][\\w.:-]*``) is a
  call if a JSON object follows (blanks allowed before it); the name is
  announced at the object's ``{``. Anything else (a line that is no
  recipient, a name followed by other text, e.g. raw Python code) is content,
  surfaced with its ``>>>``.
* Bounded hold: a first line longer than the longest offered tool name plus
  ``RECIPIENT_SLACK`` (``MAX_RECIPIENT`` without tools) cannot be a
  recipient; it is content from its first character. The same verdict on
  every chunking: it depends only on the line's length.
* A call's arguments are the object's source text, streamed up to the
  scanner's last safe position (``_core/jsonscan.py``). After the object,
  blanks then ``>>>`` start the next message; other text is content; the
  output may end there.
* ``final=True``: a call cut inside its object is closed at the last safe
  position and the rest surfaced; an unfinished first line is content.
  Malformed JSON closes the call and surfaces the rest as content.

Stable-prefix guarantee: held back are a message's first line until its
newline (at most the bound above), the blanks after a recipient name until
what follows is known (at most ``BLANK_RUN_MAX``), the blanks after a call
until ``>>>`` or other text follows (at most ``BLANK_RUN_MAX``), a partial
``>>>`` at the end of content, and a call's JSON after its last safe
position. Everything else is released at once; consumed text is never
scanned again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from functools import partial
from typing import final

from ..._core.holdback import MarkerHoldback
from ..._core.jsonscan import JsonScanner
from ..._core.text import skip_json_ws
from ..._core.toolspec import ToolSpec
from ...items import ToolDelta
from ..base import BLANK_RUN_MAX, DriverBase
from ..spec import DriverContext, FormatDefaults

__all__ = ("MAX_RECIPIENT", "RECIPIENT_SLACK", "RecipientDriver", "RecipientFormat")

MAX_RECIPIENT = 256
"""The longest first line held as a possible recipient when the request offers no tools."""

RECIPIENT_SLACK = 16
"""With tools offered, a first line longer than the longest offered name (or ``all``) plus this is content."""

_NAME = re.compile(r"[A-Za-z_][\w.:-]*")
_LINE_CHARS = re.compile(r"[\w.:-]*")  # what a recipient line may hold before its newline


class _State(IntEnum):
    """Parser states."""

    LINE = 0
    WAIT = 1
    JSON = 2
    AFTER = 3
    CONTENT = 4
    DONE = 5


_LINE, _WAIT, _JSON, _AFTER, _CONTENT, _DONE = tuple(_State)


@dataclass(frozen=True)
class RecipientFormat(FormatDefaults):
    """Declaration of a recipient-addressed format.

    Attributes:
        separator: what introduces every message after the first (``>>>``).
        content_recipient: the recipient whose body is content (``all``).
    """

    separator: str = ">>>"
    content_recipient: str = "all"

    @property
    def openers(self) -> tuple[str, ...]:
        """None: the driver owns the whole output (see :attr:`start_openers`)."""
        return ()

    @property
    def start_openers(self) -> tuple[str, ...]:
        """The output's first non-blank text opens the one block, which lasts to the end of the output."""
        return ("",)

    @property
    def markers(self) -> tuple[str, ...]:
        """The separator between messages."""
        return (self.separator,)

    def driver_factory(self) -> Callable[[DriverContext], RecipientDriver]:
        """One :class:`RecipientDriver` per block."""
        return partial(RecipientDriver, spec=self)


def recipient_bound(spec: RecipientFormat, tools: Mapping[str, ToolSpec] | None) -> int:
    """The longest first line that may still be a recipient for the request's tools."""
    if not tools:
        return MAX_RECIPIENT
    return min(MAX_RECIPIENT, max(len(spec.content_recipient), *map(len, tools)) + RECIPIENT_SLACK)


@final
class RecipientDriver(DriverBase):
    """Parses a whole recipient-addressed output (see the module docstring)."""

    __slots__ = ("_spec", "_state", "_line", "_bound", "_name", "_scan", "_pending")

    def __init__(self, ctx: DriverContext, spec: RecipientFormat) -> None:
        super().__init__(ctx)
        self._spec = spec
        self._state = _LINE
        self._line: list[str] = []  # the first line read so far (across feeds)
        self._bound = recipient_bound(spec, ctx.tools)
        self._name = ""
        self._scan = JsonScanner()
        self._pending: list[str] = []  # JSON text consumed after the last safe position
        self.new_call()

    def _run(self, text: str, pos: int, out: list[object], final: bool) -> int:
        n = len(text)
        sep = self._spec.separator
        while True:
            st = self._state
            if st == _LINE:
                m = _LINE_CHARS.match(text, pos)
                end = m.end() if m is not None else pos
                size = sum(map(len, self._line)) + end - pos
                if size > self._bound:  # too long to be a recipient: content from its first character
                    self._line = []
                    self._state = _CONTENT
                    continue
                if end >= n and not final:
                    self._line.append(text[pos:])
                    return n
                if end >= n or text[end] != "\n":
                    # A character no recipient holds (">" of a ">>>" included), or the end: the line is
                    # content, and the content scan goes on from that character.
                    self._line = []
                    self._state = _CONTENT
                    pos = end
                    continue
                self._line.append(text[pos:end])
                line = "".join(self._line)
                self._line = []
                pos = end + 1
                if line == self._spec.content_recipient:
                    self.drop(pos)  # the recipient line (and its ">>>") is framing: dropped
                    self._state = _CONTENT
                elif _NAME.fullmatch(line):
                    self._name = line
                    self._state = _WAIT
                else:
                    self._state = _CONTENT  # the line is content (surfaced with what follows)
            elif st == _WAIT:
                p = skip_json_ws(text, pos)
                if p - pos > BLANK_RUN_MAX:
                    self._state = _CONTENT  # no body after that many blanks: not a call (bounded hold)
                    continue
                if p >= n:
                    if final:
                        self._state = _CONTENT
                        continue
                    return pos  # the blanks too: they are surfaced with the line if no object follows
                if text[p] != "{":
                    self._state = _CONTENT  # e.g. raw Python code: not read as a call
                    continue
                self.emit(out, p, name=self._name)
                self._scan = JsonScanner()
                self._pending = []
                self._state = _JSON
                pos = p
            elif st == _JSON:
                pos, more = self._json(text, pos, out, final)
                if not more:
                    return pos
            elif st == _AFTER:
                p = skip_json_ws(text, pos)
                if p - pos > BLANK_RUN_MAX:
                    self.new_call()
                    self._state = _CONTENT  # a long run of blanks after a call is content
                    continue
                if text.startswith(sep, p):
                    self.new_call()
                    pos = p + len(sep)
                    self._state = _LINE
                    continue
                if p >= n or (not final and sep.startswith(text[p:])):
                    if final:
                        self.new_call()
                        self.pass_text(out, n)  # only blanks after the last call: text
                        return self.finish_block(n)
                    return pos
                self.new_call()
                self._state = _CONTENT
            elif st == _CONTENT:
                i = text.find(sep, pos)
                if i < 0:
                    end = n if final else n - MarkerHoldback((sep,)).held(text, pos)
                    self.pass_text(out, end)
                    if final:
                        return self.finish_block(n)
                    return end
                self.pass_text(out, i)
                pos = i + len(sep)
                self._state = _LINE
            else:  # pragma: no cover - _DONE is never run
                return pos

    def _json(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        scan = self._scan
        consumed, safe = scan.scan(text, pos, final)
        broken = scan.error or (final and not scan.done)
        self._flush(out, text, pos, safe, pos if scan.error else consumed)
        if broken:
            # The call ends at its last safe position (the same one on every chunking): its
            # arguments are closed there, and the text after it is content (never lost).
            out.append(ToolDelta(call=self.call, channel=self.ctx.channel, args=scan.closer(), end=True, abort=True))
            self._pending = []
            self.new_call()
            self._state = _CONTENT
            return max(pos, safe), True
        if not scan.done:
            return consumed, False
        self.emit(out, consumed, end=True)
        self._state = _AFTER
        return consumed, True

    def _flush(self, out: list[object], text: str, start: int, safe: int, consumed: int) -> None:
        """Emit the arguments' source text up to the safe position; keep the rest pending."""
        self.flush_source(out, self._pending, text, start, safe, consumed)

    def finish_block(self, pos: int) -> int:
        """Mark the block over at ``pos``; returns ``pos``."""
        self._state = _DONE
        return super().finish_block(pos)
