"""What every `RunStore` (store/protocol.py) must do, checked the same way for each one.

In the spirit of langgraph's checkpointer conformance tests: one suite, parametrized over the
stores, each test driving only the protocol. A store that keeps a run across instances (the
run folder) is also checked for the writer lock, resume, run-key refusal and overwrite; one
with files, for what it says of a damaged file. A new store (Postgres, an object store) joins
by adding a `StoreKind` below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.errors import DamagedRunFile, RunFolderError, RunKeyMismatch
from orchestrator.store.folder import RunFolder
from orchestrator.store.protocol import MemoryStore, RunStore
from orchestrator.store.reader import RunReader
from orchestrator.store.records import (
    Counts,
    GraphSnapshot,
    Manifest,
    ManifestDataset,
    ManifestGraph,
    ManifestPackage,
    ManifestParameters,
    ManifestPart,
    OutageEntry,
    ReplicaEntry,
    ResultLine,
    ServerEntry,
    Summary,
    WorkerEntry,
)
from orchestrator.store.runkey import RunKey
from orchestrator.store.trace import NodeRecord

STATIC = {"graph": "g1", "data": "d1", "param k": "1"}
KEY = RunKey.from_components({**STATIC, "model judge": "m1", "endpoint judge": "http://a"})
OTHER_MODEL = RunKey.from_components({**STATIC, "model judge": "m2", "endpoint judge": "http://a"})
OTHER_DATA = RunKey.from_components({**STATIC, "data": "d2"})


@dataclass(frozen=True)
class StoreKind:
    name: str
    make: Callable[[Path], RunStore]  # the store at this place (same place: the same run)
    persistent: bool  # keeps a run for the next instance: lock, resume, key, overwrite
    files: Path | None = None  # where its files are, under the place (None: no files)


KINDS = [
    StoreKind("folder", lambda place: RunFolder(place / "run"), True, Path("run")),
    StoreKind("memory", lambda place: MemoryStore(), False),
]


@pytest.fixture(params=KINDS, ids=[kind.name for kind in KINDS])
def kind(request: pytest.FixtureRequest) -> StoreKind:
    return request.param  # type: ignore[no-any-return]


def persistent(kind: StoreKind) -> None:
    if not kind.persistent:
        pytest.skip(f"the {kind.name} store keeps nothing for a next instance")


def with_files(kind: StoreKind) -> Path:
    if kind.files is None:
        pytest.skip(f"the {kind.name} store has no files to damage")
    return kind.files


LINES = [
    ResultLine.ok("e1", {"score": 7, "verdict": {"label": "yes", "p": 0.5}, "tags": ["a"]}),
    ResultLine.failed("e2", 2, "judge: the reply was not valid JSON"),
    ResultLine.ok("e3", {"score": None, "note": "ünïcode ✓"}),
]


def manifest(key: RunKey = KEY, **fields: object) -> Manifest:
    """A manifest with every field a finished run sets."""
    return Manifest.model_validate(
        {
            "layout_version": 2,
            "run_id": "r1",
            "run_key": key.model_dump(),
            "graph": {"path": "g.yaml", "name": "g", "hash": "h"},
            "dataset": {"path": "d.jsonl", "hash": "d1"},
            "model": "m1",
            "parameters": {"concurrency": 4, "params": {"k": 1}},
            "package": {"name": "orchestrator", "version": "0"},
            "servers": {"judge": {"base_url": "http://a", "structured_output": "server"}},
            "status": "complete",
            "error": None,
            "cache_error": "replies not saved to the cache: disk full",
            "resumed": False,
            "started": 1.0,
            "ended": 3.5,
            "wall_seconds": 2.5,
            "counts": {"examples_ok": 2, "examples_failed": 1, "requests": 9, "examples": 3},
            "means": {"score": 7.0},
            "outages": [{"server": "http://a", "seconds": 1.5}],
            "replicas": [{"base_url": "http://a", "requests": 9}],
            "workers": [{"name": "w0", "pid": 1}],
            **fields,
        }
    )


def finished_run(store: RunStore, lines: list[ResultLine], key: RunKey = KEY) -> None:
    """A whole run through the protocol: open, key, begin, lines, manifest, close, release."""
    store.open(overwrite=False)
    try:
        store.check_key(key)
        store.begin()
        for line in lines:
            store.write_result(line)
        store.flush()
        store.write_manifest(manifest(key))
        store.close()
    finally:
        store.release()


# -- open, lock, release ----------------------------------------------------------------------


def test_a_new_store_opens_empty(kind: StoreKind, tmp_path: Path) -> None:
    store = kind.make(tmp_path)
    assert store.open(overwrite=False) is None  # no dead run's lock was taken over
    try:
        assert not store.has_manifest() and store.read_manifest() is None
        assert store.begin() is False  # nothing to resume
        assert store.done == set() and list(store.results()) == []
        assert store.describe()
        store.close()
    finally:
        store.release()


def test_one_writer_at_a_time_until_released(kind: StoreKind, tmp_path: Path) -> None:
    persistent(kind)
    first = kind.make(tmp_path)
    first.open(overwrite=False)
    second = kind.make(tmp_path)
    with pytest.raises(RunFolderError, match="another run"):
        second.open(overwrite=False)
    first.release()
    assert second.open(overwrite=False) is None
    second.release()


# -- the graph's snapshot -----------------------------------------------------------------------


def test_the_graph_snapshot_record_is_kept_as_given(kind: StoreKind, tmp_path: Path) -> None:
    """A store takes the graph as a record (`GraphSnapshot`), not the compiled graph; one
    with files keeps it where a reader finds it, byte for byte."""
    snapshot = GraphSnapshot(b"name: g\n", {"judge.jinja": "Rate {{ text }}", "sub/a.jinja": "ä"})
    store = kind.make(tmp_path)
    store.open(overwrite=False)
    try:
        store.begin()
        store.write_snapshot(snapshot)
        store.write_snapshot(snapshot)  # a resume writes it again over the first
        store.close()
    finally:
        store.release()
    if kind.files is None:
        return
    reader = RunReader(tmp_path / kind.files)
    assert reader.snapshot_graph is not None
    assert reader.snapshot_graph.read_bytes() == snapshot.source
    for name, text in snapshot.templates.items():
        assert (reader.snapshot_prompts / name).read_text(encoding="utf-8") == text


# -- result lines -----------------------------------------------------------------------------


def test_result_lines_read_back_as_written(kind: StoreKind, tmp_path: Path) -> None:
    store = kind.make(tmp_path)
    store.open(overwrite=False)
    try:
        store.begin()
        store.write_result(LINES[0])
        store.write_lines([LINES[1].encode()])  # as a worker hands them over
        store.write_result(LINES[2])
        store.flush()
        back = list(store.results())
        store.close()
    finally:
        store.release()
    assert [type(line) for line in back] == [ResultLine] * 3
    assert [line.as_dict() for line in back] == [line.as_dict() for line in LINES]
    assert back[0].outputs == {"score": 7, "verdict": {"label": "yes", "p": 0.5}, "tags": ["a"]}
    assert (back[1].status, back[1].row, back[1].error) == ("failed", 2, LINES[1].error)
    assert back[2].outputs["note"] == "ünïcode ✓" and back[2].outputs["score"] is None


def test_a_line_is_encoded_once_the_same_everywhere() -> None:
    line = ResultLine.ok("e1", {"score": 7})
    assert line.encode() == b'{"id":"e1","status":"ok","score":7}\n'
    failed = ResultLine.failed("e2", 4, "boom")
    assert failed.encode() == b'{"id":"e2","status":"failed","row":4,"error":"boom"}\n'
    assert ResultLine.model_validate_json(failed.encode()) == failed


# -- manifest ---------------------------------------------------------------------------------


def test_manifest_round_trip_keeps_every_field(kind: StoreKind, tmp_path: Path) -> None:
    store = kind.make(tmp_path)
    store.open(overwrite=False)
    try:
        written = manifest()
        store.write_manifest(written)
        assert store.has_manifest()
        back = store.read_manifest()
    finally:
        store.release()
    assert back is not None and back.updated is not None  # stamped by the store
    assert back.as_written() == written.as_written()
    assert back.run_key == KEY and back.counts == written.counts
    assert isinstance(back.counts, Counts) and back.counts.tokens == 0
    assert back.cache_error and back.workers == [{"name": "w0", "pid": 1}]


def test_the_manifest_parts_read_back_as_their_records(kind: StoreKind, tmp_path: Path) -> None:
    """Every part a run writes is a typed record, and reads back as one (issue 36)."""
    written = manifest(
        graph=ManifestGraph(path="g.yaml", name="g", hash="h", snapshot="snapshot/graph"),
        dataset=ManifestDataset(kind="records", rows=3, hash="d1", inputs="inputs.jsonl"),
        parameters=ManifestParameters(concurrency="default", params={"k": 1}, workers=2),
        package=ManifestPackage(name="orchestrator", version="0", python="3.11"),
        servers={"http://a m1": ServerEntry(base_url=["http://a", "http://b"], model="m1")},
        outages=[OutageEntry(base_url="http://a", seconds=1.5, recovered=True)],
        replicas=[ReplicaEntry(base_url="http://a", requests=9, limit=4, limit_mode="fixed")],
        workers=[WorkerEntry(worker="worker-1", pid=11, host="h", examples=3)],
    )
    store = kind.make(tmp_path)
    store.open(overwrite=False)
    try:
        store.write_manifest(written)
        back = store.read_manifest()
    finally:
        store.release()
    assert back is not None and back.as_written() == written.as_written()
    assert back.graph.snapshot == "snapshot/graph" and back.dataset.rows == 3
    assert (back.parameters.params, back.parameters.workers) == ({"k": 1}, 2)
    assert back.package.python == "3.11"
    assert back.servers["http://a m1"].base_url == ["http://a", "http://b"]
    assert back.outages[0].seconds == 1.5 and back.replicas[0].limit == 4
    assert back.workers[0].examples == 3
    parts = (back.graph, back.dataset, back.parameters, back.package, back.outages[0])
    assert all(isinstance(part, ManifestPart) for part in parts)
    assert all(isinstance(part, ManifestPart) for part in (*back.replicas, *back.workers))


def test_a_later_manifest_replaces_the_earlier(kind: StoreKind, tmp_path: Path) -> None:
    store = kind.make(tmp_path)
    store.open(overwrite=False)
    try:
        store.write_manifest(manifest(status="running"))
        store.write_manifest(manifest(status="interrupted", error="stopped"))
        back = store.read_manifest()
    finally:
        store.release()
    assert back is not None and (back.status, back.error) == ("interrupted", "stopped")


def test_a_manifest_of_a_run_that_never_started_holds_only_what_it_knew(
    kind: StoreKind, tmp_path: Path
) -> None:
    store = kind.make(tmp_path)
    store.open(overwrite=False)
    try:
        store.write_manifest(Manifest(layout_version=2, run_key=KEY, status="error", error="x"))
        back = store.read_manifest()
    finally:
        store.release()
    assert back is not None
    assert set(back.as_written()) == {"layout_version", "run_key", "status", "error", "updated"}


def test_summary_round_trip_keeps_the_aggregates(kind: StoreKind, tmp_path: Path) -> None:
    store = kind.make(tmp_path)
    store.open(overwrite=False)
    try:
        assert store.read_summary() is None
        written = Summary.model_validate(
            {
                "graph": "g",
                "counts": {"examples_ok": 2, "requests": 5},
                "means": {"score": 6.5},
                "elo": {"a": {"rating": 1012.5, "interval": [990.0, 1030.0]}},
                "agreement": None,
            }
        )
        store.write_summary(written)
        back = store.read_summary()
    finally:
        store.release()
    assert back is not None and back.as_written() == written.as_written()
    assert back.aggregates == {
        "elo": {"a": {"rating": 1012.5, "interval": [990.0, 1030.0]}},
        "agreement": None,
    }
    assert back.counts.examples_ok == 2 and back.counts.tokens == 0


# -- resume -----------------------------------------------------------------------------------


def test_resume_keeps_finished_examples_and_retries_failed_ones(
    kind: StoreKind, tmp_path: Path
) -> None:
    persistent(kind)
    finished_run(kind.make(tmp_path), LINES)
    again = kind.make(tmp_path)
    again.open(overwrite=False)
    try:
        again.check_key(KEY)
        assert again.begin() is True
        assert again.done == {"e1", "e3"}  # e2 failed: it runs again
        assert [line.id for line in again.results()] == ["e1", "e3"]
        again.write_result(ResultLine.ok("e2", {"score": 1}))
        again.flush()
        assert [line.id for line in again.results()] == ["e1", "e3", "e2"]
        again.close()
    finally:
        again.release()


def test_a_store_that_keeps_nothing_never_resumes(kind: StoreKind, tmp_path: Path) -> None:
    if kind.persistent:
        pytest.skip(f"the {kind.name} store resumes")
    finished_run(kind.make(tmp_path), LINES)
    fresh = kind.make(tmp_path)
    fresh.open(overwrite=False)
    try:
        fresh.check_key(OTHER_MODEL)  # nothing to compare with
        assert fresh.begin() is False and fresh.done == set()
        assert list(fresh.results()) == [] and not fresh.has_manifest()
    finally:
        fresh.release()


def test_trace_values_of_an_earlier_run_resume_under_the_same_key(
    kind: StoreKind, tmp_path: Path
) -> None:
    store = kind.make(tmp_path)
    store.open(overwrite=False)
    trace = store.trace("r1", "h", KEY.digest)
    trace.record(NodeRecord(example_id="e1", node="judge", value={"score": 7}))
    trace.flush()
    # The run's own rows are not resume values: a node runs once per example in a run.
    assert trace.finished_value("e1", "judge") == (False, None)
    trace.close()
    store.release()
    if not kind.persistent:
        return
    later = kind.make(tmp_path)
    later.open(overwrite=False)
    try:
        again = later.trace("r2", "h", KEY.digest)
        assert again.finished_value("e1", "judge") == (True, {"score": 7})
        again.close()
        other = later.trace("r3", "h", OTHER_MODEL.digest)
        assert other.finished_value("e1", "judge") == (False, None)
        other.close()
    finally:
        later.release()


# -- run key ----------------------------------------------------------------------------------


def test_another_key_is_refused_naming_what_changed(kind: StoreKind, tmp_path: Path) -> None:
    persistent(kind)
    finished_run(kind.make(tmp_path), LINES)
    again = kind.make(tmp_path)
    again.open(overwrite=False)
    try:
        again.check_key(KEY.static(), static_only=True)
        again.check_key(KEY)
        with pytest.raises(RunKeyMismatch, match="model judge: m1 → m2") as refused:
            again.check_key(OTHER_MODEL)
        assert refused.value.changes == ["model judge: m1 → m2"]
        # Before a server is asked only the static part is compared: the model passes...
        again.check_key(OTHER_MODEL.static(), static_only=True)
        # ...and other data does not.
        with pytest.raises(RunKeyMismatch, match="data changed"):
            again.check_key(OTHER_DATA.static(), static_only=True)
    finally:
        again.release()


# -- overwrite --------------------------------------------------------------------------------


def test_overwrite_starts_the_run_again(kind: StoreKind, tmp_path: Path) -> None:
    persistent(kind)
    finished_run(kind.make(tmp_path), LINES)
    again = kind.make(tmp_path)
    again.open(overwrite=True)
    try:
        again.check_key(OTHER_MODEL)  # nothing left to compare with
        assert not again.has_manifest() and again.read_manifest() is None
        assert again.begin() is False and again.done == set()
        assert list(again.results()) == []
        again.close()
    finally:
        again.release()


def test_overwrite_deletes_only_what_a_run_wrote(kind: StoreKind, tmp_path: Path) -> None:
    folder = tmp_path / with_files(kind)
    finished_run(kind.make(tmp_path), LINES)
    (folder / "notes.txt").write_text("mine")
    again = kind.make(tmp_path)
    again.open(overwrite=True)
    again.release()
    assert (folder / "notes.txt").read_text() == "mine"
    assert not (folder / "results.jsonl").exists() and not (folder / "manifest.json").exists()


def test_overwrite_refuses_what_is_not_a_run(kind: StoreKind, tmp_path: Path) -> None:
    folder = tmp_path / with_files(kind)
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    (folder / "results.jsonl").write_text("someone else's\n")
    with pytest.raises(RunFolderError, match=r"notes\.txt"):
        kind.make(tmp_path).open(overwrite=True)
    assert (folder / "notes.txt").read_text() == "mine"
    assert (folder / "results.jsonl").read_text() == "someone else's\n"  # nothing deleted


# -- damaged files ----------------------------------------------------------------------------


def test_a_torn_last_line_is_skipped(kind: StoreKind, tmp_path: Path) -> None:
    folder = tmp_path / with_files(kind)
    finished_run(kind.make(tmp_path), LINES[:1])
    with (folder / "results.jsonl").open("ab") as results:
        results.write(b'{"id": "e9", "sta')  # a killed run's last write
    again = kind.make(tmp_path)
    again.open(overwrite=False)
    try:
        assert again.begin() is True and again.done == {"e1"}
        assert [line.id for line in again.results()] == ["e1"]
    finally:
        again.release()


def test_a_damaged_result_line_is_named(kind: StoreKind, tmp_path: Path) -> None:
    folder = tmp_path / with_files(kind)
    finished_run(kind.make(tmp_path), LINES)
    path = folder / "results.jsonl"
    text = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(text[0] + b"not json\n" + b"".join(text[1:]))
    with pytest.raises(DamagedRunFile, match=r"results\.jsonl:2"):
        kind.make(tmp_path).open(overwrite=False)


def test_a_damaged_manifest_is_refused(kind: StoreKind, tmp_path: Path) -> None:
    folder = tmp_path / with_files(kind)
    finished_run(kind.make(tmp_path), LINES)
    (folder / "manifest.json").write_text('{"layout_version": 2, "run_key": ')
    with pytest.raises(RunFolderError, match=r"manifest\.json"):
        kind.make(tmp_path).open(overwrite=False)


def test_a_damaged_trace_is_refused_before_the_run_starts(kind: StoreKind, tmp_path: Path) -> None:
    folder = tmp_path / with_files(kind)
    finished_run(kind.make(tmp_path), LINES)
    (folder / "traces.sqlite").write_bytes(b"SQLite format 3\x00" + b"\x07" * 4096)
    with pytest.raises(DamagedRunFile, match=r"traces\.sqlite"):
        kind.make(tmp_path).open(overwrite=False)
