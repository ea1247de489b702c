"""The JSON envelope driver: ``OPEN {"name": ..., "arguments": {...}} CLOSE``.

Covers Hermes/Qwen (``<tool_call>``), InternLM (``<|action_start|><|plugin|>``,
field ``parameters``) and Llama 3 JSON (optional ``<|python_tag|>``, calls
joined by ``;``). Facts: shared/dialects.md sections 1-3. Declared options
also cover the JSON-array family (section 14: Granite, Hunyuan, Jamba,
xLAM, Nemotron, ...): ``OPEN [{call}, {call}, ...] CLOSE`` with one call per
array element (``array=True``), objects keyed by the function name
(``{"NAME": {args}}``, ``name_keyed=True``), and several accepted
(opener, closer) pairs (``variants``).

Rules of this driver:

* The envelope object is scanned lexically, once. Its keys may come in any
  order (Hermes 2 Pro writes ``arguments`` before ``name``); the name is
  decoded when its string ends; the arguments value is streamed as its
  *source text* (never deserialized and re-serialized: duplicate keys,
  spacing and key order are kept) up to the last position where it can be
  closed without inventing a key or a value (see ``_core/jsonscan.py``).
* Held back: a partial opener or closer, a partial escape/number/literal,
  a key or a name until its closing quote, the arguments text after the
  last safe position (at most one key, a colon and a partial scalar), and
  the blanks after a call (its closer, or ``trailing_blanks``) until what
  follows them is known.
* No arguments field: ``{}`` is emitted once when the object ends. An
  arguments value written as a JSON string holding an object is held whole
  and its decoded object text emitted.
* ``final=True`` completes a named call (closing its arguments at the last
  safe position); a call without a name is aborted and its raw text is
  surfaced by the later stages. Text the call cannot use is surfaced too.
* Malformed JSON ends the block at the offending character: a named call is
  closed, the rest of the block goes back to the caller as text.
* Array form: each element is one call, numbered when its ``{`` (or the
  ``,`` before it) is read; the ``,`` and blanks between elements are raw
  text of the next call, the ``]`` and the closer raw text of the last one.
  An element that is not an object, or an array cut short, ends the block
  there (complete calls stay emitted, the rest is surfaced).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from functools import cache, partial

from ..._core.jsonscan import DONE as _SCAN_DONE
from ..._core.jsonscan import ERROR as _SCAN_ERROR
from ..._core.jsonscan import JsonScanner
from ..._core.text import decode_json_string, has_surrogate, skip_json_ws
from ..._core.verdict import NEED, NO, YES, Verdict
from ...items import ToolDelta
from ..base import BLANK_RUN_MAX, DriverBase
from ..spec import DriverContext, FormatDefaults

__all__ = ("JsonEnvelopeDriver", "JsonEnvelopeFormat")

_decode = decode_json_string


class _State(IntEnum):
    """Parser states."""

    OPEN = 0
    PRE = 1
    KEY0 = 2
    KEY = 3
    KEYSTR = 4
    COLON = 5
    VAL = 6
    NAME = 7
    ARGS = 8
    ARGSTR = 9
    SKIP = 10
    AFTER = 11
    POST = 12
    DONE = 13
    ARRAY = 14
    ELEM_AFTER = 15
    TRAIL = 16


(
    _OPEN, _PRE, _KEY0, _KEY, _KEYSTR, _COLON, _VAL, _NAME, _ARGS, _ARGSTR, _SKIP, _AFTER, _POST,
    _DONE, _ARRAY, _ELEM_AFTER, _TRAIL
) = tuple(_State)
# States whose input may begin with insignificant whitespace.
_WS_FIRST = frozenset((_OPEN, _PRE, _KEY0, _KEY, _COLON, _VAL, _AFTER, _ARRAY))
_WS = r"[ \t\n\r]*"
# A name the member-by-member path decodes to its own text: no escape, no control character, no
# lone surrogate (which it refuses), at least one character.
_PLAIN_NAME = r'"([^"\\\x00-\x1f\ud800-\udfff]+)"'


@cache
def _head_pattern(spec: JsonEnvelopeFormat) -> re.Pattern[str] | None:
    """The usual head of an envelope object, ``{"name": "NAME", "<args field>": `` up to the ``{``.

    Matched at the object's ``{`` it is taken in one step (what most calls of a Hermes-style
    dialect begin with); any other head, or one cut by the end of the text, is read member by
    member. None where the spec's keys make the two paths differ (name-keyed objects; a key
    that is both the name and an arguments field).
    """
    if spec.name_keyed or spec.name_field in spec.args_fields:
        return None
    name = re.escape(json.dumps(spec.name_field))
    args = "|".join(re.escape(json.dumps(f)) for f in spec.args_fields)
    return re.compile(
        r"\{" + _WS + name + _WS + ":" + _WS + _PLAIN_NAME + _WS + "," + _WS + "(?:" + args + ")" + _WS + ":" + _WS
        + r"(?=\{)"
    )


@dataclass(frozen=True)
class JsonEnvelopeFormat(FormatDefaults):
    """Declaration of a JSON-envelope tool format.

    Attributes:
        open: the opener marker sequence (whitespace allowed between markers).
        close: the marker after the object, or None (the object ends the call).
        args_fields: keys holding the arguments, in order of preference.
        name_field: key holding the function name.
        bare_object: a block may also start directly with its value (no
            opener): ``{``, or ``[`` when ``array`` is set.
        separator: a character joining several calls in one block (``;``).
        array: the opener is followed by a JSON array whose elements are the
            envelope objects, one call each (``<tool_calls>[{...}, {...}]</tool_calls>``).
        name_keyed: an envelope object is ``{"NAME": ARGS}`` (its one key is the
            function name, its value the arguments); ``name_field`` and
            ``args_fields`` are then unused.
        variants: other ``(opener sequence, closer)`` pairs accepted instead of
            ``open`` / ``close`` (e.g. Granite's ``<|tool_call|>`` and
            ``<tool_call>``); the closer is the one paired with the opener read.
        trailing_blanks: blanks right after the closer are framing, consumed
            with the call (ERNIE's template ends each call with a newline).
    """

    open: tuple[str, ...]
    close: str | None
    args_fields: tuple[str, ...] = ("arguments",)
    name_field: str = "name"
    bare_object: bool = False
    separator: str | None = None
    array: bool = False
    name_keyed: bool = False
    variants: tuple[tuple[tuple[str, ...], str | None], ...] = ()
    trailing_blanks: bool = False

    def envelopes(self) -> tuple[tuple[tuple[str, ...], str | None], ...]:
        """Every accepted ``(opener sequence, closer)`` pair, ``open`` / ``close`` first."""
        return ((self.open, self.close), *self.variants)

    @property
    def openers(self) -> tuple[str, ...]:
        """The first marker of every opener sequence (what opens a block), without duplicates.

        A marker that starts with another opener is left out: finding the
        shorter one opens the block, and the parser then reads the longest
        opener that matches (```` ``` ```` covers ```` ```json ````).
        """
        firsts = tuple(dict.fromkeys(seq[0] for seq, _ in self.envelopes()))
        return tuple(m for m in firsts if not any(o != m and m.startswith(o) for o in firsts))

    @property
    def markers(self) -> tuple[str, ...]:
        """Every marker of the format: openers and closers, without duplicates."""
        found: list[str] = []
        for seq, close in self.envelopes():
            found.extend(seq)
            if close:
                found.append(close)
        return tuple(dict.fromkeys(found))

    def driver_factory(self) -> Callable[[DriverContext], JsonEnvelopeDriver]:
        """One :class:`JsonEnvelopeDriver` per block."""
        return partial(JsonEnvelopeDriver, spec=self)


class JsonEnvelopeDriver(DriverBase):
    """Parses one JSON-envelope tool block (see the module docstring).

    On the shared attribution engine (:class:`~deltaflow.parsers.base.DriverBase`): events, raw text,
    the commit of a call, aborts and the end of the block are the base's; the envelope adds its
    lexical scan and the streaming of the arguments' source text (``_flush_args``).
    """

    __slots__ = (
        "_spec", "_state", "_name_key", "_args_key",
        "_scan", "_key_parts", "_val_parts", "_pending", "_emit_from",
        "_open_idx", "_args_started", "_args_done", "_envelopes", "_open_seq", "_close", "_ws_carry",
        "_channel", "_head",
    )

    def __init__(self, ctx: DriverContext, spec: JsonEnvelopeFormat) -> None:
        super().__init__(ctx)
        self._spec = spec
        self._channel = ctx.channel
        self._head = _head_pattern(spec)
        self._state = _OPEN
        self._open_idx = 0
        self._envelopes = spec.envelopes()
        self._open_seq = spec.open
        self._close = spec.close
        self._ws_carry = 0  # blanks after an array element already attributed (a run over BLANK_RUN_MAX)
        self._new_call()

    def _new_call(self) -> None:
        self.new_call()
        self._args_started = False
        self._args_done = False
        self._name_key = False
        self._args_key = False
        self._scan = JsonScanner()
        self._key_parts: list[str] = []
        self._val_parts: list[str] = []
        self._pending: list[str] = []
        # Envelope text consumed since the last commit point (the end of a
        # complete member, or the start of the arguments). It becomes raw text
        # of the call at the next commit, or is surfaced if the block breaks,
        # so what is surfaced never depends on where chunks ended.
        self._uncommitted: list[str] = []
        self._emit_from = 0

    # -- emission -------------------------------------------------------------
    def _flush_args(self, out: list[object], safe: int, consumed: int) -> None:
        """Emit arguments text up to ``safe``; keep ``[safe, consumed)`` pending.

        In this state raw text and arguments text coincide: text becomes raw
        of the call only when it is emitted as arguments. Pending text that
        never is (the call is cut short) is surfaced by :meth:`_malformed`.
        """
        text = self._text
        ef = self._emit_from
        if safe >= ef:
            frag = text[ef:safe]
            if self._pending:
                frag = "".join(self._pending) + frag
                self._pending = []
            if frag:
                out.append(ToolDelta(call=self.call, channel=self._channel, args=frag, raw=frag))
            ef = safe
        if consumed > ef:
            self._pending.append(text[ef:consumed])
            ef = consumed
        self._emit_from = self._raw_from = ef

    def _args_step(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        """Scan the arguments object from ``pos``: where it stopped, and whether the machine goes on
        there (the object closed: the state is ``_AFTER``; otherwise the text is used up or the
        call was malformed)."""
        scan = self._scan
        consumed, safe = scan.scan(text, pos, final)
        state = scan.state
        if state < _SCAN_DONE and safe == consumed and self._emit_from == pos and not self._pending:
            # All of it is safe and nothing was pending (_flush_args' common case, inlined: the
            # steady state of a long argument): emit it, hold nothing.
            if consumed > pos:
                frag = text[pos:consumed]
                out.append(ToolDelta(call=self.call, channel=self._channel, args=frag, raw=frag))
            self._emit_from = self._raw_from = consumed
            return consumed, False
        if state == _SCAN_ERROR:
            self._flush_args(out, safe, max(safe, self._emit_from))
            return self._malformed(out, scan.error_pos), False
        self._flush_args(out, safe, consumed)
        if state < _SCAN_DONE:
            return consumed, False
        self._args_done = True
        self._state = _AFTER
        return consumed, True

    # -- the machine ----------------------------------------------------------
    def feed_tool_block(self, text: str, out: list[object], final: bool, start: int = 0) -> int:
        """Consume what can be consumed of ``text[start:]`` (see :class:`~deltaflow.parsers.spec.ToolDriver`)."""
        # DriverBase.begin and .hold, inlined: the envelope is fed once per chunk of a long
        # argument, and the two calls were a tenth of its cost there.
        self._text = text
        self._raw_from = self._feed_start = self._emit_from = start
        self._blank_end = -1
        if self._state == _ARGS:
            # The arguments object is being streamed (the steady state of a long call): its step
            # first, without the machine's dispatch over every other state.
            pos, goes_on = self._args_step(text, start, out, final)
            if goes_on:
                pos = self._run(text, pos, out, final)
        else:
            pos = self._run(text, start, out, final)
        if not self.done:
            if final:
                pos = self._malformed(out, len(text))
            else:
                self._blank_run = 0  # the envelope's blank runs are counted in _ws_carry, not by the base
                if pos > self._raw_from:
                    self._uncommitted.append(text[self._raw_from : pos])
                    self._raw_from = pos
        self._text = ""
        return pos

    def _run(self, text: str, pos: int, out: list[object], final: bool) -> int:
        spec = self._spec
        n = len(text)
        while True:
            st = self._state
            if st == _POST:
                pos, more = self._post(text, pos, out, final)
                if more:
                    continue
                return pos
            if st == _TRAIL:
                # Blanks after the closer: every one of them is raw text of the call whatever the
                # chunking, so they are attributed as they come, until something else (or the end).
                pos = skip_json_ws(text, pos)
                if pos > self._raw_from:
                    self._emit_raw(out, pos)
                if pos >= n and not final:
                    return pos
                return self._finish_block(pos)
            if st == _ELEM_AFTER:
                pos, more = self._elem_after(text, pos, out, final)
                if more:
                    continue
                return pos
            if st in _WS_FIRST:
                pos = skip_json_ws(text, pos)
            if pos >= n:
                return pos
            c = text[pos]
            if st == _OPEN:
                if self._open_idx == 0:
                    chosen = self._choose_opener(text, pos, final)
                    if chosen == NEED:
                        return pos  # a partial marker that may still become a (longer) opener
                    if chosen == YES:
                        pos += len(self._open_seq[0])
                        self._open_idx = 1
                    elif spec.bare_object and c == ("[" if spec.array else "{"):
                        self._close = None  # a bare value has no closer
                        self._state = _ARRAY if spec.array else _PRE
                        continue
                    else:
                        return self._malformed(out, pos)
                else:
                    marker = self._open_seq[self._open_idx]
                    if text.startswith(marker, pos):
                        pos += len(marker)
                        self._open_idx += 1
                    elif not final and marker.startswith(text[pos:]):
                        return pos  # a partial marker: held by the caller
                    else:
                        return self._malformed(out, pos)
                if self._open_idx == len(self._open_seq):
                    self._state = _ARRAY if spec.array else _PRE
                continue
            if st == _ARRAY:
                if c != "[":
                    return self._malformed(out, pos)
                pos += 1
                self._state = _PRE
                continue
            if st == _PRE:
                if c != "{":
                    return self._malformed(out, pos)
                if self._head is not None:
                    head = self._head.match(text, pos)
                    if head is not None:
                        pos = self._took_head(out, head)
                        continue
                pos += 1
                self._state = _KEY0
            elif st == _KEY0 or st == _KEY:
                if c == '"':
                    self._scan = JsonScanner()
                    self._key_parts = []
                    self._state = _KEYSTR
                elif c == "}" and st == _KEY0:
                    pos += 1
                    if not self._object_end(out, pos):
                        return self._malformed(out, pos)
                else:
                    return self._malformed(out, pos)
            elif st == _KEYSTR or st == _NAME or st == _ARGSTR:
                begin = pos
                pos, _ = self._scan.scan(text, pos, final)
                if self._scan.error:
                    return self._malformed(out, self._scan.error_pos)
                parts = self._key_parts if st == _KEYSTR else self._val_parts
                parts.append(text[begin:pos])
                if not self._scan.done:
                    return pos
                source = "".join(parts)
                if st == _KEYSTR:
                    key = _decode(source)
                    if spec.name_keyed:
                        # {"NAME": ARGS}: the one key is the name, announced as soon as it is read.
                        if not key or has_surrogate(key):
                            return self._malformed(out, pos)
                        self.named = True
                        self.emit(out, pos, name=key)
                        self._name_key = False
                        self._args_key = True
                    else:
                        self._name_key = key == spec.name_field and not self.named
                        self._args_key = key in spec.args_fields and not self._args_started
                    self._state = _COLON
                elif st == _NAME:
                    name = _decode(source)
                    if not name or has_surrogate(name):  # a name no client could receive
                        return self._malformed(out, pos)
                    self.named = True
                    self.emit(out, pos, name=name)
                    self._state = _AFTER
                else:  # the arguments were written as a JSON string holding an object
                    inner = _decode(source)
                    check = JsonScanner()
                    end, _ = check.scan(inner, 0, True)
                    if not check.done or inner[:1] != "{" or inner[end:].strip():
                        return self._malformed(out, pos)
                    self._args_started = self._args_done = True
                    self.emit(out, pos, args=inner)
                    self._state = _AFTER
            elif st == _COLON:
                if c != ":":
                    return self._malformed(out, pos)
                pos += 1
                self._state = _VAL
            elif st == _VAL:
                self._scan = JsonScanner()
                if self._name_key:
                    if c != '"':
                        return self._malformed(out, pos)
                    self._val_parts = []
                    self._state = _NAME
                elif not self._args_key:
                    self._state = _SKIP
                elif c == "{":
                    self._args_started = True
                    if pos > self._raw_from or self._uncommitted:
                        self.emit(out, pos)  # commit the key, so that raw and arguments coincide
                    self._emit_from = self._raw_from = pos
                    self._pending = []
                    self._state = _ARGS
                elif c == '"':
                    self._val_parts = []
                    self._state = _ARGSTR
                elif text.startswith("null", pos):
                    pos += 4
                    self._args_started = self._args_done = True
                    self.emit(out, pos, args="{}")
                    self._state = _AFTER
                elif not final and "null".startswith(text[pos:]):
                    return pos  # maybe a partial "null"
                else:
                    return self._malformed(out, pos)
            elif st == _ARGS:
                pos, goes_on = self._args_step(text, pos, out, final)
                if not goes_on:
                    return pos
            elif st == _SKIP:
                pos, _ = self._scan.scan(text, pos, final)
                if self._scan.error:
                    return self._malformed(out, self._scan.error_pos)
                if not self._scan.done:
                    return pos
                self.emit(out, pos)  # a complete member: commit its text to the call
                self._state = _AFTER
            elif st == _AFTER:
                if c == "," and not spec.name_keyed:
                    pos += 1
                    self._state = _KEY
                elif c == "}":
                    pos += 1
                    if not self._object_end(out, pos):
                        return self._malformed(out, pos)
                else:
                    return self._malformed(out, pos)
            else:  # pragma: no cover - _DONE is never run
                return pos

    def _took_head(self, out: list[object], head: re.Match[str]) -> int:
        """The object's head (its name member, then the arguments key) was matched whole: take it.

        The same events, flags and positions as the member-by-member path: the name event at the
        end of the name's string (its raw text all that came before), the key committed at the
        arguments' ``{``, which is where scanning goes on (not consumed yet).
        """
        name_end = head.end(1) + 1
        self.emit(out, name_end, name=head.group(1))
        brace = head.end()
        self.emit(out, brace)
        self._name_key = False
        self._args_key = True
        self._args_started = True
        self._scan = JsonScanner()
        self._emit_from = self._raw_from = brace
        self._pending = []
        self._state = _ARGS
        return brace

    def _object_end(self, out: list[object], pos: int) -> bool:
        """The envelope object closed at ``pos``: end the call (False if it has no name)."""
        if not self.named:
            return False
        if not self._args_started:
            self._args_started = self._args_done = True
            self.emit(out, pos, args="{}", end=True)
        else:
            self.emit(out, pos, end=True)
        self._state = _ELEM_AFTER if self._spec.array else _POST
        return True

    def _choose_opener(self, text: str, pos: int, final: bool) -> Verdict:
        """Pick the envelope whose opener starts at ``pos`` (the longest one).

        Returns ``YES`` when one was chosen (``_open_seq`` / ``_close`` set),
        ``NO`` when none starts there, ``NEED`` when the text there is a proper
        prefix of an opener longer than what matched.
        """
        best: tuple[tuple[str, ...], str | None] | None = None
        rest = len(text) - pos
        for seq, close in self._envelopes:
            marker = seq[0]
            if text.startswith(marker, pos):
                if best is None or len(marker) > len(best[0][0]):
                    best = (seq, close)
            elif not final and len(marker) > rest and marker.startswith(text[pos:]):
                return NEED
        if best is None:
            return NO
        self._open_seq, self._close = best
        return YES

    def _elem_after(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        """After an array element: ``,`` and the next call, or ``]`` and the closer.

        Returns ``(pos, more)``; ``more`` is True when parsing goes on at ``pos``.
        Blanks are not consumed until it is known what follows them.
        """
        n = len(text)
        ws_end = skip_json_ws(text, pos)
        # A run of blanks longer than BLANK_RUN_MAX is raw text of the last call, attributed as
        # it is read (decided on the run's length alone, so the same on every chunking); a
        # shorter run waits until what follows it is known.
        run = ws_end - pos + self._ws_carry
        if run > BLANK_RUN_MAX:
            self.emit(out, ws_end)
            self._ws_carry = run if ws_end >= n else 0
            pos = ws_end
        if ws_end >= n:
            if final:  # the array was cut short after a complete call
                return self._finish_block(pos), False
            return pos, False
        self._ws_carry = 0
        c = text[ws_end]
        if c == ",":
            # Another call; the blanks and the comma are raw text of the new call.
            self._new_call()
            self._raw_from = pos
            self._state = _PRE
            return ws_end + 1, True
        if c == "]":
            self.emit(out, ws_end + 1)  # the array's end is raw text of the last call
            self._state = _POST
            return ws_end + 1, True
        return self._finish_block(pos), False

    def _post(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        """After the object: an optional closer, or a separator and another call.

        Returns ``(pos, more)``; ``more`` is True when another call of the
        same block starts at ``pos``.
        """
        spec = self._spec
        n = len(text)
        ws_end = skip_json_ws(text, pos)
        close = self._close
        if close is not None:
            if text.startswith(close, ws_end):
                end = ws_end + len(close)
                self._emit_raw(out, end)
                if spec.trailing_blanks:
                    self._state = _TRAIL
                    return end, True
                return self._finish_block(end), False
            rest = text[ws_end:]
            if close.startswith(rest):  # whitespace, or a partial closer
                if not final:
                    return pos, False  # held by the caller
                if rest:  # a closer cut short at the very end belongs to the call
                    self._emit_raw(out, n)
                    return self._finish_block(n), False
            return self._finish_block(pos), False
        if spec.separator is not None:
            if ws_end >= n and not final:
                return pos, False
            if text.startswith(spec.separator, ws_end):
                nxt = skip_json_ws(text, ws_end + len(spec.separator))
                if nxt >= n and not final:
                    return pos, False
                if nxt < n and text[nxt] == "{":
                    # Another call in the same block; the separator is raw text of the new call.
                    self._new_call()
                    self._raw_from = pos
                    self._open_idx = len(spec.open)
                    self._state = _PRE
                    return nxt, True
        return self._finish_block(pos), False

    def _emit_raw(self, out: list[object], end: int) -> None:
        self.emit(out, end)

    def _finish_block(self, pos: int) -> int:
        self._state = _DONE
        return self.finish_block(pos)

    def _malformed(self, out: list[object], pos: int) -> int:
        """The block cannot go on at ``pos``: end the call, give the rest back as text.

        A committed call is completed first (its arguments closed at the last
        safe position, or ``{}``); its unemitted pending argument text stays
        part of the raw text surfaced. Everything consumed but not yet
        attributed is aborted, so the later stages surface it (with all of an
        uncommitted call's raw text).
        """
        close: str | None = None
        if self.named and not self._args_done:
            close = self._scan.closer() if self._args_started else "{}"
            self._args_done = True
        if self._pending:  # argument text consumed but not yet safe: after what is uncommitted
            self._uncommitted.append("".join(self._pending))
            self._pending = []
        self._state = _DONE
        return self.abort(out, pos, close_args=close)
