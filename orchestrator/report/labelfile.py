"""A labels file written by `orchestrator review`: one JSON line per answer, only appended.

Each answer is one `write` of a whole line to a file opened for appending, then an fsync:
a server killed mid-answer loses that answer and nothing before it, and two servers (two
reviewers) appending to one file never interleave their lines. An edit is a new line; the
readers (`analysis.read_labels`) keep a reviewer's last line per example.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from pathlib import Path
from typing import Any

import orjson

from ..analysis import label_lines
from ..store import on_disk

log = logging.getLogger(__name__)

__all__ = ["LabelFile"]


class LabelFile:
    """The labels file of one review: what a reviewer has answered, and appending answers."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        with on_disk(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            self._drop_torn_tail()

    def _drop_torn_tail(self) -> None:
        """Cut a last line left without its newline (a writer killed inside its `write`),
        so the next answer starts a line of its own instead of joining the torn one."""
        if not self.path.is_file():
            return
        data = self.path.read_bytes()
        if not data or data.endswith(b"\n"):
            return
        keep = data.rfind(b"\n") + 1
        log.warning(
            "%s: dropped a last line cut short (%d bytes): a review stopped while writing it",
            self.path,
            len(data) - keep,
        )
        with self.path.open("r+b") as handle:
            handle.truncate(keep)
            os.fsync(handle.fileno())

    def answers(self, reviewer: str) -> dict[str, dict[str, Any]]:
        """This reviewer's last line per example id (a `reviewer` or `annotator` key)."""
        if not self.path.is_file():
            return {}
        found: dict[str, dict[str, Any]] = {}
        for _, item in label_lines(self.path):
            if str(item.get("reviewer", item.get("annotator", ""))) == reviewer:
                found[item["id"]] = item
        return found

    def append(self, line: dict[str, Any]) -> None:
        """Add one answer as one line, on disk (fsync) before this returns."""
        blob = orjson.dumps(line, default=str) + b"\n"
        with self.lock, on_disk(self.path):
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                written = os.write(fd, blob)
                if written != len(blob):  # a full disk: say so rather than leave it torn
                    raise OSError(errno.ENOSPC, f"wrote {written} of {len(blob)} bytes")
                os.fsync(fd)
            finally:
                os.close(fd)
