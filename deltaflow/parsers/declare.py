"""Declaring a tool dialect: one :func:`declare` for every format.

A tool dialect is a name, a *format* and a few facts about how its models
write it. The format is a driver's options (``JsonEnvelopeFormat``,
``XmlFunctionFormat``, ...; each driver module defines its own): it knows its
markers, which of them open a block, and how to build the driver that reads
one block. What else a dialect declares (the marker prefixes a real tokenizer
leaves at a token boundary, framing tokens, the families served) is a keyword
of :func:`declare`. Declaring registers the dialect, so a new dialect of an
existing format is one call (a reasoning dialect is pure data: register a
:class:`~deltaflow.parsers.spec.ReasoningDialect` with
:func:`~deltaflow.parsers.registry.register_reasoning_dialect`)::

    from deltaflow.parsers import JsonEnvelopeFormat, declare

    declare("my_model", JsonEnvelopeFormat(open=("<call>",), close="</call>"),
            description="My model: <call>{...}</call>")
"""

from __future__ import annotations

from .registry import register_tool_dialect
from .spec import FormatDefaults, ToolDialect, ToolFormat, Writing

__all__ = ("declare",)


def declare(
    name: str,
    format: ToolFormat,
    *,
    openers: tuple[str, ...] | None = None,
    start_openers: tuple[str, ...] | None = None,
    markers: tuple[str, ...] = (),
    token_prefixes: tuple[str, ...] = (),
    tokenizers: tuple[str, ...] = (),
    description: str = "",
    families: tuple[str, ...] = (),
    framing: tuple[str, ...] = (),
    lead_blanks: bool = False,
    restart_after: tuple[str, ...] = (),
    writing: Writing | None = None,
    register: bool = True,
    replace: bool = False,
) -> ToolDialect:
    """Declare (and register) a tool dialect of ``format``.

    Args:
        name: the registry name (``tool_parser=``).
        format: the driver's options; its ``openers``, ``markers``,
            ``start_openers`` and request openers become the dialect's.
        openers: the markers that open a block, instead of the format's (MiniCPM5
            opens at ``<function `` where the driver reads ``<function``).
        start_openers: openers valid only at the start of a channel, instead
            of the format's (Llama 3's bare ``{``).
        markers: markers to keep as text beyond the format's own.
        token_prefixes: opener prefixes a real tokenizer leaves at a token
            boundary (``chunking="tokens"``); ``()`` when every opener is one
            special token.
        tokenizers: reference tokenizers under ``shared/tokenizers`` the
            prefixes were checked against.
        description: one line for ``deltaflow parsers``.
        families: model families served.
        framing: special tokens around the answer, dropped outside blocks.
        lead_blanks: blanks right before an opener are the block's framing.
        restart_after: markers after which start openers open a block again.
        writing: how the model's template lays the format out (blanks between
            its markers), for the constraint writers' canonical text.
        register: register the dialect (False: only build it).
        replace: allow replacing a registered dialect of the same name.

    Returns:
        The dialect.

    Raises:
        ValueError: ``name`` is registered already and ``replace`` is False.
    """
    has_request_openers = getattr(type(format), "request_openers", None) is not FormatDefaults.request_openers
    dialect = ToolDialect(
        name=name,
        openers=format.openers if openers is None else openers,
        factory=format.driver_factory(),
        markers=tuple(dict.fromkeys((*format.markers, *markers))),
        start_openers=format.start_openers if start_openers is None else start_openers,
        token_prefixes=token_prefixes,
        tokenizers=tokenizers,
        description=description,
        families=families,
        openers_for=format.request_openers if has_request_openers else None,
        framing=framing,
        lead_blanks=lead_blanks,
        restart_after=restart_after,
        format=format,
        writing=writing,
    )
    return register_tool_dialect(dialect, replace=replace) if register else dialect

