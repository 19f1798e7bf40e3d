"""ExPerT, GEMBA and G-Eval graphs end to end against the real embedded vLLM server.

The 135M model is a weak judge, so these tests check the path, not the judgments: every
example finishes, the explanation has its promised shape, the scores follow from it, and
G-Eval finds the score token in real logprobs. A few rows keep the CPU run short.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import orchestrator as orc
from orchestrator.compute.expert import SCORE_KEYS, scores_from_explanation

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# A near-copy, the same content restyled, and an off-topic output.
EXPERT_ROWS = ["review-near-copy", "review-same-content-formal", "abstract-off-topic"]


def rows(name: str, ids: list[str] | None, limit: int, tmp: Path) -> Path:
    lines = [json.loads(x) for x in (ROOT / "examples" / f"{name}.jsonl").open() if x.strip()]
    picked = [r for r in lines if ids is None or r["id"] in ids][:limit]
    path = tmp / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in picked), encoding="utf-8")
    return path


def run(graph: str, data: Path, out: Path, server: Any) -> list[dict[str, Any]]:
    orc.run(
        ROOT / "graphs" / f"{graph}.yaml",
        data,
        out=out,
        base_url=server.base_url,
        model=server.model,
        cache=False,
        timeout=600,
    )
    return [json.loads(x) for x in (out / "results.jsonl").open()]


def test_expert_graph_on_the_embedded_server(embedded_server: Any, tmp_path: Path) -> None:
    data = rows("expert", EXPERT_ROWS, 3, tmp_path)
    lines = run("expert", data, tmp_path / "run", embedded_server)
    assert len(lines) == 3
    for line in lines:
        assert line["status"] == "ok", line.get("error")
        assert set(line["scores"]) == set(SCORE_KEYS)
        assert line["scores"] == pytest.approx(scores_from_explanation(line["explanation"]))
        assert line["score"] == line["scores"]["content_style_average_f1"]
        assert line["explanation"]["recall"] and line["explanation"]["precision"]
        for side in line["explanation"].values():
            for item in side:
                assert item["evidence"], item
                assert item["matched"] is (item["matched_aspect"] is not None)
        assert line["truncation"]["reference"]["method"] == "tokenize"  # vLLM has /tokenize
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert {f"scores.{k}" for k in SCORE_KEYS} <= set(summary["means"])


def test_gemba_and_geval_on_the_embedded_server(embedded_server: Any, tmp_path: Path) -> None:
    gemba = run("gemba", rows("gemba", None, 2, tmp_path), tmp_path / "gemba", embedded_server)
    assert [x["status"] for x in gemba] == ["ok", "ok"]
    assert all(0 <= x["rating"] <= 100 for x in gemba)
    geval = run("geval", rows("geval", None, 2, tmp_path), tmp_path / "geval", embedded_server)
    for line in geval:
        assert line["status"] == "ok", line.get("error")
        assert 1.0 <= line["rating_weighted"] <= 5.0
        assert 0.0 <= line["score"] <= 1.0
