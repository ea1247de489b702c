"""Name filter and reindexer: only offered tools are called; indexes are dense from 0.

Stable-prefix guarantee: holds nothing. A call whose name was not offered
(when the request gave ``tools``) is never emitted: its raw text is surfaced
as text in the channel it was opened from (nothing is silently lost).
Accepted calls get indexes 0, 1, 2, ... in order, and an id: the one the
model wrote (unless an earlier call of the response already had it), else
a new ``call_...`` id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from os import urandom as _urandom

from ..items import CallDelta, ChannelText, ToolDelta

__all__ = ("NameFilter", "new_call_id")


def new_call_id() -> str:
    """Return a fresh OpenAI-style call id (``call_`` and 24 hex digits: 96 random bits)."""
    return "call_" + _urandom(12).hex()


class NameFilter:
    """Drops calls to tools not offered and reindexes the rest.

    Args:
        allowed: the offered tool names, or None to accept every name.
        id_factory: makes ids for calls whose id the model did not write.
    """

    name = "name_filter"
    __slots__ = ("_allowed", "_id_factory", "_live", "_index", "_rejected", "_ids", "accepted", "diagnostics")

    def __init__(self, allowed: Iterable[str] | None = None, id_factory: Callable[[], str] = new_call_id) -> None:
        self._allowed = None if allowed is None else frozenset(allowed)
        self._id_factory = id_factory
        self._live = -1
        self._index = -1
        self._rejected = -1
        self._ids: set[str] = set()  # ids given out, so a model-written id is never sent twice
        self.accepted = 0
        # (event, fields) pairs for the shell to log; None: not collected.
        self.diagnostics: list[tuple[str, dict[str, object]]] | None = None

    def feed(self, item: object) -> list[object]:
        """Filter one item."""
        if item.__class__ is not ToolDelta:
            return [item]
        assert isinstance(item, ToolDelta)
        if item.name is not None:
            if self._allowed is not None and item.name not in self._allowed:
                self._rejected = item.call
                if self.diagnostics is not None:
                    self.diagnostics.append(
                        ("tool_call_dropped", {"name": item.name, "reason": "not offered", "chars": len(item.raw)})
                    )
                return [ChannelText(item.channel, item.raw)] if item.raw else []
            self._live = item.call
            self._index = self.accepted
            self.accepted += 1
            call_id = item.id if item.id and item.id not in self._ids else self._id_factory()
            self._ids.add(call_id)
            return [CallDelta(index=self._index, id=call_id, name=item.name, args=item.args)]
        if item.call == self._live:
            return [CallDelta(index=self._index, args=item.args)] if item.args else []
        if item.call == self._rejected and item.raw:
            return [ChannelText(item.channel, item.raw)]
        return []

    def finish(self) -> list[object]:
        """Nothing is held."""
        return []
