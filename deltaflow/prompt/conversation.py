"""The canonical conversation: what a Chat Completions, Responses or Messages request asks a model.

The three readers (:mod:`deltaflow.prompt.readers`) turn a request body of any
of the three APIs into one :class:`Conversation`; the template side
(:mod:`deltaflow.prompt.messages`) turns that into the messages and tools a
chat template gets. Every type here is a frozen, keyword-only msgspec Struct;
the four kinds of turn are tagged (``"kind"``), so a conversation encodes to
JSON and decodes back into the same types (``msgspec.json.decode(data,
type=Conversation)``).

What a conversation holds, and what it leaves out on purpose:

* Text only. The readers refuse image, audio and file parts, naming the part.
* Text-bearing inputs (instructions, user turns, tool results) keep their
  parts (:class:`TextPart`); a string and a list of one text part read the
  same. Templates get the parts joined with ``"\\n"``.
* An assistant turn's text is one string or None: the readers join text parts
  with ``"\\n"`` and read absent, null, ``""`` and an empty part list all as
  None (a template is given ``""`` for each of them).
* Tool-call arguments are the JSON text as sent (Chat, Responses) or as the
  reader wrote it from an object (Anthropic ``input``: ``json.dumps`` with
  ``ensure_ascii=False`` and the default separators, the form OpenAI clients
  send).

Invariants the readers guarantee (the Structs do not check them): ``turns``
never starts with an :class:`Instruction` (leading ones are
:attr:`Conversation.instructions`); every :class:`ToolResult` answers a
:class:`ToolCall` of an earlier :class:`AssistantTurn`; ``tool_choice`` names
only tools in ``tools``.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from .._core.toolspec import ToolSpec

__all__ = (
    "AssistantTurn",
    "Conversation",
    "GenerationOptions",
    "Instruction",
    "InstructionRole",
    "Reasoning",
    "TextPart",
    "ToolCall",
    "ToolChoice",
    "ToolChoiceMode",
    "ToolResult",
    "Turn",
    "UserTurn",
    "join_parts",
)

InstructionRole = Literal["system", "developer"]
"""The two roles of instructions (OpenAI's ``developer`` is the newer name of ``system`` for its own models)."""

ToolChoiceMode = Literal["none", "auto", "required", "named"]
"""What a request's ``tool_choice`` asks for (see :class:`ToolChoice`)."""


class TextPart(msgspec.Struct, frozen=True, kw_only=True):
    """One piece of text of an instruction, a user turn or a tool result.

    Attributes:
        text: the text, exactly as sent.
    """

    text: str


def join_parts(parts: tuple[TextPart, ...]) -> str:
    """The parts' texts joined with ``"\\n"`` (the form templates get, as vLLM and transformers join them)."""
    if len(parts) == 1:
        return parts[0].text
    return "\n".join([p.text for p in parts])


class Instruction(msgspec.Struct, frozen=True, kw_only=True, tag="instruction", tag_field="kind"):
    """A system or developer instruction.

    Attributes:
        role: ``"system"`` (Chat and Responses ``system`` messages, Responses
            ``instructions``, Anthropic ``system``) or ``"developer"`` (Chat and
            Responses ``developer`` messages).
        parts: its text, one part per text part of the request (a string is one part).
    """

    role: InstructionRole
    parts: tuple[TextPart, ...]

    @property
    def text(self) -> str:
        """The parts joined with ``"\\n"``."""
        return join_parts(self.parts)


class UserTurn(msgspec.Struct, frozen=True, kw_only=True, tag="user", tag_field="kind"):
    """What the user said.

    Attributes:
        parts: its text, one part per text part (or block) of the request (a string is one part).
    """

    parts: tuple[TextPart, ...]

    @property
    def text(self) -> str:
        """The parts joined with ``"\\n"``."""
        return join_parts(self.parts)


class Reasoning(msgspec.Struct, frozen=True, kw_only=True):
    """One block of an assistant turn's reasoning, as the client sent it back.

    Attributes:
        text: the reasoning text (Chat ``reasoning_content``/``reasoning``,
            Responses ``reasoning`` item ``content`` texts, or its ``summary``
            texts when it has no content, Anthropic ``thinking``); ``""`` for
            a redacted or sealed-only block.
        signature: the Anthropic ``thinking`` block's ``signature`` (None for
            the other APIs). deltaflow's own are :class:`~deltaflow.signing.ReasoningSigner` tokens.
        sealed: opaque reasoning the client cannot read: a Responses
            ``encrypted_content``, or the ``data`` of an Anthropic
            ``redacted_thinking`` block. None when there is none.
        redacted: True for an Anthropic ``redacted_thinking`` block (its
            ``data`` is :attr:`sealed`, :attr:`text` is ``""``); such a block
            never reaches a template.
    """

    text: str = ""
    signature: str | None = None
    sealed: str | None = None
    redacted: bool = False


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call the assistant made.

    Attributes:
        id: the call id (Chat ``tool_calls[].id``, Responses ``call_id``,
            Anthropic ``tool_use.id``); any non-empty string.
        name: the function name.
        arguments: the arguments as JSON text: as sent (Chat, Responses; not
            checked: a template gets ``{}`` for text that is not a JSON
            object), or written by the reader from Anthropic's ``input`` object.
    """

    id: str
    name: str
    arguments: str


class AssistantTurn(msgspec.Struct, frozen=True, kw_only=True, tag="assistant", tag_field="kind"):
    """What the assistant said, thought and called in one turn.

    Attributes:
        content: its text; None when it said nothing (the request's content
            was absent, null, ``""`` or an empty list). Text parts or blocks
            are joined with ``"\\n"``.
        reasoning: its reasoning blocks in order (a tuple: an Anthropic
            message can hold several ``thinking`` and ``redacted_thinking``
            blocks, and several Responses ``reasoning`` items can precede one
            message). Empty when there is none.
        tool_calls: the calls it made, in order.
    """

    content: str | None = None
    reasoning: tuple[Reasoning, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()


class ToolResult(msgspec.Struct, frozen=True, kw_only=True, tag="tool_result", tag_field="kind"):
    """The result of one tool call (Chat ``tool`` message, Responses
    ``function_call_output``, Anthropic ``tool_result`` block).

    Attributes:
        call_id: the id of the :class:`ToolCall` it answers.
        parts: the result text, one part per text part (or block) of the
            request (a string is one part; an absent Anthropic ``content`` is no part).
        is_error: Anthropic's ``is_error`` (False for the other APIs; not passed to templates).
        name: the ``name`` a Chat ``tool`` message carries, if any (templates
            get it when it was sent); None for the other APIs.
    """

    call_id: str
    parts: tuple[TextPart, ...]
    is_error: bool = False
    name: str | None = None

    @property
    def text(self) -> str:
        """The parts joined with ``"\\n"``."""
        return join_parts(self.parts)


Turn = Instruction | UserTurn | AssistantTurn | ToolResult
"""One turn of a conversation. An :class:`Instruction` among the turns is one
sent after the first user or assistant turn (Chat and Responses allow them anywhere)."""


class ToolChoice(msgspec.Struct, frozen=True, kw_only=True):
    """Which tools the model may or must call.

    Attributes:
        mode: ``"none"`` (no calls; also the reading of ``"auto"`` and of no
            ``tool_choice`` when the request has no tools), ``"auto"`` (the
            model decides), ``"required"`` (at least one call: OpenAI
            ``"required"``, Anthropic ``any``) or ``"named"`` (a call of
            :attr:`name`: OpenAI ``{"type": "function", ...}``, Anthropic
            ``{"type": "tool", ...}``).
        allowed: the tools the model may call, in the request's order: the
            one forced tool for ``"named"``, the subset of OpenAI
            ``allowed_tools`` for ``"auto"``/``"required"``; None: every tool.
        parallel: whether several calls in one turn are allowed (OpenAI
            ``parallel_tool_calls``, Anthropic ``not disable_parallel_tool_use``; default True).
    """

    mode: ToolChoiceMode = "none"
    allowed: tuple[str, ...] | None = None
    parallel: bool = True

    @property
    def name(self) -> str | None:
        """The forced function for ``"named"``, else None."""
        if self.mode == "named" and self.allowed:
            return self.allowed[0]
        return None


class GenerationOptions(msgspec.Struct, frozen=True, kw_only=True):
    """The request's sampling and reasoning options (None: not given; the engine's default applies).

    Attributes:
        max_tokens: the most tokens to generate (Chat ``max_completion_tokens``,
            else ``max_tokens``; Responses ``max_output_tokens``; Anthropic
            ``max_tokens``, which that API requires).
        temperature: sampling temperature (0 to 2 for OpenAI, 0 to 1 for Anthropic).
        top_p: nucleus sampling mass (0 to 1).
        stop: stop sequences (Chat ``stop``, a string read as one;
            Anthropic ``stop_sequences``); empty when none.
        seed: the sampling seed (Chat only).
        reasoning_effort: Chat ``reasoning_effort`` or Responses
            ``reasoning.effort``: ``"none"``, ``"minimal"``, ``"low"``,
            ``"medium"``, ``"high"`` or ``"xhigh"``.
        thinking: Anthropic's switch: True for ``thinking: {"type":
            "enabled"}`` (or ``"adaptive"``), False for ``"disabled"``; None
            when not given and for the other APIs (whose templates read
            ``enable_thinking`` from :attr:`chat_template_kwargs`).
        thinking_budget: Anthropic ``thinking.budget_tokens`` (None otherwise).
        chat_template_kwargs: extra template variables (the vLLM/SGLang Chat
            extension ``chat_template_kwargs``, e.g. ``enable_thinking``); empty when none.
    """

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    reasoning_effort: str | None = None
    thinking: bool | None = None
    thinking_budget: int | None = None
    chat_template_kwargs: dict[str, Any] = msgspec.field(default_factory=dict)


class Conversation(msgspec.Struct, frozen=True, kw_only=True):
    """A request, whichever API it came in: instructions, turns, tools, tool choice and options.

    Attributes:
        instructions: the instructions before the first turn, in order:
            Responses ``instructions`` and Anthropic ``system`` first, then
            leading ``system``/``developer`` messages. Later ones are turns.
        turns: the conversation, in order; never starts with an :class:`Instruction`.
        tools: the tools offered, in the request's order; None when the
            request has no ``tools`` (an empty list is ``()``: templates tell the two apart).
        strict_tools: the names of the tools marked ``strict: true`` (Chat
            ``function.strict``, Responses and Anthropic ``strict``); only an
            explicit true counts (as in :func:`deltaflow.constrain.strict_tool_names`).
        tool_choice: which tools the model may or must call.
        options: sampling and reasoning options.
    """

    instructions: tuple[Instruction, ...] = ()
    turns: tuple[Turn, ...] = ()
    tools: tuple[ToolSpec, ...] | None = None
    strict_tools: frozenset[str] = frozenset()
    tool_choice: ToolChoice = msgspec.field(default_factory=ToolChoice)
    options: GenerationOptions = msgspec.field(default_factory=GenerationOptions)
