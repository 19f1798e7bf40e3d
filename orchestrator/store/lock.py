"""One writer per run folder: an exclusive `flock` on `run.lock`, held for the whole run.

The kernel drops a `flock` when its process dies, however it dies, so a lock left by a
killed run is simply free for the next one; the file's text (pid, host, start time) is only
there to name the holder in the refusal and to say when a dead run's lock was taken over.
Readers (`trace`, `report`, `meta-eval`) never take it.

`acquire` lets an OSError through (the lock file cannot be made: a read-only folder, a
full disk): each caller says what that means for it (disk.py). `release` never fails.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from contextlib import suppress
from datetime import datetime
from pathlib import Path
from typing import IO

import orjson

from ..errors import RunFolderError

LOCK = "run.lock"


class RunLock:
    """Held from `acquire` until `release` (or the process's end)."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK
        self._handle: IO[bytes] | None = None
        self.previous: dict[str, object] | None = None  # holder a dead run left behind

    def acquire(self) -> None:
        """Take the lock or raise RunFolderError naming the run that holds it (OSError when
        the lock file cannot be made or written)."""
        while True:
            handle = self._lock_file()
            if handle is not None:
                break
        try:
            self.previous = _read_holder(handle)
            handle.seek(0)
            handle.truncate()
            holder = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
            handle.write(orjson.dumps(holder))
            handle.flush()
        except BaseException:
            handle.close()  # a holder text that cannot be written (a full disk) frees the lock
            raise
        self._handle = handle

    def _lock_file(self) -> IO[bytes] | None:
        """The lock file, opened and locked; None when the run that held it removed it
        between our open and our lock (a clean finish removes it): then open it anew."""
        handle = open(self.path, "a+b")  # noqa: SIM115 - kept open for the whole run
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(handle)
            handle.close()
            raise RunFolderError(
                f"{self.path.parent} is being written by another run ({_describe(holder)}); "
                "wait for it to finish, or choose another --out."
            ) from None
        except BaseException:
            handle.close()
            raise
        try:
            current = os.stat(self.path).st_ino
        except FileNotFoundError:
            current = None
        if current != os.fstat(handle.fileno()).st_ino:
            handle.close()  # we locked a file no longer at the path: it is nobody's lock
            return None
        return handle

    def release(self) -> None:
        """Give the lock up and remove its file (a finished run leaves no clutter); never
        fails (the kernel drops the lock with the handle anyway). The file is removed while
        still locked: a run that opened it meanwhile finds it gone once it holds the lock,
        and opens the path anew (`acquire`), so two runs never hold two files at once."""
        handle, self._handle = self._handle, None
        if handle is None:
            return
        try:
            # Emptied first: a leftover holder text must not name a finished run.
            with suppress(OSError):
                handle.seek(0)
                handle.truncate()
            with suppress(OSError):
                self.path.unlink()
            with suppress(OSError):
                fcntl.flock(handle, fcntl.LOCK_UN)
        finally:
            with suppress(OSError):
                handle.close()

    def took_over(self) -> str | None:
        """A sentence when this run took the lock of a run that died holding it."""
        if not self.previous:
            return None
        holder = _describe(self.previous)
        return f"took over the lock of a run that stopped without releasing it ({holder})"


def holder_alive(folder: Path) -> bool | None:
    """Whether the run that holds `folder`'s lock is alive, read without taking the lock
    (a reader may not write the folder, and must never make a starting run fail): False
    when no run holds it (the text is empty: released) or its process is gone on this
    host; None when it says another host, whose processes cannot be asked."""
    try:
        with open(folder / LOCK, "rb") as handle:
            holder = _read_holder(handle)
    except OSError:
        return False
    if not holder:
        return False
    if holder.get("host") != socket.gethostname():
        return None
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)  # signal 0: asks whether the process exists, sends nothing
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, owned by another user
    return True


def _read_holder(handle: IO[bytes]) -> dict[str, object] | None:
    handle.seek(0)
    text = handle.read(4096)
    try:
        holder = orjson.loads(text) if text.strip() else None
    except orjson.JSONDecodeError:
        return None
    return holder if isinstance(holder, dict) else None


def _describe(holder: dict[str, object] | None) -> str:
    if not holder:
        return "holder unknown"
    started = holder.get("started")
    when = (
        datetime.fromtimestamp(float(started)).strftime("%Y-%m-%d %H:%M:%S")
        if isinstance(started, int | float)
        else "?"
    )
    return f"pid {holder.get('pid')} on {holder.get('host')}, started {when}"
