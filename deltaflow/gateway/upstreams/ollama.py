"""Ollama's ``POST /api/generate`` in raw mode (no template applied by Ollama).

Request body (options left out when the request does not set them)::

    {"model": "qwen3:8b", "prompt": "<|im_start|>user...", "raw": true, "stream": true,
     "options": {"num_predict": 256, "temperature": 0.7, "top_p": 0.9, "seed": 1,
                 "stop": ["<|im_end|>"]}}

Answer: NDJSON, one object per line: ``{"response": "text", "done": false}``
..., then ``{"response": "", "done": true, "done_reason": "stop" | "length",
"prompt_eval_count", "eval_count"}`` (-> :class:`~deltaflow.items.EngineUsage`).
An error after the stream began is a line ``{"error": "..."}``. Text only (no
token ids, no logprobs), string prompts only, no constraint field
(``constraint_forms = ()``; Ollama's ``format`` takes a JSON schema, which
cannot express a tool section's markers).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

import msgspec

from ...items import TokenChunk
from ..upstream import UpstreamRequest
from ._http import HttpUpstream, _StreamFault, decoder_for, engine_usage, event_error, pick_form

__all__ = ("OllamaUpstream",)

_DONE = {"stop": "stop", "length": "length"}


class _Line(msgspec.Struct):
    response: str = ""
    done: bool = False
    done_reason: str | None = None
    prompt_eval_count: int | None = None
    eval_count: int | None = None
    error: Any = None


_decode = decoder_for(_Line)


class _Decoder:
    """One ``/api/generate`` NDJSON stream."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = False

    def feed(self, data: str) -> Sequence[TokenChunk]:
        if self.done:
            return ()
        line = _decode(data)
        if line.error is not None:
            raise event_error(data)
        if not line.done:
            return (TokenChunk(text=line.response),) if line.response else ()
        self.done = True
        return (
            TokenChunk(text=line.response, finish_reason=_DONE.get(line.done_reason or "", "stop"),
                       usage=engine_usage(line.prompt_eval_count, line.eval_count)),
        )

    def finish(self) -> Sequence[TokenChunk]:
        if not self.done:
            raise _StreamFault("closed", "the upstream engine's stream ended before its final line")
        return ()


class OllamaUpstream(HttpUpstream):
    """Ollama's raw ``/api/generate`` (see the module docstring).

    Args:
        base_url: the server's root URL (``http://host:11434``).
        model: the Ollama model name (required by its API).
        **http: :class:`~deltaflow.gateway.upstreams._http.HttpUpstream`'s arguments.

    Raises:
        ValueError: no model name.
    """

    health_path = "/api/version"

    def __init__(self, base_url: str, *, model: str, **http: Any) -> None:
        if not model:
            raise ValueError("the ollama upstream needs a model name")
        super().__init__(base_url, **http)
        self.kind = "ollama"
        self.constraint_forms = ()
        self.model = model

    def request_body(self, request: UpstreamRequest) -> dict[str, Any]:
        """The ``/api/generate`` body for ``request``.

        Raises:
            UnsupportedConstraintError: the request carries a constraint.
        """
        if request.constraint is not None:
            pick_form(request.constraint, self.constraint_forms, self.kind)  # raises
        options: dict[str, Any] = {}
        if request.max_tokens is not None:
            options["num_predict"] = request.max_tokens
        if request.temperature is not None:
            options["temperature"] = request.temperature
        if request.top_p is not None:
            options["top_p"] = request.top_p
        if request.seed is not None:
            options["seed"] = request.seed
        if request.stop:
            options["stop"] = list(request.stop)
        extra = dict(request.extra)
        more = extra.pop("options", None)
        if isinstance(more, Mapping):
            options.update(more)
        body: dict[str, Any] = {"model": self.model, "prompt": request.prompt, "raw": True, "stream": True}
        if options:
            body["options"] = options
        body.update(extra)
        return body

    def generate(self, request: UpstreamRequest) -> AsyncGenerator[TokenChunk, None]:
        """Stream one generation from ``/api/generate`` (always streamed; closing stops the engine).

        Raises:
            UnsupportedConstraintError: at the call, for any constraint.
            UpstreamError: while iterating.
        """
        return self.stream("/api/generate", self.request_body(request), _Decoder, ndjson=True)
