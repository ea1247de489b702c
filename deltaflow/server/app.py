"""The ASGI app: OpenAI Chat Completions, OpenAI Responses and Anthropic Messages in front of an engine.

Routes: ``POST /v1/chat/completions``, ``POST /v1/responses``,
``POST /v1/messages`` (streaming and not), ``GET /v1/models``, and the
WebSocket ``/v1/ws`` (the client sends one JSON request with a
``"protocol"`` field; the server sends one JSON message per event and
closes with 1000, or 1011 after an error event, 1008 for a bad request).

The request's ``tools`` drive name filtering; ``tool_choice="none"`` turns
tool parsing off. Bad requests get a 400 in the protocol's error shape.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import msgspec
import structlog
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from ..errors import DeltaflowError, ToolSpecError
from ..messages import ChatMessage
from ..pipeline.runner import DeltaStream, stream
from ..sinks.collect import collect_async
from ..sinks.framing import AnthropicFramer, ChatCompletionsFramer, ResponsesFramer
from ..sinks.framing.base import Framer, new_id, now
from ..sinks.sse import SSEResponse, iter_events
from ..stages.framer import Usage
from ..tools import ToolSpec, normalize_tools
from .engine import Engine, EngineRequest, FunctionEngine, ModelInfo, ReplayEngine

__all__ = ("create_app",)

_log = structlog.get_logger("deltaflow.server")
_PROTOCOLS = ("chat.completions", "responses", "messages")
_request_ids = itertools.count(1)


class BadRequest(Exception):
    """A client error: message and HTTP status."""

    def __init__(self, message: str, status: int = 400, code: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def _error_body(protocol: str, message: str, code: str) -> dict[str, Any]:
    if protocol == "messages":
        return {"type": "error", "error": {"type": code, "message": message}}
    return {"error": {"message": message, "type": code, "param": None, "code": code}}


class _Prepared(msgspec.Struct, kw_only=True):
    protocol: str
    body: dict[str, Any]
    info: ModelInfo
    tools: tuple[ToolSpec, ...] | None
    tool_parser: str | None
    enable_thinking: bool | None
    streaming: bool


class DeltaflowApp:
    """Holds the engine and builds responses (see :func:`create_app`)."""

    def __init__(self, engine: Engine, *, heartbeat: float | None = 15.0) -> None:
        self.engine = engine
        self.heartbeat = heartbeat
        self.models = {m.id: m for m in engine.models()}

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
                f"model {model!r} does not exist; available: {', '.join(sorted(self.models))}",
                status=404,
                code="not_found_error" if protocol == "messages" else "model_not_found",
            )
        if protocol == "messages":
            if not isinstance(body.get("messages"), list):
                raise BadRequest("'messages' is required and must be a list")
            if not isinstance(body.get("max_tokens"), int):
                raise BadRequest("'max_tokens' is required and must be an integer")
        elif protocol == "chat.completions":
            if not isinstance(body.get("messages"), list):
                raise BadRequest("'messages' is required and must be a list")
        tools_raw = body.get("tools")
        try:
            tools = normalize_tools(tools_raw) if tools_raw is not None else None
        except ToolSpecError as exc:
            raise BadRequest(str(exc)) from None
        choice = body.get("tool_choice")
        tool_off = choice == "none" or (isinstance(choice, dict) and choice.get("type") == "none")
        thinking: bool | None = None
        kwargs = body.get("chat_template_kwargs")
        if isinstance(kwargs, dict) and isinstance(kwargs.get("enable_thinking"), bool):
            thinking = kwargs["enable_thinking"]
        th = body.get("thinking")
        if isinstance(th, dict) and th.get("type") in ("enabled", "disabled"):
            thinking = th["type"] == "enabled"
        streaming = body.get("stream", False)
        if not isinstance(streaming, bool):
            raise BadRequest("'stream' must be a boolean")
        return _Prepared(
            protocol=protocol,
            body=body,
            info=info,
            tools=tools,
            tool_parser=None if tool_off else info.tool_parser,
            enable_thinking=thinking,
            streaming=streaming,
        )

    def opener(self, p: _Prepared) -> Callable[[], AbstractAsyncContextManager[DeltaStream]]:
        request = EngineRequest(model=p.info.id, protocol=p.protocol, body=p.body, tools=p.tools)
        tools = [{"name": t.name, "parameters": t.parameters} for t in p.tools] if p.tools is not None else None

        def open_stream() -> AbstractAsyncContextManager[DeltaStream]:
            return stream(
                self.engine.generate(request),
                tool_parser=p.tool_parser,
                reasoning_parser=p.info.reasoning_parser,
                tools=tools,
                enable_thinking=p.enable_thinking,
                tokenizer=p.info.tokenizer,
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
            return ResponsesFramer(model)
        return AnthropicFramer(model)

    async def complete(self, p: _Prepared) -> dict[str, Any]:
        """A non-streaming response object."""
        async with self.opener(p)() as deltas:
            message = await collect_async(deltas)
        return _complete_body(p, message, deltas.usage)


def _complete_body(p: _Prepared, m: ChatMessage, usage: Usage) -> dict[str, Any]:
    model = p.info.id
    finish = m.finish_reason or "stop"
    if p.protocol == "chat.completions":
        msg: dict[str, Any] = {"role": "assistant", "content": m.content, "reasoning_content": m.reasoning_content}
        if m.tool_calls:
            msg["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
                for c in m.tool_calls
            ]
        return {
            "id": new_id("chatcmpl-"),
            "object": "chat.completion",
            "created": now(),
            "model": model,
            "choices": [{"index": 0, "message": msg, "finish_reason": finish, "logprobs": None}],
            "usage": {
                "prompt_tokens": 0,
                "completion_tokens": usage.completion_tokens,
                "total_tokens": usage.completion_tokens,
                "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
            },
        }
    if p.protocol == "responses":
        output: list[dict[str, Any]] = []
        if m.reasoning_content:
            output.append(
                {
                    "type": "reasoning",
                    "id": new_id("rs_"),
                    "summary": [],
                    "content": [{"type": "reasoning_text", "text": m.reasoning_content}],
                    "status": "completed",
                }
            )
        if m.content:
            output.append(
                {
                    "type": "message",
                    "id": new_id("msg_"),
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": m.content, "annotations": []}],
                }
            )
        for c in m.tool_calls:
            output.append(
                {
                    "type": "function_call",
                    "id": new_id("fc_"),
                    "call_id": c.id,
                    "name": c.function.name,
                    "arguments": c.function.arguments,
                    "status": "completed",
                }
            )
        return {
            "id": new_id("resp_"),
            "object": "response",
            "created_at": now(),
            "model": model,
            "status": "completed",
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "error": None,
            "incomplete_details": None,
            "usage": {
                "input_tokens": 0,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": usage.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
                "total_tokens": usage.completion_tokens,
            },
        }
    content: list[dict[str, Any]] = []
    if m.reasoning_content:
        content.append({"type": "thinking", "thinking": m.reasoning_content, "signature": ""})
    if m.content:
        content.append({"type": "text", "text": m.content})
    for c in m.tool_calls:
        content.append({"type": "tool_use", "id": c.id, "name": c.function.name, "input": msgspec.json.decode(c.function.arguments)})
    stop = "tool_use" if m.tool_calls else ("max_tokens" if finish == "length" else "end_turn")
    return {
        "id": new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": usage.completion_tokens},
    }


def _route(app_state: DeltaflowApp, protocol: str) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> Response:
        raw = await request.body()
        try:
            p = app_state.prepare(protocol, raw)
        except BadRequest as exc:
            _log.info("bad_request", protocol=protocol, error=str(exc))
            return JSONResponse(_error_body(protocol, str(exc), exc.code), status_code=exc.status)
        if p.streaming:
            return SSEResponse(  # type: ignore[return-value]
                app_state.opener(p),
                app_state.framer(p),
                done_marker=protocol == "chat.completions",
                heartbeat=app_state.heartbeat,
            )
        try:
            body = await app_state.complete(p)
        except DeltaflowError as exc:
            return JSONResponse(_error_body(protocol, str(exc), "server_error"), status_code=500)
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

    Returns:
        A Starlette application.
    """
    if engine is None:
        eng: Engine = ReplayEngine()
    elif hasattr(engine, "models") and hasattr(engine, "generate"):
        eng = engine
    elif callable(engine):
        eng = FunctionEngine(engine, ModelInfo(model, tool_parser, reasoning_parser, tokenizer))
    else:
        raise TypeError("engine must be an Engine (models() and generate()) or a function request -> async iterator")
    state = DeltaflowApp(eng, heartbeat=heartbeat)

    async def models(request: Request) -> Response:
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
        await ws.accept()
        try:
            first = await ws.receive_text()
        except WebSocketDisconnect:
            return
        try:
            req = msgspec.json.decode(first)
            if not isinstance(req, dict):
                raise BadRequest("the request must be a JSON object")
            protocol = req.pop("protocol", "chat.completions")
            if protocol not in _PROTOCOLS:
                raise BadRequest(f"'protocol' must be one of {', '.join(_PROTOCOLS)}, got {protocol!r}")
            p = state.prepare(protocol, req)
        except (BadRequest, msgspec.DecodeError) as exc:
            code = exc.code if isinstance(exc, BadRequest) else "invalid_request_error"
            await ws.send_text(msgspec.json.encode(_error_body("chat.completions", str(exc), code)).decode())
            await ws.close(code=1008)
            return
        enc = msgspec.json.Encoder()
        failed = False
        try:
            async for batch in iter_events(state.opener(p), state.framer(p)):
                for ev in batch or ():
                    if ev.event == "error" or (ev.event is None and hasattr(ev.data, "error")):
                        failed = True
                    await ws.send_text(enc.encode(ev.data).decode())
        except WebSocketDisconnect:
            return
        await ws.close(code=1011 if failed else 1000)

    routes = [
        Route("/v1/chat/completions", _route(state, "chat.completions"), methods=["POST"]),
        Route("/v1/responses", _route(state, "responses"), methods=["POST"]),
        Route("/v1/messages", _route(state, "messages"), methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        WebSocketRoute("/v1/ws", websocket),
    ]
    app = Starlette(routes=routes)
    app.state.deltaflow = state
    return app
