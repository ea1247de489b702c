"""Model protocols: dialect declarations, drivers and the registry (sans-IO)."""

from . import registry as registry
from .base import DriverBase as DriverBase
from .dialects.json_tools import json_envelope_dialect as json_envelope_dialect
from .drivers.json_envelope import JsonEnvelopeDriver as JsonEnvelopeDriver
from .drivers.json_envelope import JsonEnvelopeFormat as JsonEnvelopeFormat
from .spec import ReasoningDialect as ReasoningDialect
from .spec import ToolDialect as ToolDialect
from .spec import ToolDriver as ToolDriver
from .spec import DriverContext as DriverContext
from .token_reasoning import TokenReasoning as TokenReasoning

__all__ = (
    "JsonEnvelopeDriver",
    "JsonEnvelopeFormat",
    "ReasoningDialect",
    "ToolDialect",
    "ToolDriver",
    "DriverBase",
    "DriverContext",
    "TokenReasoning",
    "json_envelope_dialect",
    "registry",
)
