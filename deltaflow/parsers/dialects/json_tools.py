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

from ..drivers.json_envelope import JsonEnvelopeDriver, JsonEnvelopeFormat
from ..registry import register_tool_dialect
from ..spec import ToolDialect, DriverContext

__all__ = ("json_envelope_dialect",)


def json_envelope_dialect(
    name: str,
    spec: JsonEnvelopeFormat,
    *,
    start_openers: tuple[str, ...] = (),
    token_prefixes: tuple[str, ...] = (),
    tokenizers: tuple[str, ...] = (),
    description: str = "",
    families: tuple[str, ...] = (),
    framing: tuple[str, ...] = (),
    lead_blanks: bool = False,
    restart_after: tuple[str, ...] = (),
) -> ToolDialect:
    """Declare a JSON-envelope tool dialect.

    Args:
        name: the registry name.
        spec: the envelope declaration (opener, closer, argument fields; every
            opener of its variants opens a block too).
        start_openers: extra openers valid only at the start of a channel.
        token_prefixes: opener prefixes a real tokenizer leaves at a token boundary.
        tokenizers: reference tokenizers the prefixes were checked against.
        description: one line for ``deltaflow parsers``.
        families: model families served.
        framing: special tokens around the answer, dropped outside blocks (see
            :class:`~deltaflow.parsers.spec.ToolDialect`).
        lead_blanks: blanks right before an opener are the block's framing (see
            :class:`~deltaflow.parsers.spec.ToolDialect`).
        restart_after: markers after which start openers open a block again (see
            :class:`~deltaflow.parsers.spec.ToolDialect`).
    """

    def factory(ctx: DriverContext) -> JsonEnvelopeDriver:
        return JsonEnvelopeDriver(ctx, spec)

    return ToolDialect(
        name=name,
        openers=spec.openers(),
        markers=spec.markers(),
        start_openers=start_openers,
        factory=factory,
        token_prefixes=token_prefixes,
        tokenizers=tokenizers,
        description=description,
        families=families,
        framing=framing,
        lead_blanks=lead_blanks,
        restart_after=restart_after,
    )


HERMES = register_tool_dialect(
    json_envelope_dialect(
        "hermes",
        JsonEnvelopeFormat(open=("<tool_call>",), close="</tool_call>", args_fields=("arguments", "parameters")),
        tokenizers=("qwen3", "qwen2.5"),
        description="Hermes / Qwen2.5 / Qwen3: <tool_call>{\"name\", \"arguments\"}</tool_call>",
        families=("Hermes 2 Pro / 3", "Qwen2.5", "QwQ", "Qwen3", "Qwen3-2507"),
    )
)

INTERNLM = register_tool_dialect(
    json_envelope_dialect(
        "internlm",
        JsonEnvelopeFormat(
            open=("<|action_start|>", "<|plugin|>"),
            close="<|action_end|>",
            args_fields=("parameters", "arguments"),
        ),
        description="InternLM2/2.5/3, Intern-S1: <|action_start|><|plugin|>{\"name\", \"parameters\"}<|action_end|>",
        families=("InternLM2", "InternLM2.5", "InternLM3", "Intern-S1"),
    )
)

LLAMA3_JSON = register_tool_dialect(
    json_envelope_dialect(
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
)
