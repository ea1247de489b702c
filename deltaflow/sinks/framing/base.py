"""The framer protocol and the wire event shape."""

from __future__ import annotations

import time
import uuid
from typing import Any, Protocol

import msgspec

from ...messages import DeltaMessage
from ...stages.framer import Usage

__all__ = ("Framer", "WireEvent", "new_id", "now")


class WireEvent(msgspec.Struct, frozen=True):
    """One protocol event: its SSE ``event:`` name (None for OpenAI Chat Completions) and payload."""

    event: str | None
    data: Any


class Framer(Protocol):
    """Frames one response for one wire protocol."""

    def start(self) -> list[WireEvent]:
        """Events that open the response."""
        ...

    def feed(self, delta: DeltaMessage) -> list[WireEvent]:
        """Events for one delta."""
        ...

    def finish(self, usage: Usage | None = None) -> list[WireEvent]:
        """Events that close the response (after the last delta)."""
        ...

    def error(self, exc: BaseException) -> list[WireEvent]:
        """The protocol's error event for a failure mid-stream."""
        ...


def new_id(prefix: str) -> str:
    """A fresh id such as ``chatcmpl-...`` or ``msg_...``."""
    return prefix + uuid.uuid4().hex[:24]


def now() -> int:
    """Seconds since the epoch."""
    return int(time.time())


def error_message(exc: BaseException) -> str:
    """A client-safe one-line description of a failure."""
    cause = exc.__cause__
    text = str(exc) or type(exc).__name__
    if cause is not None and str(cause) and str(cause) not in text:
        text += f": {cause}"
    return text
