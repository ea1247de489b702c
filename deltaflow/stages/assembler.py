"""Assembler: items -> :class:`~deltaflow.messages.DeltaMessage` s, with each chunk's metadata.

Stable-prefix guarantee: holds the items of the current engine chunk until
its :class:`~deltaflow.items.ChunkEnd` (in a fused chain they arrive in the
same batch, so nothing waits), and the metadata of chunks that produced no
delta until the next delta.

Rules (DESIGN.md, "Items between stages"):

* Adjacent items of one chunk that belong together are merged into one
  delta (text of the same channel; fragments of the same call), keeping the
  model's real channel order: reasoning -> tool call -> reasoning stay three
  deltas.
* A chunk's token ids and logprobs go on the last delta that chunk
  produced; if it produced none, on the next delta emitted (the first delta
  of a later chunk, or an empty delta at the end of the stream at the
  latest): each reaches the client once, in order.
* The finish reason goes on the last delta of the stream; ``"stop"``
  becomes ``"tool_calls"`` when an accepted call was emitted.
* Usage: the counts the engine reports (:class:`~deltaflow.items.EngineUsage`
  items) come first; else completion tokens are the token ids seen and
  reasoning tokens as counted by the reasoning splitter; a count neither
  gives is unknown (``Usage.completion_known`` / ``reasoning_known`` False,
  ``prompt_tokens`` None).
"""

from __future__ import annotations

import msgspec

from ..errors import StateError
from ..items import CallDelta, Channel, ChannelText, ChunkEnd, EngineUsage
from ..messages import DeltaFunctionCall, DeltaMessage, DeltaToolCall

__all__ = ("DeltaAssembler", "Usage")


class Usage(msgspec.Struct, kw_only=True):
    """Token counts of one response (complete once the stream ended).

    Attributes:
        completion_tokens: the engine's count when it reported one, else the
            token ids seen; 0 when neither (then ``completion_known`` is False).
        reasoning_tokens: the token ids inside reasoning (counted by the
            reasoning splitter); 0 without token ids (then ``reasoning_known``
            is False).
        prompt_tokens: the engine's count of the prompt; None when it reported none.
        completion_known: ``completion_tokens`` was measured (an engine report or token ids).
        reasoning_known: ``reasoning_tokens`` was measured (token ids were seen).
    """

    completion_tokens: int = 0
    reasoning_tokens: int = 0
    prompt_tokens: int | None = None
    completion_known: bool = False
    reasoning_known: bool = False


class DeltaAssembler:
    """Frames items into deltas (see the module docstring)."""

    __slots__ = ("_finish_reason", "_finished", "_ids", "_items", "_logprobs", "_reported", "calls_emitted", "usage")

    name = "assembler"

    def __init__(self) -> None:
        self.calls_emitted = 0
        self.usage = Usage()
        self._items: list[object] = []
        self._ids: list[int] = []
        self._logprobs: list[object] | None = None
        self._finish_reason: str | None = None
        self._finished = False
        self._reported = False  # the engine reported a completion count: token ids are no longer counted

    @property
    def idle(self) -> bool:
        """No item waits for a chunk end and no metadata of a silent chunk waits for a delta.

        Then a text-only chunk (no ids, logprobs or finish reason) may be framed
        directly with :meth:`frame`, without a :class:`ChunkEnd`.
        """
        return not self._items and not self._ids and self._logprobs is None

    def feed(self, item: object) -> list[DeltaMessage]:
        """Take one item; frame the chunk on its :class:`ChunkEnd`."""
        if item.__class__ is not ChunkEnd:
            self._items.append(item)
            return []
        assert isinstance(item, ChunkEnd)
        deltas = self.frame(self._items) if self._items else []
        self._items = []
        if item.token_ids:
            usage = self.usage
            usage.reasoning_tokens += item.reasoning_tokens
            usage.reasoning_known = True
            if not self._reported:
                usage.completion_tokens += len(item.token_ids)
                usage.completion_known = True
        if item.finish_reason is not None:
            self._finish_reason = item.finish_reason
        if not deltas:
            # A silent chunk: its metadata waits for the next delta emitted.
            self._ids.extend(item.token_ids)
            if item.logprobs:
                if self._logprobs is None:
                    self._logprobs = []
                self._logprobs.extend(item.logprobs)
            return deltas
        if self._ids or self._logprobs is not None:
            first = deltas[0]  # held metadata of earlier silent chunks: the next delta emitted
            first.token_ids = self._ids
            first.logprobs = self._logprobs
            self._ids = []
            self._logprobs = None
        if item.token_ids or item.logprobs:
            last = deltas[-1]  # this chunk's own metadata: its last delta
            if last.token_ids is None:
                last.token_ids = list(item.token_ids)
            else:
                last.token_ids = last.token_ids + item.token_ids
            if item.logprobs:
                last.logprobs = (last.logprobs or []) + list(item.logprobs)
        return deltas

    def finish(self) -> list[DeltaMessage]:
        """The stream ended: frame what is left and put the held metadata and finish reason on the last delta."""
        if self._finished:
            raise StateError("DeltaAssembler.finish() called twice")
        self._finished = True
        deltas = self.frame(self._items) if self._items else []
        self._items = []
        if self._ids or self._logprobs is not None or self._finish_reason is not None:
            if not deltas:
                deltas.append(DeltaMessage())
            last = deltas[-1]
            if self._ids:
                last.token_ids = self._ids
            if self._logprobs is not None:
                last.logprobs = self._logprobs
            reason = self._finish_reason
            if reason == "stop" and self.calls_emitted:
                reason = "tool_calls"
            last.finish_reason = reason
        return deltas

    def frame(self, items: list[object]) -> list[DeltaMessage]:
        """Merge and convert one chunk's items."""
        if len(items) == 1:
            # One item (most chunks of a stream): nothing to merge, the same delta as below.
            it = items[0]
            if isinstance(it, CallDelta) and it.name is None:
                tc = DeltaToolCall(index=it.index, function=DeltaFunctionCall(arguments=it.args))
                return [DeltaMessage(tool_calls=[tc])]
            if isinstance(it, ChannelText):
                if not it.text:
                    return []
                if it.channel is Channel.CONTENT:
                    return [DeltaMessage(content=it.text)]
                return [DeltaMessage(reasoning_content=it.text)]
        out: list[DeltaMessage] = []
        i = 0
        n = len(items)
        while i < n:
            it = items[i]
            if it.__class__ is ChannelText:
                assert isinstance(it, ChannelText)
                ch = it.channel
                j = i + 1
                while j < n and items[j].__class__ is ChannelText and items[j].channel is ch:  # type: ignore[attr-defined]
                    j += 1
                text = it.text if j == i + 1 else "".join(x.text for x in items[i:j])  # type: ignore[attr-defined]
                if text:
                    if ch is Channel.CONTENT:
                        out.append(DeltaMessage(content=text))
                    else:
                        out.append(DeltaMessage(reasoning_content=text))
                i = j
                continue
            if it.__class__ is CallDelta:
                assert isinstance(it, CallDelta)
                idx = it.index
                j = i + 1
                while (
                    j < n
                    and items[j].__class__ is CallDelta
                    and items[j].index == idx  # type: ignore[attr-defined]
                    and items[j].name is None  # type: ignore[attr-defined]
                ):
                    j += 1
                args = it.args if j == i + 1 else "".join(x.args for x in items[i:j])  # type: ignore[attr-defined]
                if it.name is not None:
                    self.calls_emitted += 1
                    tc = DeltaToolCall(
                        index=idx,
                        id=it.id,
                        type="function",
                        function=DeltaFunctionCall(name=it.name, arguments=args or None),
                    )
                else:
                    tc = DeltaToolCall(index=idx, function=DeltaFunctionCall(arguments=args))
                out.append(DeltaMessage(tool_calls=[tc]))
                i = j
                continue
            if it.__class__ is EngineUsage:
                assert isinstance(it, EngineUsage)
                self._report(it)
                i += 1
                continue
            raise TypeError(f"the assembler cannot frame a {type(it).__name__}")
        return out

    def _report(self, report: EngineUsage) -> None:
        """Take the engine's counts (they replace the measured ones, field by field)."""
        usage = self.usage
        if report.completion_tokens is not None:
            usage.completion_tokens = report.completion_tokens
            usage.completion_known = True
            self._reported = True
        if report.prompt_tokens is not None:
            usage.prompt_tokens = report.prompt_tokens
