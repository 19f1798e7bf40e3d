"""n samples are samples, not retries: `trace` and the report count samples and requests
apart; `min_samples` lets a call keep its valid samples; n > 1 at temperature 0 is warned
about; old traces without the sample column still read (issue 16, items 9 and 11)."""

from __future__ import annotations

import json
import logging
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from helpers import judge_graph, orchestrator_command, write_graph
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.cli import app
from orchestrator.providers.fake import FakeAnswer, FakeRequest
from orchestrator.report import build_report
from orchestrator.store.reader import RunReader
from orchestrator.store.records import Attempt, Tally
from orchestrator.store.trace import TraceStore

PROMPTS = {"judge.jinja": "Rate this text.\n<<{{ text }}>>"}
ROWS = [{"id": "e0", "text": "t0"}]
GOOD = json.dumps({"score": 7})
BAD = "{not json"
QUICK = orc.RetryPolicy(retries=2, backoff_first=0.0, jitter=0.0)


def sampled_graph(**sampling: Any) -> dict[str, Any]:
    """The judge graph asking for samples: its output is the list of valid scores."""
    graph = judge_graph(temperature=0.7, retries=2, **sampling)
    return {**graph, "outputs": {"scores": "judge | map(attribute='score') | list"}}


def one_bad_sample(reasks_fail: int) -> Any:
    """Five samples whose fourth (sample 3) is malformed; its first `reasks_fail` re-asks
    come back malformed too, later ones valid."""
    reasks = 0

    def respond(request: FakeRequest) -> str | FakeAnswer:
        nonlocal reasks
        if len(request.messages) == 1:  # the first request: every sample at once
            assert request.body["n"] == 5
            return FakeAnswer([GOOD, GOOD, GOOD, BAD, GOOD])
        reasks += 1
        return BAD if reasks <= reasks_fail else GOOD

    return respond


def run(tmp_path: Path, graph: dict[str, Any], respond: Any, **kwargs: Any) -> orc.RunResult:
    out = tmp_path / "run"
    kwargs.setdefault("cache", False)
    result = orc.run(
        orc.Graph.from_dict(graph, PROMPTS),
        ROWS,
        out=out,
        transport=orc.FakeTransport(respond, faults=kwargs.pop("faults", ())),
        structured="server",
        retry=QUICK,
        **kwargs,
    )
    return result


def trace_text(folder: Path) -> str:
    outcome = CliRunner().invoke(app, ["trace", str(folder), "--example", "e0"])
    assert outcome.exit_code == 0, outcome.output
    return " ".join(outcome.output.split())  # rich wraps long lines


def page_record(folder: Path, node: str = "judge") -> dict[str, Any]:
    """The node's record as the report page gets it (the first example's trace)."""
    html = build_report(folder).read_text(encoding="utf-8")
    blocks = {
        name: json.loads(match)
        for name, match in re.findall(
            r'<script type="application/json" id="(\w+)-data">(.*?)</script>', html, re.S
        )
    }
    assert blocks["meta"]["keys"]["run"]["tally"] == "t"
    entry = next(e for e in blocks["details"][0]["path"] if e["node"] == node)
    rec: dict[str, Any] = entry["rec"]
    return rec


def judge_run(folder: Path) -> Any:
    (rec,) = RunReader(folder).node_runs("e0", "judge")
    return rec


def test_five_samples_in_one_request_are_five_samples_one_request(tmp_path: Path) -> None:
    result = run(tmp_path, sampled_graph(n=5), lambda request: GOOD)
    assert result.results[0].outputs["scores"] == [7] * 5
    rec = judge_run(result.folder)
    assert [a.sample for a in rec.attempts] == [0, 1, 2, 3, 4]
    assert str(rec.tally()) == "5 samples, 1 request"
    text = trace_text(result.folder)
    assert "5 samples, 1 request" in text and "attempt" not in text
    page = page_record(result.folder)
    assert page["t"] == "5 samples, 1 request"
    assert [a["sm"] for a in page["a"]] == [0, 1, 2, 3, 4]


def test_a_sample_re_asked_once_is_one_more_request(tmp_path: Path) -> None:
    result = run(tmp_path, sampled_graph(n=5), one_bad_sample(reasks_fail=0))
    assert result.results[0].outputs["scores"] == [7] * 5
    rec = judge_run(result.folder)
    assert [(a.sample, a.kind) for a in rec.attempts if a.sample == 3] == [
        (3, "invalid"),
        (3, "ok"),
    ]
    tally = rec.tally()
    assert (tally.samples, tally.requests, tally.reasks, tally.failed_samples) == (5, 2, 1, 0)
    assert "5 samples, 2 requests (1 re-ask)" in trace_text(result.folder)
    assert "attempt 4 (sample 3): invalid" in trace_text(result.folder)
    assert page_record(result.folder)["t"] == "5 samples, 2 requests (1 re-ask)"


def test_a_transport_failure_is_a_request_of_no_sample(tmp_path: Path) -> None:
    result = run(tmp_path, sampled_graph(n=5), lambda request: GOOD, faults=["transient"])
    rec = judge_run(result.folder)
    assert [a.sample for a in rec.attempts] == [None, 0, 1, 2, 3, 4]
    assert str(rec.tally()) == "5 samples, 2 requests (1 failed)"


def test_min_samples_keeps_the_valid_samples_and_the_failed_ones_attempts(
    tmp_path: Path,
) -> None:
    result = run(tmp_path, sampled_graph(n=5, min_samples=4), one_bad_sample(reasks_fail=9))
    line = result.results[0]
    assert line.status == "ok" and line.outputs["scores"] == [7] * 4
    rec = judge_run(result.folder)
    assert rec.status == "ok" and len(rec.value) == 4 and len(rec.raw) == 4
    assert rec.request["min_samples"] == 4
    failed = [a for a in rec.attempts if a.sample == 3]
    assert [a.kind for a in failed] == ["invalid"] * 3  # the first reply and two re-asks
    assert all(a.raw == BAD and a.error for a in failed)
    tally = rec.tally()
    assert (tally.samples, tally.failed_samples, tally.requests) == (5, 1, 3)
    text = trace_text(result.folder)
    assert "5 samples (1 failed), 3 requests (2 re-asks)" in text
    assert "min_samples=4" in text
    assert page_record(result.folder)["t"] == "5 samples (1 failed), 3 requests (2 re-asks)"


def test_without_enough_valid_samples_the_example_fails_as_before(tmp_path: Path) -> None:
    result = run(tmp_path, sampled_graph(n=5, min_samples=5), one_bad_sample(reasks_fail=9))
    line = result.results[0]
    assert line.status == "failed"
    assert "no valid reply after 3 attempts" in (line.error or "")
    rec = judge_run(result.folder)
    assert rec.status == "failed" and len(rec.attempts) == 7
    assert rec.tally().failed_samples == 1


def test_too_few_valid_samples_says_how_many(tmp_path: Path) -> None:
    def two_bad(request: FakeRequest) -> str | FakeAnswer:
        if len(request.messages) == 1:
            return FakeAnswer([GOOD, BAD, GOOD, BAD, GOOD])
        return BAD

    result = run(tmp_path, sampled_graph(n=5, min_samples=4), two_bad)
    error = result.results[0].error or ""
    assert "3 of 5 samples valid, fewer than min_samples 4" in error
    assert "no valid reply after 3 attempts" in error


def test_cached_samples_and_a_failing_pending_one_meet_min_samples(tmp_path: Path) -> None:
    cache = tmp_path / "cache.sqlite"
    graph = sampled_graph(n=5, min_samples=4)
    run(tmp_path / "a", graph, one_bad_sample(reasks_fail=9), cache=cache)
    again = run(tmp_path / "b", graph, lambda request: BAD, cache=cache)
    assert again.results[0].outputs["scores"] == [7] * 4
    tally = judge_run(again.folder).tally()
    assert str(tally) == "5 samples (1 failed, 4 from cache), 3 requests (2 re-asks)"


def test_min_samples_is_checked_against_n(tmp_path: Path) -> None:
    with pytest.raises(orc.GraphError) as caught:
        orc.Graph.from_dict(sampled_graph(n=3, min_samples=4), PROMPTS)
    assert "min_samples 4 is more than the 3 sample(s) asked for" in str(caught.value)
    with pytest.raises(orc.GraphError, match="min_samples must be at least 1, got 0"):
        orc.Graph.from_dict(sampled_graph(n=3, min_samples=0), PROMPTS)
    graph = {**sampled_graph(n="params.k", min_samples="params.m"), "params": {"k": 3, "m": 4}}
    result = run(tmp_path, graph, lambda request: GOOD)
    assert "min_samples 4 is more than the 3 sample(s)" in (result.results[0].error or "")


def test_validate_warns_of_samples_at_temperature_zero(tmp_path: Path) -> None:
    graph = {**sampled_graph(n=5), "defaults": {"temperature": 0.0, "n": 5}}
    path = write_graph(tmp_path / "g", graph, PROMPTS)
    outcome = orchestrator_command("validate", str(path))
    assert outcome.returncode == 0, outcome.stderr
    # The verdict on stdout, the library's warning on stderr with the other diagnostics.
    assert "is valid" in outcome.stdout and "warning" not in outcome.stdout
    assert "warning:" in outcome.stderr
    assert "n=5 samples at temperature 0" in outcome.stderr
    assert "node 'judge'" in outcome.stderr
    quiet = write_graph(tmp_path / "q", sampled_graph(n=5), PROMPTS)  # temperature 0.7
    checked = orchestrator_command("validate", str(quiet))
    assert "is valid" in checked.stdout and "warning" not in checked.stdout + checked.stderr


def test_expression_samples_at_temperature_zero_warn_once_per_node(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    graph = {**sampled_graph(n="params.k"), "params": {"k": 3}}
    graph["defaults"]["temperature"] = 0.0
    with caplog.at_level(logging.WARNING, logger="orchestrator"):
        orc.run(
            orc.Graph.from_dict(graph, PROMPTS),
            [{"id": f"e{i}", "text": f"t{i}"} for i in range(4)],
            transport=orc.FakeTransport(lambda request: GOOD),
            structured="server",
        )
    warned = [r.getMessage() for r in caplog.records if "temperature 0" in r.getMessage()]
    assert warned == [
        "node 'judge': n=3 samples at temperature 0: a deterministic server gives 3 "
        "identical samples; raise the temperature, or ask for one"
    ]


def test_a_sampling_value_that_is_no_number_says_so(tmp_path: Path) -> None:
    graph = {**sampled_graph(n="params.k"), "params": {"k": "five"}}
    result = run(tmp_path / "n", graph, lambda request: GOOD)
    assert "n `params.k` gave 'five', not an integer" in (result.results[0].error or "")
    graph = {**judge_graph(temperature="params.t"), "params": {"t": "hot"}}
    result = run(tmp_path / "t", graph, lambda request: GOOD)
    assert "temperature `params.t` gave 'hot', not a number" in (result.results[0].error or "")


def test_an_old_trace_without_the_sample_column_reads_and_reports(tmp_path: Path) -> None:
    result = run(tmp_path, sampled_graph(n=5), one_bad_sample(reasks_fail=0))
    traces = result.folder / "traces.sqlite"
    with sqlite3.connect(traces) as db:
        db.execute("ALTER TABLE attempts DROP COLUMN sample")
    rec = judge_run(result.folder)
    assert [a.sample for a in rec.attempts] == [None] * 6
    assert str(rec.tally()) == "6 attempts"  # as these traces were always shown
    assert "6 attempts" in trace_text(result.folder)
    page = page_record(result.folder)
    assert page["t"] == "6 attempts" and all("sm" not in a for a in page["a"])
    # A run resuming into the folder adds the column; the old rows keep theirs empty.
    TraceStore(traces).close()
    with sqlite3.connect(traces) as db:
        columns = {row[1] for row in db.execute("PRAGMA table_info(attempts)")}
    assert "sample" in columns
    assert str(judge_run(result.folder).tally()) == "6 attempts"


def test_tally_of_failed_requests_only_and_of_nothing() -> None:
    failed = [Attempt(number=i, kind="transport", error="boom") for i in (1, 2)]
    assert str(Tally.of(failed)) == "2 failed requests"
    assert Tally.of([]) is None


def test_the_page_shows_the_tally_and_each_attempts_sample(tmp_path: Path) -> None:
    """In a real Chromium: the node card's chip is the tally Python computed, and the
    attempts table names each reply's sample."""
    from test_report_browser import Page, _missing

    reason = _missing()
    if reason is not None:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    from orchestrator.report.browser import CHROMIUM, CHROMIUM_ARGS

    result = run(tmp_path, sampled_graph(n=5, min_samples=4), one_bad_sample(reasks_fail=9))
    report = build_report(result.folder)
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = Page(chromium, report.as_uri())
        try:
            page.open("e0")
            card = page.tab.locator('#example-view .node-card[data-node="judge"]')
            chips = card.locator(".chip.tally").all_inner_texts()
            assert chips == ["5 samples (1 failed), 3 requests (2 re-asks)"]
            cells = card.locator("table.attempts tbody tr td:nth-child(3)").all_inner_texts()
            assert cells == ["0", "1", "2", "3", "3", "3", "4"]
            assert page.errors == []
        finally:
            page.close()
            chromium.close()
