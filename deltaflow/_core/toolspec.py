"""The validated tool the core works with: a plain frozen msgspec Struct, no pydantic.

Parsers and stages import :class:`ToolSpec` from here. Turning a request's
``tools`` (OpenAI, Anthropic or bare function objects) into specs, with
validation, is :func:`deltaflow.tools.normalize_tools`' job, at the edge;
``deltaflow.tools.ToolSpec`` is this same class.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ("ToolSpec",)


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A validated tool: its name, description and JSON schema for the arguments.

    Attributes:
        name: the function name the model calls.
        description: the tool's description, if any.
        parameters: the JSON schema of the arguments object (``{}`` when none was given).
    """

    name: str
    description: str | None = None
    parameters: dict[str, Any] = msgspec.field(default_factory=dict)
