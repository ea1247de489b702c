"""Test helpers of the tokenize/injection tests: the shared data, and a minimal chat-template renderer.

:func:`render` is a stand-in for ``deltaflow.prompt.template`` (written in
parallel): the transformers environment reduced to what the shared ``hf-*``,
GLM-4.5, Kimi-K2 and MiniMax-M2 templates need (``ImmutableSandboxedEnvironment``
with ``trim_blocks``/``lstrip_blocks`` and ``loopcontrols``, ``tojson`` as
``json.dumps(ensure_ascii=False)``, ``raise_exception``, a frozen
``strftime_now``). ``test_tokenize.py`` checks that it reproduces the expected
prompts of those templates; swap it for the real renderer when that lands.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

SHARED = Path(__file__).resolve().parents[3].parent / "shared"
TOKENIZERS = SHARED / "tokenizers"
TEMPLATES = SHARED / "templates"
NO_SHARED = "../shared (tokenizers and chat-template corpus) is not beside this checkout"
RENDER_DATE = _dt.datetime(2026, 1, 15, 9, 30)

# family -> (tokenizer folder, template file of the shared corpus)
HF_FAMILIES: dict[str, tuple[str, str]] = {
    "qwen3": ("qwen3", "hf-qwen3.jinja"),
    "qwen2.5": ("qwen2.5", "hf-qwen2.5.jinja"),
    "llama3": ("llama3", "hf-llama3.jinja"),
    "deepseek-v3": ("deepseek-v3", "hf-deepseek-v3.jinja"),
}
# families with only special_tokens.json: a surrogate (cl100k text ranks + the family's markers at their ids)
SURROGATE_FAMILIES: dict[str, str] = {
    "glm-4.5": "glm_4_5.jinja",
    "kimi-k2": "moonshotai-Kimi-K2.jinja",
    "minimax-m2": "unsloth-MiniMax-M2.jinja",
}
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
CL100K_PAT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"""
)


def require_shared() -> Path:
    """The shared folder; skips the calling test when it is absent."""
    if not TOKENIZERS.is_dir() or not TEMPLATES.is_dir():
        pytest.skip(NO_SHARED)
    return SHARED


class RaisedByTemplate(TemplateError):
    """``raise_exception`` was called by the template."""


def _raise_exception(message: str) -> None:
    raise RaisedByTemplate(message)


def _tojson(
    value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False
) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


@functools.cache
def _compiled(source: str) -> Any:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = RENDER_DATE.strftime
    return env.from_string(source)


def render(
    source: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Any] | None = None,
    add_generation_prompt: bool = True,
    special_tokens: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> str:
    """Render a chat template as transformers does (for the templates of these tests)."""
    variables: dict[str, Any] = dict(special_tokens or {})
    variables.update(kwargs)
    return str(
        _compiled(source).render(
            messages=[_normalize(m) for m in messages],
            tools=tools,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **variables,
        )
    )


def _normalize(message: Mapping[str, Any]) -> dict[str, Any]:
    """transformers' message normalization: None values dropped, reasoning aliased."""
    out = {k: v for k, v in message.items() if v is not None}
    for key in ("reasoning_content", "thinking", "reasoning"):
        if key in out:
            out.setdefault("reasoning_content", out[key])
            out.setdefault("thinking", out[key])
            break
    return out


def prepare_chat(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The server-side preparation of the corpus README: arguments parsed, text parts joined, null content ''."""
    out: list[dict[str, Any]] = []
    for m in messages:
        msg = dict(m)
        content = msg.get("content")
        if isinstance(content, list):
            msg["content"] = "\n".join(p["text"] for p in content if isinstance(p, Mapping) and p.get("type") == "text")
        if msg.get("role") == "assistant" and msg.get("content") is None and msg.get("tool_calls"):
            msg["content"] = ""
        if msg.get("tool_calls"):
            calls = []
            for call in msg["tool_calls"]:
                call = dict(call)
                fn = dict(call.get("function") or {})
                if isinstance(fn.get("arguments"), str):
                    fn["arguments"] = json.loads(fn["arguments"])
                call["function"] = fn
                calls.append(call)
            msg["tool_calls"] = calls
        out.append(msg)
    return out


@functools.cache
def template_source(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8")


@functools.cache
def template_special_tokens(name: str) -> dict[str, str]:
    entries = json.loads((TEMPLATES / "templates.json").read_text(encoding="utf-8"))["templates"]
    for e in entries:
        if e["file"] == name:
            return dict(e["special_tokens"])
    raise KeyError(name)


@functools.cache
def conversations() -> dict[str, dict[str, Any]]:
    data = json.loads((TEMPLATES / "conversations.json").read_text(encoding="utf-8"))
    return {c["id"]: c for c in data}


@functools.cache
def expected_cases() -> tuple[dict[str, Any], ...]:
    with (TEMPLATES / "expected.jsonl").open(encoding="utf-8") as f:
        return tuple(json.loads(line) for line in f if line.strip())


def render_case(template: str, conversation: str, add_generation_prompt: bool, messages: Any = None) -> str:
    """Render one corpus case (optionally with other, already prepared, messages)."""
    conv = conversations()[conversation]
    chat = conv["chat"]
    return render(
        template_source(template),
        prepare_chat(chat["messages"]) if messages is None else messages,
        tools=chat.get("tools"),
        add_generation_prompt=add_generation_prompt,
        special_tokens=template_special_tokens(template),
        **conv.get("kwargs", {}),
    )


# ---------------------------------------------------------------------- tokenizers


def interesting_markers(markers: Sequence[str]) -> tuple[str, ...]:
    """The named markers of a tokenizer, and only a few of its numbered reserved ones."""
    reserved = [m for m in markers if "reserved" in m or "place▁holder" in m]
    skip = set(reserved)
    return tuple(m for m in markers if m not in skip) + tuple(reserved[:3] + reserved[-3:])


@functools.cache
def hf_prompt_tokenizer(folder: str) -> Any:
    from deltaflow.prompt.tokenize import HFPromptTokenizer

    return HFPromptTokenizer.from_file(TOKENIZERS / folder)


@functools.cache
def harmony_prompt_tokenizer() -> Any:
    from deltaflow.prompt.tokenize import TiktokenPromptTokenizer

    d = TOKENIZERS / "gpt-oss"
    return TiktokenPromptTokenizer.from_files(
        d / "o200k_base.tiktoken", d / "o200k_harmony.json", name="o200k_harmony", expected_sha256=O200K_SHA256
    )


@functools.cache
def surrogate_prompt_tokenizer(family: str) -> Any:
    """cl100k text ranks with ``family``'s added tokens at their ids (text ids are NOT the family's)."""
    from deltaflow.prompt.tokenize import TiktokenPromptTokenizer

    spec = json.loads((TOKENIZERS / family / "special_tokens.json").read_text(encoding="utf-8"))
    return TiktokenPromptTokenizer.from_files(
        TOKENIZERS / "cl100k" / "cl100k_base.tiktoken",
        pat_str=CL100K_PAT,
        special_tokens={t["content"]: t["id"] for t in spec["tokens"]},
        name=f"{family}-surrogate",
        expected_sha256=CL100K_SHA256,
    )
