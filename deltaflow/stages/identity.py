"""Identity-first buffer: the first event of every call names it.

Stable-prefix guarantee: events of a call are held only until its name is
known (argument fragments written before the name, e.g. Hermes 2 Pro's
``{"arguments": {...}, "name": "f"}``); they are then released, in order, as
one event that carries the name, the held arguments and all held raw text.
A call that ends or aborts without a name is surfaced as text (its raw text,
in the channel it was opened from). Calls are sequential, so at most one
call is held at a time.
"""

from __future__ import annotations

from ..errors import StateError
from ..items import ChannelText, ToolDelta

__all__ = ("IdentityFirstBuffer",)


class IdentityFirstBuffer:
    """Holds a call's events until its name is known (see the module docstring)."""

    name = "identity"
    __slots__ = ("_live", "_held", "_finished", "diagnostics")

    def __init__(self) -> None:
        self._live = -1  # the named call being streamed
        self._held: list[ToolDelta] = []  # events of the unnamed call
        self._finished = False
        # (event, fields) pairs for the shell to log; None: not collected.
        self.diagnostics: list[tuple[str, dict[str, object]]] | None = None

    def feed(self, item: object) -> list[object]:
        """Pass text through; order and hold tool events."""
        if item.__class__ is not ToolDelta:
            return [item]
        assert isinstance(item, ToolDelta)
        if item.call == self._live:
            if item.abort:
                if item.raw and self.diagnostics is not None:
                    self.diagnostics.append(
                        ("tool_block_malformed", {"reason": "unusable text after the name", "chars": len(item.raw)})
                    )
                return [ChannelText(item.channel, item.raw)] if item.raw else []
            return [item]
        held = self._held
        if held and held[0].call != item.call:  # pragma: no cover - parsers end calls in order
            released = self._surface()
            return released + self.feed(item)
        if item.name is not None:
            self._held = []
            self._live = item.call
            if not held:
                return [item]
            return [
                ToolDelta(
                    call=item.call,
                    channel=held[0].channel,
                    name=item.name,
                    id=item.id or next((h.id for h in held if h.id), None),
                    args="".join(h.args for h in held) + item.args,
                    raw="".join(h.raw for h in held) + item.raw,
                    end=item.end,
                )
            ]
        if item.abort or item.end:
            held.append(item)
            return self._surface()
        held.append(item)
        return []

    def _surface(self) -> list[object]:
        held, self._held = self._held, []
        raw = "".join(h.raw for h in held)
        if self.diagnostics is not None:
            self.diagnostics.append(("tool_block_malformed", {"reason": "no function name", "chars": len(raw)}))
        return [ChannelText(held[0].channel, raw)] if raw else []

    def finish(self) -> list[object]:
        """The input ended: surface an unnamed call's raw text."""
        if self._finished:
            raise StateError("IdentityFirstBuffer.finish() called twice")
        self._finished = True
        return self._surface() if self._held else []
