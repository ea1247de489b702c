"""Collectors: a stream of deltas back into the complete message."""

from __future__ import annotations

from collections.abc import AsyncIterable

from ..messages import ChatMessage, DeltaMessage
from ..pipeline.sync import accumulate

__all__ = ("collect", "collect_async")

collect = accumulate


async def collect_async(deltas: AsyncIterable[DeltaMessage]) -> ChatMessage:
    """Read a delta stream to its end and rebuild the message (the same result as ``parse_complete``)."""
    return accumulate([d async for d in deltas])
