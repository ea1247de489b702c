"""The conformance vectors of ``../shared/corpus`` the registered parsers cover (read at test time, never copied)."""

from __future__ import annotations

from typing import Any

from deltaflow.parsers import registry
from deltaflow.testing import corpus_vectors, vector_thinking

__all__ = ("VECTORS", "in_scope", "vector_kwargs")


def in_scope(vector: dict[str, Any]) -> bool:
    """A corpus vector whose parsers are registered names (or null), not both null."""
    tp, rp = vector.get("tool_parser"), vector.get("reasoning_parser")
    return (
        (tp is not None or rp is not None)
        and (tp is None or tp in registry.tool_dialect_names())
        and (rp is None or rp in registry.reasoning_dialect_names())
    )


def vector_kwargs(vector: dict[str, Any]) -> dict[str, Any]:
    """The parser arguments of a corpus vector: its parsers, request tools and enable_thinking."""
    request = vector.get("request") or {}
    thinking = vector_thinking(request)
    return {
        "tool_parser": vector.get("tool_parser"),
        "reasoning_parser": vector.get("reasoning_parser"),
        "tools": request.get("tools"),
        "enable_thinking": thinking,
    }


VECTORS: list[dict[str, Any]] = [v for v in corpus_vectors() if in_scope(v)]
