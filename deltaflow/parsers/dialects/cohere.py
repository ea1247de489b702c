"""Cohere: the ``command_r7b`` and ``command_r_plus`` tool dialects and the ``command_r7b`` reasoning dialect.

* ``command_r7b`` tool calls (Command R7B, Command A; a declaration of the
  JSON envelope driver, ``parsers/drivers/json_envelope.py``):
  ``<|START_ACTION|>[{"tool_call_id", "tool_name", "parameters"}, ...]<|END_ACTION|>``,
  a JSON array of calls. The action markers are special tokens (llama.cpp's
  Command R7B handler matches them whole); the response wrapper
  ``<|START_RESPONSE|>...<|END_RESPONSE|>`` is framing, dropped by the tool
  dialect too (llama.cpp's handler strips it with or without reasoning).
* Reasoning ``command_r7b`` (llama.cpp's reasoning handler):
  ``<|START_THINKING|>...<|END_THINKING|>`` then content in
  ``<|START_RESPONSE|>...<|END_RESPONSE|>``; reasoning does not start open.
  No Cohere tokenizer is in shared/tokenizers: every proper prefix of each
  marker is declared.
* ``command_r_plus`` (Cohere Command R+, tool-use template; llama.cpp's chat
  handler and its conformance vector ``llamacpp:command_r_plus`` in
  shared/corpus/llamacpp.jsonl; no section of shared/dialects.md covers it):
  ``Action:`` then a ```` ```json ```` fence holding a JSON array of
  ``{"tool_name": ..., "parameters": {...}}``, closed by ```` ``` ````. A
  declaration of the JSON envelope driver (as ``command_r7b``, with
  ``Action:`` / ```` ```json ```` as the opener sequence, blanks allowed
  between them). Every marker is plain text (no Cohere tokenizer is in
  shared/tokenizers), so every proper prefix of ``Action:`` is declared, and
  of the turn tokens too. The turn tokens ``<|START_OF_TURN_TOKEN|>``,
  ``<|CHATBOT_TOKEN|>`` and ``<|END_OF_TURN_TOKEN|>`` are special tokens that
  frame the turn, never answer text: the tool dialect drops them wherever they
  appear outside a call (its ``framing``), as llama.cpp does (CONFORMANCE.md).
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.json_envelope import JsonEnvelopeFormat
from ..registry import register_reasoning_dialect
from ..spec import ReasoningDialect, Writing, all_prefixes

__all__ = (
    "COMMAND_R7B", "COMMAND_R7B_REASONING", "COMMAND_R7B_RESPONSE", "COMMAND_R_PLUS", "COMMAND_R_PLUS_FORMAT",
    "PRESETS",
)

# -- Command R7B ------------------------------------------------------------------------------

COMMAND_R7B = declare(
    "command_r7b",
    JsonEnvelopeFormat(
        open=("<|START_ACTION|>",),
        close="<|END_ACTION|>",
        name_field="tool_name",
        args_fields=("parameters",),
        array=True,
    ),
    # Cohere's action markers are special tokens (llama.cpp's Command R7B handler matches them whole);
    # the model's "tool_call_id" member is read past like any other member.
    token_prefixes=(),
    # The response wrapper is framing (the command_r7b reasoning parser drops it too; llama.cpp's
    # handler strips it with or without reasoning).
    framing=("<|START_RESPONSE|>", "<|END_RESPONSE|>"),
    description='Command R7B: <|START_ACTION|>[{"tool_call_id", "tool_name", "parameters"}, ...]<|END_ACTION|>',
    families=("Command R7B", "Command A"),
)

COMMAND_R7B_RESPONSE = ("<|START_RESPONSE|>", "<|END_RESPONSE|>")

COMMAND_R7B_REASONING = register_reasoning_dialect(
    ReasoningDialect(
        name="command_r7b",
        start="<|START_THINKING|>",
        end="<|END_THINKING|>",
        starts_open=False,
        content_wrap=COMMAND_R7B_RESPONSE,
        token_prefixes=all_prefixes("<|START_THINKING|>", "<|END_THINKING|>", *COMMAND_R7B_RESPONSE),
        families=("c4ai-command-r7b-12-2024",),
    )
)

# -- Command R+ -------------------------------------------------------------------------------

COMMAND_R_PLUS_FORMAT = JsonEnvelopeFormat(
    open=("Action:", "```json"),
    close="```",
    name_field="tool_name",
    args_fields=("parameters",),
    array=True,
)

_COHERE_TURN = ("<|START_OF_TURN_TOKEN|>", "<|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>")

COMMAND_R_PLUS = declare(
    "command_r_plus",
    COMMAND_R_PLUS_FORMAT,
    # No Cohere tokenizer in shared/: every prefix is declared, the turn tokens' too.
    token_prefixes=all_prefixes("Action:", *_COHERE_TURN),
    # Cohere's turn tokens are special tokens that frame the turn, never answer text (llama.cpp strips them).
    framing=_COHERE_TURN,
    description='Command R+: Action:\\n```json\\n[{"tool_name", "parameters"}, ...]\\n```',
    families=("c4ai-command-r-plus", "c4ai-command-r-v01"),
    writing=Writing(open_gaps=("\n", "\n"), close_gap="\n", separator=", "),
)

PRESETS: tuple[tuple[str, str | None, str | None], ...] = (
    ("CohereLabs/c4ai-command-r7b-12-2024", "command_r7b", "command_r7b"),
    ("CohereForAI/c4ai-command-r-plus", "command_r_plus", None),
)
