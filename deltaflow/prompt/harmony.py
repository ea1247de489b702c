"""gpt-oss prompts in the Harmony format, token for token what OpenAI's renderer makes.

gpt-oss is prompted in Harmony (``shared/dialects.md`` section 11, the
openai-harmony ``docs/format.md`` and the OpenAI cookbook's "OpenAI harmony
response format"), not with a Jinja template: :func:`render_harmony` writes a
:class:`~deltaflow.prompt.conversation.Conversation` as the prompt text that
openai-harmony's ``render_conversation_for_completion(conversation,
Role.ASSISTANT)`` decodes to (checked against ``openai-harmony`` 0.0.8 by
``tests/unit/prompt/test_harmony.py``), and :func:`render_conversation_harmony`
also tokenizes it into a :class:`~deltaflow.prompt.render.RenderedPrompt`.

The prompt, message by message (every message is
``<|start|>HEADER<|message|>BODY<|end|>``):

* **system**: the model identity (``You are ChatGPT, a large language model
  trained by OpenAI.``), ``Knowledge cutoff: 2024-06``, ``Current date:
  YYYY-MM-DD``; ``Reasoning: low|medium|high``; ``# Valid channels: analysis,
  commentary, final. Channel must be included for every message.`` and, when
  functions are offered, ``Calls to these tools must go to the commentary
  channel: 'functions'.`` (blocks separated by a blank line).
* **developer** (only when there is something to say): ``# Instructions``
  and the conversation's instructions (system and developer alike: Harmony's
  system message is the fixed metadata above; several are joined with a
  blank line), then ``# Tools`` / ``## functions`` and the ``namespace
  functions { ... }`` block, each tool a TypeScript-like ``type NAME = (_:
  {...}) => any;`` rendered from its JSON schema the way openai-harmony does
  (:func:`harmony_tool_type`), or ``type NAME = () => any;`` for a tool
  without parameters (an empty schema ``{}``, what a :class:`ToolSpec` holds
  when none was given). Tools are rendered when offered, unless
  ``tool_choice`` is ``"none"`` (vLLM's rule).
* **user**: ``<|start|>user<|message|>TEXT<|end|>``.
* **assistant**, one message per part of a turn, in this order: each
  reasoning block as ``<|start|>assistant<|channel|>analysis<|message|>...<|end|>``
  (redacted and empty blocks are left out); the text as
  ``<|channel|>final`` when the turn made no calls, else as a ``commentary``
  preamble; each call as ``<|start|>assistant to=functions.NAME<|channel|>commentary
  <|constrain|>json<|message|>ARGS<|call|>`` (the arguments as sent, ``{}`` when
  empty). openai-harmony writes a call's recipient in the role part of the
  header (the model itself writes it after the channel; both are valid
  Harmony and the parser reads both). A turn with nothing at all is an empty
  ``final`` message. History never ends with ``<|return|>``.
* **tool result**: ``<|start|>functions.NAME to=assistant<|channel|>commentary<|message|>TEXT<|end|>``,
  NAME being that of the call it answers.
* a later instruction (one among the turns): a developer message with ``# Instructions``.
* the generation prompt ``<|start|>assistant``: the model's output begins
  with ``<|channel|>``.

Analysis messages in the history: openai-harmony's rule, exactly (its
``auto_drop_analysis``): when the last assistant message of the conversation
is a ``final`` one, the analysis messages *before the first final message*
are dropped; otherwise (the turn in progress ended in a call, a preamble or
reasoning) none is. So the reasoning of a turn still calling tools stays
(the model needs it), and the first answered turn's reasoning goes; note
that the reasoning of later answered turns stays too (openai-harmony 0.0.8's
behaviour, kept for token identity; the cookbook's advice is to drop all
reasoning of answered turns).

Reasoning effort: ``reasoning_effort=`` if given, else the request's
``options.reasoning_effort``, else a ``reasoning_effort`` in its
``chat_template_kwargs`` (the HF template's variable), else ``"low"`` when
thinking was switched off (Anthropic ``thinking: disabled``,
``enable_thinking: false``), else ``"medium"``. Mapped: ``none``,
``minimal`` and ``low`` -> ``low`` (gpt-oss cannot reason less: ``none``
is its least, not off), ``medium`` -> ``medium``, ``high`` and ``xhigh`` ->
``high``.

Protection: Harmony's renderer writes only its own structure as special
tokens; every text (instructions, tool schemas, user turns, reasoning,
answers, call arguments, tool results, names) is encoded as ordinary text,
so no text of a request, trusted or not, ever becomes a control token.
:func:`render_conversation_harmony` does the same with any
:class:`~deltaflow.prompt.tokenize.PromptTokenizer`: every marker text in
them is a plain span (:mod:`deltaflow.prompt.protect`). openai-harmony
encodes each header part on its own (``assistant``, `` to=functions.f``);
the tokenizer encodes the text between two markers in one piece, which
gives the same ids: o200k's pre-tokenizer already splits at those joins
(the tests check random names and texts).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .conversation import AssistantTurn, Conversation, Instruction, ToolResult, UserTurn, join_parts

if TYPE_CHECKING:
    from .._core.toolspec import ToolSpec
    from .render import RenderedPrompt
    from .tokenize import PromptTokenizer

__all__ = (
    "HARMONY_CHANNELS",
    "HARMONY_IDENTITY",
    "HarmonyEffort",
    "HarmonyMessage",
    "harmony_messages",
    "harmony_reasoning_effort",
    "harmony_tool_type",
    "harmony_tools_section",
    "render_conversation_harmony",
    "render_harmony",
)

HarmonyEffort = Literal["low", "medium", "high"]
"""The three reasoning levels of a Harmony system message."""

HARMONY_IDENTITY = "You are ChatGPT, a large language model trained by OpenAI."
"""The model identity line of the system message (openai-harmony's default; OpenAI: keep it as it is)."""

HARMONY_CHANNELS: tuple[str, ...] = ("analysis", "commentary", "final")
"""The valid channels the system message lists."""

DEFAULT_KNOWLEDGE_CUTOFF = "2024-06"
"""gpt-oss's knowledge cutoff (openai-harmony's default)."""

# Harmony's markers (each one special token of o200k_harmony).
_START, _END, _MESSAGE, _CHANNEL, _CONSTRAIN, _CALL = (
    "<|start|>",
    "<|end|>",
    "<|message|>",
    "<|channel|>",
    "<|constrain|>",
    "<|call|>",
)

_EFFORTS: Mapping[str, HarmonyEffort] = {
    "none": "low",
    "minimal": "low",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "high",
}
_CALLS_LINE = "Calls to these tools must go to the commentary channel: 'functions'."
_JSON_CONTENT_TYPE = _CONSTRAIN + "json"


# ---------------------------------------------------------------------- messages


@dataclass(frozen=True)
class HarmonyMessage:
    """One Harmony message, as openai-harmony's ``Message`` holds it (one text content).

    Attributes:
        author: ``"system"``, ``"developer"``, ``"user"``, ``"assistant"``,
            or a tool's name (``"functions.NAME"``) for a tool's result.
        content: the body text.
        channel: ``"analysis"``, ``"commentary"``, ``"final"``, or None (no channel part).
        recipient: ``"functions.NAME"`` for a call, ``"assistant"`` for a tool's result, else None.
        content_type: ``"<|constrain|>json"`` for a call (written `` <|constrain|>json``), else None.
    """

    author: str
    content: str
    channel: str | None = None
    recipient: str | None = None
    content_type: str | None = None

    @property
    def is_call(self) -> bool:
        """An assistant message to a recipient: it ends with ``<|call|>`` rather than ``<|end|>``."""
        return self.author == "assistant" and self.recipient is not None

    def pieces(self) -> Iterator[tuple[str, bool]]:
        """The message as ``(text, is_control)`` pieces: Harmony's markers, and text encoded as ordinary text."""
        yield _START, True
        yield self.author, False
        if self.recipient is not None and self.recipient != "all":
            yield " to=" + self.recipient, False
        if self.channel is not None:
            yield _CHANNEL, True
            yield self.channel, False
        if self.content_type is not None:
            if self.content_type.startswith(_CONSTRAIN):
                yield " ", False
                yield _CONSTRAIN, True
                rest = self.content_type[len(_CONSTRAIN) :]
                if rest:
                    yield rest, False
            else:
                yield " " + self.content_type, False
        yield _MESSAGE, True
        yield self.content, False
        yield (_CALL if self.is_call else _END), True


def harmony_reasoning_effort(value: str | None, *, default: HarmonyEffort = "medium") -> HarmonyEffort:
    """A request's reasoning effort as one of Harmony's three levels.

    Args:
        value: ``"none"``, ``"minimal"``, ``"low"``, ``"medium"``, ``"high"``,
            ``"xhigh"`` (case-insensitive), or None.
        default: the level for None.

    Returns:
        ``"low"`` for none/minimal/low (gpt-oss's reasoning cannot be switched
        off; ``low`` is its least), ``"medium"``, or ``"high"`` for high/xhigh.

    Raises:
        ValueError: another value.
    """
    if value is None:
        return default
    effort = _EFFORTS.get(value.strip().lower())
    if effort is None:
        raise ValueError(f"reasoning effort must be one of {', '.join(_EFFORTS)}; got {value!r}")
    return effort


def _effective_effort(conversation: Conversation, explicit: str | None) -> HarmonyEffort:
    if explicit is not None:
        return harmony_reasoning_effort(explicit)
    opts = conversation.options
    if opts.reasoning_effort is not None:
        return harmony_reasoning_effort(opts.reasoning_effort)
    from_kwargs = opts.chat_template_kwargs.get("reasoning_effort")
    if isinstance(from_kwargs, str):
        return harmony_reasoning_effort(from_kwargs)
    if opts.thinking is False or opts.chat_template_kwargs.get("enable_thinking") is False:
        return "low"
    return "medium"


def _date_text(date: _dt.date | _dt.datetime | str | None) -> str:
    if isinstance(date, str):
        return date
    if date is None:
        date = _dt.date.today()
    return date.strftime("%Y-%m-%d")


def _system_text(
    *, identity: str | None, knowledge_cutoff: str | None, date: str, effort: HarmonyEffort, functions: bool
) -> str:
    head = [identity] if identity is not None else []
    if knowledge_cutoff is not None:
        head.append(f"Knowledge cutoff: {knowledge_cutoff}")
    head.append(f"Current date: {date}")
    channels = f"# Valid channels: {', '.join(HARMONY_CHANNELS)}. Channel must be included for every message."
    if functions:
        channels += "\n" + _CALLS_LINE
    return "\n\n".join(["\n".join(head), f"Reasoning: {effort}", channels])


def _developer_text(instructions: str | None, tools: Sequence[ToolSpec]) -> str:
    sections = [] if instructions is None else ["# Instructions", instructions]
    if tools:
        sections.append(harmony_tools_section(tools))
    return "\n\n".join(sections)


def harmony_messages(
    conversation: Conversation,
    *,
    date: _dt.date | _dt.datetime | str | None = None,
    knowledge_cutoff: str | None = DEFAULT_KNOWLEDGE_CUTOFF,
    reasoning_effort: str | None = None,
    model_identity: str | None = HARMONY_IDENTITY,
    auto_drop_analysis: bool = True,
) -> list[HarmonyMessage]:
    """The conversation as the Harmony messages of its prompt (see the module docstring).

    Args:
        conversation: the conversation.
        date: the system message's current date (a string is written as it
            is; None: today, as vLLM does).
        knowledge_cutoff: the knowledge cutoff line (None: no such line).
        reasoning_effort: overrides the request's effort (see the module docstring).
        model_identity: the identity line (None: no such line).
        auto_drop_analysis: drop analysis messages as openai-harmony does for
            completion (its default); False keeps them all.

    Returns:
        The messages, analysis already dropped where it is.

    Raises:
        ValueError: an unknown reasoning effort, or a tool result that
            answers no earlier call and has no name.
    """
    effort = _effective_effort(conversation, reasoning_effort)
    tools: tuple[ToolSpec, ...] = ()
    if conversation.tools and conversation.tool_choice.mode != "none":
        tools = conversation.tools
    system = _system_text(
        identity=model_identity,
        knowledge_cutoff=knowledge_cutoff,
        date=_date_text(date),
        effort=effort,
        functions=bool(tools),
    )
    out = [HarmonyMessage("system", system)]
    instructions = None
    if conversation.instructions:
        instructions = "\n\n".join(i.text for i in conversation.instructions)
    if instructions is not None or tools:
        out.append(HarmonyMessage("developer", _developer_text(instructions, tools)))
    names: dict[str, str] = {}
    for turn in conversation.turns:
        if isinstance(turn, UserTurn):
            out.append(HarmonyMessage("user", join_parts(turn.parts)))
        elif isinstance(turn, AssistantTurn):
            out.extend(_assistant_messages(turn))
            names.update((c.id, c.name) for c in turn.tool_calls)
        elif isinstance(turn, ToolResult):
            name = names.get(turn.call_id, turn.name)
            if name is None:
                raise ValueError(f"tool result {turn.call_id!r} answers no earlier tool call and has no name")
            out.append(
                HarmonyMessage(f"functions.{name}", join_parts(turn.parts), channel="commentary", recipient="assistant")
            )
        elif isinstance(turn, Instruction):
            out.append(HarmonyMessage("developer", _developer_text(turn.text, ())))
    return _drop_analysis(out) if auto_drop_analysis else out


def _assistant_messages(turn: AssistantTurn) -> list[HarmonyMessage]:
    out = [HarmonyMessage("assistant", r.text, channel="analysis") for r in turn.reasoning if r.text and not r.redacted]
    if turn.tool_calls:
        if turn.content:
            out.append(HarmonyMessage("assistant", turn.content, channel="commentary"))
        for call in turn.tool_calls:
            out.append(
                HarmonyMessage(
                    "assistant",
                    call.arguments if call.arguments.strip() else "{}",
                    channel="commentary",
                    recipient=f"functions.{call.name}",
                    content_type=_JSON_CONTENT_TYPE,
                )
            )
    elif turn.content or not out:
        out.append(HarmonyMessage("assistant", turn.content or "", channel="final"))
    return out


def _drop_analysis(messages: list[HarmonyMessage]) -> list[HarmonyMessage]:
    """openai-harmony's ``auto_drop_analysis``: see the module docstring."""
    last_is_final = next((m.channel == "final" for m in reversed(messages) if m.author == "assistant"), False)
    first_final = next((i for i, m in enumerate(messages) if m.channel == "final"), None)
    if not last_is_final or first_final is None:
        return messages
    return [m for i, m in enumerate(messages) if not (i < first_final and m.channel == "analysis")]


def _pieces(messages: Iterable[HarmonyMessage], add_generation_prompt: bool) -> Iterator[tuple[str, bool]]:
    for m in messages:
        yield from m.pieces()
    if add_generation_prompt:
        yield _START, True
        yield "assistant", False


# ---------------------------------------------------------------------- rendering


def render_harmony(
    conversation: Conversation,
    *,
    add_generation_prompt: bool = True,
    date: _dt.date | _dt.datetime | str | None = None,
    knowledge_cutoff: str | None = DEFAULT_KNOWLEDGE_CUTOFF,
    reasoning_effort: str | None = None,
    model_identity: str | None = HARMONY_IDENTITY,
    auto_drop_analysis: bool = True,
) -> str:
    """The Harmony prompt of a conversation, as text.

    The text openai-harmony's ``render_conversation_for_completion(...,
    Role.ASSISTANT)`` decodes to (``render_conversation`` without the
    generation prompt), for the same conversation: a system message with
    the same date, effort and cutoff, a developer message with the same
    instructions and tools (see the module docstring).

    Args:
        conversation: the conversation.
        add_generation_prompt: end with ``<|start|>assistant``.
        date: the current date of the system message (None: today).
        knowledge_cutoff: the knowledge cutoff line (None: no such line).
        reasoning_effort: overrides the request's effort (``none`` ... ``xhigh``).
        model_identity: the identity line (None: no such line).
        auto_drop_analysis: drop history analysis as openai-harmony does (default).

    Returns:
        The prompt text. Tokenize it with every marker outside the
        structure as plain text (:func:`render_conversation_harmony` does).

    Raises:
        ValueError: an unknown reasoning effort, or a tool result answering no call.
    """
    messages = harmony_messages(
        conversation,
        date=date,
        knowledge_cutoff=knowledge_cutoff,
        reasoning_effort=reasoning_effort,
        model_identity=model_identity,
        auto_drop_analysis=auto_drop_analysis,
    )
    return "".join(text for text, _ in _pieces(messages, add_generation_prompt))


def render_conversation_harmony(
    conversation: Conversation,
    tokenizer: PromptTokenizer | None = None,
    *,
    add_generation_prompt: bool = True,
    date: _dt.date | _dt.datetime | str | None = None,
    knowledge_cutoff: str | None = DEFAULT_KNOWLEDGE_CUTOFF,
    reasoning_effort: str | None = None,
    model_identity: str | None = HARMONY_IDENTITY,
    auto_drop_analysis: bool = True,
) -> RenderedPrompt:
    """Render a conversation in Harmony and tokenize it: what :meth:`PromptModel.render` returns for gpt-oss.

    Every text is protected (its marker texts are plain spans, so only
    Harmony's own structure becomes control tokens); with the o200k_harmony
    tokenizer the ids equal openai-harmony's.

    Args:
        conversation: the conversation.
        tokenizer: the model's prompt tokenizer (None: text only, no ids).
        add_generation_prompt: end with ``<|start|>assistant``.
        date: the current date of the system message (None: today).
        knowledge_cutoff: the knowledge cutoff line (None: no such line).
        reasoning_effort: overrides the request's effort.
        model_identity: the identity line (None: no such line).
        auto_drop_analysis: drop history analysis as openai-harmony does (default).

    Returns:
        The prompt, its ids (None without a tokenizer) and plain spans;
        ``reasoning_starts_open`` None (the output opens its own channel),
        ``enable_thinking`` None (gpt-oss always reasons), and the system
        message's fields as ``template_kwargs`` (``reasoning_effort``,
        ``conversation_start_date``, ``knowledge_cutoff``).

    Raises:
        ValueError: an unknown reasoning effort, or a tool result answering no call.
        PlaceholderOverflowError: too many distinct marker texts to protect.
    """
    from .protect import Protector
    from .render import RenderedPrompt

    effort = _effective_effort(conversation, reasoning_effort)
    date_text = _date_text(date)
    messages = harmony_messages(
        conversation,
        date=date_text,
        knowledge_cutoff=knowledge_cutoff,
        reasoning_effort=effort,
        model_identity=model_identity,
        auto_drop_analysis=auto_drop_analysis,
    )
    pieces = list(_pieces(messages, add_generation_prompt))
    kwargs: dict[str, Any] = {"reasoning_effort": effort, "conversation_start_date": date_text}
    if knowledge_cutoff is not None:
        kwargs["knowledge_cutoff"] = knowledge_cutoff
    if tokenizer is None:
        return RenderedPrompt(text="".join(t for t, _ in pieces), template_kwargs=kwargs)
    protector = Protector(tokenizer.added_token_texts)
    protected = "".join(t if control else protector.protect(t) for t, control in pieces)
    text, spans = protector.restore(protected)
    return RenderedPrompt(
        text=text,
        token_ids=tokenizer.encode(text, spans),
        plain_spans=spans,
        reasoning_starts_open=None,
        enable_thinking=None,
        template_kwargs=kwargs,
    )


# ---------------------------------------------------------------------- tools


def _lines(text: str) -> list[str]:
    """``text`` cut at ``\\n`` (and ``\\r\\n``), no empty last line: the lines openai-harmony comments."""
    *ended, last = text.split("\n")
    out = [line[:-1] if line.endswith("\r") else line for line in ended]  # a bare \r at the very end stays
    if last:
        out.append(last)
    return out


def harmony_tools_section(tools: Sequence[ToolSpec]) -> str:
    """The ``# Tools`` section of the developer message: the ``functions`` namespace.

    Args:
        tools: the tools, in the request's order.

    Returns:
        ``# Tools\\n\\n## functions\\n\\nnamespace functions {\\n\\n ... } // namespace functions``:
        per tool its description as ``//`` lines and its ``type``.
    """
    lines = ["## functions\n", "namespace functions {\n"]
    for tool in tools:
        lines.extend(f"// {line}" for line in _lines(tool.description or ""))
        if tool.parameters == {}:
            lines.append(f"type {tool.name} = () => any;\n")
        else:
            lines.append(f"type {tool.name} = (_: {harmony_tool_type(tool.parameters)}) => any;\n")
    lines.append("} // namespace functions")
    return "# Tools\n\n" + "\n".join(lines)


def harmony_tool_type(schema: Any, indent: str = "") -> str:
    """A JSON schema as the TypeScript-like type openai-harmony writes for it (0.0.8's rules).

    Objects list their properties in order, one per line (``name: type,``,
    ``name?: type,`` when not required), a property's ``title``,
    ``description`` and string ``examples`` as ``//`` comments above it and
    its ``default`` as a ``// default: ...`` comment after it; nested objects
    are indented four spaces more (with openai-harmony's own irregular
    placement of their braces and descriptions, kept as it is). Strings
    with an ``enum`` are a union of their string literals; numbers and
    integers are ``number``; an array is its items' type and ``[]`` (no
    ``items``: ``Array<any>``); a list of types is their union; ``oneOf``
    is a union written one variant per line; ``nullable: true`` adds ``|
    null``. Anything else (``anyOf``, ``$ref``, no ``type``, ``{}``) is ``any``.

    Args:
        schema: the schema (any JSON value; a non-object is ``any``).
        indent: the indentation of the object's lines.

    Returns:
        The type text.
    """
    s: Mapping[str, Any] = schema if isinstance(schema, Mapping) else {}
    variants = s.get("oneOf")
    if isinstance(variants, list):
        return "".join(_top_variant(v, indent) for v in variants)
    kind = s.get("type")
    if isinstance(kind, list):
        names = ["number" if k == "integer" else k for k in kind if isinstance(k, str)]
        if names:
            return " | ".join(names)
    if kind == "object":
        return _object_type(s, indent)
    if kind == "string":
        enum = s.get("enum")
        literals = [f'"{v}"' for v in enum if isinstance(v, str)] if isinstance(enum, list) else []
        return " | ".join(literals) if literals else "string"
    if kind in ("number", "integer"):
        return "number"
    if kind == "boolean":
        return "boolean"
    if kind == "array":
        return harmony_tool_type(s["items"], indent) + "[]" if "items" in s else "Array<any>"
    return "any"


def _as_map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _is_enum(s: Mapping[str, Any]) -> bool:
    enum = s.get("enum")
    return isinstance(enum, list) and bool(enum)


def _nullable(s: Mapping[str, Any], type_text: str) -> str:
    if s.get("nullable") is True and "null" not in type_text:
        return type_text + " | null"
    return type_text


def _default_comment(s: Mapping[str, Any], *, enum_quoted: bool) -> str:
    """``default: ...`` of a schema with a ``default``: a plain string quoted as is, an enum's
    string bare (``enum_quoted``: as JSON), anything else as compact JSON."""
    value = s["default"]
    if isinstance(value, str):
        if not _is_enum(s):
            return f'default: "{value}"'
        if not enum_quoted:
            return f"default: {value}"
    return f"default: {_json_text(value)}"


def _top_variant(variant: Any, indent: str) -> str:
    v = _as_map(variant)
    out = f"\n{indent} | " + _nullable(v, harmony_tool_type(variant, indent + "   "))
    notes = []
    description = _text(v.get("description"))
    if description is not None:
        notes.append(description)
    if "default" in v:
        notes.append(_default_comment(v, enum_quoted=True))
    return out + (" // " + " ".join(notes) if notes else "")


def _object_type(s: Mapping[str, Any], indent: str) -> str:
    out: list[str] = []
    description = _text(s.get("description"))
    if description is not None:
        out.append(f"{indent}// {description}\n")
    out.append("{\n")
    properties = s.get("properties")
    if isinstance(properties, Mapping):
        required_list = s.get("required")
        required = {r for r in required_list if isinstance(r, str)} if isinstance(required_list, list) else set()
        for key, value in properties.items():
            out.append(_property(str(key), value, "" if key in required else "?", indent))
    out.append(f"{indent}}}")
    return "".join(out)


def _property(key: str, value: Any, optional: str, indent: str) -> str:
    p = _as_map(value)
    out: list[str] = []
    title = _text(p.get("title"))
    if title is not None:
        out.append(f"{indent}// {title}\n{indent}//\n")
    description = _text(p.get("description"))
    if "oneOf" not in p and description is not None:
        out.append(f"{indent}// {description}\n")
    examples = p.get("examples")
    if isinstance(examples, list) and examples:
        out.append(f"{indent}// Examples:\n")
        out.extend(f'{indent}// - "{ex}"\n' for ex in examples if isinstance(ex, str))
    variants = p.get("oneOf")
    if isinstance(variants, list):
        out.append(_union_property(key, p, variants, description, optional, indent))
        return "".join(out)
    out.append(f"{indent}{key}{optional}: ")
    out.append(_nullable(p, harmony_tool_type(value, indent + "    ")) + ",")
    if "oneOf" not in p and "default" in p:
        out.append(" // " + _default_comment(p, enum_quoted=False))
    out.append("\n")
    return "".join(out)


def _union_property(
    key: str, p: Mapping[str, Any], variants: list[Any], description: str | None, optional: str, indent: str
) -> str:
    out: list[str] = []
    first = _as_map(variants[0]) if variants else {}
    above = description is not None and _text(first.get("description")) != description
    if above:
        out.append(f"{indent}// {description}\n")
    if "default" in p:
        out.append(f"{indent}// {_default_comment(p, enum_quoted=False)}\n")
    out.append(f"{indent}{key}{optional}:\n")
    for i, variant in enumerate(variants):
        v = _as_map(variant)
        line = f"{indent} | " + _nullable(v, harmony_tool_type(variant, indent + "   "))
        notes = []
        own = _text(v.get("description"))
        if not (i == 0 and above) and own is not None and own != description:
            notes.append(own)
        if "default" in v:
            notes.append(_default_comment(v, enum_quoted=False))
        out.append(line + (" // " + " ".join(notes) if notes else "") + "\n")
    out.append(f"{indent},\n")
    return "".join(out)


# ---------------------------------------------------------------------- JSON as openai-harmony writes it

_I64_MIN, _U64_END = -(2**63), 2**64


def _json_text(value: Any) -> str:
    """Compact JSON as Rust's serde_json writes a value (a default in a comment): no spaces, keys in
    order, non-ASCII as is, integers beyond 64 bits and all floats in Rust's shortest float form."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value) if _I64_MIN <= value < _U64_END else _float_text(float(value))
    if isinstance(value, float):
        return _float_text(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        items = [f"{json.dumps(str(k), ensure_ascii=False)}:{_json_text(v)}" for k, v in value.items()]
        return "{" + ",".join(items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_json_text(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _float_text(x: float) -> str:
    """A finite float the way Rust's ``ryu`` prints it (serde_json's floats): the shortest digits, in
    plain notation with ``.0`` for whole numbers up to 16 digits and down to ``0.0000d``, else ``de7`` / ``d.dde-7``."""
    if not math.isfinite(x):
        return "null"  # serde_json writes non-finite floats as null
    if x == 0.0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign = "-" if x < 0 else ""
    mantissa, _, exp_text = repr(abs(x)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    k = (int(exp_text) if exp_text else 0) - len(fraction)  # value = int(digits) * 10**k
    stripped = digits.rstrip("0")
    k += len(digits) - len(stripped)
    digits = stripped
    n = len(digits)
    point = n + k  # value = 0.DIGITS * 10**point
    if 0 <= k and point <= 16:
        return f"{sign}{digits}{'0' * k}.0"
    if 0 < point <= 16:
        return f"{sign}{digits[:point]}.{digits[point:]}"
    if -5 < point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    exponent = point - 1
    return f"{sign}{digits[0]}{'.' + digits[1:] if n > 1 else ''}e{exponent}"
