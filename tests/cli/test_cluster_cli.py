"""`--cluster FIELD` on the command line: compare, meta-eval and judge-card say they drew or
flipped whole clusters and how many, and refuse a field no example has, naming it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import scripted_run
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.cli import app

USERS, PER_USER = 12, 4
SPEC: dict[str, Any] = {
    "name": "nested",
    "inputs": ["output", "user"],
    "nodes": {
        "judge": {"kind": "llm", "prompt": "judge.jinja", "output": {"score": {"type": "number"}}}
    },
    "outputs": {"score": "judge.score"},
}


def _run(out: Path, system: str, scores: np.ndarray) -> Path:
    rows = [
        {"id": f"e{i:02d}", "output": f"{system} #{i}#" + "x" * i, "user": f"u{i // PER_USER}"}
        for i in range(len(scores))
    ]
    return scripted_run(out, SPEC, "Rate {{ output }}", rows, scores)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    rng = np.random.default_rng(4)
    n = USERS * PER_USER
    a = np.round(rng.normal(5.0, 1.0, n), 2)
    b = np.round(a + np.repeat(rng.normal(0.3, 1.0, USERS), PER_USER) + rng.normal(0, 1, n), 2)
    root = tmp_path_factory.mktemp("cluster_cli")
    labels = root / "labels.jsonl"
    labels.write_text(
        "".join(
            json.dumps({"id": f"e{i:02d}", "score": float(a[i]) + 0.5}) + "\n" for i in range(n)
        )
    )
    return _run(root / "a", "a", a), _run(root / "b", "b", b), labels


def test_compare_flips_whole_clusters(runs: tuple[Path, Path, Path]) -> None:
    a, b, _ = runs
    runner = CliRunner()
    found = runner.invoke(app, ["compare", str(a), str(b), "--cluster", "user", "--format", "json"])
    assert found.exit_code == 0, found.output
    data = json.loads(found.output)
    pair = data["outputs"][0]["pairs"][0]
    assert data["cluster"] == "user" and pair["clusters"] == USERS
    plain = orc.compare(a, b).pair("score")
    assert pair["difference"] == pytest.approx(plain.difference)
    assert pair["p"] != plain.p  # 12 whole users flipped, not 48 examples
    table = runner.invoke(app, ["compare", str(a), str(b), "--cluster", "user"])
    assert table.exit_code == 0 and f"clustered by user ({USERS} clusters)" in table.output
    refused = runner.invoke(app, ["compare", str(a), str(b), "--cluster", "nobody"])
    assert refused.exit_code != 0 and "'nobody'" in refused.output and "cluster" in refused.output


def test_meta_eval_draws_whole_clusters(runs: tuple[Path, Path, Path]) -> None:
    a, _, labels = runs
    runner = CliRunner()
    found = runner.invoke(app, ["meta-eval", str(a), "--labels", str(labels), "--cluster", "user"])
    assert found.exit_code == 0, found.output
    assert "clusters of user" in found.output
    written = json.loads((a / "meta_eval.json").read_text())
    assert written["bootstrap"]["unit"] == "cluster" and written["bootstrap"]["clusters"] == USERS
    refused = runner.invoke(
        app, ["meta-eval", str(a), "--labels", str(labels), "--cluster", "nobody"]
    )
    assert refused.exit_code != 0 and "no field 'nobody' to cluster by" in refused.output


def test_judge_card_resamples_whole_clusters(runs: tuple[Path, Path, Path]) -> None:
    a, _, _ = runs
    runner = CliRunner()
    found = runner.invoke(app, ["judge-card", str(a), "--cluster", "user", "--format", "json"])
    assert found.exit_code == 0, found.output
    card = orc.JudgeCard.model_validate_json(found.output)
    assert card.cluster == "user" and card.clusters == USERS
    assert card == orc.judge_card(a, cluster="user")
    plain = orc.judge_card(a)
    assert card.length_bias[0].spearman == plain.length_bias[0].spearman
    assert card.length_bias[0].ci != plain.length_bias[0].ci
    table = runner.invoke(app, ["judge-card", str(a), "--cluster", "user"])
    assert table.exit_code == 0 and f"clustered by user ({USERS} clusters)" in table.output
    refused = runner.invoke(app, ["judge-card", str(a), "--cluster", "nobody"])
    assert refused.exit_code != 0 and "no field 'nobody' to cluster by" in refused.output
