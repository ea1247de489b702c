"""The response stores: the ResponseStore guarantees, in memory and in SQLite (file and ``:memory:``)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import pytest

from deltaflow.errors import DeltaflowError, StateError
from deltaflow.server.store import (
    SCHEMA_VERSION,
    MemoryResponseStore,
    ResponseStore,
    ResponseStoreError,
    SQLiteResponseStore,
    StoredResponse,
)

pytestmark = pytest.mark.anyio


def record(n: int = 0, **changes: object) -> StoredResponse:
    """A small record whose response is ``resp_{n}``, with reasoning, text and a call in its output."""
    fields: dict[str, object] = {
        "response": {
            "id": f"resp_{n}",
            "object": "response",
            "created_at": 1_700_000_000 + n,
            "status": "completed",
            "output": [
                {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "é"}]},
                {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": "{}"},
            ],
        },
        "input_items": [{"type": "message", "id": "msg_1", "role": "user", "content": [{"type": "input_text",
                                                                                      "text": "hi \u2603"}]}],
        "instructions": "Be brief.",
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        "model": "m",
        "created_at": 1_700_000_000 + n,
        "previous_response_id": None,
    }
    fields.update(changes)
    return StoredResponse(**fields)


@pytest.fixture(params=["memory", "sqlite-memory", "sqlite-file"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ResponseStore]:
    """Each implementation."""
    made: ResponseStore
    if request.param == "memory":
        made = MemoryResponseStore()
    elif request.param == "sqlite-memory":
        made = SQLiteResponseStore(":memory:")
    else:
        made = SQLiteResponseStore(tmp_path / "responses.sqlite3")
    try:
        yield made
    finally:
        await made.close()


async def test_put_get_delete(store: ResponseStore) -> None:
    """What is put is got back equal (a copy); delete says whether there was a record, and get then gives None."""
    r = record(1, previous_response_id="resp_0", tools=None, instructions=None)
    await store.put("resp_1", r)
    got = await store.get("resp_1")
    assert got == r and got is not r
    assert got is not None
    got.response["status"] = "changed"  # a copy: the store is not changed through it
    assert await store.get("resp_1") == r
    assert await store.get("resp_2") is None
    assert await store.delete("resp_1") is True
    assert await store.get("resp_1") is None
    assert await store.delete("resp_1") is False


async def test_put_replaces(store: ResponseStore) -> None:
    """A second put of an id replaces the record."""
    await store.put("resp_1", record(1))
    await store.put("resp_1", record(1, model="other"))
    got = await store.get("resp_1")
    assert got is not None and got.model == "other"


async def test_concurrent_calls(store: ResponseStore) -> None:
    """Many tasks putting and getting at once all see their own records."""
    seen: dict[int, StoredResponse | None] = {}

    async def one(n: int) -> None:
        await store.put(f"resp_{n}", record(n))
        seen[n] = await store.get(f"resp_{n}")

    async with anyio.create_task_group() as tg:
        for n in range(40):
            tg.start_soon(one, n)
    assert all(seen[n] == record(n) for n in range(40))


async def test_closed_store_refuses_calls(store: ResponseStore) -> None:
    """After close (which may be called twice) every call raises StateError."""
    await store.put("resp_1", record(1))
    await store.close()
    await store.close()
    calls: list[Callable[[], object]] = [
        lambda: store.get("resp_1"),
        lambda: store.put("resp_1", record(1)),
        lambda: store.delete("resp_1"),
    ]
    for call in calls:
        with pytest.raises(StateError, match="closed"):
            await call()


async def test_memory_store_keeps_the_newest() -> None:
    """A full memory store drops the oldest put."""
    store = MemoryResponseStore(max_responses=2)
    for n in range(3):
        await store.put(f"resp_{n}", record(n))
    assert len(store) == 2
    assert await store.get("resp_0") is None and await store.get("resp_2") is not None
    with pytest.raises(ValueError, match="max_responses must be a positive integer"):
        MemoryResponseStore(max_responses=0)


async def test_sqlite_survives_a_restart_and_is_shared(tmp_path: Path) -> None:
    """A record put by one store is read by another on the same file, open at once or after a restart."""
    path = tmp_path / "r.sqlite3"
    first = SQLiteResponseStore(path)
    second = SQLiteResponseStore(path)  # another worker on the same file
    await first.put("resp_1", record(1))
    assert await second.get("resp_1") == record(1)
    await first.close()
    await second.close()
    again = SQLiteResponseStore(path)
    assert await again.get("resp_1") == record(1)
    await again.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        columns = [row[1] for row in conn.execute("PRAGMA table_info(responses)")]
    assert columns == ["id", "model", "created_at", "previous_response_id", "instructions", "response",
                       "input_items", "tools"]


def test_sqlite_refuses_what_it_cannot_open(tmp_path: Path) -> None:
    """A newer schema, a file that is not a database, a folder that does not exist: ResponseStoreError naming it."""
    newer = tmp_path / "newer.sqlite3"
    with sqlite3.connect(newer) as conn:
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    with pytest.raises(ResponseStoreError, match=r"schema version 2, written by a newer deltaflow") as exc:
        SQLiteResponseStore(newer)
    assert isinstance(exc.value, DeltaflowError)
    junk = tmp_path / "junk.sqlite3"
    junk.write_bytes(b"not a database, really not" * 100)
    with pytest.raises(ResponseStoreError, match="junk.sqlite3"):
        SQLiteResponseStore(junk)
    with pytest.raises(ResponseStoreError, match="cannot open the response store"):
        SQLiteResponseStore(tmp_path / "missing" / "r.sqlite3")
