"""OpenAI Chat Completions streaming: ``chat.completion.chunk`` objects.

Rules (what the official SDK needs): every tool-call delta has ``index``
(dense from 0) and a ``function`` object; ``id``, ``type`` and
``function.name`` are sent once, in the first delta of that index. The
first chunk carries ``role``. The finish reason comes on its own last
choice chunk; with ``include_usage`` a final chunk with empty ``choices``
carries ``usage`` (with ``completion_tokens_details.reasoning_tokens``); a
count that was not measured is ``null`` (``total_tokens`` too unless both
parts are known; ``completion_tokens_details`` is ``null`` without a
reasoning count), which the official SDK and Vercel's AI SDK accept.
Reasoning goes in ``reasoning_content`` (vLLM's field) or ``reasoning``.
An error becomes an ``{"error": {...}}`` payload. :meth:`ChatCompletionsFramer.completion`
builds the non-streaming ``chat.completion`` body with the same usage.

Speed: most deltas carry one string: content, reasoning, or a fragment of
one call's arguments. For those the framer does not build the chunk
objects: it keeps the chunk's JSON split around that string (rendered once
per response, or per call index, from the same structs, so the bytes are
identical) and emits ``msgspec.Raw(head + string + tail)``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ...messages import ChatMessage, DeltaMessage
from ...stages.assembler import Usage
from .base import WireEvent, error_message, failure_status, measured, new_id, now, openai_error_type

__all__ = ("ChatCompletionsFramer",)


class _Function(msgspec.Struct, omit_defaults=True):
    name: str | None = None
    arguments: str | None = None


class _ToolCall(msgspec.Struct, omit_defaults=True):
    index: int
    function: _Function
    id: str | None = None
    type: str | None = None


class _Delta(msgspec.Struct, omit_defaults=True):
    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _DeltaR(msgspec.Struct, omit_defaults=True):
    role: str | None = None
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(msgspec.Struct):
    delta: Any
    index: int = 0
    logprobs: Any = None
    finish_reason: str | None = None


class _Details(msgspec.Struct):
    reasoning_tokens: int = 0


class _Usage(msgspec.Struct):
    prompt_tokens: int | None
    completion_tokens: int | None
    total_tokens: int | None
    completion_tokens_details: _Details | None


def _usage(usage: Usage | None, prompt_tokens: int | None) -> _Usage:
    """The usage object: the measured counts, ``null`` where a count is unknown."""
    prompt, completion, reasoning = measured(usage, prompt_tokens)
    return _Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion if prompt is not None and completion is not None else None,
        completion_tokens_details=_Details(reasoning_tokens=reasoning) if reasoning is not None else None,
    )


class _Chunk(msgspec.Struct):
    # No omit_defaults: "object" must always be sent (the SDK's stream helper checks it).
    id: str
    created: int
    model: str
    choices: list[_Choice]
    object: str = "chat.completion.chunk"
    usage: _Usage | None = None


_PROBE = "\u0000deltaflow-probe\u0000"
_encode = msgspec.json.encode


def _split_template(chunk: _Chunk) -> tuple[bytes, bytes] | None:
    """The JSON of ``chunk`` (whose delta text is ``_PROBE``) split around that string, or None if ambiguous."""
    parts = _encode(chunk).split(_encode(_PROBE))
    return (parts[0], parts[1]) if len(parts) == 2 else None


class _ErrorBody(msgspec.Struct):
    message: str
    type: str = "server_error"
    code: str | None = None


class _Error(msgspec.Struct):
    error: _ErrorBody


class ChatCompletionsFramer:
    """Frames deltas as ``chat.completion.chunk`` objects.

    Args:
        model: the model id echoed in every chunk.
        include_usage: send the final usage chunk (``stream_options.include_usage``).
        reasoning_field: ``"reasoning_content"`` (default) or ``"reasoning"``.
        logprobs: pass the engine logprobs through as ``choices[0].logprobs.content``.
        prompt_tokens: the prompt's token count when known (an engine's own
            report takes priority); None: unknown (``null``).
    """

    __slots__ = (
        "_args_tpl",
        "_delta_cls",
        "_finish",
        "_logprobs",
        "_prompt_tokens",
        "_reasoning_key",
        "_text_tpl",
        "_usage",
        "created",
        "id",
        "model",
    )

    def __init__(
        self,
        model: str,
        *,
        include_usage: bool = False,
        reasoning_field: str = "reasoning_content",
        logprobs: bool = False,
        prompt_tokens: int | None = None,
        response_id: str | None = None,
    ) -> None:
        if reasoning_field not in ("reasoning_content", "reasoning"):
            raise ValueError(f"reasoning_field must be 'reasoning_content' or 'reasoning', got {reasoning_field!r}")
        self.id = response_id or new_id("chatcmpl-")
        self.model = model
        self.created = now()
        self._usage = include_usage
        self._delta_cls: type[Any] = _Delta if reasoning_field == "reasoning_content" else _DeltaR
        self._reasoning_key = reasoning_field
        self._logprobs = logprobs
        self._prompt_tokens = prompt_tokens
        self._finish: str | None = None
        # The chunk JSON around a text-only delta (content, reasoning) and around the
        # arguments of an argument-only tool-call delta (per call index, made when first needed).
        self._text_tpl = (
            self._template(self._delta_cls(content=_PROBE)),
            self._template(
                _Delta(reasoning_content=_PROBE) if self._delta_cls is _Delta else _DeltaR(reasoning=_PROBE)
            ),
        )
        self._args_tpl: dict[int, tuple[bytes, bytes] | None] = {}

    def _template(self, delta: Any) -> tuple[bytes, bytes] | None:
        return _split_template(
            _Chunk(id=self.id, created=self.created, model=self.model, choices=[_Choice(delta=delta)])
        )

    def _fast(self, delta: DeltaMessage) -> msgspec.Raw | None:
        """The chunk of a delta with one text field and nothing else, rendered from a template (None: no template)."""
        if self._logprobs and delta.logprobs is not None:
            return None
        content, reasoning, calls = delta.content, delta.reasoning_content, delta.tool_calls
        if calls:
            if content is not None or reasoning is not None or len(calls) != 1:
                return None
            tc = calls[0]
            fn = tc.function
            if tc.id is not None or tc.type is not None or fn.name is not None or fn.arguments is None:
                return None
            idx = tc.index
            if idx in self._args_tpl:
                tpl = self._args_tpl[idx]
            else:
                call = _ToolCall(index=idx, function=_Function(arguments=_PROBE))
                tpl = self._args_tpl[idx] = self._template(self._delta_cls(tool_calls=[call]))
            text = fn.arguments
        elif content is not None:
            if reasoning is not None:
                return None
            tpl, text = self._text_tpl[0], content
        elif reasoning is not None:
            tpl, text = self._text_tpl[1], reasoning
        else:
            return None
        return None if tpl is None else msgspec.Raw(tpl[0] + _encode(text) + tpl[1])

    def _chunk(self, delta: Any, finish: str | None = None, logprobs: Any = None) -> WireEvent:
        return WireEvent(
            None,
            _Chunk(
                id=self.id,
                created=self.created,
                model=self.model,
                choices=[_Choice(delta=delta, logprobs=logprobs, finish_reason=finish)],
            ),
        )

    def start(self) -> list[WireEvent]:
        """The role chunk."""
        return [self._chunk(self._delta_cls(role="assistant", content=""))]

    def feed(self, delta: DeltaMessage) -> list[WireEvent]:
        """One chunk per delta with visible fields; the finish reason is kept for :meth:`finish`."""
        if delta.finish_reason is not None:
            self._finish = delta.finish_reason
        raw = self._fast(delta)
        if raw is not None:
            return [WireEvent(None, raw)]
        calls = None
        if delta.tool_calls:
            calls = [
                _ToolCall(
                    index=tc.index,
                    id=tc.id,
                    type=tc.type,
                    function=_Function(name=tc.function.name, arguments=tc.function.arguments),
                )
                for tc in delta.tool_calls
            ]
        logprobs = {"content": delta.logprobs} if self._logprobs and delta.logprobs is not None else None
        if delta.content is None and delta.reasoning_content is None and calls is None and logprobs is None:
            return []  # (logprobs alone, e.g. of tokens that showed nothing, still make a chunk)
        kwargs: dict[str, Any] = {"content": delta.content, "tool_calls": calls}
        kwargs[self._reasoning_key] = delta.reasoning_content
        return [self._chunk(self._delta_cls(**kwargs), logprobs=logprobs)]

    def finish(self, usage: Usage | None = None) -> list[WireEvent]:
        """The finish-reason chunk, then the usage chunk when requested."""
        out = [self._chunk(self._delta_cls(), finish=self._finish or "stop")]
        if self._usage:
            out.append(
                WireEvent(
                    None,
                    _Chunk(
                        id=self.id,
                        created=self.created,
                        model=self.model,
                        choices=[],
                        usage=_usage(usage, self._prompt_tokens),
                    ),
                )
            )
        return out

    def completion(self, message: ChatMessage, usage: Usage | None = None) -> dict[str, Any]:
        """The non-streaming ``chat.completion`` body of the whole response (usage as in :meth:`finish`)."""
        msg: dict[str, Any] = {
            "role": "assistant",
            "content": message.content,
            "reasoning_content": message.reasoning_content,
        }
        if message.tool_calls:
            msg["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for c in message.tool_calls
            ]
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {"index": 0, "message": msg, "finish_reason": message.finish_reason or "stop", "logprobs": None}
            ],
            "usage": msgspec.to_builtins(_usage(usage, self._prompt_tokens)),
        }

    def error(self, exc: BaseException) -> list[WireEvent]:
        """An ``{"error": ...}`` payload (the SDK raises it mid-stream); its type comes from ``ERROR_TYPES``."""
        body = _ErrorBody(message=error_message(exc), type=openai_error_type(failure_status(exc)))
        return [WireEvent(None, _Error(body))]
