"""Anthropic Messages streaming events.

``message_start`` comes first; every channel change closes one content
block (``content_block_stop``) and opens the next (``content_block_start``:
``thinking``, ``text`` or ``tool_use`` with id and name), in the model's
order; deltas are ``thinking_delta``, ``text_delta`` and
``input_json_delta``. The ``input_json_delta`` fragments of one block are
the call's argument fragments, whose concatenation is always a valid JSON
prefix and a complete object by the block's stop (the parsing stages
guarantee it). Every thinking block ends with a ``signature_delta`` (the
:class:`~deltaflow.signing.ReasoningSigner` signature of the block's whole
thinking text) right before its ``content_block_stop``; the gateway
renders a block sent back as the model's own thought only when that
signature verifies (:mod:`deltaflow.gateway.reasoning`). Then
``message_delta`` (stop reason ``tool_use``, ``end_turn`` or
``max_tokens``; usage) and ``message_stop``. An error is an ``error`` event
whose ``error.type`` comes from ``ERROR_TYPES`` (``api_error``, or
``timeout_error`` for the engine idle timeout).

Usage: the protocol's counts are integers. ``message_start`` carries
``input_tokens`` (0 unless the framer was given it) and ``output_tokens``
0; the final counts come in ``message_delta``: ``output_tokens``, and
``input_tokens`` and ``output_tokens_details.thinking_tokens`` when known.
A required count that was not measured is sent as 0 and named in the
usage's ``deltaflow_unknown`` list. :meth:`AnthropicFramer.message` is the
final message, the non-streaming body (same blocks, signatures and usage).
"""

from __future__ import annotations

from typing import Any

import msgspec

from ...errors import StateError
from ...messages import DeltaMessage
from ...signing import ReasoningSigner
from ...stages.assembler import Usage
from .base import UNKNOWN_KEY, WireEvent, anthropic_error_type, error_message, failure_status, measured, new_id

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


class _SignatureDelta(msgspec.Struct, tag="signature_delta", tag_field="type"):
    signature: str


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


class _ThinkingTokens(msgspec.Struct):
    thinking_tokens: int


class _OutUsage(msgspec.Struct, omit_defaults=True, rename={"unknown": UNKNOWN_KEY}):
    output_tokens: int
    input_tokens: int | None = None
    output_tokens_details: _ThinkingTokens | None = None
    unknown: list[str] | None = None


class _MessageDelta(msgspec.Struct, tag="message_delta", tag_field="type"):
    delta: _StopDelta
    usage: _OutUsage


class _MessageStop(msgspec.Struct, tag="message_stop", tag_field="type"):
    pass


class _ErrorBody(msgspec.Struct):
    message: str
    type: str


class _Error(msgspec.Struct, tag="error", tag_field="type"):
    error: _ErrorBody


_THINKING, _TEXT, _TOOL = "thinking", "text", "tool_use"
_default_signer: ReasoningSigner | None = None


def _signer() -> ReasoningSigner:
    """The per-process keyless signer of framers made without one."""
    global _default_signer
    if _default_signer is None:
        _default_signer = ReasoningSigner()
    return _default_signer


class AnthropicFramer:
    """Frames deltas as Anthropic Messages stream events.

    Args:
        model: the model id of ``message_start``.
        input_tokens: the prompt's token count when known (an engine's own
            report takes priority); None: unknown.
        message_id: the message id (default: a fresh ``msg_...``).
        signer: signs thinking blocks (default: a per-process keyless
            :class:`~deltaflow.signing.ReasoningSigner`).
        keep_message: keep every block's text for :meth:`message` (the
            non-streaming body). False for a stream that is only sent: then
            only the open thinking block's text (to sign it) is held.
    """

    def __init__(
        self,
        model: str,
        *,
        input_tokens: int | None = None,
        message_id: str | None = None,
        signer: ReasoningSigner | None = None,
        keep_message: bool = True,
    ) -> None:
        self.id = message_id or new_id("msg_")
        self._keep = keep_message
        self.model = model
        self._input_tokens = input_tokens
        self._signer = signer if signer is not None else _signer()
        self._index = -1
        self._kind: str | None = None
        self._call_index = -1
        self._any_tool = False
        self._finish: str | None = None
        # One record per content block, in order: [kind, text parts, signature or (id, name)].
        self._blocks: list[list[Any]] = []
        self._parts: list[str] = []
        self._final: dict[str, Any] | None = None

    def start(self) -> list[WireEvent]:
        """``message_start``."""
        msg = _Message(
            id=self.id, model=self.model, usage=_Usage(input_tokens=self._input_tokens or 0, output_tokens=0)
        )
        return [WireEvent("message_start", _MessageStart(message=msg))]

    def _open(self, out: list[WireEvent], kind: str, block: Any, meta: Any = None) -> None:
        self._close(out)
        self._index += 1
        self._kind = kind
        self._parts = []
        if self._keep:
            self._blocks.append([kind, self._parts, meta])
        out.append(WireEvent("content_block_start", _BlockStart(index=self._index, content_block=block)))

    def _close(self, out: list[WireEvent]) -> None:
        if self._kind is not None:
            if self._kind == _THINKING:
                signature = self._signer.sign("".join(self._parts))
                if self._keep:
                    self._blocks[-1][2] = signature
                out.append(
                    WireEvent("content_block_delta", _BlockDelta(index=self._index, delta=_SignatureDelta(signature)))
                )
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
            self._parts.append(delta.reasoning_content)
            self._delta(out, _ThinkingDelta(thinking=delta.reasoning_content))
        for tc in delta.tool_calls:
            if tc.function.name is not None or self._kind != _TOOL or tc.index != self._call_index:
                use = _ToolUse(id=tc.id or new_id("toolu_"), name=tc.function.name or "")
                self._open(out, _TOOL, use, (use.id, use.name))
                self._call_index = tc.index
                self._any_tool = True
            if tc.function.arguments:
                if self._keep:
                    self._parts.append(tc.function.arguments)
                self._delta(out, _JsonDelta(partial_json=tc.function.arguments))
        if delta.content:
            if self._kind != _TEXT:
                self._open(out, _TEXT, _Text())
            if self._keep:
                self._parts.append(delta.content)
            self._delta(out, _TextDelta(text=delta.content))
        return out

    def _usage(self, usage: Usage | None) -> _OutUsage:
        """The final counts: a required one not measured is 0 and named in ``deltaflow_unknown``."""
        prompt, completion, reasoning = measured(usage, self._input_tokens)
        unknown = [name for name, n in (("input_tokens", prompt), ("output_tokens", completion)) if n is None]
        return _OutUsage(
            output_tokens=completion or 0,
            input_tokens=prompt,
            output_tokens_details=_ThinkingTokens(reasoning) if reasoning is not None else None,
            unknown=unknown or None,
        )

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
        counts = self._usage(usage)
        out.append(WireEvent("message_delta", _MessageDelta(delta=_StopDelta(stop_reason=reason), usage=counts)))
        out.append(WireEvent("message_stop", _MessageStop()))
        body_usage: dict[str, Any] = {"input_tokens": counts.input_tokens or 0, "output_tokens": counts.output_tokens}
        if counts.output_tokens_details is not None:
            body_usage["output_tokens_details"] = {"thinking_tokens": counts.output_tokens_details.thinking_tokens}
        if counts.unknown:
            body_usage[UNKNOWN_KEY] = counts.unknown
        self._final = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": None,  # built from the blocks by message(), when asked
            "stop_reason": reason,
            "stop_sequence": None,
            "usage": body_usage,
        }
        return out

    def message(self) -> dict[str, Any]:
        """The final message: the non-streaming body, with the streamed blocks, signatures and usage.

        Raises:
            StateError: :meth:`finish` was not called yet, or the framer
                was made with ``keep_message=False``.
        """
        final = self._final
        if final is None:
            raise StateError("AnthropicFramer.message() before finish()")
        if not self._keep:
            raise StateError("AnthropicFramer.message() of a framer made with keep_message=False")
        if final["content"] is None:
            content: list[dict[str, Any]] = []
            for kind, parts, meta in self._blocks:
                text = "".join(parts)
                if kind == _THINKING:
                    content.append({"type": "thinking", "thinking": text, "signature": meta})
                elif kind == _TEXT:
                    content.append({"type": "text", "text": text})
                else:
                    content.append(
                        {"type": "tool_use", "id": meta[0], "name": meta[1], "input": msgspec.json.decode(text or "{}")}
                    )
            final["content"] = content
        return final

    def error(self, exc: BaseException) -> list[WireEvent]:
        """An ``error`` event (its type from ``ERROR_TYPES``)."""
        return [
            WireEvent(
                "error",
                _Error(error=_ErrorBody(message=error_message(exc), type=anthropic_error_type(failure_status(exc)))),
            )
        ]
