"""The run folder: results.jsonl, traces.sqlite, manifest.json (layout fixed by DESIGN.md),
plus what makes it self-contained: a snapshot of the graph and its templates and each
example's inputs, so report, trace, meta-eval and resume need nothing outside it.
"""

from __future__ import annotations

import errno
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Any

import orjson
from pydantic import ValidationError

from ..errors import DamagedRunFile, ReadOnlyRunFolder, RunFolderError, RunKeyMismatch
from .disk import on_disk, storage_error
from .lock import LOCK, RunLock
from .outfolder import OutputKind, check_out, clear_out, not_ours
from .records import EncodedLine, GraphSnapshot, Manifest, ResultLine, Summary, first_problem
from .runkey import RunKey
from .trace import TraceStore, check_intact

if TYPE_CHECKING:
    from ..data import Row

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


def write_json(path: Path, data: Any) -> None:
    """Replace `path` atomically (a tmp file renamed over it); when the tmp file cannot be
    written (a full disk), `path` is rewritten in place rather than left saying something
    untrue, and no empty tmp file stays behind. OSError when neither works: a caller
    writing outside a run folder (`summarize --out`) says what that means for it."""
    blob = orjson.dumps(data, option=orjson.OPT_INDENT_2, default=str)
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        tmp.write_bytes(blob)
        os.replace(tmp, path)
    except OSError as exc:
        with suppress(OSError):
            tmp.unlink()
        if not path.is_file():
            raise
        try:
            # Opened without truncating: overwriting blocks the file already holds needs no
            # free space on most filesystems, where a new file would.
            with path.open("r+b") as handle:
                handle.write(blob)
                handle.truncate(len(blob))
        except OSError:
            raise exc from None


def read_only(folder: Path, exc: OSError, advice: str) -> ReadOnlyRunFolder | None:
    """The error for a write refused because `folder` is read-only (None for another
    OSError): says so and how to write elsewhere."""
    if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
        return None
    return ReadOnlyRunFolder(f"{folder} is read-only ({exc.strerror}): {advice}")


def damaged_line(path: Path, number: int, what: str) -> DamagedRunFile:
    """The error for a line a run never writes (damaged, or edited by hand)."""
    return DamagedRunFile(
        f"{path}:{number} is not {what}: the run folder {path.parent} is damaged or was "
        "edited by hand; fix or delete that line (in a copy), or run into a new --out.",
        str(path),
    )


def read_json(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


def iter_lines(path: Path, torn_inside: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, JSON object) one at a time, skipping a torn last line of a killed run
    (it lacks its newline). Any other line that is not a JSON object is damage
    (DamagedRunFile); `torn_inside` also skips undecodable lines inside the file, which an
    inputs.jsonl written before torn tails were cut can hold. A read the disk fails is a
    StorageError naming the file."""
    try:
        if not path.is_file():
            return
        with path.open("rb") as handle:
            for number, line in enumerate(handle, start=1):
                try:
                    value = orjson.loads(line)
                except orjson.JSONDecodeError:
                    if torn_inside or not line.endswith(b"\n"):
                        continue
                    raise damaged_line(path, number, "JSON") from None
                if not isinstance(value, dict):
                    raise damaged_line(path, number, "a JSON object")
                yield number, value
    except OSError as exc:
        raise storage_error(path, exc, writing=False) from exc


def _iter_lines(path: Path, torn_inside: bool = False) -> Iterator[dict[str, Any]]:
    return (line for _, line in iter_lines(path, torn_inside))


def iter_results(folder: Path) -> Iterator[dict[str, Any]]:
    """Result lines of a run folder one at a time (skips a torn last line of a killed run)."""
    return _iter_lines(folder / RESULTS)


def result_lines(path: Path) -> Iterator[ResultLine]:
    """A results.jsonl file as typed lines, in file order (a torn last line skipped); a line
    that is not a result line is a RunFolderError naming it."""
    for number, line in iter_lines(path):
        try:
            yield ResultLine.model_validate(line)
        except ValidationError as exc:
            raise RunFolderError(
                f"{path}:{number} is not a result line ({first_problem(exc)})"
            ) from None


def results_end(folder: Path) -> int:
    """Where a run folder's results file ends now, in bytes (0 when it has none): the offset
    from which a reader following the run takes the lines written after it."""
    try:
        return (folder / RESULTS).stat().st_size
    except OSError:
        return 0


def result_ids_since(folder: Path, offset: int) -> tuple[list[str], int]:
    """The example ids of the whole result lines written after byte `offset`, and the offset
    after them, for a reader that follows a run as it writes (the live OTLP exporter). A
    line not yet finished waits for the next call; a damaged one names no example."""
    try:
        with open(folder / RESULTS, "rb") as handle:
            handle.seek(offset)
            chunk = handle.read()
    except OSError:
        return [], offset
    whole = chunk[: chunk.rfind(b"\n") + 1]
    found = []
    for line in whole.splitlines():
        try:
            found.append(str(orjson.loads(line)["id"]))
        except (orjson.JSONDecodeError, KeyError, TypeError):
            continue
    return found, offset + len(whole)


def read_results(folder: Path) -> list[dict[str, Any]]:
    """Every result line of a run folder, in memory."""
    return list(iter_results(folder))


def iter_inputs(folder: Path) -> Iterator[dict[str, Any]]:
    """Each example's inputs as the run read them: {"id", "number", "data"}, once per id
    (a folder written before resume kept them once may repeat an id: the later line wins)."""
    return _iter_lines(folder / INPUTS, torn_inside=True)


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


def manifest_problem(manifest: Any) -> str | None:
    """Why a parsed manifest.json is not one an orchestrator run wrote (None when it is):
    layout 2 on has `layout_version` and a run key; layout 1 (before run keys) a run id
    and the graph's hash."""
    if not isinstance(manifest, dict):
        return "is not a JSON object"
    if "layout_version" not in manifest:
        graph = manifest.get("graph")
        if isinstance(manifest.get("run_id"), str) and isinstance(graph, dict) and "hash" in graph:
            return None
        return "has neither a layout_version nor a run id and graph hash"
    if not isinstance(manifest["layout_version"], int):
        return "has a layout_version that is not a number"
    if manifest["layout_version"] > LAYOUT_VERSION:
        return None  # a newer orchestrator's: `check_layout` says so
    try:
        RunKey.model_validate(manifest.get("run_key"))
    except ValidationError:
        return "has no run key"
    return None


# A run's --out, by the rule every command's output folder follows (outfolder.py): with no
# manifest yet (a run killed while starting) a folder holding only a run's files is one.
RUN_FOLDER = OutputKind(
    what="a run folder",
    writer="a run",
    manifest_kind="a run manifest",
    manifest_problem=manifest_problem,
    owns=OWN_NAMES,
    bare=OWN_NAMES,
    manifest=MANIFEST,
)


def not_a_run_folder(path: Path) -> str | None:
    """Why the folder `path` is not a run folder, naming the file (None when it is one, or
    is empty): its manifest must be a run's, or, with none (a run killed while starting),
    it must hold only files a run writes."""
    return not_ours(path, RUN_FOLDER)


def is_run_folder(path: Path) -> bool:
    """A folder whose manifest is a run's, or holding only files a run writes."""
    return not_a_run_folder(path) is None


class RunFolder:
    """Opens a run folder for one writer, resuming it only under the same run key.

    Every read and write of its files goes through `disk.on_disk`: a disk that fails one
    raises StorageError (or DamagedRunFile) naming the file, never OSError."""

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
        self._stored_inputs: set[str] = set()  # ids inputs.jsonl holds or will

    # -- opening ------------------------------------------------------------------------

    def open(self, overwrite: bool) -> str | None:
        """Create the folder (or check it is one of ours) and take its writer lock; a note
        when the lock of a run that died was taken over.

        The lock comes before anything is deleted or rewritten, so a second run can neither
        wipe nor interleave with the first.
        """
        check_out(self.path, RUN_FOLDER, overwrite)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self.lock.acquire()
        except OSError as exc:
            advice = "a run writes its folder; choose a writable --out (copy it there to resume)"
            refused = read_only(self.path, exc, advice)
            if refused is None:
                raise storage_error(self.path, exc) from exc
            raise refused from None
        try:
            if overwrite:
                with on_disk(self.path):
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
                # Before any server is asked or "Resuming" said: a folder that cannot be
                # resumed is named now, not after the run has started.
                self._check_intact()
        except BaseException:
            self.lock.release()
            raise
        return self.lock.took_over()

    def has_manifest(self) -> bool:
        return self.manifest_path.is_file()

    def trace(self, run_id: str, graph_hash: str, run_key: str) -> TraceStore:
        return TraceStore(self.traces_path, run_id, graph_hash, run_key)

    def results(self) -> Iterator[ResultLine]:
        return result_lines(self.results_path)

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

    def _check_intact(self) -> None:
        """DamagedRunFile for a result line a run never writes or a trace SQLite finds
        damaged (a full check of its pages: it costs a read of the file, once a resume)."""
        for number, row in iter_lines(self.results_path):
            if not isinstance(row.get("id"), str | int) or "status" not in row:
                raise damaged_line(self.results_path, number, "a result line (no id or status)")
        if self.traces_path.is_file():
            check_intact(self.traces_path)

    def _clear(self) -> None:
        """Delete what a run wrote here but the lock it holds; anything else (a user's
        notes) stays."""
        clear_out(self.path, RUN_FOLDER, keep=(LOCK,))

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
        """Keep finished examples, ok or abstained (failed ones are tried again); True when
        resuming."""
        with on_disk(self.manifest_path, writing=False):
            resuming = self.manifest_path.is_file()
        tmp = self.results_path.with_suffix(".jsonl.tmp")
        with on_disk(tmp):
            with tmp.open("wb") as kept:
                # A read of results.jsonl the disk fails names that file (iter_lines).
                for row in iter_results(self.path):
                    # An abstained example is finished too: asking again would give the
                    # same unsure answer from the cache (only failed ones are retried).
                    if row.get("status") in ("ok", "abstained"):
                        self.done.add(str(row["id"]))
                        kept.write(orjson.dumps(row) + b"\n")
            os.replace(tmp, self.results_path)
        with on_disk(self.results_path):
            self._results = self.results_path.open("ab")
        with on_disk(self.inputs_path):
            self._inputs = self._open_inputs()
        return resuming

    def _open_inputs(self) -> IO[bytes]:
        """inputs.jsonl to append to, each id kept once: the ids it holds are remembered
        (an example retried or cut short by a kill is not written again), and a torn last
        line is cut so the next line does not glue onto it."""
        if self.inputs_path.is_file():
            self._stored_inputs.update(
                str(line["id"]) for line in _iter_lines(self.inputs_path, torn_inside=True)
            )
        handle = self.inputs_path.open("a+b")
        size = handle.seek(0, os.SEEK_END)
        if size:
            start = max(0, size - 65536)
            handle.seek(start)
            tail = handle.read()
            end = tail.rfind(b"\n")
            if not tail.endswith(b"\n") and (end >= 0 or start == 0):
                handle.truncate(start + end + 1)
        return handle

    def write_snapshot(self, snapshot: GraphSnapshot) -> None:
        """The graph file and every template it can render, as this run read them."""
        root = self.path / SNAPSHOT
        with on_disk(root):
            if root.exists():
                shutil.rmtree(root)
            prompts = root / SNAPSHOT_PROMPTS
            prompts.mkdir(parents=True)
            (root / SNAPSHOT_GRAPH).write_bytes(snapshot.source)
            for name, source in snapshot.templates.items():
                target = prompts.joinpath(*PurePosixPath(name).parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(source, encoding="utf-8")

    # -- writing ------------------------------------------------------------------------

    def write_input(self, row: Row) -> None:
        """Queue an example's inputs (once per id); written before any result line that
        needs them."""
        if row.id in self._stored_inputs:
            return
        self._stored_inputs.add(row.id)
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

    def write_result(self, line: ResultLine) -> None:
        """Queue one example's line; `flush` appends it (after the trace is written)."""
        self._pending.append(line.encode())

    def write_lines(self, lines: list[EncodedLine]) -> None:
        """Queue result lines a worker encoded (`ResultLine.encode`), as `write_result` does."""
        self._pending.extend(lines)

    def flush(self) -> None:
        """Append the queued lines and push them to the OS, so a crash cannot tear them."""
        if self._pending_inputs and self._inputs is not None:
            with on_disk(self.inputs_path):
                self._inputs.write(b"".join(self._pending_inputs))
                self._inputs.flush()
            self._pending_inputs.clear()
        if self._pending and self._results is not None:
            with on_disk(self.results_path):
                self._results.write(b"".join(self._pending))
                self._results.flush()
            self._pending.clear()

    def write_manifest(self, manifest: Manifest) -> None:
        """Replace manifest.json with this record (atomically), stamped with the time."""
        manifest.updated = time.time()
        with on_disk(self.manifest_path):
            write_json(self.manifest_path, manifest.as_written())

    def read_manifest(self) -> Manifest | None:
        """manifest.json as a record (None when there is none); RunFolderError when it is
        not a run manifest."""
        with on_disk(self.manifest_path, writing=False):
            if not self.manifest_path.is_file():
                return None
            data = self._read_manifest()
        try:
            return Manifest.from_disk(data)
        except ValidationError as exc:
            raise DamagedRunFile(
                f"{self.manifest_path} is not a run manifest ({first_problem(exc)}).",
                str(self.manifest_path),
            ) from None

    def write_summary(self, summary: Summary) -> None:
        """Replace summary.json with this record (atomically)."""
        with on_disk(self.summary_path):
            write_json(self.summary_path, summary.as_written())

    def read_summary(self) -> Summary | None:
        """summary.json as a record (None when there is none); DamagedRunFile when it is not
        a summary."""
        with on_disk(self.summary_path, writing=False):
            if not self.summary_path.is_file():
                return None
            try:
                return Summary.model_validate(read_json(self.summary_path))
            except (orjson.JSONDecodeError, ValidationError) as exc:
                raise DamagedRunFile(
                    f"{self.summary_path} is not a run summary ({exc}).", str(self.summary_path)
                ) from None

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
