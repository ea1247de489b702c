"""Fixtures for the engine tests: tiny GGUF models and real llama.cpp servers.

Each family's model is written once per session into a session tmp dir
(:func:`gguf_models.write_tiny_gguf`), and each family's server is started
once and killed at the end of the session. ``llamacpp_qwen3`` is the Qwen3
server; ``llamacpp_server("llama3")`` gives another family's.

Writing a model (Python, 1-3 s) and loading it (llama.cpp, 2-5 s, most of it
building the vocabulary) take longer than the tests that use them, so at the
start of the session the families the selected tests need are prepared in
the background, two at a time: one model is written while another server loads.

Skipped, with the reason, when ``../shared`` (the tokenizers) is absent or
``xllamacpp`` / ``gguf`` are not installed (``pip install
xllamacpp==2026.10.11549 gguf==0.19.0``; nothing is downloaded at run time).
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from gguf_models import FAMILIES, write_tiny_gguf
from llamacpp import LlamaCppServer

ENGINE_PACKAGES = {
    "xllamacpp": "xllamacpp==2026.10.11549 (llama.cpp's server as a wheel)",
    "gguf": "gguf==0.19.0 (writes the tiny test models)",
}
SERVER_FIXTURES = ("llamacpp_server", "llamacpp_qwen3")


def missing_engine_packages() -> list[str]:
    """The engine packages that are not importable, as ``name: what it is for``."""
    return [f"{name}: {what}" for name, what in ENGINE_PACKAGES.items() if importlib.util.find_spec(name) is None]


class Engines:
    """The tiny models and servers of a session, one per family, each made once (thread-safe).

    Call it with a family for its running server; :meth:`model` gives just the
    model file; :meth:`prefetch` starts making some in the background;
    :meth:`close` kills every server.
    """

    def __init__(self, shared: Path, folder: Path) -> None:
        self._shared = shared
        self._folder = folder
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="engine")
        self._servers: dict[str, Future[LlamaCppServer]] = {}
        self._models: dict[str, Path] = {}
        self._model_locks = {family: threading.Lock() for family in FAMILIES}
        self._closed = False

    def _check(self, family: str) -> None:
        if family not in FAMILIES:
            raise KeyError(f"no tiny model for family {family!r}; known: {', '.join(FAMILIES)}")
        tokenizer = self._shared / "tokenizers" / FAMILIES[family].tokenizer_dir / "tokenizer.json.gz"
        if not tokenizer.is_file():
            pytest.skip(f"{tokenizer} is absent: no {family} tokenizer to build a model from")

    def _make(self, family: str) -> LlamaCppServer:
        return LlamaCppServer(self.model(family)).start()

    def _future(self, family: str) -> Future[LlamaCppServer]:
        with self._lock:
            if self._closed:
                raise RuntimeError("the session's engines are closed")
            if family not in self._servers:
                self._servers[family] = self._pool.submit(self._make, family)
            return self._servers[family]

    def prefetch(self, families: Iterable[str]) -> None:
        """Start writing and starting these families' models and servers, in this order, in the background."""
        for family in families:
            if family in FAMILIES and (self._shared / "tokenizers" / FAMILIES[family].tokenizer_dir).is_dir():
                self._future(family)

    def model(self, family: str) -> Path:
        """The family's tiny model file, written on first use (one file per family per session)."""
        self._check(family)
        with self._model_locks[family]:
            if family not in self._models:
                path = self._folder / f"tiny-{family}.gguf"
                self._models[family] = write_tiny_gguf(family, path, shared=self._shared)
            return self._models[family]

    def __call__(self, family: str) -> LlamaCppServer:
        """The family's running server (waits while it is being made; raises what making it raised)."""
        self._check(family)
        return self._future(family).result()

    def close(self) -> None:
        """Kill every server, including those still starting."""
        with self._lock:
            self._closed = True
            futures = list(self._servers.values())
        self._pool.shutdown(wait=True, cancel_futures=True)
        for future in futures:
            if future.done() and not future.cancelled() and future.exception() is None:
                future.result().stop()


def families_needed(items: Iterable[pytest.Item]) -> list[str]:
    """The families the selected tests will ask a server for, in the order they run (Qwen3 by default)."""
    out: dict[str, None] = {}
    for item in items:
        names = getattr(item, "fixturenames", ())
        if not any(f in names for f in SERVER_FIXTURES):
            continue
        callspec = getattr(item, "callspec", None)
        family = callspec.params.get("family") if callspec is not None else None
        if "llamacpp_qwen3" in names or family is None:
            out.setdefault("qwen3")
        if isinstance(family, str):
            out.setdefault(family)
    return list(out)


@pytest.fixture(scope="session")
def engine_packages() -> None:
    """Skips the test when ``xllamacpp`` or ``gguf`` is not installed."""
    missing = missing_engine_packages()
    if missing:
        pytest.skip("the llama.cpp engine tests need " + "; ".join(missing))


@pytest.fixture(scope="session")
def llamacpp_server(
    shared: Path, engine_packages: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engines]:
    """``llamacpp_server(family)``: that family's running server, made once per session, killed at its end."""
    engines = Engines(shared, tmp_path_factory.mktemp("gguf"))
    try:
        yield engines
    finally:
        engines.close()


@pytest.fixture(scope="session", autouse=True)
def _prefetch_engines(request: pytest.FixtureRequest) -> None:
    """Start the servers the selected tests need in the background, before the first of them runs."""
    needed = families_needed(request.session.items)
    if needed and not missing_engine_packages():
        engines: Engines = request.getfixturevalue("llamacpp_server")
        engines.prefetch(needed)


@pytest.fixture(scope="session")
def tiny_gguf(llamacpp_server: Engines) -> Callable[[str], Path]:
    """``tiny_gguf(family)``: the path of that family's tiny model (one file per family per session)."""
    return llamacpp_server.model


@pytest.fixture(scope="session")
def llamacpp_qwen3(llamacpp_server: Engines) -> LlamaCppServer:
    """The Qwen3 tiny model's server (the gateway's reference engine in these tests)."""
    return llamacpp_server("qwen3")


@pytest.fixture(scope="module")
def oai(gateway: str) -> Iterator[Any]:
    """The openai SDK's client on the module's ``gateway`` (its base URL), closed with its connections after it."""
    openai = pytest.importorskip("openai", reason="the openai SDK is not installed (pip install -e '.[test]')")
    with openai.OpenAI(base_url=f"{gateway}/v1", api_key="unused", max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def claude(gateway: str) -> Iterator[Any]:
    """The anthropic SDK's client on the module's ``gateway``, closed after the module."""
    anthropic = pytest.importorskip("anthropic",
                                    reason="the anthropic SDK is not installed (pip install -e '.[test]')")
    with anthropic.Anthropic(base_url=gateway, api_key="unused", max_retries=0) as client:
        yield client
