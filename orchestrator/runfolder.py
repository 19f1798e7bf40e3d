"""The run folder: results.jsonl, traces.sqlite, manifest.json (layout fixed by DESIGN.md),
plus what makes it self-contained: a snapshot of the graph and its templates and each
example's inputs, so report, trace, meta-eval and resume need nothing outside it.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Any

import orjson

from .errors import RunFolderError, RunKeyMismatch
from .runkey import RunKey
from .runlock import LOCK, RunLock
from .trace import TraceStore

if TYPE_CHECKING:
    from .dataset import Row
    from .graph import CompiledGraph
    from .reader import RunReader

RESULTS = "results.jsonl"
TRACES = "traces.sqlite"
MANIFEST = "manifest.json"
SUMMARY = "summary.json"
INPUTS = "inputs.jsonl"
SNAPSHOT = "snapshot"
SNAPSHOT_GRAPH = "graph.yaml"
SNAPSHOT_PROMPTS = "prompts"
# 1: results/traces/manifest only (identity = graph and data hash).
# 2: + run key, snapshot/, inputs.jsonl, run.lock.
LAYOUT_VERSION = 2

# Everything a run (or a reader of it) writes here: a folder holding nothing else is a run
# folder even before its manifest exists (a run killed while starting), and `--overwrite`
# deletes only these.
OWN_NAMES = frozenset(
    {
        RESULTS,
        RESULTS + ".tmp",
        TRACES,
        TRACES + "-wal",
        TRACES + "-shm",
        TRACES + "-journal",
        MANIFEST,
        MANIFEST + ".tmp",
        SUMMARY,
        SUMMARY + ".tmp",
        INPUTS,
        SNAPSHOT,
        LOCK,
        "report.html",
        "meta_eval.json",
    }
)


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2, default=str))
    os.replace(tmp, path)


def encode_result(row: dict[str, Any]) -> bytes:
    """One result line as written to results.jsonl (a worker encodes its lines so)."""
    return orjson.dumps(row, default=str) + b"\n"


def read_json(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


def iter_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) one at a time, skipping a torn last line of a killed run."""
    if not path.is_file():
        return
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                yield number, orjson.loads(line)
            except orjson.JSONDecodeError:
                continue


def _iter_lines(path: Path) -> Iterator[dict[str, Any]]:
    return (line for _, line in iter_lines(path))


def iter_results(folder: Path) -> Iterator[dict[str, Any]]:
    """Result lines of a run folder one at a time (skips a torn last line of a killed run)."""
    return _iter_lines(folder / RESULTS)


def read_results(folder: Path) -> list[dict[str, Any]]:
    """Every result line of a run folder, in memory."""
    return list(iter_results(folder))


def iter_inputs(folder: Path) -> Iterator[dict[str, Any]]:
    """Each example's inputs as the run read them: {"id", "number", "data"}; an example
    tried again after a failure may appear twice (the later line wins)."""
    return _iter_lines(folder / INPUTS)


def snapshot_graph(folder: Path) -> Path | None:
    """The graph file a run used, from its snapshot (None for runs made before snapshots)."""
    path = folder / SNAPSHOT / SNAPSHOT_GRAPH
    return path if path.is_file() else None


def snapshot_prompts(folder: Path) -> Path:
    return folder / SNAPSHOT / SNAPSHOT_PROMPTS


def check_layout(manifest: dict[str, Any], folder: Path) -> int:
    """The folder's layout version; RunFolderError for one newer than this package knows."""
    version = manifest.get("layout_version", 1)
    if not isinstance(version, int) or version > LAYOUT_VERSION:
        raise RunFolderError(
            f"{folder} was written by a newer orchestrator (run-folder layout {version}; this "
            f"one reads up to {LAYOUT_VERSION}): upgrade orchestrator to use it."
        )
    return version


def is_run_folder(path: Path) -> bool:
    """A folder with a manifest, or holding only files a run writes (a run killed while
    starting leaves those without a manifest)."""
    if (path / MANIFEST).is_file():
        return True
    return all(entry.name in OWN_NAMES for entry in path.iterdir())


class RunFolder:
    """Opens a run folder for one writer, resuming it only under the same run key."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.results_path = self.path / RESULTS
        self.traces_path = self.path / TRACES
        self.manifest_path = self.path / MANIFEST
        self.summary_path = self.path / SUMMARY
        self.inputs_path = self.path / INPUTS
        self.done: set[str] = set()
        self.lock = RunLock(self.path)
        self.previous: RunKey | None = None  # the key of the run being resumed
        self._results: IO[bytes] | None = None
        self._inputs: IO[bytes] | None = None
        self._pending: list[bytes] = []
        self._pending_inputs: list[bytes] = []

    # -- opening ------------------------------------------------------------------------

    def open(self, overwrite: bool) -> str | None:
        """Create the folder (or check it is one of ours) and take its writer lock; a note
        when the lock of a run that died was taken over.

        The lock comes before anything is deleted or rewritten, so a second run can neither
        wipe nor interleave with the first.
        """
        if self.path.exists() and not self.path.is_dir():
            raise RunFolderError(
                f"--out {self.path} is a file, not a folder; choose a folder path for the run."
            )
        if self.path.is_dir() and not is_run_folder(self.path):
            if overwrite and any(self.path.iterdir()):
                raise RunFolderError(
                    f"--overwrite replaces only a run folder (one with {MANIFEST}) or an empty "
                    f"folder; {self.path} is neither, so nothing was deleted. Choose another --out."
                )
            if any(self.path.iterdir()):
                raise RunFolderError(
                    f"{self.path} is not empty and is not a run folder; choose another --out."
                )
        self.path.mkdir(parents=True, exist_ok=True)
        self.lock.acquire()
        try:
            if overwrite:
                self._clear()
            elif self.manifest_path.is_file():
                manifest = self._read_manifest()
                version = check_layout(manifest, self.path)
                if version < LAYOUT_VERSION:
                    raise RunFolderError(
                        f"{self.path} was made by an older orchestrator (run-folder layout "
                        f"{version}) that did not record the run's full identity, so it cannot "
                        "be resumed safely: choose another --out, or pass --overwrite to start "
                        "it again."
                    )
                if "run_key" in manifest:
                    self.previous = RunKey.model_validate(manifest["run_key"])
        except BaseException:
            self.lock.release()
            raise
        return self.lock.took_over()

    def has_manifest(self) -> bool:
        return self.manifest_path.is_file()

    def trace(self, run_id: str, graph_hash: str, run_key: str) -> TraceStore:
        return TraceStore(self.traces_path, run_id, graph_hash, run_key)

    def results(self) -> Iterator[dict[str, Any]]:
        return iter_results(self.path)

    def reader(self) -> RunReader:
        """The folder read back as typed records (what report, trace and meta-eval use)."""
        from .reader import RunReader

        return RunReader(self.path)

    def describe(self) -> str:
        return str(self.path)

    def _read_manifest(self) -> dict[str, Any]:
        try:
            manifest = read_json(self.manifest_path)
        except (OSError, orjson.JSONDecodeError) as exc:
            raise RunFolderError(
                f"{self.manifest_path} is damaged ({exc}): this run folder cannot be resumed; "
                "choose another --out, or pass --overwrite to start it again."
            ) from None
        if not isinstance(manifest, dict):
            raise RunFolderError(f"{self.manifest_path} is not a run manifest.")
        return manifest

    def _clear(self) -> None:
        """Delete what a run wrote here; anything else (a user's notes) stays."""
        for entry in self.path.iterdir():
            if entry.name == LOCK or entry.name not in OWN_NAMES:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()

    def check_key(self, key: RunKey, static_only: bool = False) -> None:
        """Refuse to resume under a different run key, naming what changed; `static_only`
        compares only what is known before a server is asked."""
        if self.previous is None:
            return
        # A run that stopped before reaching its servers recorded only the static part.
        reached_servers = len(self.previous.static().components) < len(self.previous.components)
        static_only = static_only or not reached_servers
        if static_only:
            key = key.static()
        previous = self.previous.static() if static_only else self.previous
        if previous.digest == key.digest:
            return
        changes = key.changes_from(previous)
        raise RunKeyMismatch(
            f"{self.path} holds a run with different settings ({'; '.join(changes)}); "
            "resuming would mix two judges' results. Choose another --out, or pass "
            "--overwrite to replace it.",
            changes,
        )

    def begin(self) -> bool:
        """Keep finished examples (failed ones are tried again); True when resuming."""
        resuming = self.manifest_path.is_file()
        tmp = self.results_path.with_suffix(".jsonl.tmp")
        with tmp.open("wb") as kept:
            for row in iter_results(self.path):
                if row.get("status") == "ok":
                    self.done.add(str(row["id"]))
                    kept.write(orjson.dumps(row) + b"\n")
        os.replace(tmp, self.results_path)
        self._results = self.results_path.open("ab")
        self._inputs = self.inputs_path.open("ab")
        return resuming

    def write_snapshot(self, graph: CompiledGraph) -> None:
        """The graph file and every template it can render, as this run read them."""
        root = self.path / SNAPSHOT
        if root.exists():
            shutil.rmtree(root)
        prompts = root / SNAPSHOT_PROMPTS
        prompts.mkdir(parents=True)
        (root / SNAPSHOT_GRAPH).write_bytes(graph.source)
        for name, source in graph.templates.items():
            target = prompts.joinpath(*PurePosixPath(name).parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(source, encoding="utf-8")

    # -- writing ------------------------------------------------------------------------

    def write_input(self, row: Row) -> None:
        """Queue an example's inputs; written before any result line that needs them."""
        line: dict[str, Any] = {"id": row.id, "number": row.number, "data": row.data}
        try:
            blob = orjson.dumps(line, default=str)
        except (TypeError, orjson.JSONEncodeError) as exc:
            # A row orjson cannot write (nested past its depth limit) still runs; only its
            # copy here is replaced by the reason.
            line["data"] = None
            line["error"] = f"inputs not stored: {exc}"
            blob = orjson.dumps(line)
        self._pending_inputs.append(blob + b"\n")

    def write_result(self, row: dict[str, Any]) -> None:
        """Queue one example's line; `flush` appends it (after the trace is written)."""
        self._pending.append(encode_result(row))

    def write_lines(self, lines: list[bytes]) -> None:
        """Queue result lines a worker encoded (`encode_result`), as `write_result` does."""
        self._pending.extend(lines)

    def flush(self) -> None:
        """Append the queued lines and push them to the OS, so a crash cannot tear them."""
        if self._pending_inputs and self._inputs is not None:
            self._inputs.write(b"".join(self._pending_inputs))
            self._inputs.flush()
            self._pending_inputs.clear()
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
        """Write what is queued and close the files; the lock is released by `release`."""
        try:
            self.flush()
        finally:
            for handle in (self._results, self._inputs):
                if handle is not None:
                    # The flush above already raised what went wrong.
                    with suppress(OSError):
                        handle.close()
            self._results = self._inputs = None

    def release(self) -> None:
        self.lock.release()
