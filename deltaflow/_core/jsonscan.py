"""Incremental, validating, lexical scanner for one JSON value.

Rule: the scanner never deserializes. It walks the source text once, keeping
only a stack of open containers and a small state, and reports

* how far it consumed (``scan`` returns it): everything before that position
  is never looked at again; what follows it (a partial escape, number or
  literal at the chunk end) must be given again with more text;
* the last *safe* position: a point where the text so far is a prefix of a
  JSON value that :meth:`JsonScanner.closer` can complete by appending
  closing characters only (after a complete value, right after ``{`` or
  ``[``, or inside a string value). Streaming consumers emit up to the safe
  position so that every emitted prefix can be closed without inventing a
  key or a value.

Long strings are crossed with one compiled-regex search per chunk, never a
per-character Python loop. A number cut by the chunk end is given again (it
is not consumed), but the scanner remembers how much of it it has read and
where in the number's grammar it stopped, and resumes there; a number longer
than :data:`MAX_NUMBER` characters is an error at that length.
"""

from __future__ import annotations

import re

__all__ = ("DONE", "ERROR", "MAX_NUMBER", "JsonScanner")

MAX_NUMBER = 4096
"""The longest number accepted, in characters. A number is held until it ends; a longer one
is an error at this length (Python's ``json`` refuses integers over 4,300 digits anyway), so a
model that writes digits forever costs neither unbounded memory nor repeated copying."""

# The longest run of string content with its complete escapes (the "unrolled loop": every
# repetition starts at a mandatory backslash, so nothing is ambiguous and the match is linear).
# It stops before a quote, a control character, a partial or invalid escape, or the end.
_STR_RUN = re.compile(r'[^"\\\x00-\x1f]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*)*')
_ESCAPE_PREFIX = re.compile(r"\\(?:u[0-9a-fA-F]{0,3})?\Z")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
# Everything a number could be while it is still being written ("-", "1.", "2e+").
_NUMBER_PART = re.compile(r"-?[0-9]*(?:\.[0-9]*)?(?:[eE][+-]?[0-9]*)?")
_LITERALS = {"t": "true", "f": "false", "n": "null"}
# Runs of simple members after a value inside a container, crossed by one match: "," then a
# string (or a literal) in an array, "," then a string key, ":" and such a value
# in an object (e.g. an array of 2,000 short strings). Each repetition starts at a mandatory
# "," and its string ends at the first '"', so the match is linear; a member the run cannot
# take (an escape, a number, a container, a cut at the chunk end) is left to the general loop,
# which gives the same consumed and safe positions.
# The same unrolled loop as _STR_RUN between the quotes: a run of plain characters is one
# character-class loop (not one alternation per character), and every repetition starts at a
# mandatory backslash, so the pattern cannot backtrack; a long value inside a simple member (a
# 64 KB "content") is crossed at _STR_RUN's speed.
_STRING = '"' + _STR_RUN.pattern + '"'
_SIMPLE = "(?:" + _STRING + "|true|false|null)"
_ARRAY_RUN = re.compile(r"(?:[ \t\n\r]*,[ \t\n\r]*" + _SIMPLE + ")+")
_OBJECT_RUN = re.compile(r"(?:[ \t\n\r]*,[ \t\n\r]*" + _STRING + r"[ \t\n\r]*:[ \t\n\r]*" + _SIMPLE + ")+")
# At a "," that those runs cannot take: a member whose string value the end of the text cuts
# ("," then '"' and plain or escaped characters up to the end; in an object its key and ":"
# first), taken by one match when it reaches the end, where the general loop would take four
# steps (the comma, the blanks, the quote, the run) to the same state and positions. Greedy and
# unanchored: the caller compares where the match ends with the end of the text.
_ARRAY_CUT = re.compile(r',[ \t\n\r]*"' + _STR_RUN.pattern)
_OBJECT_CUT = re.compile(r",[ \t\n\r]*" + _STRING + r'[ \t\n\r]*:[ \t\n\r]*"' + _STR_RUN.pattern)
_JSON_WS = re.compile(r"[ \t\n\r]*")
# Where a number cut by the chunk end stopped in _NUMBER_PART, and the rest of that pattern from there.
_NUM_INT, _NUM_FRAC, _NUM_EXP_SIGN, _NUM_EXP_DIGITS = range(4)
_NUMBER_REST = (
    re.compile(r"[0-9]*(?:\.[0-9]*)?(?:[eE][+-]?[0-9]*)?"),
    re.compile(r"[0-9]*(?:[eE][+-]?[0-9]*)?"),
    re.compile(r"[+-]?[0-9]*"),
    re.compile(r"[0-9]*"),
)


def _number_phase(text: str, start: int, end: int, phase: int) -> int:
    """The phase of a partial number after ``text[start:end]`` was read from ``phase``."""
    if end <= start:
        return phase
    e = max(text.rfind("e", start, end), text.rfind("E", start, end))
    if e >= 0:
        return _NUM_EXP_SIGN if e == end - 1 else _NUM_EXP_DIGITS
    if phase >= _NUM_EXP_SIGN:
        return _NUM_EXP_DIGITS
    if phase == _NUM_FRAC or text.find(".", start, end) >= 0:
        return _NUM_FRAC
    return _NUM_INT

# States.
VALUE = 0  # a value is expected
OBJ_FIRST = 1  # after "{": a key or "}"
KEY = 2  # after "," in an object: a key
COLON = 3  # after a key
ARR_FIRST = 4  # after "[": a value or "]"
AFTER = 5  # after a value inside a container: "," or the closer
STRING = 6  # inside a string (a key when ``in_key``)
DONE = 7
ERROR = 8


class JsonScanner:
    """Scans one JSON value incrementally (see the module docstring).

    Attributes:
        done: the top-level value is complete.
        error: the text is not JSON; ``error_pos`` is where it went wrong.
        state: the scanner's state; at or over :data:`DONE` it consumes nothing more
            (``DONE``: complete, ``ERROR``: not JSON). One attribute read, for callers that
            test it once per chunk instead of ``done`` and ``error``.
    """

    __slots__ = ("_stack", "state", "_in_key", "_fail_in_string", "error_pos", "_num_seen", "_num_phase")

    def __init__(self) -> None:
        self._stack: list[str] = []
        self.state = VALUE
        self._in_key = False
        self._fail_in_string = False
        self.error_pos = -1
        # A number given again: how many of its characters were read, and the phase there.
        self._num_seen = 0
        self._num_phase = _NUM_INT

    @property
    def done(self) -> bool:
        return self.state == DONE

    @property
    def error(self) -> bool:
        return self.state == ERROR

    @property
    def started(self) -> bool:
        """True once the first character of the value was consumed."""
        return self.state != VALUE or bool(self._stack)

    @property
    def in_string_value(self) -> bool:
        return self.state == STRING and not self._in_key

    def closer(self) -> str:
        """Characters that complete the text up to the last safe position."""
        tail = "".join(reversed(self._stack))
        st = self.state
        if (st == STRING and not self._in_key) or (st == ERROR and self._fail_in_string):
            return '"' + tail
        return tail

    def _fail(self, pos: int, safe: int) -> tuple[int, int]:
        # Between the last safe position and an error the stack is unchanged
        # (every push or pop is itself a safe position), so closer() stays valid.
        self._fail_in_string = self.state == STRING and not self._in_key
        self.state = ERROR
        self.error_pos = pos
        return pos, safe

    def scan(self, text: str, pos: int, final: bool = False) -> tuple[int, int]:
        """Advance over ``text[pos:]``.

        Args:
            text: the text to scan.
            pos: where to start (the position returned by the previous call
                on the same text, or the start of new text).
            final: no more text will follow.

        Returns:
            ``(consumed, safe)``: the position up to which input was consumed,
            and the last safe position reached in this call (``-1`` if none).
            Scanning stops right after the value completes (``done``) or at
            the first error (``error``, ``error_pos``).
        """
        n = len(text)
        st = self.state
        if st == STRING and not pos and n and '"' not in text and "\\" not in text and text.isprintable():
            # All of the text is plain string content (no quote, no escape, no control character:
            # those are never printable), found by three C scans instead of a regex match (which
            # costs more than the rest of a short chunk's scan). The same answer as _STR_RUN's.
            return n, -1 if self._in_key else n
        stack = self._stack
        safe = -1
        while pos < n:
            if st == STRING:
                i = _STR_RUN.match(text, pos).end()  # type: ignore[union-attr]  # matches the empty string
                if i == n:
                    pos = n
                    if not self._in_key:
                        safe = n
                    break
                c = text[i]
                if c == '"':
                    pos = i + 1
                    if self._in_key:
                        st = COLON
                    elif stack:
                        st = AFTER
                        safe = pos
                    else:
                        st = DONE
                        safe = pos
                        break
                elif c == "\\":  # the run took every complete escape: this one is partial or invalid
                    if not final and _ESCAPE_PREFIX.match(text, i):
                        pos = i  # partial escape: give it again with more text
                        if not self._in_key:
                            safe = i
                        break
                    if not self._in_key:
                        safe = i  # inside a string value every position is safe
                    self.state = st
                    return self._fail(i, safe)
                else:  # a raw control character is not allowed in a JSON string
                    if not self._in_key:
                        safe = i
                    self.state = st
                    return self._fail(i, safe)
                continue
            c = text[pos]
            if c in " \t\n\r":
                pos = _JSON_WS.match(text, pos).end()  # type: ignore[union-attr]  # matches the empty string
                if st == AFTER or st == OBJ_FIRST or st == ARR_FIRST:
                    safe = pos  # blanks there are closable: they stream instead of piling up
                continue
            if st == VALUE or st == ARR_FIRST:
                if c == '"':
                    st = STRING
                    self._in_key = False
                    pos += 1
                    safe = pos
                elif c == "{":
                    stack.append("}")
                    st = OBJ_FIRST
                    pos += 1
                    safe = pos
                elif c == "[":
                    stack.append("]")
                    st = ARR_FIRST
                    pos += 1
                    safe = pos
                elif c == "]" and st == ARR_FIRST:
                    stack.pop()
                    pos += 1
                    safe = pos
                    st = AFTER if stack else DONE
                    if st == DONE:
                        break
                elif c == "-" or "0" <= c <= "9":
                    seen = self._num_seen
                    if seen and pos + seen <= n:  # the number cut last time: read only what is new
                        phase = self._num_phase
                        part = _NUMBER_REST[phase].match(text, pos + seen)
                    else:
                        seen = 0
                        phase = _NUM_INT
                        part = _NUMBER_PART.match(text, pos)
                    assert part is not None  # every part of these patterns is optional
                    part_end = part.end()
                    if part_end - pos > MAX_NUMBER:  # decided on the length alone: the same on every split
                        self._num_seen = 0
                        self.state = st
                        return self._fail(pos + MAX_NUMBER, safe)
                    if part_end == n and not final:
                        self._num_phase = _number_phase(text, pos + seen, n, phase)
                        self._num_seen = n - pos
                        break  # the number may go on: give it again with more text
                    self._num_seen = 0
                    m = _NUMBER.match(text, pos)
                    if m is None or m.end() != part_end:
                        self.state = st
                        return self._fail(m.end() if m is not None else pos, safe)
                    pos = m.end()
                    safe = pos
                    st = AFTER if stack else DONE
                    if st == DONE:
                        break
                elif c in _LITERALS:
                    lit = _LITERALS[c]
                    if text.startswith(lit, pos):
                        pos += len(lit)
                        safe = pos
                        st = AFTER if stack else DONE
                        if st == DONE:
                            break
                    elif not final and n - pos < len(lit) and lit.startswith(text[pos:]):
                        break
                    else:
                        self.state = st
                        return self._fail(pos, safe)
                else:
                    self.state = st
                    return self._fail(pos, safe)
            elif st == OBJ_FIRST or st == KEY:
                if c == '"':
                    st = STRING
                    self._in_key = True
                    pos += 1
                elif c == "}" and st == OBJ_FIRST:
                    stack.pop()
                    pos += 1
                    safe = pos
                    st = AFTER if stack else DONE
                    if st == DONE:
                        break
                else:
                    self.state = st
                    return self._fail(pos, safe)
            elif st == COLON:
                if c != ":":
                    self.state = st
                    return self._fail(pos, safe)
                st = VALUE
                pos += 1
            elif st == AFTER:
                top = stack[-1]
                if c == ",":
                    run = (_ARRAY_RUN if top == "]" else _OBJECT_RUN).match(text, pos)
                    if run is not None:
                        pos = safe = run.end()
                        if pos >= n or text[pos] != ",":
                            continue
                    cut = (_ARRAY_CUT if top == "]" else _OBJECT_CUT).match(text, pos)
                    if cut is not None and cut.end() == n:
                        # A member whose string value runs to the end of the text: inside it.
                        pos = safe = n
                        st = STRING
                        self._in_key = False
                        break
                    st = KEY if top == "}" else VALUE
                    pos += 1
                elif c == top:
                    stack.pop()
                    pos += 1
                    safe = pos
                    if not stack:
                        st = DONE
                        break
                else:
                    self.state = st
                    return self._fail(pos, safe)
            else:  # DONE or ERROR: nothing more is consumed
                break
        self.state = st
        return pos, safe
