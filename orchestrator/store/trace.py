"""The decision trace: one row per node execution and one per attempt, in the run folder.

It is also what makes resume work: a node whose finished value is here is not run again,
whether or not the response cache still holds its replies. This module writes it and
answers resume lookups; `reader.TraceReader` reads it back as `NodeRun` models.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from .disk import damaged, storage_error
from .records import WHOLE, Attempt, NodeRun

if TYPE_CHECKING:
    from .reader import TraceReader

__all__ = [
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

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
  run_id TEXT PRIMARY KEY, started REAL, graph TEXT, graph_hash TEXT, model TEXT,
  base_url TEXT, server TEXT, structured TEXT, settings BLOB, run_key TEXT
);
CREATE TABLE IF NOT EXISTS node_runs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id TEXT, example_id TEXT, node TEXT, item INTEGER, status TEXT,
  value BLOB, error TEXT, messages BLOB, raw BLOB, model TEXT, endpoint TEXT,
  cached INTEGER, prompt_tokens INTEGER, completion_tokens INTEGER, latency REAL,
  started REAL, finished REAL, graph_hash TEXT, request BLOB, schema_hash TEXT,
  run_key TEXT
);
CREATE TABLE IF NOT EXISTS schemas (hash TEXT PRIMARY KEY, schema BLOB);
CREATE INDEX IF NOT EXISTS node_runs_lookup ON node_runs (example_id, node, item);
CREATE TABLE IF NOT EXISTS attempts (
  node_run_id INTEGER, number INTEGER, kind TEXT, error TEXT, raw TEXT,
  finish_reason TEXT, latency REAL, prompt_tokens INTEGER, completion_tokens INTEGER,
  cached INTEGER, sample INTEGER, replica TEXT
);
CREATE INDEX IF NOT EXISTS attempts_node ON attempts (node_run_id);
"""

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
    and the schemas they point at."""

    runs: list[tuple[Any, ...]]
    attempts: list[tuple[Any, ...]]
    schemas: dict[str, bytes]
    first_id: int
    next_id: int


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
        self._pending_runs.append(
            (
                row_id,
                self.run_id,
                rec.example_id,
                rec.node,
                rec.item,
                rec.status,
                _dumps(rec.value),
                rec.error,
                _dumps(rec.messages),
                _dumps(raw),
                rec.model,
                rec.endpoint,
                int(rec.cached),
                rec.prompt_tokens,
                rec.completion_tokens,
                rec.latency,
                rec.started,
                rec.finished,
                self.graph_hash,
                _dumps(rec.request),
                self._schema_hash(rec.schema),
                self.run_key,
            )
        )
        self._pending_attempts.extend(
            (
                row_id,
                a.number,
                a.kind,
                a.error,
                a.raw,
                a.finish_reason,
                a.latency,
                a.prompt_tokens,
                a.completion_tokens,
                int(a.cached),
                a.sample,
                a.replica,
            )
            for a in rec.attempts
        )
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
        batch = TraceBatch(
            self._pending_runs,
            self._pending_attempts,
            self._pending_schemas,
            self._first_pending,
            self._next_id,
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
            db.executescript(_SCHEMA)
            self._add_missing_columns()
            last = db.execute("SELECT MAX(id) FROM node_runs").fetchone()[0]
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

    @classmethod
    def reader(cls, path: Path) -> TraceReader:
        """Open a trace to read only (a run may be writing it): typed node runs, no writes."""
        from .reader import TraceReader

        return TraceReader.open(path)

    def start_run(self, **fields: Any) -> None:
        settings = fields.pop("settings", None)
        try:
            self._start_run(settings, fields)
        except sqlite3.Error as exc:
            raise storage_error(self.path, exc) from exc

    def _start_run(self, settings: Any, fields: dict[str, Any]) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO runs (run_id, started, graph, graph_hash, model, base_url,"
            " server, structured, settings, run_key) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                self.run_id,
                time.time(),
                fields.get("graph"),
                self.graph_hash,
                fields.get("model"),
                fields.get("base_url"),
                fields.get("server"),
                fields.get("structured"),
                _dumps(settings),
                self.run_key,
            ),
        )

    def flush(self) -> None:
        """Write every queued record in one transaction; StorageError (DamagedRunFile for a
        file SQLite finds damaged) naming the trace when it cannot, the records kept."""
        if not self._pending_runs:
            return
        try:
            self._write_pending()
        except sqlite3.Error as exc:
            raise storage_error(self.path, exc) from exc
        self._pending_runs.clear()
        self._pending_attempts.clear()
        self._pending_schemas.clear()

    def _write_pending(self) -> None:
        self._db.execute("BEGIN")
        try:
            self._db.executemany(
                "INSERT INTO node_runs (id, run_id, example_id, node, item, status, value,"
                " error, messages, raw, model, endpoint, cached, prompt_tokens,"
                " completion_tokens, latency, started, finished, graph_hash, request,"
                " schema_hash, run_key) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                self._pending_runs,
            )
            self._db.executemany(
                "INSERT OR IGNORE INTO schemas (hash, schema) VALUES (?,?)",
                self._pending_schemas.items(),
            )
            self._db.executemany(
                "INSERT INTO attempts (node_run_id, number, kind, error, raw, finish_reason,"
                " latency, prompt_tokens, completion_tokens, cached, sample, replica)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                self._pending_attempts,
            )
            self._db.execute("COMMIT")
        except BaseException:
            # A failed write (lock held past the timeout, disk full, …) must not leave its
            # transaction open, or every later BEGIN fails; the records stay queued.
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise

    def add(self, batch: TraceBatch) -> None:
        """Queue a worker's rows (`TraceRecorder.take`) as if recorded here: its node runs
        renumbered after this store's own, so ids stay unique across workers."""
        shift = self._next_id - batch.first_id
        self._pending_runs.extend((row[0] + shift, *row[1:]) for row in batch.runs)
        self._pending_attempts.extend((row[0] + shift, *row[1:]) for row in batch.attempts)
        self._pending_schemas.update(batch.schemas)
        self._next_id += batch.next_id - batch.first_id
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

    def _add_missing_columns(self) -> None:
        """Traces written before a column existed get it (empty), so old run folders resume."""
        have = {row[1] for row in self._db.execute("PRAGMA table_info(node_runs)")}
        for column, kind in (("request", "BLOB"), ("schema_hash", "TEXT"), ("run_key", "TEXT")):
            if column not in have:
                self._db.execute(f"ALTER TABLE node_runs ADD COLUMN {column} {kind}")
        if "run_key" not in {row[1] for row in self._db.execute("PRAGMA table_info(runs)")}:
            self._db.execute("ALTER TABLE runs ADD COLUMN run_key TEXT")
        attempt_columns = {row[1] for row in self._db.execute("PRAGMA table_info(attempts)")}
        for column, kind in (("sample", "INTEGER"), ("replica", "TEXT")):
            if column not in attempt_columns:
                self._db.execute(f"ALTER TABLE attempts ADD COLUMN {column} {kind}")

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

    def _reading(self) -> TraceReader:
        """A reader over this store's own connection, with every queued record written."""
        from .reader import TraceReader

        self.flush()
        return TraceReader(self._db, self.path)

    def node_runs(
        self, example_id: str | None = None, node: str | None = None
    ) -> Iterator[dict[str, Any]]:
        """Node executions (oldest first) as plain dicts, each with its attempts: the JSON
        export of `trace --format jsonl`. Typed access is `reader.TraceReader.node_runs`."""
        for run in self._reading().node_runs(example_id, node):
            yield run.model_dump()

    def close(self) -> None:
        """Write what is queued and close; the file is closed even when the write fails."""
        try:
            self.flush()
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
