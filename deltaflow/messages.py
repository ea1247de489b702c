"""Public message shapes: the streamed :class:`DeltaMessage` and the complete :class:`ChatMessage`.

These are msgspec Structs. ``msgspec.json.encode`` of a delta gives the
OpenAI Chat Completions delta shape, with fields that are ``None`` (or empty)
omitted.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

__all__ = (
    "ChatMessage",
    "DeltaFunctionCall",
    "DeltaMessage",
    "DeltaToolCall",
    "FunctionCall",
    "ToolCall",
)


class DeltaFunctionCall(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The function part of a streamed tool-call delta.

    ``name`` is set only in the first delta of a call; ``arguments`` holds a
    fragment of the arguments JSON text.
    """

    name: str | None = None
    arguments: str | None = None


class DeltaToolCall(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One tool-call fragment inside a :class:`DeltaMessage`.

    The first fragment of each ``index`` carries ``id``, ``type`` and
    ``function.name``; later fragments carry only ``index`` and
    ``function.arguments``.
    """

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: DeltaFunctionCall = msgspec.field(default_factory=DeltaFunctionCall)


class DeltaMessage(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One streamed delta, shaped like the OpenAI chat completion delta.

    Attributes:
        content: visible answer text.
        reasoning_content: reasoning ("thinking") text.
        tool_calls: tool-call fragments (see :class:`DeltaToolCall`).
        token_ids: engine token ids this delta accounts for, when known.
        logprobs: engine logprobs for those tokens, when known.
        finish_reason: set on the last delta of a response when given.
    """

    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[DeltaToolCall] = msgspec.field(default_factory=list)
    token_ids: list[int] | None = None
    logprobs: Any | None = None
    finish_reason: str | None = None


class FunctionCall(msgspec.Struct, kw_only=True):
    """A complete function call: its name and its arguments as JSON object text."""

    name: str
    arguments: str


class ToolCall(msgspec.Struct, kw_only=True):
    """A complete tool call of a :class:`ChatMessage`."""

    id: str
    function: FunctionCall
    type: Literal["function"] = "function"


class ChatMessage(msgspec.Struct, kw_only=True):
    """A complete assistant message, as returned by :func:`deltaflow.parse_complete`.

    ``content`` and ``reasoning_content`` are ``None`` when the response had
    none (never ``""``).
    """

    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] = msgspec.field(default_factory=list)
    role: Literal["assistant"] = "assistant"
    finish_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the ``{"content", "reasoning_content", "tool_calls"}`` JSON-ready dict."""
        return {
            "content": self.content,
            "reasoning_content": self.reasoning_content,
            "tool_calls": [
                {
                    "id": c.id,
                    "type": c.type,
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for c in self.tool_calls
            ],
        }
