"""The report's "Judge card" panel: the card's flags and tables on the run page, and no
panel (and no failure) for a folder whose trace has no LLM call."""

from __future__ import annotations

import json
import random
from html import escape
from pathlib import Path

from test_card_planted import POINTWISE, UNMEASURED, _pointwise_respond, _text, unjudged_run

import orchestrator as orc
from orchestrator.providers.fake import FAKE_MODEL
from orchestrator.report import build_report


def test_report_shows_the_judge_card(tmp_path: Path) -> None:
    (tmp_path / "prompts").mkdir()
    for kind in ("long", "fair"):
        (tmp_path / "prompts" / f"{kind}.jinja").write_text(
            f"{kind}|{{{{ generator }}}}|{{{{ output }}}}"
        )
    graph = {
        **POINTWISE,
        "jury": [],
        "nodes": {k: POINTWISE["nodes"][k] for k in ("long", "fair")},
        "outputs": {"long": "long.score", "fair": "fair.score"},
        "prompts": "prompts",
    }
    path = tmp_path / "graph.yaml"
    path.write_text(json.dumps(graph), encoding="utf-8")
    rng = random.Random(9)
    rows = [
        {"id": f"r{i}", "output": _text(rng, rng.randint(3, 70)), "generator": FAKE_MODEL}
        for i in range(40)
    ]
    out = tmp_path / "run"
    orc.run(path, rows, out=out, transport=orc.FakeTransport(_pointwise_respond), cache=False)
    card = orc.judge_card(out)
    assert card.flags
    html = build_report(out).read_text(encoding="utf-8")
    assert 'data-view="judge_card"' in html and "<h3>Judge card</h3>" in html
    for flag in card.flags:
        assert escape(flag) in html
    assert "Length bias (score vs length of output)" in html


def test_no_card_panel_without_llm_calls(tmp_path: Path) -> None:
    graph = {
        "name": "only_compute",
        "inputs": ["values"],
        "nodes": {"total": {"kind": "compute", "function": "mean", "args": {"values": "values"}}},
        "outputs": {"total": "total"},
    }
    out = tmp_path / "run"
    orc.run(orc.graph_from_dict(graph), [{"id": "a", "values": [1, 2]}], out=out)
    html = build_report(out).read_text(encoding="utf-8")
    assert 'data-view="judge_card"' not in html


def test_the_card_notes_reach_the_panel(tmp_path: Path) -> None:
    """Item 12 of issue 35: a length bias the card could not measure says so on the page."""
    html = build_report(unjudged_run(tmp_path)).read_text(encoding="utf-8")
    assert escape(f"note: {UNMEASURED}") in html
