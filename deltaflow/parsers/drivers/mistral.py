"""The Mistral ``[TOOL_CALLS]`` driver: three generations behind one control token.

Facts (shared/dialects.md section 5): the wire format is fixed by the
mistral-common tokenizer version, and every ``[...]`` marker below is a single
control token, so it never arrives split in token-aligned input.

* pre-v11 (Mistral-7B-v0.3, Mixtral, Nemo): one ``[TOOL_CALLS]`` and a JSON
  array of ``{"name", "arguments", "id"}`` objects; SentencePiece versions put
  a space after the marker. vLLM also accepts a bare object instead of the
  array and arguments written as a JSON string holding an object.
* v11 (Mistral-Small-3.2): ``[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}`` per call.
* v13+ (Magistral, Devstral, Ministral-3): ``[TOOL_CALLS]NAME[ARGS]{...}``;
  vLLM also reads ``[TOOL_CALLS]NAME{...}`` and a bare ``[TOOL_CALLS]NAME``
  (a call without arguments).

One block is one marker and its payload; parallel v11+ calls repeat the
marker, and the feeder hands each marker to a new parser (whitespace between
two blocks is consumed as raw text of the next one). A marker directly
followed by another marker (``[TOOL_CALLS] [TOOL_CALLS] [...]``) is one block.

Rules of this driver:

* The payload form is chosen by its first character: ``[`` an array, ``{`` a
  bare object, a letter (or ``_``) a v11+ name. A name is confirmed by what
  follows it: ``[ARGS]``, ``[CALL_ID]`` or ``{``, or, when the name follows
  the marker directly (as tekken writes it), another ``[TOOL_CALLS]`` or the
  end of the output. Anything else means the text was not a call, and all of
  it, marker included, is surfaced as content: deltaflow never invents a
  name, so a payload without one (which vLLM reports as a call named ``""``)
  is text, and ``[TOOL_CALLS] hello`` is not a call to ``hello``.
* Arguments stream as the model's own JSON source text, up to the last safe
  position of ``_core/jsonscan.py`` (never deserialized and re-serialized).
  A stringified arguments value is held whole and its decoded object emitted.
* The name is announced when the arguments start (or when the call ends), so
  a model-written id that comes before the arguments (``[CALL_ID]``, or an
  ``"id"`` member before ``"arguments"``) is the call's id. An ``"id"`` after
  the arguments, as pre-v11 templates render it, is not: the name and
  arguments have been streamed by then (documented in CONFORMANCE.md).
* Text after a block is not consumed: it is content (or the next block).
* Malformed JSON ends the block where it went wrong: a named call is
  completed (arguments closed at the last safe position) and the rest is
  surfaced; ``final=True`` does the same.

Stable-prefix guarantee: held back are a partial marker at the chunk end
(only when the input was not token-aligned), a name until the character
after it shows how it ends, a model-written id until ``[ARGS]``, the
envelope text of one array element until its arguments start, and the
arguments text after the last safe position (a key, a colon and a partial
scalar at most). A stringified arguments value is held until its closing
quote.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from ..._core.jsonscan import JsonScanner
from ..._core.text import decode_json_string, has_surrogate, skip_json_ws
from ...items import ToolDelta
from ..base import DriverBase
from ..spec import DriverContext, FormatDefaults

__all__ = ("ARGS", "CALL_ID", "MARKER", "MistralDriver", "MistralFormat")

MARKER = "[TOOL_CALLS]"
"""The block opener (a control token in every Mistral tokenizer)."""
ARGS = "[ARGS]"
"""The v11+ arguments marker (a control token)."""
CALL_ID = "[CALL_ID]"
"""The v11 call-id marker (a control token)."""

_MARKERS = (MARKER, ARGS, CALL_ID)
_LONGEST = max(len(m) for m in _MARKERS)
_decode = decode_json_string
# A v11+ function name: mistral-common allows [a-zA-Z0-9_-]; dots and colons are
# accepted for namespaced tools. It must start with a letter or "_", so a payload
# like "42" is not read as a call.
_NAME_START = re.compile(r"[^\W\d]")
_NAME = re.compile(r"[\w.:\-]+")
# A model-written v11 call id (9 alphanumerics in practice).
_CALL_ID_CHARS = re.compile(r"[\w\-]+")


class _State(IntEnum):
    """Parser states."""

    OPEN = 0
    PAYLOAD = 1
    NAME_S = 2
    CALL_ID_S = 3
    ARGS_OPEN = 4
    ARGS_START = 5
    ARGS_S = 6
    ARR_FIRST = 7
    ARR_NEXT = 8
    ARR_SEP = 9
    ELEM = 10
    KEY0 = 11
    KEY = 12
    KEYSTR = 13
    COLON = 14
    VAL = 15
    NAMESTR = 16
    IDSTR = 17
    ARGSTR = 18
    SKIP = 19
    AFTER = 20
    DONE = 21


(
    _OPEN, _PAYLOAD, _NAME_S, _CALL_ID_S, _ARGS_OPEN, _ARGS_START, _ARGS_S, _ARR_FIRST, _ARR_NEXT,
    _ARR_SEP, _ELEM, _KEY0, _KEY, _KEYSTR, _COLON, _VAL, _NAMESTR, _IDSTR, _ARGSTR, _SKIP, _AFTER, _DONE
) = tuple(_State)
# States whose input may begin with insignificant whitespace.
_WS_FIRST = frozenset((_OPEN, _ARGS_OPEN, _ARR_FIRST, _ARR_NEXT, _ARR_SEP, _KEY0, _KEY, _COLON, _VAL, _AFTER))
# States inside a pre-v11 call object (handled by ``_member``).
_OBJECT_STATES = frozenset((_ELEM, _KEY0, _KEY, _KEYSTR, _COLON, _VAL, _NAMESTR, _IDSTR, _ARGSTR, _SKIP, _AFTER))
# Member kinds of a pre-v11 call object.
_OTHER, _NAME_KEY, _ID_KEY, _ARGS_KEY = range(4)


def _partial_marker(text: str, pos: int) -> bool:
    """``text[pos:]``, the whole unconsumed tail, may be the start of a control token."""
    return len(text) - pos < _LONGEST and any(m.startswith(text[pos:]) for m in _MARKERS)


@dataclass(frozen=True)
class MistralFormat(FormatDefaults):
    """The ``[TOOL_CALLS]`` format (no options: the driver reads its three generations)."""

    @property
    def openers(self) -> tuple[str, ...]:
        """``[TOOL_CALLS]``."""
        return (MARKER,)

    @property
    def markers(self) -> tuple[str, ...]:
        """``[TOOL_CALLS]``, ``[ARGS]`` and ``[CALL_ID]``."""
        return (MARKER, ARGS, CALL_ID)

    def driver_factory(self) -> Callable[[DriverContext], MistralDriver]:
        """One :class:`MistralDriver` per block."""
        return MistralDriver


class MistralDriver(DriverBase):
    """Parses one ``[TOOL_CALLS]`` block (see the module docstring).

    Args:
        ctx: the block's context (channel, call numbering, tools).
    """

    __slots__ = (
        "_state", "_envelope", "_array", "_scan", "_parts", "_kind", "_name", "_name_raw", "_name_pending",
        "_id", "_args_started", "_args_done", "_arg_from", "_pending", "_spaced",
    )

    def __init__(self, ctx: DriverContext) -> None:
        super().__init__(ctx)
        self._state = _OPEN
        self._envelope = False  # the call is a pre-v11 JSON object
        self._array = False  # ... inside a JSON array
        self._spaced = False  # whitespace came between the marker and the payload
        self._start_call()

    def _start_call(self) -> None:
        self.new_call()
        self._scan = JsonScanner()
        self._parts: list[str] = []
        self._kind = _OTHER
        self._name: str | None = None
        self._name_raw = ""
        self._name_pending = False
        self._id: str | None = None
        self._args_started = False
        self._args_done = False
        self._arg_from = 0
        self._pending: list[str] = []

    # -- the contract -------------------------------------------------------------
    def feed_tool_block(self, text: str, out: list[object], final: bool, start: int = 0) -> int:
        """Consume what can be consumed of ``text[start:]`` (see :class:`~deltaflow.parsers.spec.ToolDriver`)."""
        self.begin(text, start)
        self._arg_from = start
        pos = self._run(text, start, out, final)
        if not self.done:
            if final:
                pos = self._at_end(out, pos)
            else:
                self.hold(pos)
        return pos

    # -- names and arguments ------------------------------------------------------
    def _set_name(self, name: str, pos: int) -> None:
        """The name is known at ``pos``; it is announced when the arguments start (or the call ends)."""
        self._name = name
        self._name_raw = self._take(pos)
        self._name_pending = True

    def _release_name(self, out: list[object]) -> None:
        """Announce a pending name, with the id read so far and the raw text up to the name."""
        if self._name_pending:
            self._name_pending = False
            self.named = True
            out.append(
                ToolDelta(call=self.call, channel=self.ctx.channel, name=self._name, id=self._id, raw=self._name_raw)
            )
            self._name_raw = ""

    def _flush_args(self, out: list[object], text: str, safe: int, consumed: int) -> None:
        """Emit the arguments text up to ``safe``; keep ``[safe, consumed)`` pending.

        Raw text goes with the arguments: what is emitted is committed to the
        call, what is pending stays uncommitted (surfaced if the call breaks).
        """
        self._arg_from = self.flush_source(out, self._pending, text, self._arg_from, safe, consumed)

    def _end_call(self, out: list[object], pos: int) -> None:
        """The call is complete at ``pos``: announce it and close its arguments.

        A call without a name ends here too; the identity buffer surfaces all
        of its raw text (deltaflow never invents a name).
        """
        args = ""
        name: str | None = None
        if self._name is not None:
            self._release_name(out)
            if not self.named:  # a name read just now, at the end of the call
                name = self._name
            if not self._args_started:
                args = "{}"
            self._args_started = self._args_done = True
        self.emit(out, pos, name=name, id=self._id if name is not None else None, args=args, end=True)

    def _fail(self, out: list[object], pos: int) -> int:
        """The block cannot go on at ``pos``: complete a named call, surface the rest, end the block."""
        self._release_name(out)
        close: str | None = None
        if self.named and not self._args_done:
            close = self._scan.closer() if self._args_started else "{}"
            self._args_done = True
        self._pending = []
        self._state = _DONE
        return self.abort(out, pos, close_args=close)

    def _finish(self, pos: int) -> int:
        self._state = _DONE
        return self.finish_block(pos)

    def _at_end(self, out: list[object], pos: int) -> int:
        """The input ended inside the block at ``pos``."""
        st = self._state
        if st == _NAME_S and self._parts and not self._spaced:
            # "[TOOL_CALLS]NAME" at the very end: a call without arguments (vLLM's v11_without_args).
            # A v11+ name follows the marker directly; after whitespace ("[TOOL_CALLS] hello")
            # only [ARGS], [CALL_ID] or "{" confirms it.
            self._name = "".join(self._parts)
            self._end_call(out, pos)
            return self._finish(pos)
        if st == _ARGS_OPEN or st == _CALL_ID_S:
            if st == _CALL_ID_S and self._parts:
                self._id = "".join(self._parts)
            self._end_call(out, pos)
            return self._finish(pos)
        return self._fail(out, pos)

    # -- the machine --------------------------------------------------------------
    def _run(self, text: str, pos: int, out: list[object], final: bool) -> int:
        n = len(text)
        while True:
            st = self._state
            if st in _WS_FIRST:
                pos = skip_json_ws(text, pos)
            if st == _DONE or pos >= n:
                return pos
            c = text[pos]
            if st in _OBJECT_STATES:
                pos, more = self._member(text, pos, c, out, final)
                if not more:
                    return pos
            elif st == _ARGS_S:
                consumed, safe = self._scan.scan(text, pos, final)
                if self._scan.error:
                    self._flush_args(out, text, safe, self._arg_from)
                    return self._fail(out, self._scan.error_pos)
                self._flush_args(out, text, safe, consumed)
                pos = consumed
                if not self._scan.done:
                    return pos
                self._args_done = True
                if self._envelope:
                    self._state = _AFTER
                else:  # v11+: the object ends the call and the block
                    self._end_call(out, pos)
                    return self._finish(pos)
            elif st == _ARGS_START:
                # The arguments object starts at ``pos``: announce the call first.
                self._release_name(out)
                self._args_started = True
                self._arg_from = pos
                self._state = _ARGS_S
            elif st == _OPEN:
                if text.startswith(MARKER, pos):
                    pos += len(MARKER)
                    self._state = _PAYLOAD
                elif not final and _partial_marker(text, pos):
                    return pos
                else:  # pragma: no cover - the feeder opens a block only at the marker
                    return self._fail(out, pos)
            elif st == _PAYLOAD:
                p = skip_json_ws(text, pos)
                if p > pos:
                    self._spaced = True  # whitespace after the marker (SentencePiece writes "▁[")
                    pos = p
                    continue
                if c == "[":
                    if text.startswith(MARKER, pos):
                        pos += len(MARKER)  # a repeated marker: still one block (vLLM tolerates it)
                        continue
                    if text.startswith(ARGS, pos) or text.startswith(CALL_ID, pos):
                        return self._fail(out, pos)  # no name before [ARGS]: not a call
                    if not final and _partial_marker(text, pos):
                        return pos
                    self._envelope = self._array = True
                    pos += 1
                    self._state = _ARR_FIRST
                elif c == "{":
                    self._envelope = True  # a bare object (vLLM tolerates it)
                    self._state = _ELEM
                elif _NAME_START.match(c):
                    self._state = _NAME_S
                else:
                    return self._fail(out, pos)
            elif st == _NAME_S:
                pos, more = self._name_end(text, pos, out, final)
                if not more:
                    return pos
            elif st == _CALL_ID_S:
                m = _CALL_ID_CHARS.match(text, pos)
                if m is not None:
                    self._parts.append(m.group())
                    pos = m.end()
                p = skip_json_ws(text, pos)
                if p >= n:
                    return pos
                if text[p] == "{" or text.startswith(ARGS, p):
                    self._id = "".join(self._parts) or None
                    self._parts = []
                    if text[p] == "{":
                        pos = p
                        self._state = _ARGS_START
                    else:
                        pos = p + len(ARGS)
                        self._state = _ARGS_OPEN
                elif not final and _partial_marker(text, p):
                    return pos
                else:
                    return self._fail(out, p)
            elif st == _ARGS_OPEN:
                if c == "{":
                    self._state = _ARGS_START
                elif text.startswith(MARKER, pos):
                    self._end_call(out, pos)  # "[ARGS]" and no object: a call without arguments
                    return self._finish(pos)
                elif not final and _partial_marker(text, pos):
                    return pos
                else:
                    return self._fail(out, pos)
            elif st == _ARR_FIRST:
                if c != "{":
                    return self._fail(out, pos)  # an empty array or a non-object element holds no call
                self._state = _ELEM
            elif st == _ARR_NEXT:
                if c == ",":
                    pos += 1
                    self._state = _ARR_SEP
                elif c == "]":
                    pos += 1
                    self.emit(out, pos, end=True)  # the closing bracket: raw text of the last call
                    return self._finish(pos)
                else:
                    return self._fail(out, pos)
            else:  # _ARR_SEP
                if c != "{":
                    return self._fail(out, pos)  # a non-object element: the rest is text
                self._start_call()  # the separator becomes raw text of the new call
                self._state = _ELEM

    def _name_end(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        """Read a v11+ name and what follows it; returns ``(pos, more)``."""
        n = len(text)
        m = _NAME.match(text, pos)
        if m is not None:
            self._parts.append(m.group())
            pos = m.end()
            if pos >= n:
                return pos, False
        p = skip_json_ws(text, pos)
        if p >= n:
            return pos, False  # whitespace: wait for what follows it (or the end)
        if text.startswith(ARGS, p):
            end, self._state = p + len(ARGS), _ARGS_OPEN
        elif text.startswith(CALL_ID, p):
            end, self._state = p + len(CALL_ID), _CALL_ID_S
        elif text[p] == "{":
            end, self._state = p, _ARGS_START
        elif text.startswith(MARKER, p) and not self._spaced:
            # The next call starts: this one has no arguments. The whitespace
            # before the marker belongs to the next block.
            self._name = "".join(self._parts)
            self._parts = []
            self._end_call(out, pos)
            return self._finish(pos), False
        elif not final and _partial_marker(text, p):
            return pos, False
        else:
            return self._fail(out, p), False  # not a call: the name was never announced
        name = "".join(self._parts)
        self._parts = []
        self._set_name(name, end)
        return end, True

    # -- one pre-v11 call object ----------------------------------------------------
    def _member(self, text: str, pos: int, c: str, out: list[object], final: bool) -> tuple[int, bool]:
        """One step inside a pre-v11 call object; returns ``(pos, more)``."""
        st = self._state
        if st == _ELEM:  # at its "{"
            self._state = _KEY0
            return pos + 1, True
        if st == _KEY0 or st == _KEY:
            if c == '"':
                self._scan = JsonScanner()
                self._parts = []
                self._state = _KEYSTR
                return pos, True
            if c == "}" and st == _KEY0:
                return self._object_end(pos + 1, out)
            return self._fail(out, pos), False
        if st == _KEYSTR or st == _NAMESTR or st == _IDSTR or st == _ARGSTR:
            return self._string(text, pos, out, final)
        if st == _COLON:
            if c != ":":
                return self._fail(out, pos), False
            self._state = _VAL
            return pos + 1, True
        if st == _VAL:
            return self._value(text, pos, c, out, final)
        if st == _SKIP:
            pos, _ = self._scan.scan(text, pos, final)
            if self._scan.error:
                return self._fail(out, self._scan.error_pos), False
            if not self._scan.done:
                return pos, False
            self._state = _AFTER
            return pos, True
        # _AFTER a member: "," or the end of the object
        if c == ",":
            self._kind = _OTHER
            self._state = _KEY
            return pos + 1, True
        if c == "}":
            return self._object_end(pos + 1, out)
        return self._fail(out, pos), False

    def _string(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        """A JSON string (a key, the name, the id or stringified arguments), decoded when complete."""
        st = self._state
        begin = pos
        pos, _ = self._scan.scan(text, pos, final)
        if self._scan.error:
            return self._fail(out, self._scan.error_pos), False
        self._parts.append(text[begin:pos])
        if not self._scan.done:
            return pos, False
        value = _decode("".join(self._parts))
        self._parts = []
        if st == _KEYSTR:
            kind = _OTHER
            if value == "name" and self._name is None:
                kind = _NAME_KEY
            elif value in ("arguments", "parameters") and not self._args_started:
                kind = _ARGS_KEY
            elif value == "id" and self._id is None and not self.named:
                kind = _ID_KEY
            self._kind = kind
            self._state = _COLON
        elif st == _NAMESTR:
            if not value or has_surrogate(value):  # a name no client could receive
                return self._fail(out, pos), False  # an empty name is no name
            self._set_name(value, pos)
            if self._args_started:
                self._release_name(out)  # the arguments came first: nothing left to wait for
            self._state = _AFTER
        elif st == _IDSTR:
            self._id = value or None
            self._state = _AFTER
        else:  # arguments written as a JSON string holding an object
            check = JsonScanner()
            end, _ = check.scan(value, 0, True)
            if not check.done or value[:1] != "{" or value[end:].strip():
                return self._fail(out, pos), False
            self._release_name(out)
            self._args_started = self._args_done = True
            self.emit(out, pos, args=value)
            self._state = _AFTER
        return pos, True

    def _value(self, text: str, pos: int, c: str, out: list[object], final: bool) -> tuple[int, bool]:
        """The start of a member value, dispatched on the member's key."""
        self._scan = JsonScanner()
        kind = self._kind
        if kind == _NAME_KEY:
            if c != '"':
                return self._fail(out, pos), False
            self._state = _NAMESTR
        elif kind == _ID_KEY and c == '"':
            self._state = _IDSTR
        elif kind == _ARGS_KEY:
            if c == "{":
                self._state = _ARGS_START  # streamed like v11 arguments, then back to the object
            elif c == '"':
                self._state = _ARGSTR
            elif text.startswith("null", pos):
                pos += 4
                self._release_name(out)
                self._args_started = self._args_done = True
                self.emit(out, pos, args="{}")
                self._state = _AFTER
            elif not final and len(text) - pos < 4 and "null".startswith(text[pos:]):
                return pos, False
            else:
                return self._fail(out, pos), False
        else:
            self._state = _SKIP  # another member (or a non-string id): skipped, kept as raw text
        self._parts = []
        return pos, True

    def _object_end(self, pos: int, out: list[object]) -> tuple[int, bool]:
        """A call object closed at ``pos``."""
        self._end_call(out, pos)
        if self._array:
            self._state = _ARR_NEXT
            return pos, True
        return self._finish(pos), False
