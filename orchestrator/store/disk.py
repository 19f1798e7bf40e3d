"""Where the store meets the file system: an OSError or sqlite3.Error met reading or writing
a run folder's file becomes an error of the library's tree (orchestrator/errors.py) that
names the file and says what to do.

- SQLite finding the file itself bad (not a database, malformed pages), or unable to open
  or query a file it reads → `DamagedRunFile`: nothing is resumed or reported from it.
- Anything else (a full disk, an I/O error, a file system gone, a write refused) →
  `StorageError`, a full disk said as such: what was written before is kept.

`RunFolder`, `TraceStore`, `RunReader` and `TraceReader` go through `on_disk` or
`storage_error` at each of their reads and writes, so neither OSError nor sqlite3.Error
leaves them. Two parts of the store keep the raw errors on purpose: `RunLock.acquire`,
whose callers each say what a refused lock means for them (a run, `summarize`), and the
response cache, which only saves requests and so degrades instead (cache.py).
"""

from __future__ import annotations

import errno
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import DamagedRunFile, RunFolderError, StorageError

# What to do, by what failed. A run resumes from what it wrote before, so "again" is enough.
FULL_ADVICE = "free some space, then run the same command again"
WRITE_ADVICE = "fix the cause (a failing disk, a file system that went away), then run again"
READ_ADVICE = "check the disk it is on, or copy the run folder elsewhere and use the copy"


def sqlite_code(exc: BaseException) -> int | None:
    """SQLite's primary result code of `exc` (None when the sqlite3 module raised it)."""
    code = getattr(exc, "sqlite_errorcode", None)
    # Extended codes (SQLITE_CORRUPT_INDEX, …) keep the primary code in their low byte.
    return None if code is None else int(code) & 0xFF


def is_damage(exc: BaseException) -> bool:
    """Whether SQLite says the file itself is bad (not a database, malformed pages), as
    opposed to a lock, a full disk or an I/O error."""
    return isinstance(exc, sqlite3.DatabaseError) and sqlite_code(exc) in (
        sqlite3.SQLITE_CORRUPT,
        sqlite3.SQLITE_NOTADB,
    )


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc` says the disk (or the user's quota) is full."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    if isinstance(exc, sqlite3.Error):
        code = sqlite_code(exc)
        return code == sqlite3.SQLITE_FULL or (code is None and "full" in str(exc))
    return False


def damaged(path: Path, exc: BaseException | str) -> DamagedRunFile:
    """The error for a trace that cannot be read: the folder, not the command, is at fault."""
    return DamagedRunFile(
        f"{path} cannot be read ({exc}): the run folder {path.parent} is damaged and cannot "
        "be resumed or reported; keep it aside and start a new --out (or --overwrite it).",
        str(path),
    )


def storage_error(
    path: Path, exc: OSError | sqlite3.Error, *, writing: bool = True
) -> RunFolderError:
    """The library's error for `exc`, met reading (`writing=False`) or writing `path`.

    A SQLite file that cannot be opened or queried to read is reported damaged, as it
    always was, unless SQLite says the disk failed (an I/O error, a full disk).
    """
    code = sqlite_code(exc)
    if is_damage(exc) or (
        not writing
        and isinstance(exc, sqlite3.DatabaseError)
        and code not in (sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL)
    ):
        return damaged(path, exc)
    detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    if is_disk_full(exc):
        problem = f"the disk is full: could not write {path} ({detail})"
        return StorageError(problem, FULL_ADVICE, path, disk_full=True)
    if writing:
        return StorageError(f"could not write {path} ({detail})", WRITE_ADVICE, path)
    return StorageError(f"could not read {path} ({detail})", READ_ADVICE, path)


@contextmanager
def on_disk(path: Path, *, writing: bool = True) -> Iterator[None]:
    """Run the block, turning an OSError or sqlite3.Error it raises into `storage_error`
    for `path` (the original is its `__cause__`)."""
    try:
        yield
    except (OSError, sqlite3.Error) as exc:
        raise storage_error(path, exc, writing=writing) from exc
