"""Model protocols (sans-IO): dialect declarations, the drivers that read their formats, and the registry.

* :mod:`.registry`: the registered tool and reasoning dialects, by the names inference servers use;
* :func:`declare`: declare (and register) a tool dialect of a driver's format;
* :mod:`.drivers`: one module per wire-format family, each a driver and its format class;
* :mod:`.dialects`: the built-in declarations (registered on import);
* :mod:`.base`: :class:`DriverBase`, the attribution engine every driver derives from;
* :mod:`.spec`: the declarations' types (:class:`ToolDialect`, :class:`ReasoningDialect`, :class:`ToolFormat`,
  :class:`Writing`).
"""

from . import dialects as _dialects  # noqa: E402,F401  (registers the built-in dialects)
from . import registry as registry
from .base import DriverBase as DriverBase
from .declare import declare as declare
from .drivers.json_envelope import JsonEnvelopeDriver as JsonEnvelopeDriver
from .drivers.json_envelope import JsonEnvelopeFormat as JsonEnvelopeFormat
from .spec import DriverContext as DriverContext
from .spec import FormatDefaults as FormatDefaults
from .spec import ReasoningDialect as ReasoningDialect
from .spec import ToolDialect as ToolDialect
from .spec import ToolDriver as ToolDriver
from .spec import ToolFormat as ToolFormat
from .spec import Writing as Writing
from .token_reasoning import TokenReasoning as TokenReasoning

__all__ = (
    "DriverBase",
    "DriverContext",
    "FormatDefaults",
    "JsonEnvelopeDriver",
    "JsonEnvelopeFormat",
    "ReasoningDialect",
    "TokenReasoning",
    "ToolDialect",
    "ToolDriver",
    "ToolFormat",
    "Writing",
    "declare",
    "registry",
)
