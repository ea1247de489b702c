"""Stored Responses: what a Responses request with ``store`` keeps, and ``previous_response_id`` continues.

The server (:func:`~deltaflow.server.create_app`) puts one
:class:`StoredResponse` per completed Responses request whose ``store`` is
not false (OpenAI's default is true), and reads it back for
``GET /v1/responses/{id}``, ``GET /v1/responses/{id}/input_items``,
``DELETE /v1/responses/{id}`` and a later request's
``previous_response_id``. Everything else the server keeps is per stream,
so this is the one state replicas share, behind :class:`ResponseStore`.

What the interface guarantees (every implementation, and what the server
relies on):

* **Read after put, anywhere.** Once :meth:`ResponseStore.put` has returned,
  :meth:`~ResponseStore.get` of that id returns the record in every process
  that uses the same store (every worker and replica). The server awaits
  the put *before* it sends the final ``response.completed`` /
  ``response.incomplete`` event (or the non-streaming body), so a client
  that has seen a response can continue from it at once, whichever
  replica its next request reaches.
* **Values, not references.** ``get`` returns an equal copy (the record
  round-trips through JSON in both implementations here); changing it
  changes nothing stored.
* ``put`` of an id that exists replaces the record; ``delete`` returns
  whether a record was removed, and ``get`` returns None afterwards.
* Safe for concurrent calls from many tasks; no call blocks the event loop.
* ``close`` is idempotent; any other call after it raises
  :class:`~deltaflow.errors.StateError`.
* Optionally, ``find_item(item_id)`` returns a copy of an item of a stored
  response's ``output`` by its id (what an ``item_reference`` input item
  names; the AI SDK's Responses model sends them instead of the items it
  got), with the id of the response that holds it; a store without it
  refuses such references with a 400.

Implementations:

* :class:`MemoryResponseStore`: a dict in this process (the server's
  default): lost on restart and not shared between workers, so a
  ``previous_response_id`` only resolves on the process that answered it.
  It keeps the newest ``max_responses`` records.
* :class:`SQLiteResponseStore`: an embedded SQLite file (stdlib
  :mod:`sqlite3`, run in a worker thread with :func:`anyio.to_thread.run_sync`
  so it works under asyncio and trio alike): survives restarts, and
  several worker processes on one host can share the file (WAL journal,
  a busy timeout for concurrent writers). Not for a file shared by
  several machines over a network filesystem: SQLite's locking is not
  reliable there.

Schema (version 2, in ``PRAGMA user_version``; a file written by a newer
deltaflow is refused, not guessed at; a version 1 file gains the item index
when it is first opened)::

    CREATE TABLE responses (
        id                   TEXT PRIMARY KEY,    -- resp_...
        model                TEXT NOT NULL,
        created_at           INTEGER NOT NULL,    -- seconds since the epoch (the response's created_at)
        previous_response_id TEXT,
        instructions         TEXT,
        response             TEXT NOT NULL,       -- JSON: the response object as sent
        input_items          TEXT NOT NULL,       -- JSON: the whole input, in item form
        tools                TEXT                 -- JSON: the request's tools, or NULL
    );
    CREATE INDEX responses_created_at ON responses (created_at);
    CREATE TABLE response_items (                 -- the output items by id, for item_reference
        item_id     TEXT PRIMARY KEY,             -- msg_..., rs_..., fc_...
        response_id TEXT NOT NULL                 -- the response whose output holds it
    );
    CREATE INDEX response_items_response ON response_items (response_id);

Rows stay until deleted; ``created_at`` is indexed so an operator can
expire them (``DELETE FROM responses WHERE created_at < ?``).

Each record holds the whole input its response answered (a continued
request's input is the previous input, the previous output and the new
input), so a continuation costs one ``get`` and a record never depends on
another one still being stored; the price is storage that grows with the
square of a long chain's length.

Several replicas on several machines: the next implementation to add is
**PostgreSQL** (through asyncpg): one row per response in the same
columns, the JSON ones as ``JSONB`` (queryable by operators), plus an
``expires_at`` column with an index, purged by a periodic ``DELETE``.
Each ``put`` is one ``INSERT ... ON CONFLICT (id) DO UPDATE`` committed
before it returns, which gives the read-after-put guarantee above across
replicas under PostgreSQL's default isolation; it is durable, and it
already is the database most deployments run. **Redis** (``SET`` with an
expiry) fits only when stored responses may be lost: it evicts under
memory pressure, and a client continuing from an evicted id gets a 400.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import anyio
import msgspec

from ..errors import DeltaflowError, StateError

__all__ = (
    "SCHEMA_VERSION",
    "MemoryResponseStore",
    "ResponseStore",
    "ResponseStoreError",
    "SQLiteResponseStore",
    "StoredResponse",
)

SCHEMA_VERSION = 2
"""The version of the SQLite schema this module writes (``PRAGMA user_version``)."""

_T = TypeVar("_T")


class ResponseStoreError(DeltaflowError):
    """The response store cannot be opened, read or written (a bad path, not a database, a newer schema)."""


class StoredResponse(msgspec.Struct, frozen=True, kw_only=True):
    """One stored Responses request and its answer.

    Attributes:
        response: the response object as sent to the client (the non-streaming
            body, or what the stream's final event carried).
        input_items: the whole input it answered, in item form, each with an
            ``id`` (a string input is one user ``message`` item; a continued
            request's input starts with the previous input and output).
        instructions: the request's ``instructions`` (not inherited by a
            continuation: OpenAI's rule).
        tools: the request's ``tools`` as sent (None: none).
        model: the model id.
        created_at: the response's ``created_at`` (seconds since the epoch).
        previous_response_id: the response this one continued, or None.
    """

    response: dict[str, Any]
    input_items: list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    model: str
    created_at: int
    previous_response_id: str | None = None


class ResponseStore(Protocol):
    """Where stored responses live (see the module docstring for what every implementation guarantees)."""

    async def put(self, response_id: str, record: StoredResponse) -> None:
        """Store ``record`` under ``response_id`` (replacing one stored there)."""
        ...

    async def get(self, response_id: str) -> StoredResponse | None:
        """The record stored under ``response_id``, or None."""
        ...

    async def delete(self, response_id: str) -> bool:
        """Remove the record; whether there was one."""
        ...

    async def close(self) -> None:
        """Release the store's resources (idempotent)."""
        ...


_encode = msgspec.json.Encoder().encode
_decode_record = msgspec.json.Decoder(StoredResponse).decode


class MemoryResponseStore:
    """Stored responses in this process's memory (lost on restart; not shared between workers).

    Records are kept as JSON, so what ``get`` returns is a copy and a record
    that cannot be encoded fails at ``put``, as it would in SQLite.

    Args:
        max_responses: how many records to keep; beyond it the oldest put
            goes (None: no limit, memory grows with every stored response).

    Raises:
        ValueError: ``max_responses`` is not positive.
    """

    def __init__(self, max_responses: int | None = 10_000) -> None:
        if max_responses is not None and max_responses < 1:
            raise ValueError(f"max_responses must be a positive integer or None, got {max_responses!r}")
        self._max = max_responses
        self._records: OrderedDict[str, bytes] = OrderedDict()
        self._items: dict[str, str] = {}  # output item id -> the response holding it
        self._closed = False

    def __len__(self) -> int:
        return len(self._records)

    def _check(self) -> None:
        if self._closed:
            raise StateError("the response store is closed")

    async def put(self, response_id: str, record: StoredResponse) -> None:
        """Store ``record`` (the oldest record goes when the store is full)."""
        self._check()
        self._unindex(response_id)
        self._records[response_id] = _encode(record)
        self._records.move_to_end(response_id)
        for item_id in _output_ids(record.response):
            self._items.setdefault(item_id, response_id)
        if self._max is not None:
            while len(self._records) > self._max:
                oldest, _ = self._records.popitem(last=False)
                self._unindex(oldest)

    def _unindex(self, response_id: str) -> None:
        raw = self._records.get(response_id)
        if raw is not None:
            for item_id in _output_ids(_decode_record(raw).response):
                if self._items.get(item_id) == response_id:
                    del self._items[item_id]

    async def get(self, response_id: str) -> StoredResponse | None:
        """A copy of the record, or None."""
        self._check()
        raw = self._records.get(response_id)
        return _decode_record(raw) if raw is not None else None

    async def find_item(self, item_id: str) -> tuple[str, dict[str, Any]] | None:
        """The id of the response whose output holds ``item_id``, and a copy of that item; or None."""
        self._check()
        response_id = self._items.get(item_id)
        raw = self._records.get(response_id) if response_id is not None else None
        if response_id is None or raw is None:
            return None
        item = _output_item(_decode_record(raw).response, item_id)
        return (response_id, item) if item is not None else None

    async def delete(self, response_id: str) -> bool:
        """Remove the record; whether there was one."""
        self._check()
        self._unindex(response_id)
        return self._records.pop(response_id, None) is not None

    async def close(self) -> None:
        """Drop every record; later calls raise :class:`~deltaflow.errors.StateError`."""
        self._records.clear()
        self._items.clear()
        self._closed = True


def _output_ids(response: dict[str, Any]) -> list[str]:
    """The ids of a response's output items."""
    output = response.get("output")
    if not isinstance(output, list):
        return []
    return [i["id"] for i in output if isinstance(i, dict) and isinstance(i.get("id"), str)]


def _output_item(response: dict[str, Any], item_id: str) -> dict[str, Any] | None:
    output = response.get("output")
    for item in output if isinstance(output, list) else ():
        if isinstance(item, dict) and item.get("id") == item_id:
            return item
    return None


_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS responses (
        id TEXT PRIMARY KEY,
        model TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        previous_response_id TEXT,
        instructions TEXT,
        response TEXT NOT NULL,
        input_items TEXT NOT NULL,
        tools TEXT
    )""",
    "CREATE INDEX IF NOT EXISTS responses_created_at ON responses (created_at)",
    "CREATE TABLE IF NOT EXISTS response_items (item_id TEXT PRIMARY KEY, response_id TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS response_items_response ON response_items (response_id)",
)
_INDEX = "INSERT OR IGNORE INTO response_items (item_id, response_id) VALUES (?, ?)"
_UNINDEX = "DELETE FROM response_items WHERE response_id = ?"
_FIND = (
    "SELECT r.id, r.response FROM response_items i JOIN responses r ON r.id = i.response_id WHERE i.item_id = ?"
)
_PUT = (
    "INSERT OR REPLACE INTO responses "
    "(id, model, created_at, previous_response_id, instructions, response, input_items, tools) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_GET = (
    "SELECT model, created_at, previous_response_id, instructions, response, input_items, tools "
    "FROM responses WHERE id = ?"
)
_decode_object = msgspec.json.Decoder(dict[str, Any]).decode
_decode_items = msgspec.json.Decoder(list[dict[str, Any]]).decode


class SQLiteResponseStore:
    """Stored responses in an SQLite file (see the module docstring: schema, sharing, guarantees).

    The file and its table are created on first open. Calls run on worker
    threads, one at a time per store (one connection behind a lock); other
    processes on the same file are serialized by SQLite itself.

    Args:
        path: the database file, or ``":memory:"`` (a private in-memory
            database, for tests).
        busy_timeout: seconds a write waits for another process's write to
            finish before failing.

    Raises:
        ResponseStoreError: the file cannot be opened or created, is not an
            SQLite database, or was written by a newer deltaflow (schema
            version above :data:`SCHEMA_VERSION`).
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 5.0) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        try:
            # isolation_level=None: autocommit; the schema step opens its own transaction.
            conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None,
                                   timeout=busy_timeout)
        except sqlite3.Error as exc:
            raise ResponseStoreError(f"cannot open the response store {self.path!r}: {exc}") from exc
        try:
            self._setup(conn)
        except BaseException:
            conn.close()
            raise
        self._conn: sqlite3.Connection | None = conn

    def _setup(self, conn: sqlite3.Connection) -> None:
        try:
            conn.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
            conn.execute("PRAGMA synchronous=NORMAL")  # durable across a crash of the process; WAL keeps it consistent
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise ResponseStoreError(
                    f"the response store {self.path!r} has schema version {version}, written by a newer deltaflow; "
                    f"this one reads version {SCHEMA_VERSION}: upgrade deltaflow or use another file"
                )
            if version < SCHEMA_VERSION:
                conn.execute("BEGIN IMMEDIATE")  # one process creates the schema; the others wait, then see it
                try:
                    for statement in _SCHEMA:
                        conn.execute(statement)
                    if version == 1:  # index the output items of the responses stored before
                        for rid, response in conn.execute("SELECT id, response FROM responses").fetchall():
                            conn.executemany(_INDEX, [(i, rid) for i in _output_ids(_decode_object(response))])
                    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
        except sqlite3.Error as exc:
            raise ResponseStoreError(f"cannot open the response store {self.path!r}: {exc}") from exc

    async def _run(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        def call() -> _T:
            with self._lock:
                conn = self._conn
                if conn is None:
                    raise StateError("the response store is closed")
                try:
                    return fn(conn)
                except sqlite3.Error as exc:
                    raise ResponseStoreError(f"the response store {self.path!r} failed: {exc}") from exc

        return await anyio.to_thread.run_sync(call)

    async def put(self, response_id: str, record: StoredResponse) -> None:
        """Store ``record`` (committed when this returns).

        Raises:
            ResponseStoreError: the write failed (e.g. the disk is full).
            StateError: the store is closed.
        """
        tools = _encode(record.tools).decode() if record.tools is not None else None
        row = (
            response_id,
            record.model,
            record.created_at,
            record.previous_response_id,
            record.instructions,
            _encode(record.response).decode(),
            _encode(record.input_items).decode(),
            tools,
        )
        index = [(item_id, response_id) for item_id in _output_ids(record.response)]

        def put(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(_PUT, row)
                conn.execute(_UNINDEX, (response_id,))
                conn.executemany(_INDEX, index)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

        await self._run(put)

    async def get(self, response_id: str) -> StoredResponse | None:
        """The record, or None.

        Raises:
            ResponseStoreError: the read failed.
            StateError: the store is closed.
        """
        row = await self._run(lambda conn: conn.execute(_GET, (response_id,)).fetchone())
        if row is None:
            return None
        model, created_at, previous, instructions, response, items, tools = row
        return StoredResponse(
            response=_decode_object(response),
            input_items=_decode_items(items),
            instructions=instructions,
            tools=_decode_items(tools) if tools is not None else None,
            model=model,
            created_at=created_at,
            previous_response_id=previous,
        )

    async def delete(self, response_id: str) -> bool:
        """Remove the record; whether there was one.

        Raises:
            ResponseStoreError: the write failed.
            StateError: the store is closed.
        """
        def delete(conn: sqlite3.Connection) -> int:
            conn.execute("BEGIN IMMEDIATE")
            try:
                removed = conn.execute("DELETE FROM responses WHERE id = ?", (response_id,)).rowcount
                conn.execute(_UNINDEX, (response_id,))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return int(removed)

        return await self._run(delete) > 0

    async def find_item(self, item_id: str) -> tuple[str, dict[str, Any]] | None:
        """The id of the response whose output holds ``item_id``, and that item; or None.

        Raises:
            ResponseStoreError: the read failed.
            StateError: the store is closed.
        """
        row = await self._run(lambda conn: conn.execute(_FIND, (item_id,)).fetchone())
        if row is None:
            return None
        item = _output_item(_decode_object(row[1]), item_id)
        return (row[0], item) if item is not None else None

    async def close(self) -> None:
        """Close the connection (idempotent; waits for a call in progress)."""

        def close() -> None:
            with self._lock:
                conn, self._conn = self._conn, None
                if conn is not None:
                    conn.close()

        await anyio.to_thread.run_sync(close)
