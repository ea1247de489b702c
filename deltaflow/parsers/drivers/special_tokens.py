"""The special-token section/call driver: DeepSeek V3/R1, DeepSeek V3.1 and Kimi K2.

Grammar (shared/dialects.md sections 8a, 8b and 9; ``ws`` is JSON whitespace)::

    block  := SECTION_OPEN (ws | noise)* (call (ws | noise)*)* [SECTION_CLOSE]
            | call (ws* call)* [ws* SECTION_CLOSE]              (bare calls, where declared)
    call   := CALL_OPEN header ws* [FENCE] ws* [object] ws* [```] ws* [CALL_CLOSE]
    header := TYPE SEP NAME "\\n"     deepseek_v3:  function<｜tool▁sep｜>get_weather\\n
            | NAME SEP                deepseek_v31: get_weather<｜tool▁sep｜>
            | ID SEP                  kimi_k2:      functions.get_weather:0<|tool_call_argument_begin|>

Markers are compared byte for byte (DeepSeek's U+FF5C ``｜`` and U+2581 ``▁``
are never normalized). Rules of this driver:

* The arguments object is scanned lexically, once (``_core/jsonscan.py``),
  and streamed as the model's source text up to the last safe position: key
  order, spacing and duplicate keys are kept. A call written without an
  object (``NAME<｜tool▁call▁end｜>``) gets ``{}``.
* A structural marker (call close, call open, section close) ends the
  arguments even inside an unterminated string: the markers are special
  tokens, so the model ended the call there. So does a closing code fence
  outside any string (DeepSeek V3). The unfinished object is closed at its
  last safe position (the call was announced by its name already); text
  after that position is surfaced unless it is only whitespace.
* A missing ``CALL_CLOSE`` is tolerated when the next call or the section
  close follows, or the output ends (llama.cpp's Kimi vectors).
* Inside a section, text between calls that is not a marker is framing noise
  (dialects.md 9: "text between section-begin and the first call is noise"):
  it becomes raw text of the next call, or of the last call when the section
  closes, so it is surfaced when that call is rejected and never otherwise.
  A section that holds no call is surfaced whole.
* A call that cannot go on (no usable name, an id without ``:N``, JSON that
  is not an object, text after its object) is surfaced up to the next
  marker: an unnamed one whole, from its ``CALL_OPEN`` (for the first call
  of a section, from the section opener); a named one is completed first
  and only its unusable rest is surfaced. Inside a section parsing resumes
  at that marker, so one bad call does not lose the next ones. A block of
  bare calls ends at the bad text instead and gives it back to the caller.
* Text after the section close is not consumed: it is content.

Stable-prefix guarantee: the parser consumes everything it is given except a
tail that may begin a marker or a code fence (fewer characters than the
longest marker), the part of a JSON scalar or escape that is still being
written, and, between bare calls, whitespace until the next marker shows
whether the block goes on. Header fields (type, name, id) are held, consumed,
until their separator arrives; an argument fragment is emitted as soon as it
reaches a safe position. Noise and unusable text inside a section are
consumed at once but attributed (surfaced, if at all) at the next marker.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from functools import partial

from ..._core.holdback import MarkerHoldback
from ..._core.jsonscan import JsonScanner
from ..._core.text import skip_json_ws
from ..base import DriverBase
from ..spec import DriverContext, FormatDefaults

__all__ = ("HeaderKind", "SpecialTokenDriver", "SpecialTokenFormat")

_FENCE = "```"
# An opening code fence with its optional language tag (```json).
_FENCE_OPEN = re.compile(r"```[A-Za-z0-9_.+-]*")


class _State(IntEnum):
    """Parser states."""

    OPEN = 0
    BETWEEN = 1
    HEADER = 2
    NAME = 3
    ARGS_PRE = 4
    ARGS = 5
    CLOSE = 6
    SKIP = 7


_OPEN, _BETWEEN, _HEADER, _NAME, _ARGS_PRE, _ARGS, _CLOSE, _SKIP = tuple(_State)


class HeaderKind(enum.Enum):
    """How the text between ``CALL_OPEN`` and the arguments names the call."""

    TYPE_SEP_NAME = "type_sep_name"
    """``TYPE SEP NAME`` then a newline: the type field is ignored (DeepSeek V3/R1)."""
    NAME_SEP = "name_sep"
    """``NAME SEP`` (DeepSeek V3.1)."""
    ID_SEP = "id_sep"
    """``ID SEP``: the call id, kept; the name is taken out of it with ``call_id`` (Kimi K2)."""


@dataclass(frozen=True)
class SpecialTokenFormat(FormatDefaults):
    """Declaration of a section/call special-token tool format.

    Attributes:
        section_open: markers opening a section (spelling variants).
        section_close: markers closing a section (spelling variants).
        call_open: the marker opening one call.
        call_close: the marker closing one call.
        sep: the marker ending the first header field.
        header: how the header names the call.
        call_id: for :attr:`HeaderKind.ID_SEP`, a regular expression that
            must match the whole (stripped) id and has a ``name`` group.
        fence: the arguments may be wrapped in a Markdown code fence.
        bare_calls: ``call_open`` opens a block without a section.
    """

    section_open: tuple[str, ...]
    section_close: tuple[str, ...]
    call_open: str
    call_close: str
    sep: str
    header: HeaderKind
    call_id: str | None = None
    fence: bool = False
    bare_calls: bool = False

    @property
    def markers(self) -> tuple[str, ...]:
        """Every marker of the format."""
        return (*self.section_open, *self.section_close, self.call_open, self.call_close, self.sep)

    @property
    def openers(self) -> tuple[str, ...]:
        """The markers that open a block."""
        return self.section_open + ((self.call_open,) if self.bare_calls else ())

    def driver_factory(self) -> Callable[[DriverContext], SpecialTokenDriver]:
        """One :class:`SpecialTokenDriver` per block, sharing the format's tables."""
        return partial(SpecialTokenDriver, spec=self, tables=_Tables(self))


def _alternation(markers: tuple[str, ...]) -> str:
    return "|".join(re.escape(m) for m in sorted(set(markers), key=len, reverse=True))



class _Tables:
    """Immutable lookup tables derived once per spec."""

    __slots__ = ("any_marker", "between", "ends", "name_end", "hold", "call_id")

    def __init__(self, spec: SpecialTokenFormat) -> None:
        if spec.header is HeaderKind.ID_SEP and spec.call_id is None:
            raise ValueError("a SpecialTokenFormat with header=ID_SEP needs a call_id pattern")
        markers = _alternation(spec.markers)
        self.any_marker = re.compile(markers)
        self.between = re.compile(_alternation((spec.call_open, *spec.section_close)))
        # What ends a call's text: its close, the next call, the section close.
        self.ends = re.compile(_alternation((spec.call_close, spec.call_open, *spec.section_close)))
        # A V3 name runs to the newline (or, leniently, to a fence, an object or a marker).
        self.name_end = re.compile(r"\n|```|\{|" + markers)
        self.hold = MarkerHoldback((*spec.markers, _FENCE), chunking="any")
        self.call_id = re.compile(spec.call_id) if spec.call_id is not None else None


class SpecialTokenDriver(DriverBase):
    """Parses one special-token tool block (see the module docstring).

    Args:
        ctx: the block's context.
        spec: the format declaration.
        tables: the spec's derived tables (built once by :meth:`SpecialTokenFormat.driver_factory`).
    """

    __slots__ = (
        "_spec", "_t", "_state", "_section", "_parts", "_scan", "_args_from", "_args_pending",
        "_args_closed", "_ended", "_aborted", "_fenced", "_fence_closed",
    )

    def __init__(self, ctx: DriverContext, spec: SpecialTokenFormat, tables: _Tables | None = None) -> None:
        super().__init__(ctx)
        self._spec = spec
        self._t = tables if tables is not None else _Tables(spec)
        self._state = _OPEN
        self._section = False
        self.new_call()
        self._reset_call()

    def _reset_call(self) -> None:
        self._parts: list[str] = []  # a header field being read
        self._scan: JsonScanner | None = None
        self._args_from = 0
        self._args_pending: list[str] = []  # argument text consumed past the last safe position
        self._args_closed = False  # the arguments object is complete (or "{}" was emitted)
        self._ended = False  # the call's end event was emitted
        self._aborted = False  # the call was surfaced without a name
        self._fenced = False
        self._fence_closed = False

    # -- the feed ---------------------------------------------------------------------
    def feed_tool_block(self, text: str, out: list[object], final: bool, start: int = 0) -> int:
        """Consume what can be consumed of ``text[start:]`` (see :class:`~deltaflow.parsers.spec.ToolDriver`)."""
        self.begin(text, start)
        self._args_from = start
        pos = start
        go = True
        while go and not self.done:
            st = self._state
            if st == _ARGS:
                pos, go = self._args(text, pos, out, final)
            elif st == _BETWEEN:
                pos, go = self._between(text, pos, out, final)
            elif st == _CLOSE:
                pos, go = self._close(text, pos, out, final)
            elif st == _ARGS_PRE:
                pos, go = self._args_pre(text, pos, out, final)
            elif st == _HEADER:
                pos, go = self._header(text, pos, out, final)
            elif st == _NAME:
                pos, go = self._name(text, pos, out, final)
            elif st == _SKIP:
                pos, go = self._skip(text, pos, out, final)
            else:
                pos, go = self._open(text, pos, out, final)
        if not self.done:
            if self._state == _ARGS and pos > self._args_from:
                self._args_pending.append(text[self._args_from : pos])
            self.hold(pos)
        return pos

    # -- states -----------------------------------------------------------------------
    def _open(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        spec = self._spec
        pos = skip_json_ws(text, pos)  # whitespace between two blocks is raw text of this one
        for marker in spec.section_open:
            if text.startswith(marker, pos):
                self._section = True
                self._state = _BETWEEN
                return pos + len(marker), True
        if spec.bare_calls and text.startswith(spec.call_open, pos):
            self._state = _HEADER
            return pos + len(spec.call_open), True
        left = len(text) - pos
        if not final and any(left < len(o) and o.startswith(text[pos:]) for o in spec.openers):
            return pos, False  # nothing yet, or a partial opener
        return self.abort(out, pos), False

    def _between(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        spec = self._spec
        t = self._t
        n = len(text)
        if not self._section:
            # Bare calls: whitespace is consumed only when another marker of the block follows.
            ws = skip_json_ws(text, pos)
            if text.startswith(spec.call_open, ws):
                self._next_call()
                self._state = _HEADER
                return ws + len(spec.call_open), True
            for marker in spec.section_close:
                if text.startswith(marker, ws):  # a stray section close belongs to the last call
                    end = ws + len(marker)
                    self.emit(out, end)
                    return self.finish_block(end), False
            if not final and t.hold.held(text, ws) == n - ws:
                return pos, False
            return self.finish_block(pos), False
        m = t.between.search(text, pos)
        if m is None:
            if final:
                return self._end_section(out, n), False
            return n - t.hold.held(text, pos), False  # noise and whitespace: raw text, uncommitted
        marker = m.group()
        if marker == spec.call_open:
            self._next_call()
            self._state = _HEADER
            return m.end(), True
        return self._end_section(out, m.end()), False

    def _header(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        spec = self._spec
        t = self._t
        n = len(text)
        m = t.any_marker.search(text, pos)
        if m is None:
            if final:
                return self._fail(out, n)
            k = n - t.hold.held(text, pos)
            self._parts.append(text[pos:k])
            return k, False
        i = m.start()
        if m.group() != spec.sep:
            return self._fail(out, i)
        field = "".join(self._parts) + text[pos:i]
        self._parts = []
        end = m.end()
        if spec.header is HeaderKind.TYPE_SEP_NAME:
            self._state = _NAME  # the type field ("function") is not used
            return end, True
        call_id: str | None = None
        if spec.header is HeaderKind.NAME_SEP:
            name = field.strip()
        else:
            # Kimi (dialects.md 9): the id "functions.NAME:N" is kept as the call id; the name
            # is the part between "functions." and the last ":". vLLM skips an id without ":N".
            call_id = field.strip()
            assert t.call_id is not None
            idm = t.call_id.fullmatch(call_id)
            name = idm.group("name") if idm is not None else ""
        if not name:
            return self._fail(out, end)
        self.emit(out, end, name=name, id=call_id)
        self._state = _ARGS_PRE
        return end, True

    def _name(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        t = self._t
        n = len(text)
        if not self._parts:
            pos = skip_json_ws(text, pos)
        m = t.name_end.search(text, pos)
        if m is None:
            if final:
                return self._fail(out, n)
            k = n - t.hold.held(text, pos)
            if k > pos:
                self._parts.append(text[pos:k])
            return k, False
        i = m.start()
        name = ("".join(self._parts) + text[pos:i]).strip()
        self._parts = []
        end = i + 1 if m.group() == "\n" else i
        if not name:
            return self._fail(out, end)
        self.emit(out, end, name=name)
        self._state = _ARGS_PRE
        return end, True

    def _args_pre(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        spec = self._spec
        t = self._t
        n = len(text)
        pos = skip_json_ws(text, pos)
        if pos >= n:
            if final:  # cut after the name, before any arguments: not a call
                self._ended = True
                return self.abort(out, n), False
            return pos, False
        c = text[pos]
        if c == "{":
            self._scan = JsonScanner()
            self._args_from = pos
            self._args_pending = []
            self._state = _ARGS
            return pos, True
        if spec.fence and c == "`":
            if text.startswith(_FENCE, pos):
                if self._fenced:  # an empty fenced body: the closing fence
                    self._emit_no_args(out, pos, end=False)
                    self._state = _CLOSE
                    return pos, True
                fm = _FENCE_OPEN.match(text, pos)
                assert fm is not None
                if fm.end() == n and not final:
                    return pos, False  # the language tag may go on
                self._fenced = True
                return fm.end(), True
            if not final and _FENCE.startswith(text[pos:]):
                return pos, False
            return self._fail(out, pos)
        m = t.ends.match(text, pos)
        if m is not None:  # a call without arguments
            end = m.end() if m.group() == spec.call_close else pos
            self._emit_no_args(out, end, end=True)
            return end, True
        if not final and t.hold.held(text, pos) == n - pos:
            return pos, False
        return self._fail(out, pos)

    def _args(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        t = self._t
        n = len(text)
        scan = self._scan
        assert scan is not None
        m = t.ends.search(text, pos)
        if m is not None:
            limit = m.start()
            cut = True  # a marker ends the JSON text here, finished or not
        else:
            limit = n if final else n - t.hold.held(text, pos)
            cut = final
        consumed, safe = scan.scan(text if limit == n else text[:limit], pos, cut)
        self._flush(out, text, safe)
        if scan.error:
            e = scan.error_pos
            if self._spec.fence and text.startswith(_FENCE, e):
                # A closing fence outside any string ends the unfinished object like a marker
                # does (a partial fence never reaches the scanner: it is held as a marker prefix).
                self._cut(out, text, e)
                return e, True
            return self._fail(out, e)
        if scan.done:
            self._args_closed = True
            self._state = _CLOSE
            return consumed, True
        if cut:
            self._cut(out, text, limit)
            return limit, True
        return consumed, False

    def _close(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        spec = self._spec
        t = self._t
        n = len(text)
        pos = skip_json_ws(text, pos)
        if pos >= n:
            if final:
                self._end_call(out, n)
                return n, True
            return pos, False
        if spec.fence and not self._fence_closed and text.startswith(_FENCE, pos):
            # dialects.md 8a: "\n```" closes the fence; llama.cpp's R1 vectors put it right after "}".
            self._fence_closed = True
            return pos + len(_FENCE), True
        m = t.ends.match(text, pos)
        if m is not None:
            end = m.end() if m.group() == spec.call_close else pos
            self._end_call(out, end)
            return end, True
        if not final and t.hold.held(text, pos) == n - pos:
            return pos, False
        self._end_call(out, pos)  # the call is complete; what follows it is text it cannot use
        return self._fail(out, pos)

    def _skip(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        spec = self._spec
        t = self._t
        n = len(text)
        m = t.ends.search(text, pos)
        if m is None:
            if final:
                self._drop(out, n)
                return self.finish_block(n), False
            return n - t.hold.held(text, pos), False
        i = m.start()
        if m.group() == spec.call_close:
            if self.named:
                self._drop(out, i)
                self.emit(out, m.end())  # the close belongs to the named call
            else:
                self._drop(out, m.end())
            pos = m.end()
        else:
            self._drop(out, i)
            pos = i
        self._state = _BETWEEN
        return pos, True

    # -- helpers ----------------------------------------------------------------------
    def _next_call(self) -> None:
        """Start a call at a ``CALL_OPEN``; text held since the last one becomes its raw text."""
        if self.named or self._aborted:
            self.new_call()
        self._reset_call()

    def _flush(self, out: list[object], text: str, safe: int) -> None:
        """Emit the argument text up to the safe position ``safe``."""
        if safe > self._args_from:
            frag = text[self._args_from : safe]
            if self._args_pending:
                frag = "".join(self._args_pending) + frag
                self._args_pending = []
            self.emit(out, safe, args=frag)
            self._args_from = safe

    def _cut(self, out: list[object], text: str, pos: int) -> None:
        """The object was cut short at ``pos``: close it at its last safe position.

        Argument text after that position is surfaced, unless it is only
        whitespace (then it is raw text of the call, like the whitespace
        before a call close).
        """
        assert self._scan is not None
        closer = self._scan.closer()
        pending = "".join(self._args_pending) + text[self._args_from : pos]
        if pending.strip(" \t\r\n"):
            self._drop(out, pos, closer)
        else:
            self._args_pending = []
            self.emit(out, pos, args=closer, end=True)
            self._ended = True
        self._state = _CLOSE

    def _emit_no_args(self, out: list[object], pos: int, *, end: bool) -> None:
        self.emit(out, pos, args="{}", end=end)
        self._args_closed = True
        if end:
            self._ended = True
            self._state = _BETWEEN

    def _end_call(self, out: list[object], pos: int) -> None:
        self.emit(out, pos, end=not self._ended)
        self._ended = True
        self._state = _BETWEEN

    def _end_section(self, out: list[object], end: int) -> int:
        """The section is over at ``end``: its trailing text goes with the last call, or is surfaced."""
        if self.named:
            self.emit(out, end)
            return self.finish_block(end)
        if self._aborted:
            self.new_call()
        return self.abort(out, end)

    def _drop(self, out: list[object], pos: int, close_args: str | None = None) -> None:
        """Surface the uncommitted text up to ``pos`` and complete a named call; the block goes on.

        ``DriverBase.abort`` also ends the block; a section resumes at its next marker.
        """
        self._args_pending = []
        if self.named and not self._ended:
            self.abort(out, pos, close_args="" if self._args_closed else close_args or "{}")
            self._ended = True
        else:
            self.abort(out, pos)
            if not self.named:
                self._aborted = True
        self.done = False

    def _fail(self, out: list[object], pos: int) -> tuple[int, bool]:
        """The call cannot go on at ``pos``: complete a named call, then skip to the next marker."""
        if self.named and not self._ended:
            scan = self._scan
            self._drop(out, pos, scan.closer() if scan is not None and not self._args_closed else None)
        if not self._section:
            return self.abort(out, pos), False  # bare calls: the caller takes the rest as text
        self._state = _SKIP
        return pos, True
