"""OpenAI Responses streaming events.

``response.created`` first; then one output item per channel run, in the
model's order: a ``reasoning`` item (``response.reasoning_text.delta``), a
``message`` item (``response.content_part.added``,
``response.output_text.delta``, ``.done``), a ``function_call`` item
(``response.function_call_arguments.delta`` / ``.done``); every item opens
with ``response.output_item.added`` and closes with
``response.output_item.done`` carrying the complete item. Then
``response.completed`` with the whole output and usage, or, when the engine
stopped at a limit (finish reason ``length`` or ``content_filter``),
``response.incomplete`` with ``"status": "incomplete"`` and
``incomplete_details.reason`` ``max_output_tokens`` or ``content_filter``
(the item the cut fell in is ``"status": "incomplete"`` too). Every event
has a ``sequence_number``. An error is an ``error`` event.

Reasoning summary: with ``reasoning_summary=True`` (the request's
``reasoning: {"summary": ...}``) the reasoning is also sent as summary part
0 (``response.reasoning_summary_part.added``,
``response.reasoning_summary_text.delta`` with the same fragments,
``.done``, ``response.reasoning_summary_part.done``; the item's
``summary: [{"type": "summary_text", "text": ...}]``), for clients that only
read summaries. This is the model's raw reasoning, not a summary of it.

Encrypted reasoning: a framer given a
:class:`~deltaflow.signing.ReasoningSealer` and ``include_encrypted=True``
(the request's ``include: ["reasoning.encrypted_content"]``) adds to every
reasoning item, in its ``response.output_item.done`` and in the final
response, ``encrypted_content``: the item's reasoning text sealed (see
:mod:`deltaflow.signing`). A client that keeps no state (``store: false``,
Codex CLI) sends the item back with it, and the gateway renders the text it
opens to as the model's own reasoning; a reasoning item sent back without a
valid seal is not (see :mod:`deltaflow.gateway.reasoning`). The item that
``response.output_item.added`` opens has no ``encrypted_content`` yet (the
text is not known).

Usage: the protocol's counts are integers (the official SDK's types, and
Vercel's AI SDK requires them in ``response.completed``); a count that was
not measured is sent as 0 and named in the usage's ``deltaflow_unknown``
list. :meth:`ResponsesFramer.response` is the final response object, the
non-streaming body.
"""

from __future__ import annotations

from typing import Any

from ...errors import StateError
from ...messages import DeltaMessage
from ...signing import ReasoningSealer
from ...stages.assembler import Usage
from .base import UNKNOWN_KEY, WireEvent, error_message, failure_status, measured, new_id, now, openai_error_type

__all__ = ("ResponsesFramer",)

_REASONING, _MESSAGE, _CALL = "reasoning", "message", "function_call"
# Finish reasons that end a response as "incomplete", with the reason reported.
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def _usage(usage: Usage | None, input_tokens: int | None) -> dict[str, Any]:
    """The usage object: integers, with 0 for each count not measured, named in ``deltaflow_unknown``."""
    prompt, completion, reasoning = measured(usage, input_tokens)
    unknown = ["input_tokens_details.cached_tokens"]  # no engine reports cache hits to deltaflow
    if prompt is None:
        unknown.append("input_tokens")
    if completion is None:
        unknown.append("output_tokens")
    if reasoning is None:
        unknown.append("output_tokens_details.reasoning_tokens")
    total = prompt + completion if prompt is not None and completion is not None else None
    if total is None:
        unknown.append("total_tokens")
    return {
        "input_tokens": prompt or 0,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": completion or 0,
        "output_tokens_details": {"reasoning_tokens": reasoning or 0},
        "total_tokens": total or 0,
        UNKNOWN_KEY: unknown,
    }


class ResponsesFramer:
    """Frames deltas as OpenAI Responses stream events.

    Args:
        model: the model id of the response object.
        input_tokens: the prompt's token count when known (an engine's own
            report takes priority); None: unknown.
        response_id: the response id (default: a fresh ``resp_...``).
        reasoning_summary: also send the reasoning as summary part 0 (see
            the module docstring: the raw reasoning, not a summary).
        sealer: seals reasoning items' text into their ``encrypted_content``
            (with ``include_encrypted``; None: never sealed).
        include_encrypted: the request asked for ``reasoning.encrypted_content``
            in ``include``. Without a ``sealer`` it adds nothing.
    """

    def __init__(
        self,
        model: str,
        *,
        input_tokens: int | None = None,
        response_id: str | None = None,
        reasoning_summary: bool = False,
        sealer: ReasoningSealer | None = None,
        include_encrypted: bool = False,
    ) -> None:
        self.id = response_id or new_id("resp_")
        self.model = model
        self.created_at = now()
        self._input_tokens = input_tokens
        self._summary = reasoning_summary
        self._sealer = sealer if include_encrypted else None
        self._seq = 0
        self._output: list[dict[str, Any]] = []
        self._item: dict[str, Any] | None = None
        self._parts: list[str] = []
        self._call_index = -1
        self._finish: str | None = None
        self._final: dict[str, Any] | None = None

    def _event(self, type_: str, **fields: Any) -> WireEvent:
        fields["type"] = type_
        fields["sequence_number"] = self._seq
        self._seq += 1
        return WireEvent(type_, fields)

    def _response(
        self, status: str, output: list[dict[str, Any]], usage: Any = None, incomplete: str | None = None
    ) -> dict[str, Any]:
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
            "incomplete_details": {"reason": incomplete} if incomplete is not None else None,
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
            if self._summary:
                out.append(
                    self._event(
                        "response.reasoning_summary_part.added",
                        item_id=item["id"],
                        output_index=idx,
                        summary_index=0,
                        part={"type": "summary_text", "text": ""},
                    )
                )

    def _close(self, out: list[WireEvent], status: str = "completed") -> None:
        """Close the open item; ``status`` is ``"incomplete"`` when the response was cut inside it."""
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
            done = {**item, "status": status, "arguments": text}
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
                self._event(
                    "response.content_part.done", item_id=item["id"], output_index=idx, content_index=0, part=part
                )
            )
            done = {**item, "status": status, "content": [part]}
            if kind == _REASONING and self._summary:
                summary = {"type": "summary_text", "text": text}
                out.append(
                    self._event(
                        "response.reasoning_summary_text.done",
                        item_id=item["id"],
                        output_index=idx,
                        summary_index=0,
                        text=text,
                    )
                )
                cut = {"status": "incomplete"} if status == "incomplete" else {}
                out.append(
                    self._event(
                        "response.reasoning_summary_part.done",
                        item_id=item["id"],
                        output_index=idx,
                        summary_index=0,
                        part=summary,
                        **cut,
                    )
                )
                done["summary"] = [summary]
            if kind == _REASONING and self._sealer is not None:
                done["encrypted_content"] = self._sealer.seal(text)
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
            item_id = self._item["id"]  # type: ignore[index]
            out.append(
                self._event(
                    "response.reasoning_text.delta",
                    item_id=item_id,
                    output_index=len(self._output),
                    content_index=0,
                    delta=delta.reasoning_content,
                )
            )
            if self._summary:
                out.append(
                    self._event(
                        "response.reasoning_summary_text.delta",
                        item_id=item_id,
                        output_index=len(self._output),
                        summary_index=0,
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
                    {
                        "type": _MESSAGE,
                        "id": new_id("msg_"),
                        "role": "assistant",
                        "status": "in_progress",
                        "content": [],
                    },
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
        """Close the open item.

        Ends with ``response.completed``, or ``response.incomplete`` on a ``length`` or ``content_filter`` finish.
        """
        out: list[WireEvent] = []
        reason = _INCOMPLETE.get(self._finish) if self._finish is not None else None
        status = "completed" if reason is None else "incomplete"
        self._close(out, status)
        self._final = self._response(status, self._output, _usage(usage, self._input_tokens), reason)
        out.append(self._event("response." + status, response=self._final))
        return out

    def response(self) -> dict[str, Any]:
        """The final response object (what ``response.completed`` / ``.incomplete`` carried): the non-streaming body.

        Raises:
            StateError: :meth:`finish` was not called yet.
        """
        if self._final is None:
            raise StateError("ResponsesFramer.response() before finish()")
        return self._final

    def error(self, exc: BaseException) -> list[WireEvent]:
        """An ``error`` event (its code from ``ERROR_TYPES``)."""
        return [
            self._event("error", code=openai_error_type(failure_status(exc)), message=error_message(exc), param=None)
        ]
