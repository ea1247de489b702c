"""A fused chain of synchronous stages: the unit both the sync parser and the async runner run.

Every rule lives in the stages; this module only moves items between them,
in order, and names the stage when one raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import StageError, StateError
from ..stages._protocol import Stage

__all__ = ("SyncChain",)


class SyncChain:
    """Runs items through synchronous stages in order (adjacent stages fused, no I/O).

    A chain whose stage raised refuses further input (:class:`StateError`).
    """

    __slots__ = ("stages", "_feeds", "_broken", "_finished")

    def __init__(self, stages: Sequence[Stage]) -> None:
        self.stages = tuple(stages)
        self._feeds = tuple(st.feed for st in self.stages)
        self._broken = False
        self._finished = False

    def _check(self) -> None:
        if self._broken:
            raise StateError("a stage of this chain raised earlier; it accepts no more input")
        if self._finished:
            raise StateError("this chain already finished")

    def run(self, items: list[Any]) -> list[Any]:
        """Feed a batch of items through every stage; return the last stage's outputs."""
        if self._broken or self._finished:
            self._check()
        feeds = self._feeds
        try:
            for feed in feeds:
                if len(items) == 1:  # the common case first: one item in, through every stage
                    items = feed(items[0])
                elif not items:
                    return items
                else:
                    nxt: list[Any] = []
                    for it in items:
                        nxt.extend(feed(it))
                    items = nxt
        except Exception as exc:
            self._broken = True
            # The stage whose feed raised (found by identity: each bound method is its own object).
            st = self.stages[next(k for k, f in enumerate(feeds) if f is feed)]
            raise StageError(st.name, f"stage {st.name!r} failed: {exc!r}") from exc
        return items

    def finish(self, items: list[Any] | None = None) -> list[Any]:
        """Feed the last batch, then finish every stage in order; return the remaining outputs."""
        self._check()
        self._finished = True
        items = list(items or ())
        for st in self.stages:
            try:
                nxt: list[Any] = []
                for it in items:
                    nxt.extend(st.feed(it))
                nxt.extend(st.finish())
            except Exception as exc:
                self._broken = True
                raise StageError(st.name, f"stage {st.name!r} failed: {exc!r}") from exc
            items = nxt
        return items
