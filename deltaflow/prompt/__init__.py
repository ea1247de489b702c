"""The prompt side: what to send a model for a request.

A request in any of the three APIs (OpenAI Chat Completions, OpenAI
Responses, Anthropic Messages) is read onto one canonical
:class:`~deltaflow.prompt.conversation.Conversation`, brought into the form
chat templates expect, rendered with the model's own chat template in the
Jinja environment transformers uses, and tokenized so that only the
template's own markers become control tokens.
"""
