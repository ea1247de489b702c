"""The server's garbage-collector tuning (``deltaflow.server.collector``) and who turns it on."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import anyio
import pytest

from deltaflow.server import create_app
from deltaflow.server.collector import SERVER_GC_THRESHOLDS, tune_collector


@pytest.fixture
def collector() -> Iterator[None]:
    """Give the test the process's collector as CPython sets it, and put it back after."""
    before = gc.get_threshold()
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def started(app: object) -> None:
    """Run the app's lifespan: startup, then shutdown."""

    async def go() -> None:
        async with app.router.lifespan_context(app):  # type: ignore[attr-defined]
            pass

    anyio.run(go)


def test_tuning_freezes_what_is_alive_and_raises_the_thresholds(collector: None) -> None:
    alive = [[i] for i in range(100)]  # tracked objects alive at the time
    tune_collector()
    assert gc.get_threshold() == SERVER_GC_THRESHOLDS
    assert gc.get_freeze_count() >= len(alive)
    assert SERVER_GC_THRESHOLDS[0] > 700 and min(SERVER_GC_THRESHOLDS[1:]) >= 10  # less often than CPython's


@pytest.mark.parametrize("bad", [(0, 10, 10), (700, 10), (700.0, 10, 10)])
def test_bad_thresholds_are_refused(collector: None, bad: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="three positive integers"):
        tune_collector(bad)  # type: ignore[arg-type]
    assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0


def test_the_app_tunes_the_collector_at_startup_only_when_asked(collector: None) -> None:
    app = create_app()
    started(app)
    assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0  # embedded: left alone
    app = create_app(tune_gc=True)
    assert gc.get_threshold() == (700, 10, 10)  # not before startup
    started(app)
    assert gc.get_threshold() == SERVER_GC_THRESHOLDS and gc.get_freeze_count() > 0


def test_the_worker_factory_tunes_the_collector_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each worker of `uvicorn --factory deltaflow.gateway.app:create_gateway_app --workers N` is a process of
    # its own, as `deltaflow serve` is. The engine is not what this is about: a stand-in replaces its build.
    import deltaflow.gateway.app as factory
    from deltaflow.gateway.config import GatewayConfig, ModelConfig
    from deltaflow.server import ReplayEngine

    async def build(config: GatewayConfig) -> ReplayEngine:
        return ReplayEngine()

    monkeypatch.setattr(factory, "build_engine", build)
    config = GatewayConfig(models=[ModelConfig(name="m", upstream="http://127.0.0.1:9", model="Qwen/Qwen3-8B")])
    seen: list[bool] = []
    real = factory.create_app
    monkeypatch.setattr(factory, "create_app", lambda engine, **kw: seen.append(kw["tune_gc"]) or real(engine, **kw))
    factory.create_gateway_app(config)
    factory.create_gateway_app(config, tune_gc=False)
    assert seen == [True, False]
