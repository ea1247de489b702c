"""The XTML driver: Kimi K3's ``<|open|>TAG<|sep|> ... <|close|>TAG<|sep|>`` sections.

Grammar (llama.cpp ``models/templates/Kimi-K3.jinja``; ``ws`` is JSON whitespace)::

    framing := RESPONSE_OPEN | RESPONSE_CLOSE | MESSAGE_CLOSE       (a block of its own, dropped)
    block   := TOOLS_OPEN ws* (call ws*)* TOOLS_CLOSE
    call    := <|open|>call tool="NAME" index="N"<|sep|> ws* (arg ws* )* [json ws*] <|close|>call<|sep|>
    arg     := <|open|>argument key="K" type="T"<|sep|> VALUE <|close|>argument<|sep|>
    json    := <|open|>json type="object"<|sep|> ws* OBJECT ws* <|close|>json<|sep|>

``<|open|>``, ``<|close|>`` and ``<|sep|>`` are single special tokens of the
Kimi K3 tokenizer; the tag word and its attributes between them are text.
Attribute values are written with ``&`` as ``&amp;`` and ``"`` as ``&quot;``
(the template's ``escape_attr``) and decoded here.

Rules of this driver:

* A value's ``type`` attribute types it (the template's ``xtml_type``):
  ``string`` is raw, unescaped text; ``number``, ``boolean``, ``null``,
  ``object`` and ``array`` are JSON text. A missing or unknown type uses the
  tool's JSON schema for that key (``_core/schema.py``), else string. A string
  value streams at once, JSON-escaped; a typed value is held until it either
  cannot be of its type any more (then it streams as a string from its first
  character: what the model wrote is never dropped) or its closer arrives
  (then it is emitted converted). The arguments are built as
  ``{"k": v, ...}`` in the model's order, duplicate keys kept.
* A ``json`` body is streamed as its JSON source text (``_core/jsonscan.py``)
  and must be an object; it may not follow arguments.
* A value ends at the next ``<|open|>`` or ``<|close|>`` (special tokens,
  never value text); only its own ``<|close|>argument<|sep|>`` is consumed
  with it, so a missing argument closer is tolerated. A missing call closer
  is tolerated before ``<|close|>tools<|sep|>``.
* The response and message section markers are framing: such a block holds
  no call, is consumed whole and emits nothing (blanks before it, between two
  blocks, are surfaced as text).
* A call tag that is no call (no ``tool`` attribute, or a header over
  :data:`MAX_HEADER` characters) is text up to its ``<|close|>call<|sep|>``
  (surfaced as it is read) and the section goes on.
* Other malformed structure (an unknown tag, a header over
  :data:`MAX_HEADER` characters elsewhere, a ``json`` body that is not an
  object) ends the block there: a named call is completed (its arguments closed),
  the text it cannot use is surfaced, and the rest goes back to the caller.
  A tools section without any call is surfaced whole.
* ``final=True``: a streamed string value is closed where the text ended; a
  held value is emitted only when its text converts to its type, else
  surfaced; the arguments object is closed.

Stable-prefix guarantee: held back are a partial tag (a tag's header until
its ``<|sep|>``, at most :data:`MAX_HEADER` characters), a typed value until
its type is decided (a scalar of at most ``SCALAR_MAX`` characters, an object
or array until its closer), the JSON body after its last safe position, and
blank runs between a call's elements up to ``BLANK_RUN_MAX`` characters.
Everything else is emitted at once; consumed text is never scanned again.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from functools import cache, partial
from typing import final

from ..._core.holdback import MarkerHoldback
from ..._core.jsonscan import JsonScanner
from ..._core.schema import (
    STRING_PLAN,
    Tentative,
    ValuePlan,
    convert,
    json_fragment,
    json_string,
    parameter_plans,
    tentative,
)
from ..._core.text import has_surrogate, skip_json_ws
from ..base import DriverBase
from ..spec import DriverContext, FormatDefaults

__all__ = ("MAX_HEADER", "XTML_TYPES", "XtmlDriver", "XtmlFormat")

MAX_HEADER = 512
"""Longest tag header (between ``<|open|>`` / ``<|close|>`` and ``<|sep|>``) held before it is malformed."""

XTML_TYPES: dict[str, ValuePlan] = {
    "string": STRING_PLAN,
    "number": ValuePlan(("number",)),
    "boolean": ValuePlan(("boolean",)),
    "null": ValuePlan((), nullable=True),
    "object": ValuePlan(("object",)),
    "array": ValuePlan(("array",)),
}
"""The ``type`` attribute values of the K3 template (``xtml_type``) and how each is converted."""

_ATTR = re.compile(r'\s*([A-Za-z_][\w.:-]*)\s*=\s*"([^"]*)"')
_TAG_WORD = re.compile(r"[A-Za-z_][\w.:-]*")


class _State(IntEnum):
    """Parser states."""

    OPEN = 0
    SECTION = 1
    BODY = 2
    VALUE = 3
    JSON = 4
    JSON_AFTER = 5
    SKIP = 6


_OPEN, _SECTION, _BODY, _VALUE, _JSON, _JSON_AFTER, _SKIP = tuple(_State)


@cache
def _skip_markers(spec: XtmlFormat) -> tuple[re.Pattern[str], str, MarkerHoldback]:
    """Where a call tag that is no call ends: its call closer, or the section closer before it."""
    call_close, tools_close = spec.tag(False, "call"), spec.tag(False, spec.tools)
    pattern = re.compile(re.escape(call_close) + "|" + re.escape(tools_close))
    return pattern, call_close, MarkerHoldback((call_close, tools_close))


def _unescape(value: str) -> str:
    # The template escapes only these two (escape_attr); "&amp;" last so "&amp;quot;" stays "&quot;".
    return value.replace("&quot;", '"').replace("&amp;", "&")


@dataclass(frozen=True)
class XtmlFormat(FormatDefaults):
    """The XTML tokens and section names.

    Attributes:
        open: the token opening a tag.
        close: the token opening a closing tag.
        sep: the token ending a tag header.
        tools: the section holding the calls.
        framing: (open or close, section name) pairs that are dropped framing.
    """

    open: str = "<|open|>"
    close: str = "<|close|>"
    sep: str = "<|sep|>"
    tools: str = "tools"
    framing: tuple[tuple[bool, str], ...] = ((True, "response"), (False, "response"), (False, "message"))

    def tag(self, opening: bool, head: str) -> str:
        """The full text of a tag: ``<|open|>HEAD<|sep|>`` or ``<|close|>HEAD<|sep|>``."""
        return (self.open if opening else self.close) + head + self.sep

    @property
    def openers(self) -> tuple[str, ...]:
        """The markers that open a block: the tools section and the framing tags."""
        return (self.tag(True, self.tools), *(self.tag(o, name) for o, name in self.framing))

    @property
    def markers(self) -> tuple[str, ...]:
        """Every marker of the format (the three tokens and the fixed tags)."""
        return (self.open, self.close, self.sep, *self.openers, self.tag(False, self.tools))

    def driver_factory(self) -> Callable[[DriverContext], XtmlDriver]:
        """One :class:`XtmlDriver` per block."""
        return partial(XtmlDriver, spec=self)


@final
class XtmlDriver(DriverBase):
    """Parses one XTML block (see the module docstring).

    Args:
        ctx: the block's context.
        spec: the tokens and section names.
    """

    __slots__ = (
        "_spec", "_state", "_calls", "_head", "_nargs", "_pending_key", "_plan", "_vparts", "_streaming",
        "_scan", "_jfrom", "_jpending", "_plans", "_tok_re", "_framing", "_tools_open", "_whole", "_after_bad",
    )

    def __init__(self, ctx: DriverContext, spec: XtmlFormat) -> None:
        super().__init__(ctx)
        self._spec = spec
        self._state = _OPEN
        self._calls = 0
        self._head: list[str] = []
        self._nargs = 0
        self._pending_key = ""
        self._plan = STRING_PLAN
        self._vparts: list[str] = []
        self._streaming = False
        self._whole = False
        self._scan: JsonScanner | None = None
        self._jfrom = 0
        self._jpending: list[str] = []
        self._plans: dict[str, ValuePlan] = {}
        self._tok_re = re.compile(re.escape(spec.open) + "|" + re.escape(spec.close))
        self._framing = tuple(spec.tag(o, name) for o, name in spec.framing)
        self._tools_open = spec.tag(True, spec.tools)
        self._after_bad = False  # the last call tag was no call (its text was surfaced)
        self.new_call()

    # -- the feed ------------------------------------------------------------------------
    def feed_tool_block(self, text: str, out: list[object], final: bool, start: int = 0) -> int:
        """Consume what can be consumed of ``text[start:]`` (see :class:`~deltaflow.parsers.spec.ToolDriver`)."""
        self.begin(text, start)
        self._jfrom = start
        pos = start
        go = True
        while go and not self.done:
            st = self._state
            if st == _VALUE:
                pos, go = self._value(text, pos, out, final)
            elif st == _BODY or st == _SECTION or st == _JSON_AFTER:
                pos, go = self._tag(text, pos, out, final)
            elif st == _JSON:
                pos, go = self._json(text, pos, out, final)
            elif st == _SKIP:
                pos, go = self._skip(text, pos, out, final)
            else:
                pos, go = self._open(text, pos, out, final)
        if not self.done:
            scan = self._scan
            if self._state == _JSON and scan is not None and scan.started and pos > self._jfrom:
                self._jpending.append(text[self._jfrom : pos])
                self._jfrom = pos
            self.hold(pos)
        return pos

    # -- states --------------------------------------------------------------------------
    def _open(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        ws = skip_json_ws(text, pos)  # blanks between two blocks
        if text.startswith(self._tools_open, ws):
            self._state = _SECTION
            return ws + len(self._tools_open), True
        for marker in self._framing:
            if text.startswith(marker, ws):
                # Framing of the response and message sections (the K3 template's open_tag /
                # close_tag around the answer): dropped. Blanks before it are text.
                if ws > pos:
                    self.surface(out, ws)
                self._raw_from = ws + len(marker)  # the marker itself is attributed to nothing
                return self.finish_block(ws + len(marker)), False
        rest = text[ws:]
        if not final and any(len(rest) < len(o) and o.startswith(rest) for o in self._spec.openers):
            return pos, False
        return self.abort(out, pos), False

    def _read_tag(self, text: str, pos: int, final: bool) -> tuple[bool, str, int] | None | bool:
        """Read a tag at ``pos``: ``(opening, head, end)``; None: more text needed; False: not a tag."""
        spec = self._spec
        if text.startswith(spec.open, pos):
            opening, hstart = True, pos + len(spec.open)
        elif text.startswith(spec.close, pos):
            opening, hstart = False, pos + len(spec.close)
        else:
            rest = text[pos:]
            if not final and (spec.open.startswith(rest) or spec.close.startswith(rest)):
                return None
            return False
        i = text.find(spec.sep, hstart, hstart + MAX_HEADER + len(spec.sep))
        if i < 0:
            left = len(text) - hstart
            if final or left >= MAX_HEADER + len(spec.sep):
                return False
            # A header may not hold another tag token (a header cut short by the next tag).
            if self._tok_re.search(text, hstart) is not None:
                return False
            return None
        head = text[hstart:i]
        if self._tok_re.search(head) is not None:
            return False
        return opening, head, i + len(spec.sep)

    def _tag(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        n = len(text)
        st = self._state
        ws = skip_json_ws(text, pos)
        if st != _SECTION and self.named:
            self.blank_run(out, pos, ws)
        if ws >= n:
            if final:
                return self._end_at_final(out, n), False
            return ws, False
        got = self._read_tag(text, ws, final)
        if got is None:
            return ws, False  # blanks are consumed (uncommitted); a partial tag is held
        if got is False:
            if st == _SECTION and text.startswith(self._spec.open, ws):
                return self._bad_call(out, ws)
            return self._malformed(out, ws), False
        assert not isinstance(got, bool)
        opening, head, end = got
        m = _TAG_WORD.match(head)
        word = m.group() if m is not None else ""
        attrs = head[m.end() :] if m is not None else head
        if st == _SECTION:
            if opening and word == "call":
                return self._call_header(out, ws, end, attrs)
            if not opening and word == self._spec.tools and not attrs.strip():
                return self._end_section(out, end), False
            return self._malformed(out, ws), False
        if st == _JSON_AFTER:
            if not opening and word == "json" and not attrs.strip():
                self._state = _BODY
                return end, True
            return self._malformed(out, ws), False
        # _BODY
        if opening and word == "argument" and self._scan is None:
            found = _attrs(attrs)
            if found is None or "key" not in found:
                return self._malformed(out, ws), False
            key = found["key"]
            typ = found.get("type")
            plan = XTML_TYPES.get(typ) if typ is not None else None
            if plan is None:
                plan = self._plans.get(key, STRING_PLAN)
            self._pending_key = ("{" if self._nargs == 0 else ", ") + json_string(key) + ": "
            self._nargs += 1
            self._plan = plan
            self._vparts = []
            self._whole = False
            self._streaming = plan.streams
            if self._streaming:
                self.emit(out, end, args=self._pending_key + '"')
            self._state = _VALUE
            return end, True
        if opening and word == "json" and self._nargs == 0 and self._scan is None:
            if _attrs(attrs) is None:
                return self._malformed(out, ws), False
            self._scan = JsonScanner()
            self._state = _JSON
            return end, True
        if not opening and word == "call" and not attrs.strip():
            self._end_call(out, end)
            return end, True
        if not opening and word == self._spec.tools and not attrs.strip():
            self._end_call(out, ws)  # a call closer left out before the section closer
            return self._end_section(out, end), False
        return self._malformed(out, ws), False

    def _bad_call(self, out: list[object], ws: int) -> tuple[int, bool]:
        """A call tag that is no call (no usable name, a header too long): skipped as text, the section goes on."""
        if self._calls > 0:
            self.new_call()  # its text is surfaced as a call of its own, unnamed
        self._state = _SKIP
        self._after_bad = True
        return ws + len(self._spec.open), True

    def _skip(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        pattern, call_close, hold = _skip_markers(self._spec)
        m = pattern.search(text, pos)
        if m is None:
            n = len(text)
            end = n if final else n - hold.held(text, pos)
            self.surface(out, end)
            return (self.finish_block(end), False) if final else (end, False)
        # Through its own call closer; a section closer is left for the section to read.
        end = m.end() if m.group() == call_close else m.start()
        self.surface(out, end)
        self._state = _SECTION
        return end, True

    def _call_header(self, out: list[object], ws: int, end: int, attrs: str) -> tuple[int, bool]:
        found = _attrs(attrs)
        name = found.get("tool", "") if found is not None else ""
        if not name or has_surrogate(name):
            return self._bad_call(out, ws)
        if self._calls > 0:
            self.new_call()
        self._calls += 1
        self._after_bad = False
        self._nargs = 0
        self._scan = None
        tools = self.ctx.tools
        spec = tools.get(name) if tools is not None else None
        self._plans = parameter_plans(spec.parameters) if spec is not None else {}
        self.emit(out, end, name=name)
        self._state = _BODY
        return end, True

    def _value(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        spec = self._spec
        n = len(text)
        m = self._tok_re.search(text, pos)
        if m is None:
            limit = n
            if not final:
                # Hold a tail that may begin <|open|> or <|close|>.
                limit = n - MarkerHoldback((spec.open, spec.close)).held(text, pos)
            self._value_text(out, text, pos, limit)
            if final:
                return self._value_end(out, n, n, final=True)
            return limit, False
        i = m.start()
        self._value_text(out, text, pos, i)
        closer = spec.tag(False, "argument")
        if text.startswith(closer, i):
            return self._value_end(out, i, i + len(closer), final=False)
        if not final and m.group() == spec.close and len(text) - i < len(closer) and closer.startswith(text[i:]):
            return i, False
        # Another tag: the value ends without its closer (tolerated); the tag is read in the body.
        return self._value_end(out, i, i, final=False)

    def _value_text(self, out: list[object], text: str, pos: int, limit: int) -> None:
        if limit <= pos:
            return
        piece = text[pos:limit]
        if self._streaming:
            self.emit(out, limit, args=json_fragment(piece))
            return
        self._vparts.append(piece)
        if self._whole:
            return
        verdict = tentative(self._plan, "".join(self._vparts))
        if verdict is Tentative.WHOLE:
            self._whole = True  # an object or array: only its end decides
        elif verdict is Tentative.NO:
            # It cannot be of its type any more: a string, streamed from its first character.
            whole = "".join(self._vparts)
            self._vparts = []
            self._streaming = True
            self.emit(out, limit, args=self._pending_key + '"' + json_fragment(whole))

    def _value_end(self, out: list[object], vend: int, end: int, *, final: bool) -> tuple[int, bool]:
        if self._streaming:
            self.emit(out, end, args='"')
        else:
            whole = "".join(self._vparts)
            self._vparts = []  # one copy of the value at a time (a held value may be long)
            if final and self._whole and not _complete_json(whole):
                conv = None  # an object or array cut short: no typed reading (and no costly attempt)
            else:
                conv = convert(self._plan, whole, typed_only=final)
            del whole
            if conv is None:  # a typed value cut short by the end of the output: surfaced
                self._nargs -= 1
                return self._malformed(out, vend), False
            self.emit(out, end, args=self._pending_key + conv)
        self._streaming = False
        self._state = _BODY
        if final:
            return self._end_at_final(out, end), False
        return end, True

    def _json(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        spec = self._spec
        scan = self._scan
        assert scan is not None
        n = len(text)
        if not scan.started:
            ws = skip_json_ws(text, pos)
            if ws >= n:
                if final:
                    return self._malformed(out, pos), False
                return pos, False
            if text[ws] != "{":
                return self._malformed(out, ws), False
            self.emit(out, ws)  # the tag and the blanks before the object: raw text of the call
            pos = ws
            self._jfrom = pos
        m = self._tok_re.search(text, pos)
        if m is not None:
            limit, cut = m.start(), True
        else:
            limit = n if final else n - MarkerHoldback((spec.open, spec.close)).held(text, pos)
            cut = final
        consumed, safe = scan.scan(text if limit == n else text[:limit], pos, cut)
        self._flush_json(out, text, safe)
        if scan.error:
            return self._malformed(out, scan.error_pos), False
        if scan.done:
            self._nargs = 1
            self._state = _JSON_AFTER
            return consumed, True
        if cut:
            return self._malformed(out, consumed if not final else limit), False
        return consumed, False

    def _flush_json(self, out: list[object], text: str, safe: int) -> None:
        """Emit the JSON body's source text up to ``safe`` (earlier pending text first)."""
        if safe < self._jfrom:
            return
        frag = text[self._jfrom : safe]
        if self._jpending:
            frag = "".join(self._jpending) + frag
            self._jpending = []
        if frag:
            self.emit(out, safe, args=frag)
        self._jfrom = safe

    # -- endings -------------------------------------------------------------------------
    def _close_args(self) -> str:
        if self._scan is not None:
            if self._state == _JSON_AFTER or self._scan.done:
                return ""
            return self._scan.closer() if self._scan.started else "{}"
        if self._state == _VALUE and self._streaming:
            return '"}'
        return "}" if self._nargs > 0 else "{}"

    def _end_call(self, out: list[object], end: int) -> None:
        close = self._close_args()
        self.emit(out, end, args=close, end=True)
        self.named = False
        self._scan = None
        self._state = _SECTION

    def _end_section(self, out: list[object], end: int) -> int:
        if self._calls == 0:
            return self.abort(out, end)  # a section without any call: surfaced whole
        # The closer (and blanks before it) are raw text of the last call; after a call tag that was
        # no call, text.
        (self.surface if self._after_bad else self.emit)(out, end)
        return self.finish_block(end)

    def _end_at_final(self, out: list[object], n: int) -> int:
        if self._state == _SECTION:
            if self._calls == 0:
                return self.abort(out, n)
            (self.surface if self._after_bad else self.emit)(out, n)
            return self.finish_block(n)
        if self.named and not self.committed:  # cut before its arguments began: not a call
            return self.abort(out, n)
        self._end_call(out, n)
        return self.finish_block(n)

    def _malformed(self, out: list[object], pos: int) -> int:
        if self.named:
            close = self._close_args()
            self._scan = None
            if self._jpending:
                self._jpending = []
            return self.abort(out, pos, close_args=close)
        if self._calls > 0 and self._state == _SECTION:
            self.new_call()  # the text after the last call is surfaced as a call of its own, unnamed
        return self.abort(out, pos)


def _complete_json(text: str) -> bool:
    """Whether ``text`` begins with one complete JSON value (checked lexically, nothing decoded)."""
    scan = JsonScanner()
    scan.scan(text, skip_json_ws(text, 0), True)
    return scan.done


def _attrs(text: str) -> dict[str, str] | None:
    """The ``k="v"`` attributes of a tag header (values unescaped), or None when it holds anything else."""
    found: dict[str, str] = {}
    pos = 0
    n = len(text)
    while True:
        m = _ATTR.match(text, pos)
        if m is None:
            break
        found.setdefault(m.group(1), _unescape(m.group(2)))
        pos = m.end()
    if text[pos:n].strip():
        return None
    return found
