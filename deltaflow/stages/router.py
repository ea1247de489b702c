"""Channel router: engine-level channels before reasoning and tool parsing.

For the dialects registered so far every channel decision is made by the
reasoning splitter and the tool block feeder, so this stage forwards items
unchanged and holds nothing. Dialects whose engine frames channels itself
(gpt-oss Harmony headers) plug their routing in here.
"""

from __future__ import annotations

__all__ = ("ChannelRouter",)


class ChannelRouter:
    """Forwards items unchanged (see the module docstring)."""

    name = "router"

    def feed(self, item: object) -> list[object]:
        """Forward one item."""
        return [item]

    def finish(self) -> list[object]:
        """Nothing is held."""
        return []
