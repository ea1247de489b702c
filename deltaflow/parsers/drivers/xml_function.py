"""The XML-like, function-first driver: one class for Qwen3-Coder, GLM-4.x, MiniMax-M2, Seed-OSS and DSML.

Every dialect of this family is the same grammar with different markers
(shared/dialects.md sections 6, 7, 8c, 10 and 12)::

    block   := [BLOCK_OPEN] call+ [BLOCK_CLOSE]
    call    := CALL_OPEN header [param* | json] [CALL_CLOSE]
    param   := PARAM_OPEN key KEY_END [VALUE_OPEN] value VALUE_CLOSE

declared by a frozen :class:`XmlFunctionFormat`: ``<function=NAME>`` or
``<invoke name="NAME">`` headers (GLM: the bare name right after
``<tool_call>``), ``<parameter=KEY>`` / ``<parameter name="KEY">`` /
``<arg_key>KEY</arg_key><arg_value>`` parameters, and per-dialect options
(framing newlines, DSML's ``string=`` attribute, a JSON invoke body, lone
wrapper parameters).

Rules of this driver:

* Values are raw text, converted with the tool's JSON schema
  (``_core/schema.py``). A value that can only be a string streams at once,
  JSON-escaped, as ``"key": "...``; a value that may still be a number,
  boolean, null, object or array is held until it either cannot be (then it
  streams as a string from its first character) or its end tag arrives (then
  it is converted whole). The arguments are built as ``{"k": v, ...}`` in the
  model's order, duplicate keys kept, so the fragments always form a prefix
  of one JSON object.
* A value ends at its close tag or at the block's close tag; with
  ``open_ends_value`` (Qwen3-Coder, Seed-OSS) also at the next parameter or
  the call's close tag (vLLM and llama.cpp tolerate a missing
  ``</parameter>``). Only its own close tag is consumed. Text that merely
  looks like a tag inside a value (``<tool_call>``, ``<div>``) is value text.
* Missing closers are tolerated: a block may end after a call without its
  closer, a call may end at the block closer or at the next call. A block
  that holds calls (MiniMax, DSML, Qwen3-Coder) may hold several.
* Malformed structure ends the block where it goes wrong: a named call is
  completed (its arguments object closed), the text it cannot use is
  surfaced, and the rest goes back to the caller as text. A call without a
  name is never emitted, and a name is announced only once a tag of the
  call's body follows its header (or the output ends there), so prose after
  ``<function=x>`` or GLM's ``<tool_call>`` stays prose.
* A call whose function header runs over ``MAX_HEADER`` characters, or,
  when the request offers tools, over the longest offered name plus
  ``NAME_HEADER_SLACK`` (it cannot name an offered tool), or whose name is
  over 256 characters, is not a call: in a dialect with a call opener it is
  surfaced as text as it arrives, up to its closer (or the next call or
  block), and the block goes on, so the calls after it stay calls.
* ``final=True``: a streamed string value is closed where the text ended; a
  held value is emitted only if its text converts to its typed value (a cut
  number or literal), otherwise it is surfaced; the arguments are closed.
* With ``cdata`` (MiniCPM5), a value that starts with ``<![CDATA[`` runs to
  the first ``]]>`` whatever it holds (a literal ``</param>`` included); the
  wrapper is dropped and its content kept verbatim (then typed as any
  value). Blanks between ``]]>`` and the value's close tag are dropped; other
  text after ``]]>`` continues the value as plain text.

Stable-prefix guarantee: held back are a partial tag (at most the longest
marker, or of ``<![CDATA[`` at a value's start and of ``]]>`` inside one, and the blanks
after ``]]>`` up to ``BLANK_RUN_MAX``), one framing newline where the dialect strips it, a function or
parameter header until its end (at most 512 characters; a function header at
most the longest offered name plus 64 when tools are offered), a call's name until
the next tag (only whitespace may come between; with ``json_body``, until ``{``
or the call's closer follows), a JSON body after its last safe position (at
most one key, a colon and a partial scalar), and a value that may still
be typed (a scalar of at most ``SCALAR_MAX`` characters, or an object or
array until its end tag). Whitespace between a named call's elements is
held only up to ``BLANK_RUN_MAX`` (256) characters of one run: a longer run
becomes raw text of the call as it is read. Everything else is emitted at
once. Consumed text is never scanned again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from functools import cache, partial
from typing import Literal, final

import msgspec

from ..._core.holdback import MarkerHoldback
from ..._core.jsonscan import JsonScanner
from ..._core.schema import (
    JSON_PLAN,
    STRING_PLAN,
    Tentative,
    ValuePlan,
    convert,
    json_fragment,
    json_kind,
    json_string,
    parameter_plans,
    tentative,
)
from ...items import ToolDelta
from ..base import BLANK_RUN_MAX, DriverBase
from ..spec import DriverContext, FormatDefaults

__all__ = ("XmlFunctionDriver", "XmlFunctionFormat")

MAX_HEADER = 512
"""Longest function or parameter header (between its open tag and ``>``) held before it is malformed."""

NAME_HEADER_SLACK = 64
"""When the request offers tools, a function header longer than the longest offered name plus this is no call."""

_NAME_MAX = 256
_NAME_OK = re.compile(rf"[^\s<>\"'`\\/]{{1,{_NAME_MAX}}}")
_ATTR = re.compile(r"\s*([A-Za-z_][\w:.-]*)\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s\"'=<>`]+))")
_BARE_NAME = re.compile(r"[^\s<>\\]*")


class _State(IntEnum):
    """Parser states."""

    START = 0
    BLOCK = 1
    NAME = 2
    NAME_WAIT = 3
    BODY = 4
    KEY = 5
    VOPEN = 6
    VALUE = 7
    JSON = 8
    AFTER = 9
    DONE = 10
    SKIP = 11


_START, _BLOCK, _NAME, _NAME_WAIT, _BODY, _KEY, _VOPEN, _VALUE, _JSON, _AFTER, _DONE, _SKIP = tuple(_State)
# Outcomes of _header().
_H_OK, _H_BAD, _H_LONG = range(3)
# Values of _which(): a marker index, or one of these.
_NONE, _NEED = -1, -2
# Value modes.
_STREAM, _HOLD = 0, 1
# Indexes into _Tables.block_markers and .body_markers (an absent marker is "", never matched).
_BL_CALL_OPEN, _BL_BLOCK_CLOSE = range(2)
_B_PARAM, _B_CALL_CLOSE, _B_BLOCK_CLOSE, _B_CALL_OPEN, _B_BLOCK_OPEN = range(5)


class _CdataState(IntEnum):
    """CDATA states of a value (XmlFunctionFormat.cdata): none / maybe at its start / inside / right after ``]]>``."""

    CD_NONE = 0
    CD_START = 1
    CD_IN = 2
    CD_AFTER = 3


_CD_NONE, _CD_START, _CD_IN, _CD_AFTER = tuple(_CdataState)
CDATA_OPEN = "<![CDATA["
CDATA_CLOSE = "]]>"
_CDATA_HOLD = MarkerHoldback((CDATA_CLOSE,))


@dataclass(frozen=True)
class XmlFunctionFormat(FormatDefaults):
    """Declaration of an XML-like, function-first tool format.

    Attributes:
        block_open: the outer block's opener, or None (no wrapper).
        block_close: the outer block's closer, or None.
        call_open: the opener of one call (``<function=``, ``<invoke``), or
            None when the bare name follows ``block_open`` (GLM).
        call_close: the closer of one call, or None (the call ends at ``block_close``).
        name_style: ``"equals"`` (``<function=NAME>``), ``"attr"``
            (``<invoke name="NAME">``) or ``"bare"`` (GLM: the name runs to
            whitespace or ``<``).
        param_open: the opener of one parameter.
        key_style: ``"equals"``, ``"attr"`` or ``"text"`` (GLM: the key runs to ``key_end``).
        key_end: what ends the key (``">"`` or ``"</arg_key>"``).
        value_open: a marker between the key and the value (GLM's ``<arg_value>``), or None.
        value_close: the value's closer.
        strip: framing newlines removed from a value: ``"none"``, ``"each"``
            (one leading and one trailing newline) or ``"paired"`` (a
            trailing newline only when a leading one was removed).
        bare_call: ``call_open`` also opens a block without ``block_open``.
        type_attr: a parameter attribute saying whether the value is a raw
            string (``"true"``) or JSON (``"false"``): DSML's ``string``.
        json_body: a call's body may be a JSON object instead of parameters.
        unwrap_keys: parameter names that, as the only parameter of a call
            whose schema does not know them, wrap the real arguments object.
        literal_newline_ws: a literal backslash-n between elements counts as
            whitespace (GLM models sometimes write it).
        open_ends_value: the next parameter's opener or the call's closer
            also ends a value (a missing value closer is tolerated; vLLM
            qwen3_coder). The block closer always ends a value.
        fillers: markers that count as whitespace between elements (Step3's
            per-call ``<｜tool_call_begin｜>function<｜tool_sep｜>`` and
            ``<｜tool_call_end｜>`` around each invoke); a partial one is held.
        cdata: a value may start with ``<![CDATA[``; it then runs to ``]]>``
            (which may be followed by blanks before the close tag), the
            wrapper is dropped and the content kept verbatim (MiniCPM5).
    """

    block_open: str | None
    block_close: str | None
    call_open: str | None
    call_close: str | None
    name_style: Literal["equals", "attr", "bare"]
    param_open: str
    key_style: Literal["equals", "attr", "text"]
    key_end: str
    value_open: str | None
    value_close: str
    strip: Literal["none", "each", "paired"] = "none"
    bare_call: bool = False
    type_attr: str | None = None
    json_body: bool = False
    unwrap_keys: tuple[str, ...] = ()
    literal_newline_ws: bool = False
    open_ends_value: bool = False
    fillers: tuple[str, ...] = ()
    cdata: bool = False

    @property
    def openers(self) -> tuple[str, ...]:
        """The markers that open a block in text."""
        out = tuple(m for m in (self.block_open,) if m)
        if self.bare_call and self.call_open:
            out += (self.call_open,)
        return out

    @property
    def markers(self) -> tuple[str, ...]:
        """Every tag of the format."""
        tags = (
            self.block_open, self.block_close, self.call_open, self.call_close, self.param_open,
            self.key_end if self.key_end != ">" else None, self.value_open, self.value_close,
        )
        return tuple(dict.fromkeys(t for t in tags if t))

    def driver_factory(self) -> Callable[[DriverContext], XmlFunctionDriver]:
        """One :class:`XmlFunctionDriver` per block."""
        return partial(XmlFunctionDriver, spec=self)


@dataclass(frozen=True)
class _Tables:
    """Immutable tables derived once per spec."""

    sep: re.Pattern[str]
    sep_markers: tuple[str, ...]
    start_markers: tuple[str, ...]
    block_markers: tuple[str, ...]
    body_markers: tuple[str, ...]
    closers: tuple[str, ...]
    value_end: re.Pattern[str]
    value_first: str
    value_hold: MarkerHoldback
    name_stop: re.Pattern[str]
    key_stop: re.Pattern[str]
    skip_end: re.Pattern[str]
    skip_hold: MarkerHoldback


@cache
def _tables(spec: XmlFunctionFormat) -> _Tables:
    sep_markers: tuple[str, ...] = ("\\n",) if spec.literal_newline_ws else ()
    if spec.fillers:
        sep_markers += spec.fillers
    # Blanks are one single-character repeat (the regex engine keeps no state per character, so
    # a long run costs no memory); the outer group repeats once per whitespace marker.
    sep_alt = "|".join(re.escape(m) for m in sep_markers)
    sep = re.compile(r"[ \t\r\n]*" + (r"(?:(?:" + sep_alt + r")[ \t\r\n]*)*" if sep_alt else ""))
    extra = (spec.param_open, spec.call_close) if spec.open_ends_value else ()
    ends = tuple(m for m in (spec.value_close, spec.block_close, *extra) if m)
    body = (spec.param_open, spec.call_close, spec.block_close, spec.call_open, spec.block_open)
    # What ends a call that is not one (an over-long name): its closer, or where the next call or block begins.
    skip = tuple(m for m in dict.fromkeys((spec.call_close, spec.call_open, spec.block_close, spec.block_open)) if m)
    return _Tables(
        sep=sep,
        sep_markers=sep_markers,
        start_markers=spec.openers,
        block_markers=tuple(m or "" for m in (spec.call_open, spec.block_close)),
        body_markers=tuple(m or "" for m in body),
        closers=tuple(m for m in (spec.call_close, spec.block_close) if m),
        value_end=re.compile("|".join(re.escape(m) for m in dict.fromkeys(ends))),
        # The first character of every end marker when they share one ("<"), else "".
        value_first=ends[0][0] if len({m[0] for m in ends}) == 1 else "",
        value_hold=MarkerHoldback(ends),
        name_stop=_stop_re(">", "<\n" if spec.name_style == "equals" else "<"),
        key_stop=_stop_re(spec.key_end, "<\n" if spec.key_style == "equals" else "<"),
        skip_end=re.compile("|".join(re.escape(m) for m in sorted(skip, key=len, reverse=True)) or r"(?!)"),
        skip_hold=MarkerHoldback(skip),
    )


def _stop_re(end: str, forbidden: str) -> re.Pattern[str]:
    """What stops a header: the first character of its end, or a character a header never holds."""
    return re.compile("[" + re.escape("".join(dict.fromkeys(end[0] + forbidden))) + "]")


def _which(text: str, pos: int, markers: tuple[str, ...], final: bool) -> int:
    """The index of the marker at ``pos``, ``_NEED`` for a partial one at the end, else ``_NONE`` ("" never matches)."""
    for i, m in enumerate(markers):
        if m and text.startswith(m, pos):
            return i
    if not final:
        rest = text[pos:]
        if any(m and m.startswith(rest) for m in markers):
            return _NEED
    return _NONE


def _attrs(header: str) -> dict[str, str] | None:
    """Parse `` name="x" string="true"`` (leading whitespace required); None when malformed."""
    if not header[:1].isspace():
        return None
    out: dict[str, str] = {}
    pos = 0
    n = len(header.rstrip().removesuffix("/").rstrip())
    while pos < n:
        m = _ATTR.match(header, pos)
        if m is None:
            return None
        value = m.group(2) if m.group(2) is not None else m.group(3) if m.group(3) is not None else m.group(4)
        out.setdefault(m.group(1), value)
        pos = m.end()
    return out


@final
class XmlFunctionDriver(DriverBase):
    """Parses one block of an XML-like, function-first dialect (see the module docstring)."""

    __slots__ = (
        "_spec", "_t", "_state", "_parts", "_name", "_key", "_attrs", "_plan", "_plans",
        "_nparams", "_vmode", "_vstart", "_vlead", "_vsaw", "_vscalar", "_vwhole", "_wrap", "_wrapped",
        "_scan", "_json_pending", "_args_done", "_name_max", "_vcdata", "_channel",
    )

    def __init__(self, ctx: DriverContext, spec: XmlFunctionFormat) -> None:
        super().__init__(ctx)
        self._spec = spec
        self._channel = ctx.channel
        self._t = _tables(spec)
        self._state = _START
        self._parts: list[str] = []
        self._name = ""
        self._key = ""
        self._attrs: dict[str, str] = {}
        self._plan = STRING_PLAN
        self._plans: dict[str, ValuePlan] = {}
        self._nparams = 0
        self._vmode = _STREAM
        self._vstart = False
        self._vlead = False
        self._vsaw = False
        self._vscalar = ""
        self._vwhole = False
        self._wrap = False
        self._wrapped: tuple[str, str, ValuePlan] | None = None
        self._scan = JsonScanner()
        self._json_pending: list[str] = []
        self._args_done = False
        self._vcdata = _CD_NONE
        # A function header longer than this cannot name an offered tool (see NAME_HEADER_SLACK).
        longest = max(map(len, ctx.tools), default=0) if ctx.tools else 0
        self._name_max = min(MAX_HEADER, longest + NAME_HEADER_SLACK) if longest else MAX_HEADER
        self.new_call()

    def feed_tool_block(self, text: str, out: list[object], final: bool, start: int = 0) -> int:
        """Consume what can be consumed of ``text[start:]`` (see :class:`~deltaflow.parsers.spec.ToolDriver`)."""
        # DriverBase's feed_tool_block with its begin and hold inlined: a long value is fed once
        # per chunk, and the two calls were a tenth of the driver's cost there.
        self._text = text
        self._raw_from = self._feed_start = start
        self._blank_end = -1
        pos = self._run(text, start, out, final)
        if not self.done:
            if pos != self._blank_end:
                self._blank_run = 0  # the feed did not end inside a whitespace run
            if pos > self._raw_from:
                self._uncommitted.append(text[self._raw_from : pos])
                self._raw_from = pos
        self._text = ""
        return pos

    # -- the machine ------------------------------------------------------------------------
    def _sep(self, text: str, pos: int) -> int:
        m = self._t.sep.match(text, pos)
        return m.end() if m is not None else pos

    def _run(self, text: str, pos: int, out: list[object], final: bool) -> int:
        spec = self._spec
        t = self._t
        n = len(text)
        while True:
            st = self._state
            if st == _VALUE:
                pos, more = self._value(text, pos, out, final)
                if not more:
                    return pos
                continue
            if st == _START:
                p = self._sep(text, pos)
                w = _which(text, p, t.start_markers, final)
                if w == _NEED:
                    return pos
                if w == _NONE:
                    return self.abort(out, p)
                marker = t.start_markers[w]
                pos = p + len(marker)
                if marker == spec.block_open:
                    self._state = _BLOCK if spec.call_open is not None else _NAME
                else:
                    self._begin_name()
            elif st == _BLOCK:
                p = self._sep(text, pos)
                w = _which(text, p, t.block_markers + t.sep_markers, final)
                if w == _NEED:
                    return p
                if w == _BL_CALL_OPEN:
                    pos = p + len(t.block_markers[w])
                    self._begin_name()
                elif w == _BL_BLOCK_CLOSE:  # an empty block is not a call: surfaced whole
                    return self.abort(out, p + len(t.block_markers[w]))
                else:
                    return self.abort(out, p)
            elif st == _NAME:
                pos, more = self._read_name(text, pos, out, final)
                if not more:
                    return pos
            elif st == _NAME_WAIT:
                # A call is announced only once its header is followed by a tag of its body
                # (or the output ends), so prose after "<function=x>" or "<tool_call>x" stays prose.
                p = self._sep(text, pos)
                if p - pos > BLANK_RUN_MAX:  # no body tag after that many blanks: not a call (bounded hold)
                    return self.abort(out, pos)
                w = _which(text, p, t.body_markers + t.sep_markers, final)
                if w == _NEED:
                    return pos  # the whitespace too: it is surfaced with the header if no tag follows
                if not (
                    0 <= w < len(t.body_markers)
                    or (spec.json_body and text.startswith("{", p))
                    or (final and (p >= n or self._cut_closer(text, p)))
                ):
                    return self.abort(out, pos)  # not a call after all: surfaced whole
                self.emit(out, p, name=self._name)
                self._bind_tool()
                self._state = _BODY
                pos = p
            elif st == _BODY:
                p = self._sep(text, pos)
                if p != pos or pos == self._feed_start:
                    self.blank_run(out, pos, p)  # a long run is raw text of the call now (bounded hold)
                if p >= n and not final:
                    return p
                c = text[p] if p < n else ""
                if c == "{" and spec.json_body and self._nparams == 0 and self._wrapped is None and not self._args_done:
                    self._scan = JsonScanner()
                    self._json_pending = []
                    self.emit(out, p)  # commit the header, so that raw and arguments text coincide
                    self._state = _JSON
                    pos = p
                    continue
                w = _which(text, p, t.body_markers + t.sep_markers, final)
                if w == _NEED:
                    return p
                if w == _B_PARAM and not self._args_done:
                    self._flush_wrapped(out, p)
                    pos = p + len(t.body_markers[w])
                    self._parts = []
                    self._state = _KEY
                elif w == _B_CALL_CLOSE:
                    pos = self._end_call(out, p + len(t.body_markers[w]), block_done=False)
                elif w == _B_BLOCK_CLOSE:
                    return self._end_call(out, p + len(t.body_markers[w]), block_done=True)
                elif w == _B_CALL_OPEN:  # a missing call closer: the next call starts here
                    self._end_call(out, p, block_done=False)
                    pos = p + len(t.body_markers[w])
                    self.new_call()
                    self._begin_name()
                elif w == _B_BLOCK_OPEN:  # a missing block closer: the next block starts here
                    return self._end_call(out, p, block_done=True)
                elif final and (p >= n or self._cut_closer(text, p)):
                    if not self.committed:  # cut before its arguments began: not a call
                        return self.abort(out, n)
                    return self._end_call(out, n, block_done=True)
                else:
                    return self.abort(out, p, close_args=self._closer())
            elif st == _KEY:
                pos, more = self._read_key(text, pos, out, final)
                if not more:
                    return pos
            elif st == _VOPEN:
                assert spec.value_open is not None
                p = self._sep(text, pos)
                if p != pos or pos == self._feed_start:
                    self.blank_run(out, pos, p)
                w = _which(text, p, (spec.value_open,) + t.sep_markers, final)
                if w == _NEED:
                    return p
                if w != 0:
                    return self.abort(out, p, close_args=self._closer())
                pos = p + len(spec.value_open)
                self._begin_value(out, pos)
            elif st == _SKIP:
                pos, more = self._skip(text, pos, out, final)
                if not more:
                    return pos
            elif st == _JSON:
                pos, more = self._json(text, pos, out, final)
                if not more:
                    return pos
            elif st == _AFTER:
                p = self._sep(text, pos)
                if p - pos > BLANK_RUN_MAX:  # that many blanks after a call end the block (bounded hold)
                    return self.finish_block(pos)
                w = _which(text, p, t.block_markers + t.sep_markers, final)
                if w == _NEED:
                    return pos  # whitespace and a partial tag: held by the caller
                if w == _BL_CALL_OPEN:
                    self.new_call()
                    pos = p + len(t.block_markers[w])
                    self._begin_name()
                elif w == _BL_BLOCK_CLOSE:
                    end = p + len(t.block_markers[w])
                    # The closer is raw text of the last call; after a call that is not one, text.
                    (self.emit if self.named else self.surface)(out, end)
                    return self.finish_block(end)
                elif final and self._cut_closer(text, p):
                    (self.emit if self.named else self.surface)(out, n)
                    return self.finish_block(n)
                else:
                    return self.finish_block(pos)  # text after the block is not ours
            else:  # pragma: no cover - _DONE is never run
                return pos

    # -- names and keys ---------------------------------------------------------------------
    def _begin_name(self) -> None:
        self._parts = []
        self._nparams = 0
        self._wrapped = None
        self._args_done = False
        self._state = _NAME

    def _header(
        self, text: str, pos: int, final: bool, end: str, stop: re.Pattern[str], limit: int = MAX_HEADER
    ) -> tuple[int, str | None, int]:
        """Read a header up to ``end``: ``(pos, header, status)``; header None while incomplete.

        ``status`` is ``_H_LONG`` as soon as the header runs over ``limit``
        characters (whatever ends it: the same verdict on every chunking),
        ``_H_BAD`` when it is malformed, else ``_H_OK``.
        """
        m = stop.search(text, pos)
        i = m.start() if m is not None else len(text)
        if sum(map(len, self._parts)) + i - pos > limit:
            return i, None, _H_LONG
        if m is None:
            self._parts.append(text[pos:])
            return len(text), None, _H_BAD if final else _H_OK
        if text.startswith(end, i):
            self._parts.append(text[pos:i])
            header = "".join(self._parts)
            self._parts = []
            return i + len(end), header, _H_OK
        if len(end) > 1 and end.startswith(text[i:]) and not final:
            self._parts.append(text[pos:i])
            return i, None, _H_OK
        return i, None, _H_BAD

    def _read_name(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        spec = self._spec
        if spec.name_style == "bare":
            if not self._parts:
                pos = self._sep(text, pos)  # whitespace before the name
                if not final and _which(text, pos, self._t.sep_markers, False) == _NEED and pos < len(text):
                    return pos, False  # maybe a literal backslash-n
            m = _BARE_NAME.match(text, pos)
            end = m.end() if m is not None else pos
            if end > pos:
                self._parts.append(text[pos:end])
            if end >= len(text):
                if final or sum(map(len, self._parts)) > MAX_HEADER:
                    return self.abort(out, end), False  # a name cut short is no name
                return end, False
            name = "".join(self._parts)
            if not _NAME_OK.fullmatch(name):
                return self.abort(out, end), False
            self._name = name
            self._state = _NAME_WAIT
            return end, True
        end_pos, header, status = self._header(text, pos, final, ">", self._t.name_stop, self._name_max)
        if status == _H_LONG and spec.call_open is not None:
            return self._begin_skip(end_pos), True  # not a call; the block goes on after it
        if status != _H_OK:
            return self.abort(out, end_pos), False
        if header is None:
            return end_pos, False
        if spec.name_style == "equals":
            name = header.strip()
        else:
            attrs = _attrs(header)
            name = attrs.get("name", "") if attrs is not None else ""
        if not _NAME_OK.fullmatch(name):
            if len(name) > _NAME_MAX and spec.call_open is not None:
                return self._begin_skip(end_pos), True
            return self.abort(out, end_pos - 1), False
        self._name = name
        self._state = _NAME_WAIT
        return end_pos, True

    def _begin_skip(self, pos: int) -> int:
        """The call's name is over-long: the call is not one; surface it and go on after it."""
        self._parts = []
        self._state = _SKIP
        return pos

    def _skip(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        """Surface the text of a call that is not one, up to its closer or the next call or block."""
        t = self._t
        m = t.skip_end.search(text, pos)
        if m is None:
            end = len(text) if final else len(text) - t.skip_hold.held(text, pos)
            self.surface(out, end)
            return (self.finish_block(end) if final else end), False
        end = m.end() if m.group() == self._spec.call_close else m.start()
        self.surface(out, end)
        self._state = _AFTER
        return end, True

    def _bind_tool(self) -> None:
        tools = self.ctx.tools
        tool = tools.get(self._name) if tools is not None else None
        self._plans = parameter_plans(tool.parameters) if tool is not None else {}

    def _read_key(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        spec = self._spec
        style = spec.key_style
        end_pos, header, status = self._header(text, pos, final, spec.key_end, self._t.key_stop)
        if status != _H_OK:
            return self.abort(out, end_pos, close_args=self._closer()), False
        if header is None:
            return end_pos, False
        attrs: dict[str, str] = {}
        if style == "attr":
            parsed = _attrs(header)
            key = parsed.get("name", "") if parsed is not None else ""
            attrs = parsed or {}
        else:
            key = header.strip()
        if not key or len(key) > 256:
            return self.abort(out, end_pos - len(spec.key_end), close_args=self._closer()), False
        self._key = key
        self._attrs = attrs
        if spec.value_open is not None:
            self._state = _VOPEN
        else:
            self._begin_value(out, end_pos)
        return end_pos, True

    # -- values -------------------------------------------------------------------------------
    def _plan_for(self, key: str) -> ValuePlan:
        plan = self._plans.get(key)
        if plan is not None:
            return plan  # the schema wins over a type attribute (vLLM deepseek_v32)
        attr = self._spec.type_attr
        if attr is not None and self._attrs.get(attr, "").strip().lower() == "false":
            return JSON_PLAN
        return STRING_PLAN

    def _key_prefix(self) -> str:
        return ("{" if self._nparams == 0 else ", ") + json_string(self._key) + ": "

    def _begin_value(self, out: list[object], pos: int) -> None:
        spec = self._spec
        key = self._key
        self._plan = self._plan_for(key)
        self._wrap = (
            key in spec.unwrap_keys and self._nparams == 0 and bool(self._plans) and key not in self._plans
        )
        self._vstart = spec.strip != "none"
        self._vlead = False
        self._vsaw = False
        self._vscalar = ""
        self._vwhole = self._wrap
        self._vcdata = _CD_START if spec.cdata else _CD_NONE
        self._parts = []
        self._state = _VALUE
        if self._plan.streams and not self._wrap:
            self._vmode = _STREAM
            self.emit(out, pos, args=self._key_prefix() + '"')
            self._nparams += 1
        else:
            self._vmode = _HOLD

    def _strips_trailing(self) -> bool:
        s = self._spec.strip
        return s == "each" or (s == "paired" and self._vlead)

    def _value(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        n = len(text)
        if self._vstart:
            if pos >= n and not final:
                return pos, False
            self._vstart = False
            if pos < n and text[pos] == "\n":  # one framing newline (dialects.md section 6)
                pos += 1
                self._vlead = True
        if self._vcdata != _CD_NONE:
            pos, done = self._cdata(text, pos, out, final)
            if done is not None:
                return pos, done
        t = self._t
        # Where an end marker could begin: at their shared first character (one str.find skips the
        # regex search and the hold-back when the rest of the text has none), else anywhere.
        first = text.find(t.value_first, pos) if t.value_first else pos
        m = t.value_end.search(text, first) if first >= 0 else None
        if m is not None:
            end = m.start()
        elif final:
            end = n
        else:
            end = n - t.value_hold.held(text, pos) if first >= 0 else n
            if end > pos and text[end - 1] == "\n" and self._strips_trailing():
                end -= 1  # maybe the framing newline before the close tag
        piece = text[pos:end]
        if m is None and not final:
            if self._vmode == _HOLD:
                self._parts.append(piece)
                if not self._vwhole:
                    self._decide(out, end)
            elif piece:
                # emit(out, end, args=...) for a piece of a streamed string, inlined (its raw text is
                # the piece itself when nothing before it in this feed is unattributed).
                if self.named:
                    self.committed = True
                if self._raw_from == pos and not self._uncommitted:
                    raw = piece
                    self._raw_from = end
                else:
                    raw = self._take(end)
                out.append(ToolDelta(call=self.call, channel=self._channel, args=json_fragment(piece), raw=raw))
            return end, False
        if m is None:  # the output ended inside the value
            return self._value_cut(out, n, piece), False
        if piece.endswith("\n") and self._strips_trailing():
            piece = piece[:-1]
        stop = m.end() if m.group() == self._spec.value_close else end
        self._finish_value(out, stop, piece)
        self._state = _BODY
        return stop, True

    def _cdata(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool | None]:
        """A CDATA-wrapped value (``XmlFunctionFormat.cdata``).

        Returns ``(pos, more)``, or ``(pos, None)`` to scan on as plain text.
        """
        n = len(text)
        if self._vcdata == _CD_START:
            if text.startswith(CDATA_OPEN, pos):
                pos += len(CDATA_OPEN)
                self._vcdata = _CD_IN
            elif not final and CDATA_OPEN.startswith(text[pos:]):
                return pos, False  # nothing yet, or a partial "<![CDATA[" (it may be a close tag too)
            else:
                self._vcdata = _CD_NONE
                return pos, None
        if self._vcdata == _CD_IN:
            i = text.find(CDATA_CLOSE, pos)
            if i < 0:
                if final:  # the output ended inside the CDATA section
                    self._vcdata = _CD_NONE
                    return self._value_cut(out, n, text[pos:]), False
                end = n - _CDATA_HOLD.held(text, pos)
                self._value_piece(out, end, text[pos:end])
                return end, False
            self._value_piece(out, i + len(CDATA_CLOSE), text[pos:i])
            pos = i + len(CDATA_CLOSE)
            self._vcdata = _CD_AFTER
        # Right after "]]>": blanks then the close tag end the value; anything else continues it.
        p = self._sep(text, pos)
        if p - pos > BLANK_RUN_MAX:
            self._vcdata = _CD_NONE
            return pos, None
        m = self._t.value_end.match(text, p)
        if m is not None:
            self._vcdata = _CD_NONE
            stop = m.end() if m.group() == self._spec.value_close else p
            self._finish_value(out, stop, "")
            self._state = _BODY
            return stop, True
        if not final and (p >= n or self._t.value_hold.held(text, p) == n - p):
            return pos, False  # blanks, maybe a partial close tag: held
        self._vcdata = _CD_NONE
        return pos, None

    def _value_piece(self, out: list[object], end: int, piece: str) -> None:
        """Take ``piece`` of an unfinished value (its raw text runs to ``end``): stream it or hold it."""
        if self._vmode == _HOLD:
            self._parts.append(piece)
            if not self._vwhole:
                self._decide(out, end)
        elif piece:
            self.emit(out, end, args=json_fragment(piece))

    def _decide(self, out: list[object], pos: int) -> None:
        """A held value that cannot be typed any more streams as a string from its first character."""
        if not self._vsaw:
            last = self._parts[-1]
            if not last or last.isspace():
                return  # blank so far (each earlier part was checked when it came): no rescan
            s = "".join(self._parts).lstrip()
            self._vsaw = True
            self._vscalar = s
        else:
            self._vscalar += self._parts[-1]
        verdict = tentative(self._plan, self._vscalar)
        if verdict is Tentative.NEED:
            return
        self._vscalar = ""
        if verdict is Tentative.WHOLE:
            self._vwhole = True
            return
        held = "".join(self._parts)
        self._parts = []
        self._vmode = _STREAM
        self.emit(out, pos, args=self._key_prefix() + '"' + json_fragment(held))
        self._nparams += 1

    def _finish_value(self, out: list[object], pos: int, piece: str) -> None:
        if self._vmode == _STREAM:
            self.emit(out, pos, args=json_fragment(piece) + '"')
            return
        self._parts.append(piece)
        value = "".join(self._parts)
        self._parts = []
        if self._wrap:
            self._wrapped = (self._key, value, self._plan)
            return
        self.emit(out, pos, args=self._key_prefix() + (convert(self._plan, value) or ""))
        self._nparams += 1

    def _value_cut(self, out: list[object], end: int, piece: str) -> int:
        """The output ended inside a value: close a string; keep a held value only if its text is typed."""
        if self._vmode == _STREAM:
            self.emit(out, end, args=json_fragment(piece) + '"')
            return self._end_call(out, end, block_done=True)
        self._parts.append(piece)
        value = "".join(self._parts)
        self._parts = []
        if self._wrap:
            return self.abort(out, end, close_args=self._closer())
        if tentative(self._plan, value) is Tentative.NO:
            found: str | None = json_string(value)  # a string, as the stream already knew
        else:
            found = convert(self._plan, value, typed_only=True)
        if found is None:
            return self.abort(out, end, close_args=self._closer())
        self.emit(out, end, args=self._key_prefix() + found)
        self._nparams += 1
        return self._end_call(out, end, block_done=True)

    def _flush_wrapped(self, out: list[object], pos: int) -> None:
        """A held wrapper parameter turned out not to wrap: emit it as an ordinary parameter."""
        if self._wrapped is None:
            return
        key, value, plan = self._wrapped
        self._wrapped = None
        self._key = key
        self.emit(out, pos, args=self._key_prefix() + (convert(plan, value) or ""))
        self._nparams += 1

    def _unwrapped(self) -> str | None:
        """The arguments object a lone wrapper parameter holds, if its keys are the tool's parameters."""
        if self._wrapped is None or self._nparams:
            return None
        value = self._wrapped[1].strip()
        if json_kind(value) != "{":
            return None
        try:
            obj = msgspec.json.decode(value)
        except UnicodeEncodeError:  # a raw lone surrogate: not JSON text
            return None
        if isinstance(obj, Mapping) and obj and all(k in self._plans for k in obj):
            return value
        return None

    # -- JSON body (DSML, as SGLang accepts) ---------------------------------------------------
    def _json(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        scan = self._scan
        consumed, safe = scan.scan(text, pos, final)
        if scan.error:
            self._flush_json(out, text, pos, safe, pos)
            return self.abort(out, scan.error_pos, close_args=scan.closer()), False
        self._flush_json(out, text, pos, safe, consumed)
        if not scan.done:
            if final:
                return self.abort(out, consumed, close_args=scan.closer()), False
            return consumed, False
        self._args_done = True
        self._nparams = 1
        self._state = _BODY
        return consumed, True

    def _flush_json(self, out: list[object], text: str, start: int, safe: int, consumed: int) -> None:
        """Emit the body's source text up to the safe position; keep the rest pending (raw = arguments)."""
        self.flush_source(out, self._json_pending, text, start, safe, consumed)

    # -- ends ---------------------------------------------------------------------------------
    def _closer(self) -> str:
        """What closes the arguments emitted so far (outside a streamed string or a JSON body)."""
        if self._args_done:
            return ""
        return "}" if self._nparams else "{}"

    def _end_call(self, out: list[object], pos: int, *, block_done: bool) -> int:
        """End the current call at ``pos`` (its raw text runs to ``pos``); end the block too if asked."""
        unwrapped = self._unwrapped()
        if unwrapped is not None:
            self._wrapped = None
            self.emit(out, pos, args=unwrapped, end=True)
        else:
            self._flush_wrapped(out, pos)
            args = "" if self._args_done else "}" if self._nparams else "{}"
            self.emit(out, pos, args=args, end=True)
        self._args_done = True
        if block_done:
            return self.finish_block(pos)
        self._state = _AFTER
        return pos

    def _cut_closer(self, text: str, pos: int) -> bool:
        """At the end of the output: is ``text[pos:]`` a closer cut short (it belongs to the call)?"""
        rest = text[pos:]
        return bool(rest) and any(c.startswith(rest) for c in self._t.closers)

    def finish_block(self, pos: int) -> int:
        """Mark the block over at ``pos``; returns ``pos``."""
        self._state = _DONE
        return super().finish_block(pos)
