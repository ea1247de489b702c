"""Model presets: common model names -> their tool and reasoning parsers.

``ResponseParser(model="Qwen/Qwen3-8B")`` picks the parsers an inference
server would use for that model. Lookups ignore case and accept the name
with or without its organization (``"Qwen3-8B"``). Explicit
``tool_parser=`` / ``reasoning_parser=`` arguments override a preset.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from .errors import DeltaflowError

__all__ = ("Preset", "UnknownModelError", "list_presets", "resolve_model")


class UnknownModelError(DeltaflowError, ValueError):
    """A model name with no preset; the message suggests the closest names.

    Attributes:
        model: the name asked for.
        suggestions: the closest known names.
    """

    def __init__(self, model: str, suggestions: list[str]) -> None:
        self.model = model
        self.suggestions = suggestions
        hint = f"; did you mean {', '.join(repr(s) for s in suggestions)}?" if suggestions else ""
        super().__init__(
            f"no preset for model {model!r}{hint} (pass tool_parser= and reasoning_parser= explicitly, "
            "or see deltaflow.presets.list_presets())"
        )


@dataclass(frozen=True)
class Preset:
    """The parsers for one model."""

    model: str
    tool_parser: str | None
    reasoning_parser: str | None


_TABLE: tuple[tuple[str, str | None, str | None], ...] = (
    # Qwen (shared/dialects.md sections 1 and 6)
    ("Qwen/Qwen2.5-7B-Instruct", "hermes", None),
    ("Qwen/Qwen2.5-72B-Instruct", "hermes", None),
    ("Qwen/QwQ-32B", "hermes", "qwen3"),
    ("Qwen/Qwen3-0.6B", "hermes", "qwen3"),
    ("Qwen/Qwen3-1.7B", "hermes", "qwen3"),
    ("Qwen/Qwen3-4B", "hermes", "qwen3"),
    ("Qwen/Qwen3-8B", "hermes", "qwen3"),
    ("Qwen/Qwen3-14B", "hermes", "qwen3"),
    ("Qwen/Qwen3-32B", "hermes", "qwen3"),
    ("Qwen/Qwen3-30B-A3B", "hermes", "qwen3"),
    ("Qwen/Qwen3-235B-A22B", "hermes", "qwen3"),
    ("Qwen/Qwen3-30B-A3B-Instruct-2507", "hermes", None),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507", "hermes", None),
    ("Qwen/Qwen3-30B-A3B-Thinking-2507", "hermes", "qwen3"),
    ("Qwen/Qwen3-235B-A22B-Thinking-2507", "hermes", "qwen3"),
    ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3_coder", None),
    ("Qwen/Qwen3-Coder-480B-A35B-Instruct", "qwen3_coder", None),
    ("NousResearch/Hermes-3-Llama-3.1-8B", "hermes", None),
    ("NousResearch/Hermes-2-Pro-Llama-3-8B", "hermes", None),
    # InternLM (section 2)
    ("internlm/internlm2_5-7b-chat", "internlm", None),
    ("internlm/internlm3-8b-instruct", "internlm", None),
    ("internlm/Intern-S1", "internlm", "qwen3"),
    # Llama (sections 3 and 4)
    ("meta-llama/Llama-3.1-8B-Instruct", "llama3_json", None),
    ("meta-llama/Llama-3.1-70B-Instruct", "llama3_json", None),
    ("meta-llama/Llama-3.2-3B-Instruct", "llama3_json", None),
    ("meta-llama/Llama-3.3-70B-Instruct", "llama3_json", None),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama4_pythonic", None),
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct", "llama4_pythonic", None),
    # Mistral (section 5)
    ("mistralai/Mistral-7B-Instruct-v0.3", "mistral", None),
    ("mistralai/Mistral-Nemo-Instruct-2407", "mistral", None),
    ("mistralai/Mistral-Small-3.2-24B-Instruct-2506", "mistral", None),
    ("mistralai/Magistral-Small-2509", "mistral", "mistral"),
    ("mistralai/Devstral-Small-2507", "mistral", None),
    # GLM (section 7)
    ("zai-org/GLM-4.5", "glm45", "glm45"),
    ("zai-org/GLM-4.5-Air", "glm45", "glm45"),
    ("zai-org/GLM-4.6", "glm45", "glm45"),
    ("zai-org/GLM-4.7", "glm47", "glm45"),
    # DeepSeek (section 8)
    ("deepseek-ai/DeepSeek-R1", "deepseek_v3", "deepseek_r1"),
    ("deepseek-ai/DeepSeek-R1-0528", "deepseek_v3", "deepseek_r1"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", None, "deepseek_r1"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", None, "deepseek_r1"),
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", None, "deepseek_r1"),
    ("deepseek-ai/DeepSeek-V3", "deepseek_v3", None),
    ("deepseek-ai/DeepSeek-V3-0324", "deepseek_v3", None),
    ("deepseek-ai/DeepSeek-V3.1", "deepseek_v31", "deepseek_v3"),
    ("deepseek-ai/DeepSeek-V3.1-Terminus", "deepseek_v31", "deepseek_v3"),
    ("deepseek-ai/DeepSeek-V3.2-Exp", "deepseek_v32", "deepseek_v3"),
    ("deepseek-ai/DeepSeek-V3.2", "deepseek_v32", "deepseek_v3"),
    # Kimi (section 9)
    ("moonshotai/Kimi-K2-Instruct", "kimi_k2", None),
    ("moonshotai/Kimi-K2-Instruct-0905", "kimi_k2", None),
    ("moonshotai/Kimi-K2-Thinking", "kimi_k2", "kimi_k2"),
    ("moonshotai/Kimi-K3", "kimi_k3", "kimi_k3"),  # XTML sections (xtml_family)
    # MiniMax (section 10)
    ("MiniMaxAI/MiniMax-M2", "minimax_m2", "minimax_m2"),
    ("MiniMaxAI/MiniMax-M2.1", "minimax_m2", "minimax_m2"),
    # xml_more_family: MiniMax-M3 (every tag prefixed, one element per parameter), MiniCPM5
    ("MiniMaxAI/MiniMax-M3", "minimax_m3", "minimax_m3"),
    ("openbmb/MiniCPM5-1B", "minicpm5", "qwen3"),
    # gpt-oss (section 11)
    ("openai/gpt-oss-20b", "openai", "openai_gptoss"),
    ("openai/gpt-oss-120b", "openai", "openai_gptoss"),
    # Seed-OSS (section 12)
    ("ByteDance-Seed/Seed-OSS-36B-Instruct", "seed_oss", "seed_oss"),
    # more_tool_families: LFM2, OLMo 3, Step3 / Step-3.5 (section 14)
    ("LiquidAI/LFM2-1.2B", "lfm2", None),
    ("LiquidAI/LFM2-8B-A1B", "lfm2", None),
    ("allenai/Olmo-3-7B-Instruct", "olmo3", None),
    ("stepfun-ai/step3", "step3", "deepseek_r1"),
    ("stepfun-ai/Step-3.5-Flash", "step3p5", "step3p5"),
    # more_reasoning / gemma_command_family: Gemma 4, OLMo 3 Think, Granite 3.2, Nemotron 3
    ("google/gemma-4-31B-it", "gemma4", "gemma4"),
    ("google/gemma-4-26B-A4B-it", "gemma4", "gemma4"),
    ("allenai/Olmo-3-7B-Think", "olmo3", "olmo3"),
    ("allenai/Olmo-3-32B-Think", "olmo3", "olmo3"),
    ("ibm-granite/granite-3.2-8b-instruct", "granite", "granite"),
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", None, "nemotron_v3"),
    # json_array_family: JSON envelopes and JSON arrays of calls (section 14)
    ("ibm-granite/granite-3.1-8b-instruct", "granite", None),
    ("ibm-granite/granite-3.3-8b-instruct", "granite", None),
    ("ibm-granite/granite-4.0-h-small", "granite4", None),
    ("ibm-granite/granite-4.0-h-tiny", "granite4", None),
    ("ibm-granite/granite-4.0-micro", "granite4", None),
    ("ibm-granite/granite-20b-functioncalling", "granite-20b-fc", None),
    ("tencent/Hunyuan-A13B-Instruct", "hunyuan_a13b", "hunyuan_a13b"),
    ("baidu/ERNIE-4.5-21B-A3B-PT", "ernie45", None),
    ("baidu/ERNIE-4.5-21B-A3B-Thinking", "ernie45", "ernie45"),
    ("Salesforce/Llama-xLAM-2-8b-fc-r", "xlam", None),
    ("Salesforce/xLAM-2-32b-fc-r", "xlam", None),
    ("ai21labs/AI21-Jamba-Mini-1.6", "jamba", None),
    ("CohereLabs/c4ai-command-r7b-12-2024", "command_r7b", "command_r7b"),
    ("ServiceNow-AI/Apriel-1.5-15b-Thinker", "apriel", None),
    ("nvidia/NVIDIA-Nemotron-Nano-9B-v2", "nemotron", "qwen3"),
    ("microsoft/Phi-4-mini-instruct", "phi4_mini_json", None),
    ("fireworks-ai/llama-3-firefunction-v2", "firefunction_v2", None),
    ("swiss-ai/Apertus-8B-Instruct-2509", "apertus", None),
    ("meituan-longcat/LongCat-Flash-Chat", "longcat", None),
    ("ai-sage/GigaChat3-10B-A1.8B", "gigachat3", None),
    # functionary_family: protocols from llama.cpp (Functionary v3.1 and v3.2, Command R+)
    ("meetkai/functionary-medium-v3.1", "functionary_v3_1", None),
    ("meetkai/functionary-small-v3.2", "functionary_v3_2", None),
    ("CohereForAI/c4ai-command-r-plus", "command_r_plus", None),
)

_BY_KEY: dict[str, Preset] = {}
for _model, _tool, _reasoning in _TABLE:
    _p = Preset(_model, _tool, _reasoning)
    _BY_KEY[_model.lower()] = _p
    _BY_KEY.setdefault(_model.split("/", 1)[-1].lower(), _p)


def list_presets() -> tuple[Preset, ...]:
    """Every preset, in table order."""
    return tuple(Preset(m, t, r) for m, t, r in _TABLE)


def resolve_model(model: str) -> Preset:
    """Return the preset of ``model``.

    Raises:
        UnknownModelError: no preset (a ``ValueError``); the message suggests close names.
    """
    if not isinstance(model, str):
        raise TypeError(f"model must be a str, got {type(model).__name__}")
    key = model.strip().lower()
    preset = _BY_KEY.get(key) or _BY_KEY.get(key.split("/", 1)[-1])
    if preset is not None:
        return preset
    names = [m for m, _, _ in _TABLE]
    lowered = {n.lower(): n for n in names}
    close = difflib.get_close_matches(key, list(lowered), n=3, cutoff=0.5)
    if not close:
        short = {n.split("/", 1)[-1].lower(): n for n in names}
        close = [short[c] for c in difflib.get_close_matches(key.split("/", 1)[-1], list(short), n=3, cutoff=0.5)]
        raise UnknownModelError(model, close)
    raise UnknownModelError(model, [lowered[c] for c in close])
