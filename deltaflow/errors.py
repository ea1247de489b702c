"""The deltaflow exception tree.

Every exception raised by deltaflow derives from :class:`DeltaflowError`.
Errors that mirror a builtin also inherit it, so ``except ValueError`` keeps
working for callers that do not know deltaflow::

    DeltaflowError
     ├── UnknownParserError (ValueError)   an unregistered tool/reasoning parser name
     ├── ToolSpecError (ValueError)        a request ``tools`` entry that is not a valid tool
     ├── StateError (RuntimeError)         API misuse, e.g. feeding after the final chunk
     ├── StageError                         a stage (or the source) of a pipeline failed; ``__cause__`` is the original
     └── ModelOutputError (ValueError)     malformed model output, raised only under ``strict=True``

Malformed model output is *data* by default: it is surfaced as content,
never raised and never dropped.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = (
    "DeltaflowError",
    "ModelOutputError",
    "StageError",
    "StateError",
    "ToolSpecError",
    "UnknownParserError",
)


class DeltaflowError(Exception):
    """Root of every exception deltaflow raises."""


class UnknownParserError(DeltaflowError, ValueError):
    """A tool or reasoning parser name that is not registered.

    Attributes:
        kind: ``"tool"`` or ``"reasoning"``.
        name: the name that was asked for.
        available: the registered names, sorted.
    """

    def __init__(self, kind: str, name: str, available: Iterable[str]) -> None:
        self.kind = kind
        self.name = name
        self.available = tuple(sorted(available))
        super().__init__(
            f"unknown {kind} parser {name!r}; registered {kind} parsers: "
            + ", ".join(self.available)
        )


class ToolSpecError(DeltaflowError, ValueError):
    """A ``tools`` entry of a request that is not a valid tool definition.

    Attributes:
        index: position of the offending entry in the ``tools`` list (None when
            the list itself is wrong).
    """

    def __init__(self, message: str, index: int | None = None) -> None:
        self.index = index
        super().__init__(message)


class StateError(DeltaflowError, RuntimeError):
    """The API was used out of order (for example ``feed`` after ``final=True``)."""


class StageError(DeltaflowError):
    """A stage of a pipeline (or its source) raised; the original exception is ``__cause__``.

    Attributes:
        stage: the name of the stage that failed (``"source"`` for the source).
    """

    def __init__(self, stage: str, message: str | None = None) -> None:
        self.stage = stage
        super().__init__(message or f"stage {stage!r} failed")


class ModelOutputError(DeltaflowError, ValueError):
    """Malformed model output, raised only when a parser runs with ``strict=True``.

    Attributes:
        dialect: the tool parser name.
        position: character offset in the response where the problem was found.
        reason: what was wrong.
    """

    def __init__(self, dialect: str, position: int, reason: str) -> None:
        self.dialect = dialect
        self.position = position
        self.reason = reason
        super().__init__(f"{dialect}: malformed model output at character {position}: {reason}")
