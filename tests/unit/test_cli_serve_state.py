"""``deltaflow serve --response-store [PATH]`` and ``--unsupported-tools``: the app's response store and tool policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from deltaflow.cli import DEFAULT_RESPONSE_STORE, main
from deltaflow.server.store import MemoryResponseStore, SQLiteResponseStore


def _serve(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> tuple[int, Any]:
    """Run ``deltaflow serve`` with uvicorn.run replaced; return (status, the app it would have served)."""
    import structlog
    import uvicorn

    served: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: served.update(app=app))
    monkeypatch.setattr(structlog, "configure", lambda **kwargs: None)  # keep the test process's logging as it is
    status = main(["serve", "--tokens-per-second", "0", *argv])
    app = served.get("app")
    if app is not None:  # uvicorn's lifespan would close the store at shutdown
        anyio.run(app.state.deltaflow.response_store.close)
    return status, app


def test_responses_are_kept_in_memory_by_default(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --response-store the store is the process's memory, and the banner says so."""
    status, app = _serve(monkeypatch, [])
    assert status == 0 and isinstance(app.state.deltaflow.response_store, MemoryResponseStore)
    assert "responses stored in memory" in capsys.readouterr().err
    assert app.state.deltaflow.unsupported_tools == "refuse"


def test_response_store_path_and_default_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """--response-store PATH opens that SQLite file; the flag alone opens ./deltaflow-responses.sqlite3."""
    path = tmp_path / "state.sqlite3"
    status, app = _serve(monkeypatch, ["--response-store", str(path)])
    store = app.state.deltaflow.response_store
    assert status == 0 and isinstance(store, SQLiteResponseStore) and store.path == str(path) and path.exists()
    assert f"responses stored in {path}" in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)
    status, app = _serve(monkeypatch, ["--response-store"])
    assert status == 0 and app.state.deltaflow.response_store.path == DEFAULT_RESPONSE_STORE
    assert (tmp_path / "deltaflow-responses.sqlite3").exists()


def test_an_unopenable_response_store_is_a_usage_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A path that cannot be opened exits 2, naming it, and serves nothing."""
    bad = tmp_path / "no-such-folder" / "r.sqlite3"
    status, app = _serve(monkeypatch, ["--response-store", str(bad)])
    assert status == 2 and app is None
    assert f"cannot open the response store {str(bad)!r}" in capsys.readouterr().err


def test_unsupported_tools_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    """--unsupported-tools ignore configures the app; another value is an argparse error."""
    status, app = _serve(monkeypatch, ["--unsupported-tools", "ignore"])
    assert status == 0 and app.state.deltaflow.unsupported_tools == "ignore"
    with pytest.raises(SystemExit) as exc:
        _serve(monkeypatch, ["--unsupported-tools", "drop"])
    assert exc.value.code == 2


@pytest.mark.parametrize(("argv", "tuned"), [([], True), (["--no-gc-tuning"], False)])
def test_serve_tunes_the_collector_unless_told_not_to(monkeypatch: pytest.MonkeyPatch, argv: list[str],
                                                      tuned: bool) -> None:
    """The served app tunes the process's garbage collector at startup (deltaflow.server.collector)."""
    import gc

    from deltaflow.server.collector import SERVER_GC_THRESHOLDS

    before = gc.get_threshold()
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    try:
        status, app = _serve(monkeypatch, argv)

        async def start() -> None:
            async with app.router.lifespan_context(app):
                pass

        anyio.run(start)
        assert status == 0
        assert (gc.get_threshold() == SERVER_GC_THRESHOLDS) is tuned
        assert (gc.get_freeze_count() > 0) is tuned
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
