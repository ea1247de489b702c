"""Wire framing: :class:`~deltaflow.messages.DeltaMessage` s -> protocol events (sans-IO).

Three protocols, one shape: a framer is created per response, ``start()``
returns the opening events, ``feed(delta)`` the events a delta causes,
``finish(usage)`` the closing events and ``error(exc)`` the protocol's error
event. Events are :class:`WireEvent` s (an SSE event name, or None, and a
payload msgspec Struct); :mod:`deltaflow.sinks.sse` turns them into bytes.
"""

from __future__ import annotations

from .anthropic import AnthropicFramer as AnthropicFramer
from .base import Framer as Framer
from .base import WireEvent as WireEvent
from .openai_chat import ChatCompletionsFramer as ChatCompletionsFramer
from .responses import ResponsesFramer as ResponsesFramer

__all__ = ("AnthropicFramer", "ChatCompletionsFramer", "Framer", "ResponsesFramer", "WireEvent")
