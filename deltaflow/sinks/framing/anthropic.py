"""Anthropic Messages streaming events.

``message_start`` comes first; every channel change closes one content
block (``content_block_stop``) and opens the next (``content_block_start``:
``thinking``, ``text`` or ``tool_use`` with id and name), in the model's
order; deltas are ``thinking_delta``, ``text_delta`` and
``input_json_delta``. The ``input_json_delta`` fragments of one block are
the call's argument fragments, whose concatenation is always a valid JSON
prefix and a complete object by the block's stop (the parsing stages
guarantee it). Then ``message_delta`` (stop reason ``tool_use``,
``end_turn`` or ``max_tokens``; usage) and ``message_stop``. An error is an
``error`` event.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ...messages import DeltaMessage
from ...stages.framer import Usage
from .base import WireEvent, error_message, new_id

__all__ = ("AnthropicFramer",)


class _Usage(msgspec.Struct):
    input_tokens: int
    output_tokens: int


class _Message(msgspec.Struct):
    id: str
    model: str
    usage: _Usage
    type: str = "message"
    role: str = "assistant"
    content: list[Any] = msgspec.field(default_factory=list)
    stop_reason: str | None = None
    stop_sequence: str | None = None


class _MessageStart(msgspec.Struct, tag="message_start", tag_field="type"):
    message: _Message


class _Thinking(msgspec.Struct, tag="thinking", tag_field="type"):
    thinking: str = ""
    signature: str = ""


class _Text(msgspec.Struct, tag="text", tag_field="type"):
    text: str = ""


class _ToolUse(msgspec.Struct, tag="tool_use", tag_field="type"):
    id: str
    name: str
    input: dict[str, Any] = msgspec.field(default_factory=dict)


class _BlockStart(msgspec.Struct, tag="content_block_start", tag_field="type"):
    index: int
    content_block: Any


class _ThinkingDelta(msgspec.Struct, tag="thinking_delta", tag_field="type"):
    thinking: str


class _TextDelta(msgspec.Struct, tag="text_delta", tag_field="type"):
    text: str


class _JsonDelta(msgspec.Struct, tag="input_json_delta", tag_field="type"):
    partial_json: str


class _BlockDelta(msgspec.Struct, tag="content_block_delta", tag_field="type"):
    index: int
    delta: Any


class _BlockStop(msgspec.Struct, tag="content_block_stop", tag_field="type"):
    index: int


class _StopDelta(msgspec.Struct):
    stop_reason: str
    stop_sequence: str | None = None


class _OutUsage(msgspec.Struct):
    output_tokens: int


class _MessageDelta(msgspec.Struct, tag="message_delta", tag_field="type"):
    delta: _StopDelta
    usage: _OutUsage


class _MessageStop(msgspec.Struct, tag="message_stop", tag_field="type"):
    pass


class _ErrorBody(msgspec.Struct):
    message: str
    type: str = "api_error"


class _Error(msgspec.Struct, tag="error", tag_field="type"):
    error: _ErrorBody


_THINKING, _TEXT, _TOOL = "thinking", "text", "tool_use"


class AnthropicFramer:
    """Frames deltas as Anthropic Messages stream events.

    Args:
        model: the model id of ``message_start``.
        input_tokens: reported in ``message_start``.
    """

    def __init__(self, model: str, *, input_tokens: int = 0, message_id: str | None = None) -> None:
        self.id = message_id or new_id("msg_")
        self.model = model
        self._input_tokens = input_tokens
        self._index = -1
        self._kind: str | None = None
        self._call_index = -1
        self._any_tool = False
        self._finish: str | None = None

    def start(self) -> list[WireEvent]:
        """``message_start``."""
        msg = _Message(id=self.id, model=self.model, usage=_Usage(input_tokens=self._input_tokens, output_tokens=0))
        return [WireEvent("message_start", _MessageStart(message=msg))]

    def _open(self, out: list[WireEvent], kind: str, block: Any) -> None:
        self._close(out)
        self._index += 1
        self._kind = kind
        out.append(WireEvent("content_block_start", _BlockStart(index=self._index, content_block=block)))

    def _close(self, out: list[WireEvent]) -> None:
        if self._kind is not None:
            out.append(WireEvent("content_block_stop", _BlockStop(index=self._index)))
            self._kind = None

    def _delta(self, out: list[WireEvent], delta: Any) -> None:
        out.append(WireEvent("content_block_delta", _BlockDelta(index=self._index, delta=delta)))

    def feed(self, delta: DeltaMessage) -> list[WireEvent]:
        """Block starts, deltas and stops for one delta, in the model's order."""
        out: list[WireEvent] = []
        if delta.finish_reason is not None:
            self._finish = delta.finish_reason
        if delta.reasoning_content:
            if self._kind != _THINKING:
                self._open(out, _THINKING, _Thinking())
            self._delta(out, _ThinkingDelta(thinking=delta.reasoning_content))
        for tc in delta.tool_calls:
            if tc.function.name is not None or self._kind != _TOOL or tc.index != self._call_index:
                self._open(out, _TOOL, _ToolUse(id=tc.id or new_id("toolu_"), name=tc.function.name or ""))
                self._call_index = tc.index
                self._any_tool = True
            if tc.function.arguments:
                self._delta(out, _JsonDelta(partial_json=tc.function.arguments))
        if delta.content:
            if self._kind != _TEXT:
                self._open(out, _TEXT, _Text())
            self._delta(out, _TextDelta(text=delta.content))
        return out

    def finish(self, usage: Usage | None = None) -> list[WireEvent]:
        """Close the open block; ``message_delta`` and ``message_stop``."""
        out: list[WireEvent] = []
        self._close(out)
        if self._any_tool:
            reason = "tool_use"
        elif self._finish == "length":
            reason = "max_tokens"
        else:
            reason = "end_turn"
        tokens = usage.completion_tokens if usage is not None else 0
        out.append(WireEvent("message_delta", _MessageDelta(delta=_StopDelta(stop_reason=reason), usage=_OutUsage(tokens))))
        out.append(WireEvent("message_stop", _MessageStop()))
        return out

    def error(self, exc: BaseException) -> list[WireEvent]:
        """An ``error`` event."""
        return [WireEvent("error", _Error(error=_ErrorBody(message=error_message(exc))))]
