"""Content-addressed response cache in SQLite (WAL), shared safely by concurrent runs.

Only replies that passed validation are stored, so a cache hit is always usable.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path
from typing import Any

import orjson

from .paths import cache_root


def default_cache_path() -> Path:
    return cache_root() / "responses.sqlite"


def cache_key(
    model: str,
    messages: list[dict[str, Any]],
    params: dict[str, Any],
    schema: dict[str, Any] | None,
    sample_index: int,
) -> str:
    """sha256 over everything that determines a reply (the endpoint URL is not: same model,
    same answer)."""
    payload = orjson.dumps(
        {
            "model": model,
            "messages": messages,
            "params": params,
            "schema": schema,
            "sample": sample_index,
        },
        option=orjson.OPT_SORT_KEYS,
    )
    return hashlib.sha256(payload).hexdigest()


class ResponseCache:
    """get/put of validated replies keyed by `cache_key`."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # One connection used from the event loop thread; WAL lets other processes
        # read and write the same file at the same time.
        self._db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=30000")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS responses ("
            " key TEXT PRIMARY KEY, value BLOB NOT NULL, created REAL NOT NULL)"
        )

    def get(self, key: str) -> dict[str, Any] | None:
        row = self._db.execute("SELECT value FROM responses WHERE key = ?", (key,)).fetchone()
        return orjson.loads(row[0]) if row else None

    def put(self, key: str, value: dict[str, Any]) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO responses (key, value, created) VALUES (?, ?, ?)",
            (key, orjson.dumps(value), time.time()),
        )

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def clear(self) -> int:
        n = len(self)
        self._db.execute("DELETE FROM responses")
        return n

    def close(self) -> None:
        self._db.close()
