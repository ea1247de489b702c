"""Model protocols: dialect declarations, drivers and the registry (sans-IO)."""

from . import registry as registry
from .base import ToolParserBase as ToolParserBase
from .dialects.json_tools import json_envelope_dialect as json_envelope_dialect
from .json_envelope import JsonEnvelopeParser as JsonEnvelopeParser
from .json_envelope import JsonEnvelopeSpec as JsonEnvelopeSpec
from .spec import ReasoningSpec as ReasoningSpec
from .spec import ToolDialect as ToolDialect
from .spec import ToolParser as ToolParser
from .spec import ToolParserContext as ToolParserContext
from .token_reasoning import TokenReasoning as TokenReasoning

__all__ = (
    "JsonEnvelopeParser",
    "JsonEnvelopeSpec",
    "ReasoningSpec",
    "ToolDialect",
    "ToolParser",
    "ToolParserBase",
    "ToolParserContext",
    "TokenReasoning",
    "json_envelope_dialect",
    "registry",
)
