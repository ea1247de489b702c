"""Items that travel between stages: small immutable msgspec Structs.

The flow inside the parsing core is::

    str --reasoning splitter--> ChannelText
        --tool block feeder-->  ChannelText | ToolDelta   (raw events of the dialect's tool parser)
        --identity-first buffer--> ChannelText | ToolDelta (first event of a call names it)
        --name filter/reindexer--> ChannelText | CallDelta (accepted calls only, dense indexes)
        --framer--> DeltaMessage

Every :class:`ToolDelta` carries the ``raw`` model text it accounts for, so a
call that is rejected (unknown name, malformed before its name) is surfaced
as text in the channel it was opened from: nothing is silently lost.
"""

from __future__ import annotations

import enum

import msgspec

__all__ = ("CallDelta", "Channel", "ChannelText", "ToolDelta")


class Channel(enum.Enum):
    """Which visible channel a piece of text belongs to."""

    CONTENT = "content"
    REASONING = "reasoning"


class ChannelText(msgspec.Struct, frozen=True, tag=True, gc=False):
    """Plain text of one channel."""

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
        abort: the call cannot be completed; ``raw`` (and, if the call was
            never named, everything held for it) must be surfaced as text.
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
