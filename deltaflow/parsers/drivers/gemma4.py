"""The Gemma 4 driver: ``<|tool_call>call:NAME{key:<|"|>text<|"|>,n:1}<tool_call|>`` (dialect ``gemma4``).

Facts (vLLM ``gemma4`` tool parser, llama.cpp's Gemma 4 handler and its
tests, shared/corpus/llamacpp.jsonl): Gemma 4 writes one call per block,
blocks concatenated without separators::

    <|tool_call>call:NAME{key:value,...}<tool_call|>

in its own serialization, not JSON: keys are bare (``<|"|>``-quoted keys are
accepted too, as vLLM does), strings are delimited by the special token
``<|"|>`` and hold raw text (no escapes), numbers, ``true``, ``false`` and
``null`` are bare, and objects ``{k:v}`` and arrays ``[v,...]`` nest. The
block markers and ``<|"|>`` are single special tokens of the Gemma 4
vocabulary, so ``token_prefixes`` is empty (no Gemma 4 tokenizer is under
shared/tokenizers to check it against; the vocabulary ids are the ones vLLM
looks up by name).

Rules of this driver:

* The name (``[\\w.-]+`` after ``call:``) is announced with the ``{`` that
  opens the arguments; text that is not ``call:NAME{`` is not a call and is
  surfaced as content.
* The arguments are converted to JSON while they stream, in the model's key
  order (duplicate keys kept): a key is held until its value starts; a string
  value streams at once, JSON-escaped (only a possible partial ``<|"|>`` or
  ``<tool_call|>`` at a chunk end is held); a bare scalar is held until the
  ``,``, ``}`` or ``]`` after it and converted whole (a JSON number or literal
  as written, ``none``/``nil`` as null like vLLM, a looser number such as
  ``+1`` or ``1.`` as its JSON number, anything else as the string it
  spells). Objects and arrays stream their brackets. The fragments always
  form a prefix of one JSON object.
* Lenient endings: ``<tool_call|>`` inside an unclosed string or container
  ends the call there (open strings and containers are closed); a missing
  ``<tool_call|>`` after the arguments ends the block where they end.
  Trailing commas are accepted.
* Malformed structure ends the block where it goes wrong: the named call is
  completed (its open strings and containers closed), what it cannot use is
  surfaced, the rest goes back to the caller as text. ``final=True`` does
  the same where the text ended (a bare scalar cut by the end is taken as
  written if it converts).

Stable-prefix guarantee: held back are a partial marker (at most 11
characters), ``call:`` and the name until the ``{`` (at most 512
characters), an object key until its value starts, and one bare scalar until
its end (each at most 512 characters, else the block is malformed).
Everything else is emitted at once; consumed text is never scanned again.

Reasoning (``<|channel>thought\\n...<channel|>``) is a reasoning dialect of
its own (:mod:`deltaflow.parsers.dialects`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from ..._core.holdback import MarkerHoldback
from ..._core.schema import json_fragment, json_string
from ..._core.text import skip_space
from ..base import DriverBase
from ..spec import DriverContext, FormatDefaults

__all__ = ("GEMMA4_CLOSE", "GEMMA4_OPEN", "GEMMA4_QUOTE", "Gemma4Driver", "Gemma4Format", "gemma4_scalar")

GEMMA4_OPEN = "<|tool_call>"
"""Opens one call block (a special token)."""
GEMMA4_CLOSE = "<tool_call|>"
"""Closes one call block (a special token)."""
GEMMA4_QUOTE = '<|"|>'
"""Delimits a string value on both sides (a special token)."""
_CALL = "call:"
_HELD_MAX = 512

_NAME_CHARS = re.compile(r"[\w.\-]+")
_KEY_CHARS = re.compile(r"[^\s:{}\[\],<>\"|]+")
_SCALAR_CHARS = re.compile(r"[^,}\]<]+")
_STR_STOP = re.compile(re.escape(GEMMA4_QUOTE) + "|" + re.escape(GEMMA4_CLOSE))
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z")
_LOOSE_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_INT = re.compile(r"[+-]?[0-9]+\Z")


class _State(IntEnum):
    """Parser states."""

    OPEN = 0
    CALLW = 1
    NAME = 2
    KEY = 3
    KEYB = 4
    KEYQ = 5
    COLON = 6
    VALUE = 7
    STR = 8
    SCALAR = 9
    AFTER = 10
    POST = 11
    DONE = 12


_OPEN, _CALLW, _NAME, _KEY, _KEYB, _KEYQ, _COLON, _VALUE, _STR, _SCALAR, _AFTER, _POST, _DONE = tuple(_State)
# States whose input may begin with insignificant whitespace.
_WS_FIRST = frozenset((_OPEN, _KEY, _COLON, _VALUE, _AFTER))


def gemma4_scalar(source: str) -> str | None:
    """Convert one bare Gemma 4 value (a number, literal or unquoted word) to JSON text; None if empty."""
    s = source.strip()
    if not s:
        return None
    if s in ("true", "false", "null"):
        return s
    if s.lower() in ("none", "nil"):  # vLLM reads these as null too
        return "null"
    if _JSON_NUMBER.match(s):
        return s
    if len(s) <= 400 and _LOOSE_NUMBER.match(s):  # "+1", "1.", ".5", "007"
        number: float = int(s) if _INT.match(s) else float(s)
        if math.isfinite(number):
            return json.dumps(number)
    return json_string(s)  # an unquoted word: the string it spells


class Gemma4Driver(DriverBase):
    """Parses one Gemma 4 ``<|tool_call>call:NAME{...}<tool_call|>`` block (see the module docstring).

    Args:
        ctx: the block's context (channel, call numbering, tools).
    """

    __slots__ = ("_state", "_parts", "_stack", "_counts", "_key", "_in_str", "_hold")

    def __init__(self, ctx: DriverContext) -> None:
        super().__init__(ctx)
        self._state = _OPEN
        self._parts: list[str] = []
        self._stack: list[str] = []  # closers of the open JSON containers, innermost last
        self._counts: list[int] = []  # members emitted per open container
        self._key = ""
        self._in_str = False
        self._hold = MarkerHoldback((GEMMA4_QUOTE, GEMMA4_CLOSE), chunking="any")
        self.new_call()

    # -- the contract -------------------------------------------------------------
    def feed_tool_block(self, text: str, out: list[object], final: bool, start: int = 0) -> int:
        """Consume what can be consumed of ``text[start:]`` (see :class:`~deltaflow.parsers.spec.ToolDriver`)."""
        self.begin(text, start)
        pos = self._run(text, start, out, final)
        if not self.done:
            if final:
                if self._state == _SCALAR and not self._emit_scalar(out, pos):
                    return self._fail(out, pos)
                if self._state == _POST:
                    self._state = _DONE
                    return self.finish_block(pos)
                return self._fail(out, pos)
            self.hold(pos)
        return pos

    def _closer(self) -> str:
        """The text that closes the open string and containers of the arguments."""
        return ('"' if self._in_str else "") + "".join(reversed(self._stack))

    def _fail(self, out: list[object], pos: int) -> int:
        """The block cannot go on at ``pos``: complete a named call, surface the rest, end the block."""
        close = self._closer() if self.named and self._stack else None
        self._stack = []
        self._in_str = False
        self._state = _DONE
        return self.abort(out, pos, close_args=close)

    def _cut(self, out: list[object], pos: int, end: int) -> int:
        """``<tool_call|>`` at ``pos`` ends the call early: close what is open, consume the marker."""
        self.emit(out, end, args=self._closer(), end=True)
        self._stack = []
        self._in_str = False
        self._state = _DONE
        return self.finish_block(end)

    def _prefix(self) -> str:
        """What comes before the next member: a separator, and in an object its key."""
        sep = ", " if self._counts[-1] else ""
        self._counts[-1] += 1
        if self._stack[-1] == "}":
            return sep + json_string(self._key) + ": "
        return sep

    def _push(self, closer: str) -> None:
        self._stack.append(closer)
        self._counts.append(0)
        self._state = _KEY if closer == "}" else _VALUE

    def _close(self, out: list[object], pos: int) -> None:
        """The innermost container's closer ends at ``pos``."""
        closer = self._stack.pop()
        self._counts.pop()
        if self._stack:
            self.emit(out, pos, args=closer)
            self._state = _AFTER
        else:
            self.emit(out, pos, args=closer, end=True)
            self._state = _POST

    def _emit_scalar(self, out: list[object], pos: int) -> bool:
        value = gemma4_scalar("".join(self._parts))
        if value is None:
            return False
        self.emit(out, pos, args=self._prefix() + value)
        self._state = _AFTER
        return True

    # -- the machine --------------------------------------------------------------
    def _run(self, text: str, pos: int, out: list[object], final: bool) -> int:
        n = len(text)
        while True:
            st = self._state
            if st in _WS_FIRST:
                end = skip_space(text, pos)
                if self.named:
                    self.blank_run(out, pos, end)  # a long whitespace run is attributed as it is read
                pos = end
            if st == _DONE:  # pragma: no cover - a finished block is not fed again
                return pos
            if st == _POST:
                return self._post(text, pos, out, final)
            if pos >= n:
                return pos
            c = text[pos]
            if st == _OPEN or st == _CALLW:
                marker = GEMMA4_OPEN if st == _OPEN else _CALL
                if text.startswith(marker, pos):
                    pos += len(marker)
                    self._parts = []
                    self._state = _CALLW if st == _OPEN else _NAME
                elif not final and marker.startswith(text[pos:]):
                    return pos  # a partial marker: given again with more text
                else:
                    return self._fail(out, pos)  # "<|tool_call>" without "call:": not a call
            elif st == _NAME or st == _KEYB:
                # A name or a bare key is held whole (it is one event field): read its run of
                # characters, give up past _HELD_MAX, wait at the chunk end.
                m = (_NAME_CHARS if st == _NAME else _KEY_CHARS).match(text, pos)
                if m is not None:
                    self._parts.append(m.group())
                    pos = m.end()
                if self._parts_len() > _HELD_MAX:
                    return self._fail(out, pos)
                if pos >= n:
                    return pos
                if st == _KEYB:
                    self._key = "".join(self._parts)
                    self._state = _COLON
                    continue
                name = "".join(self._parts)
                if text[pos] != "{" or not name:
                    return self._fail(out, pos)
                pos += 1
                self.emit(out, pos, name=name, args="{")
                self._push("}")
            elif st == _KEY:
                if c == "}":
                    self._close(out, pos + 1)  # an empty object, or a trailing comma
                    pos += 1
                elif text.startswith(GEMMA4_QUOTE, pos):
                    pos += len(GEMMA4_QUOTE)
                    self._parts = []
                    self._state = _KEYQ
                elif not final and GEMMA4_QUOTE.startswith(text[pos:]):
                    return pos
                elif _KEY_CHARS.match(c):
                    self._parts = []
                    self._state = _KEYB
                else:
                    return self._fail(out, pos)
            elif st == _KEYQ:
                i = text.find(GEMMA4_QUOTE, pos)
                if i < 0:
                    end = n if final else n - self._hold.held(text, pos)
                    self._parts.append(text[pos:end])
                    if self._parts_len() > _HELD_MAX:
                        return self._fail(out, end)
                    return end
                self._parts.append(text[pos:i])
                self._key = "".join(self._parts)
                pos = i + len(GEMMA4_QUOTE)
                self._state = _COLON
            elif st == _COLON:
                if c != ":":
                    return self._fail(out, pos)
                pos += 1
                self._state = _VALUE
            elif st == _VALUE:
                if text.startswith(GEMMA4_QUOTE, pos):
                    pos += len(GEMMA4_QUOTE)
                    self.emit(out, pos, args=self._prefix() + '"')
                    self._in_str = True
                    self._state = _STR
                elif c == "{" or c == "[":
                    pos += 1
                    self.emit(out, pos, args=self._prefix() + c)
                    self._push("}" if c == "{" else "]")
                elif c == "]" and self._stack[-1] == "]":
                    pos += 1
                    self._close(out, pos)  # an empty array, or a trailing comma
                elif c == "<":
                    if text.startswith(GEMMA4_CLOSE, pos):
                        return self._fail(out, pos)  # a key without a value
                    if not final and (GEMMA4_QUOTE.startswith(text[pos:]) or GEMMA4_CLOSE.startswith(text[pos:])):
                        return pos
                    return self._fail(out, pos)
                elif c in ",}]:":
                    return self._fail(out, pos)  # no value
                else:
                    self._parts = []
                    self._state = _SCALAR
            elif st == _STR:
                m = _STR_STOP.search(text, pos)
                if m is None:
                    end = n if final else n - self._hold.held(text, pos)
                    if end > pos:
                        self.emit(out, end, args=json_fragment(text[pos:end]))
                    return end
                piece = json_fragment(text[pos : m.start()])
                if m.group() == GEMMA4_CLOSE:  # the block closes inside the string
                    self.emit(out, m.start(), args=piece + '"')
                    self._in_str = False
                    return self._cut(out, m.start(), m.end())
                pos = m.end()
                self.emit(out, pos, args=piece + '"')
                self._in_str = False
                self._state = _AFTER
            elif st == _SCALAR:
                m = _SCALAR_CHARS.match(text, pos)
                if m is not None:
                    self._parts.append(m.group())
                    pos = m.end()
                if self._parts_len() > _HELD_MAX:
                    return self._fail(out, pos)
                if pos >= n:
                    return pos
                if not self._emit_scalar(out, pos):
                    return self._fail(out, pos)
            elif st == _AFTER:
                if c == ",":
                    pos += 1
                    self._state = _KEY if self._stack[-1] == "}" else _VALUE
                elif c == "}" or c == "]":
                    if c != self._stack[-1]:
                        return self._fail(out, pos)
                    pos += 1
                    self._close(out, pos)
                elif text.startswith(GEMMA4_CLOSE, pos):
                    return self._cut(out, pos, pos + len(GEMMA4_CLOSE))  # containers left open
                elif not final and GEMMA4_CLOSE.startswith(text[pos:]):
                    return pos
                else:
                    return self._fail(out, pos)
            else:  # pragma: no cover - every state is handled above
                return pos

    def _parts_len(self) -> int:
        return sum(len(p) for p in self._parts)

    def _post(self, text: str, pos: int, out: list[object], final: bool) -> int:
        """After the arguments: an optional ``<tool_call|>``, then the block is over."""
        p = skip_space(text, pos)
        if text.startswith(GEMMA4_CLOSE, p):
            end = p + len(GEMMA4_CLOSE)
            self.emit(out, end)
            self._state = _DONE
            return self.finish_block(end)
        if not final and GEMMA4_CLOSE.startswith(text[p:]):
            return pos  # whitespace or a partial closer: wait (the caller holds it)
        self._state = _DONE
        return self.finish_block(pos)


@dataclass(frozen=True)
class Gemma4Format(FormatDefaults):
    """The Gemma 4 call block (no options)."""

    @property
    def openers(self) -> tuple[str, ...]:
        """``<|tool_call>``."""
        return (GEMMA4_OPEN,)

    @property
    def markers(self) -> tuple[str, ...]:
        """The block's markers and the string delimiter."""
        return (GEMMA4_OPEN, GEMMA4_CLOSE, GEMMA4_QUOTE)

    def driver_factory(self) -> Callable[[DriverContext], Gemma4Driver]:
        """One :class:`Gemma4Driver` per block."""
        return Gemma4Driver
