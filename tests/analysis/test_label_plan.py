"""`orc.label_plan` / `orchestrator label-plan`: exactly K examples from the judge's
confidence (or uniformly without one), written only where no one's file is replaced, and
`estimate` weighing the labelled plan as ppi-python's `w` arguments do."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.cli import app
from orchestrator.errors import ConfigurationError, RunFolderError
from orchestrator.stats import active_probabilities
from orchestrator.store.records import NodeRun
from orchestrator.store.trace import TraceStore

N = 120


def _with_logprob(score: int, p: float) -> dict[str, Any]:
    tokens = [
        {"token": '{"score": ', "logprob": 0.0},
        {"token": str(score), "logprob": math.log(p)},
    ]
    return {"score": score, "_logprobs": [*tokens, {"token": "}", "logprob": 0.0}]}


@pytest.fixture
def run(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray, np.ndarray]:
    """N examples judged 1-5 by node `judge` with a token probability each; the truth is
    off by one where the judge was unsure."""
    rng = np.random.default_rng(8)
    scores = rng.integers(1, 6, N)
    sure = rng.uniform(0.3, 1.0, N)
    truth = scores + (rng.uniform(size=N) > sure) * rng.choice([-1, 1], N)
    folder = tmp_path / "run"
    folder.mkdir()
    lines = [{"id": f"e{i}", "status": "ok", "score": int(s)} for i, s in enumerate(scores)]
    (folder / "results.jsonl").write_bytes(b"\n".join(orjson.dumps(x) for x in lines) + b"\n")
    trace = TraceStore(folder / "traces.sqlite", "run-1", "gh", "key")
    for i, s in enumerate(scores):
        trace.record(
            NodeRun(example_id=f"e{i}", node="judge", value=_with_logprob(int(s), sure[i]))
        )
    trace.close()
    return folder, scores, sure, truth


def test_exactly_k_examples_with_probabilities_from_the_judges_confidence(run: Any) -> None:
    folder, _, sure, _ = run
    plan = orc.label_plan(folder, budget=30, field="score")
    ids = [line["id"] for line in plan.plan]
    assert len(ids) == len(set(ids)) == 30
    assert (plan.node, plan.source) == ("judge", "logprobs")
    expected = active_probabilities(np.sqrt(1 - sure), 30)  # the design is order-free
    for line in plan.plan:
        assert line["probability"] == pytest.approx(expected[int(line["id"][1:])], rel=1e-9)
    # Unsure examples are likelier: the plan's mean confidence is below the run's.
    chosen = sure[[int(i[1:]) for i in ids]]
    assert chosen.mean() < sure.mean()
    again = orc.label_plan(folder, budget=30, field="score")
    assert again.plan == plan.plan  # seeded
    assert orc.label_plan(folder, budget=30, field="score", seed=1).plan != plan.plan


def test_a_run_without_confidence_gets_the_uniform_design(run: Any) -> None:
    folder, *_ = run
    (folder / "traces.sqlite").unlink()
    plan = orc.label_plan(folder, budget=12, field="score")
    assert (plan.node, plan.source) == (None, "uniform")
    assert [line["probability"] for line in plan.plan] == pytest.approx([12 / N] * 12)
    assert len(plan.plan) == 12 and plan.notes


def test_a_labelled_plan_is_weighed_as_ppi_python_weighs_it(run: Any, tmp_path: Path) -> None:
    ppi_py = pytest.importorskip("ppi_py")
    folder, scores, _, truth = run
    out = tmp_path / "plan.jsonl"
    plan = orc.label_plan(folder, budget=40, field="score", out=out)
    lines = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    assert lines == plan.plan and set(lines[0]) == {"id", "probability"}
    labelled = tmp_path / "labelled.jsonl"
    labelled.write_bytes(
        b"".join(orjson.dumps({**x, "score": int(truth[int(x["id"][1:])])}) + b"\n" for x in lines)
    )
    found = orc.estimate(folder, labelled, field="score")
    assert found.weighted and (found.n_labels, found.n_unlabelled) == (40, N)
    # Plan weights keep the normal (ppi-python) interval at 40 labels, and the notes say so.
    assert found.interval == "normal" and any("no plan weights" in n for n in found.notes)
    index = [int(x["id"][1:]) for x in lines]
    y, f = truth[index].astype(float), scores[index].astype(float)
    w = 1 / np.asarray([x["probability"] for x in lines])
    low, high = ppi_py.ppi_mean_ci(y, f, scores * 1.0, alpha=0.05, lam=None, w=w)
    value = ppi_py.ppi_mean_pointestimate(y, f, scores * 1.0, lam=None, w=w)
    assert found.ppi is not None
    assert found.ppi.value == pytest.approx(float(np.squeeze(value)), abs=1e-6)
    assert found.ppi.ci == pytest.approx((float(low[0]), float(high[0])), abs=1e-6)


def test_out_never_replaces_a_file_it_did_not_write(run: Any, tmp_path: Path) -> None:
    folder, *_ = run
    out = tmp_path / "plan.jsonl"
    orc.label_plan(folder, budget=10, field="score", out=out)
    with pytest.raises(RunFolderError, match=r"exists; choose another --out \(or --overwrite"):
        orc.label_plan(folder, budget=10, field="score", out=out)
    orc.label_plan(folder, budget=10, field="score", out=out, seed=3, overwrite=True)
    # Once someone has labelled it, it is theirs: even --overwrite leaves it alone.
    first = orjson.loads(out.read_bytes().splitlines()[0])
    out.write_bytes(orjson.dumps({**first, "score": 3}) + b"\n")
    before = out.read_bytes()
    with pytest.raises(RunFolderError, match="replaces only a label plan nobody has labelled"):
        orc.label_plan(folder, budget=10, field="score", out=out, overwrite=True)
    assert out.read_bytes() == before
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    result = CliRunner().invoke(
        app, ["label-plan", str(folder), "--budget", "5", "--field", "score", "--out", str(notes)]
    )
    assert result.exit_code != 0 and "exists" in result.output and notes.read_text() == "mine"


@pytest.mark.parametrize(
    ("args", "error", "said"),
    [
        ({"budget": 0}, ConfigurationError, "choose between 1 and 120"),
        ({"budget": N + 1}, ConfigurationError, "choose between 1 and 120"),
        ({"budget": 5, "node": "other"}, ConfigurationError, "node 'other'"),
        ({"budget": 5, "field": "nothere"}, ConfigurationError, "no ok result"),
    ],
)
def test_bad_input_is_refused(run: Any, args: dict[str, Any], error: type, said: str) -> None:
    folder, *_ = run
    with pytest.raises(error, match=said):
        orc.label_plan(folder, **{"field": "score", **args})


def test_the_command_writes_the_plan_and_says_what_next(run: Any, tmp_path: Path) -> None:
    folder, *_ = run
    out = tmp_path / "plan.jsonl"
    args = ["label-plan", str(folder), "--budget", "8", "--field", "score", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert len(out.read_bytes().splitlines()) == 8
    assert "8 of 120 examples" in result.output and "orchestrator estimate" in result.output
    shown = CliRunner().invoke(app, [*args, "--overwrite", "--format", "json"])
    assert json.loads(shown.output)["source"] == "logprobs"
