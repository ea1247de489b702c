"""SGLang's native ``POST /generate``.

Request body (fields left out when the request does not set them)::

    {"input_ids": [151644, 872, ...] | "text": "...", "stream": true,
     "sampling_params": {"max_new_tokens": 256, "temperature": 0.7, "top_p": 0.9,
                         "stop": ["<|im_end|>"], "stop_token_ids": [151645],
                         "sampling_seed": 1, "skip_special_tokens": false,
                         "spaces_between_special_tokens": false,
                         "structural_tag": "{\\"type\\": \\"structural_tag\\", ...}" | "ebnf": "root ::= ..."},
     "return_logprob": true, "top_logprobs_num": 2, "return_text_in_logprobs": true}

``structural_tag`` is the JSON *text* of the structural tag (``format`` form);
``ebnf`` is the GBNF grammar with every marker a quoted literal (XGrammar's
EBNF reads that subset). Only the structural tag expresses a lazy
(``"auto"``) constraint. A forced call after the reasoning needs the server's
``--reasoning-parser`` (SGLang then starts the grammar after the reasoning).

Stream: ``data: {"text", "output_ids", "meta_info": {"finish_reason":
null | {"type": "stop" | "length" | "abort", ...}, "prompt_tokens",
"completion_tokens", "output_token_logprobs"?, "output_top_logprobs"?}}`` ...
``data: [DONE]``. By default ``text``, ``output_ids`` and the logprob lists are
**cumulative** (everything so far); with ``--incremental-streaming-output``
they hold only the new part. Both are read in linear time: the decoder keeps
how much it has emitted and slices off the new suffix. The mode is
``incremental`` when given, else found from the counts (a cumulative
``output_ids`` always has ``completion_tokens`` ids; an incremental one has
fewer once anything was emitted), or, without ids, from whether the new
``text`` continues the last characters emitted. In cumulative mode every event
is checked against the last 32 characters emitted (a cut or rewritten text is
a ``protocol`` error). A ``finish_reason`` of type ``abort`` is an
``UpstreamError`` (``status``, with the server's message).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

import msgspec

from ...constrain import TokenIds
from ...items import TokenChunk
from ..upstream import UpstreamRequest
from ._http import LAZY_FORMS, HttpUpstream, _StreamFault, decoder_for, engine_usage, event_error, pick_form

__all__ = ("SGLangUpstream",)

_TAIL = 32


class _Meta(msgspec.Struct):
    finish_reason: Any = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    output_token_logprobs: list[Any] | None = None
    output_top_logprobs: list[Any] | None = None


class _Out(msgspec.Struct):
    text: str | None = None
    output_ids: list[int] | None = None
    meta_info: _Meta | None = None
    error: Any = None


_decode = decoder_for(_Out)


def _entry(item: Any) -> dict[str, Any]:
    # SGLang's logprob tuples: [logprob, token_id, token_text_or_None].
    if isinstance(item, (list, tuple)) and len(item) >= 2:
        out: dict[str, Any] = {"token": item[2] if len(item) > 2 else None, "logprob": item[0], "id": item[1]}
        return out
    raise _StreamFault("protocol", "the upstream sent a logprob entry of an unknown shape")


def _logprobs(tokens: list[Any], tops: list[Any] | None) -> list[object]:
    out: list[object] = []
    for i, item in enumerate(tokens):
        entry = _entry(item)
        top = tops[i] if tops is not None and i < len(tops) else None
        entry["top_logprobs"] = [_entry(t) for t in top] if isinstance(top, list) else []
        out.append(entry)
    return out


class _Decoder:
    """One ``/generate`` stream, cumulative or incremental."""

    __slots__ = ("_incremental", "_n_ids", "_n_lp", "_n_text", "_tail", "done")

    def __init__(self, incremental: bool | None) -> None:
        self.done = False
        self._incremental = incremental
        self._n_text = 0  # characters emitted
        self._n_ids = 0  # ids emitted
        self._n_lp = 0  # logprob entries emitted
        self._tail = ""  # the last characters emitted (at most _TAIL)

    def _mode(self, text: str | None, ids: list[int] | None, meta: _Meta | None) -> bool:
        """Whether this event is incremental (decided once, at the first event that tells)."""
        if self._incremental is not None:
            return self._incremental
        total = meta.completion_tokens if meta is not None else None
        if ids is not None and total is not None and self._n_ids > 0:
            self._incremental = len(ids) < total
            return self._incremental
        if text is not None and self._n_text > 0:
            n = self._n_text
            self._incremental = not (len(text) >= n and text[n - len(self._tail): n] == self._tail)
            return self._incremental
        return False  # nothing emitted yet: both modes read the same

    def feed(self, data: str) -> Sequence[TokenChunk]:
        if data == "[DONE]" or self.done:
            return ()
        ev = _decode(data)
        if ev.error is not None:
            raise event_error(data)
        meta = ev.meta_info
        incremental = self._mode(ev.text, ev.output_ids, meta)
        text: str | None = None
        if ev.text is not None:
            if incremental:
                text = ev.text
            else:
                n = self._n_text
                if len(ev.text) < n or ev.text[n - len(self._tail): n] != self._tail:
                    raise _StreamFault("protocol", "the upstream's cumulative text does not continue what it sent")
                text = ev.text[n:]
            if text:
                self._n_text += len(text)
                self._tail = (self._tail + text)[-_TAIL:]
        ids: list[int] = []
        if ev.output_ids is not None:
            ids = ev.output_ids if incremental else ev.output_ids[self._n_ids:]
            self._n_ids += len(ids)
        lps: list[object] | None = None
        if meta is not None and meta.output_token_logprobs is not None:
            toks, tops = meta.output_token_logprobs, meta.output_top_logprobs
            if not incremental:
                toks = toks[self._n_lp:]
                tops = tops[self._n_lp:] if tops is not None else None
            self._n_lp += len(toks)
            lps = _logprobs(toks, tops) or None
        finish = meta.finish_reason if meta is not None else None
        if finish is None:
            if not text and not ids and lps is None:
                return ()
            return (TokenChunk(token_ids=ids, text=text, logprobs=lps),)
        kind = finish.get("type") if isinstance(finish, Mapping) else finish
        if kind == "abort":
            msg = finish.get("message") if isinstance(finish, Mapping) else None
            code = finish.get("status_code") if isinstance(finish, Mapping) else None
            raise _StreamFault("status", msg if isinstance(msg, str) and msg else "the upstream engine aborted the "
                               "generation", status=code if isinstance(code, int) and 100 <= code <= 599 else None)
        if kind not in ("stop", "length"):
            raise _StreamFault("protocol", f"the upstream sent an unknown finish reason {kind!r}")
        self.done = True
        assert meta is not None
        return (
            TokenChunk(token_ids=ids, text=text, logprobs=lps, finish_reason=kind,
                       usage=engine_usage(meta.prompt_tokens, meta.completion_tokens)),
        )

    def finish(self) -> Sequence[TokenChunk]:
        if not self.done:
            raise _StreamFault("closed", "the upstream engine's stream ended before its final event")
        return ()


class SGLangUpstream(HttpUpstream):
    """SGLang's ``/generate`` (see the module docstring).

    Args:
        base_url: the server's root URL.
        incremental: the server runs with ``--incremental-streaming-output``
            (True), does not (False), or find out from the stream (None).
        token_prompts: send ``input_ids`` when the request has ids (else ``text``).
        tokenizer: unused by SGLang's fields (accepted for a uniform factory).
        **http: :class:`~deltaflow.gateway.upstreams._http.HttpUpstream`'s arguments.
    """

    def __init__(
        self,
        base_url: str,
        *,
        incremental: bool | None = None,
        token_prompts: bool = True,
        tokenizer: TokenIds | None = None,
        **http: Any,
    ) -> None:
        super().__init__(base_url, **http)
        self.kind = "sglang"
        self.constraint_forms = ("structural_tag", "ebnf")
        self.incremental = incremental
        self.token_prompts = token_prompts
        self.tokenizer = tokenizer

    def request_body(self, request: UpstreamRequest) -> dict[str, Any]:
        """The ``/generate`` body for ``request``.

        Raises:
            UnsupportedConstraintError: a lazy constraint without a structural tag.
        """
        sp: dict[str, Any] = {"skip_special_tokens": False, "spaces_between_special_tokens": False}
        if request.max_tokens is not None:
            sp["max_new_tokens"] = request.max_tokens
        if request.temperature is not None:
            sp["temperature"] = request.temperature
        if request.top_p is not None:
            sp["top_p"] = request.top_p
        if request.stop:
            sp["stop"] = list(request.stop)
        if request.stop_ids:
            sp["stop_token_ids"] = list(request.stop_ids)
        if request.seed is not None:
            sp["sampling_seed"] = request.seed
        c = request.constraint
        if c is not None:
            form = pick_form(c, self.constraint_forms, self.kind, lazy_forms=LAZY_FORMS)
            if form == "structural_tag":
                sp["structural_tag"] = c.structural_tag_json
            else:
                sp["ebnf"] = c.gbnf
        body: dict[str, Any] = (
            {"input_ids": request.prompt_ids}
            if self.token_prompts and request.prompt_ids is not None
            else {"text": request.prompt}
        )
        body["sampling_params"] = sp
        body["stream"] = True
        if request.logprobs is not None:
            body["return_logprob"] = True
            body["top_logprobs_num"] = request.logprobs
            body["return_text_in_logprobs"] = True
        extra = dict(request.extra)
        more_sp = extra.pop("sampling_params", None)
        if isinstance(more_sp, Mapping):
            sp.update(more_sp)
        body.update(extra)
        return body

    def generate(self, request: UpstreamRequest) -> AsyncGenerator[TokenChunk, None]:
        """Stream one generation from ``/generate`` (always streamed; closing stops the engine).

        Raises:
            UnsupportedConstraintError: at the call, for a constraint it cannot send.
            UpstreamError: while iterating.
        """
        incremental = self.incremental
        return self.stream("/generate", self.request_body(request), lambda: _Decoder(incremental))
