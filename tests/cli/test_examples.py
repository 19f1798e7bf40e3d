"""Shipped example data by name: `run … --data expert.jsonl` from any folder, and
`orchestrator examples`, which says where each shipped graph's example data lives."""

from __future__ import annotations

import json
import logging
import re
import shlex
from pathlib import Path

import pytest
from fakeserver import FakeServer, schema_responder
from typer.testing import CliRunner

from orchestrator.cli import app

ROOT = Path(__file__).parents[2]
SHIPPED_ROWS = len((ROOT / "examples/pointwise.jsonl").read_text().splitlines())


@pytest.fixture
def logged(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> pytest.LogCaptureFixture:
    """The CLI's log lines, whether or not another test turned on the console handler."""
    monkeypatch.setattr(logging.getLogger("orchestrator"), "propagate", True)
    caplog.set_level(logging.INFO, logger="orchestrator")
    return caplog


def _run(data: str, out: Path, base_url: str) -> tuple[int, str]:
    args = ["run", "pointwise", "--data", data, "--out", str(out), "--base-url", base_url]
    result = CliRunner().invoke(app, [*args, "--no-cache"])
    return result.exit_code, result.output


@pytest.mark.parametrize("name", ["pointwise.jsonl", "pointwise"])
def test_data_names_a_shipped_example_when_no_such_file_is_here(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, logged: pytest.LogCaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    with FakeServer(schema_responder) as server:
        code, output = _run(name, tmp_path / "run", server.base_url)
    assert code == 0, output
    assert len((tmp_path / "run/results.jsonl").read_text().splitlines()) == SHIPPED_ROWS
    shipped = ROOT / "examples" / "pointwise.jsonl"
    assert f"no such file here; using the shipped example {shipped}" in logged.text


def test_a_file_in_the_working_folder_wins_over_the_shipped_example(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, logged: pytest.LogCaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    rows = (ROOT / "examples/pointwise.jsonl").read_text().splitlines()[:2]
    Path("pointwise.jsonl").write_text("\n".join(rows) + "\n")
    with FakeServer(schema_responder) as server:
        code, output = _run("pointwise.jsonl", tmp_path / "run", server.base_url)
    assert code == 0, output
    results = [json.loads(line) for line in (tmp_path / "run/results.jsonl").read_text().split()]
    assert len(results) == 2
    assert "using the file here, not the shipped example" in logged.text


def test_an_unknown_data_name_lists_the_shipped_examples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        app, ["run", "pointwise", "--data", "expret.jsonl", "--base-url", "http://127.0.0.1:9/v1"]
    )
    assert result.exit_code == 1
    message = " ".join(result.output.split())
    assert "--data expret.jsonl: no such file, and no shipped example of that name" in message
    assert "expert.jsonl" in message and "pointwise.jsonl" in message
    assert "orchestrator examples" in message
    assert not (tmp_path / "runs").exists()  # refused before any run folder or server


def test_examples_prints_a_pasteable_run_line_per_shipped_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = CliRunner().invoke(app, ["examples"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if not line.startswith("#")]
    assert len(lines) == len(list((ROOT / "graphs").glob("*.yaml")))
    notes = {}
    for line in lines:
        words = shlex.split(line, comments=True)
        assert words[:2] == ["orchestrator", "run"] and words[3] == "--data", line
        assert (ROOT / "graphs" / f"{words[2]}.yaml").is_file()
        # The shipped file's own name, which --data finds from any folder (issue 34 item
        # 7: not a long site-packages path).
        assert words[4] == f"{words[2]}.jsonl" and (ROOT / "examples" / words[4]).is_file()
        notes[words[2]] = (words, line.partition("#")[2])
    # What a graph needs beyond its data is said on its line.
    words, note = notes["perq_distilled"]
    assert words[5:] == ["--param", "model_dir=VALUE"] and "model_dir is required" in note
    for needs_metrics in ("perq_distilled", "style_ensemble"):
        assert "needs pip install 'orchestrator-judge[metrics]'" in notes[needs_metrics][1]
    assert notes["pointwise"][1] == ""
    # Pasted into another folder, a line runs the shipped data (the fake server answers).
    words = notes["pointwise"][0]
    monkeypatch.chdir(tmp_path)
    with FakeServer() as server:
        done = CliRunner().invoke(
            app, [*words[1:], "--base-url", server.base_url, "--out", str(tmp_path / "r")]
        )
    assert done.exit_code == 0, done.output


def test_the_install_doc_commands_name_shipped_graphs_and_data() -> None:
    doc = (ROOT / "docs" / "install.md").read_text()
    runs = re.findall(r"^orchestrator run (\S+) --data (\S+)", doc, re.M)
    assert runs, "docs/install.md shows no `orchestrator run NAME --data FILE` line"
    for graph, data in runs:
        assert (ROOT / "graphs" / f"{graph}.yaml").is_file(), graph
        assert (ROOT / "examples" / data).is_file(), data
