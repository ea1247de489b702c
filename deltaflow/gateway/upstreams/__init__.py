"""The upstream engine adapters: one small module per raw-completion API.

Each adapter implements :class:`~deltaflow.gateway.upstream.Upstream` over one
pooled ``httpx.AsyncClient`` (the shared plumbing, timeouts, retry and error
mapping are in ``_http.py``):

* ``llamacpp`` (:class:`LlamaCppUpstream`): llama.cpp's ``POST /completion``;
  token-id prompts, GBNF (or llguidance Lark) constraints, lazy grammars,
  ``preserved_tokens`` for the markers;
* ``openai`` (:class:`OpenAICompletionsUpstream`): ``POST /v1/completions``
  of vLLM (``flavor="vllm"``: ``structured_outputs``, ``skip_special_tokens:
  false``, ``return_token_ids``), llama.cpp (``flavor="llamacpp"``) or any
  OpenAI-compatible server (``flavor="generic"``);
* ``sglang`` (:class:`SGLangUpstream`): SGLang's ``POST /generate``, cumulative
  or incremental streams;
* ``ollama`` (:class:`OllamaUpstream`): ``POST /api/generate`` with ``raw:
  true`` (text only, no constraints);
* ``tgi`` (:class:`TGIUpstream`): TGI's ``POST /generate_stream`` (special
  tokens' text kept, no constraints);
* ``chat`` (:class:`ChatCompletionsUpstream`): ``POST /v1/chat/completions``
  of a server that renders and parses itself (vLLM, SGLang, llama.cpp with
  ``--jinja``), the passthrough: it is given the conversation and yields
  parsed deltas, not text (no deltaflow parser, no deltaflow constraint).

:func:`make_upstream` builds one by kind. Every ``generate()`` returns an
async generator of :class:`~deltaflow.items.TokenChunk` (new text, never
cumulative; the finish reason and the engine's counts on the last chunk),
always streaming from the engine; close it to stop the engine. The ``chat``
adapter has ``chat()`` instead
(:class:`~deltaflow.gateway.upstream.ChatUpstream`): an async generator of
:class:`~deltaflow.messages.DeltaMessage` objects and the server's
:class:`~deltaflow.stages.assembler.Usage`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import httpx

from ..upstream import Upstream
from ._http import HttpUpstream, Timeouts
from .llamacpp import LlamaCppProps, LlamaCppUpstream, probe_llamacpp
from .ollama import OllamaUpstream
from .openai_chat import ChatCompletionsUpstream
from .openai_completions import OpenAICompletionsUpstream
from .sglang import SGLangUpstream
from .tgi import TGIUpstream

__all__ = (
    "UPSTREAM_KINDS",
    "ChatCompletionsUpstream",
    "HttpUpstream",
    "LlamaCppProps",
    "LlamaCppUpstream",
    "OllamaUpstream",
    "OpenAICompletionsUpstream",
    "SGLangUpstream",
    "TGIUpstream",
    "Timeouts",
    "make_upstream",
    "probe_llamacpp",
)

UPSTREAM_KINDS: Mapping[str, type[HttpUpstream]] = MappingProxyType({
    "llamacpp": LlamaCppUpstream,
    "openai": OpenAICompletionsUpstream,
    "sglang": SGLangUpstream,
    "ollama": OllamaUpstream,
    "tgi": TGIUpstream,
    "chat": ChatCompletionsUpstream,
})
"""The adapter class of each upstream kind."""


def make_upstream(
    kind: str,
    base_url: str,
    *,
    api_key: str | None = None,
    timeouts: Timeouts | None = None,
    client: httpx.AsyncClient | None = None,
    retries: int = 1,
    **options: Any,
) -> Upstream:
    """Build the adapter of one upstream engine.

    Args:
        kind: a key of :data:`UPSTREAM_KINDS` (``"llamacpp"``, ``"openai"``,
            ``"sglang"``, ``"ollama"``, ``"tgi"``, ``"chat"``).
        base_url: the engine's root URL.
        api_key: sent as a Bearer token.
        timeouts: connect / first-byte / idle limits (:class:`Timeouts`).
        client: an ``httpx.AsyncClient`` to share (not closed by the adapter).
        retries: retries of a failure before the first byte (default 1).
        **options: the adapter's own options (``tokenizer``, ``keep_tokens``,
            ``grammar_form`` for llamacpp; ``model``, ``flavor``,
            ``token_prompts``, ``return_token_ids`` for openai; ``incremental``
            for sglang; ``model`` for ollama and chat) and the shared ones
            (``retry_statuses``, ``max_connections``, ``headers``).

    Raises:
        ValueError: an unknown kind, or a bad option value.
        TypeError: an option the adapter does not take.
    """
    cls = UPSTREAM_KINDS.get(kind)
    if cls is None:
        raise ValueError(f"unknown upstream kind {kind!r}; expected one of {', '.join(UPSTREAM_KINDS)}")
    upstream: Upstream = cls(base_url, api_key=api_key, timeouts=timeouts, client=client, retries=retries,
                             **options)
    return upstream
