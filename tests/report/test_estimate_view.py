"""The report's "Estimates" panel: the estimates and label plans kept in a run folder
(`estimate --keep`, `label-plan --keep`), with their numbers; no panel without them; a
file in `estimates/` that is not a kept estimate is never replaced."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

import pytest
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.cli import app
from orchestrator.errors import RunFolderError
from orchestrator.report import build_report

GRAPH = {
    "name": "only_compute",
    "inputs": ["values"],
    "nodes": {"total": {"kind": "compute", "function": "mean", "args": {"values": "values"}}},
    "outputs": {"total": "total"},
}


def _run(tmp_path: Path) -> tuple[Path, Path]:
    """A run of 80 examples whose 'judge' mean is the truth plus 0.5, 30 of them labelled."""
    rows = [{"id": f"e{i}", "values": [i % 5, i % 5 + 1]} for i in range(80)]
    out = tmp_path / "run"
    orc.run(orc.graph_from_dict(GRAPH), rows, out=out)
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        "".join(json.dumps({"id": f"e{i}", "score": i % 5}) + "\n" for i in range(0, 60, 2))
    )
    return out, labels


def test_a_kept_estimate_and_plan_show_in_the_report(tmp_path: Path) -> None:
    out, labels = _run(tmp_path)
    found = orc.estimate(out, labels, field="total", keep=True)
    assert found.kept == str(out / "estimates" / "total.json")
    plan = orc.label_plan(out, budget=10, field="total", keep=True)
    assert plan.kept == str(out / "estimates" / "plan.total.json")
    html = build_report(out).read_text(encoding="utf-8")
    assert 'data-view="estimates"' in html and "<h3>Estimates</h3>" in html
    assert found.ppi is not None and found.classical is not None and found.naive is not None
    for part in (found.ppi, found.classical, found.naive):
        shown = f"{part.value:.4g} [{part.ci[0]:.4g}, {part.ci[1]:.4g}]"
        assert escape(shown) in html
    assert found.lam is not None and f'<td class="num">{found.lam:.2f}</td>' in html
    assert "30 labels, 80 judged examples" in html and "bootstrap-t interval" in html
    assert "10 of 80 examples to label (uniform" in html


def test_no_panel_without_a_kept_estimate(tmp_path: Path) -> None:
    out, labels = _run(tmp_path)
    orc.estimate(out, labels, field="total")  # not kept
    assert not (out / "estimates").exists()
    html = build_report(out).read_text(encoding="utf-8")
    assert 'data-view="estimates"' not in html


def test_keep_replaces_its_own_estimate_and_never_a_file_it_did_not_write(tmp_path: Path) -> None:
    out, labels = _run(tmp_path)
    first = orc.estimate(out, labels, field="total", keep=True, small_sample="off")
    again = orc.estimate(out, labels, field="total", keep=True)
    kept = json.loads(Path(again.kept or "").read_text())
    assert kept["interval"] == "bootstrap-t" and first.interval == "normal"  # replaced
    foreign = out / "estimates" / "total.json"
    foreign.write_text('{"mine": true}\n')
    with pytest.raises(RunFolderError, match="is not an estimate kept by"):
        orc.estimate(out, labels, field="total", keep=True)
    assert foreign.read_text() == '{"mine": true}\n'
    result = CliRunner().invoke(
        app, ["estimate", str(out), "--labels", str(labels), "--field", "total", "--keep"]
    )
    assert result.exit_code != 0 and "left as it is and nothing was kept" in result.output
    assert "Traceback" not in result.output
