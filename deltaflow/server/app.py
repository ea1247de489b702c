"""The ASGI app: OpenAI Chat Completions, OpenAI Responses and Anthropic Messages in front of an engine.

Routes: ``POST /v1/chat/completions``, ``POST /v1/responses``,
``POST /v1/messages`` (streaming and not), ``POST /v1/messages/count_tokens``,
``GET /v1/models``, the stored Responses (``GET`` and ``DELETE
/v1/responses/{id}``, ``GET /v1/responses/{id}/input_items``), and the
WebSocket ``/v1/ws`` (the client sends one JSON request with a
``"protocol"`` field; the server sends one JSON message per event and
closes with 1000, or 1011 after an error event, 1008 for a bad request or
a missing/wrong API key, 1009 for a request over the size limit, 1013 when
all stream slots are taken).

Responses state: a Responses request whose ``store`` is not false (OpenAI's
default is true) is stored once it completes, in the app's
:class:`~deltaflow.server.store.ResponseStore` (default: in memory): the
record is put *before* the final ``response.completed`` /
``response.incomplete`` event (or the non-streaming body) goes out, so a
client that has seen a response can continue from it at once. Nothing is
stored per event, and a failed or cut-off stream is not stored. A request
with ``previous_response_id`` continues a stored one: the server loads it
(an unknown id is OpenAI's 400 ``previous_response_not_found``) and hands
the engine one whole ``input``: the previous input items, the previous
output items (``message``, ``reasoning`` with its ``encrypted_content``,
``function_call``), then the new input; ``instructions`` are not inherited
(OpenAI's rule) and ``tools`` are the new request's. The previous output's
reasoning is the model's own, held by the server: when the app has a
reasoning sealer (``DeltaflowApp.sealer``), a replayed reasoning item
without ``encrypted_content`` gets one sealing its text, so a gateway that
renders only sealed reasoning renders it (reasoning a client put in its
input is never sealed by the server). ``GET
/v1/responses/{id}`` returns the stored response object, ``GET
.../input_items`` its whole input (``limit`` 1-100, default 20; ``order``
``desc`` (default) or ``asc``; ``after`` an item id), ``DELETE`` removes it
(``{"id", "object": "response", "deleted": true}``); an unknown or deleted
id is a 404 (``code: "not_found"``). A failing store does not fail the
answer: the put is logged as an error and the response still goes out.

Responses options: ``function`` tools are served; other tool types (the
hosted ``web_search``, ``file_search``, ``mcp``, ``computer_use_preview``,
``local_shell``, ``custom``, ``namespace`` ...) are refused with a 400 naming
the tool, or dropped with a log line under ``unsupported_tools="ignore"``
(a ``tool_choice`` forcing a dropped tool then becomes ``"auto"``).
``parallel_tool_calls`` (a boolean), ``truncation`` (``"auto"`` or
``"disabled"``: both serve the whole input; a prompt over the context is
refused, never cut), ``include`` (strings, handed to the framer) and
``text`` are accepted; a ``text.format`` of ``json_schema`` or
``json_object`` is accepted but not enforced (the model is not
constrained to the schema; logged), ``conversation`` is refused.

Anthropic extras: ``anthropic-version`` and ``anthropic-beta`` headers are
accepted and never refused (betas are ignored, logged at debug).
``/v1/messages/count_tokens`` answers ``{"input_tokens": N}``, the length
of the prompt the request renders to, when the engine plans requests (the
gateway, which renders and tokenizes prompts); other engines have no
prompt to count, and get a 400 saying so.

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

An engine that parses its own output (the gateway in front of a Chat
Completions upstream: a plan whose ``passthrough`` is true, and an engine
with ``deltas(request, usage)``) is not run through the parsers: its deltas
go to the framers as they come, read only as the client consumes them, under
the same idle timeout, and closing the response closes the engine's stream.

Non-streaming bodies are built by the same framers as the streams (the
final response object of :class:`~deltaflow.sinks.ResponsesFramer`, the
final message of :class:`~deltaflow.sinks.AnthropicFramer`, the
``chat.completion`` of :class:`~deltaflow.sinks.ChatCompletionsFramer`), so
the two cannot disagree.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import msgspec
import structlog
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from ..errors import DeltaflowError, StageError, ToolSpecError
from ..messages import DeltaMessage
from ..pipeline.runner import DeltaStream, stream
from ..pipeline.separators import drop_blank_separators
from ..signing import ReasoningSealer, ReasoningSigner
from ..sinks.collect import collect_async
from ..sinks.framing import AnthropicFramer, ChatCompletionsFramer, ResponsesFramer
from ..sinks.framing.base import (
    Framer,
    WireEvent,
    anthropic_error_type,
    failure_status,
    new_id,
    now,
    openai_error_type,
)
from ..sinks.sse import OpenStream, SSEResponse, run_framed
from ..stages.assembler import Usage
from ..stages.tool_feeder import check_tool_calls_in_reasoning
from ..tools import ToolSpec, normalize_tools
from .collector import tune_collector
from .engine import Engine, EngineRequest, FunctionEngine, ModelInfo, ReplayEngine
from .limits import BodyTooLarge, EngineIdleError, StreamSlots, idle_guard, key_matches, read_body
from .store import MemoryResponseStore, ResponseStore, StoredResponse

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
        # "system" between turns is not in Anthropic's documented API, but Claude Code sends it (read as an
        # instruction in place by deltaflow.prompt.readers.anthropic)
        if protocol == "messages" and role not in ("user", "assistant", "system"):
            raise BadRequest(f"messages[{i}].role must be 'user', 'assistant' or 'system', got {_short(role)}")


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


UNSUPPORTED_TOOL_POLICIES = ("refuse", "ignore")
"""What the server does with a Responses tool of a type it cannot serve (see :func:`create_app`)."""
_TRUNCATION = ("auto", "disabled")
_TEXT_FORMATS = ("text", "json_object", "json_schema")
# Prefixes of the ids given to stored input items that came without one (OpenAI's item id prefixes).
_ITEM_IDS = {"message": "msg_", "function_call": "fc_", "function_call_output": "fco_", "reasoning": "rs_"}
# The output item types a continuation replays (what the Responses framer writes).
_REPLAYED = frozenset({"message", "reasoning", "function_call"})


def _decode_body(raw: bytes | dict[str, Any]) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        body = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise BadRequest(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body


def _tool_label(tool: dict[str, Any]) -> str:
    """`` 'name'`` of a tool that has one (an MCP tool: its ``server_label``), else ``""``."""
    name = tool.get("name", tool.get("server_label"))
    return f" {_short(name)}" if isinstance(name, str) else ""


def _responses_tools(body: dict[str, Any], policy: str) -> dict[str, Any]:
    """The body with its non-function tools refused (``"refuse"``) or dropped (``"ignore"``).

    Raises:
        BadRequest: a tool, or a ``tool_choice``, of a type other than ``function`` under ``"refuse"``.
    """
    tools = body.get("tools")
    choice = body.get("tool_choice")
    hosted_choice = isinstance(choice, dict) and choice.get("type") not in ("function", "allowed_tools", None)
    if not isinstance(tools, list) and not hosted_choice:
        return body  # no tools, or not a list (normalize_tools says so)
    kept: list[Any] = []
    dropped: list[str] = []
    for i, tool in enumerate(tools if isinstance(tools, list) else ()):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind is None or kind == "function":
            kept.append(tool)
            continue
        assert isinstance(tool, dict)
        if policy == "refuse":
            raise BadRequest(
                f"tools[{i}]{_tool_label(tool)} is of type {_short(kind)}, which this server cannot serve: it runs "
                "'function' tools only (hosted tools such as web_search, file_search, mcp or computer_use_preview, "
                "and custom or namespace tools, are not available); remove the tool, or have the operator start "
                "the server with unsupported_tools='ignore' (deltaflow serve --unsupported-tools ignore) to drop "
                "such tools",
                param=f"tools[{i}].type",
                code="unsupported_value",
            )
        dropped.append(f"{kind}{_tool_label(tool)}")
    out = body
    if dropped:
        _log.info("unsupported_tools_dropped", tools=dropped)
        out = {**body, "tools": kept}
    if hosted_choice:
        assert isinstance(choice, dict)
        if policy == "refuse":
            raise BadRequest(
                f"'tool_choice' of type {_short(choice.get('type'))} names a tool type this server cannot serve: "
                "use 'auto', 'required', 'none', {'type': 'function', 'name': ...} or {'type': 'allowed_tools', ...}",
                param="tool_choice",
                code="unsupported_value",
            )
        _log.info("unsupported_tool_choice_dropped", tool_choice=_short(choice))
        out = {**out, "tool_choice": "auto"}
    return out


def _check_responses_options(body: dict[str, Any]) -> tuple[str, ...]:
    """Check the Responses options the server accepts without acting on them; returns ``include``.

    Raises:
        BadRequest: ``parallel_tool_calls``, ``truncation``, ``text`` or ``include`` of the wrong form.
    """
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise BadRequest(
            f"'parallel_tool_calls' must be a boolean, got {_short(parallel)}", param="parallel_tool_calls"
        )
    truncation = body.get("truncation")
    if truncation is not None and truncation not in _TRUNCATION:
        raise BadRequest(
            f"'truncation' must be one of {', '.join(_TRUNCATION)}, got {_short(truncation)}", param="truncation"
        )
    text = body.get("text")
    if text is not None:
        if not isinstance(text, dict):
            raise BadRequest(f"'text' must be an object, got {type(text).__name__}", param="text")
        fmt = text.get("format")
        if fmt is not None:
            kind = fmt.get("type") if isinstance(fmt, dict) else None
            if kind not in _TEXT_FORMATS:
                raise BadRequest(
                    f"'text.format' must be an object with type one of {', '.join(_TEXT_FORMATS)}, got {_short(fmt)}",
                    param="text.format",
                )
            if kind != "text":
                # Accepted so that clients asking for structured output still get an answer; nothing
                # constrains the model to the format, so the answer may not be valid JSON.
                _log.info("text_format_not_enforced", format=kind)
    include = body.get("include")
    if include is None:
        return ()
    if not isinstance(include, list) or not all(isinstance(x, str) for x in include):
        raise BadRequest(f"'include' must be an array of strings, got {_short(include)}", param="include")
    return tuple(include)


def _input_items(raw: Any) -> list[dict[str, Any]]:
    """A Responses ``input`` in item form, each item with an ``id`` (copies; the request is not changed).

    A string is one user ``message`` item; an item given without ``type`` but with a
    ``role`` gets ``"type": "message"``; contents are kept as sent.

    Raises:
        BadRequest: an entry of the list is not an object.
    """
    if raw is None:
        return []
    if isinstance(raw, str):
        return [
            {"type": "message", "id": new_id("msg_"), "role": "user", "content": [{"type": "input_text", "text": raw}]}
        ]
    items: list[dict[str, Any]] = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise BadRequest(f"input[{i}] must be an input item object, got {type(item).__name__}", param=f"input[{i}]")
        kind = item.get("type", "message" if "role" in item else None)
        out = dict(item)
        if kind is not None:
            out["type"] = kind
        if not isinstance(out.get("id"), str):
            out["id"] = new_id(_ITEM_IDS.get(kind, "item_") if isinstance(kind, str) else "item_")
        items.append(out)
    return items


def _reasoning_text(item: dict[str, Any]) -> str:
    """A reasoning item's text as the Responses reader takes it: its ``content`` texts, else its ``summary`` texts."""
    for key in ("content", "summary"):
        parts = item.get(key)
        if not isinstance(parts, list):
            continue
        texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
        if texts:
            return "\n".join(texts)
    return ""


def _history(previous: StoredResponse, seal: Callable[[str], str] | None) -> list[dict[str, Any]]:
    """What a continuation of ``previous`` starts with: its input, then its replayable output items.

    The output's reasoning items are the model's own, held by this server: with a ``seal`` (the app's
    reasoning sealer, when it has one) each gets an ``encrypted_content`` sealing its text unless it has
    one, so a gateway that renders only sealed reasoning renders it. Reasoning in the previous *input*
    is left as it is: a client wrote it, or it was sealed when it was replayed before.
    """
    output = previous.response.get("output")
    replayed: list[dict[str, Any]] = []
    for item in output if isinstance(output, list) else ():
        if not isinstance(item, dict) or item.get("type") not in _REPLAYED:
            continue
        if seal is not None and item.get("type") == "reasoning" and not isinstance(item.get("encrypted_content"), str):
            text = _reasoning_text(item)
            if text:
                item = {**item, "encrypted_content": seal(text)}
        replayed.append(item)
    return [*previous.input_items, *replayed]


class _Draft(msgspec.Struct, frozen=True, kw_only=True):
    """What a Responses request will store once its response is complete (all but the response itself)."""

    input_items: list[dict[str, Any]]
    instructions: str | None
    tools: list[dict[str, Any]] | None
    previous_response_id: str | None


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
    include: tuple[str, ...] = ()
    """Responses ``include`` (e.g. ``reasoning.encrypted_content``), for the framer."""
    stored: _Draft | None = None
    """Responses: what to store when the response completes (None: ``store`` is false, or another protocol)."""


def _opened_already() -> AbstractAsyncContextManager[DeltaStream]:
    raise RuntimeError("this response's stream was already opened")


class _StoringFramer:
    """A :class:`ResponsesFramer` whose final events go out only once the response is stored.

    Its :meth:`open_stream` opens the pipeline; when the pipeline has ended
    without an error it finishes the inner framer, awaits the store's put,
    and keeps the final events for :meth:`finish` (which the stream's
    writer calls right after): so ``response.completed`` reaches the client
    only when the response can be continued from, on any replica. A stream
    that fails or is cut off never reaches the put.
    """

    def __init__(
        self,
        inner: ResponsesFramer,
        open_stream: OpenStream,
        save: Callable[[dict[str, Any]], Any],
    ) -> None:
        self._inner = inner
        self._open = open_stream
        self._save = save
        self._last: list[WireEvent] | None = None
        # The inner framer's own bound methods: a delta costs no extra call.
        self.start: Callable[[], list[WireEvent]] = inner.start
        self.feed: Callable[[Any], list[WireEvent]] = inner.feed
        self.error: Callable[[BaseException], list[WireEvent]] = inner.error

    @contextlib.asynccontextmanager
    async def open_stream(self) -> AsyncIterator[DeltaStream]:
        """The pipeline; on a clean end, finish and store (see the class docstring)."""
        opened, self._open = self._open(), _opened_already  # the opener (the planned request) is let go
        async with opened as deltas:
            yield deltas
        self._last = self._inner.finish(deltas.usage)
        await self._save(self._inner.response())

    def finish(self, usage: Usage | None = None) -> list[WireEvent]:
        """The final events, kept by :meth:`open_stream` once the response was stored."""
        if self._last is None:
            return self._inner.finish(usage)
        last, self._last = self._last, []
        return last


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
        sealer: ReasoningSealer | None = None,
        tool_calls_in_reasoning: str = "trailing",
        response_store: ResponseStore | None = None,
        unsupported_tools: str = "refuse",
        blank_separators: str = "drop",
        coalesce: bool = False,
    ) -> None:
        self.engine = engine
        self.blank_separators = blank_separators
        self.coalesce = coalesce
        self.response_store: ResponseStore = response_store if response_store is not None else MemoryResponseStore()
        self.unsupported_tools = unsupported_tools
        self.signer = signer if signer is not None else ReasoningSigner()
        self.sealer = sealer if sealer is not None else ReasoningSealer.from_signer(self.signer)
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

    # -- stored responses ----------------------------------------------------------
    async def lookup(self, response_id: str) -> StoredResponse | None:
        """The stored response, or None.

        Raises:
            BadRequest: a 500: the store failed (the cause is logged, not sent).
        """
        try:
            return await self.response_store.get(response_id)
        except Exception as exc:
            _log.error("response_store_failed", op="get", response_id=response_id, error=str(exc))
            raise BadRequest("the response store is unavailable", status=500) from exc

    async def save(self, p: _Prepared, response: dict[str, Any]) -> None:
        """Store a completed response (nothing when ``store`` was false).

        A failing store is logged as an error and not raised: the answer
        still goes out, and only its continuation is lost.
        """
        draft = p.stored
        if draft is None:
            return
        created = response.get("created_at")
        record = StoredResponse(
            response=response,
            input_items=draft.input_items,
            instructions=draft.instructions,
            tools=draft.tools,
            model=p.info.id,
            created_at=created if isinstance(created, int) else now(),
            previous_response_id=draft.previous_response_id,
        )
        try:
            await self.response_store.put(response["id"], record)
        except Exception as exc:
            _log.error("response_store_failed", op="put", response_id=response.get("id"), error=str(exc))

    # -- request handling ----------------------------------------------------------
    async def accept(self, protocol: str, raw: bytes | dict[str, Any]) -> _Prepared:
        """:meth:`prepare` after loading the stored state the request names (``previous_response_id``).

        Raises:
            BadRequest: as :meth:`prepare`; a ``previous_response_id`` that is
                not a string or names no stored response (OpenAI's 400
                ``previous_response_not_found``); a 500 when the store failed.
        """
        body = _decode_body(raw)
        previous = None
        if protocol == "responses":
            previous_id = body.get("previous_response_id")
            if previous_id is not None:
                if not isinstance(previous_id, str) or not previous_id:
                    raise BadRequest(
                        f"'previous_response_id' must be the id of a stored response (a string), got "
                        f"{_short(previous_id)}",
                        param="previous_response_id",
                    )
                previous = await self.lookup(previous_id)
                if previous is None:
                    raise BadRequest(
                        f"Previous response with id {_short(previous_id)} not found.",
                        code="previous_response_not_found",
                        param="previous_response_id",
                    )
            body = await self._resolve_references(body)
        return self.prepare(protocol, body, previous=previous)

    async def _resolve_references(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body with each ``item_reference`` input item replaced by the stored output item it names.

        What the AI SDK's Responses model sends for the items of a stored response instead of the items
        themselves. The items are this server's own answers, so a reasoning item gets the seal of its text
        (as a ``previous_response_id`` continuation's do) and renders as the model's thought.

        Raises:
            BadRequest: a reference without an id, or naming no item of a stored response (400, naming
                the item); a store without ``find_item`` (400 ``unsupported_value``); the store failed (500).
        """
        items = body.get("input")
        if not isinstance(items, list) or not any(
            isinstance(i, dict) and i.get("type") == "item_reference" for i in items
        ):
            return body
        find = getattr(self.response_store, "find_item", None)
        resolved: list[Any] = []
        for n, item in enumerate(items):
            if not (isinstance(item, dict) and item.get("type") == "item_reference"):
                resolved.append(item)
                continue
            param = f"input[{n}].id"
            item_id = item.get("id")
            if not isinstance(item_id, str) or not item_id:
                raise BadRequest(f"{param}: an item_reference needs the 'id' of a stored item, got "
                                 f"{_short(item_id)}", param=param)
            if find is None:
                raise BadRequest(f"{param}: item references need a response store that finds items by id, and "
                                 "this server's store does not; send the item itself", param=param,
                                 code="unsupported_value")
            try:
                found = await find(item_id)
            except Exception as exc:
                _log.error("response_store_failed", op="find_item", item_id=item_id, error=str(exc))
                raise BadRequest("the response store is unavailable", status=500) from exc
            if found is None:
                raise BadRequest(f"Item with id {_short(item_id)} not found.", param=param)
            stored = dict(found[1])
            if stored.get("type") == "reasoning" and not isinstance(stored.get("encrypted_content"), str):
                text = _reasoning_text(stored)
                if text:
                    stored["encrypted_content"] = self.sealer.seal(text)
            resolved.append(stored)
        return {**body, "input": resolved}

    def model_info(self, body: dict[str, Any]) -> ModelInfo:
        """The served model the body's ``model`` names.

        Raises:
            BadRequest: ``model`` is missing or not a string (400), or not served (404 ``model_not_found``).
        """
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
        return info

    def prepare(
        self, protocol: str, raw: bytes | dict[str, Any], *, previous: StoredResponse | None = None
    ) -> _Prepared:
        """Check a request and plan it (a planning engine's ``plan`` runs here).

        Args:
            protocol: ``"chat.completions"``, ``"responses"`` or ``"messages"``.
            raw: the body, as bytes or decoded.
            previous: the stored response a Responses body's
                ``previous_response_id`` names, loaded (see :meth:`accept`).

        Raises:
            BadRequest: the request is refused (the status, code and parameter say why).
        """
        body = _decode_body(raw)
        info = self.model_info(body)
        include: tuple[str, ...] = ()
        draft: _Draft | None = None
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
            body, draft = self._responses_state(body, previous)
            body = _responses_tools(body, self.unsupported_tools)
            include = _check_responses_options(body)
            if draft is not None:
                served = body.get("tools")  # after unsupported_tools="ignore" dropped what it drops
                draft = msgspec.structs.replace(draft, tools=served if isinstance(served, list) else None)
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
                include=include,
                stored=draft,
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
            include=include,
            stored=draft,
        )

    def _responses_state(
        self, body: dict[str, Any], previous: StoredResponse | None
    ) -> tuple[dict[str, Any], _Draft | None]:
        """Resolve ``previous_response_id`` into one whole ``input``, and draft what ``store`` keeps.

        Returns:
            The body the engine gets (with ``previous``: the previous input
            and output items, then the new input, and no
            ``previous_response_id``), and the draft record (None when
            ``store`` is false).

        Raises:
            BadRequest: ``store`` is not a boolean, ``conversation`` is given,
                ``previous_response_id`` was not loaded, an input entry is not
                an object.
        """
        store = body.get("store")
        if store is not None and not isinstance(store, bool):
            raise BadRequest(f"'store' must be a boolean, got {_short(store)}", param="store")
        if body.get("conversation") is not None:
            raise BadRequest(
                "'conversation' (OpenAI's Conversations API) is not supported: continue a response with "
                "'previous_response_id', or send the whole conversation in 'input'",
                param="conversation",
                code="unsupported_value",
            )
        previous_id = body.get("previous_response_id")
        if previous_id is not None and previous is None:
            raise BadRequest(
                "'previous_response_id' was not resolved: the server loads the stored response before "
                "preparing the request (DeltaflowApp.accept)",
                param="previous_response_id",
            )
        if store is False and previous is None:
            return body, None  # nothing to resolve, nothing to keep: the body goes as sent
        items = _input_items(body.get("input"))
        if previous is not None:
            seal = getattr(getattr(self, "sealer", None), "seal", None)  # the Responses framers' sealer, if any
            items = [*_history(previous, seal if callable(seal) else None), *items]
            body = {k: v for k, v in body.items() if k != "previous_response_id"}
            body["input"] = items
        if store is False:
            return body, None
        instructions = body.get("instructions")
        return body, _Draft(
            input_items=items,
            instructions=instructions if isinstance(instructions, str) else None,
            tools=None,  # the tools as served: filled in by prepare
            previous_response_id=previous_id if previous is not None else None,
        )

    def opener(self, p: _Prepared) -> Callable[[], AbstractAsyncContextManager[DeltaStream]]:
        """What opens the response's stream of deltas: the engine's output through the parsers, or, for a
        passthrough plan of an engine with ``deltas(request, usage)`` (the gateway in front of a Chat
        Completions upstream), the engine's own deltas as they come (:class:`_PassthroughStream`)."""
        request = EngineRequest(
            model=p.info.id, protocol=p.protocol, body=p.body, tools=p.tools, stream=p.streaming, plan=p.plan
        )
        deltas = getattr(self.engine, "deltas", None)
        if getattr(p.plan, "passthrough", False) is True and callable(deltas):
            idle = self.idle_timeout

            def open_passthrough() -> AbstractAsyncContextManager[DeltaStream]:
                return self._shown(_passthrough(deltas, request, idle))

            return open_passthrough
        tools = p.tools  # already validated specs: the pipeline takes them as they are

        def open_stream() -> AbstractAsyncContextManager[DeltaStream]:
            source: AsyncIterator[Any] = self.engine.generate(request)
            if self.idle_timeout is not None:
                source = idle_guard(source, self.idle_timeout)
            # prefetch=0: the response's own task runs the parsers inline (no memory stream per
            # response); the engine's queue already buffers its output. With coalesce, a pump task
            # reads the engine and each step parses and writes everything read since the last one.
            return self._shown(stream(
                source,
                tool_parser=p.tool_parser,
                reasoning_parser=p.info.reasoning_parser,
                tools=tools,
                enable_thinking=p.enable_thinking,
                reasoning_starts_open=p.reasoning_starts_open,
                tokenizer=p.info.tokenizer,
                tool_calls_in_reasoning=self.tool_calls_in_reasoning,
                prefetch=0,
                coalesce=self.coalesce,
            ))

        return open_stream

    def _shown(self, opened: AbstractAsyncContextManager[DeltaStream]) -> AbstractAsyncContextManager[DeltaStream]:
        """The deltas as the client sees them: without blank separators unless the app keeps them."""
        if self.blank_separators == "keep":
            return opened
        return _WithoutBlankSeparators(opened)

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
            return ResponsesFramer(
                model,
                reasoning_summary=p.reasoning_summary,
                sealer=self.sealer,
                include_encrypted="reasoning.encrypted_content" in (p.include or ()),
            )
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
        if isinstance(framer, AnthropicFramer):
            return framer.message()
        response = framer.response()
        await self.save(p, response)
        return response

    def streamed(self, p: _Prepared) -> tuple[OpenStream, Framer]:
        """The pipeline opener and the framer of a streamed response (a Responses one stores before its end)."""
        framer = self.framer(p)
        open_stream = self.opener(p)
        if p.stored is None or not isinstance(framer, ResponsesFramer):
            return open_stream, framer

        # What the save needs (the draft and the model), without the plan and the body: they are not
        # kept alive while the response streams.
        kept = msgspec.structs.replace(p, body={}, plan=None)

        async def save(response: dict[str, Any]) -> None:
            await self.save(kept, response)

        storing = _StoringFramer(framer, open_stream, save)
        return storing.open_stream, storing

    def count_tokens(self, raw: bytes | dict[str, Any]) -> int:
        """The prompt length of an Anthropic ``/v1/messages/count_tokens`` body.

        The body is read, rendered and tokenized by the engine's planner
        exactly as a ``/v1/messages`` request would be (it has no
        ``max_tokens``: a placeholder of 1 stands in; a ``tool_choice`` of
        ``any`` or ``tool``, which only constrains generation, is counted
        as ``auto`` so no constraint is built).

        Raises:
            BadRequest: the body is invalid, the engine does not plan
                requests (no prompt to count), the model has no tokenizer,
                or the planner refused the request.
        """
        body = _decode_body(raw)
        info = self.model_info(body)
        _check_messages(body, "messages")
        tools_raw = body.get("tools")
        try:
            tools = normalize_tools(tools_raw) if tools_raw is not None else None
        except ToolSpecError as exc:
            raise BadRequest(str(exc)) from None
        choice = body.get("tool_choice")
        _check_tool_choice("messages", choice, tools)
        planner = getattr(self.engine, "plan", None)
        if not callable(planner):
            raise BadRequest(
                f"counting tokens needs an engine that renders and tokenizes prompts (the gateway: deltaflow serve "
                f"--upstream URL --model DIR); the engine serving model {info.id!r} ({type(self.engine).__name__}) "
                "has no prompt to count"
            )
        counted = {**body, "max_tokens": 1, "stream": False}
        if isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
            counted["tool_choice"] = {"type": "auto"}
        request = EngineRequest(model=info.id, protocol="messages", body=counted, tools=tools, stream=False)
        try:
            plan = planner(request)
        except Exception as exc:
            refusal = _client_error(exc)
            if refusal is None:
                raise
            raise refusal from exc
        if getattr(plan, "passthrough", False) is True:
            raise BadRequest(
                f"model {info.id!r} is served by a Chat Completions upstream, which renders the prompt itself: "
                "the gateway has no prompt to count"
            )
        ids = getattr(getattr(plan, "prompt", None), "token_ids", None)
        if ids is None:
            raise BadRequest(
                f"model {info.id!r} is served without a tokenizer, so its prompt cannot be counted "
                "(give the model folder a tokenizer.json)"
            )
        return len(ids)


_passthrough_ids = itertools.count(1)


class _PassthroughStream(DeltaStream):
    """A :class:`DeltaStream` over deltas an engine parsed itself (no parser runs here).

    Pulls the engine's iterator only when the consumer asks for the next
    delta (backpressure by construction); a failure of the engine reaches the
    consumer as :class:`~deltaflow.errors.StageError` (``"source"``, the
    original as ``__cause__``), as from the pipeline, so the framers and error
    statuses are the same; :meth:`aclose` closes the engine's iterator.
    """

    __slots__ = ("_it", "_ended")

    def __init__(self, source: AsyncIterator[DeltaMessage], usage: Usage, stream_id: str) -> None:
        self.usage = usage
        self.stream_id = stream_id
        self._it = source
        self._ended = False

    async def __anext__(self) -> DeltaMessage:
        if self._ended:
            raise StopAsyncIteration
        try:
            return await self._it.__anext__()
        except StopAsyncIteration:
            self._ended = True
            raise
        except Exception as exc:
            self._ended = True
            raise StageError("source", f"the source raised {exc!r}") from exc

    async def receive(self) -> DeltaMessage:
        """Receive the next delta (raises ``anyio.EndOfStream`` at the end)."""
        try:
            return await self.__anext__()
        except StopAsyncIteration:
            raise anyio.EndOfStream from None

    def take_ready(self) -> list[DeltaMessage]:
        """None: each delta is the engine's own, read when asked for."""
        return []

    async def aclose(self) -> None:
        """Stop reading and close the engine's iterator (the upstream request)."""
        self._ended = True
        close = getattr(self._it, "aclose", None)
        if close is not None:
            with anyio.CancelScope(shield=True):
                await close()

    def statistics(self) -> Any:
        """None: nothing is buffered between the engine and the consumer."""
        return None


@contextlib.asynccontextmanager
async def _passthrough(
    deltas: Callable[..., AsyncIterator[DeltaMessage]], request: EngineRequest, idle_timeout: float | None
) -> AsyncIterator[DeltaStream]:
    """Open a :class:`_PassthroughStream` of ``deltas(request, usage)``, under the idle guard when one is set."""
    usage = Usage()
    source: AsyncIterator[DeltaMessage] = deltas(request, usage)
    if idle_timeout is not None:
        source = idle_guard(source, idle_timeout)
    stream_id = f"df-p{next(_passthrough_ids)}"
    with structlog.contextvars.bound_contextvars(stream_id=stream_id, model=request.model, passthrough=True):
        out = _PassthroughStream(source, usage, stream_id)
        try:
            yield out
        finally:
            await out.aclose()


class _WithoutBlankSeparators:
    """``opened``'s deltas through :func:`~deltaflow.pipeline.separators.drop_blank_separators` (a class,
    not a generator: one frame less held by every open stream)."""

    __slots__ = ("_opened",)

    def __init__(self, opened: AbstractAsyncContextManager[DeltaStream]) -> None:
        self._opened = opened

    async def __aenter__(self) -> DeltaStream:
        return drop_blank_separators(await self._opened.__aenter__())

    async def __aexit__(self, et: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool | None:
        return await self._opened.__aexit__(et, exc, tb)


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


class _Endpoint:
    """A request handler as a plain ASGI app, which starlette's :class:`Route` runs as it is.

    A function endpoint runs inside starlette's ``request_response`` wrapper, which keeps its request
    and two more frames alive for as long as a response streams, and passes every write through one
    more ``send`` wrapper. Exceptions are still handled by the app's exception handlers: the
    :class:`~starlette.middleware.exceptions.ExceptionMiddleware` around the router runs the same
    ones.
    """

    __slots__ = ("_handle",)

    def __init__(self, handle: Callable[[Request], Awaitable[Response]]) -> None:
        self._handle = handle

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        response = await self._handle(Request(scope, receive, send))
        await response(scope, receive, send)


class _App(Starlette):
    """Starlette, whose generation endpoints are called directly while the app is as :func:`create_app` made it.

    A request goes through starlette's middleware stack (its error and exception middleware) and its
    router, which tries each route's pattern in turn, and each of their frames stays alive for as long as
    a response streams (3.2 KB per open stream, measured with tracemalloc). A ``POST`` to one of the three
    generation paths skips them and calls the endpoint itself, unless middleware or an exception handler
    has been added to the app, it is in debug mode, or it is served under a ``root_path``: then every request takes
    starlette's way, so they apply as to any endpoint. What the skipped middleware did is done anyway:
    the endpoints answer their own errors, and the server answers 500 for an exception that escapes (as
    starlette's error middleware does).
    """

    def __init__(self, direct: dict[str, _Endpoint], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._direct = direct

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if (
            scope["type"] == "http" and scope["method"] == "POST" and not self.user_middleware
            and not self.exception_handlers and not self.debug and not scope.get("root_path")
        ):
            endpoint = self._direct.get(scope["path"])
            if endpoint is not None:
                scope["app"] = self
                await endpoint(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def _route(app_state: DeltaflowApp, protocol: str) -> _Endpoint:
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
        if protocol == "messages":
            _note_betas(request.headers)
        try:
            p = await app_state.accept(protocol, raw)
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
                open_stream, framer = app_state.streamed(p)
                sse = SSEResponse(
                    open_stream,
                    framer,
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

    return _Endpoint(endpoint)


def _note_betas(headers: Any) -> None:
    """Log (at debug) the ``anthropic-beta`` features a request asks for: none changes what the server does."""
    beta = headers.get("anthropic-beta")
    if beta:
        _log.debug("anthropic_beta_ignored", betas=[b.strip() for b in beta.split(",") if b.strip()])


def _error_response(protocol: str, exc: BadRequest) -> JSONResponse:
    return JSONResponse(_error_body(protocol, exc.status, str(exc), exc.code, exc.param), status_code=exc.status)


def _not_found(response_id: str) -> BadRequest:
    return BadRequest(f"Response with id {_short(response_id)} not found.", status=404, code="not_found")


def _query_limit(request: Request) -> int:
    raw = request.query_params.get("limit")
    if raw is None:
        return 20
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= 100:
        raise BadRequest(f"'limit' must be an integer from 1 to 100, got {_short(raw)}", param="limit")
    return limit


def _input_items_page(record: StoredResponse, request: Request, response_id: str) -> dict[str, Any]:
    """One page of a stored response's input items, in OpenAI's list shape."""
    limit = _query_limit(request)
    order = request.query_params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise BadRequest(f"'order' must be 'asc' or 'desc', got {_short(order)}", param="order")
    items = record.input_items if order == "asc" else record.input_items[::-1]
    after = request.query_params.get("after")
    if after is not None:
        ids = [item.get("id") for item in items]
        if after not in ids:
            raise BadRequest(f"'after': response {_short(response_id)} has no input item {_short(after)}",
                             param="after")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0].get("id") if page else None,
        "last_id": page[-1].get("id") if page else None,
        "has_more": len(items) > limit,
    }


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
    response_store: ResponseStore | None = None,
    unsupported_tools: str = "refuse",
    blank_separators: str = "drop",
    coalesce: bool | None = None,
    tune_gc: bool = False,
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
        response_store: where Responses requests with ``store`` are kept
            and ``previous_response_id`` is resolved
            (:mod:`deltaflow.server.store`); the app closes it at shutdown.
            None: a :class:`~deltaflow.server.store.MemoryResponseStore` of
            this process (lost on restart, not shared by workers: give
            several workers an
            :class:`~deltaflow.server.store.SQLiteResponseStore` on one file).
        unsupported_tools: what a Responses tool of a type other than
            ``function`` gets: ``"refuse"`` (default: a 400 naming the tool
            and its type) or ``"ignore"`` (the tool is dropped, with a log
            line, and the request served without it).
        blank_separators: what becomes of content that is only whitespace
            between a thought or a call and a call or the end of the
            answer (the blank line a template puts after ``</think>``):
            ``"drop"`` (default: not sent, so no Chat ``content`` of
            ``"\\n\\n"``, no Anthropic text block or Responses message of
            blanks, and a replayed turn renders as the model wrote it) or
            ``"keep"`` (every character the parser gives; see
            :mod:`deltaflow.pipeline.separators`).
        coalesce: read the engine's output in a task of its own, and parse,
            frame and write everything it produced since the last write as
            one burst (one merged chunk, one socket write): under load the
            per-token cost becomes a per-burst cost; a lone token goes out
            as soon as it comes. None (default): on when the engine declares
            ``coalesce = True`` (the gateway's engine does: its upstream's
            events come in socket reads), off otherwise (each chunk its own
            deltas and write).
        tune_gc: at startup, tune the process's garbage collector for
            serving many streams (:func:`~deltaflow.server.collector.tune_collector`:
            it acts on the whole process). ``deltaflow serve`` and the worker
            factory turn it on; off by default for an app embedded in another.

    Returns:
        A Starlette application.

    Raises:
        ValueError: a limit is not positive, ``signing_key`` is empty, or
            ``tool_calls_in_reasoning``, ``unsupported_tools`` or
            ``blank_separators`` is not one of the policies.
    """
    check_tool_calls_in_reasoning(tool_calls_in_reasoning)
    if blank_separators not in ("drop", "keep"):
        raise ValueError(f"blank_separators must be 'drop' or 'keep', got {_short(blank_separators)}")
    if unsupported_tools not in UNSUPPORTED_TOOL_POLICIES:
        raise ValueError(
            f"unsupported_tools must be one of {', '.join(UNSUPPORTED_TOOL_POLICIES)}, got {_short(unsupported_tools)}"
        )
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
        response_store=response_store,
        unsupported_tools=unsupported_tools,
        blank_separators=blank_separators,
        coalesce=bool(getattr(eng, "coalesce", False)) if coalesce is None else coalesce,
    )
    use_keys = getattr(eng, "use_keys", None)
    if callable(use_keys):
        use_keys(state.signer, state.sealer)  # a planning engine verifies reasoning with the framers' keys

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
            p = await state.accept(protocol, req)
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
            await run_framed(*state.streamed(p), emit)
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

    async def stored(request: Request) -> Response:
        """``GET`` / ``DELETE /v1/responses/{id}`` and ``GET /v1/responses/{id}/input_items``."""
        if not state.authorized(request.headers, "responses"):
            return _limit_response("responses", "auth", _auth_message("authorization" in request.headers,
                                                                      "responses"))
        response_id = request.path_params["response_id"]
        try:
            if request.method == "DELETE":
                try:
                    deleted = await state.response_store.delete(response_id)
                except Exception as exc:
                    _log.error("response_store_failed", op="delete", response_id=response_id, error=str(exc))
                    raise BadRequest("the response store is unavailable", status=500) from exc
                if not deleted:
                    raise _not_found(response_id)
                return JSONResponse({"id": response_id, "object": "response", "deleted": True})
            if request.query_params.get("stream", "false").lower() not in ("false", "0"):
                raise BadRequest("streaming a stored response is not supported: retrieve it without 'stream'",
                                 param="stream", code="unsupported_value")
            record = await state.lookup(response_id)
            if record is None:
                raise _not_found(response_id)
            if request.url.path.endswith("/input_items"):
                return JSONResponse(_input_items_page(record, request, response_id))
            return JSONResponse(record.response)
        except BadRequest as exc:
            return _error_response("responses", exc)

    async def count_tokens(request: Request) -> Response:
        if not state.authorized(request.headers, "messages"):
            has = "authorization" in request.headers or "x-api-key" in request.headers
            return _limit_response("messages", "auth", _auth_message(has, "messages"))
        try:
            raw = await read_body(request, state.max_body_bytes)
        except BodyTooLarge as exc:
            return _limit_response("messages", "too_large", str(exc))
        except ClientDisconnect:
            return Response(status_code=400)
        _note_betas(request.headers)
        try:
            count = state.count_tokens(raw)
        except BadRequest as exc:
            _log.info("bad_request", protocol="messages.count_tokens", error=str(exc))
            return _error_response("messages", exc)
        return JSONResponse({"input_tokens": count})

    direct = {
        "/v1/chat/completions": _route(state, "chat.completions"),
        "/v1/responses": _route(state, "responses"),
        "/v1/messages": _route(state, "messages"),
    }
    routes = [
        Route("/v1/chat/completions", direct["/v1/chat/completions"], methods=["POST"]),
        Route("/v1/responses", direct["/v1/responses"], methods=["POST"]),
        Route("/v1/responses/{response_id}", stored, methods=["GET", "DELETE"]),
        Route("/v1/responses/{response_id}/input_items", stored, methods=["GET"]),
        Route("/v1/messages", direct["/v1/messages"], methods=["POST"]),
        Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        WebSocketRoute("/v1/ws", websocket),
        Route("/healthz", healthz, methods=["GET"]),
    ]
    if callable(getattr(eng, "metrics_text", None)):
        routes.append(Route("/metrics", metrics, methods=["GET"]))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if tune_gc:
            tune_collector()
        try:
            yield
        finally:
            try:
                close = getattr(eng, "aclose", None)
                if callable(close):
                    await close()  # the upstreams' pooled connections
            finally:
                await state.response_store.close()

    app = _App(direct, routes=routes, lifespan=lifespan)
    app.state.deltaflow = state
    return app
