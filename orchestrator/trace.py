"""The decision trace: one row per node execution and one per attempt, in the run folder.

It is also what makes resume work: a node whose finished value is here is not run again,
whether or not the response cache still holds its replies.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
  run_id TEXT PRIMARY KEY, started REAL, graph TEXT, graph_hash TEXT, model TEXT,
  base_url TEXT, server TEXT, structured TEXT, settings BLOB
);
CREATE TABLE IF NOT EXISTS node_runs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id TEXT, example_id TEXT, node TEXT, item INTEGER, status TEXT,
  value BLOB, error TEXT, messages BLOB, raw BLOB, model TEXT, endpoint TEXT,
  cached INTEGER, prompt_tokens INTEGER, completion_tokens INTEGER, latency REAL,
  started REAL, finished REAL, graph_hash TEXT
);
CREATE INDEX IF NOT EXISTS node_runs_lookup ON node_runs (example_id, node, item);
CREATE TABLE IF NOT EXISTS attempts (
  node_run_id INTEGER, number INTEGER, kind TEXT, error TEXT, raw TEXT,
  finish_reason TEXT, latency REAL, prompt_tokens INTEGER, completion_tokens INTEGER,
  cached INTEGER
);
CREATE INDEX IF NOT EXISTS attempts_node ON attempts (node_run_id);
"""

WHOLE = -1  # `item` value of a node's own record (foreach items are 0, 1, …)


@dataclass
class Attempt:
    """One try at an LLM call: a transport failure, an invalid reply, or the accepted one."""

    number: int
    kind: str  # "ok" | "invalid" | "truncated" | "transport" | "cache"
    error: str | None = None
    raw: str | None = None
    finish_reason: str | None = None
    latency: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False


@dataclass
class NodeRecord:
    """One node execution (or one foreach item of it) for one example."""

    example_id: str
    node: str
    item: int = WHOLE
    status: str = "ok"  # "ok" | "skipped" | "failed"
    value: Any = None
    error: str | None = None
    messages: list[dict[str, Any]] | None = None
    raw: list[str] | None = None
    model: str | None = None
    endpoint: str | None = None
    cached: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency: float = 0.0
    started: float = field(default_factory=time.time)
    finished: float = 0.0
    attempts: list[Attempt] = field(default_factory=list)


def _dumps(value: Any) -> bytes | None:
    return None if value is None else orjson.dumps(value, default=str)


def _loads(blob: bytes | None) -> Any:
    return None if blob is None else orjson.loads(blob)


class TraceStore:
    """Writes and reads `traces.sqlite` of one run folder."""

    def __init__(self, path: Path, run_id: str = "", graph_hash: str = "") -> None:
        self.path = path
        self.run_id = run_id
        self.graph_hash = graph_hash
        self._db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def start_run(self, **fields: Any) -> None:
        settings = fields.pop("settings", None)
        self._db.execute(
            "INSERT OR REPLACE INTO runs (run_id, started, graph, graph_hash, model, base_url,"
            " server, structured, settings) VALUES (?,?,?,?,?,?,?,?,?)",
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
            ),
        )

    def record(self, rec: NodeRecord) -> None:
        """Store a finished node execution with its attempts (one transaction)."""
        rec.finished = rec.finished or time.time()
        self._db.execute("BEGIN")
        cur = self._db.execute(
            "INSERT INTO node_runs (run_id, example_id, node, item, status, value, error,"
            " messages, raw, model, endpoint, cached, prompt_tokens, completion_tokens,"
            " latency, started, finished, graph_hash) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                self.run_id,
                rec.example_id,
                rec.node,
                rec.item,
                rec.status,
                _dumps(rec.value),
                rec.error,
                _dumps(rec.messages),
                _dumps(rec.raw),
                rec.model,
                rec.endpoint,
                int(rec.cached),
                rec.prompt_tokens,
                rec.completion_tokens,
                rec.latency,
                rec.started,
                rec.finished,
                self.graph_hash,
            ),
        )
        self._db.executemany(
            "INSERT INTO attempts (node_run_id, number, kind, error, raw, finish_reason, latency,"
            " prompt_tokens, completion_tokens, cached) VALUES (?,?,?,?,?,?,?,?,?,?)",
            [
                (
                    cur.lastrowid,
                    a.number,
                    a.kind,
                    a.error,
                    a.raw,
                    a.finish_reason,
                    a.latency,
                    a.prompt_tokens,
                    a.completion_tokens,
                    int(a.cached),
                )
                for a in rec.attempts
            ],
        )
        self._db.execute("COMMIT")

    def finished_value(self, example_id: str, node: str, item: int = WHOLE) -> tuple[bool, Any]:
        """(found, value) of the latest ok/skipped execution of this node for this example."""
        row = self._db.execute(
            "SELECT status, value FROM node_runs WHERE example_id=? AND node=? AND item=?"
            " AND status IN ('ok','skipped') AND graph_hash=? ORDER BY id DESC LIMIT 1",
            (example_id, node, item, self.graph_hash),
        ).fetchone()
        if row is None:
            return False, None
        return True, _loads(row[1])

    def node_runs(
        self, example_id: str | None = None, node: str | None = None
    ) -> Iterator[dict[str, Any]]:
        """Node executions (newest run's last), each with its attempts, for `trace`/`report`."""
        sql = "SELECT * FROM node_runs WHERE 1=1"
        args: list[Any] = []
        if example_id is not None:
            sql += " AND example_id=?"
            args.append(example_id)
        if node is not None:
            sql += " AND node=?"
            args.append(node)
        sql += " ORDER BY id"
        cursor = self._db.execute(sql, args)
        columns = [c[0] for c in cursor.description]
        for row in cursor.fetchall():
            rec = dict(zip(columns, row, strict=True))
            for key in ("value", "messages", "raw"):
                rec[key] = _loads(rec[key])
            rec["cached"] = bool(rec["cached"])
            att = self._db.execute(
                "SELECT number, kind, error, raw, finish_reason, latency, prompt_tokens,"
                " completion_tokens, cached FROM attempts WHERE node_run_id=? ORDER BY number",
                (rec["id"],),
            )
            names = [c[0] for c in att.description]
            rec["attempts"] = [dict(zip(names, a, strict=True)) for a in att.fetchall()]
            yield rec

    def runs(self) -> list[dict[str, Any]]:
        cursor = self._db.execute("SELECT * FROM runs ORDER BY started")
        columns = [c[0] for c in cursor.description]
        return [dict(zip(columns, r, strict=True)) for r in cursor.fetchall()]

    def close(self) -> None:
        self._db.close()


def attempt_dict(attempt: Attempt) -> dict[str, Any]:
    return asdict(attempt)
