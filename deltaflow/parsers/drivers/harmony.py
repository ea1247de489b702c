"""gpt-oss Harmony: the channel-routing machine and the function-call body parser.

Facts: shared/dialects.md section 11 and openai/harmony ``docs/format.md``.
A Harmony output is a sequence of messages::

    <|start|>ROLE[ to=RECIPIENT]<|channel|>CHANNEL[ to=RECIPIENT][ [<|constrain|>]TYPE]<|message|>BODY TERMINATOR

where TERMINATOR is ``<|end|>`` (more messages follow), ``<|call|>`` (a tool
call) or ``<|return|>`` (done). Every marker is one special token of
o200k_harmony; role, channel, recipient and type are ordinary text. The
prompt ends with ``<|start|>assistant``, so the output begins in the first
header's role part (usually directly with ``<|channel|>``).

Harmony is routed by its headers, not by text openers: :class:`HarmonyRouter`
runs in the channel router stage and turns raw text into ``ChannelText``
and ``ToolDelta`` items before the later stages run (they pass such items
through). Rules, decided when a header reaches ``<|message|>``:

* A recipient ``functions.NAME`` makes the message a call of ``NAME``, on any
  channel; its body is the JSON arguments (:class:`HarmonyCallDriver`). Any
  other recipient that is not a built-in tool and not ``assistant`` is a call
  of its full name (vLLM's rule for a model that drops the ``functions.``
  prefix, e.g. ``math.sum``); the name filter drops it unless offered.
* A built-in recipient (``python``, ``browser.*``, ``container.*``) is not a
  call: the message is surfaced verbatim (header, body and terminator) in
  its channel, so nothing is silently lost; likewise a function call when
  no tool parser is in use.
* ``analysis`` is reasoning; ``final`` and ``commentary`` without a recipient
  (a preamble) are content. A message on another channel, or on none, is
  surfaced verbatim as content. When reasoning is not split (no reasoning
  parser, or thinking disabled) an analysis message is surfaced verbatim in
  the content too, as ``<think>`` blocks are.
* Two content messages are separated by ``"\\n"`` (vLLM joins final and
  preamble texts so); reasoning messages are joined as written.
* A message ends at a terminator, or without one where the next header
  begins (``<|start|>`` or ``<|channel|>``); ``<|message|>`` and
  ``<|constrain|>`` inside a body are body text.
* A header is a few words (``_part_ok``), each part at most ``_MAX_PART``
  (256) characters. A header that cannot be one is surfaced verbatim as
  content with the rest of its message (later header parts,
  ``<|message|>``, the body and its terminator; a ``<|start|>`` begins the
  next header), so none of its markers is dropped; so is text after a
  message whose first 256 characters could begin a lost header (not only
  blanks) but that runs longer. A header that meets a terminator before
  ``<|message|>`` or that the output ends in is surfaced verbatim as
  content. A repeated ``<|channel|>`` replaces the channel part and a
  ``<|start|>`` inside a header restarts it: the earlier message-less
  fragment is protocol text and is dropped (llama.cpp ignores
  ``<|channel|>commentary to=assistant`` before the real header).
* After a message (and at the output start), text made only of header words
  (``assistant``, a channel name, ``to=RECIPIENT``) is a header whose
  ``<|start|>`` was lost: its role part when a ``<|channel|>`` follows, a
  dropped fragment when a ``<|start|>`` does (the ``commentary`` filler
  SGLang sees after ``<|call|>``). Any other text between messages, and a
  stray marker, is content, verbatim.

Stable-prefix guarantee: held are a partial marker at a chunk end (only with
``chunking="any"``: every marker is one o200k_harmony token, so token-aligned
input never splits one), a header until its ``<|message|>`` (bounded: a
header longer than its grammar allows is surfaced at once), the text after a
message while it can still be a lost header (a header word and a recipient), and in
a call body the JSON scanner's short unsafe tail (a partial key, number,
literal or escape) and whitespace after the arguments.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol

from ..._core.holdback import MarkerHoldback
from ..._core.jsonscan import JsonScanner
from ..._core.text import skip_json_ws
from ...errors import StateError
from ...items import Channel, ChannelText, ChunkEnd, ToolDelta
from ..base import DriverBase
from ..spec import DriverContext, FormatDefaults

__all__ = (
    "BUILTIN_NAMESPACES",
    "END_MARKERS",
    "MARKERS",
    "REASONING_ROUTERS",
    "ROUTERS",
    "HarmonyCallDriver",
    "HarmonyFormat",
    "HarmonyRouter",
    "RoutingMachineFactory",
    "routing_machine",
)

START = "<|start|>"
CHANNEL = "<|channel|>"
MESSAGE = "<|message|>"
CONSTRAIN = "<|constrain|>"
END = "<|end|>"
CALL = "<|call|>"
RETURN = "<|return|>"

MARKERS: tuple[str, ...] = (START, CHANNEL, MESSAGE, CONSTRAIN, END, CALL, RETURN)
"""Every Harmony marker (each one special token of o200k_harmony)."""

END_MARKERS: tuple[str, ...] = (END, CALL, RETURN, START, CHANNEL)
"""The markers that end a message body: its terminators, and the start of the next header."""

_TERMINATORS = frozenset((END, CALL, RETURN))
_MARKER_RE = re.compile("|".join(re.escape(m) for m in MARKERS))
_END_RE = re.compile("|".join(re.escape(m) for m in END_MARKERS))

BUILTIN_NAMESPACES: frozenset[str] = frozenset({"python", "browser", "container"})
"""Recipients of gpt-oss's built-in tools (harmony docs: ``python``, ``browser.*``; vLLM adds ``container``)."""

_KNOWN_CHANNELS = frozenset({"analysis", "commentary", "final"})
_SELF = "assistant"  # a message addressed to the assistant has no recipient (tool results use it)
_FUNCTIONS = "functions."

# Header parts and how many words other than ``to=...`` each may hold:
# role part: a role; channel part: the channel and a content type (the HF
# template writes ``commentary json`` without <|constrain|>); constrain part: a
# type. A lost role part (text after a message, before any marker) may only
# hold a header word: it is read as a header whose <|start|> was lost only if
# it says nothing but protocol.
_ROLE, _CHANNEL_PART, _CONSTRAIN_PART, _LOST_ROLE = range(4)
_PLAIN_WORDS = (1, 2, 1, 1)
_HEADER_WORDS = frozenset({"assistant", "analysis", "commentary", "final"})
_MAX_PART = 256  # characters; a longer part is not a header
_WORD = re.compile(r"[\w.:/@=+\-]+")
_TO = "to="


class _RouterState(IntEnum):
    """Router states."""

    HEADER = 0
    BODY = 1
    CALL = 2
    STRAY = 3
    BAD_HEADER = 4


_HEADER, _BODY, _CALL, _STRAY, _BAD_HEADER = tuple(_RouterState)


class _BodyState(IntEnum):
    """Call body states."""

    PRE = 0
    ARGS = 1
    POST = 2
    BROKEN = 3


_PRE, _ARGS, _POST, _BROKEN = tuple(_BodyState)


def _part_ok(text: str, start: int, end: int, kind: int, complete: bool) -> bool:
    """Whether ``text[start:end]`` is (a prefix of, unless ``complete``) a header part of ``kind``.

    Checks at most ``_MAX_PART`` characters. The check is monotonic: once a
    prefix fails, every extension fails, so the outcome never depends on
    where chunks ended.
    """
    if end - start > _MAX_PART:
        return False
    if end <= start:
        return True
    words = text[start:end].split()
    open_last = not complete and not text[end - 1].isspace()
    limit = _PLAIN_WORDS[kind]
    plain = to = 0
    last = len(words) - 1
    for i, w in enumerate(words):
        if _WORD.fullmatch(w) is None:
            return False
        if w.startswith(_TO):
            to += 1
        elif i == last and open_last:  # a word still being written: can it still fit?
            as_to = to < 1 and _TO.startswith(w)
            fits = kind != _LOST_ROLE or any(v.startswith(w) for v in _HEADER_WORDS)
            return as_to or (fits and plain < limit)
        elif kind == _LOST_ROLE and w not in _HEADER_WORDS:
            return False
        else:
            plain += 1
        if to > 1 or plain > limit:
            return False
    return True


def _long_part(text: str, start: int, end: int, kind: int) -> bool:
    """Whether ``text[start:end]`` failed only by its length: its first ``_MAX_PART`` characters could begin a part.

    A lost role part made only of blanks is not a header cut short (it is text between messages).
    """
    if end - start <= _MAX_PART:
        return False
    cut = start + _MAX_PART
    if kind == _LOST_ROLE and text[start:cut].isspace():
        return False
    return _part_ok(text, start, cut, kind, False)


def _words(part: str) -> tuple[list[str], str | None]:
    """The plain words of a header part and its recipient (``to=...``), if any."""
    plain: list[str] = []
    recipient: str | None = None
    for w in part.split():
        if w.startswith(_TO):
            recipient = w[len(_TO) :]
        else:
            plain.append(w)
    return plain, recipient


def _call_name(recipient: str | None) -> tuple[bool, str | None]:
    """Classify a recipient: ``(True, name)`` a call, ``(True, None)`` a built-in, ``(False, None)`` none."""
    if not recipient or recipient == _SELF:
        return False, None
    if recipient.startswith(_FUNCTIONS):
        name = recipient[len(_FUNCTIONS) :]
        return True, name or None  # "functions." alone names nothing: never invent a name
    if recipient.split(".", 1)[0] in BUILTIN_NAMESPACES:
        return True, None
    return True, recipient


@dataclass(frozen=True)
class HarmonyFormat(FormatDefaults):
    """gpt-oss Harmony: no text openers (the channel router finds calls by their headers)."""

    @property
    def openers(self) -> tuple[str, ...]:
        """None: the Harmony router hands the call bodies to the driver."""
        return ()

    @property
    def markers(self) -> tuple[str, ...]:
        """Every Harmony marker."""
        return MARKERS

    def driver_factory(self) -> Callable[[DriverContext], HarmonyCallDriver]:
        """One :class:`HarmonyCallDriver` per call body."""
        return HarmonyCallDriver


class HarmonyCallDriver(DriverBase):
    """The body of one Harmony function call: JSON arguments up to the message's end.

    The block this parser owns is a call message's body and its terminator.
    :meth:`open_call` emits the name with the header as raw text; then
    :meth:`feed_tool_block` streams the arguments as their source text up to
    the JSON scanner's last safe position, and ends at ``<|end|>``,
    ``<|call|>``, ``<|return|>`` (consumed) or where the next header begins
    (``<|start|>``/``<|channel|>``, not consumed). Whitespace around the
    object is raw text of the call; an empty body gives ``{}``.

    Malformed body (not an object, invalid JSON, text after the object): the
    call is completed (arguments closed at the last safe position, or ``{}``)
    and the body text it cannot use is surfaced (``abort`` events) up to the
    terminator, which stays raw text of the call. Input ending in the body
    closes the arguments the same way.

    Args:
        ctx: the parser context (channel, call numbering).
        chunking: ``"any"`` or ``"tokens"`` (whether a partial marker can end a chunk).
    """

    __slots__ = ("_state", "_scan", "_pending", "_args_from", "_hb")

    def __init__(self, ctx: DriverContext, *, chunking: str = "any") -> None:
        super().__init__(ctx)
        self._state = _PRE
        self._scan = JsonScanner()
        self._pending: list[str] = []  # arguments text consumed past the last safe position
        self._args_from = 0
        self._hb = MarkerHoldback(END_MARKERS, (), chunking)

    def open_call(self, out: list[object], text: str, header_start: int, body_start: int, name: str) -> None:
        """Start the call: emit its name; ``text[header_start:body_start]`` (the header) is its raw text."""
        self.new_call()
        self.begin(text, header_start)
        self.emit(out, body_start, name=name)

    def feed_tool_block(self, text: str, out: list[object], final: bool, start: int = 0) -> int:
        """Consume the body in ``text[start:]``; see :class:`~deltaflow.parsers.spec.ToolDriver`."""
        self.begin(text, start)
        self._args_from = start
        n = len(text)
        m = _END_RE.search(text, start)
        if m is not None:
            limit, ended = m.start(), True
        else:
            limit, ended = (n, True) if final else (n - self._hb.held(text, start), False)
        pos = self._body(text, start, limit, ended, out)
        if not ended:  # keep what was consumed as uncommitted raw text; the caller keeps the rest
            if self._state == _ARGS and pos > self._args_from:
                self._pending.append(text[self._args_from : pos])
            self.hold(pos)
            return pos
        if pos < limit:  # pragma: no cover - the scanner consumes all of a final segment
            self._break(out, limit, self._scan.closer())
        if m is None:
            end = n
        elif m.group() in _TERMINATORS:
            end = m.end()
        else:
            end = m.start()  # the next header: not ours
        self._close(out, limit, end)
        return self.finish_block(end)

    # -- the body --------------------------------------------------------------------------
    def _body(self, text: str, pos: int, limit: int, ended: bool, out: list[object]) -> int:
        """Consume ``text[pos:limit]``; returns the position reached (``limit`` unless more text is needed)."""
        st = self._state
        if st == _PRE:
            ws = min(skip_json_ws(text, pos), limit)
            if ws >= limit:
                return ws
            if text[ws] != "{":
                return self._break(out, limit, "{}")
            self._state = st = _ARGS
            pos = self._args_from = ws
        if st == _ARGS:
            seg = text[pos:limit]
            consumed, safe = self._scan.scan(seg, 0, ended)
            if safe >= 0:
                cut = pos + safe
                self.emit(out, cut, args="".join(self._pending) + text[self._args_from : cut])
                self._pending = []
                self._args_from = cut
            if self._scan.error:
                return self._break(out, limit, self._scan.closer())
            pos += consumed
            if not self._scan.done:
                return pos
            self._state = st = _POST
        if st == _POST:
            ws = min(skip_json_ws(text, pos), limit)
            if ws >= limit:
                return ws
            self.emit(out, ws, end=True)  # the call is complete; what follows is not its text
            self._state = _BROKEN
            pos = ws
        self._surface(out, limit)
        return limit

    def _break(self, out: list[object], limit: int, close_args: str) -> int:
        """The body went wrong: close the arguments; surface everything not yet attributed, up to ``limit``."""
        out.append(ToolDelta(call=self.call, channel=self.ctx.channel, args=close_args, end=True, abort=True))
        self._pending = []
        self._state = _BROKEN
        self._surface(out, limit)
        return limit

    def _surface(self, out: list[object], pos: int) -> None:
        raw = self._take(pos)
        if raw:
            out.append(ToolDelta(call=self.call, channel=self.ctx.channel, raw=raw, abort=True))

    def _close(self, out: list[object], limit: int, end: int) -> None:
        """The body is over at ``limit``; its terminator (if any) runs to ``end``."""
        st = self._state
        if st == _PRE:
            if end > limit:  # an empty body closed by its terminator: a call without arguments
                self.emit(out, end, args="{}", end=True)
            else:  # cut before its body began: not a call (the identity stage surfaces it whole)
                out.append(ToolDelta(call=self.call, channel=self.ctx.channel, raw=self._take(end), abort=True))
        elif st == _ARGS:  # cut short: close at the last safe position; the unsafe rest is surfaced
            out.append(
                ToolDelta(call=self.call, channel=self.ctx.channel, args=self._scan.closer(), end=True, abort=True)
            )
            self._pending = []
            self._surface(out, limit)
            if end > limit:
                self.emit(out, end)
        elif st == _POST:
            self.emit(out, end, end=True)
        elif end > limit:  # _BROKEN: the terminator stays raw text of the call
            self.emit(out, end)
        self._state = _BROKEN


class RoutingMachineFactory(Protocol):
    """Builds a routing machine (a stage-like object) for one response."""

    def __call__(self, *, tool_calls: bool, reasoning: bool, chunking: str) -> HarmonyRouter: ...


class HarmonyRouter:
    """Routes Harmony output to reasoning, content and tool calls (see the module docstring).

    A sans-IO machine with the stage shape (``feed(item)``, ``finish()``): it
    consumes raw text (``str``) and emits :class:`~deltaflow.items.ChannelText`
    and :class:`~deltaflow.items.ToolDelta`; every :class:`~deltaflow.items.ChunkEnd`
    is forwarded after the outputs its chunk caused, with ``reasoning_tokens``
    set to the chunk's tokens that lie in reasoning messages (body and
    terminator: headers are protocol and count as neither, so the count does
    not depend on where chunks ended).

    Args:
        tool_calls: function-call messages become calls (else they are surfaced verbatim).
        reasoning: analysis messages become reasoning (else they are surfaced verbatim as content).
        chunking: ``"any"`` or ``"tokens"`` (see :class:`~deltaflow._core.holdback.MarkerHoldback`).
        dialect: the tool dialect's name (for the parser context).
    """

    name = "harmony"
    __slots__ = (
        "_tool_calls", "_reasoning", "_chunking", "_dialect", "_hb", "_hb_end",
        "_state", "_buf", "_resume", "_calls", "_parser", "_finished",
        "_hdr_start", "_part", "_part_start", "_role_to", "_channel", "_channel_to", "_constrain_to",
        "_route_ch", "_route_raw", "_route_content", "_first", "_content_seen",
        "_in_pos", "_chunk_start", "_spans",
    )

    def __init__(
        self, *, tool_calls: bool = True, reasoning: bool = True, chunking: str = "any", dialect: str = "openai"
    ) -> None:
        self._tool_calls = tool_calls
        self._reasoning = reasoning
        self._chunking = chunking
        self._dialect = dialect
        self._hb = MarkerHoldback(MARKERS, (), chunking)
        self._hb_end = MarkerHoldback(END_MARKERS, (), chunking)
        self._buf = ""
        self._resume = 0  # where scanning resumes in the held text
        self._calls = 0
        self._parser: HarmonyCallDriver | None = None
        self._finished = False
        self._route_ch = Channel.CONTENT
        self._route_raw = False
        self._route_content = False
        self._first = False
        self._content_seen = False
        self._in_pos = 0
        self._chunk_start = 0
        self._spans: list[list[float]] = []  # [start, end) of reasoning bodies, in input positions
        self._hdr_start = 0  # where the current header (or the text after a message) begins
        self._part = _LOST_ROLE
        self._part_start = 0
        self._role_to: str | None = None
        self._channel: str | None = None
        self._channel_to: str | None = None
        self._constrain_to: str | None = None
        # The output begins in the role part of the prompt's <|start|>assistant header.
        self._between(0)

    # -- stage interface --------------------------------------------------------------------
    def feed(self, item: object) -> list[object]:
        """Route one piece of text; forward a chunk end with its reasoning tokens; pass other items."""
        if item.__class__ is str:
            assert isinstance(item, str)
            if not item:
                return []
            self._in_pos += len(item)
            text = self._buf + item if self._buf else item
            return self._run(text, self._in_pos - len(text), False)
        if item.__class__ is ChunkEnd:
            assert isinstance(item, ChunkEnd)
            return [self._count(item)]
        return [item]

    def finish(self) -> list[object]:
        """The output ended: end the open message and release held text."""
        if self._finished:
            raise StateError("HarmonyRouter.finish() called twice")
        self._finished = True
        text = self._buf
        return self._run(text, self._in_pos - len(text), True)

    # -- helpers ----------------------------------------------------------------------------
    def _new_call(self) -> int:
        n = self._calls
        self._calls += 1
        return n

    def _release_rest(self, text: str, pos: int, final: bool, ch: Channel, out: list[object]) -> list[object]:
        """``text[pos:]`` has no marker: release it on ``ch`` (a marker prefix at its end is held)."""
        n = len(text)
        k = 0 if final else self._hb.held(text, pos)
        if n - k > pos:
            out.append(ChannelText(ch, text[pos : n - k]))
        if final:
            self._between(n)
        else:
            self._hold(text, n - k, n - k)
        return out

    def _between(self, pos: int) -> None:
        """After a message (or at the output start): text here may be a header's role part."""
        self._state = _HEADER
        self._hdr_start = pos
        self._start_part(_LOST_ROLE, pos)
        self._role_to = None
        self._channel = None
        self._channel_to = None
        self._constrain_to = None

    def _start_part(self, kind: int, pos: int) -> None:
        self._part = kind
        self._part_start = pos

    def _hold(self, text: str, keep: int, resume: int) -> None:
        """Keep ``text[keep:]`` for the next feed; scanning resumes at ``resume``."""
        self._buf = text[keep:]
        self._resume = resume - keep
        self._hdr_start -= keep
        self._part_start -= keep

    def _record_part(self, part: str) -> None:
        plain, to = _words(part)
        kind = self._part
        if kind == _ROLE or kind == _LOST_ROLE:
            self._role_to = to
        elif kind == _CHANNEL_PART:
            self._channel = plain[0] if plain else None
            self._channel_to = to
            self._constrain_to = None
        elif to is not None:
            self._constrain_to = to

    def _open_message(self, out: list[object], text: str, base: int, body: int) -> None:
        """The header ends at ``body``: pick the route of the message."""
        recipient = self._constrain_to or self._channel_to or self._role_to
        addressed, name = _call_name(recipient)
        analysis = self._channel == "analysis"
        ch = Channel.REASONING if analysis and self._reasoning else Channel.CONTENT
        if addressed and name is not None and self._tool_calls:
            ctx = DriverContext(channel=ch, new_call=self._new_call, tools=None, dialect=self._dialect)
            parser = HarmonyCallDriver(ctx, chunking=self._chunking)
            parser.open_call(out, text, self._hdr_start, body, name)
            self._parser = parser
            self._state = _CALL
            return
        self._state = _BODY
        self._route_ch = ch
        self._route_raw = addressed or (analysis and not self._reasoning) or self._channel not in _KNOWN_CHANNELS
        self._route_content = not self._route_raw and ch is Channel.CONTENT
        self._first = True
        if self._route_raw:
            out.append(ChannelText(ch, text[self._hdr_start : body]))
        if ch is Channel.REASONING:
            self._spans.append([base + body, float("inf")])

    def _end_message(self, end: int) -> None:
        """The body ended at input position ``end``."""
        if self._route_ch is Channel.REASONING and self._spans:
            self._spans[-1][1] = end

    def _body_text(self, out: list[object], s: str) -> None:
        if self._first:
            self._first = False
            if self._route_content:
                if self._content_seen:
                    s = "\n" + s  # a second content message (preamble then final answer)
                self._content_seen = True
        out.append(ChannelText(self._route_ch, s))

    def _count(self, end: ChunkEnd) -> ChunkEnd:
        start = self._chunk_start
        self._chunk_start = self._in_pos
        ids = end.token_ids
        if not ids or not self._spans:
            return end
        spans = [s for s in self._spans if s[1] > start]
        self._spans = spans
        if not spans:
            return end
        chars = end.token_chars
        if chars is None or len(chars) != len(ids):
            n = len(ids) if any(s0 <= start < s1 for s0, s1 in spans) else 0
        else:
            n = 0
            p = start
            for c in chars:
                for s0, s1 in spans:
                    if s0 <= p < s1:
                        n += 1
                        break
                p += c
        if not n:
            return end
        return ChunkEnd(
            token_ids=ids,
            logprobs=end.logprobs,
            finish_reason=end.finish_reason,
            token_chars=end.token_chars,
            reasoning_tokens=n,
        )

    # -- the machine ------------------------------------------------------------------------
    def _run(self, text: str, base: int, final: bool) -> list[object]:
        out: list[object] = []
        n = len(text)
        pos = self._resume
        self._buf = ""
        self._resume = 0
        content = Channel.CONTENT
        while True:
            st = self._state
            if st == _CALL:
                parser = self._parser
                assert parser is not None
                end = parser.feed_tool_block(text, out, final, pos)
                if not parser.done:
                    self._hold(text, end, end)
                    return out
                self._parser = None
                pos = end
                self._between(pos)
                continue
            if st == _BODY:
                m = _END_RE.search(text, pos)
                if m is None:
                    k = 0 if final else self._hb_end.held(text, pos)
                    if n - k > pos:
                        self._body_text(out, text[pos : n - k] if (pos or k) else text)
                    if final:
                        self._end_message(base + n)
                        self._between(n)
                    else:
                        self._hold(text, n - k, n - k)
                    return out
                i = m.start()
                if i > pos:
                    self._body_text(out, text[pos:i])
                mk = m.group()
                if mk in _TERMINATORS:
                    if self._route_raw:
                        out.append(ChannelText(self._route_ch, mk))
                    self._end_message(base + m.end())
                    pos = m.end()
                else:  # the next header begins without a terminator
                    self._end_message(base + i)
                    pos = i
                self._between(pos)
                continue
            if st == _BAD_HEADER:
                # The rest of a header that cannot be one is text: its further parts, its
                # <|message|> and then its body (surfaced like a built-in tool's message), or a
                # terminator; a <|start|> begins the next header.
                m = _MARKER_RE.search(text, pos)
                if m is None:
                    return self._release_rest(text, pos, final, content, out)
                mk = m.group()
                if mk == START:
                    if m.start() > pos:
                        out.append(ChannelText(content, text[pos : m.start()]))
                    pos = m.start()
                    self._between(pos)
                    continue
                out.append(ChannelText(content, text[pos : m.end()]))
                pos = m.end()
                if mk == MESSAGE:
                    self._state = _BODY
                    self._route_ch = content
                    self._route_raw = True
                    self._route_content = False
                    self._first = True
                elif mk in _TERMINATORS:
                    self._between(pos)
                continue
            if st == _STRAY:
                m = _MARKER_RE.search(text, pos)
                if m is None:
                    return self._release_rest(text, pos, final, content, out)
                i = m.start()
                if i > pos:
                    out.append(ChannelText(content, text[pos:i]))
                mk = m.group()
                if mk == START or mk == CHANNEL:
                    pos = i
                    self._between(pos)
                else:  # a marker outside any header or body is text
                    out.append(ChannelText(content, mk))
                    pos = m.end()
                    if mk in _TERMINATORS:
                        self._between(pos)
                continue
            # _HEADER: after <|start|> or <|channel|>, or a lost header (text after a message)
            m = _MARKER_RE.search(text, pos)
            if m is not None:
                limit = m.start()
            else:
                limit = n if final else n - self._hb.held(text, pos)
            hs = self._hdr_start
            if not _part_ok(text, self._part_start, limit, self._part, m is not None or final):
                if self._part == _LOST_ROLE and not _long_part(text, self._part_start, limit, self._part):
                    # not a lost header: stray text
                    self._state = _STRAY
                    pos = hs
                else:  # not a header: surfaced verbatim, the rest of its message too
                    out.append(ChannelText(content, text[hs:limit]))
                    self._state = _BAD_HEADER
                    pos = limit
                continue
            if m is None:
                if final:
                    if n > hs:  # a header (or role text) the output ended in
                        out.append(ChannelText(content, text[hs:n]))
                    self._between(n)
                    return out
                self._hold(text, hs, limit)
                return out
            self._record_part(text[self._part_start : limit])
            mk = m.group()
            pos = m.end()
            if mk == CHANNEL:
                self._start_part(_CHANNEL_PART, pos)
            elif mk == CONSTRAIN:
                self._start_part(_CONSTRAIN_PART, pos)
            elif mk == MESSAGE:
                self._open_message(out, text, base, pos)
            elif mk == START:
                # A header fragment that another header replaces before any <|message|> (its role
                # text, or everything after its own <|start|>) is protocol text, not a message: dropped.
                self._between(limit)
                self._start_part(_ROLE, pos)
            else:  # a terminator before <|message|>: not a message
                out.append(ChannelText(content, text[hs:pos]))
                self._between(pos)


ROUTERS: Mapping[str, RoutingMachineFactory] = {"openai": HarmonyRouter}
"""Routing machines by tool parser name: with this tool parser, calls are parsed by the router."""

REASONING_ROUTERS: Mapping[str, RoutingMachineFactory] = {"openai_gptoss": HarmonyRouter}
"""Routing machines by reasoning parser name (used when the tool parser has none)."""


def routing_machine(
    tool_parser: str | None, reasoning_parser: str | None
) -> tuple[RoutingMachineFactory | None, bool]:
    """The routing machine factory for the parsers in use, and whether it parses tool calls."""
    make = ROUTERS.get(tool_parser) if tool_parser is not None else None
    if make is not None:
        return make, True
    if reasoning_parser is not None:
        return REASONING_ROUTERS.get(reasoning_parser), False
    return None, False

