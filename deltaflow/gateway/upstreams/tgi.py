"""Hugging Face Text Generation Inference: ``POST /generate_stream``.

Request body (parameters left out when the request does not set them)::

    {"inputs": "<|im_start|>user...",
     "parameters": {"max_new_tokens": 256, "do_sample": true, "temperature": 0.7,
                    "top_p": 0.9, "seed": 1, "stop": ["<|im_end|>"], "top_n_tokens": 2,
                    "details": true, "decoder_input_details": false}}

TGI refuses ``temperature: 0`` and ``top_p >= 1``: temperature 0 is sent as
``do_sample: false`` (greedy) without a temperature, and a ``top_p`` of 1 or
more is left out.

Stream (SSE): ``data: {"token": {"id", "text", "logprob", "special"},
"top_tokens"?, "generated_text": null, "details": null}`` per token; the last
event also has ``generated_text`` (the whole text) and ``details``:
``{"finish_reason": "length" | "eos_token" | "stop_sequence",
"generated_tokens", "input_length"?}``. No ``[DONE]``. Errors: ``{"error":
"...", "error_type": "..."}``, as the body of a non-2xx answer or as an event.

TGI leaves special tokens (``special: true``) out of ``generated_text``, but
each one's own event carries its text: that text is emitted like any other,
so markers that are special tokens survive. ``generated_text`` itself is not
used (the tokens already carried it). TGI's ``grammar`` parameter takes
``{"type": "json" | "regex", "value": ...}`` only, which cannot express a
tool section's markers: ``constraint_forms = ()``. String prompts only.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

import msgspec

from ...items import TokenChunk
from ..upstream import UpstreamRequest
from ._http import HttpUpstream, _StreamFault, decoder_for, engine_usage, event_error, pick_form

__all__ = ("TGIUpstream",)

_FINISH = {"length": "length", "eos_token": "stop", "stop_sequence": "stop"}


class _Token(msgspec.Struct):
    id: int
    text: str
    logprob: float | None = None
    special: bool = False


class _Details(msgspec.Struct):
    finish_reason: str
    generated_tokens: int | None = None
    input_length: int | None = None


class _Item(msgspec.Struct):
    token: _Token | None = None
    top_tokens: list[_Token] | None = None
    generated_text: str | None = None
    details: _Details | None = None
    error: Any = None


_decode = decoder_for(_Item)


class _Decoder:
    """One ``/generate_stream`` stream."""

    __slots__ = ("_logprobs", "done")

    def __init__(self, logprobs: bool) -> None:
        self.done = False
        self._logprobs = logprobs

    def feed(self, data: str) -> Sequence[TokenChunk]:
        if data == "[DONE]" or self.done:
            return ()
        item = _decode(data)
        if item.error is not None:
            raise event_error(data)
        tok = item.token
        ids = [tok.id] if tok is not None else []
        text = tok.text if tok is not None else ""
        lps: list[object] | None = None
        if self._logprobs and tok is not None:
            tops = [{"token": t.text, "logprob": t.logprob, "id": t.id} for t in item.top_tokens or ()]
            lps = [{"token": tok.text, "logprob": tok.logprob, "id": tok.id, "top_logprobs": tops}]
        if item.details is None and item.generated_text is None:
            return (TokenChunk(token_ids=ids, text=text, logprobs=lps),) if tok is not None else ()
        self.done = True
        d = item.details
        if d is None:
            raise _StreamFault("protocol", "the upstream's last event has no details (send details: true)")
        reason = _FINISH.get(d.finish_reason)
        if reason is None:
            raise _StreamFault("protocol", f"the upstream sent an unknown finish reason {d.finish_reason!r}")
        return (
            TokenChunk(token_ids=ids, text=text, logprobs=lps, finish_reason=reason,
                       usage=engine_usage(d.input_length, d.generated_tokens)),
        )

    def finish(self) -> Sequence[TokenChunk]:
        if not self.done:
            raise _StreamFault("closed", "the upstream engine's stream ended before its final event")
        return ()


class TGIUpstream(HttpUpstream):
    """TGI's ``/generate_stream`` (see the module docstring).

    Args:
        base_url: the server's root URL.
        **http: :class:`~deltaflow.gateway.upstreams._http.HttpUpstream`'s arguments.
    """

    health_path = "/health"

    def __init__(self, base_url: str, **http: Any) -> None:
        super().__init__(base_url, **http)
        self.kind = "tgi"
        self.constraint_forms = ()

    def request_body(self, request: UpstreamRequest) -> dict[str, Any]:
        """The ``/generate_stream`` body for ``request``.

        Raises:
            UnsupportedConstraintError: the request carries a constraint.
        """
        if request.constraint is not None:
            pick_form(request.constraint, self.constraint_forms, self.kind)  # raises
        params: dict[str, Any] = {"details": True, "decoder_input_details": False}
        if request.max_tokens is not None:
            params["max_new_tokens"] = request.max_tokens
        if request.temperature is not None:
            if request.temperature > 0:
                params["do_sample"] = True
                params["temperature"] = request.temperature
            else:
                params["do_sample"] = False
        if request.top_p is not None and 0 < request.top_p < 1:
            params["top_p"] = request.top_p
        if request.seed is not None:
            params["seed"] = request.seed
        if request.stop:
            params["stop"] = list(request.stop)
        if request.logprobs:
            params["top_n_tokens"] = request.logprobs
        extra = dict(request.extra)
        more = extra.pop("parameters", None)
        if isinstance(more, Mapping):
            params.update(more)
        body: dict[str, Any] = {"inputs": request.prompt, "parameters": params}
        body.update(extra)
        return body

    def generate(self, request: UpstreamRequest) -> AsyncGenerator[TokenChunk, None]:
        """Stream one generation from ``/generate_stream`` (always streamed; closing stops the engine).

        Raises:
            UnsupportedConstraintError: at the call, for any constraint.
            UpstreamError: while iterating.
        """
        logprobs = request.logprobs is not None
        return self.stream("/generate_stream", self.request_body(request), lambda: _Decoder(logprobs))
