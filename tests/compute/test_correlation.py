"""In-run correlations (compute/correlation.py) against scipy.stats, ties and gaps included,
and "did you mean" for a misspelt function name (issue 26, item 8)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
import scipy.stats
from helpers import write_graph

from orchestrator import GraphError, compile_graph
from orchestrator.compute import names, register, resolve
from orchestrator.compute.correlation import kendall_tau, pearson, spearman

# Two judges on a 1-5 scale: many ties, as a rating scale has.
JUDGE_A = [1, 2, 2, 3, 4, 4, 4, 5, 3, 2, 1, 5]
JUDGE_B = [2, 2, 3, 3, 4, 5, 4, 5, 2, 2, 1, 4]

REFERENCE = {
    "pearson": (pearson, lambda x, y: scipy.stats.pearsonr(x, y)),
    "spearman": (spearman, lambda x, y: scipy.stats.spearmanr(x, y)),
    "kendall_tau": (kendall_tau, lambda x, y: scipy.stats.kendalltau(x, y, variant="b")),
}


def test_registered_as_builtins() -> None:
    assert {"pearson", "spearman", "kendall_tau"} <= set(names())
    assert resolve("kendall_tau").fn is kendall_tau


@pytest.mark.parametrize("name", list(REFERENCE))
def test_matches_scipy_with_ties(name: str) -> None:
    ours, theirs = REFERENCE[name]
    expected = theirs(JUDGE_A, JUDGE_B)
    got = ours(JUDGE_A, JUDGE_B)
    assert got["n"] == len(JUDGE_A)
    assert got["statistic"] == pytest.approx(expected.statistic, abs=1e-12)
    assert got["p_value"] == pytest.approx(expected.pvalue, abs=1e-12)


def test_kendall_is_tau_b_not_tau_c() -> None:
    # With ties tau-b and tau-c differ; the built-in is tau-b.
    b = scipy.stats.kendalltau(JUDGE_A, JUDGE_B, variant="b").statistic
    c = scipy.stats.kendalltau(JUDGE_A, JUDGE_B, variant="c").statistic
    assert b != pytest.approx(c)
    assert kendall_tau(JUDGE_A, JUDGE_B)["statistic"] == pytest.approx(b)


@pytest.mark.parametrize("name", list(REFERENCE))
def test_an_item_missing_in_either_list_is_dropped(name: str) -> None:
    ours, theirs = REFERENCE[name]
    x: list[Any] = [*JUDGE_A, None, 3, float("nan")]
    y: list[Any] = [*JUDGE_B, 4, None, 2]
    got = ours(x, y)
    expected = theirs(JUDGE_A, JUDGE_B)  # the complete pairs only
    assert got["n"] == len(JUDGE_A)
    assert got["statistic"] == pytest.approx(expected.statistic, abs=1e-12)


def test_hand_worked_values() -> None:
    assert pearson([1, 2, 3], [2, 4, 6])["statistic"] == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [1, 4, 9, 16])["statistic"] == pytest.approx(1.0)
    # Pairs (1,3) (2,2) (3,1): every pair discordant.
    assert kendall_tau([1, 2, 3], [3, 2, 1])["statistic"] == pytest.approx(-1.0)


@pytest.mark.parametrize("name", list(REFERENCE))
def test_a_constant_list_gives_null(name: str) -> None:
    ours, _ = REFERENCE[name]
    assert ours([3, 3, 3, 3], [1, 2, 3, 4]) == {"statistic": None, "p_value": None, "n": 4}


@pytest.mark.parametrize(
    ("x", "y", "says"),
    [
        ([1, 2, 3], [1, 2], "x has 3 values and y 2"),
        ([1, 2, None], [None, 2, 3], "1 item(s) have a number in both"),
        ([1, "high", 3], [1, 2, 3], "x[1] is 'high', not a number"),
        ([1, True, 3], [1, 2, 3], "x[1] is True, not a number"),
        ("123", [1, 2, 3], "x must be a list"),
    ],
)
def test_bad_input_names_the_argument(x: Any, y: Any, says: str) -> None:
    for function in (pearson, spearman, kendall_tau):
        with pytest.raises(ValueError, match=re.escape(says)):
            function(x, y)


def test_result_is_plain_json() -> None:
    got = spearman(JUDGE_A, JUDGE_B)
    assert set(got) == {"statistic", "p_value", "n"}
    assert isinstance(got["statistic"], float) and not math.isnan(got["statistic"])


# --- did you mean, for function names -----------------------------------------------------------


def _function_problem(tmp_path: Path, function: str) -> str:
    graph = {
        "name": "t",
        "inputs": ["a", "b"],
        "nodes": {"r": {"kind": "compute", "function": function, "args": {"x": "a", "y": "b"}}},
        "outputs": {"r": "r"},
    }
    with pytest.raises(GraphError) as info:
        compile_graph(write_graph(tmp_path, graph, {}))
    (problem,) = info.value.problems
    assert (problem.node, problem.field) == ("r", "function")
    return problem.message


def test_misspelt_builtin_gets_did_you_mean(tmp_path: Path) -> None:
    assert "did you mean spearman or pearson?" in _function_problem(tmp_path, "spearmann")


def test_misspelt_user_function_gets_did_you_mean(tmp_path: Path) -> None:
    @register("judge_gap_score")
    def judge_gap_score(x: Any, y: Any) -> float:
        return 0.0

    assert "did you mean judge_gap_score" in _function_problem(tmp_path, "judge_gap_scor")


def test_misspelt_function_of_a_trusted_module_gets_did_you_mean(tmp_path: Path) -> None:
    (tmp_path / "gap_scores.py").write_text("def my_gap(x, y):\n    return 0.0\n")
    graph = {
        "name": "t",
        "inputs": ["a", "b"],
        "nodes": {"r": {"kind": "compute", "function": "gap_scores:my_gapp", "args": {"x": "a"}}},
        "outputs": {"r": "r"},
    }
    with pytest.raises(GraphError) as info:
        compile_graph(write_graph(tmp_path, graph, {}), trust=True)
    assert "did you mean 'gap_scores:my_gap'?" in str(info.value)
