"""The registry of tool and reasoning dialects, by the names inference servers use (``tool_parser=``).

Registering a new dialect takes a few lines::

    from deltaflow.parsers import JsonEnvelopeFormat, declare

    declare("my_model", JsonEnvelopeFormat(open=("<call>",), close="</call>"))
"""

from __future__ import annotations

from ..errors import UnknownParserError
from .spec import ReasoningDialect, ToolDialect

__all__ = (
    "get_reasoning_dialect",
    "get_tool_dialect",
    "reasoning_dialect_names",
    "register_reasoning_dialect",
    "register_tool_dialect",
    "tool_dialect_names",
)

_TOOL: dict[str, ToolDialect] = {}
_REASONING: dict[str, ReasoningDialect] = {}


def register_tool_dialect(dialect: ToolDialect, *, replace: bool = False) -> ToolDialect:
    """Register a tool dialect under ``dialect.name``.

    Args:
        dialect: the declaration.
        replace: allow replacing an existing registration.

    Returns:
        The dialect (so this can be used as an expression).

    Raises:
        ValueError: the name is taken and ``replace`` is False.
    """
    if not isinstance(dialect, ToolDialect):
        raise TypeError(f"expected a ToolDialect, got {type(dialect).__name__}")
    if dialect.name in _TOOL and not replace:
        raise ValueError(f"tool parser {dialect.name!r} is already registered (pass replace=True)")
    _TOOL[dialect.name] = dialect
    return dialect


def register_reasoning_dialect(spec: ReasoningDialect, *, replace: bool = False) -> ReasoningDialect:
    """Register a reasoning protocol under ``spec.name`` (see :func:`register_tool_dialect`)."""
    if not isinstance(spec, ReasoningDialect):
        raise TypeError(f"expected a ReasoningDialect, got {type(spec).__name__}")
    if spec.name in _REASONING and not replace:
        raise ValueError(f"reasoning parser {spec.name!r} is already registered (pass replace=True)")
    _REASONING[spec.name] = spec
    return spec


def get_tool_dialect(name: str) -> ToolDialect:
    """Return the tool dialect registered as ``name``.

    Raises:
        UnknownParserError: no such name; the message lists the registered ones.
    """
    try:
        return _TOOL[name]
    except (KeyError, TypeError):
        raise UnknownParserError("tool", name, _TOOL) from None


def get_reasoning_dialect(name: str) -> ReasoningDialect:
    """Return the reasoning protocol registered as ``name``.

    Raises:
        UnknownParserError: no such name; the message lists the registered ones.
    """
    try:
        return _REASONING[name]
    except (KeyError, TypeError):
        raise UnknownParserError("reasoning", name, _REASONING) from None


def tool_dialect_names() -> tuple[str, ...]:
    """The registered tool parser names, sorted."""
    return tuple(sorted(_TOOL))


def reasoning_dialect_names() -> tuple[str, ...]:
    """The registered reasoning parser names, sorted."""
    return tuple(sorted(_REASONING))

