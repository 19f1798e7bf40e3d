"""The run folder's lock file (issue 34 item 7): a clean finish removes `run.lock`, and a run
that opened the file just before its holder removed it never ends up holding a file that
is no longer the folder's lock (two writers at once)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import RunFolderError
from orchestrator.store import lock as lock_module
from orchestrator.store.lock import LOCK, RunLock


def test_a_released_lock_leaves_no_file(tmp_path: Path) -> None:
    held = RunLock(tmp_path)
    held.acquire()
    assert (tmp_path / LOCK).is_file()
    held.release()
    assert not (tmp_path / LOCK).exists()
    again = RunLock(tmp_path)  # and the next run takes it as usual
    again.acquire()
    assert again.previous is None
    again.release()


def test_a_second_writer_is_still_refused(tmp_path: Path) -> None:
    held = RunLock(tmp_path)
    held.acquire()
    with pytest.raises(RunFolderError, match="is being written by another run"):
        RunLock(tmp_path).acquire()
    held.release()


def test_a_lock_taken_on_a_file_removed_meanwhile_is_taken_again_on_the_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder removes the file between our open and our flock: we must not keep the
    removed file's lock, or a third run would lock the new file beside us."""
    (tmp_path / LOCK).write_bytes(b"")
    real_flock = fcntl.flock
    removed: list[int] = []

    def flock_after_removal(handle: Any, operation: int) -> None:
        if not removed:  # the first lock attempt: the holder finishes just before it
            removed.append(os.fstat(handle.fileno()).st_ino)
            (tmp_path / LOCK).unlink()
        real_flock(handle, operation)

    monkeypatch.setattr(lock_module.fcntl, "flock", flock_after_removal)
    ours = RunLock(tmp_path)
    ours.acquire()
    assert removed, "the interleaving was not exercised"
    assert ours._handle is not None
    held = os.fstat(ours._handle.fileno()).st_ino
    assert held == os.stat(tmp_path / LOCK).st_ino  # the file at the path is the one held
    monkeypatch.setattr(lock_module.fcntl, "flock", real_flock)
    with pytest.raises(RunFolderError):
        RunLock(tmp_path).acquire()
    ours.release()
