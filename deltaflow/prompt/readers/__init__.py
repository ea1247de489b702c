"""Inbound readers: a request body of one of three APIs -> one canonical conversation.

Each returns a :class:`~deltaflow.prompt.conversation.Conversation`:

* :func:`read_chat`: OpenAI Chat Completions (``POST /v1/chat/completions``);
* :func:`read_responses`: OpenAI Responses (``POST /v1/responses``);
* :func:`read_messages`: Anthropic Messages (``POST /v1/messages``).

Each takes the decoded JSON body and validates it at the edge with plain
checks (no pydantic; tools go through :func:`deltaflow.tools.normalize_tools`):
what the API refuses is a :class:`RequestError` whose ``param`` is the field
path (``messages[1].content[0]``), whose message says what is accepted, and
whose :meth:`RequestError.body` is that API's error JSON. Keys a reader does
not know are ignored, as the APIs ignore or tolerate them. Only text is read:
image, audio, file and document parts are refused, naming the part
(``messages[1].content[0]: image_url parts are not supported (text only)``).

Where the APIs differ, the readers keep each API's own rule, and document
the few places they are more lenient (so deltaflow's own responses, sent
back, always read): a tool result must answer an earlier call (Chat: of the
assistant message before it; Responses: made since the last user, system or
developer message; Anthropic: of the assistant message just before), but a
call left unanswered is accepted; tool call ids are any non-empty string.

The same conversation read from any API is the same value, up to what an
API cannot say: only Anthropic carries thinking signatures and
``is_error``, only Responses ``encrypted_content``, only Chat a tool
result's ``name`` and ``seed``. ``chat_template_kwargs`` (vLLM's and
SGLang's Chat extension) is read from all three.
"""

from __future__ import annotations

from .anthropic import read_messages
from .chat import read_chat
from .errors import RequestError, RequestProtocol
from .responses import read_responses

__all__ = ("RequestError", "RequestProtocol", "read_chat", "read_messages", "read_responses")
