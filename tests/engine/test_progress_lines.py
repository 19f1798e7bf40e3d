"""Progress off a terminal (issue 26): a run drawing no bar logs a plain line at least every
2 s while work is in flight — done of total, failed, in flight, rate, current limit — at
INFO on the `orchestrator` logger, where a log file's reader finds the run's other lines."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from fakeserver import FakeServer, latency_responder
from helpers import judge_graph, run_graph, write_graph, write_rows

from orchestrator.engine.flush import RunProgress
from orchestrator.store.records import Counts
from orchestrator.ui.progress import ProgressLines


def test_a_slow_run_logs_progress_lines_with_what_is_in_flight(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Six rows at ~0.8 s each, one at a time: a run of ~5 s logs two lines or more."""
    graph = write_graph(tmp_path, judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    data = write_rows(tmp_path / "rows.jsonl", [{"id": f"r{i}", "text": "t"} for i in range(6)])
    caplog.set_level(logging.INFO, logger="orchestrator")
    with FakeServer(latency_responder(0.8)) as server:
        run_graph(graph, data, tmp_path / "run", server.base_url, concurrency=1, use_cache=False)
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.name == "orchestrator.ui.progress" and r.getMessage().startswith("progress:")
    ]
    assert len(lines) >= 2, [r.getMessage() for r in caplog.records]
    assert all(" of 6 examples" in line for line in lines), lines
    assert any("in flight 1" in line for line in lines), lines  # the one request allowed
    assert all("failed 0" in line and "limit 1" in line for line in lines), lines


def test_a_progress_line_names_every_figure() -> None:
    stats = Counts(
        examples_ok=3, examples_failed=1, examples_resumed=2, requests=10, cache_hits=4, shared=7
    )
    lines = ProgressLines(RunProgress(stats, 20, lambda: "limits 8/8", lambda: 5))
    lines.last_requests = 0
    text = lines.text(lines.started + 4.0)
    assert text.startswith("progress: 6 of 20 examples")
    figures = ("failed 1", "in flight 5", "2.5 req/s", "limits 8/8", "4 s")
    for figure in (*figures, "cache hits 4", "shared in flight 7"):
        assert figure in text, text


def test_an_unknown_total_is_shown_as_such() -> None:
    text = ProgressLines(RunProgress(Counts(), None)).text(0.0)
    assert text.startswith("progress: 0 of ? examples"), text
