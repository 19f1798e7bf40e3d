"""Typed records: a real run's folder read back through `RunReader` gives the models that
were written; unknown attempt kinds and newer layouts are refused; layout-1 folders read."""

from __future__ import annotations

import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, Reply, schema_responder
from helpers import is_canary, judge_graph, run_graph, trace_records, write_graph, write_rows
from pydantic import BaseModel, ValidationError

from orchestrator import RunFolderError
from orchestrator.report import build_report, payload
from orchestrator.store.reader import RunReader, TraceReader
from orchestrator.store.records import Attempt, Manifest, NodeRun, ResultLine, Summary
from orchestrator.store.trace import (
    ATTEMPT_COLUMNS,
    IN_FLIGHT_COLUMNS,
    NODE_RUN_COLUMNS,
    RUN_COLUMNS,
    SCHEMA_VERSION,
    NodeRecord,
    TraceStore,
)

STORE_FIELDS = {"id", "run_id", "graph_hash", "run_key"}  # set by the store, not the node


def _judge(body: dict[str, Any]) -> Reply:
    """Valid replies, except the first try for row `t0`: out of range, so it is re-asked."""
    if is_canary(body):
        return schema_responder(body)
    text = "\n".join(m["content"] for m in body["messages"])
    if "t0" in text and len(body["messages"]) <= 2:
        return Reply(content='{"score": 11}')
    return Reply(content=json.dumps({"score": 4}))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("records")
    graph = write_graph(root / "g", judge_graph(), {"judge.jinja": "Rate.\n<<{{ text }}>>"})
    data = write_rows(root / "rows.jsonl", [{"id": f"e{i}", "text": f"t{i}"} for i in range(3)])
    with FakeServer(_judge) as server:
        run_graph(graph, data, root / "run", server.base_url)
    return root / "run"


def test_result_lines_manifest_and_summary_read_back_as_written(run_dir: Path) -> None:
    reader = RunReader(run_dir)
    written = [
        ResultLine.model_validate(json.loads(line))
        for line in (run_dir / "results.jsonl").read_text().splitlines()
    ]
    lines = list(reader.results())
    assert lines == written
    assert sorted(line.id for line in lines) == ["e0", "e1", "e2"]
    assert all(line.status == "ok" and line.outputs["score"] == 4 for line in lines)

    manifest = reader.manifest
    assert isinstance(manifest, Manifest)
    assert manifest == Manifest.model_validate_json((run_dir / "manifest.json").read_bytes())
    assert manifest.layout_version == 2 and manifest.run_key is not None
    assert manifest.counts.examples_ok == 3 and manifest.counts.examples_failed == 0

    summary = reader.summary
    assert isinstance(summary, Summary)
    assert summary == Summary.model_validate_json((run_dir / "summary.json").read_bytes())
    assert summary.means["score"] == pytest.approx(4.0)
    assert reader.notes == []
    assert sorted(i.id for i in reader.inputs()) == ["e0", "e1", "e2"]
    assert reader.snapshot_graph is not None and reader.snapshot_graph.is_file()


def test_node_runs_of_a_real_run_carry_typed_attempts_and_schema(run_dir: Path) -> None:
    (judge,) = RunReader(run_dir).node_runs("e0", "judge")
    assert isinstance(judge, NodeRun)
    assert judge.value == {"score": 4}
    assert [type(a) for a in judge.attempts] == [Attempt, Attempt]
    assert [a.kind for a in judge.attempts] == ["invalid", "ok"]
    assert "less than or equal to 10" in (judge.attempts[0].error or "")
    assert judge.attempts[0].raw == '{"score": 11}'
    assert judge.schema is not None and list(judge.schema["properties"]) == ["score"]
    assert judge.messages and "<<t0>>" in judge.messages[-1]["content"]
    assert judge.run_key == RunReader(run_dir).manifest.run_key.digest  # type: ignore[union-attr]
    (other,) = RunReader(run_dir).node_runs("e1", "judge")
    assert [a.kind for a in other.attempts] == ["ok"]


def test_a_node_run_written_is_the_node_run_read(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"b": {}, "a": {}}}  # key order is kept
    written = NodeRecord(
        example_id="x",
        node="judge",
        item=2,
        messages=[{"role": "user", "content": "hi"}],
        model="m",
        endpoint="http://e/v1",
        request={"params": {"temperature": 0.0}, "structured": "server"},
        schema=schema,
    )
    written.value = {"a": 1, "b": [1, 2]}
    written.raw = ['{"a": 1}', '{"a": 1, "b": [1, 2]}']
    written.attempts = [
        Attempt(number=1, kind="invalid", error="a: missing", raw='{"a": 1}'),
        Attempt(number=2, kind="ok", raw='{"a": 1, "b": [1, 2]}', finish_reason="stop"),
    ]
    written.prompt_tokens, written.completion_tokens, written.latency = 12, 5, 0.25
    store = TraceStore(tmp_path / "traces.sqlite", "run-1", "gh", "key")
    store.record(written)
    store.close()
    with TraceReader.open(tmp_path / "traces.sqlite") as trace:
        (read,) = trace.node_runs()
    assert read.model_dump(exclude=STORE_FIELDS) == written.model_dump(exclude=STORE_FIELDS)
    assert list(read.schema or {}) == ["type", "properties"]
    assert list((read.schema or {})["properties"]) == ["b", "a"]
    assert (read.run_id, read.graph_hash, read.run_key) == ("run-1", "gh", "key")
    assert read.id == 1


def test_attempt_kinds_are_checked_when_built() -> None:
    with pytest.raises(ValueError, match="kind"):
        Attempt(number=1, kind="retry")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="examlpe_id"):
        NodeRecord(examlpe_id="x", node="n")  # type: ignore[call-arg]


def test_an_unknown_attempt_kind_in_a_trace_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "traces.sqlite"
    store = TraceStore(path, "r", "g", "k")
    store.record(NodeRecord(example_id="x", node="judge", attempts=[Attempt(number=1, kind="ok")]))
    store.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE attempts SET kind='teleport'")
    with TraceReader.open(path) as trace, pytest.raises(RunFolderError) as caught:
        list(trace.node_runs())
    message = str(caught.value)
    assert "'teleport'" in message and "newer orchestrator" in message and "judge" in message
    # The dict view (trace --format jsonl) reads through the same models.
    with pytest.raises(RunFolderError, match="teleport"):
        trace_records(path)


def _make_layout_1(run_dir: Path, target: Path) -> Path:
    """The run folder as a layout-1 orchestrator left it: no snapshot, no inputs, no run key
    in the manifest, a trace without the request/schema/run-key columns."""
    shutil.copytree(run_dir, target)
    shutil.rmtree(target / "snapshot")
    (target / "inputs.jsonl").unlink()
    manifest = json.loads((target / "manifest.json").read_text())
    for key in ("layout_version", "run_key"):
        manifest.pop(key, None)
    (target / "manifest.json").write_text(json.dumps(manifest))
    with sqlite3.connect(target / "traces.sqlite") as db:
        for column in ("request", "schema_hash", "run_key"):
            db.execute(f"ALTER TABLE node_runs DROP COLUMN {column}")
        db.execute("ALTER TABLE runs DROP COLUMN run_key")
    return target


def test_a_layout_1_folder_still_reads(run_dir: Path, tmp_path: Path) -> None:
    old = RunReader(_make_layout_1(run_dir, tmp_path / "old"))
    assert old.layout_version == 1 and old.manifest.run_key is None
    assert list(old.results()) == list(RunReader(run_dir).results())
    assert list(old.inputs()) == [] and old.snapshot_graph is None
    (judge,) = old.node_runs("e0", "judge")
    assert [a.kind for a in judge.attempts] == ["invalid", "ok"]
    assert judge.run_key is None and judge.schema is None and judge.request is None
    assert [r.run_key for r in old.runs()] == [None]
    report = build_report(old.path).read_text(encoding="utf-8")
    assert '"e0"' in report


def test_a_newer_layout_is_refused(run_dir: Path, tmp_path: Path) -> None:
    newer = tmp_path / "newer"
    shutil.copytree(run_dir, newer)
    manifest = json.loads((newer / "manifest.json").read_text())
    manifest["layout_version"] = 99
    (newer / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(RunFolderError, match="newer orchestrator"):
        _ = RunReader(newer).manifest


def test_a_model_field_without_a_report_key_fails_loudly() -> None:
    class Wider(NodeRun):
        confidence: float = 0.0

    with pytest.raises(RuntimeError, match="confidence"):
        payload._check(Wider, payload.RUN_KEYS)

    class Narrow(BaseModel):
        number: int

    with pytest.raises(RuntimeError, match="drop"):
        payload._check(Narrow, payload.ATTEMPT_KEYS)  # type: ignore[arg-type]


# -- the trace's layout: one column list, a version, a migration from every earlier layout ----

# The first layout's DDL as orchestrator wrote it before any column was added; each later
# layout added the columns of one step (store/trace.py MIGRATIONS), by these statements.
LAYOUT_1 = """
CREATE TABLE runs (
  run_id TEXT PRIMARY KEY, started REAL, graph TEXT, graph_hash TEXT, model TEXT,
  base_url TEXT, server TEXT, structured TEXT, settings BLOB
);
CREATE TABLE node_runs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id TEXT, example_id TEXT, node TEXT, item INTEGER, status TEXT,
  value BLOB, error TEXT, messages BLOB, raw BLOB, model TEXT, endpoint TEXT,
  cached INTEGER, prompt_tokens INTEGER, completion_tokens INTEGER, latency REAL,
  started REAL, finished REAL, graph_hash TEXT
);
CREATE TABLE attempts (
  node_run_id INTEGER, number INTEGER, kind TEXT, error TEXT, raw TEXT,
  finish_reason TEXT, latency REAL, prompt_tokens INTEGER, completion_tokens INTEGER,
  cached INTEGER
);
"""
LATER_LAYOUTS = {
    2: "ALTER TABLE node_runs ADD COLUMN request BLOB; ALTER TABLE node_runs ADD COLUMN"
    " schema_hash TEXT; CREATE TABLE schemas (hash TEXT PRIMARY KEY, schema BLOB);",
    3: "ALTER TABLE node_runs ADD COLUMN run_key TEXT; ALTER TABLE runs ADD COLUMN run_key TEXT;",
    4: "ALTER TABLE attempts ADD COLUMN sample INTEGER;",
    5: "ALTER TABLE attempts ADD COLUMN replica TEXT;",
    6: "CREATE TABLE in_flight (run_id TEXT, example_id TEXT, node TEXT, item INTEGER,"
    " started REAL, server TEXT, attempt INTEGER, attempt_started REAL, replica TEXT,"
    " failed BLOB);",
    7: "ALTER TABLE node_runs ADD COLUMN abstain BLOB;",
}


def _old_trace(path: Path, layout: int, version: int) -> Path:
    """A trace as the orchestrator of `layout` left it, with one finished node run, its
    PRAGMA user_version `version` (0: written before versions were recorded)."""
    with sqlite3.connect(path) as db:
        db.executescript(LAYOUT_1)
        for step in range(2, layout + 1):
            db.executescript(LATER_LAYOUTS[step])
        db.execute(
            "INSERT INTO runs (run_id, started, graph, graph_hash, settings)"
            " VALUES ('old', 1.0, 'g.yaml', 'h', ?)",
            (b'{"timeout": 5}',),
        )
        db.execute(
            "INSERT INTO node_runs (run_id, example_id, node, item, status, value, raw, model,"
            " cached, prompt_tokens, completion_tokens, latency, started, finished, graph_hash)"
            " VALUES ('old', 'e1', 'judge', -1, 'ok', ?, ?, 'm', 0, 3, 4, 0.5, 1.0, 2.0, 'h')",
            (b'{"score": 3}', b'["{\\"score\\": 3}"]'),
        )
        db.execute(
            "INSERT INTO attempts (node_run_id, number, kind, raw, latency, prompt_tokens,"
            " completion_tokens, cached) VALUES (1, 1, 'ok', '{\"score\": 3}', 0.5, 3, 4, 0)"
        )
        db.execute(f"PRAGMA user_version = {version}")
    return path


def _columns(path: Path, table: str) -> list[str]:
    with closing(sqlite3.connect(path)) as db:
        return [row[1] for row in db.execute(f"PRAGMA table_info({table})")]


def _version(path: Path) -> int:
    with closing(sqlite3.connect(path)) as db:
        return int(db.execute("PRAGMA user_version").fetchone()[0])


@pytest.mark.parametrize("layout", range(1, SCHEMA_VERSION + 1))
def test_a_trace_of_every_earlier_layout_opens_migrates_and_reads(
    tmp_path: Path, layout: int
) -> None:
    path = _old_trace(tmp_path / "traces.sqlite", layout, version=0)
    # Read-only first: nothing is changed, the missing columns read as not recorded.
    with TraceReader.open(path) as reader:
        (old,) = reader.node_runs()
        assert [r.run_id for r in reader.runs()] == ["old"]
        assert reader.in_flight() == []  # none recorded (layout 5 and older), none made up
    assert old.value == {"score": 3} and old.raw == ['{"score": 3}']
    assert [(a.kind, a.prompt_tokens) for a in old.attempts] == [("ok", 3)]
    assert _version(path) == 0
    # A writer migrates it: every column of the records, the version recorded.
    store = TraceStore(path, "new", "h", "key")
    assert store.layout == 0
    store.start_run(graph="g.yaml", model="m", settings={"timeout": 5})
    store.record(
        NodeRecord(
            example_id="e2",
            node="judge",
            value={"score": 5},
            request={"params": {"n": 1}},
            attempts=[Attempt(number=1, kind="ok", raw="x", sample=0, replica="http://a")],
        )
    )
    store.close()
    assert _version(path) == SCHEMA_VERSION
    assert {c.name for c in NODE_RUN_COLUMNS} == set(_columns(path, "node_runs"))
    assert {c.name for c in ATTEMPT_COLUMNS} == set(_columns(path, "attempts"))
    assert {c.name for c in RUN_COLUMNS} == set(_columns(path, "runs"))
    assert {c.name for c in IN_FLIGHT_COLUMNS} == set(_columns(path, "in_flight"))
    with TraceReader.open(path) as reader:
        first, second = reader.node_runs()
        runs = reader.runs()
    assert [(r.run_id, r.run_key, r.settings) for r in runs] == [
        ("old", None, {"timeout": 5}),
        ("new", "key", {"timeout": 5}),
    ]
    assert first.value == {"score": 3} and first.run_key is None and first.request is None
    assert second.value == {"score": 5} and second.run_key == "key"
    assert second.request == {"params": {"n": 1}}
    assert (second.attempts[0].sample, second.attempts[0].replica) == (0, "http://a")
    # The next open finds it current and changes nothing.
    again = TraceStore(path, "again", "h", "key")
    assert again.layout == SCHEMA_VERSION
    assert again.finished_value("e2", "judge") == (True, {"score": 5})
    again.close()


def test_a_new_trace_is_made_from_the_records_at_the_current_version(tmp_path: Path) -> None:
    path = tmp_path / "traces.sqlite"
    TraceStore(path, "r", "h", "k").close()
    assert _version(path) == SCHEMA_VERSION
    # The columns are the records' fields (attempts have their own table; the schema is
    # stored once, by hash), in one list for the DDL, the rows and the reader.
    own = set(NodeRun.model_fields) - {"attempts", "schema"}
    assert set(_columns(path, "node_runs")) == own | {"schema_hash"}
    assert set(_columns(path, "attempts")) == set(Attempt.model_fields) | {"node_run_id"}


def test_a_trace_from_a_newer_orchestrator_is_not_written(tmp_path: Path) -> None:
    path = _old_trace(tmp_path / "traces.sqlite", SCHEMA_VERSION, version=SCHEMA_VERSION + 1)
    with pytest.raises(RunFolderError, match="newer orchestrator"):
        TraceStore(path, "r", "h", "k")
    assert _version(path) == SCHEMA_VERSION + 1


# -- the manifest: every key declared; an older or newer one's unknown keys kept --------------


def test_the_manifest_declares_every_key_a_run_writes(run_dir: Path) -> None:
    written = json.loads((run_dir / "manifest.json").read_text())
    assert set(written) <= set(Manifest.model_fields) - {"extra"}
    manifest = RunReader(run_dir).manifest
    assert manifest.extra == {} and manifest.updated is not None
    assert manifest.replicas and manifest.package["name"] == "orchestrator"
    assert manifest.as_written() == written


def test_unknown_manifest_keys_are_kept_aside_and_written_back(tmp_path: Path) -> None:
    old = {
        "layout_version": 2,
        "run_id": "r",
        "status": "complete",
        "counts": {"examples_ok": 1, "tokens": 9, "examples": 1},
        "gpu": {"name": "A100"},  # a key this orchestrator never wrote
    }
    manifest = Manifest.from_disk(old)
    assert manifest.extra == {"gpu": {"name": "A100"}}
    assert manifest.counts.examples_ok == 1 and manifest.counts.examples == 1
    written = manifest.as_written()
    assert written["gpu"] == {"name": "A100"} and "extra" not in written
    assert {k: v for k, v in written.items() if k != "counts"} == {
        k: v for k, v in old.items() if k != "counts"
    }
    # Only a manifest read from disk has keys aside: a run cannot write an undeclared one.
    with pytest.raises(ValidationError, match="gpu"):
        Manifest(gpu="A100")  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="gpu"):
        Manifest.model_validate(old)


def test_counts_keep_the_model_dump_of_the_model_they_were() -> None:
    """`Counts` became a slotted dataclass; `manifest.counts.model_dump()` (a pydantic
    model's method, used by callers of `orc.run`) still returns the stored counters."""
    from orchestrator.store.records import Counts

    counts = Counts(examples_ok=3, prompt_tokens=5, completion_tokens=7)
    dumped = counts.model_dump()
    assert dumped == counts.as_dict()
    assert dumped["examples_ok"] == 3 and dumped["tokens"] == 12
    assert "started" not in dumped


def test_a_wall_time_under_a_tenth_of_a_second_is_not_shown_as_zero() -> None:
    from orchestrator.store.records import duration_text

    assert duration_text(12.345) == "12.3 s"
    assert duration_text(0.1) == "0.1 s"
    assert duration_text(0.04) == "0.04 s"
    assert duration_text(0.004) == "< 0.01 s"
    assert duration_text(0.0) == "< 0.01 s"


def test_old_counts_without_shares_read_as_none_shared() -> None:
    manifest = Manifest.from_disk({"counts": {"requests": 3, "cache_hits": 2}})
    assert (manifest.counts.cache_hits, manifest.counts.shared) == (2, 0)


# -- the manifest's parts: typed records that still read as the objects they were (issue 36) --

# A manifest as the first library release wrote it (commit 93cbeb8, layout 1): no affinity,
# workers or replicas yet, a server entry without `identity`, a provider's key of its own.
FIRST_RELEASE = {
    "layout_version": 1,
    "run_id": "0123456789ab",
    "graph": {"path": "g.yaml", "name": "judge", "hash": "h1", "snapshot": "snapshot/graph"},
    "dataset": {"kind": "file", "path": "rows.jsonl", "hash": "d1", "inputs": "inputs.jsonl"},
    "model": "m",
    "parameters": {
        "concurrency": None,
        "limit": 2,
        "params": {"scale": 10},
        "cache": "/c.sqlite",
        "refresh": False,
        "structured": "auto",
        "timeout": 120.0,
        "server_wait": 600.0,
    },
    "package": {"name": "orchestrator", "version": "0.0.1", "python": "3.11.7"},
    "servers": {
        "http://a/v1 m": {
            "base_url": "http://a/v1",
            "model": "m",
            "models_served": ["m"],
            "structured_output": "server",
            "version": None,
            "system_fingerprint": "fp",
        }
    },
    "outages": [{"base_url": "http://a/v1", "seconds": 2.5, "recovered": True}],
    "status": "complete",
    "resumed": False,
}


def test_a_manifest_an_older_release_wrote_reads_typed_and_writes_back_the_same(
    tmp_path: Path,
) -> None:
    from orchestrator.store.records import (
        ManifestGraph,
        ManifestParameters,
        OutageEntry,
        ServerEntry,
    )

    (tmp_path / "manifest.json").write_text(json.dumps(FIRST_RELEASE))
    manifest = RunReader(tmp_path).manifest
    assert isinstance(manifest.graph, ManifestGraph) and manifest.graph.name == "judge"
    assert isinstance(manifest.parameters, ManifestParameters)
    assert manifest.parameters.params == {"scale": 10} and manifest.parameters.limit == 2
    assert manifest.parameters.affinity is None  # not recorded then
    assert manifest.dataset.hash == "d1" and manifest.package.version == "0.0.1"
    server = manifest.servers["http://a/v1 m"]
    assert isinstance(server, ServerEntry) and server.identity is None
    assert server["system_fingerprint"] == "fp"  # a key no record declares, kept
    assert manifest.identity_of("http://a/v1", "m") is None
    assert isinstance(manifest.outages[0], OutageEntry) and manifest.outages[0].recovered
    assert manifest.as_written() == FIRST_RELEASE


def test_a_manifest_part_reads_as_the_json_object_it_was() -> None:
    from orchestrator.store.records import ManifestGraph, ManifestParameters, WorkerEntry

    part = ManifestParameters.model_validate({"concurrency": 4, "params": {"k": 1}, "seed": 3})
    assert part.concurrency == 4 and part["concurrency"] == 4
    assert part["seed"] == 3 and part.get("seed") == 3  # a setting added later, undeclared
    assert part.get("timeout", "unset") == "unset" and "timeout" not in part
    assert "params" in part and len(part) == 3 and bool(part)
    assert part == {"concurrency": 4, "params": {"k": 1}, "seed": 3}
    assert {"concurrency": 4, "params": {"k": 1}, "seed": 3} == part  # noqa: SIM300 (dict first)
    assert dict(part) == {"concurrency": 4, "params": {"k": 1}, "seed": 3}
    with pytest.raises(KeyError):
        part["nothing"]
    assert not ManifestGraph() and ManifestGraph(name="g")
    worker = WorkerEntry(worker="w1", pid=7, host="h")
    worker.examples = 5  # set as the worker reports
    assert worker.as_written() == {"worker": "w1", "pid": 7, "host": "h", "examples": 5}
    with pytest.raises(ValidationError, match="pid"):
        WorkerEntry.model_validate({"pid": "not a number"})
