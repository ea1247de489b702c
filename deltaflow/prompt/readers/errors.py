"""The readers' one exception: a request body its API would refuse."""

from __future__ import annotations

from typing import Any, Literal

from ...errors import DeltaflowError

__all__ = ("RequestProtocol", "RequestError")

RequestProtocol = Literal["chat", "responses", "messages"]
"""The API a body was read as: OpenAI Chat Completions, OpenAI Responses, Anthropic Messages."""


class RequestError(DeltaflowError, ValueError):
    """A request body that its API would refuse (HTTP 400), with that API's error JSON.

    The message starts with the field path (``messages[1].content[0]: ...``)
    and says what is accepted.

    Attributes:
        protocol: ``"chat"``, ``"responses"`` or ``"messages"``.
        param: the path of the offending field, e.g. ``messages[1].content[0]``
            (None when the body itself is wrong).
        status: the HTTP status (400).
        code: the OpenAI error code: ``"missing_required_parameter"``,
            ``"invalid_type"``, ``"invalid_value"`` or ``"unsupported_value"``.
    """

    def __init__(
        self,
        message: str,
        *,
        protocol: RequestProtocol,
        param: str | None,
        code: str = "invalid_value",
        status: int = 400,
    ) -> None:
        super().__init__(message)
        self.protocol: RequestProtocol = protocol
        self.param = param
        self.code = code
        self.status = status

    @property
    def message(self) -> str:
        """The error message (``str(self)``)."""
        return str(self.args[0]) if self.args else ""

    def body(self) -> dict[str, Any]:
        """The error JSON of the request's API.

        Returns:
            OpenAI (``chat``, ``responses``): ``{"error": {"message", "type":
            "invalid_request_error", "param", "code"}}``; Anthropic
            (``messages``): ``{"type": "error", "error": {"type":
            "invalid_request_error", "message"}}``.
        """
        if self.protocol == "messages":
            return {"type": "error", "error": {"type": "invalid_request_error", "message": self.message}}
        return {
            "error": {"message": self.message, "type": "invalid_request_error", "param": self.param, "code": self.code}
        }
