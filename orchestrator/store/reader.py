"""One reader of a run folder: its manifest, summary, result lines, inputs, snapshot and
trace, each as the typed record it was written as (records.py).

`trace`, `report`, `meta-eval`, `distill` and `RunResult` read a run through `RunReader`,
so a field is parsed in one place; a run may still be writing the folder while it is read.
A read the disk fails is a StorageError naming the file, a file SQLite cannot read a
DamagedRunFile (disk.py).
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Generator, Iterator
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson
from pydantic import ValidationError

from ..errors import RunFolderError
from .disk import damaged, storage_error
from .flight import InFlight
from .folder import (
    INPUTS,
    MANIFEST,
    RESULTS,
    SUMMARY,
    TRACES,
    check_layout,
    iter_lines,
    manifest_problem,
    read_json,
    result_lines,
    snapshot_graph,
    snapshot_prompts,
)
from .records import (
    ATTEMPT_KINDS,
    InputLine,
    Manifest,
    NodeRun,
    NodeServer,
    ResultLine,
    Summary,
    TraceRun,
    first_problem,
)
from .trace import (
    ATTEMPT_COLUMNS,
    IN_FLIGHT_COLUMNS,
    NODE_RUN_COLUMNS,
    RUN_COLUMNS,
    Column,
    loads,
    restore_raw,
    table_columns,
)

log = logging.getLogger(__name__)


def folder_writable(folder: Path) -> bool:
    """Whether files can be made in `folder` (False on a read-only mount, even for root)."""
    return os.access(folder, os.W_OK)


def open_read_only(path: Path) -> sqlite3.Connection:
    """A SQLite file of a run folder opened to read only, whether or not its folder can be
    written; DatabaseError when it cannot be read.

    A WAL-mode file (the trace) needs its -shm index, which SQLite makes next to it even
    for a read-only connection. On a read-only folder a run that finished has left none, so
    the file is opened `immutable`: SQLite then takes no lock and ignores any -wal file,
    which is safe only because nothing can write there. Where the folder can be written,
    `mode=ro` is kept: a run may be writing the file, and its -wal holds what it wrote last.
    """
    uri = path.resolve().as_uri()
    try:
        db = _connect(f"{uri}?mode=ro")
        try:
            db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone()
        except BaseException:
            db.close()
            raise
        return db
    except sqlite3.OperationalError:
        if folder_writable(path.parent):
            raise
    wal = path.with_name(path.name + "-wal")
    if wal.is_file() and wal.stat().st_size:
        log.warning(
            "%s holds writes a run did not merge into %s; the folder is read-only, so they "
            "are not read.",
            wal,
            path.name,
        )
    db = _connect(f"{uri}?mode=ro&immutable=1")
    db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone()
    return db


def _connect(uri: str) -> sqlite3.Connection:
    return sqlite3.connect(uri, uri=True, timeout=30, isolation_level=None, check_same_thread=False)


def _batched(cursor: sqlite3.Cursor, size: int = 500) -> Iterator[Any]:
    """A query's rows a few hundred at a time, never all at once."""
    while batch := cursor.fetchmany(size):
        yield from batch


class TraceReader:
    """traces.sqlite read back as `NodeRun` models (with their `Attempt`s and schema)."""

    def __init__(self, db: sqlite3.Connection, path: Path, owned: bool = False) -> None:
        self._db = db
        self.path = path
        self._owned = owned  # closed with the reader (a writer's own connection is not)
        self._present: dict[str, tuple[Column, ...]] = {}

    @classmethod
    def open(cls, path: Path) -> TraceReader:
        """Open read-only (a run may be writing it): no schema changes, no lock taken beyond
        SQLite's readers'."""
        try:
            if not path.is_file():
                raise damaged(path, FileNotFoundError("no such file"))
            db = open_read_only(path)
        except (sqlite3.DatabaseError, OSError) as exc:
            raise storage_error(path, exc, writing=False) from exc
        try:
            db.execute("SELECT 1 FROM node_runs LIMIT 1").fetchone()
        except sqlite3.DatabaseError as exc:
            db.close()
            raise storage_error(path, exc, writing=False) from exc
        return cls(db, path, owned=True)

    def __enter__(self) -> TraceReader:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def node_runs(
        self, example_id: str | None = None, node: str | None = None, after: int = 0
    ) -> Generator[NodeRun, None, None]:
        """Node executions, oldest first (an earlier run's before a resumed one's); `after`:
        only those written after the node run of that id (a reader following a run)."""
        try:
            yield from self._node_runs(example_id, node, after)
        except sqlite3.DatabaseError as exc:
            # Damaged pages open fine and fail only when a query reaches them.
            raise storage_error(self.path, exc, writing=False) from exc

    def _node_runs(self, example_id: str | None, node: str | None, after: int) -> Iterator[NodeRun]:
        present = self._columns("node_runs", NODE_RUN_COLUMNS)
        json_columns = [c.name for c in present if c.json]
        sql = f"SELECT {', '.join(c.name for c in present)} FROM node_runs WHERE id > ?"
        args: list[Any] = [after]
        if example_id is not None:
            sql += " AND example_id=?"
            args.append(example_id)
        if node is not None:
            sql += " AND node=?"
            args.append(node)
        cursor = self._db.execute(sql + " ORDER BY id", args)
        columns = [c[0] for c in cursor.description]
        schemas: dict[str | None, dict[str, Any] | None] = {}
        # Streamed in batches: a whole trace can hold millions of node runs.
        for row in _batched(cursor):
            # NULL means "not recorded" (columns a layout-1 trace lacks read the same way).
            fields = {k: v for k, v in zip(columns, row, strict=True) if v is not None}
            for key in json_columns:
                if key in fields:
                    fields[key] = loads(fields[key])
            digest = fields.pop("schema_hash", None)
            if digest not in schemas:
                schemas[digest] = self.schema(digest)
            fields["schema"] = schemas[digest]
            att = self._db.execute(self._attempt_sql, (fields["id"],))
            names = [c[0] for c in att.description]
            fields["attempts"] = [
                {k: v for k, v in zip(names, a, strict=True) if v is not None}
                for a in att.fetchall()
            ]
            restore_raw(fields)
            yield self._validated(fields)

    def _columns(self, table: str, columns: tuple[Column, ...]) -> tuple[Column, ...]:
        """The columns of `table` this trace has, in the record's order: it is opened
        read-only, so an old one is not migrated and its missing columns read as not
        recorded (a newer one's extra columns are not read)."""
        if table not in self._present:
            have = table_columns(self._db, table)
            self._present[table] = tuple(c for c in columns if c.name in have)
        return self._present[table]

    @cached_property
    def _attempt_sql(self) -> str:
        """The attempts SELECT over the columns this trace has (without the node run's id)."""
        names = [c.name for c in self._columns("attempts", ATTEMPT_COLUMNS)[1:]]
        return f"SELECT {', '.join(names)} FROM attempts WHERE node_run_id=? ORDER BY number"

    def _validated(self, fields: dict[str, Any]) -> NodeRun:
        try:
            return NodeRun.model_validate(fields)
        except ValidationError as exc:
            where = f"{self.path}: node run {fields.get('id')} ({fields.get('node')})"
            kinds = {a.get("kind") for a in fields["attempts"]} - set(ATTEMPT_KINDS)
            if kinds:
                # A kind this version never writes: refuse rather than show it as something else.
                raise RunFolderError(
                    f"{where} has an attempt of kind {sorted(map(str, kinds))[0]!r}, which this "
                    f"orchestrator does not know ({', '.join(ATTEMPT_KINDS)}): the trace was "
                    "written by a newer orchestrator or edited by hand; upgrade to read it."
                ) from None
            raise RunFolderError(f"{where} cannot be read: {first_problem(exc)}") from None

    def node_servers(self) -> list[NodeServer]:
        """Each LLM node's model and server, as its node runs recorded them (one entry per
        node, model and server it used), in the order they first ran."""
        if not {"model", "endpoint"} <= {
            c.name for c in self._columns("node_runs", NODE_RUN_COLUMNS)
        }:
            return []  # a trace older than these columns
        sql = (
            "SELECT node, model, endpoint, COUNT(*) FROM node_runs WHERE model IS NOT NULL "
            "AND endpoint IS NOT NULL GROUP BY node, model, endpoint ORDER BY MIN(id)"
        )
        try:
            rows = self._db.execute(sql).fetchall()
        except sqlite3.DatabaseError as exc:
            raise storage_error(self.path, exc, writing=False) from exc
        return [NodeServer(str(n), str(m), str(e), int(c)) for n, m, e, c in rows]

    def example_ids(self) -> list[str]:
        """The ids of the examples with a recorded node execution, each where it first ran."""
        sql = "SELECT example_id FROM node_runs GROUP BY example_id ORDER BY MIN(id)"
        try:
            return [str(row[0]) for row in self._db.execute(sql)]
        except sqlite3.DatabaseError as exc:
            raise storage_error(self.path, exc, writing=False) from exc

    def first_example(self) -> str | None:
        """The id of the first example with a recorded node execution, if any."""
        sql = "SELECT example_id FROM node_runs ORDER BY id LIMIT 1"
        try:
            row = self._db.execute(sql).fetchone()
        except sqlite3.DatabaseError as exc:
            raise storage_error(self.path, exc, writing=False) from exc
        return None if row is None else str(row[0])

    def schema(self, digest: str | None) -> dict[str, Any] | None:
        """A stored JSON schema by the hash a node run points at."""
        if digest is None:
            return None
        row = self._db.execute("SELECT schema FROM schemas WHERE hash=?", (digest,)).fetchone()
        return loads(row[0]) if row else None

    def runs(self) -> list[TraceRun]:
        """Every run that wrote this trace, oldest first."""
        try:
            present = self._columns("runs", RUN_COLUMNS)
            names = ", ".join(c.name for c in present)
            rows = self._db.execute(f"SELECT {names} FROM runs ORDER BY started").fetchall()
        except sqlite3.DatabaseError as exc:
            raise storage_error(self.path, exc, writing=False) from exc
        return [TraceRun.model_validate(_fields(present, row)) for row in rows]

    def in_flight(self) -> list[InFlight]:
        """The node runs the writing run had in flight at its last flush, oldest first
        (none in a trace made before they were recorded, layout 5 and older). Whether that
        run is still live is the run lock's to say (lock.holder_alive), not the trace's."""
        try:
            if "in_flight" not in self._tables():
                return []
            names = ", ".join(c.name for c in IN_FLIGHT_COLUMNS)
            rows = self._db.execute(f"SELECT {names} FROM in_flight ORDER BY started").fetchall()
        except sqlite3.DatabaseError as exc:
            raise storage_error(self.path, exc, writing=False) from exc
        found = []
        for row in rows:
            try:
                found.append(InFlight.model_validate(_fields(IN_FLIGHT_COLUMNS, row)))
            except ValidationError as exc:
                raise RunFolderError(
                    f"{self.path}: a node run in flight cannot be read: {first_problem(exc)}"
                ) from None
        return found

    def _tables(self) -> set[str]:
        rows = self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")
        return {row[0] for row in rows}

    def close(self) -> None:
        if self._owned:
            self._db.close()


class RunReader:
    """A run folder read as typed records; safe while a run is writing it.

    Missing or unreadable manifest/summary files are notes (an interrupted run has none),
    a folder of a newer layout is refused, and layout-1 folders (no snapshot, no inputs,
    a trace without run keys) read with those parts empty.
    """

    def __init__(self, folder: Path | str) -> None:
        self.path = Path(folder)
        self.notes: list[str] = []  # what could not be read, for a reader to show

    @property
    def traces_path(self) -> Path:
        return self.path / TRACES

    @property
    def has_trace(self) -> bool:
        return self.traces_path.is_file()

    @property
    def has_results(self) -> bool:
        return (self.path / RESULTS).is_file()

    @property
    def has_manifest(self) -> bool:
        return (self.path / MANIFEST).is_file()

    def _json(self, name: str) -> dict[str, Any] | None:
        path = self.path / name
        if not path.is_file():
            self.notes.append(f"{name} is missing (the run may still be going or was interrupted)")
            return None
        try:
            data = read_json(path)
        except (OSError, orjson.JSONDecodeError) as exc:
            self.notes.append(f"{name} is not valid JSON ({exc})")
            return None
        if not isinstance(data, dict):
            self.notes.append(f"{name} is not a JSON object")
            return None
        return data

    @cached_property
    def manifest(self) -> Manifest:
        """manifest.json (empty defaults when missing or unreadable: see `notes`)."""
        data = self._json(MANIFEST)
        if data is None:
            return Manifest()
        check_layout(data, self.path)
        problem = manifest_problem(data)
        if problem is not None:
            self.notes.append(f"{MANIFEST} {problem}: it is not a run manifest")
        try:
            return Manifest.from_disk(data)
        except ValidationError as exc:
            self.notes.append(f"{MANIFEST} does not match this orchestrator's manifest ({exc})")
            return Manifest()

    @property
    def layout_version(self) -> int:
        return self.manifest.layout_version

    @cached_property
    def summary(self) -> Summary | None:
        """summary.json, None when the run has not written one (or it cannot be read)."""
        data = self._json(SUMMARY)
        if data is None:
            return None
        try:
            return Summary.model_validate(data)
        except ValidationError as exc:
            self.notes.append(f"{SUMMARY} does not match this orchestrator's summary ({exc})")
            return None

    def results(self) -> Iterator[ResultLine]:
        """Every result line in file order (a resumed run's later line for an id follows)."""
        return result_lines(self.path / RESULTS)

    def latest_results(self) -> list[ResultLine]:
        """One line per example, the latest (a resumed run's line replaces the earlier one)."""
        by_id: dict[str, ResultLine] = {}
        for line in self.results():
            by_id[line.id] = line
        return list(by_id.values())

    def inputs(self) -> Iterator[InputLine]:
        """Each example's inputs as the run read them (layout 2), once per id (a folder
        written before that was so may repeat an id: the later line wins)."""
        for _, line in iter_lines(self.path / INPUTS, torn_inside=True):
            yield InputLine.model_validate(line)

    @property
    def has_inputs(self) -> bool:
        return (self.path / INPUTS).is_file()

    @property
    def snapshot_graph(self) -> Path | None:
        """The graph file the run used (None for a folder made before snapshots)."""
        return snapshot_graph(self.path)

    @property
    def snapshot_prompts(self) -> Path:
        return snapshot_prompts(self.path)

    def trace(self) -> TraceReader:
        """The trace, open to read (close it, or use it as a context manager)."""
        return TraceReader.open(self.traces_path)

    def node_runs(self, example: str | None = None, node: str | None = None) -> Iterator[NodeRun]:
        """Node executions of the whole run, or of one example and/or node, oldest first."""
        if not self.has_trace:
            return
        with self.trace() as trace:
            yield from trace.node_runs(example, node)

    def runs(self) -> list[TraceRun]:
        """The runs recorded in the trace (one per start or resume), oldest first."""
        if not self.has_trace:
            return []
        with self.trace() as trace:
            return trace.runs()

    def in_flight(self) -> list[InFlight]:
        """The node runs the trace last said were in flight (`TraceReader.in_flight`)."""
        if not self.has_trace:
            return []
        with self.trace() as trace:
            return trace.in_flight()


def _fields(columns: tuple[Column, ...], row: tuple[Any, ...]) -> dict[str, Any]:
    """One stored row as a record's fields: JSON columns decoded, NULLs left to defaults."""
    pairs = zip(columns, row, strict=True)
    return {c.name: loads(v) if c.json else v for c, v in pairs if v is not None}
