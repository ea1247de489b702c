"""From a conversation to the prompt a model is sent: render, protect, tokenize, and what the parser needs.

:class:`PromptModel` is one model's prompt side: its chat template, its
tokenizer (optional: string-prompt engines tokenize themselves) and the
dialects its output is parsed with. :meth:`PromptModel.render` takes a
:class:`~deltaflow.prompt.conversation.Conversation` and returns a
:class:`RenderedPrompt`:

1. the conversation in the form templates get
   (:func:`~deltaflow.prompt.messages.template_messages`), adapted to what
   the template can express (its probed
   :class:`~deltaflow.prompt.capabilities.TemplateCapabilities`): a
   ``developer`` instruction becomes ``system`` where the template has no
   developer role, instructions fold into the first user turn where it has no
   system role, tool-call arguments stay JSON text where it only renders
   that; what it cannot express at all (offered tools, earlier tool calls,
   tool results) is refused with a :class:`PromptError` naming the model and
   the missing capability, never dropped silently;
2. the template variables: the request's ``chat_template_kwargs`` (vLLM's and
   SGLang's convention) and each protocol's thinking options mapped onto
   ``enable_thinking`` / ``thinking`` / ``reasoning_effort`` /
   ``thinking_budget`` (the latter three only for templates that read them);
3. untrusted text protected: every marker of the tokenizer (its added and
   special tokens) that a user, a tool result or a client-sent tool call
   spells is encoded as plain text, so a request cannot forge a turn or a
   call (:mod:`deltaflow.prompt.protect`);
4. what the response side needs: whether the prompt left reasoning open
   (``reasoning_starts_open``) and whether thinking is on
   (``enable_thinking``), read from the rendered text and the request, so a
   caller no longer has to say it.

:func:`render_prompt` does the same from a request body of any of the three
APIs; ``deltaflow render`` prints its result.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import structlog

from ..errors import DeltaflowError
from ..parsers import registry
from .capabilities import TemplateCapabilities, reasoning_left_open
from .conversation import AssistantTurn, Conversation, ToolResult
from .messages import template_messages, template_tools
from .protect import Protector
from .readers import RequestError, read_chat, read_messages, read_responses
from .template import ChatTemplate, TemplateError, TemplateNotFoundError, load_chat_template

if TYPE_CHECKING:
    from .tokenize import PromptTokenizer

__all__ = ("PromptError", "PromptModel", "Protocol", "RenderedPrompt", "render_prompt", "request_template")

Protocol = Literal["chat", "responses", "messages"]
"""The three request APIs: OpenAI Chat Completions, OpenAI Responses, Anthropic Messages."""

_log = structlog.get_logger("deltaflow.prompt")

_READERS = {"chat": read_chat, "responses": read_responses, "messages": read_messages}

# How far back from the end of a prompt the generation prompt's reasoning opener is looked for when
# the reasoning dialect declares no turn markers.
_TAIL = 256


class PromptError(DeltaflowError, ValueError):
    """A conversation the model's chat template cannot express (the message names the model and what).

    Attributes:
        model: the model's name.
        capability: the missing capability (``"tools"``, ``"tool_calls"``, ``"tool_results"``).
    """

    def __init__(self, model: str, capability: str, message: str) -> None:
        super().__init__(message)
        self.model = model
        self.capability = capability


@dataclass(frozen=True)
class RenderedPrompt:
    """A rendered prompt and what the response side needs to know about it.

    Attributes:
        text: the prompt, exactly as the template rendered it.
        token_ids: its token ids (untrusted marker text encoded as plain
            text), or None when the model has no tokenizer or none was asked for.
        plain_spans: ``(start, end)`` offsets of marker text that came from
            untrusted input and is encoded as text, not as control tokens.
        reasoning_starts_open: True when the prompt ends inside a reasoning
            block the template opened (the output starts in reasoning), False
            when the generation prompt opened and closed one (thinking off),
            None when the prompt says nothing (the parser's default holds).
        enable_thinking: whether thinking is on for this request (None: the
            model's default).
        template_kwargs: the extra template variables the render used.
    """

    text: str
    token_ids: list[int] | None = None
    plain_spans: tuple[tuple[int, int], ...] = ()
    reasoning_starts_open: bool | None = None
    enable_thinking: bool | None = None
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PromptModel:
    """One model's prompt side: chat template, tokenizer, and the dialects its output is parsed with.

    Attributes:
        name: the model's name (for messages).
        template: its chat template (None for a Harmony model without one:
            gpt-oss is rendered by :mod:`deltaflow.prompt.harmony`).
        tokenizer: its prompt tokenizer, or None (the engine tokenizes strings).
        tool_parser: the tool dialect of its output, or None.
        reasoning_parser: the reasoning dialect of its output, or None.
        strict: refuse a conversation the template cannot express (True, the
            default: a :class:`PromptError`); False renders it anyway, what
            the template cannot show being left out, with a warning logged.
    """

    name: str
    template: ChatTemplate | None
    tokenizer: PromptTokenizer | None = None
    tool_parser: str | None = None
    reasoning_parser: str | None = None
    strict: bool = True

    @classmethod
    def from_folder(
        cls,
        folder: str | os.PathLike[str],
        *,
        name: str | None = None,
        template_file: str | os.PathLike[str] | None = None,
        template_name: str | None = None,
        tool_parser: str | None = None,
        reasoning_parser: str | None = None,
        tokenizer: bool = True,
        strict: bool = True,
    ) -> PromptModel:
        """Load a model folder: its chat template, its tokenizer (``tokenizer.json`` or ``.json.gz``), its parsers.

        The parsers are the ones given, else the preset (``deltaflow presets``)
        matching ``name``, the ``_name_or_path`` of the folder's
        ``config.json`` or the folder's name; a folder with no preset and no
        parser given parses content only.

        Args:
            folder: the model folder.
            name: the model's name (default: the folder's name).
            template_file: a template file instead of the folder's own.
            template_name: which named template (``tokenizer_config.json`` lists).
            tool_parser: the tool dialect, instead of the preset's.
            reasoning_parser: the reasoning dialect, instead of the preset's.
            tokenizer: load the tokenizer (False: prompts are sent as text).
            strict: refuse conversations the template cannot express (see the attribute).

        Raises:
            TemplateNotFoundError: the folder has no chat template.
            UnknownParserError: a parser name that is not registered.
        """
        path = Path(folder)
        model_name = name or path.resolve().name
        if tool_parser is None and reasoning_parser is None:
            tool_parser, reasoning_parser = _preset_parsers(path, model_name)
        try:
            template: ChatTemplate | None = load_chat_template(path, name=template_name, file=template_file)
        except TemplateNotFoundError:
            if not _is_harmony(tool_parser, reasoning_parser):
                raise
            template = None  # gpt-oss: Harmony's own rules render it
        tok: PromptTokenizer | None = None
        if tokenizer and any((path / f).is_file() for f in ("tokenizer.json", "tokenizer.json.gz")):
            from .tokenize import load_prompt_tokenizer

            tok = load_prompt_tokenizer(path)
        if tool_parser is not None:
            registry.get_tool_dialect(tool_parser)
        if reasoning_parser is not None:
            registry.get_reasoning_dialect(reasoning_parser)
        return cls(model_name, template, tok, tool_parser, reasoning_parser, strict)

    @property
    def harmony(self) -> bool:
        """Whether the model is prompted in Harmony (gpt-oss: the ``openai`` dialects), not with a template."""
        return _is_harmony(self.tool_parser, self.reasoning_parser)

    @property
    def capabilities(self) -> TemplateCapabilities:
        """What the model's template renders (probed once).

        Raises:
            ValueError: the model has no template (a Harmony model).
        """
        if self.template is None:
            raise ValueError(f"model {self.name!r} has no chat template (it is rendered in Harmony)")
        return self.template.capabilities

    def render(
        self,
        conversation: Conversation,
        *,
        add_generation_prompt: bool = True,
        date: _dt.date | _dt.datetime | None = None,
        tokens: bool = True,
        template: ChatTemplate | None = None,
    ) -> RenderedPrompt:
        """Render a conversation with the model's template (see the module docstring).

        Args:
            conversation: the conversation.
            add_generation_prompt: end with the assistant turn's opener.
            template: a template to use instead of the model's (a request's own
                ``chat_template``, where the operator allows it: see
                :func:`request_template`).
            date: what ``strftime_now`` sees (None: now).
            tokens: also tokenize (when the model has a tokenizer).

        Raises:
            PromptError: the template cannot express part of the conversation.
            TemplateError: the template raised (its own message).
        """
        if self.harmony:
            from .harmony import render_conversation_harmony

            return render_conversation_harmony(
                conversation, self.tokenizer if tokens else None, add_generation_prompt=add_generation_prompt, date=date
            )
        template = template if template is not None else self.template
        if template is None:
            raise ValueError(f"model {self.name!r} has no chat template")
        caps = template.capabilities
        self._check(conversation, caps)
        messages = template_messages(conversation, developer_role=caps.developer, system_role=caps.system)
        if not caps.object_arguments:
            messages = [_string_arguments(m) for m in messages]
        tools = template_tools(conversation)
        kwargs, thinking = _template_kwargs(conversation, template.variables)
        protector: Protector | None = None
        if self.tokenizer is not None and tokens:
            protector = Protector(self.tokenizer.added_token_texts)
            messages = protector.protect_messages(messages)
            if tools is not None:
                tools = protector.protect(tools)
        text = template.render(
            messages, tools=tools, add_generation_prompt=add_generation_prompt, date=date, **kwargs
        )
        spans: tuple[tuple[int, int], ...] = ()
        if protector is not None:
            text, spans = protector.restore(text)
        ids = self.tokenizer.encode(text, spans) if protector is not None and self.tokenizer is not None else None
        return RenderedPrompt(
            text=text,
            token_ids=ids,
            plain_spans=spans,
            reasoning_starts_open=self._reasoning_open(text) if add_generation_prompt else None,
            enable_thinking=thinking,
            template_kwargs=kwargs,
        )

    def _check(self, conversation: Conversation, caps: TemplateCapabilities) -> None:
        def refuse(capability: str, what: str) -> None:
            if not self.strict:
                _log.warning("template_cannot_render", model=self.name, capability=capability)
                return
            raise PromptError(
                self.name,
                capability,
                f"the chat template of model {self.name!r} cannot render {what}; it would be dropped from the "
                "prompt silently, so the request is refused (use a template that renders it: "
                "--chat-template FILE)",
            )

        if conversation.tools and conversation.tool_choice.mode != "none" and not caps.tools:
            refuse("tools", "the offered tools ('tools')")
        turns = conversation.turns
        if not caps.tool_calls and any(isinstance(t, AssistantTurn) and t.tool_calls for t in turns):
            refuse("tool_calls", "an assistant turn's tool calls")
        if not caps.tool_results and any(isinstance(t, ToolResult) for t in turns):
            refuse("tool_results", "tool results")

    def _reasoning_open(self, text: str) -> bool | None:
        if self.reasoning_parser is None:
            return None
        d = registry.get_reasoning_dialect(self.reasoning_parser)
        if d.inline or not d.start:
            return None
        if reasoning_left_open(text, start=d.start, end=d.end):
            return True
        cut = max((text.rfind(m) + len(m) for m in d.turn_markers if m in text), default=len(text) - _TAIL)
        tail = text[max(cut, 0) :]
        start = tail.rfind(d.start)
        return False if start >= 0 and d.end in tail[start:] else None


def _is_harmony(tool_parser: str | None, reasoning_parser: str | None) -> bool:
    return reasoning_parser == "openai_gptoss" or tool_parser == "openai"


def _preset_parsers(folder: Path, name: str) -> tuple[str | None, str | None]:
    from ..presets import UnknownModelError, resolve_model

    candidates = [name]
    config = folder / "config.json"
    if config.is_file():
        try:
            data = json.loads(config.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        if isinstance(data, dict) and isinstance(data.get("_name_or_path"), str):
            candidates.insert(0, data["_name_or_path"])
    for candidate in candidates:
        try:
            preset = resolve_model(candidate)
        except UnknownModelError:
            continue
        return preset.tool_parser, preset.reasoning_parser
    return None, None


def _string_arguments(message: dict[str, Any]) -> dict[str, Any]:
    calls = message.get("tool_calls")
    if not calls:
        return message
    out = dict(message)
    out["tool_calls"] = [
        {**c, "function": {**c["function"], "arguments": json.dumps(c["function"]["arguments"], ensure_ascii=False)}}
        for c in calls
    ]
    return out


def _template_kwargs(
    conversation: Conversation, variables: frozenset[str] | Sequence[str]
) -> tuple[dict[str, Any], bool | None]:
    """The template variables from the request's options, and whether thinking is on."""
    opts = conversation.options
    kwargs: dict[str, Any] = dict(opts.chat_template_kwargs)
    thinking = opts.thinking
    if thinking is None and opts.reasoning_effort == "none":
        thinking = False  # OpenAI's "no reasoning"
    explicit = kwargs.get("enable_thinking")
    if isinstance(explicit, bool):
        thinking = explicit  # the client's own template variables are passed as given
    elif thinking is not None:
        kwargs["enable_thinking"] = thinking
        if "thinking" in variables:
            kwargs.setdefault("thinking", thinking)  # DeepSeek-V3.1's template reads `thinking`
    if opts.reasoning_effort is not None:
        kwargs.setdefault("reasoning_effort", opts.reasoning_effort)
    if opts.thinking_budget is not None and "thinking_budget" in variables:
        kwargs.setdefault("thinking_budget", opts.thinking_budget)  # Seed-OSS
    return kwargs, thinking


def request_template(
    request: Mapping[str, Any], model: PromptModel, *, allowed: bool, protocol: Protocol = "chat"
) -> ChatTemplate | None:
    """The request's own ``chat_template`` (vLLM's and SGLang's request field), when the operator allows it.

    Args:
        request: the request body.
        model: the model (its special tokens are the template's).
        allowed: whether this server accepts templates from requests.
        protocol: the request's API (for the error's shape).

    Returns:
        The compiled template, or None when the request gives none.

    Raises:
        RequestError: the request gives one and this server does not allow it,
            or it is not a string, or it does not compile.
    """
    source = request.get("chat_template")
    if source is None:
        return None
    if not allowed:
        raise RequestError(
            "chat_template: this server renders prompts with the model's own template; a request-supplied "
            "template is not allowed (the operator can allow it)",
            protocol=protocol, param="chat_template", code="unsupported_value",
        )
    if not isinstance(source, str) or not source.strip():
        raise RequestError("chat_template: must be a non-empty string (a Jinja template)", protocol=protocol,
                           param="chat_template", code="invalid_type")
    specials = dict(model.template.special_tokens) if model.template is not None else {}
    try:
        return ChatTemplate.from_string(source, name="request chat_template", special_tokens=specials)
    except TemplateError as exc:
        raise RequestError(f"chat_template: {exc}", protocol=protocol, param="chat_template") from None


def render_prompt(
    request: Mapping[str, Any],
    *,
    model: PromptModel | str | os.PathLike[str],
    protocol: Protocol = "chat",
    add_generation_prompt: bool = True,
    date: _dt.date | _dt.datetime | None = None,
    tokens: bool = True,
    allow_request_template: bool = False,
) -> RenderedPrompt:
    """Render a request body of one of the three APIs with a model's chat template.

    Args:
        request: the request body (``messages`` / ``input`` / Anthropic ``messages``, ``tools``, ...).
        model: a :class:`PromptModel`, or a model folder to load one from.
        protocol: the request's API.
        add_generation_prompt: end with the assistant turn's opener.
        date: what ``strftime_now`` sees (None: now), for reproducible renders.
        tokens: also tokenize (when the model has a tokenizer).
        allow_request_template: accept the request's own ``chat_template``
            (off by default: a template is code the server runs).

    Raises:
        RequestError: the body is not valid in its API (the API's error shape),
            or gives a ``chat_template`` this call does not allow.
        PromptError: the template cannot express part of the conversation.
        TemplateError: the template raised.
    """
    reader = _READERS.get(protocol)
    if reader is None:
        raise ValueError(f"protocol must be one of {', '.join(_READERS)}, got {protocol!r}")
    pm = model if isinstance(model, PromptModel) else PromptModel.from_folder(model, tokenizer=tokens)
    conversation = reader(request)
    template = request_template(request, pm, allowed=allow_request_template, protocol=protocol)
    return pm.render(conversation, add_generation_prompt=add_generation_prompt, date=date, tokens=tokens,
                     template=template)
