"""The element-per-parameter XML driver: tool calls whose parameter name is the element name (MiniMax-M3).

MiniMax-M3 writes every tag behind a marker prefix ``M`` (``]<]minimax[>[``,
corpus notes of ``llamacpp:minimax_m3``; llama.cpp's ``MiniMax-M3.jinja``)::

    block   := M<tool_call> ws call* M</tool_call>
    call    := M<invoke name="NAME"> ws element* M</invoke> ws
    element := M<KEY> (value | ws element+ ws) M</KEY>
    value   := raw text up to the next M

declared by a frozen :class:`XmlElementFormat` (the prefix and the block and
call tag names). Rules of this driver:

* A parameter is an element named by its key. An element whose first
  non-blank text is another open tag is a container: an object (one member
  per child, nested as deep as the model writes them; llama.cpp's
  ``nested_object_elements``), or, when the element's schema is an array and
  not an object, an array whose items are its children (their names are not
  used). Members and items are typed by the schema's nested ``properties`` /
  ``items``.
* A value (an element without child elements) is raw text up to the next
  ``M`` (``M`` is a MiniMax special token, never value text), typed by its
  schema as in the other XML dialects (``_core/schema.py``): a string streams
  at once; a value that may still be typed is held until it cannot be, or
  until its end. Blank text of an object- or array-typed element is ``{}`` /
  ``[]``. Nothing is trimmed from a string value.
* Missing closers are tolerated: a value ends at any tag, a close tag of an
  enclosing element closes the elements inside it, ``M<invoke`` starts the
  next call and ``M</tool_call>`` ends the block. A call's name is announced
  as soon as its ``M<invoke name="N">`` tag is complete (the marker prefix
  makes it unambiguous). A call tag that is no call (over ``TAG_MAX``
  characters, or without a valid ``name``) is surfaced as text up to its
  ``M</invoke>`` (or the next call or the block's end), and the block goes
  on, so the calls after it stay calls.
* Malformed structure ends the block where it goes wrong: a named call is
  completed (every open object, array and string closed), the rest is
  surfaced as text; a block without a valid first call is surfaced whole.
* ``final=True``: a streamed string is closed where the text ended; a held
  value is emitted only if its text is already typed; open containers and
  the arguments are closed.

Stable-prefix guarantee: held back are a partial tag (at most the marker
plus ``TAG_MAX`` characters), the blanks at the start of an element until
its first non-blank text shows whether it is a value or a container (at
most ``BLANK_RUN_MAX``), a trailing partial marker inside a value, and a
value that may still be typed (a scalar of at most ``SCALAR_MAX``
characters, or an object or array written as JSON until its end). Whitespace
between elements is held up to ``BLANK_RUN_MAX`` characters of one run.
Everything else is emitted at once; consumed text is never scanned again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from functools import cache, partial
from typing import final

from ..._core.holdback import MarkerHoldback
from ..._core.schema import (
    STRING_PLAN,
    Tentative,
    ValuePlan,
    convert,
    json_fragment,
    json_string,
    plan_for_schema,
    tentative,
)
from ..base import BLANK_RUN_MAX, DriverBase
from ..spec import DriverContext, FormatDefaults

__all__ = ("TAG_MAX", "XmlElementDriver", "XmlElementFormat")

TAG_MAX = 512
"""Longest tag body (between ``<`` and ``>``) held while incomplete; a longer one is not a tag."""

_NAME_OK = re.compile(r"[^\s<>\"'`\\/]{1,256}")
_KEY_OK = re.compile(r"[^\s<>/]{1,256}")
_INVOKE_ATTRS = re.compile(r"\s+name\s*=\s*(?:\"([^\"]*)\"|'([^']*)')\s*")
_BLANKS = re.compile(r"[ \t\r\n]*")


class _State(IntEnum):
    """Parser states."""

    START = 0
    BLOCK = 1
    BODY = 2
    LEAD = 3
    LEAF = 4
    AFTER = 5
    SKIP = 6
    DONE = 7


_START, _BLOCK, _BODY, _LEAD, _LEAF, _AFTER, _SKIP, _DONE = tuple(_State)
# What _tag() found (_T_BADCALL: a call tag that is no call: over-long, or without a valid name).
_T_NONE, _T_NEED, _T_OPEN, _T_CLOSE, _T_INVOKE, _T_BADCALL = range(6)
# Value modes.
_STREAM, _HOLD = 0, 1
# Container kinds.
_OBJ, _ARR = 0, 1


@dataclass(frozen=True)
class XmlElementFormat(FormatDefaults):
    """Declaration of an element-per-parameter XML tool format.

    Attributes:
        prefix: the marker written before every tag (MiniMax-M3: ``]<]minimax[>[``).
        block_tag: the block element's name (``tool_call``).
        call_tag: the call element's name (``invoke``, with a ``name`` attribute).
    """

    prefix: str
    block_tag: str = "tool_call"
    call_tag: str = "invoke"

    @property
    def opener(self) -> str:
        """The marker that opens a block."""
        return f"{self.prefix}<{self.block_tag}>"

    @property
    def markers(self) -> tuple[str, ...]:
        """Every fixed marker of the format."""
        p = self.prefix
        return (self.opener, f"{p}</{self.block_tag}>", f"{p}<{self.call_tag}", f"{p}</{self.call_tag}>", p)

    @property
    def openers(self) -> tuple[str, ...]:
        """The marker that opens a block."""
        return (self.opener,)

    def driver_factory(self) -> Callable[[DriverContext], XmlElementDriver]:
        """One :class:`XmlElementDriver` per block."""
        return partial(XmlElementDriver, spec=self)


@cache
def _derived(spec: XmlElementFormat) -> tuple[MarkerHoldback, str, re.Pattern[str], MarkerHoldback]:
    """What every parser of one declaration shares: the marker holdback, the block closer, and where a
    call tag that is no call ends (its closer, or where the next call or the block's end begins)."""
    closer = f"{spec.prefix}</{spec.block_tag}>"
    skip = (f"{spec.prefix}</{spec.call_tag}>", f"{spec.prefix}<{spec.call_tag}", closer)
    pattern = re.compile("|".join(re.escape(x) for x in skip))
    return MarkerHoldback((spec.prefix,)), closer, pattern, MarkerHoldback(skip)


class _Frame:
    """An open container: the call's arguments object, or an object / array element."""

    __slots__ = ("key", "kind", "props", "items", "count", "top")

    def __init__(self, key: str, kind: int, props: Mapping[str, object], items: object, top: bool) -> None:
        self.key = key
        self.kind = kind
        self.props = props
        self.items = items
        self.count = 0
        self.top = top


def _resolve(schema: object, root: Mapping[str, object]) -> Mapping[str, object]:
    """``schema`` as a mapping, following one local ``$ref`` ({} when it is not a schema)."""
    if isinstance(schema, Mapping) and isinstance(schema.get("$ref"), str):
        node: object = root
        for part in str(schema["$ref"]).removeprefix("#/").split("/"):
            node = node.get(part) if isinstance(node, Mapping) else None
        schema = node
    return schema if isinstance(schema, Mapping) else {}


@final
class XmlElementDriver(DriverBase):
    """Parses one block of an element-per-parameter XML dialect (see the module docstring)."""

    __slots__ = (
        "_spec", "_m", "_state", "_stack", "_root", "_key", "_schema", "_plan",
        "_vmode", "_parts", "_vsaw", "_vscalar", "_vwhole", "_mhold", "_closer", "_skip_end", "_skip_hold",
    )

    def __init__(self, ctx: DriverContext, spec: XmlElementFormat) -> None:
        super().__init__(ctx)
        self._spec = spec
        self._m = spec.prefix
        self._state = _START
        self._stack: list[_Frame] = []
        self._root: Mapping[str, object] = {}
        self._key = ""
        self._schema: object = None
        self._plan = STRING_PLAN
        self._vmode = _STREAM
        self._parts: list[str] = []
        self._vsaw = False
        self._vscalar = ""
        self._vwhole = False
        self._mhold, self._closer, self._skip_end, self._skip_hold = _derived(spec)
        self.new_call()

    # -- tags -----------------------------------------------------------------------------------
    def _tag(self, text: str, p: int, final: bool) -> tuple[int, int, str]:
        """The tag at ``p``: ``(kind, end, name)``; ``_T_NEED`` for a partial one at the end of the text."""
        m = self._m
        n = len(text)
        if not text.startswith(m, p):
            if not final and n - p < len(m) and m.startswith(text[p:]):
                return _T_NEED, p, ""
            return _T_NONE, p, ""
        q = p + len(m)
        if q >= n:
            return (_T_NONE if final else _T_NEED), p, ""
        if text[q] != "<":
            return _T_NONE, p, ""
        call = self._spec.call_tag
        is_call = text.startswith(call, q + 1) and text[q + 1 + len(call) : q + 2 + len(call)].isspace()
        gt = text.find(">", q + 1, q + 2 + TAG_MAX)
        if gt < 0:
            if final or n - q > TAG_MAX + 1 or "<" in text[q + 1 : n]:
                return (_T_BADCALL if is_call else _T_NONE), p, ""
            return _T_NEED, p, ""
        inner = text[q + 1 : gt]
        if inner.startswith("/"):
            name = inner[1:]
            return (_T_CLOSE if _KEY_OK.fullmatch(name) else _T_NONE), gt + 1, name
        if is_call:
            a = _INVOKE_ATTRS.fullmatch(inner, len(call))
            name = (a.group(1) if a.group(1) is not None else a.group(2)) if a is not None else ""
            return (_T_INVOKE if _NAME_OK.fullmatch(name) else _T_BADCALL), gt + 1, name
        return (_T_OPEN if _KEY_OK.fullmatch(inner) else _T_NONE), gt + 1, inner

    @staticmethod
    def _blanks(text: str, pos: int) -> int:
        m = _BLANKS.match(text, pos)
        return m.end() if m is not None else pos

    # -- the machine ------------------------------------------------------------------------------
    def _run(self, text: str, pos: int, out: list[object], final: bool) -> int:
        n = len(text)
        while True:
            st = self._state
            if st == _LEAF:
                pos, more = self._leaf(text, pos, out, final)
                if not more:
                    return pos
            elif st == _BODY:
                pos, more = self._body(text, pos, out, final)
                if not more:
                    return pos
            elif st == _LEAD:
                p = self._blanks(text, pos)
                if p >= n and not final and p - pos <= BLANK_RUN_MAX:
                    return pos  # blanks only so far: a value or a container?
                kind = _T_NONE
                if p - pos <= BLANK_RUN_MAX and p < n:
                    kind = self._tag(text, p, final)[0]
                    if kind == _T_NEED:
                        return pos
                if kind == _T_OPEN:  # a child element: this element is a container
                    self._open_container(out, p)
                    pos = p
                else:
                    self._begin_leaf(out, pos)
            elif st == _START:
                opener = self._spec.opener
                p = self._blanks(text, pos)
                if text.startswith(opener, p):
                    pos = p + len(opener)
                    self._state = _BLOCK
                elif not final and n - p < len(opener) and opener.startswith(text[p:]):
                    return pos
                else:
                    return self.abort(out, p)
            elif st in (_BLOCK, _AFTER):
                first = st == _BLOCK
                p = self._blanks(text, pos)
                if p - pos > BLANK_RUN_MAX:  # no tag after that many blanks: the block is over (bounded hold)
                    return self.abort(out, pos) if first else self.finish_block(pos)
                kind, end, name = self._tag(text, p, final)
                if kind == _T_NEED or (p >= n and not final):
                    return p if first else pos  # after a call, the blanks may be text after the block
                if kind in (_T_INVOKE, _T_BADCALL):
                    if self.named:
                        self.new_call()
                    if kind == _T_BADCALL:  # not a call: surfaced up to its closer, the block goes on
                        self._state = _SKIP
                        pos = p + len(self._m)  # past its own marker (the search for the next one starts after it)
                        continue
                    self._start_call(out, end, name)
                    pos = end
                elif kind == _T_CLOSE and name == self._spec.block_tag:
                    if first:  # an empty block is not a call: surfaced whole
                        return self.abort(out, end)
                    # The closer is raw text of the last call; after a call tag that was no call, text.
                    (self.emit if self.named else self.surface)(out, end)
                    return self.finish_block(end)
                elif final and not first and self._cut_closer(text, p):
                    (self.emit if self.named else self.surface)(out, n)
                    return self.finish_block(n)
                else:
                    return self.abort(out, p) if first else self.finish_block(pos)
            elif st == _SKIP:
                m = self._skip_end.search(text, pos)
                if m is None:
                    end = n if final else n - self._skip_hold.held(text, pos)
                    self.surface(out, end)
                    return self.finish_block(end) if final else end
                closing = m.group()[len(self._m) + 1 : len(self._m) + 2] == "/" and m.group() != self._closer
                end = m.end() if closing else m.start()
                self.surface(out, end)
                self._state = _AFTER
                pos = end
            else:  # pragma: no cover - _DONE is never run
                return pos

    def _cut_closer(self, text: str, p: int) -> bool:
        rest = text[p:]
        return bool(rest) and self._closer.startswith(rest)

    def _start_call(self, out: list[object], end: int, name: str) -> None:
        self.emit(out, end, name=name)
        tools = self.ctx.tools
        tool = tools.get(name) if tools is not None else None
        params: Mapping[str, object] = tool.parameters if tool is not None else {}
        props = params.get("properties")
        self._root = params
        self._stack = [_Frame(self._spec.call_tag, _OBJ, props if isinstance(props, Mapping) else {}, None, True)]
        self._state = _BODY

    def _body(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        """Between the elements of the innermost open container."""
        n = len(text)
        p = self._blanks(text, pos)
        if p != pos or pos == self._feed_start:
            self.blank_run(out, pos, p)  # a long run is raw text of the call now (bounded hold)
        if p >= n and not final:
            return p, False
        kind, end, name = self._tag(text, p, final)
        if kind == _T_NEED:
            return p, False
        stack = self._stack
        if kind == _T_OPEN:
            top = stack[-1]
            self._key = name
            self._schema = top.items if top.kind == _ARR else top.props.get(name)
            self._plan = plan_for_schema(self._schema, self._root) if self._schema is not None else STRING_PLAN
            self._state = _LEAD
            return end, True
        if kind == _T_CLOSE:
            depth = next((i for i in range(len(stack) - 1, -1, -1) if stack[i].key == name), -1)
            if depth > 0:  # a nested element closes (and any left open inside it)
                closers = "".join("]" if f.kind == _ARR else "}" for f in stack[depth:])
                del stack[depth:]
                self.emit(out, end, args=closers)
                return end, True
            if depth == 0:
                self._end_call(out, end)
                return end, True
            if name == self._spec.block_tag:  # a missing call closer: the block ends here
                self._end_call(out, end)
                return self.finish_block(end), False
        elif kind in (_T_INVOKE, _T_BADCALL) and len(stack) == 1:  # a missing call closer: the next call starts here
            self._end_call(out, p)
            return p, True
        if final and (p >= n or self._cut_closer(text, p)):
            return self.end_or_abort(out, n, self._closers()), False
        return self.abort(out, p, close_args=self._closers()), False

    # -- containers and values -----------------------------------------------------------------
    def _prefix(self) -> str:
        """What comes before the current element's value in its container (counts the element)."""
        top = self._stack[-1]
        head = ("{" if top.count == 0 else ", ") if top.top else ("" if top.count == 0 else ", ")
        top.count += 1
        return head + (json_string(self._key) + ": " if top.kind == _OBJ else "")

    def _open_container(self, out: list[object], pos: int) -> None:
        types = self._plan.types
        kind = _ARR if "array" in types and "object" not in types else _OBJ
        schema = _resolve(self._schema, self._root)
        props = schema.get("properties") if kind == _OBJ else None
        self.emit(out, pos, args=self._prefix() + ("[" if kind == _ARR else "{"))
        self._stack.append(
            _Frame(self._key, kind, props if isinstance(props, Mapping) else {}, schema.get("items"), False)
        )
        self._state = _BODY

    def _begin_leaf(self, out: list[object], pos: int) -> None:
        self._parts = []
        self._vsaw = False
        self._vscalar = ""
        self._vwhole = False
        self._state = _LEAF
        if self._plan.streams:
            self._vmode = _STREAM
            self.emit(out, pos, args=self._prefix() + '"')
        else:
            self._vmode = _HOLD

    def _leaf(self, text: str, pos: int, out: list[object], final: bool) -> tuple[int, bool]:
        n = len(text)
        i = text.find(self._m, pos)
        if i < 0:
            if final:
                return self._leaf_cut(out, n, text[pos:]), False
            end = n - self._mhold.held(text, pos)
            self._piece(out, end, text[pos:end])
            return end, False
        kind, end, name = self._tag(text, i, final)
        if kind == _T_NEED:
            self._piece(out, i, text[pos:i])
            return i, False
        # The value ends at any tag; only its own close tag is consumed with it.
        stop = end if kind == _T_CLOSE and name == self._key else i
        self._finish_leaf(out, stop, text[pos:i])
        self._state = _BODY
        return stop, True

    def _piece(self, out: list[object], end: int, piece: str) -> None:
        """Take ``piece`` of an unfinished value (its raw text runs to ``end``): stream it or hold it."""
        if self._vmode == _STREAM:
            if piece:
                self.emit(out, end, args=json_fragment(piece))
            return
        self._parts.append(piece)
        if self._vwhole:
            return
        if not self._vsaw:
            if not piece or piece.isspace():
                return  # blank so far (each earlier part was checked when it came): no rescan
            self._vsaw = True
            self._vscalar = "".join(self._parts).lstrip()
        else:
            self._vscalar += piece
        verdict = tentative(self._plan, self._vscalar)
        if verdict is Tentative.NEED:
            return
        self._vscalar = ""
        if verdict is Tentative.WHOLE:
            self._vwhole = True
            return
        held = "".join(self._parts)  # no typed reading is left: a string from its first character
        self._parts = []
        self._vmode = _STREAM
        self.emit(out, end, args=self._prefix() + '"' + json_fragment(held))

    def _typed(self, plan: ValuePlan, value: str) -> str:
        if not value.strip():
            for typ in plan.types:
                if typ in ("object", "array"):
                    return "{}" if typ == "object" else "[]"
        return convert(plan, value) or ""

    def _finish_leaf(self, out: list[object], stop: int, piece: str) -> None:
        if self._vmode == _STREAM:
            self.emit(out, stop, args=json_fragment(piece) + '"')
            return
        self._parts.append(piece)
        value = "".join(self._parts)
        self._parts = []
        self.emit(out, stop, args=self._prefix() + self._typed(self._plan, value))

    def _leaf_cut(self, out: list[object], n: int, piece: str) -> int:
        """The output ended inside a value: close a string; keep a held value only if its text is typed."""
        if self._vmode == _STREAM:
            self.emit(out, n, args=json_fragment(piece) + '"')
        else:
            self._parts.append(piece)
            value = "".join(self._parts)
            self._parts = []
            if tentative(self._plan, value) is Tentative.NO:
                found: str | None = json_string(value)
            else:
                found = convert(self._plan, value, typed_only=True)
            if found is None:
                return self.abort(out, n, close_args=self._closers())
            self.emit(out, n, args=self._prefix() + found)
        self._end_call(out, n)
        return self.finish_block(n)

    # -- ends -------------------------------------------------------------------------------------
    def _closers(self) -> str:
        """What closes everything emitted of the call so far (outside a streamed string)."""
        out = []
        for f in reversed(self._stack):
            out.append(("}" if f.count else "{}") if f.top else "]" if f.kind == _ARR else "}")
        return "".join(out)

    def _end_call(self, out: list[object], pos: int) -> None:
        """End the current call at ``pos`` (its raw text runs to ``pos``), closing what is open."""
        self.emit(out, pos, args=self._closers(), end=True)
        self._stack = []
        self._state = _AFTER

    def finish_block(self, pos: int) -> int:
        """Mark the block over at ``pos``; returns ``pos``."""
        self._state = _DONE
        return super().finish_block(pos)
