"""Counts of a resumed run (issue 26 item 9b): the manifest keeps each part's counts (the
first run and every resume) and its `counts` are the whole run's, parts summed; a manifest
written before parts were kept is read as one part."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import judge_graph, write_graph

import orchestrator as orc
from orchestrator.store.records import WORK_COUNTERS, Manifest

ROWS = [{"id": f"r{i}", "text": f"text {i}"} for i in range(6)]


def _run(tmp_path: Path, limit: int | None) -> orc.RunResult:
    graph = write_graph(tmp_path, judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    return orc.run(
        graph,
        ROWS,
        limit=limit,
        out=tmp_path / "run",
        transport=orc.FakeTransport(),
        cache=tmp_path / "cache.sqlite",
    )


def test_a_resumed_run_counts_every_part_and_their_total(tmp_path: Path) -> None:
    first = _run(tmp_path, limit=4).manifest
    rest = _run(tmp_path, limit=None).manifest
    one, two = rest.parts
    assert (one.run_id, two.run_id) == (first.run_id, rest.run_id)
    assert (one.status, two.status) == ("complete", "complete")
    assert one.counts.requests == first.counts.requests == 5  # 4 rows and the canary
    assert two.counts.requests == 3  # 2 rows and the canary
    for name in WORK_COUNTERS:
        assert getattr(rest.counts, name) == getattr(one.counts, name) + getattr(
            two.counts, name
        ), name
    assert rest.counts.requests == 8
    assert (rest.counts.examples_ok, rest.counts.examples_resumed) == (6, 4)
    assert rest.count_text("requests") == "8 (5 + 3)"
    # On disk too, and summary.json holds the total.
    on_disk = Manifest.from_disk(json.loads((tmp_path / "run" / "manifest.json").read_text()))
    assert [p.counts.requests for p in on_disk.parts] == [5, 3]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["counts"]["requests"] == 8


def test_a_manifest_without_parts_is_resumed_as_one_part(tmp_path: Path) -> None:
    first = _run(tmp_path, limit=4).manifest
    path = tmp_path / "run" / "manifest.json"
    old = json.loads(path.read_text())
    del old["parts"]  # as an orchestrator before parts wrote it
    path.write_text(json.dumps(old))
    rest = _run(tmp_path, limit=None).manifest
    assert [p.run_id for p in rest.parts] == [first.run_id, rest.run_id]
    assert rest.parts[0].counts.requests == 5 and rest.counts.requests == 8


def test_a_first_run_is_one_part(tmp_path: Path) -> None:
    manifest = _run(tmp_path, limit=None).manifest
    (part,) = manifest.parts
    assert part.counts.requests == manifest.counts.requests
    assert manifest.count_text("requests") == str(manifest.counts.requests)
