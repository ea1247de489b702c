"""Sinks: where a stream of deltas goes — SSE, WebSocket, collectors; wire framing per protocol."""

from .collect import collect as collect
from .collect import collect_async as collect_async
from .framing import AnthropicFramer as AnthropicFramer
from .framing import ChatCompletionsFramer as ChatCompletionsFramer
from .framing import ResponsesFramer as ResponsesFramer
from .framing import WireEvent as WireEvent
from .sse import SSEEncoder as SSEEncoder
from .sse import SSEResponse as SSEResponse
from .sse import iter_events as iter_events
from .sse import produce_events as produce_events
from .sse import run_framed as run_framed

__all__ = (
    "AnthropicFramer",
    "ChatCompletionsFramer",
    "ResponsesFramer",
    "SSEEncoder",
    "SSEResponse",
    "WireEvent",
    "collect",
    "collect_async",
    "iter_events",
    "produce_events",
    "run_framed",
)
