"""OpenAI Responses streaming events.

``response.created`` first; then one output item per channel run, in the
model's order: a ``reasoning`` item (``response.reasoning_text.delta``), a
``message`` item (``response.content_part.added``,
``response.output_text.delta``, ``.done``), a ``function_call`` item
(``response.function_call_arguments.delta`` / ``.done``); every item opens
with ``response.output_item.added`` and closes with
``response.output_item.done`` carrying the complete item. Then
``response.completed`` with the whole output and usage. Every event has a
``sequence_number``. An error is an ``error`` event.
"""

from __future__ import annotations

from typing import Any

from ...messages import DeltaMessage
from ...stages.framer import Usage
from .base import WireEvent, error_message, new_id, now

__all__ = ("ResponsesFramer",)

_REASONING, _MESSAGE, _CALL = "reasoning", "message", "function_call"


class ResponsesFramer:
    """Frames deltas as OpenAI Responses stream events.

    Args:
        model: the model id of the response object.
        input_tokens: reported in the final usage.
    """

    def __init__(self, model: str, *, input_tokens: int = 0, response_id: str | None = None) -> None:
        self.id = response_id or new_id("resp_")
        self.model = model
        self.created_at = now()
        self._input_tokens = input_tokens
        self._seq = 0
        self._output: list[dict[str, Any]] = []
        self._item: dict[str, Any] | None = None
        self._parts: list[str] = []
        self._call_index = -1
        self._finish: str | None = None

    def _event(self, type_: str, **fields: Any) -> WireEvent:
        fields["type"] = type_
        fields["sequence_number"] = self._seq
        self._seq += 1
        return WireEvent(type_, fields)

    def _response(self, status: str, output: list[dict[str, Any]], usage: Any = None) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "model": self.model,
            "status": status,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": usage,
            "error": None,
            "incomplete_details": None,
        }

    def start(self) -> list[WireEvent]:
        """``response.created`` and ``response.in_progress``."""
        return [
            self._event("response.created", response=self._response("in_progress", [])),
            self._event("response.in_progress", response=self._response("in_progress", [])),
        ]

    def _open(self, out: list[WireEvent], item: dict[str, Any]) -> None:
        self._close(out)
        self._item = item
        self._parts = []
        idx = len(self._output)
        out.append(self._event("response.output_item.added", output_index=idx, item=dict(item)))
        if item["type"] == _MESSAGE:
            out.append(
                self._event(
                    "response.content_part.added",
                    item_id=item["id"],
                    output_index=idx,
                    content_index=0,
                    part={"type": "output_text", "text": "", "annotations": []},
                )
            )
        elif item["type"] == _REASONING:
            out.append(
                self._event(
                    "response.content_part.added",
                    item_id=item["id"],
                    output_index=idx,
                    content_index=0,
                    part={"type": "reasoning_text", "text": ""},
                )
            )

    def _close(self, out: list[WireEvent]) -> None:
        item = self._item
        if item is None:
            return
        idx = len(self._output)
        text = "".join(self._parts)
        kind = item["type"]
        if kind == _CALL:
            out.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=idx,
                    name=item["name"],
                    arguments=text,
                )
            )
            done = {**item, "status": "completed", "arguments": text}
        else:  # a message or a reasoning item: one text part
            extra: dict[str, Any]
            if kind == _MESSAGE:
                part = {"type": "output_text", "text": text, "annotations": []}
                done_type, extra = "response.output_text.done", {"logprobs": []}
            else:
                part = {"type": "reasoning_text", "text": text}
                done_type, extra = "response.reasoning_text.done", {}
            out.append(
                self._event(done_type, item_id=item["id"], output_index=idx, content_index=0, text=text, **extra)
            )
            out.append(
                self._event("response.content_part.done", item_id=item["id"], output_index=idx, content_index=0, part=part)
            )
            done = {**item, "status": "completed", "content": [part]}
        out.append(self._event("response.output_item.done", output_index=idx, item=done))
        self._output.append(done)
        self._item = None

    def feed(self, delta: DeltaMessage) -> list[WireEvent]:
        """Item openings, deltas and closings for one delta, in the model's order."""
        out: list[WireEvent] = []
        if delta.finish_reason is not None:
            self._finish = delta.finish_reason
        if delta.reasoning_content:
            if self._item is None or self._item["type"] != _REASONING:
                self._open(out, {"type": _REASONING, "id": new_id("rs_"), "summary": [], "status": "in_progress"})
            self._parts.append(delta.reasoning_content)
            out.append(
                self._event(
                    "response.reasoning_text.delta",
                    item_id=self._item["id"],  # type: ignore[index]
                    output_index=len(self._output),
                    content_index=0,
                    delta=delta.reasoning_content,
                )
            )
        for tc in delta.tool_calls:
            item = self._item
            if tc.function.name is not None or item is None or item["type"] != _CALL or tc.index != self._call_index:
                self._open(
                    out,
                    {
                        "type": _CALL,
                        "id": new_id("fc_"),
                        "call_id": tc.id or new_id("call_"),
                        "name": tc.function.name or "",
                        "arguments": "",
                        "status": "in_progress",
                    },
                )
                self._call_index = tc.index
            if tc.function.arguments:
                self._parts.append(tc.function.arguments)
                out.append(
                    self._event(
                        "response.function_call_arguments.delta",
                        item_id=self._item["id"],  # type: ignore[index]
                        output_index=len(self._output),
                        delta=tc.function.arguments,
                    )
                )
        if delta.content:
            if self._item is None or self._item["type"] != _MESSAGE:
                self._open(
                    out,
                    {"type": _MESSAGE, "id": new_id("msg_"), "role": "assistant", "status": "in_progress", "content": []},
                )
            self._parts.append(delta.content)
            out.append(
                self._event(
                    "response.output_text.delta",
                    item_id=self._item["id"],  # type: ignore[index]
                    output_index=len(self._output),
                    content_index=0,
                    delta=delta.content,
                    logprobs=[],
                )
            )
        return out

    def finish(self, usage: Usage | None = None) -> list[WireEvent]:
        """Close the open item; ``response.completed`` (or ``response.incomplete`` on length)."""
        out: list[WireEvent] = []
        self._close(out)
        u = usage or Usage()
        usage_obj = {
            "input_tokens": self._input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": u.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
            "total_tokens": self._input_tokens + u.completion_tokens,
        }
        out.append(self._event("response.completed", response=self._response("completed", self._output, usage_obj)))
        return out

    def error(self, exc: BaseException) -> list[WireEvent]:
        """An ``error`` event."""
        return [self._event("error", code="server_error", message=error_message(exc), param=None)]
