"""The gateway: the three client APIs in front of a raw-completion engine.

A request (OpenAI Chat Completions, OpenAI Responses, Anthropic Messages) is
read onto one conversation (:mod:`deltaflow.prompt`), rendered with the
model's chat template, tokenized, and sent to an upstream engine
(:mod:`deltaflow.gateway.upstreams`: llama.cpp, OpenAI-compatible
completions such as vLLM, SGLang, Ollama, TGI); what the engine writes is
parsed by the same pipeline as every other deltaflow stream and framed in
the client's protocol.

An engine that renders and parses itself can be used through its own
``/v1/chat/completions`` instead (the passthrough, ``upstream_kind =
"chat"``: :mod:`deltaflow.gateway.upstreams.openai_chat`): the conversation
is written as a Chat request (:func:`deltaflow.prompt.writers.write_chat`)
and the engine's parsed deltas are framed as they come, with no deltaflow
parser or constraint in between.
"""
