"""The whole `--data` is read once, streamed, before the first request (issue 35, items 7 and
13): a line too long to be a row, an id used twice or no rows at all stop the run there with
one line naming the file and line, even with --workers; memory stays bounded by the longest
row, not by the file."""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

import pytest
from fakeserver import FakeServer
from helpers import judge_graph, orchestrator_command, results, write_graph, write_rows
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.cli import app
from orchestrator.data.dataset import MAX_ROW_BYTES
from orchestrator.data.sources import FileSource, scan_rows

pytestmark = pytest.mark.reliability

PROMPTS = {"judge.jinja": "Rate: {{ text }}"}


@pytest.fixture
def graph(tmp_path: Path) -> Path:
    return write_graph(tmp_path / "g", judge_graph(), PROMPTS)


def run_cli(graph: Path, data: Path, out: Path, url: str, *extra: str) -> tuple[int, str]:
    """`orchestrator run` in this process (a child process only where workers start)."""
    command = ["run", str(graph), "--data", str(data), "--out", str(out), "--base-url", url]
    command += ["--no-cache", *extra]
    if "--workers" in extra:
        done = orchestrator_command(*command)
        return done.returncode, done.stderr + done.stdout
    result = CliRunner().invoke(app, command)
    return result.exit_code, result.output


def one_line(output: str, *words: str) -> None:
    """The run said one thing, with these words, and no traceback."""
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    for word in words:
        assert word in lines[0], output


def sparse(path: Path, size: int = 3 * 2**30) -> Path:
    """A file of `size` NUL bytes that takes no room on disk."""
    with path.open("wb") as handle:
        handle.truncate(size)
    return path


# --- item 7: a 3 GB file without line breaks -------------------------------------------------


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_a_3gb_sparse_file_is_refused_quickly_in_bounded_memory(
    tmp_path: Path, suffix: str
) -> None:
    data = sparse(tmp_path / f"rows{suffix}")
    graph = orc.graph_from_dict(judge_graph(), PROMPTS)
    fake = orc.FakeTransport()
    tracemalloc.start()
    began = time.monotonic()
    try:
        with pytest.raises(orc.DatasetError) as refused:
            orc.run(graph, data, transport=fake)
        took = time.monotonic() - began
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(refused.value).startswith(f"{data}:1: line 1 is longer than 64 MiB")
    assert fake.requests == []
    assert took < 10  # it reads at most one row's worth, not 3 GB
    assert peak < 3 * MAX_ROW_BYTES  # a 3 GB read would need 3 GB


def test_a_3gb_json_document_is_refused_without_reading_it(tmp_path: Path) -> None:
    data = sparse(tmp_path / "rows.json")
    with pytest.raises(orc.DatasetError, match="write the rows as JSON Lines"):
        list(FileSource(data).rows())


def test_a_line_too_long_after_good_rows_names_its_line(graph: Path, tmp_path: Path) -> None:
    """On the command line: one line, the file and line, no request, no run folder."""
    data = tmp_path / "rows.jsonl"
    good = "".join(json.dumps({"id": f"r{i}", "text": "fine"}) + "\n" for i in range(3))
    with data.open("w", encoding="utf-8") as handle:
        handle.write(good)
        handle.write('{"id": "big", "text": "' + "a" * (MAX_ROW_BYTES + 10) + '"}\n')
    with FakeServer() as server:
        code, output = run_cli(graph, data, tmp_path / "run", server.base_url)
        assert server.requests == []
    assert code == 1
    one_line(output, f"{data}:4: line 4 is longer than 64 MiB")
    assert not (tmp_path / "run").exists()


def test_a_csv_quote_left_open_over_a_long_file_stops_at_the_row_limit(tmp_path: Path) -> None:
    data = tmp_path / "rows.csv"
    line = "x" * (1 << 20) + "\n"  # a megabyte a line, none too long by itself
    with data.open("w", encoding="utf-8") as handle:
        handle.write('id,text\na,fine\nb,"never closed\n')
        for _ in range(MAX_ROW_BYTES // len(line) + 4):
            handle.write(line)
    with pytest.raises(orc.DatasetError) as refused:
        list(FileSource(data).rows())
    assert str(refused.value).startswith(f"{data}:3: the CSV record from line 3 runs past 64 MiB")


def test_a_big_file_is_streamed_not_held(tmp_path: Path) -> None:
    """Reading every row before the run holds one row at a time (and the ids), a fraction
    of the file."""
    data = tmp_path / "rows.jsonl"
    text = "word " * 400  # 2 kB a row
    with data.open("w", encoding="utf-8") as handle:
        for i in range(10_000):
            handle.write(json.dumps({"id": f"r{i}", "text": text}) + "\n")
    size = data.stat().st_size
    tracemalloc.start()
    try:
        scan = scan_rows(FileSource(data), None, ["text"], 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert scan.rows == 10_000 and len(scan.sample) == 20 and scan.failing == 0
    assert peak < size / 4, (peak, size)


# --- item 13: duplicate ids, no rows, a param of the wrong type ------------------------------


def test_a_repeated_id_stops_the_run_before_any_request_even_with_workers(
    graph: Path, tmp_path: Path
) -> None:
    rows = [{"id": f"r{i}", "text": f"t{i}"} for i in range(40)]
    rows.append({"id": "r7", "text": "again"})  # line 41, long after the first requests
    data = write_rows(tmp_path / "rows.jsonl", rows)
    with FakeServer() as server:
        code, output = run_cli(graph, data, tmp_path / "run", server.base_url, "--workers", "2")
        assert server.requests == []
    assert code == 1
    one_line(output, f"{data}:41: duplicate id 'r7' (first on line 8)")
    assert not (tmp_path / "run").exists()


def test_a_repeated_id_in_a_list_of_rows_is_refused(tmp_path: Path) -> None:
    graph = orc.graph_from_dict(judge_graph(), PROMPTS)
    fake = orc.FakeTransport()
    rows = [{"id": "a", "text": "x"}, {"id": "b", "text": "y"}, {"id": "a", "text": "z"}]
    with pytest.raises(orc.DatasetError, match=r"^rows:3: duplicate id 'a' \(first on line 1\)"):
        orc.run(graph, rows, transport=fake)
    assert fake.requests == []


@pytest.mark.parametrize(("name", "content"), [("rows.jsonl", ""), ("rows.csv", "id,text\n")])
def test_data_without_rows_is_refused_naming_the_file(
    graph: Path, tmp_path: Path, name: str, content: str
) -> None:
    data = tmp_path / name
    data.write_text(content, encoding="utf-8")
    with FakeServer() as server:
        code, output = run_cli(graph, data, tmp_path / "run", server.base_url)
        assert server.requests == []
    assert code == 1
    one_line(output, f"{data} holds no rows")
    assert "aggregate" not in output and "graph" not in output


def test_a_word_for_a_number_param_is_refused_before_any_request(tmp_path: Path) -> None:
    spec = judge_graph()
    spec["params"] = {"threshold": 0.5, "strict": False, "label": "x"}
    spec["outputs"] = {"score": "judge.score", "pass": "judge.score >= params.threshold * 10"}
    path = write_graph(tmp_path / "g", spec, PROMPTS)
    data = write_rows(tmp_path / "rows.jsonl", [{"id": f"r{i}", "text": "t"} for i in range(8)])
    with FakeServer() as server:
        code, output = run_cli(
            path, data, tmp_path / "run", server.base_url, "--param", "threshold=high"
        )
        assert server.requests == []
    assert code == 1
    one_line(output, "param 'threshold'", "a number", "'high'")


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"threshold": "high"}, "param 'threshold' is a number (default 0.5), not 'high'"),
        ({"threshold": True}, "param 'threshold' is a number (default 0.5), not True"),
        ({"strict": "yes"}, "param 'strict' is true or false (default False), not 'yes'"),
    ],
)
def test_param_overrides_keep_the_declared_type(given: dict[str, object], says: str) -> None:
    spec = judge_graph()
    spec["params"] = {"threshold": 0.5, "strict": False, "label": "x"}
    graph = orc.graph_from_dict(spec, PROMPTS)
    fake = orc.FakeTransport()
    with pytest.raises(orc.ConfigurationError, match=says.replace("(", r"\(").replace(")", r"\)")):
        orc.run(graph, [{"id": "a", "text": "x"}], transport=fake, params=given)
    assert fake.requests == []


def test_fitting_overrides_run(tmp_path: Path) -> None:
    """An int for a float param, a float for an int one, any text for a text one."""
    spec = judge_graph()
    spec["params"] = {"threshold": 0.5, "repeats": 2, "label": "x"}
    graph = orc.graph_from_dict(spec, PROMPTS)
    params = {"threshold": 1, "repeats": 3.0, "label": "7b"}
    result = orc.run(
        graph, [{"id": "a", "text": "x"}], transport=orc.FakeTransport(), params=params
    )
    assert [line.status for line in result.results] == ["ok"]


def test_rows_that_will_fail_are_said_before_the_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text('{"id": "a", "text": "x"}\nnot json\n{"id": "c"}\n', encoding="utf-8")
    graph = orc.graph_from_dict(judge_graph(), PROMPTS)
    out = tmp_path / "run"
    with caplog.at_level("WARNING", logger="orchestrator"):
        orc.run(graph, data, transport=orc.FakeTransport(), out=out)
    assert f"2 of 3 rows of {data} cannot run" in caplog.text
    assert f"(first: {data}:2: not valid JSON" in caplog.text
    assert [line["status"] for line in results(out).values()] == ["ok", "failed", "failed"]
