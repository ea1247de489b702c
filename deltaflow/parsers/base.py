"""A base class for tool parsers: call numbering and raw-text attribution.

Every :class:`~deltaflow.items.ToolDelta` carries the raw model text it
accounts for, so that later stages can surface a rejected or malformed call
as text. The rule this base enforces: *what is attributed where must not
depend on where chunks ended*. Text consumed since the last structural
commit point is kept as *uncommitted*; it becomes raw text of the call at
the next :meth:`emit`, or is surfaced by :meth:`abort` if the block breaks.
Never attribute text at a chunk end (use :meth:`hold` there).

A subclass implements :meth:`feed_tool_block` (the contract is
:class:`~deltaflow.parsers.spec.ToolDriver`): call :meth:`begin` first,
consume from ``start``, :meth:`emit` events at structural points,
:meth:`hold` at the end of the call, :meth:`finish_block` when the block is
over, :meth:`abort` when it cannot go on.

Insignificant whitespace inside a named call (between arguments or
parameters) is uncommitted like any other text, but a run of it longer than
:data:`BLANK_RUN_MAX` characters is attributed to the current call as it is
read (:meth:`blank_run`), so a parser holds at most that much of it. The rule
depends only on the run's length, counted across chunks: on every chunking
the text through the end of such a run is raw text of the same call, and
only the number of events it is split into differs.
"""

from __future__ import annotations

from ..items import ChannelText, ToolDelta
from .spec import DriverContext

__all__ = ("BLANK_RUN_MAX", "DriverBase")

BLANK_RUN_MAX = 256
"""A longer run of whitespace inside a named call is attributed to the call as it is read."""


class DriverBase:
    """Shared machinery of tool parsers (see the module docstring).

    Attributes:
        done: the block is over; the caller takes the text after it.
        named: the current call's name was emitted.
        committed: the current call's argument payload began after its name
            (an argument fragment or its end was emitted): the identity stage
            releases it. A call named but not committed that the input cuts
            short or that breaks is surfaced whole, so drivers end it with
            :meth:`abort` (see :meth:`end_or_abort`).
    """

    __slots__ = (
        "done", "named", "committed", "ctx", "call", "_text", "_raw_from", "_uncommitted", "_feed_start",
        "_blank_run", "_blank_end",
    )

    def __init__(self, ctx: DriverContext) -> None:
        self.done = False
        self.named = False
        self.committed = False
        self.ctx = ctx
        self.call = -1
        self._text = ""
        self._raw_from = 0
        self._uncommitted: list[str] = []
        self._feed_start = 0
        self._blank_run = 0  # length of the whitespace run that ended the previous feed
        self._blank_end = -1  # where the last blank run of this feed ended

    # -- to override ------------------------------------------------------------
    def feed_tool_block(self, text: str, out: list[object], final: bool, start: int = 0) -> int:
        """Consume ``text[start:]``; see :class:`~deltaflow.parsers.spec.ToolDriver`.

        The default runs the machine (:meth:`_run`) and, while the block is not done, holds the
        unconsumed tail; a parser whose end of input needs more (cut scalars, sections) overrides it.
        """
        self.begin(text, start)
        pos = self._run(text, start, out, final)
        if not self.done:
            self.hold(pos)
        self._text = ""
        return pos

    def _run(self, text: str, pos: int, out: list[object], final: bool) -> int:
        """The dialect's machine: consume from ``pos``, append events to ``out``, return where it stopped."""
        raise NotImplementedError

    # -- helpers ------------------------------------------------------------------
    def begin(self, text: str, start: int) -> None:
        """Start a feed call over ``text`` from ``start``."""
        self._text = text
        self._raw_from = start
        self._feed_start = start
        self._blank_end = -1

    def new_call(self) -> int:
        """Start the next call of this block; returns its response-wide number."""
        self.call = self.ctx.new_call()
        self.named = False
        self.committed = False
        return self.call

    def emit(
        self,
        out: list[object],
        pos: int,
        *,
        name: str | None = None,
        id: str | None = None,
        args: str = "",
        end: bool = False,
    ) -> None:
        """Emit an event for the current call; its raw text is everything uncommitted up to ``pos``."""
        raw = self._take(pos)
        if name is not None:
            self.named = True
            self.committed = end
        elif self.named and (args or end):
            self.committed = True
        out.append(ToolDelta(call=self.call, channel=self.ctx.channel, name=name, id=id, args=args, raw=raw, end=end))

    def emit_args(self, out: list[object], args: str) -> None:
        """Emit an arguments fragment whose raw text was attributed already (or is ``args`` itself)."""
        if self.named and args:
            self.committed = True
        out.append(ToolDelta(call=self.call, channel=self.ctx.channel, args=args))

    def blank_run(self, out: list[object], pos: int, end: int) -> None:
        """Whitespace ``text[pos:end]`` was skipped; a run over :data:`BLANK_RUN_MAX` is attributed now.

        Call it after every skip of whitespace inside a named call (and at
        least whenever ``pos`` is the feed's start, where a run may continue
        the previous feed's). A run that ends the feed continues in the next
        one (the caller re-feeds from the position returned).
        """
        run = end - pos
        if pos == self._feed_start:
            run += self._blank_run
        self._blank_run = run
        self._blank_end = end
        if run > BLANK_RUN_MAX and self.named and (self._uncommitted or end > self._raw_from):
            self.emit(out, end)

    def hold(self, pos: int) -> None:
        """Keep the text consumed up to ``pos`` as uncommitted (call at the end of a feed)."""
        if pos != self._blank_end:
            self._blank_run = 0  # the feed did not end inside a whitespace run
        if pos > self._raw_from:
            self._uncommitted.append(self._text[self._raw_from : pos])
            self._raw_from = pos

    def abort(self, out: list[object], pos: int, *, close_args: str | None = None) -> int:
        """End the block at ``pos``: complete a committed call, surface the uncommitted text.

        A call that was named but not committed yet (its payload never began)
        is surfaced whole by the identity stage; ``close_args`` is then ignored.

        Args:
            out: the event list.
            pos: where the block stops; the caller gets ``text[pos:]`` back as text.
            close_args: for a named call, the text that closes its arguments
                (``"{}"`` when none were emitted, a closer otherwise).

        Returns:
            ``pos``, with ``done`` set.
        """
        close = self.named and close_args is not None
        closer = close_args if close_args is not None and self.named else ""
        raw = self._take(pos)
        if raw or close or not self.named:
            # One event: the closer of a committed call's arguments, then its raw text as text (the
            # identity stage surfaces everything of a call that was never committed, closer ignored).
            out.append(
                ToolDelta(
                    call=self.call, channel=self.ctx.channel, args=closer, raw=raw, end=close,
                    abort=True,
                )
            )
        return self.finish_block(pos)

    def end_or_abort(self, out: list[object], pos: int, close_args: str) -> int:
        """The input ended inside the current call at ``pos``: end it there, or abort it if never committed.

        A committed call is ended (``close_args`` closes what its arguments
        opened; the raw text up to ``pos`` is its own); a call named but not
        committed is no call, and is surfaced whole.
        """
        if self.named and not self.committed:
            return self.abort(out, pos)
        self.emit(out, pos, args=close_args, end=True)
        return self.finish_block(pos)

    def surface(self, out: list[object], pos: int) -> None:
        """Surface the uncommitted text up to ``pos`` as text now; the block goes on (an unnamed call only)."""
        raw = self._take(pos)
        if raw:
            out.append(ToolDelta(call=self.call, channel=self.ctx.channel, raw=raw, abort=True))

    def flush_source(
        self, out: list[object], pending: list[str], text: str, start: int, safe: int, consumed: int
    ) -> int:
        """Emit a streamed JSON value's source text as arguments up to ``safe``; keep the rest pending.

        ``pending`` holds source text consumed before ``start`` that was not
        safe yet; it is emitted first. ``text[safe:consumed]`` (past the
        scanner's last safe position) is appended to ``pending`` for a later
        feed, so what is emitted never depends on where chunks ended. Nothing
        is emitted while ``safe < start``.

        Returns:
            where the next fragment of ``text`` starts.
        """
        ef = start
        if safe >= start:
            frag = "".join(pending) + text[start:safe]
            pending.clear()
            if frag:
                self.emit(out, safe, args=frag)
            ef = safe
        if consumed > ef:
            pending.append(text[ef:consumed])
            return consumed
        return ef

    def pass_text(self, out: list[object], pos: int) -> None:
        """Pass the uncommitted text up to ``pos`` on as plain text of the channel: no call, and no broken one."""
        text = self._take(pos)
        if text:
            out.append(ChannelText(self.ctx.channel, text))

    def drop(self, pos: int) -> None:
        """Consume the uncommitted text up to ``pos`` as framing of no call: it is attributed to nothing.

        Only for markers a dialect declares as framing (e.g. a recipient line);
        everything else the model wrote is emitted or surfaced.
        """
        self._take(pos)

    def finish_block(self, pos: int) -> int:
        """Mark the block over at ``pos``; returns ``pos``."""
        self.done = True
        return pos

    def _take(self, pos: int) -> str:
        text = self._text
        raw = text[self._raw_from : pos] if pos > self._raw_from else ""
        if self._uncommitted:
            raw = "".join(self._uncommitted) + raw
            self._uncommitted = []
        if pos > self._raw_from:
            self._raw_from = pos
        return raw
