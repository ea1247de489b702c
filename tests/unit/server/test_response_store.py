"""The response stores: the ResponseStore guarantees, in memory and in SQLite (file and ``:memory:``)."""

from __future__ import annotations

import json
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
    with pytest.raises(ResponseStoreError, match=rf"schema version {SCHEMA_VERSION + 1}, written by a newer deltaflow") as exc:
        SQLiteResponseStore(newer)
    assert isinstance(exc.value, DeltaflowError)
    junk = tmp_path / "junk.sqlite3"
    junk.write_bytes(b"not a database, really not" * 100)
    with pytest.raises(ResponseStoreError, match="junk.sqlite3"):
        SQLiteResponseStore(junk)
    with pytest.raises(ResponseStoreError, match="cannot open the response store"):
        SQLiteResponseStore(tmp_path / "missing" / "r.sqlite3")


def with_items(n: int, *ids: str) -> StoredResponse:
    """``record(n)`` whose output items have the given ids (a message per id)."""
    base = record(n)
    output = [{"type": "message", "id": i, "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": f"{i} of {n}", "annotations": []}]} for i in ids]
    return StoredResponse(**{**{f: getattr(base, f) for f in base.__struct_fields__},
                             "response": {**base.response, "output": output}})


async def test_find_item_returns_an_output_item_of_a_stored_response(store: ResponseStore) -> None:
    """An output item is found by its id, with its response's id, as a copy; replaced, deleted or never
    stored, it is not; input items are not indexed (only what this server answered)."""
    find = store.find_item  # type: ignore[attr-defined]
    await store.put("resp_1", with_items(1, "msg_a", "msg_b"))
    await store.put("resp_2", with_items(2, "msg_c"))
    found = await find("msg_b")
    assert found is not None and found[0] == "resp_1" and found[1]["content"][0]["text"] == "msg_b of 1"
    found[1]["content"][0]["text"] = "changed"
    assert (await find("msg_b"))[1]["content"][0]["text"] == "msg_b of 1"
    assert (await find("msg_c"))[0] == "resp_2"
    assert await find("msg_1") is None and await find("msg_zz") is None  # an input item; an unknown id
    await store.put("resp_1", with_items(1, "msg_d"))  # replaced: its old items go
    assert await find("msg_a") is None and (await find("msg_d"))[0] == "resp_1"
    assert await store.delete("resp_2")
    assert await find("msg_c") is None


async def test_memory_store_forgets_the_items_of_what_it_evicts() -> None:
    store = MemoryResponseStore(max_responses=1)
    await store.put("resp_1", with_items(1, "msg_a"))
    await store.put("resp_2", with_items(2, "msg_b"))
    assert await store.find_item("msg_a") is None and (await store.find_item("msg_b"))[0] == "resp_2"


async def test_a_version_1_file_gains_the_item_index(tmp_path: Path) -> None:
    """A file written by the schema of version 1 (no item table) is migrated on open: its stored
    responses' output items are found, and it reads as version 2."""
    path = tmp_path / "v1.sqlite3"
    rec = with_items(7, "msg_old")
    with sqlite3.connect(path) as conn:
        conn.execute("""CREATE TABLE responses (id TEXT PRIMARY KEY, model TEXT NOT NULL, created_at INTEGER NOT NULL,
                        previous_response_id TEXT, instructions TEXT, response TEXT NOT NULL,
                        input_items TEXT NOT NULL, tools TEXT)""")
        conn.execute("INSERT INTO responses VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     ("resp_7", "m", 1, None, None, json.dumps(rec.response), json.dumps(rec.input_items), None))
        conn.execute("PRAGMA user_version=1")
    store = SQLiteResponseStore(path)
    try:
        found = await store.find_item("msg_old")
        assert found is not None and found[0] == "resp_7"
        assert (await store.get("resp_7")) is not None
    finally:
        await store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 2
