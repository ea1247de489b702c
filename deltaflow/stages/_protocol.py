"""The one protocol every stage follows."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ("Stage",)


@runtime_checkable
class Stage(Protocol):
    """A synchronous, per-response transducer.

    ``feed(item)`` returns the items that are now stable (possibly none, or
    several); ``finish()`` is called once when the input ended and returns
    everything still held. A stage owns its state and its one buffer.
    """

    name: str

    def feed(self, item: Any) -> list[Any]: ...

    def finish(self) -> list[Any]: ...
