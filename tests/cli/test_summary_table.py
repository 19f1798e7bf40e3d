"""The table `orchestrator run` prints at the end (issue 26 items 9 and 10): shares in flight
on their own row, and a quick run's wall time as a real small duration."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli.run import _print_summary
from orchestrator.store.records import Counts, Manifest, RunPart


def test_the_summary_shows_shares_apart_from_hits_and_a_small_wall_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = Manifest(
        graph={"name": "judge"},
        counts=Counts(examples_ok=4, requests=1, cache_hits=2, shared=3),
        wall_seconds=0.04,
    )
    _print_summary(manifest, tmp_path)
    out = capsys.readouterr().out
    rows = {line.strip("│ ").split("│")[0].strip(): line for line in out.splitlines()}
    assert "2" in rows["cache hits"] and "3" in rows["shared in flight"], out
    assert "0.04 s" in rows["wall time"] and "0.0 s" not in out, out


def test_a_resumed_run_shows_the_total_with_each_part(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parts = [RunPart(counts=Counts(requests=5, retries=1)), RunPart(counts=Counts(requests=3))]
    manifest = Manifest(graph={"name": "judge"}, counts=Counts(requests=8, retries=1), parts=parts)
    _print_summary(manifest, tmp_path)
    out = capsys.readouterr().out
    rows = {line.strip("│ ").split("│")[0].strip(): line for line in out.splitlines()}
    assert "8 (5 + 3)" in rows["LLM requests"], out
    assert "1 (1 + 0)" in rows["retries"], out
    assert "2" in rows["parts (first run + resumes)"], out
