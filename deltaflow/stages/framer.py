"""Framer (this layer: items -> :class:`~deltaflow.messages.DeltaMessage`).

Adjacent items of one batch that belong together are merged into one delta
(text of the same channel; fragments of the same call), keeping the model's
real channel order: reasoning -> tool call -> reasoning stay three deltas.
"""

from __future__ import annotations

from ..items import CallDelta, Channel, ChannelText
from ..messages import DeltaFunctionCall, DeltaMessage, DeltaToolCall

__all__ = ("DeltaFramer",)


class DeltaFramer:
    """Turns a batch of items into deltas (see the module docstring)."""

    name = "framer"

    def __init__(self) -> None:
        self.calls_emitted = 0

    def feed(self, item: object) -> list[DeltaMessage]:
        return self.frame([item])

    def finish(self) -> list[DeltaMessage]:
        return []

    def frame(self, items: list[object]) -> list[DeltaMessage]:
        """Merge and convert one batch of items."""
        out: list[DeltaMessage] = []
        i = 0
        n = len(items)
        while i < n:
            it = items[i]
            if it.__class__ is ChannelText:
                assert isinstance(it, ChannelText)
                ch = it.channel
                j = i + 1
                while j < n and items[j].__class__ is ChannelText and items[j].channel is ch:  # type: ignore[attr-defined]
                    j += 1
                text = it.text if j == i + 1 else "".join(x.text for x in items[i:j])  # type: ignore[attr-defined]
                if text:
                    if ch is Channel.CONTENT:
                        out.append(DeltaMessage(content=text))
                    else:
                        out.append(DeltaMessage(reasoning_content=text))
                i = j
                continue
            if it.__class__ is CallDelta:
                assert isinstance(it, CallDelta)
                idx = it.index
                j = i + 1
                while (
                    j < n
                    and items[j].__class__ is CallDelta
                    and items[j].index == idx  # type: ignore[attr-defined]
                    and items[j].name is None  # type: ignore[attr-defined]
                ):
                    j += 1
                args = it.args if j == i + 1 else "".join(x.args for x in items[i:j])  # type: ignore[attr-defined]
                if it.name is not None:
                    self.calls_emitted += 1
                    tc = DeltaToolCall(
                        index=idx,
                        id=it.id,
                        type="function",
                        function=DeltaFunctionCall(name=it.name, arguments=args or None),
                    )
                else:
                    tc = DeltaToolCall(index=idx, function=DeltaFunctionCall(arguments=args))
                out.append(DeltaMessage(tool_calls=[tc]))
                i = j
                continue
            raise TypeError(f"the framer cannot frame a {type(it).__name__}")
        return out
