"""`orc.estimate` / `orchestrator estimate`: a run folder and a labels file in, the PPI++,
classical and naive estimates out, equal to ppi-python on the same numbers; categorical
fields per value; bad input refused in one line; docs/estimate.md's example as printed."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.cli import app
from orchestrator.errors import ConfigurationError, LabelError
from orchestrator.stats import labels_for_width

ROOT = Path(__file__).resolve().parents[2]


def _write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"\n".join(orjson.dumps(x) for x in lines) + b"\n")
    return path


def _run(folder: Path, outputs: list[dict[str, Any]]) -> Path:
    folder.mkdir()
    lines = [{"id": f"e{i}", "status": "ok", **o} for i, o in enumerate(outputs)]
    _write(folder / "results.jsonl", lines)
    return folder


@pytest.fixture
def scored(tmp_path: Path) -> tuple[Path, Path, np.ndarray, np.ndarray, np.ndarray]:
    """200 examples judged 1-5 (biased upwards), the first 40 labelled; one failed row."""
    rng = np.random.default_rng(4)
    truth = rng.integers(1, 6, 200)
    judge = np.clip(truth + rng.integers(0, 2, 200), 1, 5)
    outputs: list[dict[str, Any]] = [
        {"score": int(s), "verdict": "pass" if s >= 3 else "fail"} for s in judge
    ]
    folder = _run(tmp_path / "run", outputs)
    with (folder / "results.jsonl").open("ab") as handle:
        handle.write(orjson.dumps({"id": "bad", "status": "failed"}) + b"\n")
    labelled = rng.choice(200, 40, replace=False)
    labels = _write(
        tmp_path / "labels.jsonl",
        [{"id": f"e{i}", "score": int(truth[i]), "ok": bool(truth[i] >= 3)} for i in labelled],
    )
    return folder, labels, truth, judge, labelled


def test_a_numeric_field_equals_ppi_python(scored: Any) -> None:
    ppi_py = pytest.importorskip("ppi_py")
    folder, labels, truth, judge, labelled = scored
    # 40 labels: the ppi-python form is the small-sample variant switched off.
    found = orc.estimate(folder, labels, field="score", small_sample="off")
    rest = np.setdiff1d(np.arange(200), labelled)
    y, f, f_rest = truth[labelled].astype(float), judge[labelled] * 1.0, judge[rest] * 1.0
    value = ppi_py.ppi_mean_pointestimate(y, f, f_rest, lam=None)
    low, high = ppi_py.ppi_mean_ci(y, f, f_rest, alpha=0.05, lam=None)
    assert found.ppi is not None and found.classical is not None and found.naive is not None
    assert found.ppi.value == pytest.approx(float(np.squeeze(value)), abs=1e-6)
    assert found.ppi.ci == pytest.approx((float(low[0]), float(high[0])), abs=1e-6)
    c_low, c_high = ppi_py.classical_mean_ci(y, alpha=0.05)
    assert found.classical.value == pytest.approx(y.mean())
    assert found.classical.ci == pytest.approx((c_low, c_high), abs=1e-6)
    assert found.naive.value == pytest.approx(judge.mean())
    assert (found.n_labels, found.n_unlabelled, found.n_examples) == (40, 160, 200)
    assert found.kind == "mean" and not found.weighted and found.missing == 0
    assert found.lam is not None and 0 < found.lam <= 1
    assert found.effective_labels is not None and found.effective_labels > 40
    assert any("40 labels" in note for note in found.notes)  # fewer than 100: said
    assert found.interval == "normal" and "ppi-python" in found.method


def test_fewer_than_100_labels_get_the_bootstrap_t_interval_by_default(scored: Any) -> None:
    folder, labels, *_ = scored
    normal = orc.estimate(folder, labels, field="score", small_sample="off")
    found = orc.estimate(folder, labels, field="score")
    assert found.interval == "bootstrap-t" and found.small_sample == "auto"
    assert found.ppi is not None and normal.ppi is not None
    assert found.ppi.value == normal.ppi.value  # the point estimate is the same
    assert found.ppi.ci != pytest.approx(normal.ppi.ci, abs=1e-3)
    assert found.ppi.ci[0] < found.ppi.value < found.ppi.ci[1]
    assert any("bootstrap-t" in note for note in found.notes)
    assert found == orc.estimate(folder, labels, field="score")  # seeded: the same again
    command = ["estimate", str(folder), "--labels", str(labels), "--field", "score"]
    out = CliRunner().invoke(app, [*command, "--small-sample", "off", "--format", "json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["interval"] == "normal"
    bad = CliRunner().invoke(app, [*command, "--small-sample", "maybe"])
    assert bad.exit_code != 0 and "--small-sample must be auto or off" in bad.output


def test_a_categorical_field_gets_each_values_share(scored: Any) -> None:
    ppi_py = pytest.importorskip("ppi_py")
    folder, labels, truth, judge, labelled = scored
    # Values compare as text, trimmed and in any case ("PASS " is "pass").
    found = orc.estimate(
        folder, _relabel(labels, truth), field="verdict", label_field="v", small_sample="off"
    )
    assert found.kind == "shares" and found.ppi is None
    assert sorted(found.shares) == ["fail", "pass"]
    rest = np.setdiff1d(np.arange(200), labelled)
    y = (truth[labelled] >= 3).astype(float)
    f, f_rest = (judge[labelled] >= 3) * 1.0, (judge[rest] >= 3) * 1.0
    low, high = ppi_py.ppi_mean_ci(y, f, f_rest, alpha=0.05, lam=None)
    assert found.shares["pass"].ppi.ci == pytest.approx((float(low[0]), float(high[0])), abs=1e-6)
    total = found.shares["pass"].ppi.value + found.shares["fail"].ppi.value
    assert total == pytest.approx(1.0, abs=0.05)


def test_labels_whose_values_the_judge_never_gives_are_refused(scored: Any) -> None:
    folder, labels, *_ = scored  # booleans under "ok"; the judge says "pass" or "fail"
    with pytest.raises(LabelError, match=r"none of the labels' values \(False, True\)"):
        orc.estimate(folder, labels, field="verdict", label_field="ok")


def _relabel(labels: Path, truth: np.ndarray) -> Path:
    lines = [orjson.loads(x) for x in labels.read_bytes().splitlines()]
    for line in lines:
        line["v"] = "PASS " if truth[int(line["id"][1:])] >= 3 else "fail"
    return _write(labels.with_name("verdicts.jsonl"), lines)


def test_several_people_on_one_example_count_as_their_mean(tmp_path: Path) -> None:
    folder = _run(tmp_path / "run", [{"score": s} for s in [1, 2, 3, 4, 5, 3]])
    one = _write(tmp_path / "one.jsonl", [{"id": "e0", "score": 2}, {"id": "e1", "score": 3}])
    two = _write(
        tmp_path / "two.jsonl",
        [
            {"id": "e0", "score": 1, "annotator": "a"},
            {"id": "e0", "score": 3, "annotator": "b"},
            {"id": "e1", "labels": [{"score": 2}, {"score": 4}]},
        ],
    )
    first, second = (
        orc.estimate(folder, one, field="score"),
        orc.estimate(folder, two, field="score"),
    )
    assert first.classical is not None and second.classical is not None
    assert first.classical.value == second.classical.value == 2.5


@pytest.mark.parametrize(
    ("labels", "field", "error", "said"),
    [
        ([{"id": "e0", "score": 2}], "score", LabelError, "needs at least 2"),
        ([{"id": "x1", "score": 2}, {"id": "x2", "score": 3}], "score", LabelError, "0 of its 2"),
        ([{"id": "e0", "score": 2}, {"id": "e1", "choice": "a"}], "score", LabelError, "mixes"),
        (
            [{"id": "e0", "score": 2}, {"id": "e1", "score": 3}],
            "nothere",
            ConfigurationError,
            "no ok",
        ),
        (
            [{"id": "e0", "score": 2, "probability": 0.5}, {"id": "e1", "score": 3}],
            "score",
            LabelError,
            "some labels carry a 'probability'",
        ),
        (
            [
                {"id": "e0", "score": 2, "probability": 0},
                {"id": "e1", "score": 3, "probability": 1},
            ],
            "score",
            LabelError,
            "number in (0, 1]",
        ),
    ],
)
def test_bad_input_is_refused_naming_the_file(
    tmp_path: Path, labels: list[dict[str, Any]], field: str, error: type, said: str
) -> None:
    folder = _run(tmp_path / "run", [{"score": s} for s in [1, 2, 3, 4, 5, 3]])
    path = _write(tmp_path / "labels.jsonl", labels)
    with pytest.raises(error, match=re.escape(said)):
        orc.estimate(folder, path, field=field)
    result = CliRunner().invoke(
        app, ["estimate", str(folder), "--labels", str(path), "--field", field]
    )
    assert result.exit_code != 0
    assert said in result.output and "Traceback" not in result.output


def test_a_missing_label_field_names_the_line(tmp_path: Path) -> None:
    folder = _run(tmp_path / "run", [{"score": s} for s in [1, 2, 3, 4, 5, 3]])
    path = _write(tmp_path / "labels.jsonl", [{"id": "e0", "grade": 2}, {"id": "e1", "score": 3}])
    with pytest.raises(LabelError, match=r"labels.jsonl:2: no 'grade'"):
        orc.estimate(folder, path, field="score", label_field="grade")


def test_the_command_prints_json_and_a_table(scored: Any) -> None:
    folder, labels, *_ = scored
    found = orc.estimate(folder, labels, field="score")
    runner = CliRunner()
    args = ["estimate", str(folder), "--labels", str(labels), "--field", "score"]
    result = runner.invoke(app, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    for name in ("ppi", "classical", "naive"):
        assert data[name]["value"] == getattr(found, name).value
        assert data[name]["ci"] == list(getattr(found, name).ci)
    assert data["lam"] == found.lam and data["effective_labels"] == found.effective_labels
    table = runner.invoke(app, args)
    assert table.exit_code == 0, table.output
    assert found.ppi is not None
    assert f"PPI++ {found.ppi.value:.4g} [{found.ppi.ci[0]:.4g}" in table.output
    assert "40 labels" in table.output


def test_the_docs_worked_example_prints_what_the_doc_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (ROOT / "docs" / "estimate.md").read_text(encoding="utf-8")
    section = text.split("## A worked example", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    shown = re.search(r"prints\s+```text\n(.*?)```", section, re.S)
    assert code and shown, "docs/estimate.md's example moved; keep this test pointing at it"
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code.group(1), "docs/estimate.md", "exec"), {"__name__": "docs_example"})
    assert printed.getvalue() == shown.group(1)


# -- two runs, win rates, users ---------------------------------------------------------------


def test_two_runs_give_the_difference_as_ppi_python_does(tmp_path: Path) -> None:
    ppi_py = pytest.importorskip("ppi_py")
    rng = np.random.default_rng(6)
    truth_a, truth_b = rng.normal(3, 1, 150), rng.normal(3.4, 1, 150)
    judge_a = truth_a + 0.5 + rng.normal(0, 0.4, 150)
    judge_b = truth_b + 0.2 + rng.normal(0, 0.4, 150)
    run_a = _run(tmp_path / "a", [{"score": float(x)} for x in judge_a])
    run_b = _run(tmp_path / "b", [{"score": float(x)} for x in judge_b])
    labelled = np.arange(0, 150, 3)  # 50 examples
    files = [
        _write(
            tmp_path / f"{name}.jsonl", [{"id": f"e{i}", "score": float(t[i])} for i in labelled]
        )
        for name, t in (("la", truth_a), ("lb", truth_b))
    ]
    found = orc.estimate([run_a, run_b], files, field="score", small_sample="off")
    rest = np.setdiff1d(np.arange(150), labelled)
    y = truth_b[labelled] - truth_a[labelled]
    f, f_rest = (judge_b - judge_a)[labelled], (judge_b - judge_a)[rest]
    low, high = ppi_py.ppi_mean_ci(y, f, f_rest, alpha=0.05, lam=None)
    assert found.kind == "difference" and found.other_run == str(run_b)
    assert found.ppi is not None and found.naive is not None
    assert found.ppi.ci == pytest.approx((float(low[0]), float(high[0])), abs=1e-6)
    assert found.naive.value == pytest.approx((judge_b - judge_a).mean())
    result = CliRunner().invoke(
        app,
        [
            "estimate",
            str(run_a),
            str(run_b),
            "--field",
            "score",
            "--labels",
            str(files[0]),
            *[
                "--labels",
                str(files[1]),
            ],
        ],
    )
    assert result.exit_code == 0 and "mean difference B − A" in result.output
    one = CliRunner().invoke(
        app, ["estimate", str(run_a), str(run_b), "--labels", str(files[0]), "--field", "score"]
    )
    assert one.exit_code != 0 and "one --labels per run" in one.output


def test_a_win_rate_counts_ties_half(tmp_path: Path) -> None:
    ppi_py = pytest.importorskip("ppi_py")
    rng = np.random.default_rng(9)
    options = np.array(["A", "B", "tie"])
    truth = rng.choice(3, 200, p=[0.5, 0.3, 0.2])
    judge = np.where(rng.uniform(size=200) < 0.75, truth, rng.choice(3, 200))
    run = _run(tmp_path / "pw", [{"winner": str(options[j])} for j in judge])
    labelled = np.arange(0, 200, 4)
    path = _write(
        tmp_path / "l.jsonl", [{"id": f"e{i}", "winner": str(options[truth[i]])} for i in labelled]
    )
    found = orc.estimate(run, path, field="winner", win="a", small_sample="off")
    win = np.array([1.0, 0.0, 0.5])
    rest = np.setdiff1d(np.arange(200), labelled)
    low, high = ppi_py.ppi_mean_ci(
        win[truth[labelled]], win[judge[labelled]], win[judge[rest]], alpha=0.05, lam=None
    )
    assert found.kind == "win_rate" and found.ppi is not None
    assert found.ppi.ci == pytest.approx((float(low[0]), float(high[0])), abs=1e-6)
    with pytest.raises(ConfigurationError, match="--win-rate 'C'"):
        orc.estimate(run, path, field="winner", win="C")


def test_clusters_resample_whole_users(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    users = np.repeat(np.arange(20), 10)
    truth = 3 + rng.normal(0, 0.8, 20)[users] + rng.normal(0, 1, 200)
    judge = truth + 0.3 + rng.normal(0, 0.5, 200)
    run = _run(
        tmp_path / "run",
        [{"score": float(j), "user": f"u{u}"} for j, u in zip(judge, users, strict=True)],
    )
    labelled = rng.choice(200, 60, replace=False)
    path = _write(
        tmp_path / "l.jsonl", [{"id": f"e{i}", "score": float(truth[i])} for i in labelled]
    )
    plain = orc.estimate(run, path, field="score")
    nested = orc.estimate(run, path, field="score", cluster="user")
    assert nested.clusters == 20 and nested.cluster == "user"
    assert nested.ppi is not None and plain.ppi is not None
    assert nested.ppi.value == plain.ppi.value  # the same estimate; only its interval widens
    assert nested.ppi.ci[1] - nested.ppi.ci[0] > 1.3 * (plain.ppi.ci[1] - plain.ppi.ci[0])
    assert orc.estimate(run, path, field="score", cluster="user") == nested  # seeded
    with pytest.raises(ConfigurationError, match="no field 'team' to cluster by"):
        orc.estimate(run, path, field="score", cluster="team")


# -- how many labels -----------------------------------------------------------------------------


def test_a_pilot_says_how_many_labels_a_width_needs(scored: Any) -> None:
    folder, labels, truth, judge, labelled = scored
    found = orc.estimate(folder, labels, field="score", width=0.6)
    y, f = truth[labelled].astype(float), judge[labelled].astype(float)
    assert found.labels_needed == labels_for_width(y, f, judge * 1.0, 0.6)
    assert found.labels_needed_classical == labels_for_width(y, f, judge * 1.0, 0.6, lam=0.0)
    assert found.labels_needed is not None and found.labels_needed_classical is not None
    assert found.labels_needed < found.labels_needed_classical  # the judge is informative
    with pytest.raises(ConfigurationError, match="--width: the labels needed are for a mean"):
        orc.estimate(folder, _relabel(labels, truth), field="verdict", label_field="v", width=0.6)
    runner = CliRunner()
    shown = runner.invoke(
        app,
        ["estimate", str(folder), "--labels", str(labels), "--field", "score", "--width", "0.6"],
    )
    said = f"PPI++ needs {found.labels_needed} labels"
    assert shown.exit_code == 0 and said in shown.output
    asked = ["power", str(folder), "--labels", str(labels), "--width", "0.6", "--output", "score"]
    power = runner.invoke(app, asked)
    assert power.exit_code == 0 and said in power.output, power.output
    assert f"alone would need {found.labels_needed_classical}" in power.output
    missing = runner.invoke(app, ["power", str(folder), "--output", "score"])
    assert missing.exit_code != 0 and "--diff is required" in missing.output
