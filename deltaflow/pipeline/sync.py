"""The synchronous composition of the stages.

``ResponseParser`` runs, fused, for one response::

    channel router -> reasoning splitter -> tool block feeder -> identity-first buffer
        -> name filter -> assembler

``parse_complete`` feeds a whole text through the same chain with
``final=True`` and accumulates the deltas: there is no second grammar.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..errors import StateError
from ..items import ChunkEnd
from ..messages import ChatMessage, DeltaMessage, FunctionCall, ToolCall
from ..parsers import registry
from ..presets import resolve_model
from ..stages._protocol import Stage
from ..stages.assembler import DeltaAssembler
from ..stages.detokenize import Detokenizer
from ..stages.identity import IdentityFirstBuffer
from ..stages.name_filter import NameFilter, new_call_id
from ..stages.reasoning import ReasoningSplitter
from ..stages.router import ChannelRouter, router_factory
from ..stages.tool_feeder import ToolBlockFeeder, check_tool_calls_in_reasoning
from ..tools import ToolSpec, normalize_tools
from .chain import SyncChain

__all__ = ("ResponseParser", "accumulate", "default_stage_factories", "default_stages", "parse_complete")

_CHUNKINGS = ("any", "tokens")


def default_stage_factories(
    tool_parser: str | None = None,
    reasoning_parser: str | None = None,
    tools: Sequence[Mapping[str, Any] | ToolSpec] | None = None,
    enable_thinking: bool | None = None,
    *,
    chunking: str = "any",
    id_factory: Callable[[], str] = new_call_id,
    tokenizer: Any = None,
    detokenize: bool = False,
    model: str | None = None,
    reasoning_starts_open: bool | None = None,
    tool_calls_in_reasoning: str = "trailing",
) -> list[tuple[str, Callable[[], Stage]]]:
    """The default ``(name, factory)`` pairs for a dialect; each factory builds a fresh stage.

    The chain is: detokenize (only with ``detokenize=True``), channel router,
    reasoning splitter, tool block feeder, identity-first buffer, name
    filter/reindexer (the last three only with a tool parser), assembler.
    Arguments are validated here, once, not per response. ``model`` picks
    the parsers of a preset (:mod:`deltaflow.presets`) unless given explicitly.

    Raises:
        UnknownModelError: ``model`` has no preset.
        UnknownParserError: an unregistered parser name.
        ToolSpecError: an invalid ``tools`` entry.
        ValueError: a bad ``chunking``.
    """
    if chunking not in _CHUNKINGS:
        raise ValueError(f"chunking must be 'any' or 'tokens', got {chunking!r}")
    check_tool_calls_in_reasoning(tool_calls_in_reasoning)
    if enable_thinking is not None and not isinstance(enable_thinking, bool):
        raise TypeError(f"enable_thinking must be a bool or None, got {type(enable_thinking).__name__}")
    if reasoning_starts_open is not None and not isinstance(reasoning_starts_open, bool):
        raise TypeError(
            f"reasoning_starts_open must be a bool or None, got {type(reasoning_starts_open).__name__}"
        )
    if model is not None:
        preset = resolve_model(model)
        tool_parser = tool_parser if tool_parser is not None else preset.tool_parser
        reasoning_parser = reasoning_parser if reasoning_parser is not None else preset.reasoning_parser
    dialect = registry.get_tool_dialect(tool_parser) if tool_parser is not None else None
    rspec = registry.get_reasoning_dialect(reasoning_parser) if reasoning_parser is not None else None
    specs = normalize_tools(tools)
    by_name = {s.name: s for s in specs} if specs is not None else None
    allowed = None if by_name is None else frozenset(by_name)
    if enable_thinking is None:
        thinking = rspec.default_enabled if rspec is not None else True
    else:
        thinking = enable_thinking
    out: list[tuple[str, Callable[[], Stage]]] = []
    router = router_factory(tool_parser, reasoning_parser, reasoning=rspec is not None and thinking, chunking=chunking)
    if detokenize:
        keep: list[str] = list(router.markers)
        if rspec is not None:
            keep += [rspec.start, rspec.end]
        if dialect is not None:
            keep += [*dialect.openers, *dialect.markers, *dialect.framing]
        if tokenizer is not None:
            Detokenizer(tokenizer, keep=keep)  # fail now on an unsupported tokenizer
        out.append(("detokenize", lambda: Detokenizer(tokenizer, keep=keep)))
    out.append(("router", router))
    starts_open = reasoning_starts_open
    out.append(
        ("reasoning", lambda: ReasoningSplitter(rspec, enabled=thinking, starts_open=starts_open, chunking=chunking))
    )
    if dialect is not None:
        in_reasoning = tool_calls_in_reasoning
        out.append(
            ("tools", lambda: ToolBlockFeeder(dialect, tools=by_name, chunking=chunking, in_reasoning=in_reasoning))
        )
        out.append(("identity", IdentityFirstBuffer))
        out.append(("name_filter", lambda: NameFilter(allowed, id_factory)))
    out.append(("assembler", DeltaAssembler))
    return out


def default_stages(*args: Any, **kwargs: Any) -> list[Stage]:
    """Fresh default stages for one response (arguments as :func:`default_stage_factories`)."""
    return [make() for _, make in default_stage_factories(*args, **kwargs)]


class ResponseParser:
    """Parses one model response, chunk by chunk, into :class:`~deltaflow.messages.DeltaMessage` s.

    One instance per response; not shared, not reset. It runs the same
    stages as the async pipeline (:func:`deltaflow.stream`), fused and
    synchronous.

    Args:
        tool_parser: a registered tool parser name (``deltaflow parsers``
            lists them), or None for no tool parsing.
        reasoning_parser: a registered reasoning parser name, or None.
        tools: the request's tools (OpenAI or Anthropic format, or
            :class:`~deltaflow.ToolSpec` s). When given,
            calls to other names are never emitted (their text is surfaced
            as content).
        enable_thinking: False turns reasoning splitting off (the prompt
            disabled thinking); None or True: the dialect's default.
        reasoning_starts_open: whether the output starts inside reasoning,
            because the prompt ended with the opening marker (SGLang's
            ``force_reasoning``, llama.cpp's ``thinking_forced_open``).
            False: reasoning starts only at a ``<think>`` the model writes, so
            output without one is content. None: the dialect's default
            (``deltaflow parsers`` shows it; ``qwen3`` starts open).
        tool_calls_in_reasoning: what a tool block inside reasoning is:
            ``"trailing"`` (default) a call only when the output ends after it
            (blanks and further blocks only), else reasoning text; held until
            that is known, at most 4,096 characters. ``"always"``: a call at
            once, streamed, the reasoning resuming after it (reasoning ->
            tool call -> reasoning); a call to a tool not offered is
            reasoning text. ``"never"``: reasoning text, as vLLM and SGLang
            read it. See CONFORMANCE.md, "Tool blocks and reasoning".
        chunking: ``"any"`` (default) holds every proper prefix of a marker
            at a chunk end, so text may be re-chunked anywhere;
            ``"tokens"`` holds only the prefixes the dialect's real
            tokenizer can leave at a token boundary, for token-aligned input.
        id_factory: makes ids for calls (default: ``call_`` + 24 hex digits).
        model: a model name whose preset gives the parsers not passed
            explicitly (e.g. ``"Qwen/Qwen3-8B"``; see :mod:`deltaflow.presets`).

    Raises:
        UnknownParserError: an unregistered parser name (a ``ValueError``).
        UnknownModelError: ``model`` has no preset (a ``ValueError``).
        ToolSpecError: an invalid ``tools`` entry (a ``ValueError``).
    """

    __slots__ = ("_chain", "_pre", "_assembler", "_final")

    def __init__(
        self,
        tool_parser: str | None = None,
        reasoning_parser: str | None = None,
        tools: Sequence[Mapping[str, Any] | ToolSpec] | None = None,
        enable_thinking: bool | None = None,
        *,
        chunking: str = "any",
        id_factory: Callable[[], str] = new_call_id,
        model: str | None = None,
        reasoning_starts_open: bool | None = None,
        tool_calls_in_reasoning: str = "trailing",
    ) -> None:
        stages = default_stages(
            tool_parser,
            reasoning_parser,
            tools,
            enable_thinking,
            chunking=chunking,
            id_factory=id_factory,
            model=model,
            reasoning_starts_open=reasoning_starts_open,
            tool_calls_in_reasoning=tool_calls_in_reasoning,
        )
        assembler = stages[-1]
        assert isinstance(assembler, DeltaAssembler)
        self._assembler = assembler
        self._chain = SyncChain(stages)
        # The same stages without the assembler: a plain text chunk carries no metadata, so it
        # needs no ChunkEnd walking through every stage; the assembler frames its items directly.
        # A router without a routing machine forwards every item unchanged and holds nothing, so
        # text chunks skip it (the final feed still runs every stage).
        self._pre = SyncChain([st for st in stages[:-1] if not (isinstance(st, ChannelRouter) and st.passthrough)])
        self._final = False

    @property
    def tool_calls_emitted(self) -> int:
        """How many tool calls were emitted so far."""
        return self._assembler.calls_emitted

    def feed(self, text: str, final: bool = False, *, finish_reason: str | None = None) -> list[DeltaMessage]:
        """Parse the next chunk of model output.

        Args:
            text: the chunk (any split of the output; may be empty).
            final: the output ended with this chunk: held text is released,
                an arguments object already started is closed.
            finish_reason: with ``final``, set on the last delta (``"stop"``
                becomes ``"tool_calls"`` when a call was emitted).

        Returns:
            The deltas that are now stable: possibly several, possibly none.

        Raises:
            StateError: called again after ``final=True``.
            TypeError: ``text`` is not a str.
        """
        if self._final:
            raise StateError("feed() called after final=True; use one ResponseParser per response")
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if not final:
            if not text:
                return []
            items = self._pre.run([text])
            return self._assembler.frame(items) if items else []
        self._final = True
        end = ChunkEnd(finish_reason=finish_reason)
        return self._chain.finish([text, end] if text else [end])


def accumulate(deltas: Iterable[DeltaMessage]) -> ChatMessage:
    """Rebuild the complete message from a stream of deltas.

    Content and reasoning pieces are joined (``None`` when empty); tool-call
    fragments are joined by index.
    """
    content: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, list[Any]] = {}
    finish: str | None = None
    for d in deltas:
        if d.content:
            content.append(d.content)
        if d.reasoning_content:
            reasoning.append(d.reasoning_content)
        for tc in d.tool_calls:
            entry = calls.get(tc.index)
            if entry is None:
                entry = calls[tc.index] = [tc.id or "", tc.function.name or "", []]
            else:
                if tc.id:
                    entry[0] = tc.id
                if tc.function.name:
                    entry[1] = tc.function.name
            if tc.function.arguments:
                entry[2].append(tc.function.arguments)
        if d.finish_reason is not None:
            finish = d.finish_reason
    return ChatMessage(
        content="".join(content) or None,
        reasoning_content="".join(reasoning) or None,
        tool_calls=[
            ToolCall(id=cid, function=FunctionCall(name=name, arguments="".join(args)))
            for _, (cid, name, args) in sorted(calls.items())
        ],
        finish_reason=finish,
    )


def parse_complete(
    text: str,
    *,
    tool_parser: str | None = None,
    reasoning_parser: str | None = None,
    tools: Sequence[Mapping[str, Any] | ToolSpec] | None = None,
    enable_thinking: bool | None = None,
    id_factory: Callable[[], str] = new_call_id,
    model: str | None = None,
    reasoning_starts_open: bool | None = None,
    tool_calls_in_reasoning: str = "trailing",
) -> ChatMessage:
    """Parse a complete model output.

    Feeds ``text`` through a :class:`ResponseParser` with ``final=True`` and
    accumulates the deltas, so the result is exactly what the stream rebuilds.

    Args:
        text: the whole output.
        tool_parser: see :class:`ResponseParser`.
        reasoning_parser: see :class:`ResponseParser`.
        tools: see :class:`ResponseParser`.
        enable_thinking: see :class:`ResponseParser`.
        id_factory: see :class:`ResponseParser`.
        model: see :class:`ResponseParser`.
        reasoning_starts_open: see :class:`ResponseParser`.
        tool_calls_in_reasoning: see :class:`ResponseParser`.

    Returns:
        The message: ``content``, ``reasoning_content`` (pieces joined; None
        when empty) and ``tool_calls``.
    """
    parser = ResponseParser(
        tool_parser,
        reasoning_parser,
        tools,
        enable_thinking,
        id_factory=id_factory,
        model=model,
        reasoning_starts_open=reasoning_starts_open,
        tool_calls_in_reasoning=tool_calls_in_reasoning,
    )
    return accumulate(parser.feed(text, final=True))
