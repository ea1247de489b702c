"""The pythonic driver: ``[f(a=1, b="x"), g()]``, never evaluated.

Facts (shared/dialects.md section 4): Llama 4 (``llama4_pythonic``), Llama
3.2 small models, ToolACE and others (``pythonic``) answer with a Python list
literal of calls with keyword arguments whose values are Python literals
(str with either quote and escapes, int, float, True/False/None, list, dict,
nested). Llama 4 may wrap the list in ``<|python_start|>``...``<|python_end|>``
(special tokens). vLLM recognises a call list only when the output starts
with ``[`` (or ``<|python_start|>``): the dialect declares ``[`` as a start
opener, so a list opens a block only where nothing but whitespace came
before in the channel.

Rules of this driver:

* A call is ``NAME(`` (a Python identifier, dotted names allowed, no space
  before the parenthesis); its name is announced as soon as the ``(`` is
  seen. Each keyword argument is emitted when its value ends (at the ``,``
  or ``)`` that follows it outside brackets and strings), so the arguments
  text is always a prefix of one JSON object: ``{"a": 1`` then
  ``, "b": "x"`` then ``}``.
* Values are converted without evaluation. An incremental scanner finds
  where a value ends (tracking brackets and Python string quotes, with one
  compiled-regex search per step, never a per-character loop); the complete
  value's source alone is then converted by :func:`ast.literal_eval`, which
  accepts literals only, never names, calls or operators beyond a sign
  (never ``eval``/``exec``). The result must be representable in JSON
  (sets, bytes, complex numbers and non-finite floats are not). As a lenient
  fallback, a value that is valid JSON (``true``, ``null``) is taken as JSON.
* Text that is not a call list is not a call: ``[1, 2, 3]`` or
  ``[see above]`` is surfaced as content unchanged. A positional argument
  or a value that is not a literal makes the block malformed there: the
  named call is completed with the arguments emitted so far and the rest is
  surfaced as content. ``final=True`` completes a named call the same way.
* Text after the list (and after an optional ``<|python_end|>``) is not
  consumed: it is content.
* Options for dialects that reuse this driver (all off by default): other
  wrapper markers (``start`` / ``end``, e.g. LFM2's ``<|tool_call_start|>``),
  calls without the list brackets (``bracketed=False``: OLMo 3 writes
  newline-separated calls between ``<function_calls>`` tags; the ``end``
  marker then closes the block), another value converter (``convert``) and
  the nested-quote rule (``nested_quotes``: a quote that would close a
  string is a closing quote only when the next non-blank character is one
  of ``, ) ] } :`` (and a ``)`` ending the call is followed by ``,`` or
  ``]``); otherwise it is part of the string, as vLLM's lfm2 recovery reads
  ``'sed -n '1,9p' f.py'``; such a quote is held until those characters
  arrive).

Stable-prefix guarantee: held back are a partial ``<|python_start|>`` or
``<|python_end|>`` at a chunk end, a call or keyword name until the
character after it, and one keyword value's source until the value ends
(values that need whole conversion are held whole; a long string value is
emitted when its closing quote and the following ``,`` or ``)`` arrive).
Whitespace between the elements of a named call (or after it) is held only
up to ``BLANK_RUN_MAX`` (256) characters of one run: a longer run becomes raw
text of that call as it is read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from functools import partial
from typing import TYPE_CHECKING

from ..._core.pyliteral import literal_to_json
from ..._core.text import skip_space
from ..._core.verdict import NEED, NO, YES, Verdict
from ..base import DriverBase
from ..spec import DriverContext, FormatDefaults

if TYPE_CHECKING:
    from ..._core.toolspec import ToolSpec

__all__ = ("PYTHON_END", "PYTHON_START", "PythonicDriver", "PythonicFormat")

PYTHON_START = "<|python_start|>"
"""Llama 4's optional opener around the call list (a special token)."""
PYTHON_END = "<|python_end|>"
"""Llama 4's optional closer after the call list (a special token)."""

_IDENT_START = re.compile(r"[^\W\d]")
_WORD = re.compile(r"\w+")
_CALL_NAME_CHARS = re.compile(r"[\w.]+")
_CALL_NAME = re.compile(r"[^\W\d]\w*(?:\.[^\W\d]\w*)*\Z")
# Outside strings, only quotes, brackets and commas matter to where a value ends.
_STRUCT = re.compile(r"""['"\[\](){},]""")
# Inside a string: the next backslash or closing quote.
_STR_STOP = {
    "'": re.compile(r"[\\']"),
    '"': re.compile(r'[\\"]'),
    "'''": re.compile(r"\\|'''"),
    '"""': re.compile(r'\\|"""'),
}
_CLOSER = {"[": "]", "(": ")", "{": "}"}
# With nested_quotes: what may follow a closing quote (after blanks).
_AFTER_STRING = frozenset(",)]}:")
_QUOTE_LOOKAHEAD = 64


class _State(IntEnum):
    """Parser states."""

    OPEN = 0
    LIST = 1
    FIRST = 2
    NAME = 3
    KW_FIRST = 4
    KW = 5
    KW_NAME = 6
    EQ = 7
    VALUE = 8
    AFTER_CALL = 9
    NEXT = 10
    POST = 11
    DONE = 12


_OPEN, _LIST, _FIRST, _NAME, _KW_FIRST, _KW, _KW_NAME, _EQ, _VALUE, _AFTER_CALL, _NEXT, _POST, _DONE = tuple(_State)
# States whose input may begin with insignificant whitespace.
_WS_FIRST = frozenset((_OPEN, _LIST, _FIRST, _KW_FIRST, _KW, _EQ, _AFTER_CALL, _NEXT))
# Outcomes of one value scan.


@dataclass(frozen=True)
class PythonicFormat(FormatDefaults):
    """Declaration of a pythonic call format (the options of :class:`PythonicDriver`).

    Attributes:
        start: the wrapper opener (Llama 4's ``<|python_start|>``).
        end: the wrapper closer.
        bracketed: the calls are a list literal (a bare ``[`` at the start of a
            channel, or ``[NAME(`` of an offered tool anywhere, opens one);
            False: calls follow ``start`` directly and ``end`` closes them.
        convert: converts one keyword value's source to JSON text.
        nested_quotes: apply the nested-quote rule (see the module docstring).
    """

    start: str = PYTHON_START
    end: str = PYTHON_END
    bracketed: bool = True
    convert: Callable[[str], str | None] = field(default=literal_to_json, compare=False)
    nested_quotes: bool = False

    @property
    def openers(self) -> tuple[str, ...]:
        """The wrapper opener."""
        return (self.start,)

    @property
    def markers(self) -> tuple[str, ...]:
        """The wrapper's two markers."""
        return (self.start, self.end)

    @property
    def start_openers(self) -> tuple[str, ...]:
        """A bare ``[`` at the start of a channel opens a list (bracketed formats)."""
        return ("[",) if self.bracketed else ()

    def request_openers(self, tools: Mapping[str, ToolSpec] | None) -> tuple[str, ...]:
        """``[NAME(`` for each offered tool, which opens a call list after prose too (bracketed formats)."""
        return tuple(f"[{name}(" for name in tools) if tools and self.bracketed else ()

    def driver_factory(self) -> Callable[[DriverContext], PythonicDriver]:
        """One :class:`PythonicDriver` per block."""
        return partial(
            PythonicDriver, start=self.start, end=self.end, bracketed=self.bracketed, convert=self.convert,
            nested_quotes=self.nested_quotes,
        )


class PythonicDriver(DriverBase):
    """Parses one pythonic call list (see the module docstring).

    Args:
        ctx: the block's context (channel, call numbering, tools).
        start: the optional wrapper opener (Llama 4's ``<|python_start|>``).
        end: the optional wrapper closer after the list.
        bracketed: the calls are a list literal; False: calls follow ``start``
            directly, separated by blanks (or commas), and ``end`` closes them.
        convert: converts one keyword value's source to JSON text (None: not a literal).
        nested_quotes: apply the nested-quote rule (see the module docstring).
    """

    __slots__ = (
        "_state", "_parts", "_stack", "_quote", "_kw_key", "_kw_count", "_call_done",
        "_start", "_end", "_bracketed", "_convert", "_nested_quotes",
    )

    def __init__(
        self,
        ctx: DriverContext,
        *,
        start: str = PYTHON_START,
        end: str = PYTHON_END,
        bracketed: bool = True,
        convert: Callable[[str], str | None] = literal_to_json,
        nested_quotes: bool = False,
    ) -> None:
        super().__init__(ctx)
        self._start = start
        self._end = end
        self._bracketed = bracketed
        self._convert = convert
        self._nested_quotes = nested_quotes
        self._state = _OPEN
        self._parts: list[str] = []
        self._stack: list[str] = []
        self._quote = ""
        self._kw_key = ""
        self._kw_count = 0
        self._call_done = True
        self.new_call()

    # -- the contract -------------------------------------------------------------
    def feed_tool_block(self, text: str, out: list[object], final: bool, start: int = 0) -> int:
        """Consume what can be consumed of ``text[start:]`` (see :class:`~deltaflow.parsers.spec.ToolDriver`)."""
        self.begin(text, start)
        pos = self._run(text, start, out, final)
        if not self.done:
            if final:
                if self._state == _VALUE and not self._quote and not self._stack:
                    self._emit_value(out, pos)  # a value cut by the end, complete as written ("a=1")
                pos = self._finish(pos) if self._state == _POST else self._fail(out, pos)
            else:
                self.hold(pos)
        return pos

    def _fail(self, out: list[object], pos: int) -> int:
        """The block cannot go on at ``pos``: complete a named call, surface the rest, end the block."""
        close: str | None = None
        if self.named and not self._call_done:
            close = "}" if self._kw_count else "{}"
            self._call_done = True
        self._state = _DONE
        return self.abort(out, pos, close_args=close)

    def _finish(self, pos: int) -> int:
        self._state = _DONE
        return self.finish_block(pos)

    # -- the machine --------------------------------------------------------------
    def _run(self, text: str, pos: int, out: list[object], final: bool) -> int:
        n = len(text)
        while True:
            st = self._state
            if st in _WS_FIRST:
                p = skip_space(text, pos)
                if p != pos or pos == self._feed_start:
                    self.blank_run(out, pos, p)  # a long run inside a named call is raw text of it now
                pos = p
            if st == _DONE:  # pragma: no cover - a finished block is not fed again
                return pos
            if st == _POST:
                return self._post(text, pos, out, final)
            if pos >= n:
                return pos
            c = text[pos]
            if st == _OPEN:
                if text.startswith(self._start, pos):
                    pos += len(self._start)
                    self._state = _LIST if self._bracketed else _FIRST
                elif c == "[":
                    self._state = _LIST
                elif not final and n - pos < len(self._start) and self._start.startswith(text[pos:]):
                    return pos
                else:  # pragma: no cover - the feeder opens a block only at an opener
                    return self._fail(out, pos)
            elif st == _LIST:
                if c != "[":
                    return self._fail(out, pos)  # <|python_start|> without a call list
                pos += 1
                self._state = _FIRST
            elif st == _FIRST or st == _NEXT:
                if st == _NEXT and c == "]" and self._bracketed:
                    pos += 1  # a trailing comma before the closing bracket
                    self.emit(out, pos, end=True)
                    self._state = _POST
                    continue
                if not _IDENT_START.match(c):
                    return self._fail(out, pos)  # not a call: "[1, 2]", "[]", "[, ..."
                if st == _NEXT:
                    self.new_call()  # the separator becomes raw text of the new call
                self._parts = []
                self._state = _NAME
            elif st == _NAME:
                m = _CALL_NAME_CHARS.match(text, pos)
                if m is not None:
                    self._parts.append(m.group())
                    pos = m.end()
                    if pos >= n:
                        return pos
                name = "".join(self._parts)
                if text[pos] != "(" or not _CALL_NAME.match(name):
                    return self._fail(out, pos)  # "[see above]": not a call
                pos += 1
                self.emit(out, pos, name=name)
                self._call_done = False
                self._kw_count = 0
                self._state = _KW_FIRST
            elif st == _KW_FIRST or st == _KW:
                if c == ")":
                    pos += 1
                    self._end_call(out, pos)
                elif _IDENT_START.match(c):
                    self._parts = []
                    self._state = _KW_NAME
                else:
                    return self._fail(out, pos)  # a positional argument (or junk)
            elif st == _KW_NAME:
                m = _WORD.match(text, pos)  # the first character was checked by _KW
                if m is not None:
                    self._parts.append(m.group())
                    pos = m.end()
                    if pos >= n:
                        return pos
                self._kw_key = "".join(self._parts)
                self._state = _EQ
            elif st == _EQ:
                if c != "=":
                    return self._fail(out, pos)  # "f(a b)", "f(x)": not keyword arguments
                pos += 1
                self._parts = []
                self._stack = []
                self._quote = ""
                self._state = _VALUE
            elif st == _VALUE:
                pos, outcome = self._scan_value(text, pos, final)
                if outcome == NEED:
                    return pos
                if outcome == NO:
                    return self._fail(out, pos)
                if not self._emit_value(out, pos):
                    return self._fail(out, pos)  # not a literal: the rest is text
                if text[pos] == ",":
                    pos += 1
                    self._state = _KW
                else:  # ")"
                    pos += 1
                    self._end_call(out, pos)
            elif st == _AFTER_CALL:
                if not self._bracketed and c != ",":
                    if text.startswith(self._end, pos):
                        pos += len(self._end)
                        self.emit(out, pos, end=True)  # the closer: raw text of the last call
                        return self._finish(pos)
                    if _IDENT_START.match(c):
                        self._state = _NEXT  # the next call of a bracketless block
                        continue
                    if not final and n - pos < len(self._end) and self._end.startswith(text[pos:]):
                        return pos  # a partial closer: held by the caller
                    return self._fail(out, pos)
                if c == ",":
                    pos += 1
                    self._state = _NEXT
                elif c == "]":
                    pos += 1
                    self.emit(out, pos, end=True)  # the closing bracket: raw text of the last call
                    self._state = _POST
                else:
                    return self._fail(out, pos)
            else:  # pragma: no cover - every state is handled above
                return pos

    def _emit_value(self, out: list[object], pos: int) -> bool:
        """Convert the keyword value read so far and emit it as one member; False if it is not a literal."""
        value = self._convert("".join(self._parts))
        if value is None:
            return False
        lead = ", " if self._kw_count else "{"
        self._kw_count += 1
        self.emit(out, pos, args=f"{lead}{json.dumps(self._kw_key, ensure_ascii=False)}: {value}")
        return True

    def _end_call(self, out: list[object], pos: int) -> None:
        """The call's ``)`` ends at ``pos``: close its arguments object."""
        self.emit(out, pos, args="}" if self._kw_count else "{}", end=True)
        self._call_done = True
        self._state = _AFTER_CALL

    def _post(self, text: str, pos: int, out: list[object], final: bool) -> int:
        """After the list: an optional ``<|python_end|>``, then the block is over."""
        p = skip_space(text, pos)
        closer = self._end
        if text.startswith(closer, p):
            end = p + len(closer)
            self.emit(out, end, end=True)
            return self._finish(end)
        rest = len(text) - p
        if not final and rest < len(closer) and closer.startswith(text[p:]):
            return pos  # whitespace or a partial closer: wait (the caller holds it)
        return self._finish(pos)

    def _quote_closes(self, text: str, i: int, final: bool) -> Verdict:
        """Nested-quote rule: does the quote at ``i`` close its string? ``NEED``: not known yet.

        It closes when the next non-blank character is one of ``, ) ] } :``,
        and, for a ``)`` that would end the call, the one after that may follow
        a call (``,`` or ``]`` in a list, anything without brackets). A run of
        more than ``_QUOTE_LOOKAHEAD`` blanks closes it too, so at most that
        much is held.
        """
        n = len(text)
        j = skip_space(text, i + 1)
        if j - i > _QUOTE_LOOKAHEAD:
            return YES
        if j >= n:
            return YES if final else NEED
        if text[j] not in _AFTER_STRING:
            return NO
        if text[j] != ")" or self._stack or not self._bracketed:
            return YES
        k = skip_space(text, j + 1)
        if k - j > _QUOTE_LOOKAHEAD:
            return YES
        if k >= n:
            return YES if final else NEED
        return YES if text[k] in ",]" else NO

    def _scan_value(self, text: str, pos: int, final: bool) -> tuple[int, Verdict]:
        """Advance over one keyword value's source; returns ``(pos, does it end?)``.

        ``YES``: the value ends at ``pos`` (a ``,`` or ``)`` outside brackets
        and strings); ``NEED``: the text ran out (``pos`` is what was
        consumed); ``NO``: a bracket that does not match, at ``pos``.
        """
        n = len(text)
        parts = self._parts
        stack = self._stack
        while pos < n:
            quote = self._quote
            if quote:
                m = _STR_STOP[quote].search(text, pos)
                if m is None:
                    end = n
                    if len(quote) == 3:  # keep trailing quotes: they may begin the closing triple
                        while end > pos and n - end < 2 and text[end - 1] == quote[0]:
                            end -= 1
                    parts.append(text[pos:end])
                    return end, NEED
                i = m.start()
                if text[i] == "\\":
                    if i + 1 >= n:  # an escape cut by the chunk end: give it again with more text
                        parts.append(text[pos:i])
                        return (n, NEED) if final else (i, NEED)
                    parts.append(text[pos : i + 2])
                    pos = i + 2
                    continue
                if self._nested_quotes and len(quote) == 1:
                    closes = self._quote_closes(text, i, final)
                    if closes == NEED:
                        parts.append(text[pos:i])
                        return i, NEED  # what follows the quote decides whether it closes
                    if closes == NO:
                        parts.append(text[pos:i] + "\\" + quote)  # a quote inside the string
                        pos = i + 1
                        continue
                parts.append(text[pos : m.end()])
                pos = m.end()
                self._quote = ""
                continue
            m = _STRUCT.search(text, pos)
            if m is None:
                parts.append(text[pos:])
                return n, NEED
            i = m.start()
            c = text[i]
            if c == "'" or c == '"':
                if text.startswith(c * 3, i):
                    self._quote = c * 3
                    parts.append(text[pos : i + 3])
                    pos = i + 3
                elif not final and n - i < 3 and (c * 3).startswith(text[i:]):
                    parts.append(text[pos:i])  # "'" or "''" at the chunk end: maybe a triple quote
                    return i, NEED
                else:
                    self._quote = c
                    parts.append(text[pos : i + 1])
                    pos = i + 1
            elif c in _CLOSER:
                stack.append(_CLOSER[c])
                parts.append(text[pos : i + 1])
                pos = i + 1
            elif stack:
                if c == ",":
                    parts.append(text[pos : i + 1])
                    pos = i + 1
                elif c == stack[-1]:
                    stack.pop()
                    parts.append(text[pos : i + 1])
                    pos = i + 1
                else:
                    parts.append(text[pos:i])
                    return i, NO
            else:
                parts.append(text[pos:i])
                return (i, YES) if c in ",)" else (i, NO)
        return pos, NEED
