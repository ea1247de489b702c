"""The gateway engine: a request -> its prompt -> an upstream engine -> the text deltaflow parses.

:class:`GatewayEngine` is an :class:`~deltaflow.server.Engine` the server
(:func:`~deltaflow.server.create_app`) runs like any other, with one more
step: :meth:`GatewayEngine.plan` runs before the response starts, so every
client error is a 400 in the client's protocol, not a broken stream. A plan
is the request read onto a :class:`~deltaflow.prompt.conversation.Conversation`
(that API's reader, that API's error shape), its reasoning verified (what
a client sends back is rendered as the model's own thought only when this
server signed or sealed it: :mod:`deltaflow.gateway.reasoning`), rendered
with the model's chat template and tokenized
(:class:`~deltaflow.prompt.render.PromptModel`), its ``tool_choice`` turned
into a constraint the upstream takes (from :mod:`deltaflow.constrain`), its
limits checked against the context length, and what the parser needs to
know (thinking on or off, whether the prompt left reasoning open, tools off
for ``tool_choice: "none"``).

:meth:`GatewayEngine.generate` then streams the upstream's text; the
model's end-of-turn marker that closes the answer (which an engine serving
special tokens as text writes, e.g. ``<|im_end|>``) is dropped, whatever
chunking it arrives in.

A model served by a Chat Completions upstream (``kind = "chat"``,
:class:`~deltaflow.gateway.upstream.ChatUpstream`: the passthrough, for an
engine whose own template and parsers the operator trusts) is planned
without rendering: the request is read and its reasoning verified as for any
model, then written as a Chat request
(:func:`~deltaflow.prompt.writers.write_chat`); ``tool_choice`` goes to the
upstream as it is (its server enforces it), and the plan's ``tools_on`` is
False (the server attaches no parser). :meth:`GatewayEngine.deltas` streams
the server's parsed answer as :class:`~deltaflow.messages.DeltaMessage`
objects; ``generate`` is not used for such a model.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import structlog

from ..constrain import ToolConstraint, prepare_request
from ..errors import DeltaflowError
from ..items import EngineUsage, TokenChunk
from ..messages import DeltaMessage
from ..parsers import registry
from ..prompt.conversation import AssistantTurn, Conversation
from ..prompt.readers import RequestProtocol, read_chat, read_messages, read_responses
from ..prompt.render import PromptModel, RenderedPrompt
from ..prompt.writers import thinking_of, write_chat
from ..server.engine import EngineRequest, ModelInfo
from ..signing import ReasoningSealer, ReasoningSigner
from ..stages.assembler import Usage
from .metrics import GatewayMetrics, ModelMetrics
from .reasoning import ChatReasoningPolicy, ReasoningPolicy, check_reasoning_policies, verify_reasoning
from .upstream import ChatRequest, ChatUpstream, Upstream, UpstreamError, UpstreamRequest

__all__ = ("GatewayEngine", "GatewayModel", "Plan", "PlanError")

_log = structlog.get_logger("deltaflow.gateway")

_READERS = {"chat.completions": read_chat, "responses": read_responses, "messages": read_messages}
_PROTOCOLS: dict[str, RequestProtocol] = {"chat.completions": "chat", "responses": "responses", "messages": "messages"}

# End-of-turn texts that close an answer, beyond the tokenizer's eos token: one per family whose
# template ends an assistant turn with a token other than its eos (left out when the tool dialect
# uses the text as a marker of its own, as Harmony's <|call|> is).
_TURN_ENDS = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<｜end▁of▁sentence｜>", "<|endoftext|>")


class PlanError(DeltaflowError, ValueError):
    """A request the gateway cannot serve as asked (a 400 in the client's protocol).

    Attributes:
        status: the HTTP status (400).
        code: an OpenAI-style error code (``context_length_exceeded``, ``tool_choice_unsupported`` ...).
    """

    def __init__(self, message: str, *, code: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass(frozen=True)
class GatewayModel:
    """One served model: its prompt side, its upstream, and its limits.

    Attributes:
        name: the model id clients ask for.
        prompt: the chat template, tokenizer and parsers (for a passthrough
            model, whose upstream renders and parses itself, a
            ``PromptModel(name, None)`` will do: none of them is used).
        upstream: the engine that generates for it (a
            :class:`~deltaflow.gateway.upstream.ChatUpstream`: the passthrough).
        context_length: the upstream's context window in tokens (prompt plus
            generation), or None (not checked).
        max_tokens: the generation limit when a request gives none (None: the
            rest of the context window, else the upstream's default).
        stop: end-of-turn texts that end generation and are dropped from the
            answer's end (default: the tokenizer's eos token and the family's
            turn-end token, as found in the tokenizer).
        description: one line for ``GET /v1/models``.
        clamp_max_tokens: a request's limit larger than the context left is
            lowered to what is left (True), instead of a 400 (False, the
            default). Claude Code asks 32,000 tokens of any model.
    """

    name: str
    prompt: PromptModel
    upstream: Upstream
    context_length: int | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] | None = None
    description: str = ""
    clamp_max_tokens: bool = False

    @functools.cached_property
    def passthrough(self) -> bool:
        """Whether the upstream speaks Chat Completions itself (renders the prompt and parses the output).

        Found once: a check against a runtime-checkable protocol inspects the
        class's attributes each time (it showed in the per-request profile).
        """
        return isinstance(self.upstream, ChatUpstream)

    def stop_texts(self) -> tuple[str, ...]:
        """The end-of-turn texts (see :attr:`stop`)."""
        return self._stop_texts

    @functools.cached_property
    def _stop_texts(self) -> tuple[str, ...]:
        # Found once: the tokenizer's added tokens as a set were a fiftieth of each request's CPU.
        if self.stop is not None:
            return self.stop
        found: list[str] = []
        template = self.prompt.template
        eos = template.special_tokens.get("eos_token") if template is not None else None
        if eos:
            found.append(eos)
        tok = self.prompt.tokenizer
        if tok is not None:
            known = set(tok.added_token_texts)
            found.extend(t for t in _TURN_ENDS if t in known)
        markers: set[str] = set()
        if self.prompt.tool_parser is not None:
            d = registry.get_tool_dialect(self.prompt.tool_parser)
            markers = {*d.markers, *d.openers}
        return tuple(t for t in dict.fromkeys(found) if t not in markers)


@dataclass(frozen=True)
class Plan:
    """What :meth:`GatewayEngine.plan` decided for one request.

    Attributes:
        model: the served model.
        conversation: the request, read, with its reasoning verified (what was rendered).
        prompt: the rendered prompt (None for a passthrough: nothing is rendered).
        upstream_request: what the upstream is sent (for a passthrough, only
            its limit, sampling options and the client's stops, with an empty
            prompt: the upstream is sent :attr:`chat_request`).
        tools_on: whether the response is parsed for tool calls (False for
            ``tool_choice: "none"`` or no tools, and for a passthrough).
        enable_thinking: for the reasoning parser (None: its default).
        reasoning_starts_open: for the reasoning parser (None: its default).
        stop_texts: the end-of-turn texts dropped from the answer's end.
        chat_request: for a passthrough, the Chat request the upstream is sent; else None.
    """

    model: GatewayModel
    conversation: Conversation
    prompt: RenderedPrompt | None
    upstream_request: UpstreamRequest
    tools_on: bool
    enable_thinking: bool | None
    reasoning_starts_open: bool | None
    stop_texts: tuple[str, ...] = field(default=())
    chat_request: ChatRequest | None = None

    @property
    def passthrough(self) -> bool:
        """Whether the answer comes parsed from a Chat Completions upstream (:meth:`GatewayEngine.deltas`)."""
        return self.chat_request is not None


class GatewayEngine:
    """Serves models through upstream engines (see the module docstring).

    Args:
        models: the served models (their names must differ).
        metrics: where to count (default: a registry of the engine's own).
        signer: verifies the thinking signatures of Anthropic requests; it
            must be the signer of the server's framers (:meth:`use_keys` sets
            it after construction). None: a keyless signer, which verifies the
            signatures of this process's other keyless signers.
        sealer: opens the ``encrypted_content`` of Responses reasoning items
            (None: the sealer of ``signer``'s key).
        unverified_reasoning: what becomes of reasoning sent back without a
            valid signature or seal: ``"drop"`` (default: left out of the
            prompt) or ``"refuse"`` (a 400 naming the block); see
            :mod:`deltaflow.gateway.reasoning`.
        chat_reasoning: what becomes of Chat ``reasoning_content`` in the
            history, which cannot be verified: ``"accept"`` (default, as
            vLLM), ``"drop"`` or ``"refuse"``.

    Raises:
        ValueError: two models share a name, none is given, or a reasoning policy is unknown.
    """

    #: The server reads this engine's output in a task of its own and parses and writes each burst of
    #: upstream events (what one socket read brought) at once (see ``create_app(coalesce=...)``).
    coalesce = True

    def __init__(
        self,
        models: Sequence[GatewayModel],
        *,
        metrics: GatewayMetrics | None = None,
        signer: ReasoningSigner | None = None,
        sealer: ReasoningSealer | None = None,
        unverified_reasoning: ReasoningPolicy = "drop",
        chat_reasoning: ChatReasoningPolicy = "accept",
    ) -> None:
        if not models:
            raise ValueError("a gateway needs at least one model")
        check_reasoning_policies(unverified_reasoning, chat_reasoning)
        self.unverified_reasoning: ReasoningPolicy = unverified_reasoning
        self.chat_reasoning: ChatReasoningPolicy = chat_reasoning
        self._signer = signer if signer is not None else ReasoningSigner()
        self._sealer = sealer
        self._models: dict[str, GatewayModel] = {}
        for m in models:
            if m.name in self._models:
                raise ValueError(f"two models are named {m.name!r}")
            self._models[m.name] = m
        self.metrics = metrics if metrics is not None else GatewayMetrics()

    def use_keys(self, signer: ReasoningSigner, sealer: ReasoningSealer | None = None) -> None:
        """Verify reasoning with the server's keys: the signer (and sealer) its framers sign (and seal) with.

        Args:
            signer: the signer of the Anthropic framers.
            sealer: the sealer of the Responses framers (None: the sealer of ``signer``'s key).
        """
        self._signer = signer
        self._sealer = sealer

    def _opener(self) -> ReasoningSealer:
        """The sealer (of the signer's key unless one was given; made when a seal first needs opening)."""
        if self._sealer is None:
            self._sealer = ReasoningSealer.from_signer(self._signer)
        return self._sealer

    async def health(self) -> dict[str, bool]:
        """Whether each model's upstream answers its health endpoint now (checked concurrently, 5 s at most)."""
        result: dict[str, bool] = {}

        async def check(m: GatewayModel) -> None:
            ok = False
            with anyio.move_on_after(5.0):
                try:
                    ok = await m.upstream.health()
                except Exception:  # an unreachable upstream is "not healthy", never an error here
                    ok = False
            result[m.name] = ok

        async with anyio.create_task_group() as tg:
            for m in self._models.values():
                tg.start_soon(check, m)
        return result

    def metrics_text(self) -> tuple[bytes, str]:
        """The Prometheus exposition of :attr:`metrics` and its content type."""
        return self.metrics.render()

    async def aclose(self) -> None:
        """Close every upstream's pooled connections."""
        for m in self._models.values():
            await m.upstream.aclose()

    @property
    def served(self) -> Mapping[str, GatewayModel]:
        """The served models by name."""
        return self._models

    def models(self) -> list[ModelInfo]:
        """The models, as the server lists them (text comes back from the upstream: no tokenizer needed)."""
        return [
            ModelInfo(
                id=m.name,
                tool_parser=m.prompt.tool_parser,
                reasoning_parser=m.prompt.reasoning_parser,
                description=m.description or f"{m.name} via {m.upstream.kind}",
            )
            for m in self._models.values()
        ]

    # -- planning ----------------------------------------------------------------------------
    def plan(self, request: EngineRequest) -> Plan:
        """Read, render and constrain one request (before the response starts); for a passthrough
        model, read, verify and write it as a Chat request (nothing rendered, no constraint).

        Raises:
            RequestError: the body is invalid in its API, or (under
                ``unverified_reasoning="refuse"``) it sends back reasoning this
                server did not sign or seal.
            PromptError: the template cannot express the conversation.
            TemplateError: the template raised.
            PlanError: the request cannot be served as asked (context length,
                a constraint the upstream cannot take).
            ToolChoiceError / UnsupportedConstraintError: an impossible ``tool_choice``.
        """
        model = self._models[request.model]
        reader = _READERS.get(request.protocol)
        if reader is None:
            raise ValueError(f"unknown protocol {request.protocol!r}")
        try:
            plan = self._plan(model, reader, request)
        except Exception:
            self.metrics.model(model.name).request(request.protocol, "refused")
            raise
        self.metrics.model(model.name).request(request.protocol, "accepted")
        return plan

    def _plan(self, model: GatewayModel, reader: Any, request: EngineRequest) -> Plan:
        conversation = self._verified(reader(request.body), request)
        if model.passthrough:
            return self._plan_passthrough(model, conversation, request)
        rendered = model.prompt.render(conversation, tokens=model.prompt.tokenizer is not None)
        choice = conversation.tool_choice
        tools_on = bool(conversation.tools) and choice.mode != "none" and model.prompt.tool_parser is not None
        constraint = self._constraint(model, conversation, rendered) if tools_on else None
        opts = conversation.options
        prompt_len = len(rendered.token_ids) if rendered.token_ids is not None else None
        max_tokens = self._limit(model, request, opts.max_tokens, prompt_len)
        stops = model.stop_texts()
        upstream_request = UpstreamRequest(
            prompt=rendered.text,
            prompt_ids=rendered.token_ids,
            max_tokens=max_tokens,
            temperature=opts.temperature,
            top_p=opts.top_p,
            seed=opts.seed,
            stop=tuple(dict.fromkeys((*stops, *opts.stop))),
            constraint=constraint,
            stream=request.stream,
            logprobs=_logprobs(request),
        )
        return Plan(
            model=model,
            conversation=conversation,
            prompt=rendered,
            upstream_request=upstream_request,
            tools_on=tools_on,
            enable_thinking=rendered.enable_thinking,
            reasoning_starts_open=rendered.reasoning_starts_open,
            stop_texts=stops,
        )

    def _plan_passthrough(self, model: GatewayModel, conversation: Conversation, request: EngineRequest) -> Plan:
        """The plan of a Chat Completions upstream: the conversation written as Chat, nothing rendered.

        ``tool_choice`` is the upstream's to enforce, so no constraint is built
        (and none is refused); the context is the upstream's to check.
        """
        opts = conversation.options
        max_tokens = self._limit(model, request, opts.max_tokens, None)
        body = write_chat(conversation, max_tokens=max_tokens)
        if request.protocol == "chat.completions" and request.body.get("logprobs"):
            # Asked by a Chat client: the engine's token logprobs are passed on (the Chat framer
            # writes them); the other APIs have no place for them.
            body["logprobs"] = True
            top = request.body.get("top_logprobs")
            if isinstance(top, int) and not isinstance(top, bool) and top > 0:
                body["top_logprobs"] = top
        return Plan(
            model=model,
            conversation=conversation,
            prompt=None,
            upstream_request=UpstreamRequest(
                prompt="",
                max_tokens=max_tokens,
                temperature=opts.temperature,
                top_p=opts.top_p,
                seed=opts.seed,
                stop=opts.stop,
                stream=request.stream,
            ),
            tools_on=False,
            enable_thinking=thinking_of(conversation),
            reasoning_starts_open=None,
            chat_request=ChatRequest(body=body, stream=request.stream),
        )

    def _verified(self, conversation: Conversation, request: EngineRequest) -> Conversation:
        """The conversation with only the reasoning this server vouches for (:func:`verify_reasoning`)."""
        if not any(isinstance(t, AssistantTurn) and t.reasoning for t in conversation.turns):
            return conversation
        protocol = _PROTOCOLS[request.protocol]
        return verify_reasoning(
            conversation,
            protocol=protocol,
            signer=self._signer,
            sealer=self._opener() if protocol == "responses" else None,
            policy=self.unverified_reasoning,
            chat_policy=self.chat_reasoning,
            body=request.body,
        )

    @staticmethod
    def _constraint(model: GatewayModel, conversation: Conversation, rendered: RenderedPrompt) -> ToolConstraint | None:
        choice = conversation.tool_choice
        if choice.mode not in ("required", "named") and choice.allowed is None:
            return None  # "auto": the model decides; nothing to force
        assert conversation.tools is not None and model.prompt.tool_parser is not None
        allowed = set(choice.allowed) if choice.allowed is not None else None
        tools = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    **({"description": t.description} if t.description else {}),
                    "parameters": t.parameters or {"type": "object"},
                    **({"strict": True} if t.name in conversation.strict_tools else {}),
                },
            }
            for t in conversation.tools
            if allowed is None or t.name in allowed
        ]
        if choice.mode == "named":
            api_choice: Any = {"type": "function", "function": {"name": choice.name}}
        elif choice.mode == "required":
            api_choice = "required"
        else:
            return None  # allowed_tools with "auto": a subset the model may use; not forced
        if not model.upstream.constraint_forms:
            raise PlanError(
                f"tool_choice {choice.mode!r} needs a constrained upstream, and model {model.name!r} is served by "
                f"{model.upstream.kind!r}, which cannot constrain generation; use tool_choice 'auto'",
                code="tool_choice_unsupported",
            )
        prepared = prepare_request(
            tools,
            api_choice,
            tool_parser=model.prompt.tool_parser,
            reasoning_parser=model.prompt.reasoning_parser,
            enable_thinking=rendered.enable_thinking,
            parallel_tool_calls=choice.parallel,
            lazy_auto=False,
        )
        return prepared.constraint

    @staticmethod
    def _limit(model: GatewayModel, request: EngineRequest, asked: int | None, prompt_len: int | None) -> int | None:
        ctx = model.context_length
        if ctx is None or prompt_len is None:
            return asked if asked is not None else model.max_tokens
        room = ctx - prompt_len
        field_name = {"messages": "max_tokens", "responses": "max_output_tokens"}.get(request.protocol, "max_tokens")
        if asked is not None and 0 < room < asked and model.clamp_max_tokens:
            _log.info("max_tokens_clamped", model=model.name, asked=asked, left=room)
            return room
        if room <= 0 or (asked is not None and asked > room):
            raise PlanError(
                f"the prompt is {prompt_len} tokens and {field_name} is {asked if asked is not None else 'unset'}: "
                f"model {model.name!r} has a context of {ctx} tokens (at most {max(room, 0)} left for the answer); "
                f"shorten the conversation or lower {field_name}",
                code="context_length_exceeded",
            )
        if asked is not None:
            return asked
        return min(room, model.max_tokens) if model.max_tokens is not None else room

    # -- passthrough -------------------------------------------------------------------------
    async def deltas(self, request: EngineRequest, usage: Usage | None = None) -> AsyncGenerator[DeltaMessage, None]:
        """Stream the parsed answer of a Chat Completions upstream for a planned request (plans it when
        the server did not).

        The upstream's deltas are yielded as they come, read only as the
        caller asks for the next one; closing this iterator early closes the
        upstream request. Counted in the metrics as ``generate`` counts:
        streams in flight, time to the first and between deltas, tokens,
        upstream failures.

        Args:
            request: the request (its ``plan``, from :meth:`plan`, when the server made one).
            usage: filled in with the upstream's token counts as it reports
                them (complete once the stream ended).

        Raises:
            ValueError: the request's model is not served by a Chat Completions upstream.
            UpstreamError: the upstream failed (see :class:`~deltaflow.gateway.upstream.ChatUpstream`).
        """
        plan = request.plan if isinstance(request.plan, Plan) else self.plan(request)
        upstream = plan.model.upstream
        if plan.chat_request is None or not isinstance(upstream, ChatUpstream):
            raise ValueError(f"model {plan.model.name!r} is not served by a Chat Completions upstream: "
                             "use generate()")
        name = plan.model.name
        m = self.metrics.model(name)
        ttft, itl = m.ttft, m.itl
        reported: Usage | None = None
        m.in_flight.inc()
        started = last = time.perf_counter()
        first = True
        source = upstream.chat(plan.chat_request)
        del request, plan, upstream  # not needed while the answer streams (see generate)
        try:
            async for item in source:
                if isinstance(item, Usage):
                    reported = item
                    if usage is not None:
                        self._take_usage(usage, item)
                    continue
                if item.content or item.reasoning_content or item.tool_calls:
                    now = time.perf_counter()
                    if first:
                        ttft.observe(now - started)
                        first = False
                    else:
                        itl.observe(now - last)
                    last = now
                yield item
            if reported is not None:
                _count_usage(m, EngineUsage(
                    prompt_tokens=reported.prompt_tokens,
                    completion_tokens=reported.completion_tokens if reported.completion_known else None,
                ))
        except UpstreamError as exc:
            self.metrics.upstream_errors.labels(name, exc.kind).inc()
            _log.warning("upstream_failed", model=name, kind=exc.kind, status=exc.status, error=exc.message)
            raise
        finally:
            m.in_flight.dec()
            await source.aclose()

    @staticmethod
    def _take_usage(into: Usage, reported: Usage) -> None:
        """Copy the counts an upstream reported (a later report replaces an earlier one field by field)."""
        if reported.prompt_tokens is not None:
            into.prompt_tokens = reported.prompt_tokens
        if reported.completion_known:
            into.completion_tokens, into.completion_known = reported.completion_tokens, True
        if reported.reasoning_known:
            into.reasoning_tokens, into.reasoning_known = reported.reasoning_tokens, True

    # -- generation --------------------------------------------------------------------------
    async def generate(self, request: EngineRequest) -> AsyncIterator[TokenChunk]:
        """Stream the upstream's answer for a planned request (plans it when the server did not)."""
        plan = request.plan if isinstance(request.plan, Plan) else self.plan(request)
        ends = plan.stop_texts
        longest = max((len(e) for e in ends), default=0)
        starts = "".join(sorted({e[0] for e in ends if e}))  # a partial end text starts with one of these
        single = starts if len(starts) == 1 else None
        held = ""
        name = plan.model.name
        m = self.metrics.model(name)
        m.in_flight.inc()
        ttft, itl = m.ttft, m.itl
        started = last = time.perf_counter()
        first = True
        source = plan.model.upstream.generate(plan.upstream_request)
        # The upstream's body is built: the plan (the conversation, the rendered prompt and its token
        # ids) is not needed while the answer streams, so this generator does not keep it alive.
        del request, plan
        try:
            async for chunk in source:
                text = chunk.text or ""
                if text:
                    now = time.perf_counter()
                    if first:
                        ttft.observe(now - started)
                        first = False
                    else:
                        itl.observe(now - last)
                    last = now
                if chunk.usage is not None and chunk.finish_reason is not None:  # counts are cumulative
                    _count_usage(m, chunk.usage)
                if chunk.finish_reason is not None:
                    text = held + text
                    held = ""
                    for e in ends:
                        if text.endswith(e):
                            text = text[: -len(e)]
                            break
                    yield TokenChunk(token_ids=chunk.token_ids, text=text, logprobs=chunk.logprobs,
                                     finish_reason=chunk.finish_reason, usage=chunk.usage)
                    continue
                if longest:
                    if held:
                        text = held + text
                    if single is None or single in text[-longest:]:  # else (most tokens) nothing to hold
                        keep = _partial_end(text, ends, longest, starts)
                        held = text[len(text) - keep :] if keep else ""
                        text = text[: len(text) - keep]
                    else:
                        held = ""
                if text is chunk.text:  # nothing held back or released: the chunk as it came (most tokens)
                    yield chunk
                    continue
                yield TokenChunk(token_ids=chunk.token_ids, text=text, logprobs=chunk.logprobs, usage=chunk.usage)
            if held:
                yield TokenChunk(text=held)
        except UpstreamError as exc:
            self.metrics.upstream_errors.labels(name, exc.kind).inc()
            _log.warning("upstream_failed", model=name, kind=exc.kind, status=exc.status, error=exc.message)
            raise
        finally:
            m.in_flight.dec()
            await source.aclose()


def _count_usage(m: ModelMetrics, usage: Any) -> None:
    prompt = getattr(usage, "prompt_tokens", None)
    completion = getattr(usage, "completion_tokens", None)
    if isinstance(prompt, int):
        m.prompt_tokens.inc(prompt)
    if isinstance(completion, int):
        m.generated_tokens.inc(completion)


def _partial_end(text: str, ends: tuple[str, ...], longest: int, starts: str | None = None) -> int:
    """How many characters at the end of ``text`` may be (the start of) an end-of-turn text.

    The longest suffix of ``text`` that some end text starts with. Such a suffix
    begins with an end text's first character, so only the places of those
    characters in the last ``longest`` characters are tried, leftmost (longest)
    first.

    ``starts``: the first characters of ``ends`` (computed when not given).
    """
    tail = text[-longest:]
    if starts is None:
        starts = "".join({e[0] for e in ends if e})
    p = _first_of(tail, starts, 0)
    while p >= 0:
        rest = tail[p:]
        for e in ends:
            if e.startswith(rest):
                return len(tail) - p
        p = _first_of(tail, starts, p + 1)
    return 0


def _first_of(text: str, chars: str, at: int) -> int:
    """The first place from ``at`` of any of ``chars`` in ``text``, or -1."""
    return min((q for c in chars if (q := text.find(c, at)) >= 0), default=-1)


def _logprobs(request: EngineRequest) -> int | None:
    body = request.body
    if request.protocol == "chat.completions" and body.get("logprobs"):
        top = body.get("top_logprobs")
        return top if isinstance(top, int) and top > 0 else 1
    return None
