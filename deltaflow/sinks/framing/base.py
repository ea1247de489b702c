"""The framer protocol, the wire event shape, the one table of error types, and the measured usage counts."""

from __future__ import annotations

import time
import uuid
from typing import Any, Protocol

import msgspec

from ...messages import DeltaMessage
from ...stages.assembler import Usage

__all__ = (
    "ERROR_TYPES",
    "UNKNOWN_KEY",
    "Framer",
    "WireEvent",
    "anthropic_error_type",
    "failure_status",
    "measured",
    "new_id",
    "now",
    "openai_error_type",
)

# HTTP status -> (Anthropic error type, OpenAI error type): the one table every error body and
# error event of the server and the framers is made from.
ERROR_TYPES: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "invalid_request_error"),
    401: ("authentication_error", "invalid_request_error"),
    403: ("permission_error", "invalid_request_error"),
    404: ("not_found_error", "invalid_request_error"),
    413: ("request_too_large", "invalid_request_error"),
    429: ("rate_limit_error", "rate_limit_error"),
    500: ("api_error", "server_error"),
    503: ("overloaded_error", "server_error"),
    504: ("timeout_error", "server_error"),
    529: ("overloaded_error", "server_error"),
}
"""HTTP status -> (Anthropic ``error.type``, OpenAI ``error.type``)."""

UNKNOWN_KEY = "deltaflow_unknown"
"""The usage key (Responses, Anthropic) naming the counts sent as a placeholder 0 because they were not measured."""


class WireEvent(msgspec.Struct, frozen=True):
    """One protocol event: its SSE ``event:`` name (None for OpenAI Chat Completions) and payload."""

    event: str | None
    data: Any


class Framer(Protocol):
    """Frames one response for one wire protocol."""

    def start(self) -> list[WireEvent]:
        """Events that open the response."""
        ...

    def feed(self, delta: DeltaMessage) -> list[WireEvent]:
        """Events for one delta."""
        ...

    def finish(self, usage: Usage | None = None) -> list[WireEvent]:
        """Events that close the response (after the last delta)."""
        ...

    def error(self, exc: BaseException) -> list[WireEvent]:
        """The protocol's error event for a failure mid-stream."""
        ...


def new_id(prefix: str) -> str:
    """A fresh id such as ``chatcmpl-...`` or ``msg_...``."""
    return prefix + uuid.uuid4().hex[:24]


def now() -> int:
    """Seconds since the epoch."""
    return int(time.time())


def error_message(exc: BaseException) -> str:
    """A client-safe one-line description of a failure.

    A failure that declares its own ``http_status`` somewhere in the ``__cause__`` chain (the
    gateway's upstream errors, whose messages are written to be shown) is described by its own
    message alone."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            break
        if isinstance(getattr(seen, "http_status", None), int) and str(seen):
            return str(seen)
        seen = seen.__cause__
    cause = exc.__cause__
    text = str(exc) or type(exc).__name__
    if cause is not None and str(cause) and str(cause) not in text:
        text += f": {cause}"
    return text


def _types(status: int) -> tuple[str, str]:
    found = ERROR_TYPES.get(status)
    if found is not None:
        return found
    return ERROR_TYPES[500] if status >= 500 else ERROR_TYPES[400]


def anthropic_error_type(status: int) -> str:
    """The Anthropic ``error.type`` of an HTTP status.

    ``api_error`` for an unlisted 5xx, else ``invalid_request_error``.
    """
    return _types(status)[0]


def openai_error_type(status: int) -> str:
    """The OpenAI ``error.type`` of an HTTP status.

    ``server_error`` for an unlisted 5xx, else ``invalid_request_error``.
    """
    return _types(status)[1]


def failure_status(exc: BaseException) -> int:
    """The HTTP status a failure stands for: the ``http_status`` an exception in the ``__cause__``
    chain declares (the gateway's upstream errors: 502, or 504 for a timeout), 504 for a timeout (the
    engine idle guard, or a :class:`TimeoutError` the engine raised), else 500."""
    seen: BaseException | None = exc
    for _ in range(8):  # the pipeline wraps the original once or twice
        if seen is None:
            break
        declared = getattr(seen, "http_status", None)
        if isinstance(declared, int) and 500 <= declared < 600:
            return declared
        if isinstance(seen, TimeoutError):
            return 504
        seen = seen.__cause__
    return 500


def measured(usage: Usage | None, prompt_tokens: int | None = None) -> tuple[int | None, int | None, int | None]:
    """``(prompt, completion, reasoning)`` token counts, None where not measured.

    The prompt count is the engine's (``usage.prompt_tokens``), else
    ``prompt_tokens`` (what the framer was told).
    """
    if usage is None:
        return prompt_tokens, None, None
    prompt = usage.prompt_tokens if usage.prompt_tokens is not None else prompt_tokens
    return (
        prompt,
        usage.completion_tokens if usage.completion_known else None,
        usage.reasoning_tokens if usage.reasoning_known else None,
    )
