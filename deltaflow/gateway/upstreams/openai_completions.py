"""OpenAI-compatible ``POST /v1/completions`` (vLLM, llama.cpp, SGLang, LM Studio ...).

Request body (``flavor="vllm"``; fields left out when the request does not set them)::

    {"prompt": [151644, 872, ...] | "text", "stream": true,
     "stream_options": {"include_usage": true}, "model": "m",
     "max_tokens": 256, "stop": ["<|im_end|>"], "seed": 1, "temperature": 0.7,
     "top_p": 0.9, "logprobs": 2,
     "skip_special_tokens": false, "spaces_between_special_tokens": false,
     "stop_token_ids": [151645], "return_token_ids": true,
     "structured_outputs": {"structural_tag": "{\\"type\\": \\"structural_tag\\", \\"format\\": ...}"}
                         | {"grammar": "start: ..."}}

``structured_outputs`` is vLLM's ``StructuredOutputsParams``: exactly one
mode; ``structural_tag`` is a *string* (the JSON text of the structural tag,
``format`` form), ``grammar`` a string handed to the structured-output backend
(the Lark grammar, for the ``guidance`` backend; only for constraints that
apply from the first token, since vLLM has no lazy grammar). A non-lazy
constraint with ``after_reasoning_end`` needs vLLM's ``--reasoning-parser``
(vLLM then starts the constraint after the reasoning). vLLM's
``skip_special_tokens`` defaults to true, which would drop every marker.

``flavor="llamacpp"`` sends llama.cpp's extras instead of vLLM's (``grammar``,
``grammar_lazy``, ``grammar_triggers``, ``preserved_tokens``, ``cache_prompt``;
see :mod:`.llamacpp`); ``flavor="generic"`` sends only OpenAI's fields (no
constraint, markers depend on the server).

Stream: ``data: {"choices": [{"text", "finish_reason", "token_ids"?,
"logprobs"?}], "usage"?}`` ... ``data: [DONE]``. vLLM sends the usage in a
last chunk with ``choices: []``; llama.cpp puts it on the chunk with the
``finish_reason`` (checked on a real llama.cpp server). The chunk with the
finish reason is held until the usage (or ``[DONE]``) arrives, so both are on
the last :class:`~deltaflow.items.TokenChunk`. Logprobs become one entry per
token in Chat Completions' shape (``{"token", "logprob", "top_logprobs":
[{"token", "logprob"}]}``): vLLM's legacy ``{"tokens", "token_logprobs",
"top_logprobs"}`` is converted, llama.cpp's ``{"content": [...]}`` taken as
is.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Collection, Mapping, Sequence
from typing import Any, Literal

import msgspec

from ...constrain import TokenIds
from ...constrain.choice import marker_ids
from ...items import TokenChunk
from ..upstream import UpstreamRequest
from ._http import (
    LAZY_FORMS,
    HttpUpstream,
    _StreamFault,
    decoder_for,
    engine_usage,
    event_error,
    pick_form,
    sampling_fields,
)
from .llamacpp import llamacpp_grammar_fields, preserved_tokens

__all__ = ("Flavor", "OpenAICompletionsUpstream", "openai_logprobs")

Flavor = Literal["vllm", "llamacpp", "generic"]
"""Which server's extra fields to send (see the module docstring)."""

_FINISH = {"stop": "stop", "length": "length"}


def openai_logprobs(lp: Any) -> list[object] | None:
    """A completions chunk's ``logprobs`` as one Chat-Completions-shaped entry per token.

    Raises:
        _StreamFault: an unknown shape (``protocol``).
    """
    if lp is None:
        return None
    if isinstance(lp, list):
        return lp
    if isinstance(lp, Mapping):
        content = lp.get("content")
        if isinstance(content, list):
            return content
        tokens = lp.get("tokens")
        if isinstance(tokens, list):
            lps = lp.get("token_logprobs")
            tops = lp.get("top_logprobs")
            out: list[object] = []
            for i, tok in enumerate(tokens):
                top = tops[i] if isinstance(tops, list) and i < len(tops) else None
                out.append({
                    "token": tok,
                    "logprob": lps[i] if isinstance(lps, list) and i < len(lps) else None,
                    "top_logprobs": [{"token": k, "logprob": v} for k, v in top.items()]
                    if isinstance(top, Mapping) else [],
                })
            return out
    raise _StreamFault("protocol", "the upstream sent logprobs of an unknown shape")


class _Choice(msgspec.Struct):
    text: str = ""
    index: int = 0
    finish_reason: str | None = None
    token_ids: list[int] | None = None
    logprobs: Any = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] = []
    usage: _Usage | None = None
    error: Any = None
    object: str | None = None


_decode = decoder_for(_Chunk)


class _Decoder:
    """One completions stream (choice 0)."""

    __slots__ = ("_held", "_usage", "done")

    def __init__(self) -> None:
        self.done = False
        self._held: TokenChunk | None = None
        self._usage: _Usage | None = None

    def _release(self) -> Sequence[TokenChunk]:
        held, self._held = self._held, None
        if held is None:
            return ()
        u = self._usage
        if u is not None:
            held = TokenChunk(token_ids=held.token_ids, text=held.text, logprobs=held.logprobs,
                              finish_reason=held.finish_reason,
                              usage=engine_usage(u.prompt_tokens, u.completion_tokens))
        return (held,)

    def feed(self, data: str) -> Sequence[TokenChunk]:
        if data == "[DONE]":
            return self._release()
        ev = _decode(data)
        if ev.error is not None or ev.object == "error":
            raise event_error(data)
        if ev.usage is not None:
            self._usage = ev.usage
        out: list[TokenChunk] = []
        for choice in ev.choices:
            if choice.index != 0 or self.done:
                continue
            ids = choice.token_ids or []
            lps = openai_logprobs(choice.logprobs)
            if choice.finish_reason is None:
                if choice.text or ids or lps:
                    out.append(TokenChunk(token_ids=ids, text=choice.text, logprobs=lps))
                continue
            if choice.finish_reason in ("abort", "error"):
                raise _StreamFault("status", f"the upstream engine ended the generation ({choice.finish_reason})")
            self.done = True
            self._held = TokenChunk(token_ids=ids, text=choice.text, logprobs=lps,
                                    finish_reason=_FINISH.get(choice.finish_reason, "stop"))
        if self._held is not None and self._usage is not None:
            out.extend(self._release())
        return out

    def finish(self) -> Sequence[TokenChunk]:
        if not self.done:
            raise _StreamFault("closed", "the upstream engine's stream ended before its final event")
        return self._release()


class OpenAICompletionsUpstream(HttpUpstream):
    """An OpenAI-compatible ``/v1/completions`` endpoint (see the module docstring).

    Args:
        base_url: the server's root URL (a trailing ``/v1`` is accepted and dropped).
        model: the ``model`` field (None: left out; vLLM and llama.cpp then use the served model).
        flavor: ``"vllm"`` (default), ``"llamacpp"`` or ``"generic"``.
        token_prompts: send ``prompt`` as token ids when the request has them
            (vLLM, llama.cpp, SGLang accept them); False: always the text.
        return_token_ids: ask vLLM for the generated ids (``return_token_ids``,
            vLLM >= 0.10.2); other servers may refuse the field.
        tokenizer: the model's tokenizer, to write markers as token ids in
            grammars (``<[ID]>``).
        keep_tokens: (llamacpp flavor) token texts always sent as ``preserved_tokens``.
        **http: :class:`~deltaflow.gateway.upstreams._http.HttpUpstream`'s arguments.
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        flavor: Flavor = "vllm",
        token_prompts: bool = True,
        return_token_ids: bool = False,
        tokenizer: TokenIds | None = None,
        keep_tokens: Collection[str] = (),
        **http: Any,
    ) -> None:
        base = base_url.rstrip("/")
        if base.endswith("/v1"):
            base = base[: -len("/v1")]
        super().__init__(base, **http)
        if flavor not in ("vllm", "llamacpp", "generic"):
            raise ValueError(f"flavor must be 'vllm', 'llamacpp' or 'generic', got {flavor!r}")
        self.kind = "openai"
        self.flavor: Flavor = flavor
        self.model = model
        self.token_prompts = token_prompts
        self.return_token_ids = return_token_ids
        self.tokenizer = tokenizer
        self.keep_tokens = tuple(keep_tokens)
        if flavor == "vllm":
            self.constraint_forms = ("structural_tag", "lark")
        elif flavor == "llamacpp":
            self.constraint_forms = ("gbnf", "lark")
        else:
            self.constraint_forms = ()
        self.health_path = "/v1/models" if flavor == "generic" else "/health"

    def request_body(self, request: UpstreamRequest) -> dict[str, Any]:
        """The ``/v1/completions`` body for ``request``.

        Raises:
            UnsupportedConstraintError: the constraint has no form this flavor sends.
        """
        use_ids = self.token_prompts and request.prompt_ids is not None
        body: dict[str, Any] = {
            "prompt": request.prompt_ids if use_ids else request.prompt,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.model is not None:
            body["model"] = self.model
        body.update(sampling_fields(request, "max_tokens"))
        if request.logprobs is not None:
            body["logprobs"] = request.logprobs
        c = request.constraint
        if self.flavor == "vllm":
            body["skip_special_tokens"] = False
            body["spaces_between_special_tokens"] = False
            if request.stop_ids:
                body["stop_token_ids"] = list(request.stop_ids)
            if self.return_token_ids:
                body["return_token_ids"] = True
            if c is not None:
                form = pick_form(c, self.constraint_forms, self.kind, lazy_forms=LAZY_FORMS)
                if form == "structural_tag":
                    body["structured_outputs"] = {"structural_tag": c.structural_tag_json}
                else:
                    ids = (marker_ids(self.tokenizer, c.markers, c.markers_special)
                           if self.tokenizer is not None else None)
                    body["structured_outputs"] = {"grammar": c.lark_grammar(ids) if ids is not None else c.lark}
        elif self.flavor == "llamacpp":
            body["cache_prompt"] = True
            keep = preserved_tokens(c, self.keep_tokens)
            if keep:
                body["preserved_tokens"] = keep
            if c is not None:
                form = pick_form(c, self.constraint_forms, self.kind)
                body.update(llamacpp_grammar_fields(c, form, self.tokenizer))
        elif c is not None:
            pick_form(c, self.constraint_forms, self.kind)  # raises: no constraint field
        body.update(request.extra)
        return body

    def generate(self, request: UpstreamRequest) -> AsyncGenerator[TokenChunk, None]:
        """Stream one generation from ``/v1/completions`` (always streamed; closing stops the engine).

        Raises:
            UnsupportedConstraintError: at the call, for a constraint it cannot send.
            UpstreamError: while iterating.
        """
        return self.stream("/v1/completions", self.request_body(request), _Decoder)
