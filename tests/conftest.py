"""Shared fixtures and the hypothesis profiles."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from deltaflow.testing import shared_dir

settings.register_profile(
    "ci", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=50, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def shared() -> Path:
    """The ``shared/`` folder (corpus, tokenizers); skips the test when it is absent."""
    root = shared_dir()
    if root is None:
        pytest.skip("../shared (conformance corpus and tokenizers) is not beside this checkout")
    return root


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module", autouse=True)
def _collect_garbage_per_module() -> Iterator[None]:
    """Collect cyclic garbage when a module ends, so that a socket or file a module left open is reported
    (warnings are errors) against that module's last test, not against whichever later test the collector
    happens to run in."""
    yield
    gc.collect()
