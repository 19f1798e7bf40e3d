"""`orchestrator compare` / `orc.compare` (issue 18): runs of one graph matched by example
id; every statistic checked against scipy/statsmodels; the test's error rate measured."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.stats
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.analysis import paired
from orchestrator.calls.fake import FakeRequest
from orchestrator.cli import app
from orchestrator.compute.statistics import bootstrap_mean_ci, cohen_kappa

N = 40
SPEC: dict[str, Any] = {
    "name": "clarity",
    "inputs": ["text"],
    "nodes": {
        "judge": {
            "kind": "llm",
            "prompt": "judge.jinja",
            "output": {
                "score": {"type": "integer", "min": 1, "max": 10},
                "winner": {"type": "string", "enum": ["A", "B", "tie"]},
                "note": {"type": "string"},
            },
        }
    },
    "outputs": {"score": "judge.score", "winner": "judge.winner", "note": "judge.note"},
}
PROMPTS = {"judge.jinja": "Rate 1-10:\n{{ text }}"}
BASE = np.random.default_rng(7).integers(2, 9, N)  # each example's true quality, 2..8
NOISE = np.random.default_rng(8).integers(-1, 2, N)  # a second judge's or system's jitter


def graph(name: str = "clarity") -> orc.Graph:
    return orc.Graph.from_dict({**SPEC, "name": name}, prompts=PROMPTS)


def rows(system: str, ids: range | list[int] = range(N)) -> list[dict[str, str]]:
    # The text is what a system generated: another system's text differs, the id does not.
    return [{"id": f"e{i:02d}", "text": f"{system} answer #{i}#"} for i in ids]


def scorer(score: Callable[[int], int], winner: Callable[[int], str] = lambda i: "A"):
    def respond(request: FakeRequest) -> str:
        i = int(request.messages[0]["content"].split("#")[1])
        note = f"example {i}"  # free text: never taken for a label
        return json.dumps({"score": score(i), "winner": winner(i), "note": note})

    return respond


def run(out: Path | None, data: list[dict[str, str]], respond: Any, model: str = "judge-a"):
    fake = orc.FakeTransport(respond, models=[model])
    return orc.run(graph(), data, out=out, transport=fake, model=model, overwrite=True)


@pytest.fixture(scope="module")
def shifted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """System b's answers are one point better than system a's, with ±1 noise."""
    root = tmp_path_factory.mktemp("shifted")
    run(root / "sys-a", rows("a"), scorer(lambda i: int(BASE[i])))
    run(root / "sys-b", rows("b"), scorer(lambda i: int(BASE[i] + 1 + NOISE[i])))
    return root / "sys-a", root / "sys-b"


# -- the deliverable: a known shift is found, no shift is not ---------------------------


def test_a_known_shift_lies_in_the_ci_with_a_small_p(shifted: tuple[Path, Path]) -> None:
    a, b = shifted
    result = orc.compare(a, b)
    assert result.kind == "system" and "inputs differ" in result.kind_reason
    assert [o.output for o in result.outputs] == ["score"]  # winner/note are not numbers
    assert result.labels == []  # agreement is for judge comparisons only
    pair = result.pair("score")
    differences = (BASE + 1 + NOISE) - BASE
    assert pair.n == N and pair.difference == pytest.approx(differences.mean())
    assert pair.mean_a == pytest.approx(BASE.mean()) and result.output("score").means["sys-a"]
    assert pair.ci is not None and pair.ci.low < 1.0 < pair.ci.high
    assert pair.ci.resamples == 2000 and pair.ci.method == "bca"
    assert pair.p is not None and pair.p < 0.01 and pair.p_method == "monte-carlo"
    assert pair.p_holm == pair.p  # one pair: nothing to adjust
    assert pair.effect_size == pytest.approx(differences.mean() / differences.std(ddof=1))
    assert (pair.wins, pair.ties, pair.losses) == (
        int((differences > 0).sum()),
        int((differences == 0).sum()),
        int((differences < 0).sum()),
    )
    assert pair.agreement is None
    assert orc.compare(a, b) == result  # seeded: the same numbers every time


def test_no_difference_gives_a_p_that_is_not_small(tmp_path: Path) -> None:
    # Judge b adds noise with mean zero, so the two runs differ but not systematically.
    run(tmp_path / "a", rows("x"), scorer(lambda i: int(BASE[i])))
    run(tmp_path / "b", rows("x"), scorer(lambda i: int(BASE[i] + NOISE[i])), "judge-b")
    pair = orc.compare(tmp_path / "a", tmp_path / "b").pair("score")
    assert pair.ci is not None and pair.ci.low < 0.0 < pair.ci.high
    assert pair.p is not None and pair.p > 0.2


def test_false_positive_rate_near_the_nominal_level() -> None:
    """Under no shift, p < 0.05 about 5% of the time (over 400 data sets, both test paths)."""
    rejected = {"exact": 0, "monte-carlo": 0}
    for seed in range(200):
        rng = np.random.default_rng(seed)
        for n in (15, 40):  # 15: exact enumeration; 40: Monte Carlo
            # Integer scores, so many differences are zero, as with real 1-10 judges.
            a = rng.integers(1, 11, n)
            b = np.clip(a + rng.integers(-2, 3, n), 1, 10)
            differences = (b - a).astype(float)
            test = paired.sign_flip_test(differences, permutations=1000, seed=seed)
            rejected[test.method] += test.p < 0.05
    # Clipping at 1 and 10 pulls both ways equally; a discrete test stays at or below α.
    assert 0.01 <= rejected["exact"] / 200 <= 0.09
    assert 0.02 <= rejected["monte-carlo"] / 200 <= 0.09


# -- each statistic against scipy / statsmodels -----------------------------------------


def _paired(n: int, seed: int, shift: float = 0.3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.integers(1, 11, n).astype(float)
    return a, np.clip(a + np.round(rng.normal(shift, 1.2, n)), 1, 10)


def _mean_difference(x: np.ndarray, y: np.ndarray, axis: int = -1) -> Any:
    return np.mean(x - y, axis=axis)


@pytest.mark.parametrize("n", [6, 12, 16])
def test_exact_sign_flip_p_equals_scipy_permutation_test(n: int) -> None:
    a, b = _paired(n, seed=n)
    test = paired.sign_flip_test(b - a)
    ref = scipy.stats.permutation_test(
        (b, a), _mean_difference, permutation_type="samples", n_resamples=np.inf, vectorized=True
    )
    # Zero differences are left out of the enumeration: the p-value is the same.
    assert test.method == "exact" and test.count == 2 ** int(np.count_nonzero(b - a))
    assert test.p == pytest.approx(ref.pvalue, abs=1e-12)


def test_monte_carlo_sign_flip_p_close_to_scipy() -> None:
    a, b = _paired(60, seed=3, shift=0.5)
    test = paired.sign_flip_test(b - a, permutations=20_000, seed=1)
    ref = scipy.stats.permutation_test(
        (b, a), _mean_difference, permutation_type="samples", n_resamples=20_000, rng=2,
        vectorized=True,
    )
    assert test.method == "monte-carlo" and test.count == 20_000
    assert 0.001 < ref.pvalue < 0.5  # a p-value where the comparison means something
    assert test.p == pytest.approx(ref.pvalue, abs=0.01)


def test_sign_flip_edge_cases() -> None:
    assert paired.sign_flip_test([0.0, 0.0, 0.0]).p == 1.0
    # Four equal positive differences: only the all-plus and all-minus signs reach |sum| 4.
    assert paired.sign_flip_test([1.0, 1.0, 1.0, 1.0, 0.0]).p == pytest.approx(2 / 16)
    big = paired.sign_flip_test(np.ones(20))  # 2^20 signs enumerated
    assert big.method == "exact" and big.p == pytest.approx(2 / 2**20)


@pytest.mark.parametrize("method", ["bca", "percentile"])
def test_paired_bootstrap_ci_equals_scipy_paired_bootstrap(method: str) -> None:
    """BCa by default; scipy's `paired=True` resamples the same example indices."""
    a, b = _paired(35, seed=11)
    if method == "bca":
        ours = paired.paired_interval(list(b - a), 0.95, 4999, 42)
    else:
        ours = bootstrap_mean_ci(list(b - a), 0.95, 4999, 42, method="percentile")
    assert ours["method"] == method
    ref = scipy.stats.bootstrap(
        (b, a), _mean_difference, paired=True, n_resamples=4999, rng=42, method=method,
        vectorized=True,
    )
    assert ours["ci_low"] == pytest.approx(ref.confidence_interval.low, abs=1e-9)
    assert ours["ci_high"] == pytest.approx(ref.confidence_interval.high, abs=1e-9)


def test_compare_ci_is_scipys_bca_interval(shifted: tuple[Path, Path]) -> None:
    pair = orc.compare(*shifted, resamples=3000, seed=5).pair("score")
    a, b = BASE.astype(float), (BASE + 1 + NOISE).astype(float)
    ref = scipy.stats.bootstrap(
        (b, a), _mean_difference, paired=True, n_resamples=3000, rng=5, method="BCa",
        vectorized=True,
    )
    assert pair.ci is not None and pair.ci.seed == 5 and pair.ci.resamples == 3000
    assert pair.ci.low == pytest.approx(ref.confidence_interval.low, abs=1e-9)
    assert pair.ci.high == pytest.approx(ref.confidence_interval.high, abs=1e-9)


def test_holm_equals_statsmodels() -> None:
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    for p in ([0.01, 0.04, 0.03, 0.2, 0.001], [0.5, 0.5, 0.01], [0.9, 0.8], [0.04]):
        expected = multitest.multipletests(p, method="holm")[1]
        assert paired.holm(p) == pytest.approx(list(expected), abs=1e-12)
    assert paired.holm([]) == []


def test_correlations_equal_scipy_with_ties() -> None:
    a, b = _paired(50, seed=4)
    assert paired.pearson(a, b) == pytest.approx(scipy.stats.pearsonr(a, b).statistic)
    assert paired.spearman(a, b) == pytest.approx(scipy.stats.spearmanr(a, b).statistic)
    assert paired.kendall_tau_b(a, b) == pytest.approx(scipy.stats.kendalltau(a, b).statistic)
    assert paired.pearson([1, 2, 3], [4, 4, 4]) is None  # a constant side: undefined
    assert paired.kendall_tau_b([1, 1], [2, 3]) is None


def test_effect_size_is_paired_cohens_dz() -> None:
    d = np.array([1.0, 2.0, 0.0, 3.0, 1.0])
    assert paired.cohens_dz(d) == pytest.approx(d.mean() / d.std(ddof=1))
    assert paired.cohens_dz([2.0, 2.0]) is None and paired.cohens_dz([1.0]) is None
