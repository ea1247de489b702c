"""JSON-envelope tool dialects: ``hermes``, ``internlm``, ``llama3_json``.

Facts (shared/dialects.md):

* hermes (section 1): ``<tool_call>{"name", "arguments"}</tool_call>`` per
  call, consecutive blocks for parallel calls; ``<tool_call>`` and
  ``</tool_call>`` are single tokens in Qwen2.5/Qwen3.
* internlm (section 2): ``<|action_start|><|plugin|>{"name", "parameters"}<|action_end|>``;
  all markers are special tokens, and a detokenizer may put whitespace
  between the first two. vLLM also accepts ``arguments``.
* llama3_json (section 3): an optional ``<|python_tag|>`` (one token) then a
  bare ``{"name", "parameters"}`` object (``arguments`` also seen); calls may
  be joined by ``;`` or by repeating the tag. A bare ``{`` opens a call only
  where nothing but whitespace came before (vLLM's streaming rule), so JSON
  quoted inside prose stays prose.
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.json_envelope import JsonEnvelopeFormat

__all__ = ("HERMES", "INTERNLM", "LLAMA3_JSON")


HERMES = declare(
    "hermes",
    JsonEnvelopeFormat(open=("<tool_call>",), close="</tool_call>", args_fields=("arguments", "parameters")),
    tokenizers=("qwen3", "qwen2.5"),
    description="Hermes / Qwen2.5 / Qwen3: <tool_call>{\"name\", \"arguments\"}</tool_call>",
    families=("Hermes 2 Pro / 3", "Qwen2.5", "QwQ", "Qwen3", "Qwen3-2507"),
)

INTERNLM = declare(
    "internlm",
    JsonEnvelopeFormat(
        open=("<|action_start|>", "<|plugin|>"),
        close="<|action_end|>",
        args_fields=("parameters", "arguments"),
    ),
    description="InternLM2/2.5/3, Intern-S1: <|action_start|><|plugin|>{\"name\", \"parameters\"}<|action_end|>",
    families=("InternLM2", "InternLM2.5", "InternLM3", "Intern-S1"),
)

LLAMA3_JSON = declare(
    "llama3_json",
    JsonEnvelopeFormat(
        open=("<|python_tag|>",),
        close=None,
        args_fields=("parameters", "arguments"),
        bare_object=True,
        separator=";",
    ),
    start_openers=("{",),
    tokenizers=("llama3",),
    description="Llama 3.x JSON: [<|python_tag|>]{\"name\", \"parameters\"}[; ...]",
    families=("Llama 3.1", "Llama 3.2", "Llama 3.3"),
)
