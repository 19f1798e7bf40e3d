"""The run folder: results.jsonl, traces.sqlite, manifest.json (layout fixed by DESIGN.md)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson

from .errors import RunFolderError

RESULTS = "results.jsonl"
TRACES = "traces.sqlite"
MANIFEST = "manifest.json"
SUMMARY = "summary.json"


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2, default=str))
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


def iter_results(folder: Path) -> Iterator[dict[str, Any]]:
    """Result lines of a run folder one at a time (skips a torn last line of a killed run)."""
    path = folder / RESULTS
    if not path.is_file():
        return
    with path.open("rb") as handle:
        for line in handle:
            try:
                yield orjson.loads(line)
            except orjson.JSONDecodeError:
                continue


def read_results(folder: Path) -> list[dict[str, Any]]:
    """Every result line of a run folder, in memory."""
    return list(iter_results(folder))


class RunFolder:
    """Opens a run folder for a run, resuming it when it holds the same graph and data."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.results_path = path / RESULTS
        self.traces_path = path / TRACES
        self.manifest_path = path / MANIFEST
        self.summary_path = path / SUMMARY
        self.done: set[str] = set()
        self._results: IO[bytes] | None = None
        self._pending: list[bytes] = []

    def prepare(self, identity: dict[str, str], overwrite: bool) -> bool:
        """Create or reopen the folder; True when resuming. Refuses a different run."""
        if self.path.exists() and overwrite:
            shutil.rmtree(self.path)
        self.path.mkdir(parents=True, exist_ok=True)
        resuming = False
        if self.manifest_path.is_file():
            old = read_json(self.manifest_path).get("identity", {})
            changed = [k for k, v in identity.items() if old.get(k) != v]
            if changed:
                raise RunFolderError(
                    f"{self.path} holds a run of a different {' and '.join(changed)} "
                    f"(was {', '.join(f'{k}={old.get(k)}' for k in changed)}). "
                    "Choose another --out, or pass --overwrite to replace it."
                )
            resuming = True
        elif any(self.path.iterdir()):
            raise RunFolderError(
                f"{self.path} is not empty and is not a run folder; choose another --out "
                "or pass --overwrite."
            )
        # Keep finished examples; failed ones are tried again.
        tmp = self.results_path.with_suffix(".jsonl.tmp")
        with tmp.open("wb") as kept:
            for row in iter_results(self.path):
                if row.get("status") == "ok":
                    self.done.add(str(row["id"]))
                    kept.write(orjson.dumps(row) + b"\n")
        os.replace(tmp, self.results_path)
        self._results = self.results_path.open("ab")
        return resuming

    def write_result(self, row: dict[str, Any]) -> None:
        """Queue one example's line; `flush` appends it (after the trace is written)."""
        self._pending.append(orjson.dumps(row, default=str) + b"\n")

    def flush(self) -> None:
        """Append the queued lines and push them to the OS, so a crash cannot tear them."""
        if self._pending and self._results is not None:
            self._results.write(b"".join(self._pending))
            self._results.flush()
            self._pending.clear()

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        manifest["updated"] = time.time()
        _write_json(self.manifest_path, manifest)

    def write_summary(self, summary: dict[str, Any]) -> None:
        _write_json(self.summary_path, summary)

    def close(self) -> None:
        self.flush()
        if self._results is not None:
            self._results.close()
            self._results = None
