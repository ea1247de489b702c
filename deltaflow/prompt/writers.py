"""A :class:`~deltaflow.prompt.conversation.Conversation` -> an OpenAI Chat Completions request body.

The inverse of :func:`~deltaflow.prompt.readers.read_chat`, for a server that
renders the prompt and parses the output itself (the gateway's Chat
Completions passthrough): a conversation read from any of the three APIs is
written as the Chat request a server such as vLLM, SGLang or llama.cpp's
``/v1/chat/completions`` takes.

What is written (fields left out when the conversation does not set them):

* ``messages``: :func:`~deltaflow.prompt.messages.chat_messages` (arguments
  as JSON text, reasoning as ``reasoning_content``);
* ``tools`` (OpenAI function tools; ``strict: true`` kept on the tools that
  had it), ``tool_choice`` (``"none"``, ``"auto"``, ``"required"``, or
  ``{"type": "function", "function": {"name"}}``) and ``parallel_tool_calls``,
  only when the request has at least one tool. A subset of allowed tools
  (OpenAI ``allowed_tools``) is written as ``tools`` holding only those tools:
  servers that render prompts take that form, few take ``allowed_tools``;
* ``max_tokens``, ``temperature``, ``top_p``, ``seed``, ``stop``;
* ``reasoning_effort``, and ``chat_template_kwargs``: the request's own, with
  ``enable_thinking`` set from the request's reasoning switch where it has one
  (Anthropic ``thinking``, ``reasoning_effort: "none"``), as the rendered path
  sets it for the model's template.

Not written: Anthropic's ``thinking.budget_tokens`` (Chat has no field for it).
"""

from __future__ import annotations

from typing import Any

from .conversation import Conversation
from .messages import chat_messages, template_tools
from .render import _template_kwargs

__all__ = ("thinking_of", "write_chat")


def write_chat(conversation: Conversation, *, max_tokens: int | None = None) -> dict[str, Any]:
    """The conversation as a Chat Completions request body, without ``model`` and ``stream``.

    Args:
        conversation: the conversation (its reasoning already verified, when it came from a client).
        max_tokens: the limit to write instead of the conversation's own (None: the conversation's).

    Returns:
        A fresh JSON-ready dict (see the module docstring).
    """
    body: dict[str, Any] = {"messages": chat_messages(conversation)}
    choice = conversation.tool_choice
    tools = template_tools(conversation) or []
    if choice.allowed is not None and choice.mode in ("auto", "required"):
        allowed = set(choice.allowed)
        tools = [t for t in tools if t["function"]["name"] in allowed]
    if tools:
        for t in tools:
            if t["function"]["name"] in conversation.strict_tools:
                t["function"]["strict"] = True
        body["tools"] = tools
        if choice.mode == "named":
            body["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
        else:
            body["tool_choice"] = choice.mode
        body["parallel_tool_calls"] = choice.parallel
    opts = conversation.options
    limit = max_tokens if max_tokens is not None else opts.max_tokens
    if limit is not None:
        body["max_tokens"] = limit
    if opts.temperature is not None:
        body["temperature"] = opts.temperature
    if opts.top_p is not None:
        body["top_p"] = opts.top_p
    if opts.seed is not None:
        body["seed"] = opts.seed
    if opts.stop:
        body["stop"] = list(opts.stop)
    if opts.reasoning_effort is not None:
        body["reasoning_effort"] = opts.reasoning_effort
    kwargs, _ = _template_kwargs(conversation, ())
    if "reasoning_effort" not in opts.chat_template_kwargs:
        kwargs.pop("reasoning_effort", None)  # a field of its own above
    if kwargs:
        body["chat_template_kwargs"] = kwargs
    return body


def thinking_of(conversation: Conversation) -> bool | None:
    """Whether the request turns thinking on (True) or off (False), or None when it does not say.

    The same reading as the rendered path's: ``chat_template_kwargs.enable_thinking``,
    else Anthropic ``thinking``, else ``reasoning_effort: "none"`` (off).
    """
    return _template_kwargs(conversation, ())[1]
