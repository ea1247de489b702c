"""deltaflow: structured streams (content, reasoning, tool calls) from raw LLM output.

The public API is re-exported here; see the README for a tour.
"""

import msgspec as _msgspec

from . import parsers as _parsers  # registers the built-in dialects
from .errors import DeltaflowError as DeltaflowError
from .errors import ModelOutputError as ModelOutputError
from .errors import StageError as StageError
from .errors import StateError as StateError
from .errors import ToolSpecError as ToolSpecError
from .errors import UnknownParserError as UnknownParserError
from .items import TokenChunk as TokenChunk
from .messages import ChatMessage as ChatMessage
from .messages import DeltaFunctionCall as DeltaFunctionCall
from .messages import DeltaMessage as DeltaMessage
from .messages import DeltaToolCall as DeltaToolCall
from .messages import FunctionCall as FunctionCall
from .messages import ToolCall as ToolCall
from .presets import UnknownModelError as UnknownModelError
from .pipeline.runner import AsyncStage as AsyncStage
from .pipeline.runner import DeltaStream as DeltaStream
from .pipeline.runner import Pipeline as Pipeline
from .pipeline.runner import stream as stream
from .pipeline.sync import ResponseParser as ResponseParser
from .pipeline.sync import accumulate as accumulate
from .pipeline.sync import parse_complete as parse_complete
from .request import PreparedRequest as PreparedRequest
from .request import ToolChoiceError as ToolChoiceError
from .request import ToolConstraint as ToolConstraint
from .request import UnsupportedConstraintError as UnsupportedConstraintError
from .request import prepare_request as prepare_request
from .tools import ToolSpec as ToolSpec
from .tools import normalize_tools as normalize_tools

__version__ = "0.1.0"

__all__ = (
    "AsyncStage",
    "ChatMessage",
    "DeltaFunctionCall",
    "DeltaMessage",
    "DeltaStream",
    "DeltaToolCall",
    "DeltaflowError",
    "FunctionCall",
    "ModelOutputError",
    "Pipeline",
    "PreparedRequest",
    "ResponseParser",
    "StageError",
    "StateError",
    "TokenChunk",
    "ToolCall",
    "ToolChoiceError",
    "ToolConstraint",
    "ToolSpec",
    "ToolSpecError",
    "UnknownModelError",
    "UnknownParserError",
    "UnsupportedConstraintError",
    "__version__",
    "accumulate",
    "normalize_tools",
    "parse_complete",
    "prepare_request",
    "stream",
)

for _name in __all__:
    _obj = globals()[_name]
    # msgspec resolves a Struct's postponed annotations in its __module__: leave Structs alone.
    if isinstance(_obj, type) and issubclass(_obj, _msgspec.Struct):
        continue
    if getattr(_obj, "__module__", "deltaflow").startswith("deltaflow."):
        try:
            _obj.__module__ = "deltaflow"
        except (AttributeError, TypeError):  # pragma: no cover - builtins
            pass
del _name, _obj, _parsers, _msgspec
