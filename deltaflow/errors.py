"""The deltaflow exception tree.

Every exception class deltaflow defines for its callers derives from
:class:`DeltaflowError`. Errors that mirror a builtin also inherit it, so
``except ValueError`` keeps working for callers that do not know deltaflow.
A name without a module is importable from ``deltaflow``::

    DeltaflowError
     ├── UnknownParserError (ValueError)          an unregistered tool/reasoning parser name
     ├── UnknownModelError (ValueError)           a model name with no preset (the message suggests close names)
     ├── ToolSpecError (ValueError)               a request ``tools`` entry that is not a valid tool
     ├── ToolChoiceError (ValueError)             an invalid ``tool_choice``, or one naming a function not in the tools
     ├── UnsupportedConstraintError (ValueError)  a tool constraint the dialect cannot express
     ├── RequestError (ValueError)                a request body its API refuses (its error body, the field's path)
     ├── PromptError (ValueError)                 a conversation the model's chat template cannot express
     ├── TemplateError (ValueError)               a chat template that fails to compile, or raised while rendering
     │    └── TemplateNotFoundError               deltaflow.prompt.template: no chat template in a model folder
     ├── PlaceholderOverflowError (ValueError)    deltaflow.prompt.protect: too many distinct protected texts
     ├── UnsupportedTokenizerError (ValueError)   deltaflow.prompt.tokenize: a tokenizer we cannot tokenize safely
     ├── UpstreamError                            deltaflow.gateway.upstream: the upstream engine failed (kind, status)
     ├── PlanError (ValueError)                   deltaflow.gateway.engine: a request the gateway cannot serve as asked
     ├── ConfigError (ValueError)                 deltaflow.gateway.config: an invalid gateway configuration
     ├── ResponseStoreError                       deltaflow.server.store: the response store cannot be opened or used
     ├── StateError (RuntimeError)                API misuse, e.g. feeding after the final chunk
     ├── StageError                               a stage (or the source) of a pipeline failed (``__cause__``: why)
     └── EngineIdleError (TimeoutError)           deltaflow.server.limits: the engine was silent past the idle timeout

Exceptions of the server's request handling, which do not derive from
:class:`DeltaflowError`: the app ``create_app`` builds catches them where
they are raised and answers with the protocol's error response, so they do
not reach its callers::

    BadRequest     deltaflow.server.app: a client error (HTTP status and OpenAI error code)
    BodyTooLarge   deltaflow.server.limits: a request body over the limit (HTTP 413), from ``read_body``

Exceptions named with a leading underscore (such as the command line's usage
error) are private control flow, caught in the module that raises them, and
are not listed.

Malformed model output is *data*: it is surfaced as content, never raised
and never dropped.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = (
    "DeltaflowError",
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
        super().__init__(f"unknown {kind} parser {name!r}; registered {kind} parsers: " + ", ".join(self.available))


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
