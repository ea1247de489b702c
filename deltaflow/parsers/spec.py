"""Dialect declarations: what a model protocol *is*, as frozen data.

A dialect is declared, not overridden (DESIGN.md principle 3): markers,
argument field names, whether reasoning starts open, which marker prefixes a
real tokenizer can leave at a token boundary. Shared drivers do the logic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .._core.toolspec import ToolSpec
    from ..items import Channel

__all__ = (
    "DriverContext",
    "FormatDefaults",
    "ReasoningDialect",
    "ToolDialect",
    "ToolDriver",
    "ToolFormat",
    "Writing",
    "all_prefixes",
)


def all_prefixes(*markers: str) -> tuple[str, ...]:
    """Every proper prefix of ``markers``, each once, in order: the ``token_prefixes`` to declare
    for markers that a tokenizer may split anywhere (no tokenizer of the family to check against)."""
    return tuple(dict.fromkeys(m[:k] for m in markers for k in range(1, len(m))))


@dataclass(frozen=True)
class ReasoningDialect:
    """A reasoning protocol: reasoning text between a start and an end marker.

    Attributes:
        name: registry name (``reasoning_parser=``).
        start: the opening marker (consumed when it is the first non-blank
            text of the output).
        end: the closing marker.
        starts_open: the output starts inside reasoning (the prompt opened it)
            unless ``enable_thinking=False``.
        token_prefixes: proper prefixes of ``start``/``end`` that the
            dialect's real tokenizers can leave at a token boundary (used by
            ``chunking="tokens"``); empty when both markers are single tokens.
        tokenizers: names of reference tokenizers under ``shared/tokenizers``
            that the declared prefixes were checked against.
        turn_markers: special tokens that begin or end a chat turn (token-level
            reasoning state looks only after the last of them).
        implicit_end: markers that end reasoning when no ``end`` came first
            (e.g. GLM-4.7's ``<tool_call>``); they start the content.
        families: model families served (for ``deltaflow parsers`` and the README).
        default_enabled: whether reasoning is split when ``enable_thinking``
            is None (False for hybrid models whose thinking is off unless
            requested, e.g. DeepSeek-V3.1).
        start_labels: labels that may follow the start marker (Gemma 4's
            ``thought``/``thought\n`` after ``<|channel>``): the longest one
            found right after a consumed start marker is dropped.
        content_wrap: ``(opener, closer)`` tags around the content (Hunyuan's
            ``<answer>``/``</answer>``): when the opener is the first non-blank
            content (after at most ``len(opener)`` blank characters, which are
            dropped with it), it is dropped, and so is the first closer after it.
        content_lstrip_newlines: drop the newlines right after the end marker
            (Granite 4.2's template newline).
        reasoning_rstrip_newlines: drop the newlines right before the end
            marker (Step-3.5's template newline; at most 256, held at a chunk
            end until it is known whether the end marker follows).
        reentrant: the markers are special tokens that are never text (Gemma 4's
            channel tokens): a start marker in the content opens another
            reasoning block, a start marker inside reasoning is dropped (its
            labels too), and an end marker outside reasoning is dropped.
        inline: the reasoning is not split off: the whole output is content,
            and the start marker the prompt wrote is put back in front of it
            (vLLM's ``minimax_m2_append_think``, for clients that send the
            thinking back in the next turn). Needs ``starts_open``; with
            ``enable_thinking=False`` nothing is put back.
    """

    name: str
    start: str
    end: str
    starts_open: bool = True
    token_prefixes: tuple[str, ...] = ()
    tokenizers: tuple[str, ...] = ()
    turn_markers: tuple[str, ...] = ()
    implicit_end: tuple[str, ...] = ()
    families: tuple[str, ...] = ()
    default_enabled: bool = True
    start_labels: tuple[str, ...] = ()
    content_wrap: tuple[str, str] | None = None
    content_lstrip_newlines: bool = False
    reasoning_rstrip_newlines: bool = False
    reentrant: bool = False
    inline: bool = False


@dataclass(frozen=True)
class DriverContext:
    """What a tool parser is given when a tool block opens.

    Attributes:
        channel: the channel the block was opened from.
        new_call: returns the next response-wide call number.
        tools: the offered tools by name (for schema-driven conversion), or None.
        dialect: the dialect's registry name (for error messages).
    """

    channel: Channel
    new_call: Callable[[], int]
    tools: Mapping[str, ToolSpec] | None
    dialect: str


class ToolDriver(Protocol):
    """One outer tool block of a dialect (h11's reader contract).

    ``feed_tool_block(text, out, final, start)`` consumes what it can of
    ``text[start:]``, appends :class:`~deltaflow.items.ToolDelta` events to
    ``out`` and returns the position up to which it consumed. It never
    consumes text after its block. When ``done`` is False, the caller holds
    ``text[returned:]`` and gives it again, followed by new text; the parser
    keeps that tail short (a partial marker, escape, number or literal).
    With ``final=True`` the parser must end (``done`` becomes True). The
    feeder also ends a block that way when the channel changes inside it
    (a reasoning end marker there): a block never spans two channels.
    """

    done: bool

    def feed_tool_block(self, text: str, out: list[object], final: bool, start: int = 0) -> int: ...


class ToolFormat(Protocol):
    """A driver's options for one dialect: what :func:`~deltaflow.parsers.declare` reads.

    Every driver module defines its format class (``JsonEnvelopeFormat``,
    ``XmlFunctionFormat``, ...). A format knows its markers, which of them open
    a block, and how to build the driver that reads one block; the constraint
    writers (:mod:`deltaflow.constrain`) read the same object, so parser,
    grammar and renderer cannot disagree about the syntax.
    """

    @property
    def openers(self) -> tuple[str, ...]:
        """Markers that open a block anywhere in the text."""
        ...

    @property
    def markers(self) -> tuple[str, ...]:
        """Every marker of the format (a detokenizer keeps them as text)."""
        ...

    @property
    def start_openers(self) -> tuple[str, ...]:
        """Markers that open a block only at the start of a channel (``()``: none)."""
        ...

    def driver_factory(self) -> Callable[[DriverContext], ToolDriver]:
        """What builds one driver per block (called once, when the dialect is declared)."""
        ...

    def request_openers(self, tools: Mapping[str, ToolSpec] | None) -> tuple[str, ...]:
        """Openers that the request's tools add (a tag per offered tool; ``()``: none)."""
        ...


class FormatDefaults:
    """The :class:`ToolFormat` defaults for a format without start openers or request-defined openers."""

    __slots__ = ()

    @property
    def start_openers(self) -> tuple[str, ...]:
        """No start openers."""
        return ()

    def request_openers(self, tools: Mapping[str, ToolSpec] | None) -> tuple[str, ...]:
        """No openers from the request."""
        return ()


@dataclass(frozen=True)
class Writing:
    """How a model's own chat template lays out its format: the blanks between the markers.

    A format says which markers there are and what they enclose; its driver
    accepts any blanks between them. Constrained decoding
    (:mod:`deltaflow.constrain`) also *writes* the format, as one canonical
    text: the format's markers (read from the format, never restated here)
    with these blanks between them. Every field defaults to nothing, so a
    dialect declared without a ``Writing`` is still constrained, in its
    tightest form. Read for the JSON-envelope and XML-function formats.

    Attributes:
        open_gaps: blanks after each marker of the opener sequence, in order
            (Hermes ``("\\n",)``: ``<tool_call>\\n{...}``); missing ones are "".
        close_gap: blanks before the closer (Hermes ``"\\n"``).
        after_close: blanks after a call's closer (ERNIE's newline).
        separator: what joins two calls (between envelopes or array elements).
        bare: write the block without its opener (a format whose block may
            start with its value: Llama 3's bare object, xLAM's bare array).
        one_call: the block holds one call (a constraint never writes two).
        atomic: markers that are single tokens in the dialect's tokenizers
            (grammars may then match them as tokens).
        block_per_call: XML: each call has its own block (Qwen3-Coder's
            ``<tool_call>`` around every ``<function=...>``), instead of one
            block around all calls (MiniMax-M2).
        block_gap: XML: blanks after the block opener.
        name_gap: XML: blanks after a call's name (its opening tag).
        key_gap: XML: blanks between a parameter's key and its value opener (GLM-4.5).
        param_gap: XML: blanks after each parameter.
        call_gap: XML: blanks after a call's closer.
        xgrammar: XML: XGrammar's built-in argument style for the format, or
            None (one tag per parameter).
    """

    open_gaps: tuple[str, ...] = ()
    close_gap: str = ""
    after_close: str = ""
    separator: str = ""
    bare: bool = False
    one_call: bool = False
    atomic: tuple[str, ...] = ()
    block_per_call: bool = False
    block_gap: str = ""
    name_gap: str = ""
    key_gap: str = ""
    param_gap: str = ""
    call_gap: str = ""
    xgrammar: str | None = None


@dataclass(frozen=True)
class ToolDialect:
    """A tool-call protocol.

    Attributes:
        name: registry name (``tool_parser=``).
        openers: markers that open a tool block anywhere in the text.
        start_openers: markers that open a tool block only where nothing but
            whitespace came before in that channel (e.g. Llama 3's bare ``{``).
        factory: builds the parser for one block; it receives the context and
            the text handed to it starts at the opener (possibly after
            whitespace between two blocks, which the parser consumes).
        token_prefixes: proper prefixes of ``openers`` that the dialect's real
            tokenizers can leave at a token boundary (``chunking="tokens"``).
        tokenizers: names of reference tokenizers under ``shared/tokenizers``.
        description: one line for ``deltaflow parsers``.
        markers: every marker of the format (openers, closers, separators);
            the detokenizer keeps them as text even when a tokenizer marks
            them special.
        families: model families served (for ``deltaflow parsers`` and the README).
        openers_for: for a dialect whose openers depend on the request (a tag
            per offered tool): returns the request's openers, which the
            feeder watches for in addition to ``openers``. Such openers are
            plain text, so every proper prefix is held in both chunking
            modes. No openers at all: all text passes through.
        framing: special tokens that frame the answer outside any block
            (Command R7B's ``<|START_RESPONSE|>``/``<|END_RESPONSE|>``): the
            feeder drops them wherever they appear outside a block, so the
            answer is clean without the dialect's reasoning parser too.
        lead_blanks: blanks (at most ``BLANK_RUN_MAX`` JSON whitespace
            characters) right before an opener are the block's framing, raw
            text of its call, not text of the channel (a template that puts
            a newline before its tool block). Such blanks at a chunk's end
            are held until it is known whether an opener follows.
        restart_after: markers after which a start opener opens a block
            again, as at the start of the channel (xLAM's optional leading
            ``...</think>`` before its bare array); the marker stays text.
        format: the driver's options the dialect was declared with (None for
            a dialect built by hand), read by the constraint writers.
        writing: how the dialect's template lays the format out (the
            constraint writers' canonical text), or None (the tightest form).
    """

    name: str
    openers: tuple[str, ...]
    factory: Callable[[DriverContext], ToolDriver] = field(compare=False)
    markers: tuple[str, ...] = ()
    start_openers: tuple[str, ...] = ()
    token_prefixes: tuple[str, ...] = ()
    tokenizers: tuple[str, ...] = ()
    description: str = ""
    families: tuple[str, ...] = ()
    openers_for: Callable[[Mapping[str, ToolSpec] | None], tuple[str, ...]] | None = field(default=None, compare=False)
    framing: tuple[str, ...] = ()
    lead_blanks: bool = False
    restart_after: tuple[str, ...] = ()
    format: ToolFormat | None = field(default=None, compare=False)
    writing: Writing | None = None
