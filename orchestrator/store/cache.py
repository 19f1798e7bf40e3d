"""Content-addressed response cache in SQLite (WAL), shared safely by concurrent runs.

Only replies that passed validation are stored, so a cache hit is always usable. A damaged
cache file costs its replies, never the run: it is named once and the run goes on without
it (see `open_cache` and `ResponseCache.damaged`). So, unlike a run folder's files, it
keeps SQLite's and the OS's own errors: the few that pass (a lock held too long, a full
disk) are caught by its callers, which go on without the replies (disk.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import sqlite3
import time
from pathlib import Path
from typing import Any

import orjson

from ..paths import cache_root
from .disk import is_damage

log = logging.getLogger(__name__)

FLUSH_EVERY = 1000  # queued replies that force a write even between the runner's flushes
BUSY_SECONDS = 30.0  # how long a statement waits for another connection's lock


def _use_wal(db: sqlite3.Connection) -> None:
    """Put the file in WAL mode, waiting for other connections like busy_timeout does.

    SQLite refuses a journal-mode change that could deadlock with another connection's
    write at once ("database is locked"), without calling the busy handler: two runs that
    open a new cache file together would otherwise have one of them fail.
    """
    deadline = time.monotonic() + BUSY_SECONDS
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def default_cache_path() -> Path:
    return cache_root() / "responses.sqlite"


def damaged_message(path: Path, exc: BaseException) -> str:
    """What to tell the user about a cache file that cannot be used, and what to do."""
    return (
        f"the response cache {path} cannot be read ({exc}); the run goes on without it. "
        "Delete or move the file to start a new cache."
    )


def open_cache(path: Path, replace: bool = False) -> ResponseCache | None:
    """The cache at `path`, or None after a warning naming it when it cannot be opened
    (garbage bytes, a truncated file, a folder, no permission): the cache only saves
    requests, so losing it must not stop a run."""
    try:
        return ResponseCache(path, replace=replace)
    except (sqlite3.Error, OSError) as exc:
        log.warning(damaged_message(path, exc))
        return None


def cache_key(
    model: str,
    messages: list[dict[str, Any]],
    params: dict[str, Any],
    schema: dict[str, Any] | None,
    sample_index: int,
    *,
    server: str,
) -> str:
    """sha256 over everything that determines a reply. `server` is what serves the model
    (`calls.registry.identity_at`), not its URL: replicas of the same weights share
    replies, and other weights under the same model name never do. (Keys written before it
    was part of the key are simply never found again.)"""
    payload = orjson.dumps(
        {
            "model": model,
            "server": server,
            "messages": messages,
            "params": params,
            # In its own key order: the server makes the model write the properties in that
            # order (reason before score or after), so a reordered schema is a new question.
            "schema": orjson.dumps(schema).decode() if schema is not None else None,
            "sample": sample_index,
        },
        option=orjson.OPT_SORT_KEYS,
    )
    return hashlib.sha256(payload).hexdigest()


class ResponseCache:
    """get/put of validated replies keyed by `cache_key`.

    A file found damaged after it opened (SQLite checks a page only when it reads it) is
    named once in a warning and then left alone: `get` misses, `put` and `flush` drop the
    replies, so nothing more is written into a broken file.
    """

    def __init__(self, path: Path, replace: bool = False) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # The first reply stored for a key stays (so a re-run from the cache reproduces the
        # run that asked first, even when two runs asked at once); `replace` (--refresh)
        # overwrites instead. A stored reply that no longer decodes is replaced either way.
        self.replace = replace
        self._stale: set[str] = set()
        # One connection used from the event loop thread; WAL lets other processes
        # read and write the same file at the same time.
        self._db = sqlite3.connect(
            path, timeout=BUSY_SECONDS, isolation_level=None, check_same_thread=False
        )
        _use_wal(self._db)
        self._db.execute("PRAGMA synchronous=NORMAL")
        self.lock_wait(BUSY_SECONDS)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS responses ("
            " key TEXT PRIMARY KEY, value BLOB NOT NULL, created REAL NOT NULL)"
        )
        self._pending: dict[str, bytes] = {}
        self.damaged = False
        self._bad_reply_seen = False

    def _give_up(self, exc: sqlite3.Error) -> None:
        """Stop using a file SQLite found damaged; say so the first time."""
        if not self.damaged:
            self.damaged = True
            log.warning(damaged_message(self.path, exc))
        self._pending.clear()

    def lock_wait(self, seconds: float) -> None:
        """How long a write waits for another process's lock (it blocks the caller)."""
        self._db.execute(f"PRAGMA busy_timeout={int(seconds * 1000)}")

    def get(self, key: str) -> dict[str, Any] | None:
        if self.damaged:
            return None
        blob = self._pending.get(key)
        if blob is None:
            try:
                row = self._db.execute(
                    "SELECT value FROM responses WHERE key = ?", (key,)
                ).fetchone()
            except sqlite3.DatabaseError as exc:
                if not is_damage(exc):  # a lock or a full disk: retried by the runner
                    raise
                self._give_up(exc)
                return None
            blob = row[0] if row else None
        if blob is None:
            return None
        # SQLite checks its pages, not the bytes stored in them: a reply that no longer
        # decodes is a miss (the question is asked again and its new reply replaces it).
        try:
            value = orjson.loads(blob)
        except orjson.JSONDecodeError:
            value = None
        if not isinstance(value, dict):
            self._stale.add(key)
            if not self._bad_reply_seen:
                self._bad_reply_seen = True
                log.warning(
                    "the response cache %s holds a reply that does not decode; it is asked "
                    "again (others may be damaged too: delete the file to start afresh).",
                    self.path,
                )
            return None
        return value

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Queue a reply; the next `flush` writes it (a commit per reply cost ~60 µs)."""
        if self.damaged:
            return
        if key in self._pending and not (self.replace or key in self._stale):
            return  # first reply wins, as it does in the file
        self._pending[key] = orjson.dumps(value)
        if len(self._pending) % FLUSH_EVERY == 0:
            # A cache another process keeps locked must not fail the call that found a
            # reply; the runner's next flush tries again and reports it. Every FLUSH_EVERY
            # replies, not every reply past it: each try waits for the lock.
            with contextlib.suppress(sqlite3.OperationalError):
                self.flush()

    def flush(self) -> None:
        """Write every queued reply in one transaction, visible to other processes after."""
        if self.damaged or not self._pending:
            return
        now = time.time()
        try:
            replacing = [
                (key, blob, now)
                for key, blob in self._pending.items()
                if self.replace or key in self._stale
            ]
            keeping = [
                (key, blob, now)
                for key, blob in self._pending.items()
                if not (self.replace or key in self._stale)
            ]
            self._db.execute("BEGIN")
            try:
                self._db.executemany(
                    "INSERT OR REPLACE INTO responses (key, value, created) VALUES (?, ?, ?)",
                    replacing,
                )
                self._db.executemany(
                    "INSERT OR IGNORE INTO responses (key, value, created) VALUES (?, ?, ?)",
                    keeping,
                )
                self._db.execute("COMMIT")
            except BaseException:
                # A failed write (lock held past busy_timeout, disk full, …) must not leave
                # its transaction open, or every later BEGIN fails; the replies stay queued.
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as exc:
            if not is_damage(exc):  # a lock or a full disk: retried by the runner
                raise
            self._give_up(exc)
            return
        self._stale.difference_update(self._pending)
        self._pending.clear()

    def __bool__(self) -> bool:
        # An open cache is a cache even when empty; without this, `if cache` would count
        # every row (and fail on a damaged file) through __len__.
        return True

    def __len__(self) -> int:
        self.flush()
        return int(self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def clear(self) -> int:
        n = len(self)
        self._db.execute("DELETE FROM responses")
        return n

    def close(self) -> None:
        """Write what is queued and close; a cache still locked by another process loses
        its queued replies (they are only a saving; the runner has said so)."""
        try:
            with contextlib.suppress(sqlite3.OperationalError):
                self.flush()
        finally:
            self._db.close()
