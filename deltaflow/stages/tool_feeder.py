"""Tool block feeder: finds tool blocks in either channel and feeds the dialect's tool parser.

Stable-prefix guarantee: outside a block, text is released at once except a
chunk tail that could begin an opener, and whitespace right after a block
(held until it is known whether another block follows). Inside a block the
parser decides (see :class:`~deltaflow.parsers.spec.ToolDriver`); this stage
holds only the short tail the parser did not consume.

Rules:

* An opener starts a block in the content and in the reasoning channel; the
  block's events carry the channel it was opened from, and text after the
  block continues in the channel the splitter says.
* A channel change inside a block (the end of reasoning while a block
  opened there is still open) ends the block there, as the end of the
  output would: the end marker ends the reasoning wherever it stands, and
  a block never spans two channels, on every chunking.
* What a block opened inside reasoning is depends on ``in_reasoning``
  (:data:`TOOL_CALLS_IN_REASONING`): ``"never"`` leaves reasoning alone (a
  block there is reasoning text, as vLLM and SGLang read it); ``"always"``
  makes a block there a call at once, streamed as soon as it is stable, the
  reasoning going on after it (LMDeploy's design: reasoning -> tool call ->
  reasoning, in the model's order); ``"trailing"`` (the default) is the rule
  that follows.
* With ``"trailing"``, a block opened inside reasoning is tentative. It is a call when the output
  ends after it with nothing but blanks and further blocks (a model that
  calls a tool before closing its thinking stops there to wait for the
  result). When more text follows instead (reasoning, the end of reasoning,
  or content), the model was only thinking about a call: the whole group of
  blocks is reasoning text, verbatim, and its call numbers are reused. Until
  that is known the group's events and raw text are held, but at most
  :data:`THOUGHT_GROUP_MAX` characters of it: a longer group is a call (an
  example sketched in thought is short, and a long call must stream). The
  decision depends only on the text, so it is the same on every chunking.
* Whitespace between two blocks is swallowed (it becomes raw text of the
  next call) only when another block follows; otherwise it stays text.
* A start opener (Llama 3's bare ``{``) opens a block only where nothing but
  whitespace came before in that channel.
* A dialect's framing tokens (Command R7B's response wrapper) are dropped
  wherever they appear outside a block.
* After a dialect's restart marker (xLAM's ``</think>``), which stays text,
  a start opener opens a block again as at the start of the channel.
* Call numbers are response-wide and sequential.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from .._core.holdback import MarkerHoldback
from .._core.text import skip_json_ws, trailing_run
from .._core.toolspec import ToolSpec
from ..errors import StateError
from ..items import Channel, ChannelText
from ..parsers.base import BLANK_RUN_MAX
from ..parsers.spec import DriverContext, ToolDialect, ToolDriver, all_prefixes

__all__ = ("THOUGHT_GROUP_MAX", "TOOL_CALLS_IN_REASONING", "ToolBlockFeeder", "check_tool_calls_in_reasoning")

TOOL_CALLS_IN_REASONING = ("trailing", "always", "never")
"""The policies for tool blocks inside reasoning (see the module docstring); the first is the default."""


def check_tool_calls_in_reasoning(value: object) -> str:
    """Return ``value`` if it is one of :data:`TOOL_CALLS_IN_REASONING`.

    Raises:
        ValueError: it is not; the message names the option and the accepted values.
    """
    if value not in TOOL_CALLS_IN_REASONING:
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        raise ValueError(
            f"tool_calls_in_reasoning must be one of {', '.join(map(repr, TOOL_CALLS_IN_REASONING))}, got {shown}"
        )
    assert isinstance(value, str)
    return value

THOUGHT_GROUP_MAX = 4096
"""Characters of tentative blocks inside reasoning held before they are taken as calls."""



def _marker_at(markers: tuple[str, ...], text: str, pos: int) -> int:
    """The length of the first of ``markers`` that starts at ``pos`` (0: none)."""
    for m in markers:
        if text.startswith(m, pos):
            return len(m)
    return 0


class ToolBlockFeeder:
    """Routes text around tool blocks and feeds the blocks to the dialect's parser.

    Args:
        dialect: the tool dialect.
        tools: the offered tools by name (for parsers that convert by schema).
        chunking: ``"any"`` or ``"tokens"``.
        in_reasoning: what a block inside reasoning is, one of
            :data:`TOOL_CALLS_IN_REASONING` (``"trailing"``, ``"always"``,
            ``"never"``; see the module docstring).

    Raises:
        ValueError: an unknown ``in_reasoning``.
    """

    __slots__ = (
        "_dialect", "_tools", "_opener", "_passthrough", "_open_re", "_hb", "_start_openers", "_started", "_parser",
        "_buf", "_buf_channel", "_after_block", "_block_channel", "_calls", "_finished",
        "_pending", "_pending_raw", "_pending_calls", "_pending_size", "_framing", "_lead_blanks",
        "_restart", "_long_blank", "_tentative", "_reasoning_is_text", "_open_first",
    )

    name = "tools"

    def __init__(
        self,
        dialect: ToolDialect,
        *,
        tools: Mapping[str, ToolSpec] | None = None,
        chunking: str = "any",
        in_reasoning: str = "trailing",
    ) -> None:
        check_tool_calls_in_reasoning(in_reasoning)
        self._tentative = in_reasoning == "trailing"  # blocks inside reasoning wait for the output's end
        self._reasoning_is_text = in_reasoning == "never"  # no block opens inside reasoning
        self._dialect = dialect
        self._tools = tools
        request_openers = dialect.openers_for(tools) if dialect.openers_for is not None else ()
        self._framing = dialect.framing
        self._lead_blanks = dialect.lead_blanks
        self._restart = dialect.restart_after
        # The channel whose text ended in a blank run already released as too long to be framing
        # (blanks that continue it are text too, on every chunking).
        self._long_blank: Channel | None = None
        # Framing tokens and restart markers are found like openers, then dropped or passed on as text.
        openers = (*dialect.openers, *request_openers, *dialect.framing, *dialect.restart_after)
        self._opener = openers[0] if len(openers) == 1 else None
        # A dialect without text openers (e.g. one routed by the channel router) passes text through.
        self._passthrough = not openers and not dialect.start_openers
        self._open_re = re.compile("|".join(re.escape(o) for o in openers) or r"(?!)")
        # The one first character every opener shares ("" when they do not): text outside a block
        # without it holds no opener and no opener's start (see feed).
        firsts = {o[0] for o in openers if o}
        self._open_first = firsts.pop() if len(firsts) == 1 and all(openers) else ""
        # Request-defined openers are plain text: any prefix of them can end a token.
        self._hb = MarkerHoldback(openers, (*dialect.token_prefixes, *all_prefixes(*request_openers)), chunking)
        self._start_openers = dialect.start_openers
        self._started: set[Channel] = set()
        self._parser: ToolDriver | None = None
        self._buf = ""
        self._buf_channel = Channel.CONTENT
        self._after_block = False
        self._block_channel = Channel.CONTENT
        self._calls = 0
        self._finished = False
        # A group of tentative blocks inside reasoning: their events, their raw text, and the
        # call counter before them (None: no group).
        self._pending: list[object] | None = None
        self._pending_raw: list[str] = []
        self._pending_calls = 0
        self._pending_size = 0

    def _new_call(self) -> int:
        n = self._calls
        self._calls += 1
        return n

    @property
    def calls(self) -> int:
        """How many calls the parsers started so far (accepted or not)."""
        return self._calls

    def feed(self, item: object) -> list[object]:
        """Route one item; items other than :class:`ChannelText` pass through."""
        if item.__class__ is not ChannelText or self._passthrough:
            return [item]
        assert isinstance(item, ChannelText)
        out: list[object] = []
        text = item.text
        ch = item.channel
        parser = self._parser
        if (
            parser is None
            and not self._buf
            and self._open_first
            and self._open_first not in text
            and self._pending is None
            and not self._after_block
            and not self._lead_blanks
            and (not self._start_openers or ch in self._started)
        ):
            # Outside a block, nothing held or pending: no opener can start in this text, so it is
            # all text, as _process would find with a search and an empty hold-back.
            self._buf_channel = ch
            return [ChannelText(ch, text)] if text else []
        if parser is not None and ch is self._buf_channel and not self._buf and self._pending is None:
            # Inside a block, in its channel, nothing held: every check below is moot, and the
            # text goes straight to the parser (the steady state of a long argument).
            end = parser.feed_tool_block(text, out, False, 0)
            if not parser.done:
                if end < len(text):
                    self._hold(text[end:], ch)
                return out
            self._parser = None
            self._after_block = True  # a block ends in its own channel (a channel change ends it first)
            self._process(text, ch, out, False, end)
            return out
        if self._parser is not None and ch is not self._buf_channel:
            # The channel changed inside a block (the splitter consumed a marker there): the block's
            # text ended, so the block ends in its own channel as at the end of the output.
            held, self._buf = self._buf, ""
            self._process(held, self._buf_channel, out, True)
        if self._after_block and self._parser is None and ch is not self._block_channel:
            # A channel change (the splitter consumed a marker) separates two blocks.
            if self._buf:
                self._release_held(out)
            self._after_block = False
        if self._buf:
            if self._parser is None and self._buf_channel is not ch:
                self._release_held(out)
            else:
                text = self._buf + text
                self._buf = ""
        if self._pending is not None and self._parser is None and ch is not Channel.REASONING:
            self._settle(out, real=False)  # reasoning ended after tentative blocks: they were thought
        if self._reasoning_is_text and ch is Channel.REASONING and self._parser is None:
            if text:
                out.append(ChannelText(ch, text))  # "never": reasoning is passed on as it is
            return out
        self._process(text, ch, out, False)
        return out

    def finish(self) -> list[object]:
        """The input ended: end an open block and release held text."""
        if self._finished:
            raise StateError("ToolBlockFeeder.finish() called twice")
        self._finished = True
        out: list[object] = []
        text, self._buf = self._buf, ""
        if self._parser is not None or text:
            self._process(text, self._buf_channel, out, True)
        if self._pending is not None:
            self._settle(out, real=True)  # only blanks and blocks came after them: they are calls
        return out

    def _release_held(self, out: list[object]) -> None:
        self._text(out, self._buf_channel, self._buf)
        self._buf = ""
        self._after_block = False

    def _text(self, out: list[object], ch: Channel, text: str) -> None:
        """Emit text from outside any block (settling a pending group first when it decides it)."""
        pending = self._pending
        if pending is not None:
            if ch is Channel.REASONING and skip_json_ws(text, 0) >= len(text):
                # Blanks between or after tentative blocks belong to the group.
                pending.append(ChannelText(ch, text))
                self._pending_raw.append(text)
                self._pending_size += len(text)
                if self._pending_size > THOUGHT_GROUP_MAX:
                    self._settle(out, real=True)
                return
            self._settle(out, real=False)
        out.append(ChannelText(ch, text))

    def _settle(self, out: list[object], *, real: bool) -> None:
        """Decide a pending group: its calls, or its raw text as reasoning (call numbers reused)."""
        pending = self._pending
        assert pending is not None
        self._pending = None
        if real:
            out.extend(pending)
        else:
            self._calls = self._pending_calls
            out.append(ChannelText(Channel.REASONING, "".join(self._pending_raw)))
        self._pending_raw = []
        self._pending_size = 0

    def _hold(self, text: str, ch: Channel) -> None:
        # Only ever called with the channel of the text being processed.
        self._buf = text
        self._buf_channel = ch

    def _start(self, ch: Channel) -> None:
        self._block_channel = ch
        self._long_blank = None
        if ch is Channel.REASONING and self._pending is None and self._tentative:
            self._pending = []
            self._pending_calls = self._calls
        self._parser = self._dialect.factory(
            DriverContext(channel=ch, new_call=self._new_call, tools=self._tools, dialect=self._dialect.name)
        )

    def _find(self, text: str, pos: int) -> int:
        if self._opener is not None:
            return text.find(self._opener, pos)
        m = self._open_re.search(text, pos)
        return m.start() if m else -1

    def _blank_run_start(self, text: str, pos: int, end: int, ch: Channel) -> int:
        """Where the blanks that end ``text[pos:end]`` and may frame an opener begin (``end``: none).

        A run longer than ``BLANK_RUN_MAX`` is text, and so are blanks that continue a run released
        earlier for being too long: the answer depends on the run's length alone, not on the chunking.
        """
        start, long = trailing_run(text, pos, end, " \t\r\n", BLANK_RUN_MAX, self._long_blank is ch)
        if long is not None:
            self._long_blank = ch if long else None
        return start

    def _framing_at(self, text: str, pos: int) -> int:
        """The length of the framing token at ``pos`` (0: none)."""
        return _marker_at(self._framing, text, pos)

    def _restart_at(self, text: str, pos: int) -> int:
        """The length of the restart marker at ``pos`` (0: none)."""
        return _marker_at(self._restart, text, pos)

    def _opens_at(self, text: str, pos: int) -> bool:
        """Whether an opener (not a framing token or restart marker) starts at ``pos``."""
        return (
            self._open_re.match(text, pos) is not None
            and not self._framing_at(text, pos)
            and not self._restart_at(text, pos)
        )

    def _started_at(self, text: str, pos: int) -> bool:
        return any(text.startswith(o, pos) for o in self._start_openers)  # "" opens anywhere (recipient lines)

    def _process(self, text: str, ch: Channel, out: list[object], final: bool, pos: int = 0) -> None:
        self._buf_channel = ch  # the channel of the text being processed (and of what gets held)
        n = len(text)
        while True:
            parser = self._parser
            if parser is not None:
                pending = self._pending
                if pending is not None and self._block_channel is Channel.REASONING:
                    end = parser.feed_tool_block(text, pending, final, pos)
                    if end > pos:
                        self._pending_raw.append(text[pos:end])
                        self._pending_size += end - pos
                        if self._pending_size > THOUGHT_GROUP_MAX:
                            self._settle(out, real=True)  # too long to be a sketch: a call, streamed from here
                else:
                    end = parser.feed_tool_block(text, out, final, pos)
                if not parser.done:
                    if end < n:
                        self._hold(text[end:], ch)
                    return
                self._parser = None
                pos = end
                # Whitespace right after a block may be swallowed. The block ended in its own channel:
                # a channel change inside it ends it first (see feed).
                self._after_block = True
            if pos >= n:
                return
            if self._after_block:
                ws_end = skip_json_ws(text, pos)
                # A run longer than BLANK_RUN_MAX is text after the block, not the gap to the next
                # one: decided on its length alone (the same on every chunking), so the hold is bounded.
                long_run = ws_end - pos > BLANK_RUN_MAX
                if not long_run:
                    if ws_end >= n and not final:
                        self._hold(text[pos:], ch)
                        return
                    if ws_end < n and (
                        self._opens_at(text, ws_end)
                        or (self._start_openers and ch not in self._started and self._started_at(text, ws_end))
                    ):
                        self._start(ch)  # the whitespace becomes raw text of the next call
                        continue
                if (
                    not long_run
                    and not final
                    and ws_end < n
                    and n - ws_end <= self._hb.longest
                    and self._hb.holds(text[ws_end:])
                ):
                    self._hold(text[pos:], ch)
                    return
                self._after_block = False
            if self._start_openers and ch not in self._started:
                ws_end = skip_json_ws(text, pos)
                if ws_end < n:
                    if self._started_at(text, ws_end):
                        if self._lead_blanks and self._blank_run_start(text, pos, ws_end, ch) == pos:
                            ws_end = pos  # the blanks are raw text of the call
                        if ws_end > pos:
                            self._text(out, ch, text[pos:ws_end])
                        pos = ws_end
                        self._start(ch)
                        continue
            i = self._find(text, pos)
            if i >= 0:
                restart = self._restart_at(text, i)
                if restart:
                    self._text(out, ch, text[pos : i + restart])
                    self._started.discard(ch)  # a start opener may open a block again
                    pos = i + restart
                    continue
                framing = self._framing_at(text, i)
                j = i if framing or not self._lead_blanks else self._blank_run_start(text, pos, i, ch)
                if j > pos:
                    self._text(out, ch, text[pos:j])
                    if self._start_openers and ch not in self._started and skip_json_ws(text, pos) < j:
                        self._started.add(ch)
                if framing:
                    pos = i + framing  # dropped
                    continue
                pos = j  # blanks before the opener (lead_blanks) are raw text of the call
                self._start(ch)
                continue
            k = 0 if final else self._hb.held(text, pos)
            if self._lead_blanks and not final:
                k = n - self._blank_run_start(text, pos, n - k, ch)  # blanks may still lead into an opener
            if n - k > pos:
                self._text(out, ch, text[pos : n - k] if (pos or k) else text)
                # Anything but JSON whitespace is real text (the same rule as the bare-opener check).
                if self._start_openers and ch not in self._started and skip_json_ws(text, pos) < n - k:
                    self._started.add(ch)  # real text: a bare start opener no longer opens a block here
            if k:
                self._hold(text[n - k :], ch)
            return
