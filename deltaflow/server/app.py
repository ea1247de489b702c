"""The ASGI app: OpenAI Chat Completions, OpenAI Responses and Anthropic Messages in front of an engine.

Routes: ``POST /v1/chat/completions``, ``POST /v1/responses``,
``POST /v1/messages`` (streaming and not), ``GET /v1/models``, and the
WebSocket ``/v1/ws`` (the client sends one JSON request with a
``"protocol"`` field; the server sends one JSON message per event and
closes with 1000, or 1011 after an error event, 1008 for a bad request or
a missing/wrong API key, 1009 for a request over the size limit, 1013 when
all stream slots are taken).

The request's ``tools`` drive name filtering; ``tool_choice="none"`` turns
tool parsing off. Bad requests (malformed JSON, wrong types of ``model``,
``messages``, ``input``, ``max_tokens``, ``stream``, ``tools``,
``tool_choice``) get a 400 in the protocol's error shape.

Limits and access (all optional, see :func:`create_app`): an API key
(``Authorization: Bearer`` on the OpenAI routes, ``x-api-key`` or Bearer on
``/v1/messages``; 401), a request body size limit (413), a limit on
concurrent engine streams (429 with ``Retry-After``) and an engine idle
timeout (the stream ends with the protocol's error event). Error bodies are
``{"error": {"message", "type", "param", "code"}}`` on the OpenAI routes
and ``{"type": "error", "error": {"type", "message"}}`` on ``/v1/messages``;
both types come from one table of HTTP statuses
(:data:`deltaflow.sinks.framing.base.ERROR_TYPES`), also used by the
framers' error events: on ``/v1/messages`` 400 ``invalid_request_error``,
401 ``authentication_error``, 403 ``permission_error``, 404
``not_found_error``, 413 ``request_too_large``, 429 ``rate_limit_error``,
500 ``api_error`` (an engine failure), 503/529 ``overloaded_error``, 504
``timeout_error`` (the engine idle timeout).

Non-streaming bodies are built by the same framers as the streams (the
final response object of :class:`~deltaflow.sinks.ResponsesFramer`, the
final message of :class:`~deltaflow.sinks.AnthropicFramer`, the
``chat.completion`` of :class:`~deltaflow.sinks.ChatCompletionsFramer`), so
the two cannot disagree.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import msgspec
import structlog
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from ..errors import DeltaflowError, ToolSpecError
from ..pipeline.runner import DeltaStream, stream
from ..signing import ReasoningSigner
from ..sinks.collect import collect_async
from ..sinks.framing import AnthropicFramer, ChatCompletionsFramer, ResponsesFramer
from ..sinks.framing.base import Framer, WireEvent, anthropic_error_type, failure_status, openai_error_type
from ..sinks.sse import SSEResponse, run_framed
from ..stages.tool_feeder import check_tool_calls_in_reasoning
from ..tools import ToolSpec, normalize_tools
from .engine import Engine, EngineRequest, FunctionEngine, ModelInfo, ReplayEngine
from .limits import BodyTooLarge, EngineIdleError, StreamSlots, idle_guard, key_matches, read_body

__all__ = ("DEFAULT_MAX_BODY_BYTES", "DEFAULT_MAX_STREAMS", "create_app")

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
"""The default request body limit (1 MiB)."""
DEFAULT_MAX_STREAMS = 256
"""The default limit on concurrent engine streams."""

_log = structlog.get_logger("deltaflow.server")
_PROTOCOLS = ("chat.completions", "responses", "messages")
_request_ids = itertools.count(1)


class BadRequest(Exception):
    """A client error: message, HTTP status, OpenAI error code (None: the error type) and parameter."""

    def __init__(self, message: str, status: int = 400, code: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.param = param


def _error_body(
    protocol: str, status: int, message: str, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    """The protocol's error body; the error type comes from the status (``ERROR_TYPES``)."""
    if protocol == "messages":
        return {"type": "error", "error": {"type": anthropic_error_type(status), "message": message}}
    kind = openai_error_type(status)
    return {"error": {"message": message, "type": kind, "param": param, "code": code or kind}}


def _client_error(exc: BaseException) -> BadRequest | None:
    """A planning engine's refusal as a client error: an exception with a 4xx ``status``, or a
    deltaflow ``ValueError`` (an invalid request, a template that raised); None for anything else."""
    status = getattr(exc, "status", None)
    if isinstance(status, int) and 400 <= status < 500:
        return BadRequest(str(getattr(exc, "message", None) or exc), status, getattr(exc, "code", None),
                          getattr(exc, "param", None))
    if isinstance(exc, DeltaflowError) and isinstance(exc, ValueError):
        return BadRequest(str(exc))
    return None


# kind -> (HTTP status, OpenAI code); the error types come from the status.
_LIMIT_ERRORS = {
    "auth": (401, "invalid_api_key"),
    "too_large": (413, "request_too_large"),
    "busy": (429, "rate_limit_exceeded"),
}
RETRY_AFTER_SECONDS = 1


def _limit_body(protocol: str, kind: str, message: str) -> tuple[int, dict[str, Any]]:
    status, oai_code = _LIMIT_ERRORS[kind]
    return status, _error_body(protocol, status, message, oai_code)


def _limit_response(protocol: str, kind: str, message: str) -> JSONResponse:
    status, body = _limit_body(protocol, kind, message)
    headers: dict[str, str] = {}
    if kind == "auth":
        headers["www-authenticate"] = "Bearer"
    elif kind == "busy":
        headers["retry-after"] = str(RETRY_AFTER_SECONDS)
    return JSONResponse(body, status_code=status, headers=headers)


def _auth_message(has_key: bool, protocol: str) -> str:
    if protocol == "messages":
        how = "an 'x-api-key' header (or 'Authorization: Bearer')"
    else:
        how = "an 'Authorization: Bearer <key>' header"
    return ("invalid API key" if has_key else "missing API key") + f": this server requires {how}"


def _busy_message(limit: int | None) -> str:
    return (
        f"too many concurrent streams: this server allows {limit} at a time; "
        f"retry after {RETRY_AFTER_SECONDS} s"
    )


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters (error messages never echo a whole request back)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_CHAT_TOOL_CHOICES = ("none", "auto", "required")
_SUMMARY_MODES = ("auto", "concise", "detailed")
_ANTHROPIC_TOOL_CHOICES = ("auto", "any", "tool", "none")


def _positive_int(body: dict[str, Any], key: str, *, required: bool) -> None:
    value = body.get(key)
    if value is None and not required:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        need = "is required and must be" if required else "must be"
        raise BadRequest(f"'{key}' {need} a positive integer, got {_short(value)}")


def _check_messages(body: dict[str, Any], protocol: str) -> None:
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise BadRequest(f"'messages' is required and must be a list, got {type(messages).__name__}")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise BadRequest(f"messages[{i}] must be an object, got {type(m).__name__}")
        role = m.get("role")
        if not isinstance(role, str):
            raise BadRequest(f"messages[{i}].role is required and must be a string")
        if protocol == "messages" and role not in ("user", "assistant"):
            raise BadRequest(f"messages[{i}].role must be 'user' or 'assistant', got {_short(role)}")


def _check_tool_choice(protocol: str, choice: Any, tools: tuple[ToolSpec, ...] | None) -> None:
    """Validate ``tool_choice``; a named tool must be one of ``tools``."""
    if choice is None:
        return
    name: Any = None
    if protocol == "messages":
        if not isinstance(choice, dict) or choice.get("type") not in _ANTHROPIC_TOOL_CHOICES:
            raise BadRequest(
                f"'tool_choice' must be an object with type one of {', '.join(_ANTHROPIC_TOOL_CHOICES)}, "
                f"got {_short(choice)}"
            )
        if choice["type"] == "tool":
            name = choice.get("name")
            if not isinstance(name, str):
                raise BadRequest("'tool_choice' of type 'tool' needs a string 'name'")
    elif isinstance(choice, str):
        if choice not in _CHAT_TOOL_CHOICES:
            raise BadRequest(
                f"'tool_choice' must be one of {', '.join(_CHAT_TOOL_CHOICES)} or an object, got {_short(choice)}"
            )
    elif isinstance(choice, dict) and isinstance(choice.get("type"), str):
        if choice["type"] == "function":
            fn = choice.get("function") if protocol == "chat.completions" else choice
            name = fn.get("name") if isinstance(fn, dict) else None
            if not isinstance(name, str):
                where = "function.name" if protocol == "chat.completions" else "name"
                raise BadRequest(f"'tool_choice' of type 'function' needs a string '{where}'")
    else:
        raise BadRequest(f"'tool_choice' must be a string or an object with a 'type', got {_short(choice)}")
    if name is not None and name not in {t.name for t in tools or ()}:
        raise BadRequest(f"'tool_choice' names the tool {_short(name)}, which is not in 'tools'")


class _Prepared(msgspec.Struct, kw_only=True):
    protocol: str
    body: dict[str, Any]
    info: ModelInfo
    tools: tuple[ToolSpec, ...] | None
    tool_parser: str | None
    enable_thinking: bool | None
    streaming: bool
    reasoning_summary: bool = False
    reasoning_starts_open: bool | None = None
    plan: Any = None


class DeltaflowApp:
    """Holds the engine and builds responses (see :func:`create_app`)."""

    def __init__(
        self,
        engine: Engine,
        *,
        heartbeat: float | None = 15.0,
        api_key: str | None = None,
        max_body_bytes: int | None = None,
        max_streams: int | None = None,
        idle_timeout: float | None = None,
        signer: ReasoningSigner | None = None,
        tool_calls_in_reasoning: str = "trailing",
    ) -> None:
        self.engine = engine
        self.signer = signer if signer is not None else ReasoningSigner()
        self.heartbeat = heartbeat
        self.api_key = api_key
        self.max_body_bytes = max_body_bytes
        self.slots = StreamSlots(max_streams)
        self.idle_timeout = idle_timeout
        self.tool_calls_in_reasoning = tool_calls_in_reasoning
        self.models = {m.id: m for m in engine.models()}

    def authorized(self, headers: Any, protocol: str) -> bool:
        """Whether the request may proceed (always, without an API key)."""
        if self.api_key is None:
            return True
        return key_matches(headers, self.api_key, anthropic=protocol == "messages")

    # -- request handling ----------------------------------------------------------
    def prepare(self, protocol: str, raw: bytes | dict[str, Any]) -> _Prepared:
        if isinstance(raw, dict):
            body = raw
        else:
            try:
                body = msgspec.json.decode(raw)
            except msgspec.DecodeError as exc:
                raise BadRequest(f"the request body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise BadRequest("'model' is required and must be a string")
        info = self.models.get(model)
        if info is None:
            raise BadRequest(
                f"model {_short(model)} does not exist; available: {', '.join(sorted(self.models))}",
                status=404,
                code="model_not_found",
            )
        if protocol == "messages":
            _check_messages(body, protocol)
            _positive_int(body, "max_tokens", required=True)
        elif protocol == "chat.completions":
            _check_messages(body, protocol)
            _positive_int(body, "max_tokens", required=False)
            _positive_int(body, "max_completion_tokens", required=False)
        else:
            inp = body.get("input")
            if inp is not None and not isinstance(inp, (str, list)):
                raise BadRequest(f"'input' must be a string or a list, got {type(inp).__name__}")
            _positive_int(body, "max_output_tokens", required=False)
        summary = False
        if protocol == "responses":
            reasoning = body.get("reasoning")
            if reasoning is not None and not isinstance(reasoning, dict):
                raise BadRequest(f"'reasoning' must be an object, got {type(reasoning).__name__}")
            summary = isinstance(reasoning, dict) and reasoning.get("summary") in _SUMMARY_MODES
        tools_raw = body.get("tools")
        try:
            tools = normalize_tools(tools_raw) if tools_raw is not None else None
        except ToolSpecError as exc:
            raise BadRequest(str(exc)) from None
        choice = body.get("tool_choice")
        _check_tool_choice(protocol, choice, tools)
        tool_off = choice == "none" or (isinstance(choice, dict) and choice.get("type") == "none")
        thinking: bool | None = None
        kwargs = body.get("chat_template_kwargs")
        if isinstance(kwargs, dict) and isinstance(kwargs.get("enable_thinking"), bool):
            thinking = kwargs["enable_thinking"]
        th = body.get("thinking")
        if isinstance(th, dict) and th.get("type") in ("enabled", "disabled"):
            thinking = th["type"] == "enabled"
        streaming = body.get("stream")
        if streaming is None:
            streaming = False
        if not isinstance(streaming, bool):
            raise BadRequest(f"'stream' must be a boolean, got {_short(streaming)}")
        planner = getattr(self.engine, "plan", None)
        if callable(planner):
            request = EngineRequest(model=info.id, protocol=protocol, body=body, tools=tools, stream=streaming)
            try:
                plan = planner(request)
            except Exception as exc:
                refusal = _client_error(exc)
                if refusal is None:
                    raise
                raise refusal from exc
            starts_open = getattr(plan, "reasoning_starts_open", None)
            return _Prepared(
                protocol=protocol,
                body=body,
                info=info,
                tools=tools,
                tool_parser=info.tool_parser if getattr(plan, "tools_on", not tool_off) else None,
                enable_thinking=getattr(plan, "enable_thinking", thinking),
                streaming=streaming,
                reasoning_summary=summary,
                reasoning_starts_open=starts_open if isinstance(starts_open, bool) else None,
                plan=plan,
            )
        return _Prepared(
            protocol=protocol,
            body=body,
            info=info,
            tools=tools,
            tool_parser=None if tool_off else info.tool_parser,
            enable_thinking=thinking,
            streaming=streaming,
            reasoning_summary=summary,
        )

    def opener(self, p: _Prepared) -> Callable[[], AbstractAsyncContextManager[DeltaStream]]:
        request = EngineRequest(
            model=p.info.id, protocol=p.protocol, body=p.body, tools=p.tools, stream=p.streaming, plan=p.plan
        )
        tools = [{"name": t.name, "parameters": t.parameters} for t in p.tools] if p.tools is not None else None

        def open_stream() -> AbstractAsyncContextManager[DeltaStream]:
            source: AsyncIterator[Any] = self.engine.generate(request)
            if self.idle_timeout is not None:
                source = idle_guard(source, self.idle_timeout)
            # prefetch=0: the response's own task runs the parsers inline (no task, no memory stream
            # per response); the engine's queue already buffers its output.
            return stream(
                source,
                tool_parser=p.tool_parser,
                reasoning_parser=p.info.reasoning_parser,
                tools=tools,
                enable_thinking=p.enable_thinking,
                reasoning_starts_open=p.reasoning_starts_open,
                tokenizer=p.info.tokenizer,
                tool_calls_in_reasoning=self.tool_calls_in_reasoning,
                prefetch=0,
            )

        return open_stream

    def framer(self, p: _Prepared) -> Framer:
        model = p.info.id
        if p.protocol == "chat.completions":
            opts = p.body.get("stream_options") or {}
            return ChatCompletionsFramer(
                model,
                include_usage=bool(isinstance(opts, dict) and opts.get("include_usage")),
                logprobs=bool(p.body.get("logprobs")),
                reasoning_field="reasoning" if p.body.get("reasoning_field") == "reasoning" else "reasoning_content",
            )
        if p.protocol == "responses":
            return ResponsesFramer(model, reasoning_summary=p.reasoning_summary)
        # A stream that is only sent keeps no block text but the thinking it signs.
        return AnthropicFramer(model, signer=self.signer, keep_message=not p.streaming)

    async def complete(self, p: _Prepared) -> dict[str, Any]:
        """A non-streaming body, built by the protocol's framer (the same one a stream uses).

        Raises:
            DeltaflowError: the pipeline or the engine failed.
        """
        framer = self.framer(p)
        if isinstance(framer, ChatCompletionsFramer):
            async with self.opener(p)() as deltas:
                message = await collect_async(deltas)
            return framer.completion(message, deltas.usage)
        assert isinstance(framer, (ResponsesFramer, AnthropicFramer))
        framer.start()
        async with self.opener(p)() as deltas:
            feed = framer.feed
            async for delta in deltas:
                feed(delta)
        framer.finish(deltas.usage)
        return framer.response() if isinstance(framer, ResponsesFramer) else framer.message()


class _SlotReleasing:
    """An ASGI response that gives its stream slot back when it ends (normally, on error or on disconnect)."""

    def __init__(self, inner: SSEResponse, slots: StreamSlots) -> None:
        self._inner = inner
        self._slots = slots

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await self._inner(scope, receive, send)
        finally:
            self._slots.release()


def _route(app_state: DeltaflowApp, protocol: str) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> Response:
        if not app_state.authorized(request.headers, protocol):
            has = "authorization" in request.headers or (protocol == "messages" and "x-api-key" in request.headers)
            _log.info("unauthorized", protocol=protocol, key_given=has)
            return _limit_response(protocol, "auth", _auth_message(has, protocol))
        try:
            raw = await read_body(request, app_state.max_body_bytes)
        except BodyTooLarge as exc:
            _log.info("body_too_large", protocol=protocol, limit=exc.limit)
            return _limit_response(protocol, "too_large", str(exc))
        except ClientDisconnect:
            return Response(status_code=400)
        try:
            p = app_state.prepare(protocol, raw)
        except BadRequest as exc:
            _log.info("bad_request", protocol=protocol, error=str(exc))
            body = _error_body(protocol, exc.status, str(exc), exc.code, exc.param)
            return JSONResponse(body, status_code=exc.status)
        slots = app_state.slots
        if not slots.try_acquire():
            _log.warning("too_many_streams", protocol=protocol, limit=slots.limit)
            return _limit_response(protocol, "busy", _busy_message(slots.limit))
        if p.streaming:
            try:
                sse = SSEResponse(
                    app_state.opener(p),
                    app_state.framer(p),
                    done_marker=protocol == "chat.completions",
                    heartbeat=app_state.heartbeat,
                )
            except BaseException:
                slots.release()
                raise
            return _SlotReleasing(sse, slots)  # type: ignore[return-value]
        try:
            body = await app_state.complete(p)
        except DeltaflowError as exc:
            status = failure_status(exc)
            _log.warning("request_failed", protocol=protocol, status=status, error=str(exc), cause=repr(exc.__cause__))
            message = str(exc.__cause__) if isinstance(exc.__cause__, EngineIdleError) else str(exc)
            return JSONResponse(_error_body(protocol, status, message), status_code=status)
        finally:
            slots.release()
        return JSONResponse(body)

    return endpoint


def create_app(
    engine: Engine | Callable[[EngineRequest], AsyncIterator[Any]] | None = None,
    *,
    tool_parser: str | None = None,
    reasoning_parser: str | None = None,
    tokenizer: Any = None,
    model: str = "deltaflow",
    heartbeat: float | None = 15.0,
    api_key: str | None = None,
    max_body_bytes: int | None = DEFAULT_MAX_BODY_BYTES,
    max_streams: int | None = DEFAULT_MAX_STREAMS,
    idle_timeout: float | None = None,
    signing_key: bytes | str | None = None,
    tool_calls_in_reasoning: str = "trailing",
) -> Starlette:
    """Build the ASGI app.

    Args:
        engine: an :class:`~deltaflow.server.engine.Engine`, or a plain
            ``fn(request) -> async iterator`` of token chunks (then
            ``tool_parser``, ``reasoning_parser``, ``tokenizer`` and ``model``
            describe the one model it serves). None: the bundled replay engine.
        tool_parser: for a plain function engine.
        reasoning_parser: for a plain function engine.
        tokenizer: for a plain function engine that yields token ids.
        model: the model id of a plain function engine.
        heartbeat: seconds of idle before an SSE ``: ping`` (None: never).
        api_key: when set, every route needs it: ``Authorization: Bearer KEY``
            on the OpenAI routes (``/v1/chat/completions``, ``/v1/responses``,
            ``/v1/models``, ``/v1/ws``), ``x-api-key: KEY`` (or Bearer) on
            ``/v1/messages``; compared in constant time. A missing or wrong
            key is a 401 in the protocol's error shape (the WebSocket sends
            the error and closes with 1008). None: no authentication.
        max_body_bytes: the largest request body accepted (also the largest
            first WebSocket message); the body is read incrementally and
            abandoned at the limit, or refused at once when
            ``Content-Length`` announces more: 413. None: no limit.
        max_streams: how many engine streams may run at once (streaming and
            non-streaming requests and WebSockets each hold one until the
            stream ends or the client disconnects); beyond it a request gets
            a 429 with ``Retry-After`` (WebSocket: close 1013). None: no limit.
        idle_timeout: seconds the engine may produce nothing (including
            before the first chunk); then the engine's iterator is closed and
            the stream ends with the protocol's error event ``engine idle for
            N s`` (a non-streaming request gets a 504). Heartbeats keep
            going out until then. None: no timeout.
        signing_key: the key of the thinking block signatures on
            ``/v1/messages`` (:class:`~deltaflow.signing.ReasoningSigner`;
            replicas with the same key verify each other's). None: a random
            key per process (a warning is logged once).
        tool_calls_in_reasoning: what a tool block inside reasoning is, for
            every model served: ``"trailing"`` (default), ``"always"`` or
            ``"never"`` (see :class:`~deltaflow.ResponseParser`).

    Returns:
        A Starlette application.

    Raises:
        ValueError: a limit is not positive, ``signing_key`` is empty, or
            ``tool_calls_in_reasoning`` is not one of the policies.
    """
    check_tool_calls_in_reasoning(tool_calls_in_reasoning)
    for name, value in (
        ("max_body_bytes", max_body_bytes),
        ("max_streams", max_streams),
        ("idle_timeout", idle_timeout),
    ):
        if value is not None and value <= 0:
            raise ValueError(f"{name} must be positive or None, got {_short(value)}")
    if engine is None:
        eng: Engine = ReplayEngine()
    elif hasattr(engine, "models") and hasattr(engine, "generate"):
        eng = engine
    elif callable(engine):
        eng = FunctionEngine(engine, ModelInfo(model, tool_parser, reasoning_parser, tokenizer))
    else:
        raise TypeError("engine must be an Engine (models() and generate()) or a function request -> async iterator")
    state = DeltaflowApp(
        eng,
        heartbeat=heartbeat,
        api_key=api_key or None,
        max_body_bytes=max_body_bytes,
        max_streams=max_streams,
        idle_timeout=idle_timeout,
        signer=ReasoningSigner(signing_key),
        tool_calls_in_reasoning=tool_calls_in_reasoning,
    )

    async def models(request: Request) -> Response:
        if not state.authorized(request.headers, "models"):
            return _limit_response("models", "auth", _auth_message("authorization" in request.headers, "models"))
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {"id": m.id, "object": "model", "created": 0, "owned_by": "deltaflow", "description": m.description}
                    for m in state.models.values()
                ],
            }
        )

    async def websocket(ws: WebSocket) -> None:
        authorized = state.authorized(ws.headers, "ws")  # checked on the handshake's headers
        await ws.accept()
        if not authorized:
            _, body = _limit_body("ws", "auth", _auth_message("authorization" in ws.headers, "ws"))
            await ws.send_text(msgspec.json.encode(body).decode())
            await ws.close(code=1008, reason="invalid or missing API key")
            return
        try:
            message = await ws.receive()
        except WebSocketDisconnect:
            return
        if message["type"] == "websocket.disconnect":
            return
        first: str | bytes = message.get("text") or message.get("bytes") or b""
        size = len(first.encode()) if isinstance(first, str) else len(first)
        if state.max_body_bytes is not None and size > state.max_body_bytes:
            _, body = _limit_body("ws", "too_large", str(BodyTooLarge(state.max_body_bytes)))
            await ws.send_text(msgspec.json.encode(body).decode())
            await ws.close(code=1009)
            return
        protocol = "chat.completions"
        try:
            req = msgspec.json.decode(first)
            if not isinstance(req, dict):
                raise BadRequest("the request must be a JSON object")
            asked = req.pop("protocol", "chat.completions")
            if asked not in _PROTOCOLS:
                raise BadRequest(f"'protocol' must be one of {', '.join(_PROTOCOLS)}, got {_short(asked)}")
            protocol = asked
            p = state.prepare(protocol, req)
        except (BadRequest, msgspec.DecodeError) as exc:
            status, code = (exc.status, exc.code) if isinstance(exc, BadRequest) else (400, None)
            await ws.send_text(msgspec.json.encode(_error_body(protocol, status, str(exc), code)).decode())
            await ws.close(code=1008)
            return
        if not state.slots.try_acquire():
            _, body = _limit_body(protocol, "busy", _busy_message(state.slots.limit))
            await ws.send_text(msgspec.json.encode(body).decode())
            await ws.close(code=1013, reason="too many concurrent streams")
            return
        enc = msgspec.json.Encoder()
        failed = False

        async def emit(batch: list[WireEvent]) -> None:
            nonlocal failed
            for ev in batch:
                if ev.event == "error" or (ev.event is None and hasattr(ev.data, "error")):
                    failed = True
                await ws.send_text(enc.encode(ev.data).decode())

        try:
            await run_framed(state.opener(p), state.framer(p), emit)
        except WebSocketDisconnect:
            return
        finally:
            state.slots.release()
        await ws.close(code=1011 if failed else 1000)

    async def healthz(request: Request) -> Response:
        # Unauthenticated, like a load balancer's probe: it says only whether the upstreams answer.
        check = getattr(eng, "health", None)
        if check is None:
            return JSONResponse({"status": "ok"})
        upstreams = await check()
        ok = all(upstreams.values())
        return JSONResponse({"status": "ok" if ok else "degraded", "upstreams": upstreams},
                            status_code=200 if ok else 503)

    async def metrics(request: Request) -> Response:
        if not state.authorized(request.headers, "chat.completions"):
            return _limit_response("chat.completions", "auth", _auth_message("authorization" in request.headers,
                                                                             "chat.completions"))
        text, content_type = eng.metrics_text()  # type: ignore[attr-defined]
        return Response(text, media_type=content_type)

    routes = [
        Route("/v1/chat/completions", _route(state, "chat.completions"), methods=["POST"]),
        Route("/v1/responses", _route(state, "responses"), methods=["POST"]),
        Route("/v1/messages", _route(state, "messages"), methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        WebSocketRoute("/v1/ws", websocket),
        Route("/healthz", healthz, methods=["GET"]),
    ]
    if callable(getattr(eng, "metrics_text", None)):
        routes.append(Route("/metrics", metrics, methods=["GET"]))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        close = getattr(eng, "aclose", None)
        if callable(close):
            await close()  # the upstreams' pooled connections

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.deltaflow = state
    return app
