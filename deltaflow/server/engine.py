"""Engines: what produces the raw model output the server parses.

An engine is any object with ``models()`` (the model ids it serves, with the
parsers each needs) and ``generate(request)`` returning an async iterator of
token chunks (``str``, token ids, or :class:`~deltaflow.TokenChunk`). The
built-in :class:`ReplayEngine` streams bundled (or a user's) transcripts,
tokenized with a real tokenizer, at a configurable rate.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import anyio

from ..items import TokenChunk
from ..tools import ToolSpec

__all__ = (
    "Engine",
    "EngineRequest",
    "FunctionEngine",
    "ModelInfo",
    "PlanningEngine",
    "ReplayEngine",
    "load_tokenizer_file",
)


@dataclass(frozen=True)
class ModelInfo:
    """A model an engine serves, and how to parse its output.

    Attributes:
        id: the model id clients ask for.
        tool_parser: the tool parser name, or None.
        reasoning_parser: the reasoning parser name, or None.
        tokenizer: decodes the engine's token ids (None when it yields text).
        description: one line for ``GET /v1/models``.
    """

    id: str
    tool_parser: str | None = None
    reasoning_parser: str | None = None
    tokenizer: Any = None
    description: str = ""


@dataclass(frozen=True)
class EngineRequest:
    """What the server hands an engine for one request.

    Attributes:
        model: the requested model id.
        protocol: ``"chat.completions"``, ``"responses"`` or ``"messages"``.
        body: the request body as sent (messages/input, sampling options...).
        tools: the validated tools, or None.
        stream: the client streams the answer (False: it waits for the whole
            body, so an engine need not pace its output).
        plan: what a planning engine's ``plan(request)`` returned for this
            request before the response started (None for other engines).
    """

    model: str
    protocol: str
    body: dict[str, Any] = field(default_factory=dict)
    tools: tuple[ToolSpec, ...] | None = None
    stream: bool = True
    plan: Any = None


class Engine(Protocol):
    """What ``deltaflow serve`` / :func:`deltaflow.server.create_app` run."""

    def models(self) -> list[ModelInfo]:
        """The models served."""
        ...

    def generate(self, request: EngineRequest) -> AsyncIterator[Any]:
        """The raw output chunks for one request."""
        ...


class PlanningEngine(Engine, Protocol):
    """An engine that decides, before the response starts, how it will answer (the gateway).

    The server calls ``plan(request)`` while it can still answer with a plain
    error: an exception there with an HTTP ``status`` attribute of 400-499
    (or a ``ValueError`` of deltaflow's) is a client error in the protocol's
    shape. The plan is handed back in ``EngineRequest.plan``; its
    ``tools_on``, ``enable_thinking`` and ``reasoning_starts_open`` attributes
    (when present) configure the response's parsers.
    """

    def plan(self, request: EngineRequest) -> Any:
        """Decide how to answer ``request`` (raises for a request it cannot serve)."""
        ...


class FunctionEngine:
    """Wraps a plain ``fn(request) -> async iterator`` as an engine serving one model."""

    def __init__(self, fn: Callable[[EngineRequest], AsyncIterator[Any]], info: ModelInfo) -> None:
        self._fn = fn
        self._info = info

    def models(self) -> list[ModelInfo]:
        return [self._info]

    def generate(self, request: EngineRequest) -> AsyncIterator[Any]:
        return self._fn(request)


def load_tokenizer_file(path: str | Path) -> Any:
    """Load a ``tokenizer.json`` (or ``.json.gz``) with HF ``tokenizers``, or a ``.tiktoken`` ranks file.

    Raises:
        ValueError: the file kind is not recognised, or its library is missing.
    """
    p = Path(path)
    name = p.name
    if name.endswith((".json", ".json.gz")):
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ValueError(
                "loading tokenizer.json needs the 'tokenizers' package (pip install deltaflow[server])"
            ) from exc
        if name.endswith(".gz"):
            with gzip.open(p, "rt", encoding="utf-8") as f:
                return Tokenizer.from_str(f.read())
        return Tokenizer.from_file(str(p))
    if name.endswith(".tiktoken"):
        try:
            import tiktoken
            from tiktoken.load import load_tiktoken_bpe
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ValueError("loading a .tiktoken file needs the 'tiktoken' package") from exc
        ranks = load_tiktoken_bpe(str(p))
        pat = (
            r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}"""
            r"""| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"""
        )
        return tiktoken.Encoding(p.stem, pat_str=pat, mergeable_ranks=ranks, special_tokens={})
    raise ValueError(f"unsupported tokenizer file {p}: expected tokenizer.json, tokenizer.json.gz or *.tiktoken")


_BUNDLED_TOKENIZERS = {"qwen3": ("tokenizers", "qwen3", "tokenizer.json.gz")}
_WORD = re.compile(r"\s*\S+|\s+")


def _bundled_tokenizer(name: str) -> Any:
    parts = _BUNDLED_TOKENIZERS.get(name)
    if parts is None:
        raise ValueError(f"unknown bundled tokenizer {name!r}; bundled: {', '.join(_BUNDLED_TOKENIZERS)}")
    ref = resources.files("deltaflow").joinpath("data", *parts)
    with resources.as_file(ref) as path:
        return load_tokenizer_file(path)


@dataclass
class _Transcript:
    info: ModelInfo
    text: str
    ids: list[int] | None


class ReplayEngine:
    """Streams transcripts: each model id is one recorded raw model output.

    Args:
        directory: a folder of ``NAME.txt`` transcripts with optional
            ``NAME.json`` beside them (``{"tool_parser", "reasoning_parser",
            "tokenizer"}``; ``tokenizer`` is a path to a tokenizer.json(.gz) or
            a .tiktoken file, or the name of a bundled tokenizer). None: the
            bundled transcripts.
        tokens_per_second: the replay rate of streaming requests (0: as fast
            as possible): a pause of ``chunk_tokens / tokens_per_second``
            seconds between two chunks (none before the first or after the
            last, which carries the finish reason). Non-streaming requests
            (``EngineRequest.stream`` False) are never paced.
        chunk_tokens: token ids per chunk.

    Raises:
        ValueError: a transcript's metadata is invalid or the folder has no transcript.
    """

    def __init__(
        self, directory: str | Path | None = None, *, tokens_per_second: float = 0.0, chunk_tokens: int = 1
    ) -> None:
        if tokens_per_second < 0:
            raise ValueError("tokens_per_second must be >= 0")
        if chunk_tokens < 1:
            raise ValueError("chunk_tokens must be >= 1")
        self.tokens_per_second = tokens_per_second
        self.chunk_tokens = chunk_tokens
        self._items: dict[str, _Transcript] = {}
        self._tokenizers: dict[str, Any] = {}
        if directory is None:
            root = resources.files("deltaflow").joinpath("data", "transcripts")
            with resources.as_file(root) as path:
                self._load_dir(Path(path), bundled=True)
        else:
            path = Path(directory)
            if not path.is_dir():
                raise ValueError(f"replay directory {path} does not exist or is not a folder")
            self._load_dir(path, bundled=False)
        if not self._items:
            raise ValueError(f"no transcripts (NAME.txt files) in {directory or 'the bundled data'}")

    def _tokenizer(self, spec: str, base: Path, bundled: bool) -> Any:
        if spec in _BUNDLED_TOKENIZERS:
            key = f"bundled:{spec}"
            if key not in self._tokenizers:
                self._tokenizers[key] = _bundled_tokenizer(spec)
            return self._tokenizers[key]
        path = Path(spec) if Path(spec).is_absolute() else base / spec
        key = str(path)
        if key not in self._tokenizers:
            self._tokenizers[key] = load_tokenizer_file(path)
        return self._tokenizers[key]

    def _load_dir(self, path: Path, *, bundled: bool) -> None:
        from ..parsers import registry

        for txt in sorted(path.glob("*.txt")):
            name = txt.stem
            meta: dict[str, Any] = {}
            meta_path = txt.with_suffix(".json")
            if meta_path.exists():
                try:
                    meta = json.loads(meta_path.read_text(encoding="utf-8"))
                except ValueError as exc:
                    raise ValueError(f"{meta_path} is not valid JSON: {exc}") from None
                if not isinstance(meta, dict):
                    raise ValueError(f"{meta_path} must hold a JSON object")
            tool_parser = meta.get("tool_parser")
            reasoning_parser = meta.get("reasoning_parser")
            try:
                if tool_parser is not None:
                    registry.get_tool_dialect(tool_parser)
                if reasoning_parser is not None:
                    registry.get_reasoning_dialect(reasoning_parser)
            except ValueError as exc:
                raise ValueError(f"{meta_path}: {exc}") from None
            tok = self._tokenizer(meta["tokenizer"], path, bundled) if meta.get("tokenizer") else None
            text = txt.read_text(encoding="utf-8")
            ids = tok.encode(text, add_special_tokens=False).ids if tok is not None and hasattr(tok, "get_vocab") else (
                tok.encode(text, disallowed_special=()) if tok is not None else None
            )
            info = ModelInfo(
                id=name,
                tool_parser=tool_parser,
                reasoning_parser=reasoning_parser,
                tokenizer=tok,
                description=str(meta.get("description", "")),
            )
            self._items[name] = _Transcript(info, text, ids)

    def models(self) -> list[ModelInfo]:
        """One model per transcript."""
        return [t.info for t in self._items.values()]

    def text(self, model: str) -> str:
        """The raw transcript of ``model``."""
        return self._items[model].text

    async def generate(self, request: EngineRequest) -> AsyncIterator[Any]:
        """Stream the transcript of ``request.model``: token ids when it has a tokenizer, else word-sized text.

        The last chunk carries the finish reason and the stream ends with it;
        streaming requests are paced between chunks (see the class docstring).
        """
        t = self._items.get(request.model)
        if t is None:
            raise KeyError(request.model)
        delay = self.chunk_tokens / self.tokens_per_second if request.stream and self.tokens_per_second else 0.0
        ids = t.ids
        step = self.chunk_tokens
        pieces: Sequence[Any] = range(0, len(ids), step) if ids is not None else _WORD.findall(t.text)
        last = len(pieces) - 1
        for k, piece in enumerate(pieces):
            if k:
                await anyio.sleep(delay)  # between two chunks (0: a checkpoint only), never after the last
            finish = "stop" if k == last else None
            if ids is not None:
                yield TokenChunk(token_ids=ids[piece : piece + step], finish_reason=finish)
            else:
                yield TokenChunk(text=piece, finish_reason=finish)
