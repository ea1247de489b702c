"""The prompt side: what to send a model for a request.

A request in any of the three APIs (OpenAI Chat Completions, OpenAI
Responses, Anthropic Messages) is read onto one canonical
:class:`~deltaflow.prompt.conversation.Conversation` (:mod:`.readers`),
brought into the form chat templates expect (:mod:`.messages`; or written
back as a Chat Completions request for a server that renders itself:
:mod:`.writers`), rendered with
the model's own chat template in the Jinja environment transformers uses
(:mod:`.template`, byte for byte), and tokenized so that only the template's
own markers become control tokens (:mod:`.protect`, :mod:`.tokenize`).
:mod:`.render` ties them together: :class:`PromptModel` (a model folder's
template, tokenizer and parsers) and :func:`render_prompt`. gpt-oss is
prompted in Harmony instead of a template (:mod:`.harmony`, token for token
what openai-harmony renders).
"""

from .capabilities import TemplateCapabilities as TemplateCapabilities
from .capabilities import reasoning_left_open as reasoning_left_open
from .conversation import Conversation as Conversation
from .harmony import render_conversation_harmony as render_conversation_harmony
from .harmony import render_harmony as render_harmony
from .messages import chat_messages as chat_messages
from .messages import template_messages as template_messages
from .messages import template_tools as template_tools
from .protect import Protector as Protector
from .protect import protect_messages as protect_messages
from .readers import RequestError as RequestError
from .readers import read_chat as read_chat
from .readers import read_messages as read_messages
from .readers import read_responses as read_responses
from .render import PromptError as PromptError
from .render import PromptModel as PromptModel
from .render import RenderedPrompt as RenderedPrompt
from .render import render_prompt as render_prompt
from .template import ChatTemplate as ChatTemplate
from .template import TemplateError as TemplateError
from .template import TemplateNotFoundError as TemplateNotFoundError
from .template import load_chat_template as load_chat_template
from .tokenize import HFPromptTokenizer as HFPromptTokenizer
from .tokenize import PromptTokenizer as PromptTokenizer
from .tokenize import TiktokenPromptTokenizer as TiktokenPromptTokenizer
from .tokenize import load_prompt_tokenizer as load_prompt_tokenizer
from .writers import write_chat as write_chat

__all__ = (
    "ChatTemplate",
    "Conversation",
    "HFPromptTokenizer",
    "PromptError",
    "PromptModel",
    "PromptTokenizer",
    "Protector",
    "RenderedPrompt",
    "RequestError",
    "TemplateCapabilities",
    "TemplateError",
    "TemplateNotFoundError",
    "TiktokenPromptTokenizer",
    "chat_messages",
    "load_chat_template",
    "protect_messages",
    "read_chat",
    "read_messages",
    "read_responses",
    "reasoning_left_open",
    "render_conversation_harmony",
    "render_harmony",
    "render_prompt",
    "template_messages",
    "template_tools",
    "write_chat",
)
