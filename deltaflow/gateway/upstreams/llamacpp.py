"""llama.cpp's server: ``POST /completion`` (its native raw-completion endpoint).

Request body (fields left out when the request does not set them)::

    {"prompt": [151644, 872, ...] | "text", "stream": true, "cache_prompt": true,
     "return_tokens": true, "n_predict": 256, "stop": ["<|im_end|>"],
     "temperature": 0.7, "top_p": 0.9, "seed": 1, "n_probs": 2,
     "preserved_tokens": ["<tool_call>", "</tool_call>"],
     "grammar": "root ::= ...", "grammar_lazy": true,
     "grammar_triggers": [{"type": 1, "value": "<tool_call>"}]}

Stream: ``data: {"content", "tokens", "stop": false, "completion_probabilities"?}``
per token, then one event with ``"stop": true``, ``stop_type`` (``eos`` |
``word`` -> ``"stop"``, ``limit`` -> ``"length"``), ``tokens_predicted``,
``tokens_evaluated`` (-> :class:`~deltaflow.items.EngineUsage`) and
``timings``; no ``[DONE]``. An error after the stream began arrives as
``data: {"error": {"code", "message", "type"}}`` (an ``UpstreamError`` of kind
``status``). ``content`` is the text to trust: ``tokens`` can miss ids (see
``shared/GATEWAY.md`` §3) and holds the ids of a stop word whose text was cut.

Facts checked on a real server (llama.cpp through xllamacpp 2026.10.11549):

* ``preserved_tokens`` (token texts) makes those tokens appear in
  ``content`` even when the server does not render special tokens
  (``--special`` off). Every marker the dialect needs (the constraint's
  markers, plus ``keep_tokens``) is sent there, so markers survive either way.
  A trigger word that is one token must be listed there, or the request is
  refused (400).
* ``grammar_lazy`` is honoured for GBNF only: a ``%llguidance`` grammar is
  applied from the first token even when marked lazy, so lazy constraints
  (``tool_choice: "auto"``, or a forced call after the reasoning) are always
  sent as GBNF.
* A grammar may not name an end-of-generation token (``<[151645]>`` for
  Qwen's ``<|im_end|>``): the server fails the request with a 500.
* ``GET /props`` does not say whether special tokens are rendered
  (``/tokenize`` and ``/detokenize`` always render them); :meth:`LlamaCppUpstream.probe`
  finds out by generating one control token under a grammar.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import msgspec

from ...constrain import TokenIds, ToolConstraint
from ...constrain.choice import marker_ids
from ...items import TokenChunk
from ..upstream import ConstraintForm, UpstreamError, UpstreamRequest
from ._http import (
    HttpUpstream,
    _StreamFault,
    decoder_for,
    engine_usage,
    event_error,
    pick_form,
    sampling_fields,
)

__all__ = ("LlamaCppProps", "LlamaCppUpstream", "llamacpp_grammar_fields", "preserved_tokens", "probe_llamacpp")

_STOP_TYPES = {"eos": "stop", "word": "stop", "limit": "length"}

# llama.cpp's common_grammar_trigger_type: TOKEN = 0, WORD = 1, PATTERN = 2, PATTERN_FULL = 3.
_TRIGGER_WORD = 1
_TRIGGER_PATTERN_FULL = 3

_ECMA_SPECIAL = re.compile(r"[.^$|?*+()\[\]{}\\/\-]")


def _ecma_escape(text: str) -> str:
    """``text`` as a literal in an ECMAScript regex (llama.cpp's ``std::regex``)."""
    return _ECMA_SPECIAL.sub(lambda m: "\\" + m.group(0), text)


def llamacpp_grammar_fields(
    constraint: ToolConstraint, form: ConstraintForm, tokenizer: TokenIds | None = None
) -> dict[str, Any]:
    """The ``/completion`` (and ``/v1/completions``) fields that carry ``constraint``.

    * ``gbnf``: ``grammar`` = :meth:`~deltaflow.constrain.ToolConstraint.gbnf_grammar`
      (markers that are single added tokens of ``tokenizer`` written ``<[ID]>``);
    * ``lark``: ``grammar`` = ``"%llguidance {}\\n"`` + the Lark grammar, markers
      written ``<[ID]>`` when ``tokenizer`` is given (by name they only resolve
      when the GGUF marks them as control tokens). Used only for a constraint that
      applies from the first token: lazy ones fall back to GBNF;
    * lazy (``"auto"``): ``grammar_lazy`` with a word trigger per
      :attr:`~deltaflow.constrain.ToolConstraint.triggers` (the grammar starts
      at the trigger);
    * forced after the reasoning (``after_reasoning_end``): ``grammar_lazy``
      with a full-match pattern trigger ``[\\s\\S]*?END([\\s\\S]*)`` (the grammar
      starts at the capture, right after the end marker).

    Args:
        constraint: the tool-call constraint.
        form: ``"gbnf"`` or ``"lark"``.
        tokenizer: the model's tokenizer, for token references.
    """
    lazy = constraint.lazy or constraint.after_reasoning_end is not None
    if form == "lark" and not lazy:
        ids = marker_ids(tokenizer, constraint.markers, constraint.markers_special) if tokenizer is not None else None
        grammar = "%llguidance {}\n" + (constraint.lark_grammar(ids) if ids is not None else constraint.lark)
    else:
        grammar = constraint.gbnf_grammar(tokenizer) if tokenizer is not None else constraint.gbnf
    out: dict[str, Any] = {"grammar": grammar}
    if constraint.lazy:
        out["grammar_lazy"] = True
        out["grammar_triggers"] = [{"type": _TRIGGER_WORD, "value": t} for t in constraint.triggers]
    elif constraint.after_reasoning_end is not None:
        out["grammar_lazy"] = True
        pattern = "[\\s\\S]*?" + _ecma_escape(constraint.after_reasoning_end) + "([\\s\\S]*)"
        out["grammar_triggers"] = [{"type": _TRIGGER_PATTERN_FULL, "value": pattern}]
    return out


def preserved_tokens(constraint: ToolConstraint | None, keep: Sequence[str]) -> list[str]:
    """The token texts llama.cpp must render in ``content`` (configured markers, then the constraint's)."""
    names = list(keep)
    if constraint is not None:
        names.extend(constraint.markers)
        names.extend(constraint.triggers)
    return list(dict.fromkeys(n for n in names if n))


class _Event(msgspec.Struct):
    content: str = ""
    tokens: list[int] = []
    stop: bool = False
    stop_type: str | None = None
    tokens_predicted: int | None = None
    tokens_evaluated: int | None = None
    completion_probabilities: list[Any] | None = None
    error: Any = None


_decode = decoder_for(_Event)


class _Decoder:
    """One ``/completion`` stream."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = False

    def feed(self, data: str) -> Sequence[TokenChunk]:
        if data == "[DONE]" or self.done:
            return ()
        ev = _decode(data)
        if ev.error is not None:
            raise event_error(data)
        probs = ev.completion_probabilities or None
        if not ev.stop:
            if not ev.content and not ev.tokens and probs is None:
                return ()
            return (TokenChunk(token_ids=ev.tokens, text=ev.content, logprobs=probs),)
        self.done = True
        return (
            TokenChunk(
                token_ids=ev.tokens,
                text=ev.content,
                logprobs=probs,
                finish_reason=_STOP_TYPES.get(ev.stop_type or "", "stop"),
                usage=engine_usage(ev.tokens_evaluated, ev.tokens_predicted),
            ),
        )

    def finish(self) -> Sequence[TokenChunk]:
        if not self.done:
            raise _StreamFault("closed", "the upstream engine's stream ended before its final event")
        return ()


@dataclass(frozen=True)
class LlamaCppProps:
    """What :meth:`LlamaCppUpstream.probe` learned from ``GET /props``.

    Attributes:
        is_llamacpp: the answer has llama.cpp's shape (``default_generation_settings``
            and ``total_slots``).
        build_info: the server's build (``build_info``), if given.
        model_path: the loaded model file.
        n_ctx: the context of one slot.
        total_slots: the number of slots.
        chat_template: the model's chat template.
        bos_token: the bos token's text.
        eos_token: the eos token's text.
        special_rendered: whether control tokens appear in generated text
            (the server runs with ``--special``); None when not tested.
        raw: the whole ``/props`` answer.
    """

    is_llamacpp: bool
    build_info: str | None = None
    model_path: str | None = None
    n_ctx: int | None = None
    total_slots: int | None = None
    chat_template: str | None = None
    bos_token: str | None = None
    eos_token: str | None = None
    special_rendered: bool | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


class LlamaCppUpstream(HttpUpstream):
    """llama.cpp's ``/completion`` (see the module docstring for the body and the stream).

    Args:
        base_url: the server's root URL.
        tokenizer: the model's tokenizer (a ``tokenizers.Tokenizer``): with
            it, constraint markers that are single added tokens are written as
            token references ``<[ID]>``, which a model can only produce as
            that token.
        grammar_form: ``"gbnf"`` (default) or ``"lark"`` (llguidance, for
            constraints from the first token; lazy ones stay GBNF).
        keep_tokens: token texts to always send as ``preserved_tokens`` (the
            dialect's markers: ``<think>``, ``<tool_call>`` ...), so they reach
            the text without ``--special``.
        **http: :class:`~deltaflow.gateway.upstreams._http.HttpUpstream`'s
            arguments (``api_key``, ``timeouts``, ``client``, ``retries`` ...).
    """

    health_path = "/health"

    def __init__(
        self,
        base_url: str,
        *,
        tokenizer: TokenIds | None = None,
        grammar_form: Literal["gbnf", "lark"] = "gbnf",
        keep_tokens: Collection[str] = (),
        **http: Any,
    ) -> None:
        super().__init__(base_url, **http)
        if grammar_form not in ("gbnf", "lark"):
            raise ValueError(f"grammar_form must be 'gbnf' or 'lark', got {grammar_form!r}")
        self.kind = "llamacpp"
        self.constraint_forms = ("gbnf", "lark") if grammar_form == "gbnf" else ("lark", "gbnf")
        self.tokenizer = tokenizer
        self.keep_tokens = tuple(keep_tokens)

    def request_body(self, request: UpstreamRequest) -> dict[str, Any]:
        """The ``/completion`` body for ``request`` (every constraint has a GBNF form)."""
        body: dict[str, Any] = {
            "prompt": request.prompt_ids if request.prompt_ids is not None else request.prompt,
            "stream": True,
            "cache_prompt": True,
            "return_tokens": True,
        }
        body.update(sampling_fields(request, "n_predict"))
        if request.logprobs is not None:
            body["n_probs"] = max(1, request.logprobs)  # 0 would return none; the sampled token needs one
        keep = preserved_tokens(request.constraint, self.keep_tokens)
        if keep:
            body["preserved_tokens"] = keep
        if request.constraint is not None:
            form = pick_form(request.constraint, self.constraint_forms, self.kind)
            body.update(llamacpp_grammar_fields(request.constraint, form, self.tokenizer))
        body.update(request.extra)
        return body

    def generate(self, request: UpstreamRequest) -> AsyncGenerator[TokenChunk, None]:
        """Stream one generation from ``/completion`` (always streamed; closing stops the engine).

        Raises:
            UnsupportedConstraintError: at the call, for a constraint it cannot send.
            UpstreamError: while iterating.
        """
        return self.stream("/completion", self.request_body(request), _Decoder)

    async def probe(self, *, control_token_id: int | None = None) -> LlamaCppProps:
        """Read ``GET /props``, and optionally test whether control tokens are rendered.

        ``/props`` does not tell whether the server renders special tokens in
        generated text (``--special``), and ``/tokenize``/``/detokenize``
        render them either way. With ``control_token_id`` (a control token
        that does not end generation, e.g. Qwen's ``<|im_start|>``), this
        generates that one token under the grammar ``root ::= <[ID]>``
        without ``preserved_tokens``: an empty ``content`` means not rendered.
        Without an id, a tokenizer given to the adapter supplies candidates
        (its special added tokens other than bos/eos, at most three tried).

        Raises:
            UpstreamError: ``/props`` could not be read.
        """
        raw = await self.request_json("GET", "/props")
        if not isinstance(raw, Mapping):
            raise UpstreamError("protocol", "the upstream's /props answer is not an object")
        settings = raw.get("default_generation_settings")
        props = LlamaCppProps(
            is_llamacpp=isinstance(settings, Mapping) and _int(raw.get("total_slots")) is not None,
            build_info=_str(raw.get("build_info")),
            model_path=_str(raw.get("model_path")),
            n_ctx=_int(settings.get("n_ctx")) if isinstance(settings, Mapping) else None,
            total_slots=_int(raw.get("total_slots")),
            chat_template=_str(raw.get("chat_template")),
            bos_token=_str(raw.get("bos_token")),
            eos_token=_str(raw.get("eos_token")),
            raw=raw,
        )
        candidates = [control_token_id] if control_token_id is not None else self._control_candidates(props)
        for tid in candidates:
            rendered = await self._renders(tid)
            if rendered is not None:
                return replace(props, special_rendered=rendered)
        return props

    def _control_candidates(self, props: LlamaCppProps) -> list[int]:
        get_added = getattr(self.tokenizer, "get_added_tokens_decoder", None)
        if not callable(get_added):
            return []
        skip = {props.bos_token, props.eos_token}
        out = [int(tid) for tid, tok in sorted(get_added().items())
               if getattr(tok, "special", False) and getattr(tok, "content", None) not in skip]
        return out[:3]

    async def _renders(self, token_id: int) -> bool | None:
        body = {"prompt": [token_id], "n_predict": 1, "grammar": f"root ::= <[{int(token_id)}]>",
                "temperature": 0.0, "cache_prompt": False, "stream": False}
        try:
            answer = await self.request_json("POST", "/completion", body)
        except UpstreamError:
            return None  # e.g. an end-of-generation token: a grammar cannot name one
        content = answer.get("content") if isinstance(answer, Mapping) else None
        if not isinstance(content, str):
            return None
        return content != ""


async def probe_llamacpp(base_url: str, *, control_token_id: int | None = None, **http: Any) -> LlamaCppProps:
    """:meth:`LlamaCppUpstream.probe` with a short-lived adapter (``http``: its connection arguments).

    Raises:
        UpstreamError: ``/props`` could not be read.
    """
    async with LlamaCppUpstream(base_url, **http) as upstream:
        return await upstream.probe(control_token_id=control_token_id)
