"""The decision trace: one row per node execution and one per attempt, in the run folder.

It is also what makes resume work: a node whose finished value is here is not run again,
whether or not the response cache still holds its replies. This module writes it and
answers resume lookups; `reader.TraceReader` reads it back as `NodeRun` models.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
import uuid
from contextlib import closing, suppress
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from types import UnionType
from typing import TYPE_CHECKING, Any, Literal, Union, get_args, get_origin

import orjson
from pydantic import BaseModel

from ..errors import RunFolderError
from .disk import damaged, storage_error
from .flight import Flights, InFlight
from .records import WHOLE, Attempt, NodeRun, TraceRun

if TYPE_CHECKING:
    pass

__all__ = [
    "IN_FLIGHT_COLUMNS",
    "WHOLE",
    "Attempt",
    "NodeRecord",
    "NodeRun",
    "TraceBatch",
    "TraceRecorder",
    "TraceStore",
    "check_intact",
    "damaged",
]


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a trace table: its name, SQLite type, and whether it holds JSON."""

    name: str
    sql: str
    json: bool = False


def _sql_type(annotation: Any) -> tuple[str, bool]:
    """(SQLite type, stored as JSON) of a record field's annotation."""
    options = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) in (Union, UnionType) and len(options) == 1:
        annotation = options[0]  # `X | None`: a column that may be NULL
    if get_origin(annotation) is Literal:
        annotation = type(get_args(annotation)[0])
    if annotation in (bool, int):
        return "INTEGER", False
    if annotation is float:
        return "REAL", False
    if annotation is str:
        return "TEXT", False
    return "BLOB", True  # values, messages, requests: JSON


def _columns(model: type[BaseModel], names: tuple[str, ...]) -> tuple[Column, ...]:
    fields = model.model_fields
    return tuple(Column(name, *_sql_type(fields[name].annotation)) for name in names)


# The trace's tables, each derived once from its record: these lists drive the DDL, the
# rows the recorder queues, the migrations' column types and the reader's SELECTs.
# node_runs: the store's own columns first (row id, which run), then the node's fields;
# `raw` and `schema` last, since the recorder stores them its own way (replies kept once,
# schemas by content hash in `schemas`). `attempts` has its own table.
_NODE_STORE = ("id", "run_id", "graph_hash", "run_key")
_NODE_OWN = tuple(
    name for name in NodeRun.model_fields if name not in (*_NODE_STORE, "attempts", "raw", "schema")
)
NODE_RUN_COLUMNS: tuple[Column, ...] = (
    *_columns(NodeRun, (*_NODE_STORE, *_NODE_OWN, "raw")),
    Column("schema_hash", "TEXT"),
)
ATTEMPT_COLUMNS: tuple[Column, ...] = (
    Column("node_run_id", "INTEGER"),
    *_columns(Attempt, tuple(Attempt.model_fields)),
)
RUN_COLUMNS: tuple[Column, ...] = _columns(TraceRun, tuple(TraceRun.model_fields))
# Node runs started and not finished, as the flusher last wrote them (store/flight.py).
IN_FLIGHT_COLUMNS: tuple[Column, ...] = _columns(InFlight, tuple(InFlight.model_fields))
_TABLES = {
    "node_runs": NODE_RUN_COLUMNS,
    "attempts": ATTEMPT_COLUMNS,
    "runs": RUN_COLUMNS,
    "in_flight": IN_FLIGHT_COLUMNS,
}
_KEYS = {"node_runs": "id INTEGER PRIMARY KEY AUTOINCREMENT", "runs": "run_id TEXT PRIMARY KEY"}


def _create(table: str) -> str:
    key = _KEYS.get(table)
    body = [key] if key else []
    body += [f"{c.name} {c.sql}" for c in _TABLES[table] if not key or c.name != key.split()[0]]
    return f"CREATE TABLE IF NOT EXISTS {table} ({', '.join(body)});"


_SCHEMA = "\n".join(
    [
        *(_create(table) for table in _TABLES),
        "CREATE TABLE IF NOT EXISTS schemas (hash TEXT PRIMARY KEY, schema BLOB);",
        "CREATE INDEX IF NOT EXISTS node_runs_lookup ON node_runs (example_id, node, item);",
        "CREATE INDEX IF NOT EXISTS attempts_node ON attempts (node_run_id);",
    ]
)


def _insert(table: str) -> str:
    names = [c.name for c in _TABLES[table]]
    return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({','.join('?' * len(names))})"


_INSERT_NODE_RUN = _insert("node_runs")
_INSERT_ATTEMPT = _insert("attempts")
_INSERT_RUN = "INSERT OR REPLACE" + _insert("runs")[len("INSERT") :]
_NODE_VALUES = attrgetter(*_NODE_OWN)
_NODE_JSON = tuple(i for i, c in enumerate(NODE_RUN_COLUMNS[4:-2]) if c.json)
_ATTEMPT_VALUES = attrgetter(*(c.name for c in ATTEMPT_COLUMNS[1:]))
_INSERT_IN_FLIGHT = _insert("in_flight")


@dataclass(frozen=True, slots=True)
class Migration:
    """A numbered step from one trace layout to the next: the columns (and tables) it adds."""

    version: int
    adds: tuple[tuple[str, str], ...]  # (table, column); the type comes from the tables above
    why: str
    creates: tuple[str, ...] = ()  # whole tables, made from the tables above


# Version 1 is the first layout: node_runs without the four columns below, attempts without
# sample and replica, runs without run_key. Each step is written to `PRAGMA user_version`.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(2, (("node_runs", "request"), ("node_runs", "schema_hash")), "what was sent"),
    Migration(3, (("node_runs", "run_key"), ("runs", "run_key")), "resume under one key"),
    Migration(4, (("attempts", "sample"),), "which of n samples a reply is for"),
    Migration(5, (("attempts", "replica"),), "which replica served a request"),
    Migration(6, (), "what is in flight now", creates=("in_flight",)),
    Migration(7, (("node_runs", "abstain"),), "how sure a node with abstain: was"),
)
SCHEMA_VERSION = MIGRATIONS[-1].version


def table_columns(db: sqlite3.Connection, table: str) -> set[str]:
    """The columns a trace's table has (an old trace lacks the newer ones)."""
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def migrate(db: sqlite3.Connection, path: Path) -> int:
    """Bring a trace opened to write to the current layout; the version it had.

    A trace made before versions were recorded reads 0. A step is applied whenever a column
    it adds is missing, whatever the recorded version says, so a trace cut down by hand is
    repaired too; a version newer than this orchestrator's is refused (it might write rows
    the newer one misreads)."""
    found = int(db.execute("PRAGMA user_version").fetchone()[0])
    if found > SCHEMA_VERSION:
        raise RunFolderError(
            f"{path} has trace layout {found}, written by a newer orchestrator (this one "
            f"writes up to {SCHEMA_VERSION}): upgrade orchestrator to resume it."
        )
    # A new trace gets every table at the current layout; an old one the tables it lacks
    # (`creates` of the steps after its version), then the columns below.
    db.executescript(_SCHEMA)
    have = {table: table_columns(db, table) for table in _TABLES}
    types = {(t, c.name): c.sql for t, columns in _TABLES.items() for c in columns}
    for step in MIGRATIONS:
        for table, column in step.adds:
            if column not in have[table]:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {types[table, column]}")
                have[table].add(column)
    if found != SCHEMA_VERSION:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    return found


FLUSH_EVERY = 1000  # queued records that force a write even between the runner's flushes

# The engine and the client build these by keyword; they are the records' models.
NodeRecord = NodeRun


# Attempts whose reply a node run keeps: its raw replies are theirs, in sample order.
_ACCEPTED = ("ok", "cache")


def _accepted_raw(attempts: list[Attempt]) -> list[str | None] | None:
    """The accepted replies of these attempts in sample order; None when there are none or
    one does not say its sample (a trace written before samples were recorded)."""
    kept = [a for a in attempts if a.kind in _ACCEPTED]
    if not kept or any(a.sample is None for a in kept):
        return None
    return [a.raw for a in sorted(kept, key=lambda a: a.sample or 0)]


def restore_raw(fields: dict[str, Any]) -> None:
    """Give a node run read back (its columns, attempts as dicts) the raw replies `record`
    left to its accepted attempts."""
    if "raw" in fields or fields.get("status") != "ok":
        return
    kept = [a for a in fields.get("attempts", ()) if a.get("kind") in _ACCEPTED]
    if kept and all(a.get("sample") is not None for a in kept):
        fields["raw"] = [a.get("raw") for a in sorted(kept, key=lambda a: a["sample"])]


def _dumps(value: Any) -> bytes | None:
    return None if value is None else orjson.dumps(value, default=str)


def loads(blob: bytes | None) -> Any:
    """A stored JSON column (NULL stays None)."""
    return None if blob is None else orjson.loads(blob)


@dataclass(slots=True)
class TraceBatch:
    """Trace rows a worker queued (scale/worker.py), ready for the run folder's writer:
    node runs numbered `first_id` up to `next_id` (exclusive) by the worker, their attempts,
    the schemas they point at, and the worker's node runs in flight now (None: the same as
    in its last batch), under the recorder's `source`."""

    runs: list[tuple[Any, ...]]
    attempts: list[tuple[Any, ...]]
    schemas: dict[str, bytes]
    first_id: int
    next_id: int
    source: str = ""
    in_flight: list[tuple[Any, ...]] | None = None


class TraceRecorder:
    """Turns node executions into trace rows and queues them until `flush`. `TraceStore`
    writes them to `traces.sqlite`; a worker process (orchestrator/scale) hands them to the
    process that owns the run folder instead."""

    def __init__(
        self, run_id: str = "", graph_hash: str = "", run_key: str = "", first_id: int = 1
    ) -> None:
        self.run_id = run_id
        self.graph_hash = graph_hash
        # Resume reads only rows written under this key (a run folder refuses any other
        # key, so this is a second guard against mixing two judges' values).
        self.run_key = run_key
        # Records are written in batches (one transaction per `flush`): a commit per node
        # execution cost ~130 µs, more than the rest of our per-request work together.
        self._pending_runs: list[tuple[Any, ...]] = []
        self._pending_attempts: list[tuple[Any, ...]] = []
        self._pending_schemas: dict[str, bytes] = {}
        self._schema_ids: dict[int, tuple[dict[str, Any], str]] = {}
        self._next_id = first_id
        self._first_pending = first_id
        # Node runs started and not finished; the trace's copy is rewritten by a flush
        # after they change, never per start (a start costs a dict insert, nothing more).
        self.flights = Flights()
        self.source = uuid.uuid4().hex  # names this recorder's batches to the run's owner

    def record(self, rec: NodeRun) -> None:
        """Queue a finished node execution with its attempts; written by the next `flush`."""
        rec.finished = rec.finished or time.time()
        raw = rec.raw
        if raw is not None and rec.status == "ok" and raw == _accepted_raw(rec.attempts):
            # Each reply is kept once, in its attempt's row; `restore_raw` gives the node run
            # its list back when read. Kept here too, a reply was stored three times over
            # with its value (five 10 MB replies made a 144 MB trace).
            raw = None
        row_id = self._next_id
        self._next_id += 1
        values = list(_NODE_VALUES(rec))
        for index in _NODE_JSON:
            values[index] = _dumps(values[index])
        self._pending_runs.append(
            (
                row_id,
                self.run_id,
                self.graph_hash,
                self.run_key,
                *values,
                _dumps(raw),
                self._schema_hash(rec.schema),
            )
        )
        self._pending_attempts.extend((row_id, *_ATTEMPT_VALUES(a)) for a in rec.attempts)
        if len(self._pending_runs) >= FLUSH_EVERY:
            self.flush()

    def _schema_hash(self, schema: dict[str, Any] | None) -> str | None:
        """Schemas are stored once each; node runs point at them by content hash."""
        if schema is None:
            return None
        # Node schemas are memoised dicts, so identity is a cheap first key.
        known = self._schema_ids.get(id(schema))
        if known is not None and known[0] is schema:
            return known[1]
        # Key order is kept: it is what the server got, and with structured outputs the
        # order of `properties` is the order the model must write the fields in.
        blob = orjson.dumps(schema)
        digest = hashlib.sha256(blob).hexdigest()[:16]
        self._schema_ids[id(schema)] = (schema, digest)
        self._pending_schemas[digest] = blob
        return digest

    def flush(self) -> None:
        """Write (or hand over) what is queued."""
        raise NotImplementedError

    def finished_value(self, example_id: str, node: str, item: int = WHOLE) -> tuple[bool, Any]:
        """(found, value) of this node's finished execution in an earlier run, for resume."""
        return False, None

    def take(self) -> TraceBatch:
        """Everything queued, as one batch, and the queues emptied."""
        flights = self.flights
        in_flight = flights.rows(self.run_id) if flights.changed else None
        flights.changed = False
        batch = TraceBatch(
            self._pending_runs,
            self._pending_attempts,
            self._pending_schemas,
            self._first_pending,
            self._next_id,
            self.source,
            in_flight,
        )
        self._pending_runs, self._pending_attempts, self._pending_schemas = [], [], {}
        self._first_pending = self._next_id
        return batch


class TraceStore(TraceRecorder):
    """Writes `traces.sqlite` of one run folder and answers resume lookups from it."""

    def __init__(
        self, path: Path, run_id: str = "", graph_hash: str = "", run_key: str = ""
    ) -> None:
        self.path = path
        db: sqlite3.Connection | None = None
        try:
            db = self._db = sqlite3.connect(
                path, timeout=30, isolation_level=None, check_same_thread=False
            )
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            self.layout = migrate(db, path)  # the version found (0: before versions)
            last = db.execute("SELECT MAX(id) FROM node_runs").fetchone()[0]
            # One writer per folder: what an earlier run left in flight (it was killed) is
            # not in flight any more, and this run's node runs go in afresh.
            db.execute("DELETE FROM in_flight")
            # Nothing to resume from means no lookups at all on a fresh run.
            resumable = bool(run_key) and (
                db.execute(
                    "SELECT 1 FROM node_runs WHERE run_key=? AND status IN ('ok','skipped')"
                    " LIMIT 1",
                    (run_key,),
                ).fetchone()
                is not None
            )
        except sqlite3.DatabaseError as exc:
            if db is not None:
                db.close()
            # A file SQLite cannot open is damaged, as far as a run can tell; a disk that
            # failed (full, an I/O error) is said as such.
            raise storage_error(path, exc, writing=False) from exc
        super().__init__(run_id, graph_hash, run_key, first_id=(last or 0) + 1)
        self._resumable = resumable

    def start_run(self, **fields: Any) -> None:
        settings = fields.pop("settings", None)
        try:
            self._start_run(settings, fields)
        except sqlite3.Error as exc:
            raise storage_error(self.path, exc) from exc

    def _start_run(self, settings: Any, fields: dict[str, Any]) -> None:
        run = {
            **fields,
            "run_id": self.run_id,
            "started": time.time(),
            "graph_hash": self.graph_hash,
            "settings": _dumps(settings),
            "run_key": self.run_key,
        }
        self._db.execute(_INSERT_RUN, [run.get(column.name) for column in RUN_COLUMNS])

    def flush(self) -> None:
        """Write every queued record, and the node runs in flight when they changed, in one
        transaction; StorageError (DamagedRunFile for a file SQLite finds damaged) naming
        the trace when it cannot, the records kept."""
        flights = self.flights
        if not self._pending_runs and not flights.changed:
            return
        in_flight = flights.rows(self.run_id) if flights.changed else None
        flights.changed = False
        try:
            self._write_pending(in_flight)
        except sqlite3.Error as exc:
            flights.changed = flights.changed or in_flight is not None
            raise storage_error(self.path, exc) from exc
        self._pending_runs.clear()
        self._pending_attempts.clear()
        self._pending_schemas.clear()

    def _write_pending(self, in_flight: list[tuple[Any, ...]] | None = None) -> None:
        """One transaction: the queued records, then (when given) this run's rows of
        `in_flight` replaced by `in_flight`."""
        self._db.execute("BEGIN")
        try:
            self._db.executemany(_INSERT_NODE_RUN, self._pending_runs)
            self._db.executemany(
                "INSERT OR IGNORE INTO schemas (hash, schema) VALUES (?,?)",
                self._pending_schemas.items(),
            )
            self._db.executemany(_INSERT_ATTEMPT, self._pending_attempts)
            if in_flight is not None:
                self._db.execute("DELETE FROM in_flight WHERE run_id=?", (self.run_id,))
                self._db.executemany(_INSERT_IN_FLIGHT, in_flight)
            self._db.execute("COMMIT")
        except BaseException:
            # A failed write (lock held past the timeout, disk full, …) must not leave its
            # transaction open, or every later BEGIN fails; the records stay queued.
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise

    def add(self, batch: TraceBatch) -> None:
        """Queue a worker's rows (`TraceRecorder.take`) as if recorded here: its node runs
        renumbered after this store's own, so ids stay unique across workers; the node runs
        it has in flight written with this process's own at the next flush."""
        shift = self._next_id - batch.first_id
        self._pending_runs.extend((row[0] + shift, *row[1:]) for row in batch.runs)
        self._pending_attempts.extend((row[0] + shift, *row[1:]) for row in batch.attempts)
        self._pending_schemas.update(batch.schemas)
        self._next_id += batch.next_id - batch.first_id
        if batch.in_flight is not None:
            self.flights.adopt(batch.source, batch.in_flight)
        if len(self._pending_runs) >= FLUSH_EVERY:
            self.flush()

    def finished_values(self, example_id: str) -> dict[tuple[str, int], bytes | None]:
        """Every finished (ok or skipped) value of one example in earlier runs, by (node,
        item), as stored JSON: what a worker needs to resume the example elsewhere."""
        if not self._resumable:
            return {}
        found: dict[tuple[str, int], bytes | None] = {}
        try:
            # Oldest first, so the latest execution of a node wins, as in `finished_value`.
            for node, item, value in self._db.execute(
                "SELECT node, item, value FROM node_runs WHERE example_id=?"
                " AND status IN ('ok','skipped') AND run_key=? ORDER BY id",
                (example_id, self.run_key),
            ):
                found[node, item] = value
        except sqlite3.DatabaseError as exc:
            raise storage_error(self.path, exc, writing=False) from exc
        return found

    def finished_value(self, example_id: str, node: str, item: int = WHOLE) -> tuple[bool, Any]:
        """(found, value) of the latest ok/skipped execution of this node for this example.

        Only earlier runs are searched: this run executes each node of an example once.
        """
        if not self._resumable:
            return False, None
        try:
            row = self._db.execute(
                "SELECT status, value FROM node_runs WHERE example_id=? AND node=? AND item=?"
                " AND status IN ('ok','skipped') AND run_key=? ORDER BY id DESC LIMIT 1",
                (example_id, node, item, self.run_key),
            ).fetchone()
        except sqlite3.DatabaseError as exc:
            raise storage_error(self.path, exc, writing=False) from exc
        if row is None:
            return False, None
        return True, loads(row[1])

    def close(self) -> None:
        """Write what is queued and close; the file is closed even when the write fails.
        Nothing of a run that closes its trace is in flight any more, however it ended."""
        self.flights.clear()
        try:
            self.flush()
            # Out of WAL mode once the run is done: a reader (`report`, `trace`) opens a WAL
            # file read-only and leaves its -wal and -shm beside it, which a read-only
            # connection cannot remove. A resumed run turns WAL on again when it opens the
            # file; a reader holding it open right now keeps it in WAL (SQLITE_BUSY), which
            # is harmless.
            with suppress(sqlite3.Error):
                self._db.execute("PRAGMA journal_mode=DELETE")
        finally:
            self._db.close()


def check_intact(path: Path) -> None:
    """DamagedRunFile unless SQLite's check of every page of the trace passes: pages
    overwritten in the middle of the file open fine and fail only when a query reaches
    them, which for a resume would be after it has started."""
    try:
        with closing(sqlite3.connect(path, timeout=30)) as db:
            found = db.execute("PRAGMA quick_check(1)").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise storage_error(path, exc, writing=False) from exc
    if found != "ok":
        raise damaged(path, f"integrity check: {found}")
