"""Items that travel between stages: small immutable msgspec Structs.

The flow through the stages is::

    TokenChunk --detokenize--> [EngineUsage], str, ChunkEnd
        --channel router--> str, ChunkEnd (or, for channel-framed dialects such as
                            Harmony, ChannelText and ToolDelta directly)
        --reasoning splitter--> ChannelText
        --tool block feeder-->  ChannelText | ToolDelta   (raw events of the dialect's tool parser)
        --identity-first buffer--> ChannelText | ToolDelta (first event of a call names it)
        --name filter/reindexer--> ChannelText | CallDelta (accepted calls only, dense indexes)
        --assembler--> DeltaMessage

Raw model text travels as ``str`` (immutable). After the outputs one engine
chunk caused, every stage forwards that chunk's :class:`ChunkEnd` unchanged
(the reasoning splitter fills in ``reasoning_tokens``); the assembler attaches
its metadata to the last delta of the chunk, or to the next delta emitted.

An engine chunk's :class:`EngineUsage` (token counts the engine reports)
is emitted first among that chunk's items; every stage passes it through
like any item it does not handle, and the assembler takes it into the usage.

Every :class:`ToolDelta` carries the ``raw`` model text it accounts for, so a
call that is rejected (unknown name, malformed before its name) is surfaced
as text in the channel it was opened from: nothing is silently lost.
"""

from __future__ import annotations

import enum

import msgspec

__all__ = ("CallDelta", "Channel", "ChannelText", "ChunkEnd", "EngineUsage", "TokenChunk", "ToolDelta")


def _count(name: str, value: object) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise ValueError(f"EngineUsage.{name} must be a non-negative int or None, got {value!r}")


class EngineUsage(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """Token counts an engine reports for the response so far (cumulative; None: not reported).

    Carried by :attr:`TokenChunk.usage`. A later report replaces an earlier
    one field by field (a count left None keeps the earlier value). The
    engine's counts take priority over the ones deltaflow measures (completion
    tokens = token ids seen); a count neither reports is unknown, never 0.

    Attributes:
        prompt_tokens: tokens of the prompt (deltaflow never measures it).
        completion_tokens: tokens generated so far.

    Raises:
        ValueError: a count is negative or not an int.
    """

    prompt_tokens: int | None = None
    completion_tokens: int | None = None

    def __post_init__(self) -> None:
        _count("prompt_tokens", self.prompt_tokens)
        _count("completion_tokens", self.completion_tokens)


class TokenChunk(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """One engine output chunk: new token ids, optionally their text, logprobs and a finish reason.

    Attributes:
        token_ids: the new token ids (may be empty for a text-only chunk).
        text: the chunk's text when the engine already detokenized it; when
            None, the detokenize stage decodes ``token_ids``.
        logprobs: engine logprobs for these tokens (passed through untouched).
        finish_reason: set on the engine's last chunk (``"stop"``, ``"length"``, ...).
        usage: token counts the engine reports (typically on its last chunk), or None.
        token_chars: with ``text``: the characters of it each token added, when
            known without a tokenizer (a chunk merged from one-token chunks,
            :func:`~deltaflow.pipeline.runner.merge_chunks`); the reasoning-token
            count uses it. None: unknown (or decoded with the tokenizer).
    """

    token_ids: list[int] = msgspec.field(default_factory=list)
    text: str | None = None
    logprobs: list[object] | None = None
    finish_reason: str | None = None
    usage: EngineUsage | None = None
    token_chars: list[int] | None = None


class ChunkEnd(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """End marker of one engine chunk, forwarded unchanged by every stage.

    Attributes:
        token_ids: the chunk's token ids.
        logprobs: the chunk's logprobs.
        finish_reason: the chunk's finish reason.
        token_chars: characters of text each token added (None when unknown).
        reasoning_tokens: how many of the chunk's tokens lie in the raw
            reasoning span (set by the reasoning splitter).
    """

    token_ids: list[int] = msgspec.field(default_factory=list)
    logprobs: list[object] | None = None
    finish_reason: str | None = None
    token_chars: list[int] | None = None
    reasoning_tokens: int = 0


class Channel(enum.Enum):
    """Which visible channel a piece of text belongs to."""

    CONTENT = "content"
    REASONING = "reasoning"


class ChannelText(msgspec.Struct, frozen=True, tag=True, gc=False):
    """Plain text of one channel.

    The text may be empty: the reasoning splitter emits an empty content
    text where the end marker closed reasoning, so later stages see the
    channel change even when no content follows (the assembler ignores it).
    """

    channel: Channel
    text: str


class ToolDelta(msgspec.Struct, frozen=True, kw_only=True, tag=True, gc=False):
    """One event of a tool parser for the call numbered ``call`` (unique per response).

    Attributes:
        call: response-wide call number (sequential, from 0, including calls
            that are later rejected).
        channel: channel the tool block was opened from.
        name: the function name, once known (exactly one event per call sets it).
        id: a call id written by the model itself (e.g. Kimi), else None.
        args: a fragment of the arguments JSON text.
        raw: the model text this event accounts for.
        end: the call is complete (its arguments form one JSON object).
        abort: the call cannot be completed as written. Its ``args`` (with
            ``end``) close the arguments of a committed call at the driver's
            last safe position; its ``raw`` is surfaced as text. A call that
            was never committed (no argument payload began after its name)
            is surfaced whole, name included (see the identity stage).
    """

    call: int
    channel: Channel
    name: str | None = None
    id: str | None = None
    args: str = ""
    raw: str = ""
    end: bool = False
    abort: bool = False


class CallDelta(msgspec.Struct, frozen=True, kw_only=True, tag=True, gc=False):
    """A fragment of an accepted call; ``index`` is dense from 0.

    The first fragment of an index has ``id`` and ``name`` set.
    """

    index: int
    id: str | None = None
    name: str | None = None
    args: str = ""
