"""The tag-per-tool driver (coding agents, Cline style) and a block snapshot for agent UIs.

Format (shared/dialects.md section 13): one element per tool and one child
element per parameter, values are raw text::

    <write_to_file>
    <path>src/a.py</path>
    <content>print("hi")</content>
    </write_to_file>

Rules of this driver:

* **Names come from the request.** ``<NAME>`` opens a call only when
  ``NAME`` is one of the request's tools (``DriverContext.tools``), written
  exactly so (no attributes, no spaces: Cline's rule). Any other tag, and
  every ``<`` when the request has no tools, is plain text, surfaced unchanged
  and in order. The parameters of a tool are the ``properties`` of its JSON
  schema; a schema without ``properties`` accepts any tag name
  (``[A-Za-z_][A-Za-z0-9_.:-]*``) as a parameter.
* **Arguments** are one JSON object of string values (section 13: "every
  value is a string"), streamed: ``{`` with the name when ``<NAME>`` is seen,
  ``"key": "`` when ``<key>`` is seen, then the JSON-escaped value as it
  arrives, ``"`` at ``</key>`` and ``}`` at ``</NAME>``. Keys keep the model's
  order; a repeated parameter is a repeated key (principle 4).
* **Values are trimmed** (Cline ``.trim()``): leading whitespace is dropped
  as it arrives; trailing whitespace is held until non-space text follows,
  and dropped when the value ends.
* **A value ends at the first ``</key>``**, except for the *content-like*
  parameters the dialect declares (:attr:`TagPerToolFormat.last_close`, by default
  ``content`` and ``diff``): their value ends at the **last** ``</key>``
  before the tool's closing tag, so file text that contains ``</content>``
  survives (Cline re-extracts ``write_to_file``'s content with
  ``lastIndexOf``). A literal ``</NAME>`` before the first ``</content>`` is
  value text; after a candidate ``</content>`` it ends the call (Cline).
* Text inside a call that is not a parameter element (whitespace between
  parameters, unknown tags) belongs to the call, as unknown fields of a JSON
  envelope do; it is not surfaced.
* ``final=True`` (the input ended) completes an open call: an open value
  takes the rest of the text (trimmed), the arguments are closed, nothing is
  invented. Whitespace between two calls is raw text of the next call (the
  feeder's rule for every dialect).

Stable-prefix guarantee (what is held, for how long):

* outside a call: a partial opener ``<NAM`` at a chunk end, until the text
  can no longer become ``<NAME>`` (at most the longest tool name + 1
  characters); the feeder holds it. Text after a ``<`` that opens no call
  is passed on as it arrives;
* between parameters: a partial ``<key`` or ``</NAME`` tag (at most the
  longest tag);
* inside a value: a partial ``</key`` tag and trailing whitespace, until
  the next non-space character;
* after a candidate end ``</content>`` of a content-like value: the text
  after it, within a window of :attr:`TagPerToolFormat.hold_limit` characters
  (default 1024). The earliest ``</content>`` or ``</NAME>`` lying wholly in
  the window decides: another ``</content>`` means the candidate was file
  text (the held text is emitted as value and the new tag is the candidate);
  ``</NAME>`` means the candidate was the end. A full window with neither is
  decided by its shape: the end when it is whitespace, optionally followed by
  a parameter tag of the tool (``<task_progress>`` after the content), file
  text otherwise (the value then runs on, and a later ``</NAME>`` ends it with
  the call). When the input ends first, the candidate is the end (it is the
  last ``</content>``). So the strict "last ``</content>`` before ``</NAME>``"
  rule holds whenever each fake tag is followed by the next tag within the
  window; the decision depends only on the text, never on chunk ends, and
  the window is searched once (from a saved offset) and parsed once, after
  the decision.

Request-dependent openers: :class:`~deltaflow.parsers.spec.ToolDialect`
declares static ``openers``, so the dialect declares ``"<"`` and the driver
answers "not mine" at once for a ``<`` that does not begin ``<NAME>``: it
passes that ``<``, and the text after it up to the next ``<``, on as
:class:`~deltaflow.items.ChannelText` (unchanged, in order) and ends there,
without taking a call number. So a non-call costs one small parser object
and one text item; whitespace after it is never taken for whitespace
between two blocks; and the feeder meets the next ``<`` right away.

This module also holds :class:`Snapshotter` / :class:`BlockSnapshot`: the
current list of text and tool blocks (with ``partial`` flags), built from the
streamed :class:`~deltaflow.messages.DeltaMessage` s, for agent UIs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from functools import partial
from typing import Any, Literal

from ..._core.holdback import MarkerHoldback
from ..._core.jsonscan import JsonScanner
from ..._core.text import skip_json_ws
from ..._core.toolspec import ToolSpec
from ...messages import DeltaMessage
from ..base import DriverBase
from ..spec import DriverContext, FormatDefaults

__all__ = ("BlockSnapshot", "Snapshotter", "TagPerToolDriver", "TagPerToolFormat")

# Tool names are validated by deltaflow.tools: 1 to 128 of these characters.
_MAX_TOOL_NAME = 128
_TOOL_NAME_PART = re.compile(r"[A-Za-z0-9_.:\-]*\Z")
# A parameter tag name when the tool's schema lists no properties.
_GENERIC_NAME = r"[A-Za-z_][A-Za-z0-9_.:\-]{0,127}"
_GENERIC_TAG = re.compile(rf"<({_GENERIC_NAME})>")
_GENERIC_PARTIAL = re.compile(rf"<(?:{_GENERIC_NAME})?\Z")
_GENERIC_MAX = 128
# Cline trims values with JS ``trim()``; Python's ``\s`` is str.isspace (checked equal for every code point).
_NON_SPACE = re.compile(r"\S")


def _escape(s: str) -> str:
    """JSON string body of ``s`` (escaping is per character, so fragments concatenate)."""
    return json.dumps(s, ensure_ascii=False)[1:-1]


@dataclass(frozen=True)
class TagPerToolFormat(FormatDefaults):
    """Declaration of a tag-per-tool format.

    Attributes:
        last_close: parameter names whose value ends at the *last* closing
            tag before the tool's closing tag (file text may contain the tag).
        hold_limit: the window after a candidate closing tag of such a
            parameter: the most characters held before the candidate is
            decided by the shape of what follows it (see the module docstring).
    """

    last_close: frozenset[str] = frozenset({"content", "diff"})
    hold_limit: int = 1024

    def __post_init__(self) -> None:
        if not isinstance(self.hold_limit, int) or self.hold_limit < 1:
            raise ValueError(f"hold_limit must be a positive int, got {self.hold_limit!r}")

    @property
    def openers(self) -> tuple[str, ...]:
        """None of its own: every opener comes from the request (:meth:`request_openers`)."""
        return ()

    @property
    def markers(self) -> tuple[str, ...]:
        """None: the tags are the offered tools' names."""
        return ()

    def request_openers(self, tools: Mapping[str, ToolSpec] | None) -> tuple[str, ...]:
        """``<NAME>`` for each offered tool (none without tools)."""
        return tuple(f"<{name}>" for name in tools) if tools else ()

    def driver_factory(self) -> Callable[[DriverContext], TagPerToolDriver]:
        """One :class:`TagPerToolDriver` per block."""
        return partial(TagPerToolDriver, spec=self)


class _State(IntEnum):
    """Parser states."""

    OPEN = 0
    TEXT = 1
    BODY = 2
    LEAD = 3
    VALUE = 4
    CAND = 5
    VALUE2 = 6
    DONE = 7


_OPEN, _TEXT, _BODY, _LEAD, _VALUE, _CAND, _VALUE2, _DONE = tuple(_State)


class TagPerToolDriver(DriverBase):
    """Parses one ``<NAME>...</NAME>`` call, or declares a ``<`` not a call (see the module docstring)."""

    __slots__ = (
        "_spec", "_state", "_close_tool", "_params", "_max_param", "_nparams",
        "_close_param", "_last", "_ws", "_scanned",
    )

    def __init__(self, ctx: DriverContext, spec: TagPerToolFormat) -> None:
        super().__init__(ctx)
        self._spec = spec
        self._state = _OPEN
        self._close_tool = ""
        self._params: frozenset[str] | None = None  # None: any tag name is a parameter
        self._max_param = 0
        self._nparams = 0
        self._close_param = ""
        self._last = False  # the open value is content-like
        self._ws: list[str] = []  # trailing whitespace of the value, held (trimming)
        self._scanned = 0  # characters after a candidate end already searched

    # -- the machine --------------------------------------------------------------
    def _run(self, text: str, pos: int, out: list[object], final: bool) -> int:
        n = len(text)
        while True:
            st = self._state
            if st == _OPEN:
                pos = self._open(text, pos, out, final)
                if self._state == _OPEN:
                    return pos
            elif st == _TEXT:
                # Not a call: pass the text on up to the next "<" (the next possible opener).
                q = text.find("<", pos)
                if q < 0:
                    q = n
                self.pass_text(out, q)
                if q < n or final:
                    self._state = _DONE
                    return self.finish_block(q)
                return q
            elif st == _BODY:
                pos = self._body(text, pos, out, final)
                if self._state == _BODY:
                    return pos
            elif st == _LEAD:
                m = _NON_SPACE.search(text, pos)
                if m is None:
                    if final:
                        return self._end(out, n, '"}')
                    return n  # leading whitespace of the value: dropped (trimmed)
                pos = m.start()
                self._state = _VALUE
            elif st == _VALUE or st == _VALUE2:
                pos = self._value(text, pos, out, final)
                if self._state == st:
                    return pos
            elif st == _CAND:
                pos = self._candidate(text, pos, out, final)
                if self._state == _CAND:
                    return pos
            else:  # pragma: no cover - a done parser is not fed
                return pos
            if self.done:
                return pos

    def _open(self, text: str, pos: int, out: list[object], final: bool) -> int:
        """At the opener (after whitespace between blocks): ``<NAME>`` of an offered tool, or not a call."""
        n = len(text)
        p = pos if text.startswith("<", pos) else skip_json_ws(text, pos)
        tools = self.ctx.tools
        if p >= n:  # pragma: no cover - the feeder starts a block at a "<"
            if not final:
                return pos
            self.pass_text(out, n)
            self._state = _DONE
            return self.finish_block(n)
        if text[p] != "<" or not tools:
            return self._not_mine(out, p)
        gt = text.find(">", p + 1, p + 2 + _MAX_TOOL_NAME)
        if gt < 0:
            frag = text[p + 1 : p + 2 + _MAX_TOOL_NAME]
            if (
                not final
                and p + 1 + len(frag) == n
                and _TOOL_NAME_PART.match(frag) is not None
                and any(t.startswith(frag) for t in tools)
            ):
                return pos  # a partial opener: the feeder holds it
            return self._not_mine(out, p)
        name = text[p + 1 : gt]
        spec = tools.get(name)
        if spec is None:
            return self._not_mine(out, p)
        self.new_call()
        self._close_tool = f"</{name}>"
        props = spec.parameters.get("properties")
        if isinstance(props, Mapping):
            self._params = frozenset(k for k in props if isinstance(k, str) and k)
            self._max_param = max((len(k) for k in self._params), default=0)
        else:
            self._params = None
            self._max_param = _GENERIC_MAX
        self.emit(out, gt + 1, name=name, args="{")
        self._state = _BODY
        return gt + 1

    def _not_mine(self, out: list[object], p: int) -> int:
        """The ``<`` at ``p`` does not open a call: it, what came before it and the text after it are text."""
        self._state = _TEXT
        return p + 1

    def _body(self, text: str, pos: int, out: list[object], final: bool) -> int:
        """Between parameters: the next ``<key>``, or ``</NAME>``; other text belongs to the call."""
        n = len(text)
        close_tool = self._close_tool
        while True:
            lt = text.find("<", pos)
            if lt < 0:
                if final:
                    return self._end(out, n, "}")
                return n
            if text.startswith(close_tool, lt):
                return self._end(out, lt + len(close_tool), "}")
            key = self._param_at(text, lt)
            if key is not None:
                self._open_param(out, key, lt + len(key) + 2)
                return lt + len(key) + 2
            if not final and self._partial_tag(text, lt):
                return lt  # a partial tag: the feeder holds it
            pos = lt + 1

    def _param_at(self, text: str, lt: int) -> str | None:
        """The parameter whose opening tag starts at ``lt``, if any."""
        params = self._params
        if params is None:
            m = _GENERIC_TAG.match(text, lt)
            return m.group(1) if m is not None else None
        gt = text.find(">", lt + 1, lt + 2 + self._max_param)
        if gt < 0:
            return None
        key = text[lt + 1 : gt]
        return key if key in params else None

    def _partial_tag(self, text: str, lt: int) -> bool:
        """``text[lt:]`` (the end of the text) may still become ``</NAME>`` or a parameter tag."""
        r = len(text) - lt
        close_tool = self._close_tool
        if r < len(close_tool) and close_tool.startswith(text[lt:]):
            return True
        if r > self._max_param + 1:
            return False
        rest = text[lt:]
        params = self._params
        if params is None:
            return _GENERIC_PARTIAL.match(rest) is not None
        frag = rest[1:]
        return any(k.startswith(frag) for k in params)

    def _open_param(self, out: list[object], key: str, end: int) -> None:
        sep = ", " if self._nparams else ""
        self._nparams += 1
        self._close_param = f"</{key}>"
        self._last = key in self._spec.last_close
        self._ws = []
        self.emit(out, end, args=f'{sep}{json.dumps(key, ensure_ascii=False)}: "')
        self._state = _LEAD

    def _emit_value(self, out: list[object], seg: str, pos: int) -> None:
        """Emit ``seg`` of the value (consumed up to ``pos``), holding its trailing whitespace."""
        body = seg.rstrip()
        if not body:
            if seg:
                self._ws.append(seg)
            return
        tail = seg[len(body) :]
        if self._ws:
            body = "".join(self._ws) + body
        self._ws = [tail] if tail else []
        self.emit(out, pos, args=_escape(body))

    def _value(self, text: str, pos: int, out: list[object], final: bool) -> int:
        """Inside a value: stream it up to the first ``</key>`` (``_VALUE2``: or ``</NAME>``)."""
        n = len(text)
        close = self._close_param
        i = text.find(close, pos)
        j = -1
        if self._state == _VALUE2:
            j = text.find(self._close_tool, pos, i if i >= 0 else n)
        if j >= 0:  # after an undecided candidate: the call ends, and the value with it
            self._emit_value(out, text[pos:j], j)
            return self._end(out, j + len(self._close_tool), '"}')
        if i >= 0:
            self._emit_value(out, text[pos:i], i)
            if self._last:
                self._state = _CAND
                self._scanned = 0
                return i
            self._ws = []
            self.emit(out, i + len(close), args='"')
            self._state = _BODY
            return i + len(close)
        if final:
            self._emit_value(out, text[pos:n], n)
            return self._end(out, n, '"}')
        k = MarkerHoldback((close,)).held(text, pos)
        if self._state == _VALUE2:
            k = max(k, MarkerHoldback((self._close_tool,)).held(text, pos))
        self._emit_value(out, text[pos : n - k], n - k)
        return n - k

    def _candidate(self, text: str, pos: int, out: list[object], final: bool) -> int:
        """At a candidate end ``</content>`` of a content-like value (see the module docstring).

        Everything here depends only on the text inside the window of
        ``hold_limit`` characters after the candidate, never on where chunks
        ended: the earliest ``</content>`` or ``</NAME>`` lying wholly in the
        window decides; a full window without either is decided by its shape.
        """
        n = len(text)
        close = self._close_param
        close_tool = self._close_tool
        limit = self._spec.hold_limit
        overlap = max(len(close), len(close_tool)) - 1
        while True:
            after = pos + len(close)
            stop = min(n, after + limit)
            frm = after + max(0, self._scanned - overlap)
            i = text.find(close, frm, stop)
            j = text.find(close_tool, frm, i if i >= 0 else stop)
            if j >= 0:  # the tool closes first: the candidate is the end
                return self._candidate_ends(out, after)
            if i < 0:
                break
            # Another </content> first: the candidate was file text, the new one is the candidate.
            self._emit_value(out, text[pos:i], i)
            self._scanned = 0
            pos = i
        if stop - after < limit:  # the window is not complete yet
            if final:
                return self._candidate_ends(out, after)  # the last </content> of the input
            self._scanned = n - after
            return pos  # the feeder holds the candidate and what follows it
        # A full window without either tag: decide by its shape.
        if self._window_is_end(text[after:stop]):
            return self._candidate_ends(out, after)
        # File text: the window joins the value; a tag that began in it and ends after it is still to be found.
        resume = max(after, stop - overlap)
        self._emit_value(out, text[pos:resume], resume)
        self._state = _VALUE2
        return resume

    def _window_is_end(self, window: str) -> bool:
        """Whitespace, optionally followed by a (possibly cut) parameter tag of the tool."""
        rest = window.lstrip()
        if not rest:
            return True
        if rest[0] != "<":
            return False
        gt = rest.find(">")
        if gt < 0:
            return self._partial_tag(rest, 0)
        key = rest[1:gt]
        return key in self._params if self._params is not None else _GENERIC_TAG.match(rest) is not None

    def _candidate_ends(self, out: list[object], after: int) -> int:
        """The candidate closing tag ending at ``after`` is the value's end."""
        self._ws = []
        self.emit(out, after, args='"')
        self._state = _BODY
        return after

    def _end(self, out: list[object], pos: int, args: str) -> int:
        """End the call at ``pos`` with ``args`` closing its arguments."""
        self._ws = []
        self.emit(out, pos, args=args, end=True)
        self._state = _DONE
        return self.finish_block(pos)


# -- snapshots for agent UIs ----------------------------------------------------------


@dataclass(frozen=True)
class BlockSnapshot:
    """One block of a response as an agent UI shows it.

    Attributes:
        type: ``"text"`` (content), ``"reasoning"`` (reasoning content) or
            ``"tool_use"``.
        partial: the block may still grow (it is still open in the stream).
        content: the text of a text or reasoning block.
        name: the tool name of a tool_use block.
        params: the arguments of a tool_use block, decoded; while the call is
            open, what was streamed so far (an open string value shows its
            text so far).
        index: the call index of a tool_use block (as in the deltas).
    """

    type: Literal["text", "reasoning", "tool_use"]
    partial: bool
    content: str = ""
    name: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    index: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Cline's shape: ``{"type": "text", "content", "partial"}``.

        Or, for a tool use, ``{"type": "tool_use", "name", "params", "partial"}``.
        """
        if self.type == "tool_use":
            return {"type": "tool_use", "name": self.name, "params": dict(self.params), "partial": self.partial}
        return {"type": self.type, "content": self.content, "partial": self.partial}


class _CallAcc:
    """The arguments of one call as they stream, scanned once for the last closable prefix."""

    __slots__ = ("index", "name", "parts", "scanner", "tail", "base", "safe", "cache")

    def __init__(self, index: int, name: str | None) -> None:
        self.index = index
        self.name = name
        self.parts: list[str] = []
        self.scanner = JsonScanner()
        self.tail = ""  # text the scanner gave back (a partial escape, number or literal)
        self.base = 0  # offset of ``tail`` in the arguments text
        self.safe = -1  # last safe offset in the arguments text
        self.cache: tuple[int, Mapping[str, Any]] | None = None

    def add(self, frag: str) -> None:
        self.parts.append(frag)
        sc = self.scanner
        if sc.done or sc.error:
            return
        text = self.tail + frag if self.tail else frag
        consumed, safe = sc.scan(text, 0)
        if safe >= 0:
            self.safe = self.base + safe
        self.tail = text[consumed:]
        self.base += consumed

    @property
    def done(self) -> bool:
        return self.scanner.done

    def params(self) -> Mapping[str, Any]:
        """The arguments decoded; an open object is closed at its last safe position first."""
        count = len(self.parts)
        if self.cache is not None and self.cache[0] == count:
            return self.cache[1]
        text = "".join(self.parts)
        if not self.scanner.done:
            text = text[: self.safe] + self.scanner.closer() if self.safe >= 0 else ""
        try:
            value = json.loads(text) if text else {}
        except ValueError:
            value = {}
        params: Mapping[str, Any] = value if isinstance(value, dict) else {}
        self.cache = (count, params)
        return params


class Snapshotter:
    """Builds the current list of blocks from a response's deltas (a consumer, not a second grammar).

    Feed it what :class:`~deltaflow.ResponseParser` returns, chunk by chunk::

        snap = Snapshotter()
        for chunk in chunks:
            blocks = snap.update(parser.feed(chunk))
        blocks = snap.update(parser.feed("", final=True), final=True)

    Rules: consecutive content deltas form one ``text`` block, consecutive
    reasoning deltas one ``reasoning`` block; each call index is one
    ``tool_use`` block, placed where its first delta came. A text block is
    partial while it is the last block of an unfinished stream; a tool block
    while its arguments object is not closed and the stream is unfinished.
    After ``final``, nothing is partial and the blocks agree with
    :func:`~deltaflow.parse_complete` (text blocks joined are its content,
    tool blocks are its calls). Held text (a partial tag) is not shown until
    it is released, as Cline hides trailing partial tags.

    Cost: each snapshot decodes the arguments of the open call once
    (linear in their length); closed blocks are decoded once and cached.
    """

    __slots__ = ("_blocks", "_calls", "_final")

    def __init__(self) -> None:
        self._blocks: list[list[str] | _CallAcc] = []  # text: [type, part, part, ...]
        self._calls: dict[int, _CallAcc] = {}
        self._final = False

    def update(self, deltas: Iterable[DeltaMessage], final: bool = False) -> list[BlockSnapshot]:
        """Take the next deltas; return the current blocks.

        Args:
            deltas: deltas of the stream, in order.
            final: the stream ended with these deltas.
        """
        for d in deltas:
            if d.reasoning_content:
                self._text("reasoning", d.reasoning_content)
            if d.content:
                self._text("text", d.content)
            for tc in d.tool_calls:
                acc = self._calls.get(tc.index)
                if acc is None:
                    acc = self._calls[tc.index] = _CallAcc(tc.index, tc.function.name)
                    self._blocks.append(acc)
                elif tc.function.name and acc.name is None:
                    acc.name = tc.function.name
                if tc.function.arguments:
                    acc.add(tc.function.arguments)
        if final:
            self._final = True
        return self.blocks()

    def _text(self, kind: str, text: str) -> None:
        blocks = self._blocks
        if blocks:
            last = blocks[-1]
            if isinstance(last, list) and last[0] == kind:
                last.append(text)
                return
        blocks.append([kind, text])

    def blocks(self) -> list[BlockSnapshot]:
        """The current blocks (see the class docstring)."""
        out: list[BlockSnapshot] = []
        last = len(self._blocks) - 1
        for i, b in enumerate(self._blocks):
            if isinstance(b, list):
                kind: Literal["text", "reasoning"] = "text" if b[0] == "text" else "reasoning"
                out.append(BlockSnapshot(type=kind, partial=not self._final and i == last, content="".join(b[1:])))
            else:
                out.append(
                    BlockSnapshot(
                        type="tool_use",
                        partial=not self._final and not b.done,
                        name=b.name,
                        params=b.params(),
                        index=b.index,
                    )
                )
        return out
