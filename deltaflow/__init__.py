"""deltaflow: structured streams (content, reasoning, tool calls) from raw LLM output.

The public API is re-exported here; see the README for a tour.
"""

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _dist_version

import msgspec as _msgspec

from . import parsers as _parsers  # registers the built-in dialects
from .errors import DeltaflowError as DeltaflowError
from .errors import StageError as StageError
from .errors import StateError as StateError
from .errors import ToolSpecError as ToolSpecError
from .errors import UnknownParserError as UnknownParserError
from .items import EngineUsage as EngineUsage
from .items import TokenChunk as TokenChunk
from .messages import ChatMessage as ChatMessage
from .messages import DeltaFunctionCall as DeltaFunctionCall
from .messages import DeltaMessage as DeltaMessage
from .messages import DeltaToolCall as DeltaToolCall
from .messages import FunctionCall as FunctionCall
from .messages import ToolCall as ToolCall
from .pipeline.runner import AsyncStage as AsyncStage
from .pipeline.runner import DeltaStream as DeltaStream
from .pipeline.runner import Pipeline as Pipeline
from .pipeline.runner import stream as stream
from .pipeline.sync import ResponseParser as ResponseParser
from .pipeline.sync import accumulate as accumulate
from .pipeline.sync import parse_complete as parse_complete
from .presets import UnknownModelError as UnknownModelError
from .prompt.readers import RequestError as RequestError
from .prompt.render import PromptError as PromptError
from .prompt.render import PromptModel as PromptModel
from .prompt.render import RenderedPrompt as RenderedPrompt
from .prompt.render import render_prompt as render_prompt
from .prompt.template import ChatTemplate as ChatTemplate
from .prompt.template import TemplateError as TemplateError
from .request import PreparedRequest as PreparedRequest
from .request import ToolChoiceError as ToolChoiceError
from .request import ToolConstraint as ToolConstraint
from .request import UnsupportedConstraintError as UnsupportedConstraintError
from .request import prepare_request as prepare_request
from .signing import ReasoningSigner as ReasoningSigner
from .tools import ToolSpec as ToolSpec
from .tools import normalize_tools as normalize_tools

# The version is pyproject.toml's, read from the installed distribution's metadata.
try:
    __version__: str = _dist_version("deltaflow")
except _PackageNotFoundError:  # pragma: no cover - running from a tree that was never installed
    __version__ = "0+unknown"

__all__ = (
    "AsyncStage",
    "ChatMessage",
    "ChatTemplate",
    "DeltaFunctionCall",
    "DeltaMessage",
    "DeltaStream",
    "DeltaToolCall",
    "DeltaflowError",
    "EngineUsage",
    "FunctionCall",
    "Pipeline",
    "PreparedRequest",
    "PromptError",
    "PromptModel",
    "ReasoningSigner",
    "RenderedPrompt",
    "RequestError",
    "ResponseParser",
    "StageError",
    "StateError",
    "TemplateError",
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
    "render_prompt",
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
del _name, _obj, _parsers, _msgspec, _dist_version, _PackageNotFoundError
