"""Exports of a run folder (issue 18): result lines and node runs to Parquet, CSV and JSONL,
read back with pandas as `RunResult.to_pandas()` gives them, streamed in batches."""

from __future__ import annotations

import math
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.analysis.export import export, node_runs_frame
from orchestrator.api.run import RunResult
from orchestrator.cli import app
from orchestrator.errors import ConfigurationError
from orchestrator.store.records import Manifest, Summary

pd = pytest.importorskip("pandas")
pq = pytest.importorskip("pyarrow.parquet")

PROMPTS = {"judge.jinja": "Judge this text:\n{{ text }}"}
ROWS = [{"id": f"e{i}", "text": f"text number {i}"} for i in range(5)] + [
    {"id": "broken", "text": "this one is always answered with broken JSON"}
]


def graph() -> orc.Graph:
    """One judge call; outputs a number, a nested object (dotted columns) and a list."""
    spec = {
        "name": "exported",
        "inputs": ["text"],
        "defaults": {"temperature": 0.0, "max_tokens": 60, "retries": 1},
        "nodes": {
            "judge": {
                "kind": "llm",
                "prompt": "judge.jinja",
                "output": {
                    "score": {"type": "integer", "min": 1, "max": 10},
                    "label": {"type": "string", "enum": ["good", "bad"]},
                },
            }
        },
        "outputs": {"score": "judge.score", "detail": "judge", "tags": "[judge.label, 'x']"},
    }
    return orc.graph_from_dict(spec, PROMPTS)


def answer(request: Any) -> str:
    # The first user message is the judge prompt (a re-ask appends the error after it).
    text = next(m["content"] for m in request.messages if m["role"] == "user")
    if "broken" in text:
        return "{not json"
    number = int(text.rsplit(" ", 1)[-1])
    return orjson.dumps({"score": number + 1, "label": "good" if number % 2 else "bad"}).decode()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    out = tmp_path_factory.mktemp("export") / "run"
    # The first request's reply is malformed, so one node run is re-asked: invalid, then ok.
    fake = orc.FakeTransport(answer, faults=["malformed"])
    return orc.run(graph(), ROWS, out=out, transport=fake, concurrency=1)


def normal(value: Any) -> Any:
    """A cell as plain Python, so frames read from different formats compare."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if hasattr(value, "item"):  # a numpy scalar
        value = value.item()
    if isinstance(value, list | dict):
        return orjson.dumps(value).decode()
    return value


def rows_of(frame: Any) -> list[list[Any]]:
    return [[normal(v) for v in row] for row in frame.itertuples(index=False)]


def read(path: Path) -> Any:
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    if path.suffix == ".csv":
        return pd.read_csv(path)
    return pd.read_json(path, lines=True, dtype=False)


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_results_read_back_as_to_pandas_gives_them(run: RunResult, tmp_path: Path, fmt: str):
    assert run.folder is not None
    written = export(run.folder, tmp_path, format=fmt)  # type: ignore[arg-type]
    assert written == {"results": tmp_path / f"results.{fmt}"}
    back, expected = read(written["results"]), run.to_pandas()
    assert list(back.columns) == list(expected.columns)
    assert list(back.columns) == [
        "id",
        "status",
        "error",
        "score",
        "detail.score",
        "detail.label",
        "tags",
    ]
    assert rows_of(back) == rows_of(expected)
    # The failed example is a row too, with its error and no outputs.
    broken = back[back["id"] == "broken"].iloc[0]
    assert broken["status"] == "failed" and "JSON" in broken["error"]
    assert normal(broken["score"]) is None
    assert sorted(back["score"].dropna().astype(int)) == [1, 2, 3, 4, 5]


def test_node_runs_one_row_per_execution_with_its_attempts(run: RunResult, tmp_path: Path):
    assert run.folder is not None
    written = export(run.folder, tmp_path, format="parquet", what="both")
    assert set(written) == {"results", "node_runs"}
    frame = pd.read_parquet(written["node_runs"])
    trace = list(orc.RunReader(run.folder).node_runs())
    assert len(frame) == len(trace) == len(ROWS)
    by_id = frame.set_index("node_run_id")
    for rec in trace:
        row = by_id.loc[rec.id]
        assert row["example_id"] == rec.example_id and row["node"] == "judge"
        assert row["attempts"] == len(rec.attempts)
        assert row["attempt_kinds"] == ",".join(a.kind for a in rec.attempts)
        assert row["status"] == rec.status
    reasked = frame[(frame["attempts"] == 2) & (frame["status"] == "ok")]
    assert list(reasked["attempt_kinds"]) == ["invalid,ok"]
    assert list(reasked["requests"]) == [2] and list(reasked["reasks"]) == [1]
    assert orjson.loads(reasked["value"].iloc[0]).keys() == {"score", "label"}
    failed = frame[frame["example_id"] == "broken"].iloc[0]
    assert failed["status"] == "failed" and failed["attempt_kinds"] == "invalid,invalid"
    assert pd.isna(failed["item"])  # a node's own record, not a foreach item
    # The DataFrame helper holds the same rows, and CSV reads back the same values.
    assert rows_of(node_runs_frame(run.folder)) == rows_of(frame)
    csv = export(run.folder, tmp_path / "node_runs.csv", what="node_runs")["node_runs"]
    assert rows_of(pd.read_csv(csv)) == rows_of(frame)


def test_parquet_without_pyarrow_names_the_data_extra(
    run: RunResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    assert run.folder is not None
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ConfigurationError, match=r"orchestrator-judge\[data\].*csv"):
        export(run.folder, tmp_path)
    assert not list(tmp_path.iterdir())  # nothing half-written
    assert export(run.folder, tmp_path, format="csv")["results"].is_file()


def test_one_file_for_two_tables_and_a_suffix_against_the_format_are_refused(
    run: RunResult, tmp_path: Path
):
    assert run.folder is not None
    with pytest.raises(ConfigurationError, match="both tables needs a folder"):
        export(run.folder, tmp_path / "all.csv", what="both")
    with pytest.raises(ConfigurationError, match=r"does not end in \.parquet"):
        export(run.folder, tmp_path / "all.csv", format="parquet")


def test_cli_writes_inside_the_run_folder_and_says_where(run: RunResult):
    assert run.folder is not None
    result = CliRunner().invoke(app, ["export", str(run.folder), "--format", "jsonl"])
    assert result.exit_code == 0, result.output
    target = run.folder / "export" / "results.jsonl"
    assert f"results written to {target}" in " ".join(result.output.split())
    assert len(target.read_text().splitlines()) == len(ROWS)
    bad = CliRunner().invoke(app, ["export", str(run.folder), "--what", "everything"])
    assert bad.exit_code == 1 and "--what" in bad.output


def synthetic_folder(root: Path, count: int, width: int) -> Path:
    """A results.jsonl of `count` lines (~`width` bytes each) and its inputs.jsonl."""
    folder = root / "big"
    folder.mkdir()
    filler = "y" * width
    with (folder / "results.jsonl").open("wb") as results:
        for i in range(count):
            line = {"id": f"c{i:05d}", "status": "ok", "score": i, "note": {"text": filler}}
            results.write(orjson.dumps(line) + b"\n")
    with (folder / "inputs.jsonl").open("wb") as inputs:
        for i in range(count):
            inputs.write(orjson.dumps({"id": f"c{i:05d}", "number": i + 1}) + b"\n")
    return folder


def test_a_large_results_file_is_streamed_in_batches(tmp_path: Path):
    count, width = 20_000, 2000
    folder = synthetic_folder(tmp_path, count, width)
    size = (folder / "results.jsonl").stat().st_size
    tracemalloc.start()
    try:
        written = export(folder, tmp_path / "out", format="parquet", batch_size=500)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    parquet = pq.ParquetFile(written["results"])
    assert parquet.metadata.num_rows == count
    assert parquet.metadata.num_row_groups == count // 500  # one per batch
    # Whole, the lines would take more than the file's 40 MB; the index and a batch do not.
    assert peak < size / 4, f"peak {peak} bytes for a {size}-byte file"
    head = parquet.read_row_group(0).to_pandas()
    assert list(head.columns) == ["id", "status", "error", "score", "note.text"]
    assert head["id"].iloc[0] == "c00000" and head["note.text"].iloc[0] == "y" * width


def test_the_latest_line_per_example_and_column_order_match_run_result(tmp_path: Path):
    folder = tmp_path / "resumed"
    folder.mkdir()
    lines = [
        {"id": "b", "status": "failed", "error": "server gone", "row": 2},
        {"id": "a", "status": "ok", "score": 1.5, "extra": {"deep": {"x": True}}},
        {"id": "c", "status": "ok", "score": 3, "late": "only here"},
        {"id": "b", "status": "ok", "score": 2, "extra": {"deep": {"x": False}}},
    ]
    (folder / "results.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    numbers = [{"id": "c", "number": 3}, {"id": "a", "number": 1}, {"id": "b", "number": 2}]
    (folder / "inputs.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in numbers))
    expected = RunResult(manifest=Manifest(), summary=Summary(), folder=folder).to_pandas()
    for fmt in ("parquet", "csv", "jsonl"):
        back = read(export(folder, tmp_path / fmt, format=fmt)["results"])  # type: ignore[arg-type]
        assert list(back.columns) == list(expected.columns)
        assert rows_of(back) == rows_of(expected)
        assert list(back["id"]) == ["a", "b", "c"]
        assert list(back["status"]) == ["ok", "ok", "ok"]  # b's resumed line replaced its failure


def test_run_result_gives_the_node_runs_frame(run: RunResult) -> None:
    frame = run.node_runs_frame()
    assert list(frame.columns) == list(node_runs_frame(run.folder).columns)
    assert len(frame) == len(node_runs_frame(run.folder)) > 0
    in_memory = RunResult(manifest=run.manifest, summary=run.summary)
    with pytest.raises(ConfigurationError, match="in-memory run keeps no trace"):
        in_memory.node_runs_frame()
