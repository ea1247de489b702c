"""OpenAI-compatible ``POST /v1/chat/completions``: the passthrough to a server that renders and parses itself.

For engines whose own chat template and tool/reasoning parsers the operator
trusts (vLLM or SGLang with their parsers, llama.cpp's server with
``--jinja``): the gateway writes the conversation as a Chat request
(:func:`~deltaflow.prompt.writers.write_chat`) and translates the server's
parsed stream into :class:`~deltaflow.messages.DeltaMessage` objects, which
the protocol framers put on the client's wire. No deltaflow parser runs and no
deltaflow constraint applies: ``tool_choice`` goes to the server as it is,
and the server enforces it.

Request body::

    {"messages": [...], "tools": [...], "tool_choice": "required",
     "parallel_tool_calls": true, "max_tokens": 256, "temperature": 0.7,
     "top_p": 0.9, "seed": 1, "stop": ["END"], "reasoning_effort": "low",
     "chat_template_kwargs": {"enable_thinking": false},
     "model": "m", "stream": true, "stream_options": {"include_usage": true}}

Stream: ``data: {"choices": [{"index": 0, "delta": {"role"?, "content"?,
"reasoning_content"? | "reasoning"?, "tool_calls"?: [{"index", "id"?,
"type"?, "function": {"name"?, "arguments"?}}]}, "finish_reason"}],
"usage"?}`` ... ``data: [DONE]``. vLLM names the reasoning ``reasoning``
(``reasoning_content`` before 0.10), llama.cpp ``reasoning_content``; both
are read. The usage comes in a last chunk with ``choices: []`` (vLLM,
llama.cpp) or on the finish chunk; its ``prompt_tokens``,
``completion_tokens`` and ``completion_tokens_details.reasoning_tokens``
become a :class:`~deltaflow.stages.assembler.Usage`.

Translation of one stream (choice 0; other choices are ignored):

* reasoning, content and tool-call fragments of one chunk become deltas in
  that order; role-only and empty chunks become nothing;
* tool calls are numbered 0, 1, ... in the order the server's indices first
  appear (a fragment without ``index`` continues the last call, or starts a
  new one when it carries a new ``id``). A call's first delta carries its
  ``id`` (a fresh ``call_...`` id when the server gave none), ``type`` and
  function ``name``; fragments that arrive before the name are held and sent
  with it. Arguments are passed through as they come, in fragments or whole;
* ``finish_reason``: ``stop``, ``length``, ``tool_calls``, ``content_filter``
  as they are (``function_call`` is ``tool_calls``; ``stop`` is ``tool_calls``
  when calls were sent, as deltaflow's own assembler does), ``abort`` /
  ``error`` end the stream with an :class:`~deltaflow.gateway.upstream.UpstreamError`
  (``status``), anything else is ``stop``;
* a chunk that is not valid JSON or not shaped like a chat completion chunk
  (a field of the wrong type, a tool call that never gets a name) is an
  ``UpstreamError`` of kind ``protocol`` saying what was wrong; an error object
  inside the stream is one of kind ``status`` with the server's message.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any, cast

import msgspec

from ...messages import DeltaFunctionCall, DeltaMessage, DeltaToolCall
from ...stages.assembler import Usage
from ...stages.name_filter import new_call_id
from ..upstream import ChatRequest
from ._http import EventDecoder, HttpUpstream, _StreamFault, event_error

__all__ = ("ChatCompletionsUpstream", "ChatOutput")

ChatOutput = DeltaMessage | Usage
"""What :meth:`ChatCompletionsUpstream.chat` yields: deltas, and the server's token counts."""

_FINISH = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}


class _Function(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _ToolCall(msgspec.Struct):
    index: int | None = None
    id: str | None = None
    type: str | None = None
    function: _Function | None = None


class _Delta(msgspec.Struct):
    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Logprobs(msgspec.Struct):
    content: list[Any] | None = None


class _Choice(msgspec.Struct):
    index: int = 0
    delta: _Delta | None = None
    finish_reason: str | None = None
    logprobs: _Logprobs | None = None


class _Details(msgspec.Struct):
    reasoning_tokens: int | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    completion_tokens_details: _Details | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: Any = None
    object: str | None = None


_decoder = msgspec.json.Decoder(_Chunk)


def _decode(data: str) -> _Chunk:
    try:
        return _decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise _StreamFault("protocol", f"the upstream sent a chat completion chunk of the wrong shape ({exc})") from exc
    except msgspec.DecodeError as exc:
        raise _StreamFault("protocol", f"the upstream sent a chat completion chunk that is not JSON ({exc})") from exc


def _count(name: str, value: int | None) -> None:
    if value is not None and value < 0:
        raise _StreamFault("protocol", f"the upstream reported a negative {name} ({value})")


class _Call:
    """One tool call of the stream, as numbered for the client."""

    __slots__ = ("held", "id", "index", "name", "named")

    def __init__(self, index: int, call_id: str | None) -> None:
        self.index = index
        self.id = call_id
        self.name: str | None = None
        self.named = False  # the first delta (id, type, name) has gone out
        self.held: list[str] = []  # argument fragments that came before the name


class _ChatDecoder:
    """One chat completions stream (choice 0) -> deltas and usage (see the module docstring)."""

    __slots__ = ("_by_key", "_calls", "_emitted", "done")

    def __init__(self) -> None:
        self.done = False
        self._calls: list[_Call] = []
        self._by_key: dict[int, _Call] = {}  # the server's index -> the call
        self._emitted = False  # a call has been sent to the client

    def _call_for(self, tc: _ToolCall) -> _Call:
        if tc.index is not None:
            call = self._by_key.get(tc.index)
            if call is None:
                call = _Call(len(self._calls), tc.id)
                self._by_key[tc.index] = call
                self._calls.append(call)
            return call
        last = self._calls[-1] if self._calls else None
        if last is None or (tc.id is not None and tc.id != last.id):
            last = _Call(len(self._calls), tc.id)
            self._calls.append(last)
        return last

    def _fragments(self, tool_calls: list[_ToolCall]) -> list[DeltaToolCall]:
        out: list[DeltaToolCall] = []
        for tc in tool_calls:
            call = self._call_for(tc)
            fn = tc.function
            args = fn.arguments if fn is not None else None
            if call.id is None and tc.id:
                call.id = tc.id
            if not call.named:
                if fn is not None and fn.name:
                    call.name = fn.name
                if call.name is None:
                    if args:
                        call.held.append(args)
                    continue
                call.named = True
                self._emitted = True
                text = "".join(call.held) + (args or "")
                call.held = []
                out.append(DeltaToolCall(
                    index=call.index,
                    id=call.id or new_call_id(),
                    type="function",
                    function=DeltaFunctionCall(name=call.name, arguments=text or None),
                ))
            elif args:
                out.append(DeltaToolCall(index=call.index, function=DeltaFunctionCall(arguments=args)))
        return out

    def feed(self, data: str) -> Sequence[ChatOutput]:
        if data == "[DONE]":
            if self.done:
                return ()
            # The end without a finish reason: the answer ended normally.
            self._check_names()
            self.done = True
            return (DeltaMessage(finish_reason="tool_calls" if self._emitted else "stop"),)
        ev = _decode(data)
        if ev.error is not None or ev.object == "error":
            raise event_error(data)
        out: list[ChatOutput] = []
        for choice in ev.choices or ():
            if choice.index != 0 or self.done:
                continue
            d = choice.delta
            start = len(out)
            if d is not None:
                thought = d.reasoning_content if d.reasoning_content is not None else d.reasoning
                if thought:
                    out.append(DeltaMessage(reasoning_content=thought))
                if d.content:
                    out.append(DeltaMessage(content=d.content))
                if d.tool_calls:
                    fragments = self._fragments(d.tool_calls)
                    if fragments:
                        out.append(DeltaMessage(tool_calls=fragments))
            lp = choice.logprobs.content if choice.logprobs is not None else None
            if lp:
                # The chunk's token logprobs ride on its first delta (a Chat client gets them with it);
                # a chunk of logprobs alone becomes a delta of its own.
                if len(out) > start:
                    first = out[start]
                    assert isinstance(first, DeltaMessage)
                    out[start] = DeltaMessage(
                        content=first.content, reasoning_content=first.reasoning_content,
                        tool_calls=first.tool_calls, logprobs=lp,
                    )
                else:
                    out.append(DeltaMessage(logprobs=lp))
            reason = choice.finish_reason
            if reason is not None:
                if reason in ("abort", "error"):
                    raise _StreamFault("status", f"the upstream engine ended the generation ({reason})")
                self._check_names()
                self.done = True
                mapped = _FINISH.get(reason, "stop")
                if mapped == "stop" and self._emitted:
                    mapped = "tool_calls"
                out.append(DeltaMessage(finish_reason=mapped))
        u = ev.usage
        if u is not None:
            reasoning = u.completion_tokens_details.reasoning_tokens if u.completion_tokens_details else None
            _count("prompt_tokens", u.prompt_tokens)
            _count("completion_tokens", u.completion_tokens)
            _count("reasoning_tokens", reasoning)
            out.append(Usage(
                prompt_tokens=u.prompt_tokens,
                completion_tokens=u.completion_tokens or 0,
                completion_known=u.completion_tokens is not None,
                reasoning_tokens=reasoning or 0,
                reasoning_known=reasoning is not None,
            ))
        return out

    def _check_names(self) -> None:
        for call in self._calls:
            if not call.named:
                raise _StreamFault("protocol", f"the upstream sent tool call {call.index} without a function name")

    def finish(self) -> Sequence[ChatOutput]:
        if not self.done:
            raise _StreamFault("closed", "the upstream engine's stream ended before its final event")
        return ()


class ChatCompletionsUpstream(HttpUpstream):
    """An OpenAI-compatible ``/v1/chat/completions`` endpoint (see the module docstring).

    Args:
        base_url: the server's root URL (a trailing ``/v1`` is accepted and dropped).
        model: the ``model`` field (None: left out; llama.cpp serves its one
            model whatever it is; vLLM and SGLang want their served name).
        **http: :class:`~deltaflow.gateway.upstreams._http.HttpUpstream`'s arguments.
    """

    kind = "chat"
    constraint_forms = ()
    health_path = "/v1/models"

    def __init__(self, base_url: str, *, model: str | None = None, **http: Any) -> None:
        base = base_url.rstrip("/")
        if base.endswith("/v1"):
            base = base[: -len("/v1")]
        super().__init__(base, **http)
        self.model = model

    def request_body(self, request: ChatRequest) -> dict[str, Any]:
        """The ``/v1/chat/completions`` body for ``request`` (always streamed, with the usage)."""
        body: dict[str, Any] = dict(request.body)
        if self.model is not None:
            body["model"] = self.model
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        body.update(request.extra)
        return body

    def chat(self, request: ChatRequest) -> AsyncGenerator[ChatOutput, None]:
        """Stream one answer: :class:`~deltaflow.messages.DeltaMessage` objects and the server's
        :class:`~deltaflow.stages.assembler.Usage` (always streamed; closing stops the server).

        Raises:
            UpstreamError: while iterating.
        """
        # The shared reader is typed for TokenChunk; it hands on whatever the decoder returns.
        new_decoder = cast(Callable[[], EventDecoder], _ChatDecoder)
        return cast(AsyncGenerator[ChatOutput, None],
                    self.stream("/v1/chat/completions", self.request_body(request), new_decoder))

    def generate(self, request: Any) -> AsyncGenerator[Any, None]:
        """Not served: a Chat Completions upstream takes conversations (:meth:`chat`), not rendered prompts.

        Raises:
            NotImplementedError: when iterated.
        """
        return _not_a_completion_engine()


async def _not_a_completion_engine() -> AsyncGenerator[Any, None]:
    raise NotImplementedError(
        "the chat upstream takes conversations, not rendered prompts: the gateway streams it with "
        "GatewayEngine.deltas()"
    )
    yield  # pragma: no cover - makes this an async generator
