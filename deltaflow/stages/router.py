"""Channel router: engine-level channels before reasoning and tool parsing.

Most dialects leave every channel decision to the reasoning splitter and the
tool block feeder; for them this stage forwards items unchanged and holds
nothing. A dialect whose engine frames channels itself plugs a routing
machine in: gpt-oss Harmony's headers send text to reasoning, content or a
tool call here (:class:`~deltaflow.parsers.harmony.HarmonyRouter`), and the
later stages pass the resulting ``ChannelText`` and ``ToolDelta`` items
through (the splitter only splits raw text; the feeder passes text through
for a dialect without openers).

Stable-prefix guarantee: without a machine, none; with one, the machine's
(see its docstring).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..parsers.harmony import MARKERS as _HARMONY_MARKERS
from ..parsers.harmony import RoutingMachineFactory, routing_machine

__all__ = ("ChannelRouter", "RouterFactory", "RoutingMachine", "router_factory")


class RoutingMachine(Protocol):
    """A per-response sans-IO routing machine: raw text in, channel items out."""

    def feed(self, item: object) -> list[object]:
        """Route one item (text, a chunk end, or anything else to forward)."""
        ...

    def finish(self) -> list[object]:
        """The input ended: return everything still held."""
        ...


class ChannelRouter:
    """Forwards items unchanged, or through a routing machine (see the module docstring).

    Args:
        machine: the response's routing machine, or None to forward items unchanged.
    """

    name = "router"
    __slots__ = ("_machine",)

    def __init__(self, machine: RoutingMachine | None = None) -> None:
        self._machine = machine

    def feed(self, item: object) -> list[object]:
        """Forward one item, or route it through the machine."""
        if self._machine is None:
            return [item]
        return self._machine.feed(item)

    def finish(self) -> list[object]:
        """Release what the machine holds (nothing without one)."""
        if self._machine is None:
            return []
        return self._machine.finish()


@dataclass(frozen=True)
class RouterFactory:
    """Builds a fresh :class:`ChannelRouter` per response.

    Attributes:
        make: the routing machine factory, or None for a pass-through router.
        tool_calls: the machine parses tool calls (the tool parser is routed).
        reasoning: the machine splits reasoning off.
        chunking: ``"any"`` or ``"tokens"``.
        markers: special-token texts the machine needs to see (the
            detokenizer keeps them as text).
    """

    make: RoutingMachineFactory | None
    tool_calls: bool = False
    reasoning: bool = False
    chunking: str = "any"
    markers: tuple[str, ...] = ()

    def __call__(self) -> ChannelRouter:
        """A router for one response."""
        if self.make is None:
            return ChannelRouter()
        return ChannelRouter(self.make(tool_calls=self.tool_calls, reasoning=self.reasoning, chunking=self.chunking))


def router_factory(
    tool_parser: str | None,
    reasoning_parser: str | None,
    *,
    reasoning: bool,
    chunking: str = "any",
) -> RouterFactory:
    """The router for the parsers in use: a routing machine when one is registered for them.

    Args:
        tool_parser: the tool parser name (a routed one, e.g. ``openai``, parses calls in the router).
        reasoning_parser: the reasoning parser name (e.g. ``openai_gptoss`` routes without calls).
        reasoning: reasoning is split off (a reasoning parser is in use and thinking is not disabled).
        chunking: ``"any"`` or ``"tokens"``.
    """
    make, tool_calls = routing_machine(tool_parser, reasoning_parser)
    if make is None:
        return RouterFactory(None)
    return RouterFactory(make, tool_calls, reasoning, chunking, _HARMONY_MARKERS)
