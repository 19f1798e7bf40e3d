"""The command line off a terminal (a log file, CI, `nohup`): a plain progress line at
least every 2 s while work is in flight, and output never hard-wrapped at 80 columns, so
tables and the suggested `orchestrator trace …` command stay on one line (issue 26)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakeserver import FakeServer, Reply, latency_responder, schema_responder
from helpers import is_canary, judge_graph, write_graph, write_rows
from rich.table import Table

from orchestrator.cli.app import WideConsole

ROOT = Path(__file__).parents[2]


def _cli(args: list[str], log: Path) -> subprocess.CompletedProcess[bytes]:
    """`python -m orchestrator …` as a user runs it under `nohup`: every output a file."""
    forced = {"COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"}  # rich's overrides
    env = {k: v for k, v in os.environ.items() if k not in forced}
    with log.open("wb") as sink:
        return subprocess.run(
            [sys.executable, "-m", "orchestrator", *args],
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**env, "PYTHONPATH": str(ROOT)},
            timeout=180,
            check=False,
        )


def test_a_run_logged_to_a_file_shows_progress_lines_and_unwrapped_commands(
    tmp_path: Path,
) -> None:
    """Six rows, one request at a time, ~0.8 s each: a run of ~5 s prints at least two
    progress lines; a failed row's suggested trace command, with a folder path far longer
    than 80 columns, stays on one line."""
    graph = write_graph(tmp_path, judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    rows = [{"id": f"r{i}", "text": f"row {i}"} for i in range(6)] + [
        {"id": "broken", "text": "BROKEN"}
    ]
    data = write_rows(tmp_path / "rows.jsonl", rows)
    out = tmp_path / ("a-run-folder-whose-name-is-long-" * 4) / "run"
    slow = latency_responder(0.8)

    def respond(body: dict) -> Reply:
        if any("BROKEN" in str(m.get("content")) for m in body["messages"]):
            return Reply(content="{not json")
        return slow(body) if not is_canary(body) else schema_responder(body)

    log = tmp_path / "run.log"
    with FakeServer(respond) as server:
        args = [
            "run", str(graph), "--data", str(data), "--out", str(out),
            "--base-url", server.base_url, "--concurrency", "1", "--no-cache",
        ]  # fmt: skip
        done = _cli(args, log)
    text = log.read_text(encoding="utf-8")
    assert done.returncode == 2, text  # one example failed
    progress = [line for line in text.splitlines() if line.startswith("progress:")]
    assert len(progress) >= 2, text
    assert all(" of 7 examples" in line for line in progress), progress
    assert all("failed" in line and "in flight" in line for line in progress), progress
    assert all("req/s" in line and "limit" in line for line in progress), progress
    for whole in (
        f"orchestrator trace {out} --example broken",  # the failed example's suggestion
        f"results: {out / 'results.jsonl'}",  # the summary's paths
        f"(orchestrator trace {out})",
    ):
        assert any(whole in line for line in text.splitlines()), (whole, text)
    assert "\x1b[" not in text  # no cursor moves or colours in a file


def test_a_console_off_a_terminal_does_not_wrap_at_80_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    sink = io.StringIO()
    console = WideConsole(file=sink)
    table = Table("node", "detail")
    table.add_row("judge", "x" * 150)
    console.print(table)
    console.print("see: orchestrator trace " + "/very/long/path" * 10 + " --example e1")
    console.rule("next")
    lines = sink.getvalue().splitlines()
    assert any("x" * 150 in line for line in lines)  # the cell is on one line
    assert any(line.endswith("/very/long/path --example e1") for line in lines)
    assert len(lines[-1]) == 80  # a rule keeps a reading width


def test_a_console_with_a_given_width_keeps_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """COLUMNS (or a terminal) sets the width as before."""
    monkeypatch.setenv("COLUMNS", "60")
    sink = io.StringIO()
    WideConsole(file=sink).print("word " * 30)
    assert max(len(line) for line in sink.getvalue().splitlines()) <= 60
