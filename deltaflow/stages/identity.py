"""Identity-first buffer: a call is emitted only once it is committed, and its first event names it.

A call is *committed* once its name is complete and its argument payload has
validly begun: the driver emitted an argument fragment or ended the call
after the name event (the ``{`` of a JSON arguments object, the first
literal of a pythonic call, the first parameter tag of an XML format, the
block's close for a call without arguments), or argument fragments came
before the name (Hermes 2 Pro's ``{"arguments": {...}, "name": "f"}``).
Argument text a driver writes together with the name (Gemma 4's synthetic
``{``) does not commit the call: it is not the model's payload.

Stable-prefix guarantee: the events of a call are held only until it is
committed (a few characters past the name for most formats), and at most
:data:`COMMIT_HOLD_MAX` characters of its raw text: a named call whose
payload has not begun by then is no call, and is surfaced as text (its later
events too). The bound reads only the text, so every chunking gives the same
answer. The held events are then
released, in order, as one event that carries the name, the held arguments
and all held raw text. A call that aborts or ends before it is committed,
named or not, is surfaced whole as text (its raw text, in the channel it was
opened from): an agent never sees ``get_weather({})`` for a payload the model
did not write. Calls are sequential, so at most one call is held at a time.

An ``abort`` event of a committed call may carry ``args``: they close its
arguments (the driver's last safe position) before its ``raw`` text is
surfaced.
"""

from __future__ import annotations

from ..errors import StateError
from ..items import ChannelText, ToolDelta

__all__ = ("COMMIT_HOLD_MAX", "IdentityFirstBuffer")

COMMIT_HOLD_MAX = 4096
"""Characters of a named call's raw text held while its argument payload has not begun."""


class IdentityFirstBuffer:
    """Holds a call's events until it is committed (see the module docstring)."""

    name = "identity"
    __slots__ = ("_live", "_dead", "_held", "_held_chars", "_named", "_finished", "diagnostics")

    def __init__(self) -> None:
        self._live = -1  # the committed call being streamed
        self._dead = -1  # the last named call surfaced as text (its later events are text at once)
        self._held: list[ToolDelta] = []  # events of the call not committed yet
        self._named = False  # the held call's name event is among them
        self._held_chars = 0  # raw characters held since the name event
        self._finished = False
        # (event, fields) pairs for the shell to log; None: not collected.
        self.diagnostics: list[tuple[str, dict[str, object]]] | None = None

    def feed(self, item: object) -> list[object]:
        """Pass text through; order and hold tool events."""
        if item.__class__ is not ToolDelta:
            return [item]
        assert isinstance(item, ToolDelta)
        if item.call == self._live:
            if not item.abort:
                return [item]
            out: list[object] = []
            if item.args or item.end:
                out.append(ToolDelta(call=item.call, channel=item.channel, args=item.args, end=True))
            if item.raw:
                if self.diagnostics is not None:
                    self.diagnostics.append(
                        ("tool_block_malformed", {"reason": "unusable text after the name", "chars": len(item.raw)})
                    )
                out.append(ChannelText(item.channel, item.raw))
            return out
        if item.call == self._dead:
            return [ChannelText(item.channel, item.raw)] if item.raw else []
        held = self._held
        if held and held[0].call != item.call:  # pragma: no cover - parsers end calls in order
            released = self._surface()
            return released + self.feed(item)
        held.append(item)
        if item.abort:
            return self._surface()
        if item.name is not None:
            self._named = True
            self._held_chars = len(item.raw)
            # Committed at once when it ends here or arguments came before the name.
            if item.end:
                return self._release()
            if len(held) > 1:  # (plain loops: this runs once per call, where a generator's setup shows)
                for h in held[:-1]:
                    if h.args:
                        return self._release()
            return []
        if self._named:
            if item.args or item.end:
                return self._release()
            self._held_chars += len(item.raw)
            if self._held_chars > COMMIT_HOLD_MAX:
                return self._surface()  # the payload did not begin within the bound: not a call
            return []
        return self._surface() if item.end else []

    def _release(self) -> list[object]:
        """The held call is committed: one event with its name, held arguments and raw text."""
        held, self._held = self._held, []
        self._named = False
        if len(held) == 1:
            item = held[0]
            self._live = item.call
            return [item]
        named: ToolDelta | None = None
        first_id: str | None = None
        args: list[str] = []
        raw: list[str] = []
        end = False
        for h in held:
            if named is None and h.name is not None:
                named = h
            if first_id is None and h.id:
                first_id = h.id
            args.append(h.args)
            raw.append(h.raw)
            end = end or h.end
        assert named is not None  # only a named call is released
        self._live = named.call
        return [
            ToolDelta(
                call=named.call,
                channel=held[0].channel,
                name=named.name,
                id=named.id or first_id,
                args="".join(args),
                raw="".join(raw),
                end=end,
            )
        ]

    def _surface(self) -> list[object]:
        held, self._held = self._held, []
        named, self._named = self._named, False
        if named:  # a named call never goes on (an unnamed one may: a driver surfaces text before its name)
            self._dead = held[0].call
        raw = "".join(h.raw for h in held)
        if self.diagnostics is not None:
            reason = "the arguments never began" if named else "no function name"
            self.diagnostics.append(("tool_block_malformed", {"reason": reason, "chars": len(raw)}))
        return [ChannelText(held[0].channel, raw)] if raw else []

    def finish(self) -> list[object]:
        """The input ended: surface an uncommitted call's raw text."""
        if self._finished:
            raise StateError("IdentityFirstBuffer.finish() called twice")
        self._finished = True
        return self._surface() if self._held else []
