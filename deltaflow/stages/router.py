"""Channel router: engine-level channels before reasoning and tool parsing.

Most dialects leave every channel decision to the reasoning splitter and the
tool block feeder; for them this stage forwards items unchanged and holds
nothing. A dialect whose engine frames channels itself plugs a routing
machine in: gpt-oss Harmony's headers send text to reasoning, content or a
tool call here (:class:`~deltaflow.parsers.drivers.harmony.HarmonyRouter`), and the
later stages pass the resulting ``ChannelText`` and ``ToolDelta`` items
through (the splitter only splits raw text; the feeder passes text through
for a dialect without openers).

Harmony output whose special tokens an engine stripped when it decoded
(``analysisI should...assistantfinalThe answer``) has lost its markers. When
reasoning is split, such an output, recognised by its first word being
``analysis`` (a Harmony output always begins with a channel, so an answer
never starts there), is split by a plain reasoning spec instead: reasoning
until ``assistantfinal``, content after it. Calls written that way
(``commentary to=functions...``) cannot be told apart from text and stay
text.

Stable-prefix guarantee: without a machine, none; with one, the machine's
(see its docstring); while the first word may still be ``analysis``, at most
its 8 characters (and the chunk ends that came with them) are held.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..parsers.drivers.harmony import MARKERS as _HARMONY_MARKERS
from ..parsers.drivers.harmony import HarmonyRouter, routing_machine
from ..parsers.spec import ReasoningDialect
from .reasoning import ReasoningSplitter

__all__ = ("STRIPPED_HARMONY", "ChannelRouter", "RouterFactory", "RoutingMachine", "router_factory")

STRIPPED_HARMONY = ReasoningDialect(
    name="openai_gptoss",
    start="analysis",
    end="assistantfinal",
    starts_open=False,
    # o200k splits "assistantfinal" as "assistant" "final", or ".ass" "istant" "final" after a period.
    token_prefixes=("ass", "assistant"),
    tokenizers=("gpt-oss",),
)
"""The plain split of Harmony output decoded without its special tokens."""


class RoutingMachine(Protocol):
    """A per-response sans-IO routing machine: raw text in, channel items out."""

    def feed(self, item: object) -> list[object]:
        """Route one item (text, a chunk end, or anything else to forward)."""
        ...

    def finish(self) -> list[object]:
        """The input ended: return everything still held."""
        ...


class MachineFactory(Protocol):
    """Builds a routing machine for one response."""

    def __call__(self, *, tool_calls: bool, reasoning: bool, chunking: str) -> RoutingMachine: ...


class HarmonyOrStripped:
    """Harmony routing, or the plain split of an output whose special tokens were stripped (module docstring).

    Args:
        make: builds the Harmony machine.
        chunking: ``"any"`` or ``"tokens"``.
    """

    __slots__ = ("_make", "_chunking", "_machine", "_queue", "_head")

    def __init__(self, make: Callable[[], RoutingMachine], chunking: str) -> None:
        self._make = make
        self._chunking = chunking
        self._machine: RoutingMachine | ReasoningSplitter | None = None
        self._queue: list[object] = []
        self._head = ""

    def feed(self, item: object) -> list[object]:
        """Route one item; until the first word is known, hold it."""
        if self._machine is not None:
            return self._machine.feed(item)
        self._queue.append(item)
        if item.__class__ is str:
            assert isinstance(item, str)
            self._head += item
            if self._decide(final=False):
                return self._replay()
        return []

    def finish(self) -> list[object]:
        """The input ended: decide if still undecided, then finish the machine."""
        out: list[object] = []
        if self._machine is None:
            self._decide(final=True)
            out = self._replay()
        assert self._machine is not None
        return out + list(self._machine.finish())

    def _decide(self, *, final: bool) -> bool:
        head = self._head
        start = STRIPPED_HARMONY.start
        if head.startswith(start):
            self._machine = ReasoningSplitter(STRIPPED_HARMONY, chunking=self._chunking)
        elif not final and start.startswith(head):
            return False  # may still be the stripped analysis channel
        else:
            self._machine = self._make()
        return True

    def _replay(self) -> list[object]:
        machine = self._machine
        assert machine is not None
        queue, self._queue = self._queue, []
        self._head = ""
        out: list[object] = []
        for item in queue:
            out.extend(machine.feed(item))
        return out


def _harmony(*, tool_calls: bool, reasoning: bool, chunking: str) -> RoutingMachine:
    """A Harmony machine; with reasoning split, one that also reads output whose special tokens were stripped."""

    def make() -> RoutingMachine:
        return HarmonyRouter(tool_calls=tool_calls, reasoning=reasoning, chunking=chunking)

    return HarmonyOrStripped(make, chunking) if reasoning else make()


class ChannelRouter:
    """Forwards items unchanged, or through a routing machine (see the module docstring).

    Args:
        machine: the response's routing machine, or None to forward items unchanged.
    """

    name = "router"
    __slots__ = ("_machine",)

    def __init__(self, machine: RoutingMachine | None = None) -> None:
        self._machine = machine

    @property
    def passthrough(self) -> bool:
        """No machine: every item is forwarded unchanged and nothing is held (a chain may skip this stage)."""
        return self._machine is None

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

    make: MachineFactory | None
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
    found, tool_calls = routing_machine(tool_parser, reasoning_parser)
    if found is None:
        return RouterFactory(None)
    make: MachineFactory = _harmony if found is HarmonyRouter else found
    return RouterFactory(make, tool_calls, reasoning, chunking, _HARMONY_MARKERS)
