"""The gateway's configuration: which models, behind which upstreams, with which prompt side.

One model comes from the command line (``deltaflow serve --upstream URL
--model DIR``); several from a TOML file (``deltaflow serve --config
FILE``)::

    [[models]]
    name = "qwen3"                       # what clients ask for (default: the folder's name)
    upstream = "http://127.0.0.1:8080"   # the engine's root URL
    upstream_kind = "llamacpp"           # llamacpp | openai | sglang | ollama | tgi | chat (default: detected)
    model = "/models/Qwen3-8B"           # the folder with the chat template and tokenizer
    # chat_template = "/path/to/template.jinja"   tool_parser = "hermes"   reasoning_parser = "qwen3"
    context_length = 32768               # prompt + answer, checked before the request is sent
    max_tokens = 4096                    # the answer's limit when a request gives none
    # clamp_max_tokens = true            # lower a too-large request limit to what is left (else a 400)
    api_key_env = "UPSTREAM_KEY"         # the environment variable holding the upstream's key

A server that renders and parses itself (vLLM or SGLang with their parsers,
llama.cpp's server with ``--jinja``) can be used as it is, through its
``/v1/chat/completions`` (the passthrough: its own parser is trusted, no
deltaflow constraint applies, nothing is re-parsed); no model folder is
needed, and the keys of the prompt side (``chat_template``,
``template_name``, ``tool_parser``, ``reasoning_parser``,
``context_length``, ``clamp_max_tokens``) are refused::

    [[models]]
    name = "qwen3"                       # required without a model folder
    upstream = "http://127.0.0.1:8000"
    upstream_kind = "chat"               # never detected: give it
    max_tokens = 4096
    options = { model = "Qwen/Qwen3-8B" }  # the upstream's model name (default: name)

Validated with pydantic (unknown keys are refused, naming the key); the
upstream's key is read from the environment, never from the file, and never
appears in logs or errors. ``DELTAFLOW_UPSTREAM_API_KEY`` is the default
variable for a model that names none.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import pydantic
import structlog

from ..errors import DeltaflowError
from ..prompt.render import PromptModel
from .engine import GatewayEngine, GatewayModel
from .upstream import Upstream

__all__ = ("ConfigError", "GatewayConfig", "ModelConfig", "build_engine", "load_config")

_log = structlog.get_logger("deltaflow.gateway")

DEFAULT_KEY_ENV = "DELTAFLOW_UPSTREAM_API_KEY"

UpstreamKind = Literal["llamacpp", "openai", "sglang", "ollama", "tgi", "chat"]

PROMPT_SIDE_KEYS = ("chat_template", "template_name", "tool_parser", "reasoning_parser", "context_length",
                    "clamp_max_tokens")
"""The keys that need deltaflow to render and parse: refused for ``upstream_kind = "chat"``."""


class ConfigError(DeltaflowError, ValueError):
    """An invalid gateway configuration (the message names the file, the model and the key)."""


class ModelConfig(pydantic.BaseModel):
    """One served model (see the module docstring for each key)."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    name: str | None = None
    upstream: str
    upstream_kind: UpstreamKind | None = None
    model: str | None = None
    chat_template: str | None = None
    template_name: str | None = None
    tool_parser: str | None = None
    reasoning_parser: str | None = None
    context_length: int | None = pydantic.Field(default=None, gt=0)
    max_tokens: int | None = pydantic.Field(default=None, gt=0)
    api_key_env: str | None = None
    strict_template: bool = True
    clamp_max_tokens: bool = False
    options: dict[str, Any] = pydantic.Field(default_factory=dict)

    @pydantic.field_validator("upstream")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return v.rstrip("/")

    @pydantic.model_validator(mode="after")
    def _prompt_side(self) -> ModelConfig:
        if self.upstream_kind != "chat":
            if self.model is None:
                raise ValueError("model: the folder with the chat template and tokenizer is required (only "
                                 "upstream_kind 'chat', whose server renders prompts itself, needs none)")
            return self
        given = [k for k in PROMPT_SIDE_KEYS if getattr(self, k) not in (None, False)]
        if given:
            raise ValueError(f"{', '.join(given)}: not used with upstream_kind 'chat' (its server renders the "
                             "prompt and parses the output itself)")
        if self.name is None and self.model is None:
            raise ValueError("name: required with upstream_kind 'chat' and no model folder (the id clients use)")
        return self

    @property
    def served_name(self) -> str:
        """The model id clients use: ``name``, else the model folder's name."""
        if self.name is not None:
            return self.name
        assert self.model is not None  # checked by the validator
        return Path(self.model).resolve().name


class GatewayConfig(pydantic.BaseModel):
    """The served models, and how reasoning sent back by clients is checked.

    ``unverified_reasoning``: an Anthropic thinking block whose signature does not verify, or a
    Responses reasoning item without a valid seal, is dropped (``"drop"``, the default) or refused
    with a 400 (``"refuse"``); never rendered as the model's own thought. ``chat_reasoning``: what
    Chat's unsigned ``reasoning_content`` is (``"accept"``, the default, as vLLM; ``"drop"``,
    ``"refuse"``).
    """

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    models: list[ModelConfig] = pydantic.Field(min_length=1)
    unverified_reasoning: Literal["drop", "refuse"] = "drop"
    chat_reasoning: Literal["accept", "drop", "refuse"] = "accept"


def _describe(err: pydantic.ValidationError) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"])
        parts.append(f"{loc}: {e['msg']}")
    return "; ".join(parts)


def load_config(path: str | os.PathLike[str]) -> GatewayConfig:
    """Read a TOML gateway configuration.

    Raises:
        ConfigError: the file is missing, not TOML, or not a valid configuration.
    """
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read the gateway configuration {p}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p} is not valid TOML: {exc}") from None
    try:
        return GatewayConfig.model_validate(data)
    except pydantic.ValidationError as exc:
        raise ConfigError(f"{p}: {_describe(exc)}") from None


async def _detect_kind(url: str, api_key: str | None) -> UpstreamKind:
    from .upstream import UpstreamError
    from .upstreams import probe_llamacpp

    try:
        props = await probe_llamacpp(url, api_key=api_key)
    except UpstreamError as exc:
        raise ConfigError(
            f"cannot tell what kind of engine answers at the upstream ({exc.message}); "
            "give it: --upstream-kind llamacpp|openai|sglang|ollama|tgi|chat"
        ) from None
    if props.is_llamacpp:
        return "llamacpp"
    raise ConfigError(
        "the upstream is not llama.cpp (its /props has another shape) and no other kind can be detected; "
        "give it: --upstream-kind openai|sglang|ollama|tgi|chat"
    )


def _markers(prompt: PromptModel) -> tuple[str, ...]:
    """The texts of the model's dialects (tool openers and markers, reasoning markers) that are single
    tokens of its tokenizer: llama.cpp's ``preserved_tokens`` renders them in its output even when the
    server does not render control tokens."""
    from ..parsers import registry

    texts: list[str] = []
    if prompt.tool_parser is not None:
        d = registry.get_tool_dialect(prompt.tool_parser)
        texts += [*d.openers, *d.markers]
    if prompt.reasoning_parser is not None:
        r = registry.get_reasoning_dialect(prompt.reasoning_parser)
        texts += [r.start, r.end]
    added = set(prompt.tokenizer.added_token_texts) if prompt.tokenizer is not None else set()
    return tuple(t for t in dict.fromkeys(texts) if t and t in added)


async def _probe_llamacpp(url: str, api_key: str | None, tokenizer: Any) -> int | None:
    """llama.cpp's context per slot (None when ``/props`` cannot be read); logs whether the server
    renders control tokens (without ``--special`` only the preserved markers reach the text)."""
    from .upstream import UpstreamError
    from .upstreams import probe_llamacpp

    try:
        props = await probe_llamacpp(url, api_key=api_key, tokenizer=tokenizer)
    except UpstreamError as exc:
        _log.warning("llamacpp_props_unreadable", error=exc.message)
        return None
    if props.special_rendered is False:
        _log.info("llamacpp_control_tokens_hidden",
                  hint="the dialects' markers are sent as preserved_tokens; other control tokens stay hidden")
    return props.n_ctx


def _passthrough_model(mc: ModelConfig, where: str) -> GatewayModel:
    """A model served by a Chat Completions upstream: no template, tokenizer or parsers (none is used)."""
    from .upstreams import make_upstream

    name = mc.served_name
    key = os.environ.get(mc.api_key_env or DEFAULT_KEY_ENV) or None
    options = dict(mc.options)
    options.setdefault("model", name)
    try:
        upstream: Upstream = make_upstream("chat", mc.upstream, api_key=key, **options)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: options: {exc}") from None
    _log.info("model_ready", model=name, upstream_kind="chat", passthrough=True,
              hint="the upstream's own template and parsers are trusted; nothing is re-parsed")
    return GatewayModel(name=name, prompt=PromptModel(name, None), upstream=upstream, max_tokens=mc.max_tokens)


async def build_engine(config: GatewayConfig | Sequence[ModelConfig]) -> GatewayEngine:
    """Load every model's prompt side, build (or detect) its upstream, and return the engine.

    Raises:
        ConfigError: a model folder or parser is invalid, or an upstream's kind cannot be detected.
    """
    from .upstreams import make_upstream

    models = config.models if isinstance(config, GatewayConfig) else list(config)
    built: list[GatewayModel] = []
    for i, mc in enumerate(models):
        where = f"models[{i}]" + (f" ({mc.name})" if mc.name else "")
        if mc.upstream_kind == "chat":
            built.append(_passthrough_model(mc, where))
            continue
        assert mc.model is not None  # checked by ModelConfig
        try:
            prompt = PromptModel.from_folder(
                mc.model,
                name=mc.name,
                template_file=mc.chat_template,
                template_name=mc.template_name,
                tool_parser=mc.tool_parser,
                reasoning_parser=mc.reasoning_parser,
                strict=mc.strict_template,
            )
        except (DeltaflowError, ValueError, OSError) as exc:
            raise ConfigError(f"{where}: {exc}") from None
        key = os.environ.get(mc.api_key_env or DEFAULT_KEY_ENV) or None
        kind = mc.upstream_kind or await _detect_kind(mc.upstream, key)
        options = dict(mc.options)
        tok = getattr(prompt.tokenizer, "tokenizer", None)
        context = mc.context_length
        if kind in ("llamacpp", "openai") and tok is not None:
            options.setdefault("tokenizer", tok)  # GBNF token references for the markers
        if kind == "llamacpp" or (kind == "openai" and options.get("flavor") == "llamacpp"):
            options.setdefault("keep_tokens", _markers(prompt))
        if kind == "llamacpp":
            probed = await _probe_llamacpp(mc.upstream, key, tok)
            context = context if context is not None else probed
        try:
            upstream: Upstream = make_upstream(kind, mc.upstream, api_key=key, **options)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: options: {exc}") from None
        built.append(
            GatewayModel(
                name=prompt.name,
                prompt=prompt,
                upstream=upstream,
                context_length=context,
                max_tokens=mc.max_tokens,
                clamp_max_tokens=mc.clamp_max_tokens,
            )
        )
        if prompt.tool_parser is None and prompt.reasoning_parser is None:
            _log.warning(
                "model_without_parsers",
                model=prompt.name,
                hint="no preset matches its name; give tool_parser / reasoning_parser (--tool-parser, "
                "--reasoning-parser) or its output is served as plain content",
            )
        _log.info(
            "model_ready",
            model=prompt.name,
            upstream_kind=kind,
            tool_parser=prompt.tool_parser,
            reasoning_parser=prompt.reasoning_parser,
            tokenizer=prompt.tokenizer is not None,
        )
    if isinstance(config, GatewayConfig):
        return GatewayEngine(built, unverified_reasoning=config.unverified_reasoning,
                             chat_reasoning=config.chat_reasoning)
    return GatewayEngine(built)
