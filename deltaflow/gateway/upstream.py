"""What every upstream engine adapter implements, and what it is given.

An adapter turns one :class:`UpstreamRequest` (a rendered, tokenized prompt
and its sampling options) into the engine's own raw-completion call, and the
engine's stream into :class:`~deltaflow.items.TokenChunk` objects whose
``text`` is the new text (never cumulative), with the engine's token ids
and logprobs where it gives them consistently, a ``finish_reason``
(``"stop"`` or ``"length"``) on the last chunk and the engine's token counts
(:class:`~deltaflow.items.EngineUsage`) when it reports them.

A Chat Completions upstream (:class:`ChatUpstream`, the passthrough) is the
other kind: it is given the conversation as a Chat request
(:class:`ChatRequest`), its server renders and parses, and its stream is
translated into :class:`~deltaflow.messages.DeltaMessage` objects (and the
final :class:`~deltaflow.stages.assembler.Usage`) without re-parsing.

Adapters hold one pooled :class:`httpx.AsyncClient` per upstream and never
put the upstream's credentials or URL into an error a client sees: an
:class:`UpstreamError` carries a message safe to show and a ``kind``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from ..errors import DeltaflowError

if TYPE_CHECKING:
    from ..constrain import ToolConstraint
    from ..items import TokenChunk
    from ..messages import DeltaMessage
    from ..stages.assembler import Usage

__all__ = (
    "ChatRequest",
    "ChatUpstream",
    "ConstraintForm",
    "Upstream",
    "UpstreamError",
    "UpstreamErrorKind",
    "UpstreamRequest",
)

ConstraintForm = Literal["gbnf", "lark", "structural_tag", "ebnf"]
"""How an upstream takes a tool-call constraint: llama.cpp's GBNF (with token references) or
llguidance Lark (``%llguidance``), XGrammar's structural tag (vLLM, SGLang), SGLang's EBNF."""

UpstreamErrorKind = Literal["connect", "timeout", "status", "protocol", "closed"]
"""``connect``: the upstream could not be reached; ``timeout``: it did not answer in time;
``status``: it answered with an HTTP error, or sent an error object inside its stream;
``protocol``: its answer was not what its API documents; ``closed``: the stream ended without its
final event."""


class UpstreamError(DeltaflowError):
    """The upstream engine failed.

    Attributes:
        kind: what failed (:data:`UpstreamErrorKind`).
        status: the upstream's HTTP status when it answered with one, else None.
        before_first_byte: nothing of the answer had been received (a retry
            cannot duplicate output).
        message: what a client may see: the upstream's own error message where
            it gave one, never its URL or credentials.
    """

    def __init__(
        self,
        kind: UpstreamErrorKind,
        message: str,
        *,
        status: int | None = None,
        before_first_byte: bool = True,
    ) -> None:
        super().__init__(message)
        self.kind: UpstreamErrorKind = kind
        self.status = status
        self.before_first_byte = before_first_byte
        self.message = message

    @property
    def http_status(self) -> int:
        """What the gateway answers: 504 when the upstream timed out, else 502 (bad gateway)."""
        return 504 if self.kind == "timeout" else 502


@dataclass(frozen=True)
class UpstreamRequest:
    """One generation, as the gateway hands it to an adapter.

    Attributes:
        prompt: the rendered prompt text (what string-prompt APIs get).
        prompt_ids: its token ids (what token-prompt APIs get), or None when
            no tokenizer is configured.
        max_tokens: the generation limit (tokens), or None for the engine's default.
        temperature: sampling temperature, or None.
        top_p: nucleus sampling, or None.
        seed: sampling seed, or None.
        stop: stop strings (the template's end-of-turn text and the client's stops).
        stop_ids: stop token ids (the template's end-of-turn tokens), where the API takes them.
        constraint: the tool-call constraint (``tool_choice`` required / named /
            allowed tools), or None.
        stream: whether to stream (adapters may always stream internally).
        logprobs: how many top logprobs per token the client asked for, or None.
        extra: engine-specific fields passed through unchanged (operator config).
    """

    prompt: str
    prompt_ids: list[int] | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_ids: tuple[int, ...] = ()
    constraint: ToolConstraint | None = None
    stream: bool = True
    logprobs: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


class Upstream(Protocol):
    """One raw-completion engine (see the module docstring)."""

    kind: str
    """The adapter's name (``"llamacpp"``, ``"openai"``, ``"sglang"``, ``"ollama"``, ``"tgi"``)."""

    constraint_forms: tuple[ConstraintForm, ...]
    """The constraint forms it accepts, preferred first (``()``: it cannot constrain)."""

    def generate(self, request: UpstreamRequest) -> AsyncGenerator[TokenChunk, None]:
        """Stream one generation; closing the iterator early closes the upstream request.

        Raises:
            UpstreamError: the engine could not be reached, answered with an
                error, or broke its protocol.
        """
        ...

    async def health(self) -> bool:
        """Whether the engine answers its health endpoint now."""
        ...

    async def aclose(self) -> None:
        """Close the pooled connections."""
        ...


@dataclass(frozen=True)
class ChatRequest:
    """One generation for a Chat Completions upstream (the passthrough): the conversation, as Chat.

    Attributes:
        body: the Chat Completions request fields
            (:func:`~deltaflow.prompt.writers.write_chat`: ``messages``,
            ``tools``, ``tool_choice``, ``parallel_tool_calls``,
            ``max_tokens``, sampling options, ``chat_template_kwargs`` ...),
            without ``model`` and ``stream`` (the adapter adds them).
        stream: whether the client streams (adapters always stream from the engine).
        extra: engine-specific fields passed through unchanged (operator config).
    """

    body: Mapping[str, Any]
    stream: bool = True
    extra: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class ChatUpstream(Protocol):
    """An upstream that speaks Chat Completions itself: its own server renders the prompt and parses the output."""

    kind: str
    """The adapter's name (``"chat"``)."""

    constraint_forms: tuple[ConstraintForm, ...]
    """``()``: deltaflow's constraints do not apply (the server enforces ``tool_choice`` itself)."""

    def chat(self, request: ChatRequest) -> AsyncGenerator[DeltaMessage | Usage, None]:
        """Stream one answer: deltas as the server parsed them, and its token counts (a
        :class:`~deltaflow.stages.assembler.Usage`, when it reports them); closing the iterator
        early closes the upstream request.

        Raises:
            UpstreamError: the server could not be reached, answered with an
                error, or broke its protocol (a malformed chunk: ``protocol``).
        """
        ...

    async def health(self) -> bool:
        """Whether the server answers its health endpoint now."""
        ...

    async def aclose(self) -> None:
        """Close the pooled connections."""
        ...
