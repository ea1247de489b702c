"""Sinks: where a stream of deltas goes (collectors now; SSE and WebSocket framing come with the wire protocols)."""

from ..pipeline.sync import accumulate as collect

__all__ = ("collect",)
