"""Blank separators: the whitespace a template puts between a thought and a call is not the model's answer.

Many chat templates write a blank line between the end of the reasoning and
the first tool call (Qwen3: ``</think>\\n\\n<tool_call>``), or between two
calls, and a model trained on them writes it too. A parser that keeps every
character outside the markers serves that blank as content: a Chat
``content`` of ``"\\n\\n"``, an Anthropic text block or a Responses message
item holding nothing but a line break. Sent back in the next request, it is
rendered as a turn the model never wrote (``assistant\\n\\n\\n\\n<tool_call>``),
and the prompt stops sharing the prefix the engine has cached.

:class:`BlankSeparators` holds a run of whitespace-only content that follows
the start of the response, a thought or a call, and decides when it knows
what comes next:

* text follows: the run goes out in front of it (nothing is lost from an
  answer: ``"\\n\\nThe answer"`` stays as it was);
* a thought follows: the run goes out before it, as content;
* a call follows, or the response ends: the run was a separator and is dropped,
  unless the response had nothing else at all (then it is the answer).

Only content is touched: reasoning, calls, token ids, logprobs and the finish
reason pass unchanged, in order (a delta left with no payload is not sent).
The parsers themselves keep every character, as the conformance corpus
expects; this is a choice of what a server shows a client, off unless asked
for (:func:`drop_blank_separators`).
"""

from __future__ import annotations

from typing import Any

import anyio

from ..messages import DeltaMessage
from .runner import DeltaStream

__all__ = ("BlankSeparators", "drop_blank_separators")


class BlankSeparators:
    """Holds whitespace-only content until what follows it is known (see the module docstring)."""

    __slots__ = ("_pending", "_in_text", "_emitted")

    def __init__(self) -> None:
        self._pending: list[str] = []
        self._in_text = False  # non-blank content was sent since the last thought or call
        self._emitted = False  # anything visible was sent (a thought, a call or text)

    def feed(self, delta: DeltaMessage) -> list[DeltaMessage]:
        """The deltas to send for ``delta`` (none, it, or held content and it)."""
        content = delta.content
        if self._in_text and not self._pending:
            if delta.reasoning_content or delta.tool_calls:
                self._in_text = False
                self._emitted = True
            return [delta]
        out: list[DeltaMessage] = []
        if delta.reasoning_content:
            if self._pending:
                out.append(DeltaMessage(content="".join(self._pending)))
                self._pending.clear()
            self._emitted = True
            self._in_text = False
        if delta.tool_calls:
            self._pending.clear()  # a separator before a call
            self._emitted = True
            self._in_text = False
        if content:
            if not self._in_text and content.isspace():
                self._pending.append(content)
                delta = _without_content(delta)
            else:
                if self._pending:
                    content = "".join(self._pending) + content
                    self._pending.clear()
                    delta = _with_content(delta, content)
                self._in_text = True
                self._emitted = True
        if _has_payload(delta):
            out.append(delta)
        return out

    def finish(self) -> list[DeltaMessage]:
        """At the end: a held run is dropped, unless it is all the response had."""
        pending, self._pending = self._pending, []
        if pending and not self._emitted:
            self._emitted = True
            return [DeltaMessage(content="".join(pending))]
        return []


def _has_payload(d: DeltaMessage) -> bool:
    return bool(
        d.content or d.reasoning_content or d.tool_calls or d.token_ids or d.logprobs is not None
        or d.finish_reason is not None
    )


def _without_content(d: DeltaMessage) -> DeltaMessage:
    return DeltaMessage(
        reasoning_content=d.reasoning_content,
        tool_calls=d.tool_calls,
        token_ids=d.token_ids,
        logprobs=d.logprobs,
        finish_reason=d.finish_reason,
    )


def _with_content(d: DeltaMessage, content: str) -> DeltaMessage:
    return DeltaMessage(
        content=content,
        reasoning_content=d.reasoning_content,
        tool_calls=d.tool_calls,
        token_ids=d.token_ids,
        logprobs=d.logprobs,
        finish_reason=d.finish_reason,
    )


class _SeparatorStream(DeltaStream):
    """A :class:`DeltaStream` whose deltas went through :class:`BlankSeparators`."""

    __slots__ = ("_inner", "_filter", "_out", "_at", "_done")

    def __init__(self, inner: DeltaStream) -> None:
        # The inner stream's usage object is shared: it is complete once the inner stream ended.
        self.usage = inner.usage
        self.stream_id = inner.stream_id
        self._inner = inner
        self._filter = BlankSeparators()
        self._out: list[DeltaMessage] = []
        self._at = 0
        self._done = False

    async def __anext__(self) -> DeltaMessage:
        out = self._out
        while self._at >= len(out):
            if self._done:
                raise StopAsyncIteration
            try:
                delta = await self._inner.__anext__()
            except StopAsyncIteration:
                self._done = True
                out = self._filter.finish()
            else:
                out = self._filter.feed(delta)
            self._out, self._at = out, 0
        self._at += 1
        return out[self._at - 1]

    async def receive(self) -> DeltaMessage:
        """Receive the next delta (raises ``anyio.EndOfStream`` at the end)."""
        try:
            return await self.__anext__()
        except StopAsyncIteration:
            raise anyio.EndOfStream from None

    def take_ready(self) -> list[DeltaMessage]:
        """The filtered deltas that are ready now, without waiting (possibly none)."""
        out, at = self._out, self._at
        ready = out[at:] if at < len(out) else []
        self._out, self._at = [], 0
        feed = self._filter.feed
        for delta in self._inner.take_ready():
            ready += feed(delta)
        return ready

    async def aclose(self) -> None:
        """Stop reading (closes the inner stream)."""
        await self._inner.aclose()

    def statistics(self) -> Any:
        """The inner stream's statistics."""
        return self._inner.statistics()


def drop_blank_separators(deltas: DeltaStream) -> DeltaStream:
    """``deltas`` with the blank separators between thoughts, calls and the end left out (module docstring).

    Args:
        deltas: what :func:`deltaflow.stream` yielded.

    Returns:
        a :class:`DeltaStream` over the same response, sharing its ``usage`` and ``stream_id``.
    """
    return _SeparatorStream(deltas)
