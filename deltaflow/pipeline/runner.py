"""The async shell: a :class:`Pipeline` of stages run over bounded anyio memory object streams.

Topology of one stream (built per response, fresh stage instances)::

    source --pump task--> [edge] --> fused sync stages (one task) --> [edge] --> ...
        ... --> async user stage (own task) --> [edge] --> fused sync stages --> [edge] --> consumer

* Adjacent synchronous stages are fused into one task (:class:`SyncChain`):
  an item pays no task switch per stage.
* Every edge is a memory object stream with a bounded buffer, so a slow
  consumer slows reading of the source (backpressure end to end).
* A fused task that finds several items waiting drains them with
  ``receive_nowait`` and runs them as one batch (coalescing); the output is
  the same as item by item.
* An exception in a stage or in the source cancels the other tasks and
  reaches the consumer as :class:`~deltaflow.errors.StageError` naming the
  stage, with the original as ``__cause__``.
* Leaving ``async with`` early cancels every task; the source is closed
  (``aclose``) in a shielded scope.

The default stream uses two tasks (the source pump and the fused chain) and
two memory streams (source -> chain, chain -> consumer). With
``prefetch=0`` nothing reads ahead: when every stage is synchronous (the
default chain), the consumer's own task pulls the source and runs the fused
chain as it iterates (no task, no memory stream: the lightest and fastest
way to run one response, and what the server uses); with an async stage,
the first fused chain pulls the source from its task.
"""

from __future__ import annotations

import inspect
import itertools
import sys
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol, runtime_checkable

import anyio
import structlog
from anyio.streams.memory import MemoryObjectReceiveStream as ObjectReceiveStream
from anyio.streams.memory import MemoryObjectSendStream as ObjectSendStream

from ..errors import StageError
from ..items import TokenChunk
from ..messages import DeltaMessage
from ..stages.assembler import DeltaAssembler, Usage
from ..stages.detokenize import Detokenizer
from ..stages.name_filter import new_call_id
from ..tools import ToolSpec
from .chain import SyncChain
from .companion import Companion, Wake, cancel_scope, raise_single
from .sources import to_chunk
from .sync import default_stage_factories

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

__all__ = ("AsyncStage", "DeltaStream", "Pipeline", "stream")

_log = structlog.get_logger("deltaflow")
_stream_ids = itertools.count(1)


@runtime_checkable
class AsyncStage(Protocol):
    """A user stage with its own task: it reads items from ``receive`` and writes to ``send``.

    It must forward items it does not handle (including
    :class:`~deltaflow.items.ChunkEnd`) and return when ``receive`` ends; the
    runner closes both streams afterwards.
    """

    name: str

    async def run(self, receive: ObjectReceiveStream[Any], send: ObjectSendStream[Any]) -> None: ...


StageFactory = Callable[[], Any]


def _is_async_stage(stage: object) -> bool:
    run = getattr(stage, "run", None)
    return run is not None and inspect.iscoroutinefunction(run) and not hasattr(stage, "feed")


class DeltaStream:
    """What :func:`stream` yields: an async iterator of :class:`~deltaflow.messages.DeltaMessage`.

    Attributes:
        usage: token counts, complete once the stream ended.
        stream_id: the id bound to this stream's log events.
    """

    __slots__ = ("_receive", "usage", "stream_id")

    def __init__(self, receive: ObjectReceiveStream[DeltaMessage], usage: Usage, stream_id: str) -> None:
        self._receive = receive
        self.usage = usage
        self.stream_id = stream_id

    def __aiter__(self) -> DeltaStream:
        return self

    async def __anext__(self) -> DeltaMessage:
        try:
            return self._receive.receive_nowait()
        except anyio.WouldBlock:
            pass
        except anyio.EndOfStream:
            raise StopAsyncIteration from None
        try:
            return await self._receive.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def receive(self) -> DeltaMessage:
        """Receive the next delta (raises ``anyio.EndOfStream`` at the end)."""
        return await self._receive.receive()

    def take_ready(self) -> list[DeltaMessage]:
        """The deltas that are ready now, without waiting (possibly none), in order.

        A writer that takes them after each delta it awaited sends everything
        the pipeline has produced as one write (see :func:`~deltaflow.sinks.sse.run_framed`).
        """
        out: list[DeltaMessage] = []
        receive_nowait = self._receive.receive_nowait
        while True:
            try:
                out.append(receive_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream):
                return out

    async def aclose(self) -> None:
        """Stop reading (the pipeline is cancelled when its ``async with`` exits)."""
        await self._receive.aclose()

    def statistics(self) -> Any:
        """The memory stream statistics of the consumer edge (None when the chain runs inline)."""
        return self._receive.statistics()


class _InlineDeltaStream(DeltaStream):
    """A :class:`DeltaStream` whose consumer task pulls the source and runs the fused chain itself.

    Used with ``prefetch=0`` when every stage is synchronous: no task and no
    memory stream, and the source is read only when the consumer asks for a
    delta that is not ready (backpressure by construction).
    """

    __slots__ = ("_chain", "_text_path", "_it", "_ready", "_at", "_ended", "_diagnosed", "_backlog", "_fault")

    def __init__(
        self,
        chain: SyncChain,
        source: AsyncIterable[Any],
        usage: Usage,
        stream_id: str,
        backlog: _Backlog | None = None,
    ) -> None:
        self.usage = usage
        self.stream_id = stream_id
        self._chain = chain
        # A text item carries no metadata: with only built-in stages between the detokenizer and
        # the assembler, it needs no empty ChunkEnd walking through every stage (ResponseParser.feed
        # frames text the same way), and the assembler frames the middle stages' items at once.
        st = chain.stages
        self._text_path: tuple[SyncChain, DeltaAssembler] | None = None
        if (
            len(st) >= 2
            and isinstance(st[0], Detokenizer)
            and isinstance(st[-1], DeltaAssembler)
            and all(type(s).__module__.startswith("deltaflow.") for s in st[1:-1])
        ):
            self._text_path = (SyncChain(st[1:-1]), st[-1])
        # With a backlog (coalescing), a pump task owns the source: this stream takes what it read.
        self._backlog = backlog
        self._fault: StageError | None = None  # a bad source item met while merging, raised next step
        self._it: Any = source.__aiter__() if backlog is None else None
        self._ready: list[Any] = []
        self._at = 0
        self._ended = False
        self._diagnosed: tuple[Any, ...] = tuple(
            st for st in chain.stages if getattr(st, "diagnostics", None) is not None
        )

    async def __anext__(self) -> DeltaMessage:
        ready = self._ready
        while self._at >= len(ready):
            if self._ended:
                raise StopAsyncIteration
            chain = self._chain
            backlog = self._backlog
            several: list[Any] | None = None
            if self._fault is not None:
                raise self._fault
            try:
                if backlog is None:
                    raw = await self._it.__anext__()
                else:
                    taken = await backlog.take()
                    if len(taken) == 1:
                        raw = taken[0]
                    else:
                        several = self._merged(taken)
                        if len(several) == 1:
                            raw, several = several[0], None
            except StopAsyncIteration:
                self._ended = True
                ready = chain.finish()
            except Exception as exc:
                raise StageError("source", f"the source raised {exc!r}") from exc
            else:
                text_path = self._text_path
                if several is not None:  # chunks that do not merge (or none before a bad item)
                    self._text_path = None
                    ready = chain.run(several) if several else []
                elif raw.__class__ is str and text_path is not None and text_path[1].idle:
                    items = text_path[0].run([raw]) if raw else []
                    ready = text_path[1].frame(items) if items else []
                else:
                    # Stages count tokens between chunk ends (reasoning tokens): once a chunk
                    # carries metadata, every later chunk takes the full chain.
                    self._text_path = None
                    try:
                        chunk = to_chunk(raw)
                    except TypeError as exc:
                        raise StageError("source", str(exc)) from exc
                    ready = chain.run([chunk])
            for st in self._diagnosed:
                if st.diagnostics:
                    _diagnose(chain)
                    break
            self._ready, self._at = ready, 0
        out: DeltaMessage = ready[self._at]
        self._at += 1
        return out

    async def receive(self) -> DeltaMessage:
        """Receive the next delta (raises ``anyio.EndOfStream`` at the end)."""
        try:
            return await self.__anext__()
        except StopAsyncIteration:
            raise anyio.EndOfStream from None

    def _merged(self, items: list[Any]) -> list[Any]:
        """``items`` merged (:func:`merge_chunks`); a bad item ends the batch: the chunks before it are
        returned, and the next step raises what the item is (as without coalescing)."""
        try:
            return merge_chunks(items)
        except TypeError:
            pass
        good: list[TokenChunk] = []
        for it in items:
            try:
                good.append(to_chunk(it))
            except TypeError as exc:
                fault = StageError("source", str(exc))
                fault.__cause__ = exc
                self._fault = fault
                break
        return merge_chunks(good) if good else []

    def take_ready(self) -> list[DeltaMessage]:
        """The rest of the deltas of the chunk the chain ran last (what is ready without waiting)."""
        ready, at = self._ready, self._at
        if at >= len(ready):
            return []
        self._at = len(ready)
        return ready[at:] if at else ready

    async def aclose(self) -> None:
        """Stop reading and close the source (with a backlog, its pump task closes it)."""
        self._ended = True
        self._ready, self._at = [], 0
        if self._it is not None:
            await _aclose(self._it)

    def statistics(self) -> Any:
        """None: an inline chain has no consumer edge."""
        return None


class _Backlog:
    """What a pump task (:func:`_fill`) read from the source and the consumer has not taken yet.

    The pump appends without waiting until ``limit`` items wait; the consumer
    takes everything at once (:meth:`take`), merged into one chunk where the
    chunks allow (:func:`merge_chunks`). A task reading an HTTP response takes
    every event of one socket read before it waits again, so under load one
    step of the consumer parses, frames and writes what came in one read.
    """

    __slots__ = ("_items", "_limit", "_done", "_error", "_wake", "_room")

    def __init__(self, limit: int) -> None:
        self._items: list[Any] = []
        self._limit = limit
        self._done = False
        self._error: Exception | None = None
        self._wake: Wake | None = None  # set when the consumer waits for items
        self._room: Wake | None = None  # set when the pump waits for room

    def add(self, item: Any) -> bool:
        """Add an item (the pump); True when ``limit`` items wait: the pump then awaits :meth:`room`."""
        items = self._items
        items.append(item)
        self._wake_consumer()
        return len(items) >= self._limit

    async def room(self) -> None:
        """Wait until the consumer has taken what waits (after :meth:`add` said it is full)."""
        if len(self._items) >= self._limit:
            self._room = room = Wake()
            await room.wait()

    def end(self, error: Exception | None = None) -> None:
        """The source ended (``error``: it raised that; the consumer raises it after the items before it)."""
        self._done = True
        self._error = error
        self._wake_consumer()

    def _wake_consumer(self) -> None:
        wake = self._wake
        if wake is not None:
            self._wake = None
            wake.set()

    async def take(self) -> list[Any]:
        """Everything waiting (one item at least), in order; waits for one if none does.

        Raises:
            StopAsyncIteration: the source ended and everything was taken.
            Exception: what the source raised, once everything before it was taken.
        """
        items = self._items
        while not items:
            if self._done:
                if self._error is not None:
                    raise self._error
                raise StopAsyncIteration
            self._wake = wake = Wake()
            await wake.wait()
            items = self._items
        self._items = []
        room = self._room
        if room is not None:
            self._room = None
            room.set()
        return items


async def _fill(source: AsyncIterable[Any], backlog: _Backlog) -> None:
    """The coalescing pump: read the source into ``backlog`` until it ends; close it in any case."""
    it = source.__aiter__()
    try:
        while True:
            try:
                item = await it.__anext__()
            except StopAsyncIteration:
                backlog.end()
                return
            except Exception as exc:  # the consumer raises it, as when it reads the source itself
                backlog.end(exc)
                return
            if backlog.add(item):  # no coroutine per item: the pump waits only when the backlog is full
                await backlog.room()
    finally:
        await _aclose(it)


def merge_chunks(items: Sequence[Any]) -> list[Any]:
    """Consecutive source items joined where the result means the same to the pipeline.

    Strings join into one string. :class:`~deltaflow.items.TokenChunk` s (and
    ids, after :func:`~deltaflow.pipeline.sources.to_chunk`) join while they
    agree on having text and on having logprobs; a chunk with a finish reason
    or usage ends a joined run. The parsers give the same output on every
    chunking, so a merged chunk changes only how many deltas there are.

    Raises:
        TypeError: an item is not a source item (see :func:`~deltaflow.pipeline.sources.to_chunk`).
    """
    if all(it.__class__ is str for it in items):
        return ["".join(items)]
    out: list[Any] = []
    run: list[TokenChunk] = []
    for it in items:
        chunk = to_chunk(it)
        if run and (
            (chunk.text is None) is not (run[0].text is None)
            or (chunk.logprobs is None) is not (run[0].logprobs is None)
        ):
            out.append(_joined(run))
            run = []
        run.append(chunk)
        if chunk.finish_reason is not None or chunk.usage is not None:
            out.append(_joined(run))
            run = []
    if run:
        out.append(_joined(run))
    return out


def _joined(run: list[TokenChunk]) -> TokenChunk:
    if len(run) == 1:
        return run[0]
    last = run[-1]
    ids: list[int] = []
    for c in run:
        ids += c.token_ids
    logprobs: list[object] | None = None
    if last.logprobs is not None:
        logprobs = []
        for c in run:
            logprobs += c.logprobs or ()
    # Each token's share of the text, as the chunks tell it (one token per chunk: its whole text), so
    # that counting reasoning tokens needs no tokenizer after a merge either.
    chars: list[int] | None = None
    if last.text is not None:
        chars = []
        for c in run:
            n = len(c.token_ids)
            if c.token_chars is not None and len(c.token_chars) == n:
                chars += c.token_chars
            elif n == 1:
                chars.append(len(c.text or ""))
            elif n or c.text:  # several tokens of unknown shares, or text without a token
                chars = None
                break
    return TokenChunk(
        token_ids=ids,
        text=None if last.text is None else "".join([c.text or "" for c in run]),
        logprobs=logprobs,
        finish_reason=last.finish_reason,
        usage=last.usage,
        token_chars=chars if ids else None,
    )


class Pipeline:
    """An ordered list of named stage factories, and the runtime that connects them.

    Each stream builds fresh stage instances from the factories, so one
    Pipeline can serve many concurrent responses.

    Args:
        stages: ``(name, factory)`` pairs; a factory returns a synchronous
            stage (``feed``/``finish``) or an async stage (:class:`AsyncStage`).
        buffer_size: the buffer of every memory stream edge.
        prefetch: when > 0, a pump task reads the source ahead into an edge of
            this size and the chain coalesces waiting items; 0 reads nothing
            ahead: with only synchronous stages the consumer's task runs the
            chain inline (no task), otherwise the first chain pulls the source.
        max_batch: the most waiting items one coalesced batch takes (with
            ``coalesce``: the most chunks the pump reads ahead).
        coalesce: with ``prefetch=0`` and only synchronous stages: a pump task
            reads the source, and each time the consumer needs a delta its
            task takes everything the pump has read since, merged into one
            chunk (:func:`merge_chunks`), and runs the chain on it. One task
            more per stream; under load, one parse and one write per burst of
            chunks instead of one per chunk. Off: the consumer reads the
            source itself.
    """

    def __init__(
        self,
        stages: Sequence[tuple[str, StageFactory]] = (),
        *,
        buffer_size: int = 16,
        prefetch: int = 16,
        max_batch: int = 64,
        coalesce: bool = False,
        log_context: dict[str, Any] | None = None,
    ) -> None:
        if buffer_size < 0 or prefetch < 0 or max_batch < 1:
            raise ValueError("buffer_size and prefetch must be >= 0 and max_batch >= 1")
        self._stages: list[tuple[str, StageFactory]] = []
        for name, factory in stages:
            self._add(len(self._stages), name, factory)
        self.buffer_size = buffer_size
        self.prefetch = prefetch
        self.max_batch = max_batch
        self.coalesce = coalesce
        self.log_context = dict(log_context or {})

    @classmethod
    def for_model(
        cls,
        tool_parser: str | None = None,
        reasoning_parser: str | None = None,
        tools: Sequence[Mapping[str, Any] | ToolSpec] | None = None,
        enable_thinking: bool | None = None,
        *,
        tokenizer: Any = None,
        chunking: str | None = None,
        id_factory: Callable[[], str] = new_call_id,
        model: str | None = None,
        reasoning_starts_open: bool | None = None,
        tool_calls_in_reasoning: str = "trailing",
        **options: Any,
    ) -> Pipeline:
        """The default chain for a dialect.

        Args:
            tool_parser: see :class:`~deltaflow.ResponseParser`.
            reasoning_parser: see :class:`~deltaflow.ResponseParser`.
            tools: see :class:`~deltaflow.ResponseParser`.
            enable_thinking: see :class:`~deltaflow.ResponseParser`.
            tokenizer: decodes token-id sources (``tokenizers.Tokenizer``,
                ``tiktoken.Encoding`` or a transformers fast tokenizer).
            chunking: ``"any"`` (default) or ``"tokens"`` (only when every
                chunk is token-aligned, e.g. a source of token ids only).
            id_factory: makes call ids.
            model: a model name whose preset gives the parsers not passed explicitly.
            reasoning_starts_open: see :class:`~deltaflow.ResponseParser`.
            tool_calls_in_reasoning: see :class:`~deltaflow.ResponseParser`.
            **options: ``buffer_size``, ``prefetch``, ``max_batch``, ``coalesce``.

        Raises:
            UnknownParserError, ToolSpecError: as :class:`~deltaflow.ResponseParser`.
        """
        # Text sources may be split anywhere, even when a tokenizer is given for id sources:
        # "tokens" is only safe when the caller knows every chunk is token-aligned.
        mode = chunking or "any"
        factories = default_stage_factories(
            tool_parser,
            reasoning_parser,
            tools,
            enable_thinking,
            chunking=mode,
            id_factory=id_factory,
            tokenizer=tokenizer,
            detokenize=True,
            model=model,
            reasoning_starts_open=reasoning_starts_open,
            tool_calls_in_reasoning=tool_calls_in_reasoning,
        )
        context = {"tool_parser": tool_parser, "reasoning_parser": reasoning_parser, "model": model}
        return cls(factories, log_context=context, **options)

    # -- composition ------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        """The stage names, in order."""
        return [n for n, _ in self._stages]

    def _index(self, name: str) -> int:
        for i, (n, _) in enumerate(self._stages):
            if n == name:
                return i
        raise KeyError(f"no stage named {name!r}; stages: {', '.join(self.names)}")

    def _add(self, at: int, name: str, factory: StageFactory) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("a stage name must be a non-empty str")
        if any(n == name for n, _ in self._stages):
            raise ValueError(f"a stage named {name!r} is already in the pipeline")
        if not callable(factory):
            raise TypeError(f"the factory of stage {name!r} must be callable, got {type(factory).__name__}")
        self._stages.insert(at, (name, factory))

    def insert_before(self, before: str, name: str, factory: StageFactory) -> Pipeline:
        """Insert a stage before the stage named ``before``; returns self."""
        self._add(self._index(before), name, factory)
        return self

    def insert_after(self, after: str, name: str, factory: StageFactory) -> Pipeline:
        """Insert a stage after the stage named ``after``; returns self."""
        self._add(self._index(after) + 1, name, factory)
        return self

    def append(self, name: str, factory: StageFactory) -> Pipeline:
        """Add a stage at the end; returns self."""
        self._add(len(self._stages), name, factory)
        return self

    def replace(self, name: str, factory: StageFactory) -> Pipeline:
        """Replace the factory of the stage named ``name``; returns self."""
        i = self._index(name)
        self._stages[i] = (name, factory)
        return self

    def remove(self, name: str) -> Pipeline:
        """Remove the stage named ``name``; returns self."""
        del self._stages[self._index(name)]
        return self

    def build(self) -> list[Any]:
        """Fresh stage instances for one response, in order."""
        stages = []
        for name, factory in self._stages:
            st = factory()
            if getattr(st, "name", None) != name:
                try:
                    st.name = name
                except AttributeError:
                    pass
            stages.append(st)
        return stages

    # -- running ------------------------------------------------------------------
    @asynccontextmanager
    async def open(self, source: AsyncIterable[Any]) -> AsyncIterator[DeltaStream]:
        """Run the pipeline over ``source``; yields a :class:`DeltaStream` of deltas.

        Raises:
            StageError: a stage or the source raised (``__cause__`` is the original).
        """
        if not isinstance(source, AsyncIterable):
            raise TypeError(f"source must be an async iterable, got {type(source).__name__}")
        stages = self.build()
        prefetch, coalesce, max_batch, buffer_size = self.prefetch, self.coalesce, self.max_batch, self.buffer_size
        log_context = self.log_context
        # The open stream needs its stages, not the pipeline: the factories (and the request's tools and
        # parser options they close over) are let go here, unless the caller keeps the pipeline itself.
        del self
        for st in stages:
            if hasattr(st, "diagnostics"):
                st.diagnostics = []
        assembler = next((s for s in reversed(stages) if isinstance(s, DeltaAssembler)), None)
        usage = assembler.usage if assembler is not None else Usage()
        stream_id = f"df-{next(_stream_ids)}"
        segments: list[Any] = []
        for st in stages:
            if _is_async_stage(st):
                segments.append(st)
            elif segments and isinstance(segments[-1], list):
                segments[-1].append(st)
            else:
                segments.append([st])
        # prefetch=0 and only synchronous stages: the consumer's task runs the chain (see the class docstring)
        inline_chain = prefetch == 0 and len(segments) == 1 and isinstance(segments[0], list)
        with _LogContext(stream_id=stream_id, **log_context):
            if inline_chain and not coalesce:
                inline = _InlineDeltaStream(SyncChain(segments[0]), source, usage, stream_id)
                try:
                    yield inline
                finally:
                    await inline.aclose()
                return
            try:
                if inline_chain:  # coalescing: a pump task reads the source (see Companion: a bare task on asyncio)
                    async with Companion() as helper:
                        backlog = _Backlog(max_batch)
                        helper.start_soon(_fill, source, backlog)
                        inline = _InlineDeltaStream(SyncChain(segments[0]), source, usage, stream_id, backlog)
                        try:
                            yield inline
                        finally:
                            await inline.aclose()  # leaving the block cancels the pump: it closes the source
                    return
                async with anyio.create_task_group() as tg:
                    receive: ObjectReceiveStream[Any] | None = None
                    if prefetch > 0 or not segments or not isinstance(segments[0], list):
                        send0, receive = anyio.create_memory_object_stream[Any](prefetch)
                        tg.start_soon(_pump, source, send0)
                    for _k, seg in enumerate(segments):
                        send, nxt = anyio.create_memory_object_stream[Any](buffer_size)
                        if isinstance(seg, list):
                            chain = SyncChain(seg)
                            if receive is None:
                                tg.start_soon(_run_chain_pulling, chain, source, send)
                            else:
                                tg.start_soon(_run_chain, chain, receive, send, max_batch)
                        else:
                            assert receive is not None
                            tg.start_soon(_run_async_stage, seg, receive, send)
                        receive = nxt
                    assert receive is not None
                    deltas = DeltaStream(receive, usage, stream_id)
                    try:
                        yield deltas
                    finally:
                        tg.cancel_scope.cancel()
                        await receive.aclose()
            except BaseExceptionGroup as group:
                raise_single(group)


class _LogContext:
    """Binds structlog context variables for a block and restores them after it: what
    ``structlog.contextvars.bound_contextvars`` does, without a generator held by every open stream."""

    __slots__ = ("_kw", "_saved")

    def __init__(self, **kw: Any) -> None:
        self._kw = kw
        self._saved: dict[str, Any] | None = None

    def __enter__(self) -> None:
        kw = self._kw
        context = structlog.contextvars.get_contextvars()
        self._saved = {k: context[k] for k in kw if k in context} or None  # the caller's own values
        structlog.contextvars.bind_contextvars(**kw)  # its tokens are not kept: the restore is by value

    def __exit__(self, *exc_info: object) -> None:
        structlog.contextvars.unbind_contextvars(*self._kw)
        if self._saved:
            structlog.contextvars.bind_contextvars(**self._saved)


async def _aclose(source: Any) -> None:
    aclose = getattr(source, "aclose", None)
    if aclose is not None and getattr(source, "ag_frame", True) is not None:  # a finished generator has none
        with cancel_scope(shield=True):
            await aclose()


_END = object()


async def _next_chunk(it: Any) -> Any:
    """The source's next item as a TokenChunk, or ``_END``; its failures become StageError("source")."""
    try:
        raw = await it.__anext__()
    except StopAsyncIteration:
        return _END
    except Exception as exc:
        raise StageError("source", f"the source raised {exc!r}") from exc
    try:
        return to_chunk(raw)
    except TypeError as exc:
        raise StageError("source", str(exc)) from exc


async def _pump(source: AsyncIterable[Any], send: ObjectSendStream[Any]) -> None:
    """Read the source into the first edge (stops when the edge's reader is gone)."""
    it = source.__aiter__()
    try:
        async with send:
            while (chunk := await _next_chunk(it)) is not _END:
                try:
                    await send.send(chunk)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    break
    finally:
        await _aclose(it)


def _diagnose(chain: SyncChain) -> None:
    for st in chain.stages:
        diags = getattr(st, "diagnostics", None)
        if diags:
            for event, fields in diags:
                _log.debug(event, stage=st.name, **fields)
            diags.clear()


async def _send_all(send: ObjectSendStream[Any], items: list[Any]) -> bool:
    try:
        for it in items:
            await send.send(it)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        return False
    return True


async def _run_chain(
    chain: SyncChain, receive: ObjectReceiveStream[Any], send: ObjectSendStream[Any], max_batch: int
) -> None:
    """A fused task: receive (coalescing what waits), run the sync stages, send the outputs."""
    async with receive, send:
        while True:
            try:
                batch = [await receive.receive()]
            except anyio.EndOfStream:
                break
            while len(batch) < max_batch:
                try:
                    batch.append(receive.receive_nowait())
                except (anyio.WouldBlock, anyio.EndOfStream):
                    break
            out = chain.run(batch)
            _diagnose(chain)
            if out and not await _send_all(send, out):
                return
        out = chain.finish()
        _diagnose(chain)
        await _send_all(send, out)


async def _run_chain_pulling(chain: SyncChain, source: AsyncIterable[Any], send: ObjectSendStream[Any]) -> None:
    """A fused task that pulls the source itself (``prefetch=0``)."""
    it = source.__aiter__()
    try:
        async with send:
            while (chunk := await _next_chunk(it)) is not _END:
                out = chain.run([chunk])
                _diagnose(chain)
                if out and not await _send_all(send, out):
                    return
            out = chain.finish()
            _diagnose(chain)
            await _send_all(send, out)
    finally:
        await _aclose(it)


async def _run_async_stage(stage: Any, receive: ObjectReceiveStream[Any], send: ObjectSendStream[Any]) -> None:
    name = getattr(stage, "name", type(stage).__name__)
    async with receive, send:
        try:
            await stage.run(receive, send)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return
        except Exception as exc:
            raise StageError(name, f"stage {name!r} failed: {exc!r}") from exc


def stream(
    source: AsyncIterable[Any],
    *,
    tool_parser: str | None = None,
    reasoning_parser: str | None = None,
    tools: Sequence[Mapping[str, Any] | ToolSpec] | None = None,
    enable_thinking: bool | None = None,
    tokenizer: Any = None,
    chunking: str | None = None,
    pipeline: Pipeline | None = None,
    model: str | None = None,
    reasoning_starts_open: bool | None = None,
    tool_calls_in_reasoning: str = "trailing",
    **options: Any,
) -> AbstractAsyncContextManager[DeltaStream]:
    """Parse an engine's async output into a stream of deltas (an async context manager).

    Usage::

        async with deltaflow.stream(engine_output, tool_parser="hermes",
                                    reasoning_parser="qwen3", tokenizer=tok) as deltas:
            async for delta in deltas:
                ...

    Args:
        source: an async iterable of ``str``, token ids (``int`` or
            ``list[int]``) or :class:`~deltaflow.items.TokenChunk`.
        tool_parser: see :class:`~deltaflow.ResponseParser`.
        reasoning_parser: see :class:`~deltaflow.ResponseParser`.
        tools: see :class:`~deltaflow.ResponseParser`.
        enable_thinking: see :class:`~deltaflow.ResponseParser`.
        tokenizer: decodes token ids (required when the source gives ids without text).
        chunking: see :meth:`Pipeline.for_model`.
        pipeline: a custom :class:`Pipeline` (the dialect arguments are then ignored).
        model: a model name whose preset gives the parsers not passed explicitly.
        reasoning_starts_open: see :class:`~deltaflow.ResponseParser`.
        tool_calls_in_reasoning: see :class:`~deltaflow.ResponseParser`.
        **options: ``buffer_size``, ``prefetch``, ``max_batch``, ``coalesce`` for the default pipeline.

    Raises:
        UnknownParserError, ToolSpecError: at the call, as :meth:`Pipeline.for_model`.
        StageError: a stage or the source raised; ``__cause__`` is the original.
    """
    if pipeline is None:
        pipeline = Pipeline.for_model(
            tool_parser,
            reasoning_parser,
            tools,
            enable_thinking,
            tokenizer=tokenizer,
            chunking=chunking,
            model=model,
            reasoning_starts_open=reasoning_starts_open,
            tool_calls_in_reasoning=tool_calls_in_reasoning,
            **options,
        )
    return pipeline.open(source)
