"""Built-in statistics (compute/statistics.py) against reference implementations.

References: numpy and scipy.stats for the descriptive functions, scikit-learn's
`cohen_kappa_score` for Cohen's kappa, the `krippendorff` package for alpha, and
`scipy.stats.bootstrap` for the confidence interval; plus textbook cases worked by hand.
"""

from __future__ import annotations

import inspect
import math
import re
import statistics as pystats
from pathlib import Path
from typing import Any

import krippendorff
import numpy as np
import pytest
import scipy.stats
from helpers import write_graph
from sklearn.metrics import cohen_kappa_score

import orchestrator as orc
from orchestrator.compute import names, resolve
from orchestrator.compute import statistics as st

NEW = (
    "median",
    "minimum",
    "maximum",
    "stdev",
    "spread",
    "cohen_kappa",
    "krippendorff_alpha",
    "bootstrap_mean_ci",
)


def _numeric(values: list[Any]) -> np.ndarray:
    return np.array([v for v in values if v is not None and not math.isnan(v)], dtype=float)


# -- registration ----------------------------------------------------------------------


def test_every_function_is_registered_typed_and_documented() -> None:
    registered = names()
    for name in NEW:
        assert name in registered, name
        fn = resolve(name).fn
        assert fn.__module__ == "orchestrator.compute.statistics", f"{name} clashes"
        summary = (fn.__doc__ or "").strip().splitlines()[0]
        assert summary.endswith((".", ")")) and len(summary) > 30, name
        signature = inspect.signature(fn)
        assert signature.return_annotation is not inspect.Signature.empty, name
        for parameter in signature.parameters.values():
            assert parameter.annotation is not inspect.Parameter.empty, (name, parameter.name)
    assert resolve("bootstrap_mean_ci").blocking


def test_results_are_plain_json_numbers() -> None:
    # numpy scalars would leak into summary.json as np.float64 reprs in Python results.
    scores = [[1, 2, 2], [3, None, 3], [4, 5, 4], [2, 2, 1]]
    found = [
        st.median([1, 2]),
        st.stdev([1, 2]),
        st.spread([1, 2, 4], "iqr"),
        st.cohen_kappa([1, 2, 3, 1], [1, 2, 2, 1], "quadratic"),
        *(st.krippendorff_alpha(scores, level) for level in st.LEVELS),
        *st.bootstrap_mean_ci([1, 2, 4]).values(),
    ]
    assert all(type(value) in (int, float, str) for value in found), found


def test_functions_run_from_a_graph(tmp_path: Path) -> None:
    # Compute nodes per example and aggregates over the run, wired as a graph author would.
    graph = {
        "name": "stats",
        "inputs": ["scores"],
        "nodes": {
            "middle": {"kind": "compute", "function": "median", "args": {"values": "scores"}},
            "apart": {
                "kind": "compute",
                "function": "spread",
                "args": {"values": "scores", "measure": "'range'"},
            },
        },
        "outputs": {"middle": "middle", "apart": "apart", "scores": "scores"},
        "aggregates": {
            "alpha": {
                "function": "krippendorff_alpha",
                "args": {
                    "ratings": "results | map(attribute='scores') | list",
                    "level": "'ordinal'",
                },
            },
            "ci": {
                "function": "bootstrap_mean_ci",
                "args": {"values": "results | map(attribute='middle') | list", "resamples": 2000},
            },
        },
    }
    rows = [
        {"id": "a", "scores": [1, 2, 2]},
        {"id": "b", "scores": [3, None, 3]},
        {"id": "c", "scores": [None, None, None]},  # every judge failed: null, not a failure
        {"id": "d", "scores": [4, 5, 4]},
    ]
    # No LLM node, so nothing is ever sent to this (closed) address.
    compiled = orc.load_graph(write_graph(tmp_path, graph, {}))
    result = orc.run(compiled, rows, base_url="http://127.0.0.1:9/v1", model="none")
    lines = {line.id: line for line in result.results}
    assert not result.failed
    assert lines["a"].middle == 2 and lines["a"].apart == 1
    assert lines["c"].middle is None and lines["c"].apart is None
    summary = result.summary
    assert summary.alpha == pytest.approx(
        st.krippendorff_alpha([r["scores"] for r in rows], "ordinal")
    )
    assert summary.ci["n"] == 3 and summary.ci["mean"] == pytest.approx(3.0)


# -- descriptive -------------------------------------------------------------------------

SAMPLES = [
    [3, 1, 2],
    [4.5, None, 2.0, 7.25, 7.25],
    [1, 2, 3, 4],
    [10, float("nan"), -3, 8, 0.5, 2, 2, 9, None, 1.5],
    list(np.random.default_rng(7).normal(3.0, 2.0, size=101)),
]


@pytest.mark.parametrize("values", SAMPLES)
def test_descriptive_match_numpy_and_scipy(values: list[Any]) -> None:
    data = _numeric(values)
    assert st.median(values) == pytest.approx(np.median(data))
    assert st.minimum(values) == pytest.approx(np.min(data))
    assert st.maximum(values) == pytest.approx(np.max(data))
    assert st.stdev(values) == pytest.approx(np.std(data, ddof=1))
    assert st.stdev(values) == pytest.approx(pystats.stdev(data.tolist()))
    assert st.spread(values) == pytest.approx(np.ptp(data))
    assert st.spread(values, "iqr") == pytest.approx(scipy.stats.iqr(data))
    assert st.spread(values, "iqr") == pytest.approx(np.subtract(*np.percentile(data, [75, 25])))


def test_descriptive_by_hand() -> None:
    scores = [2, None, 5, 4, 4, 5]
    assert st.median(scores) == 4
    assert (st.minimum(scores), st.maximum(scores)) == (2, 5)
    # mean 4, squared deviations 4+1+0+0+1 = 6, over n - 1 = 4.
    assert st.stdev(scores) == pytest.approx(math.sqrt(6 / 4))
    assert st.spread(scores) == 3
    # Sorted 2 4 4 5 5: Q1 at position 1 (4), Q3 at position 3 (5).
    assert st.spread(scores, measure="iqr") == 1


@pytest.mark.parametrize("fn", [st.median, st.minimum, st.maximum, st.stdev, st.spread])
def test_descriptive_give_null_when_nothing_is_present(fn: Any) -> None:
    # Like `mean`: an example whose judges all failed gets null, not a failed node.
    assert fn([]) is None
    assert fn([None, None, float("nan")]) is None


def test_single_value() -> None:
    assert st.stdev([3]) is None  # the sample deviation needs two values
    assert st.spread([3]) == 0 and st.spread([3], "iqr") == 0
    assert st.median([3]) == st.minimum([3]) == st.maximum([3]) == 3


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: st.median("123"), "values must be a list, got str"),
        (lambda: st.minimum({"a": 1}), "values must be a list, got dict"),
        (lambda: st.maximum([1, "2"]), "values[1] is '2', not a number"),
        (lambda: st.stdev([1, True]), "values[1] is True, not a number"),
        (lambda: st.spread([1, [2]]), "values[1] is [2], not a number"),
        (lambda: st.spread([1, 2], measure="mad"), "measure must be 'range' or 'iqr'"),
    ],
)
def test_descriptive_refuse_what_is_not_a_number(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


# -- Cohen's kappa ------------------------------------------------------------------------


def test_cohen_kappa_textbook_two_by_two() -> None:
    # 50 items: both yes 20, A yes/B no 5, A no/B yes 10, both no 15.
    # p_o = 35/50 = 0.7; p_e = 0.5*0.6 + 0.5*0.4 = 0.5; kappa = (0.7 - 0.5)/(1 - 0.5) = 0.4.
    a = ["yes"] * 25 + ["no"] * 25
    b = ["yes"] * 20 + ["no"] * 5 + ["yes"] * 10 + ["no"] * 15
    assert st.cohen_kappa(a, b) == pytest.approx(0.4)


def test_cohen_kappa_weighted_by_hand() -> None:
    # Three items on 1..3: (1,1), (2,3), (3,3). Linear disagreement weights |i - j|.
    # Observed: only (2,3) disagrees, weight 1, share 1/3.
    # Chance: A's shares 1/3 each, B's (1/3, 0, 2/3); the sum of w * pA * pB is
    # 2*(1/3)(2/3) + 1*(1/3)(1/3) + 1*(1/3)(2/3) + 2*(1/3)(1/3) = 9/9, so kappa = 1 - 1/3.
    assert st.cohen_kappa([1, 2, 3], [1, 3, 3], weights="linear") == pytest.approx(2 / 3)


def _rater_pairs() -> list[tuple[list[Any], list[Any]]]:
    rng = np.random.default_rng(11)
    sets = []
    for size, k, noise in [(30, 5, 0.6), (200, 4, 0.3), (12, 3, 0.9), (80, 7, 0.5)]:
        truth = rng.integers(1, k + 1, size)
        jitter = rng.integers(-1, 2, size) * (rng.random(size) < noise)
        other = np.clip(truth + jitter, 1, k)
        sets.append((truth.tolist(), other.tolist()))
    return sets


@pytest.mark.parametrize("weights", [None, "linear", "quadratic"])
@pytest.mark.parametrize("pair", _rater_pairs())
def test_cohen_kappa_matches_sklearn(pair: tuple[list[int], list[int]], weights: Any) -> None:
    a, b = pair
    assert st.cohen_kappa(a, b, weights) == pytest.approx(
        cohen_kappa_score(a, b, weights=weights), abs=1e-12
    )


def test_cohen_kappa_nominal_strings_match_sklearn() -> None:
    a = ["pos", "neg", "neu", "pos", "pos", "neg", "neu", "neu", "pos", "neg"]
    b = ["pos", "neg", "pos", "pos", "neu", "neg", "neu", "neg", "pos", "neg"]
    assert st.cohen_kappa(a, b) == pytest.approx(cohen_kappa_score(a, b))


def test_cohen_kappa_categories_set_the_scale_for_weights() -> None:
    # Only 1, 3 and 5 occur; on a 1-5 rubric 1 vs 3 is two steps apart, not one.
    a = [1, 3, 5, 5, 1, 3, 3, 5]
    b = [3, 3, 5, 1, 1, 5, 3, 5]
    full = [1, 2, 3, 4, 5]
    for weights in ("linear", "quadratic"):
        ours = st.cohen_kappa(a, b, weights, categories=full)
        assert ours == pytest.approx(cohen_kappa_score(a, b, labels=full, weights=weights))
    # Unweighted kappa does not care about unused categories.
    assert st.cohen_kappa(a, b, categories=full) == pytest.approx(st.cohen_kappa(a, b))
    # Text labels take their order from categories.
    words = ["bad", "poor", "fair", "good", "great"]
    named = st.cohen_kappa(
        [words[x - 1] for x in a], [words[x - 1] for x in b], "quadratic", categories=words
    )
    assert named == pytest.approx(st.cohen_kappa(a, b, "quadratic", categories=full))


def test_cohen_kappa_drops_items_missing_either_rating() -> None:
    a = [1, 2, None, 3, 2, 1, 3, float("nan"), 2]
    b = [1, 3, 2, 3, None, 1, 2, 1, 2]
    kept = [(x, y) for x, y in zip(a, b, strict=True) if x == x and None not in (x, y)]
    ref = cohen_kappa_score([x for x, _ in kept], [y for _, y in kept])
    assert st.cohen_kappa(a, b) == pytest.approx(ref)


def test_cohen_kappa_undefined_is_null() -> None:
    # Both raters always say "ok": chance agreement is already 1.
    assert st.cohen_kappa(["ok"] * 4, ["ok"] * 4) is None
    assert st.cohen_kappa([2, 2], [2, 2], weights="quadratic") is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rater_a": [1, 2], "rater_b": [1]}, "rater_a has 2 ratings and rater_b 1"),
        ({"rater_a": [1, None], "rater_b": [None, 2]}, "no item was rated by both"),
        ({"rater_a": [], "rater_b": []}, "no item was rated by both"),
        ({"rater_a": "12", "rater_b": [1, 2]}, "rater_a must be a list"),
        (
            {"rater_a": [1, 4], "rater_b": [1, 2], "categories": [0, 1, 2, 3]},
            "rater_a[1] is 4, which is not among categories [0, 1, 2, 3]",
        ),
        (
            {"rater_a": ["lo", "hi"], "rater_b": ["hi", "hi"], "weights": "linear"},
            "pass `categories`",
        ),
        ({"rater_a": [1], "rater_b": [1], "weights": "cubic"}, "weights must be"),
        ({"rater_a": [1], "rater_b": [{"x": 1}]}, "rater_b[0] is {'x': 1}"),
        ({"rater_a": [1], "rater_b": [1], "categories": [1, 1]}, "repeated"),
    ],
)
def test_cohen_kappa_errors_name_the_argument(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        st.cohen_kappa(**kwargs)


# -- Krippendorff's alpha -----------------------------------------------------------------

# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability": 4 observers,
# 12 units, values 1-5, gaps marked None. Published: nominal .743, ordinal .815,
# interval .849, ratio .797.
K2011 = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
    [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
]


def _items(by_rater: list[list[Any]]) -> list[list[Any]]:
    """Raters x items (the krippendorff package's layout) → items x raters (ours)."""
    return [list(column) for column in zip(*by_rater, strict=True)]


def _reference(by_rater: list[list[Any]], level: str, domain: list[Any] | None = None) -> float:
    data = np.array([[np.nan if v is None else v for v in row] for row in by_rater], float)
    return float(
        krippendorff.alpha(reliability_data=data, level_of_measurement=level, value_domain=domain)
    )


@pytest.mark.parametrize(
    ("level", "published"),
    [("nominal", 0.743), ("ordinal", 0.815), ("interval", 0.849), ("ratio", 0.797)],
)
def test_krippendorff_textbook_values(level: str, published: float) -> None:
    assert st.krippendorff_alpha(_items(K2011), level) == pytest.approx(published, abs=5e-4)


def test_krippendorff_textbook_binary_two_coders() -> None:
    # Krippendorff (2011), two coders, ten units, nominal: alpha = 0.095.
    a = [0, 1, 0, 0, 0, 0, 0, 0, 1, 0]
    b = [1, 1, 1, 0, 0, 1, 0, 0, 0, 0]
    assert st.krippendorff_alpha(_items([a, b]), "nominal") == pytest.approx(0.095, abs=5e-4)


def _reliability_sets() -> list[list[list[Any]]]:
    rng = np.random.default_rng(2024)
    sets: list[list[list[Any]]] = [K2011]
    for raters, units, k, missing in [(3, 30, 5, 0.2), (5, 50, 4, 0.35), (2, 40, 3, 0.0)]:
        truth = rng.integers(1, k + 1, units)
        rows = []
        for _ in range(raters):
            noisy = np.clip(truth + rng.integers(-1, 2, units) * (rng.random(units) < 0.4), 1, k)
            rows.append([None if rng.random() < missing else int(v) for v in noisy])
        sets.append(rows)
    # Continuous ratings (interval/ratio are not limited to integers), with gaps.
    truth = rng.gamma(3.0, 2.0, 25)
    sets.append(
        [
            [None if rng.random() < 0.15 else round(abs(t + rng.normal(0, 1.5)), 2) for t in truth]
            for _ in range(4)
        ]
    )
    return sets


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval", "ratio"])
@pytest.mark.parametrize("by_rater", _reliability_sets())
def test_krippendorff_matches_the_krippendorff_package(
    by_rater: list[list[Any]], level: str
) -> None:
    ours = st.krippendorff_alpha(_items(by_rater), level)
    assert ours == pytest.approx(_reference(by_rater, level), abs=1e-9)


def test_krippendorff_items_may_be_rater_mappings_and_lone_ratings_are_ignored() -> None:
    as_lists = _items(K2011)
    as_maps = [{f"judge_{r}": v for r, v in enumerate(item)} for item in as_lists]
    for level in st.LEVELS:
        assert st.krippendorff_alpha(as_maps, level) == pytest.approx(
            st.krippendorff_alpha(as_lists, level)
        )
    # Unit 12 has one rating; leaving it out changes nothing.
    assert st.krippendorff_alpha(as_lists[:11], "interval") == pytest.approx(
        st.krippendorff_alpha(as_lists, "interval")
    )


def test_krippendorff_ordinal_with_named_categories_and_unused_values() -> None:
    words = ["never", "rarely", "sometimes", "often", "always"]
    named = [[None if v is None else words[v - 1] for v in row] for row in K2011]
    ours = st.krippendorff_alpha(_items(named), "ordinal", categories=words)
    assert ours == pytest.approx(st.krippendorff_alpha(_items(K2011), "ordinal"))
    # Declaring a value nobody used (6) changes no ordinal distance.
    declared = st.krippendorff_alpha(_items(K2011), "ordinal", categories=[1, 2, 3, 4, 5, 6])
    assert declared == pytest.approx(_reference(K2011, "ordinal", [1, 2, 3, 4, 5, 6]))
    # Nominal labels need no order: text labels give the numeric labels' alpha.
    assert st.krippendorff_alpha(_items(named), "nominal") == pytest.approx(0.743, abs=5e-4)


def test_krippendorff_perfect_and_undefined() -> None:
    assert st.krippendorff_alpha([[1, 1], [2, 2, None], [3, 3, 3]], "ordinal") == 1.0
    # Every paired rating is 2: no variation to tell agreement from chance.
    assert st.krippendorff_alpha([[2, 2], [2, None, 2], [5]], "interval") is None
    # No item with two ratings (one sample each): nothing to pair, so undefined, not an
    # error that would fail a whole aggregate.
    assert st.krippendorff_alpha([[1], [None, 2], []], "nominal") is None
    assert st.krippendorff_alpha([], "nominal") is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (([[1, 2]], "fuzzy"), "level must be one of nominal, ordinal, interval, ratio"),
        (([[1, 2], "12"], "nominal"), "ratings[1] must be one item's ratings"),
        (([[1, "x"]], "interval"), "ratings[0][1] is 'x'; level 'interval' needs numbers"),
        (([[1, -2]], "ratio"), "ratings[0][1] is -2; level 'ratio' needs ratings ≥ 0"),
        (([["lo", "hi"]], "ordinal"), "pass `categories`"),
        (([{"j1": 1, "j2": [2]}], "nominal"), "ratings[0]['j2'] is [2]"),
        (([[1, 2]], "nominal", [1]), "ratings[0][1] is 2, which is not among categories [1]"),
        ("not a list", "ratings must be a list"),
    ],
)
def test_krippendorff_errors_name_the_argument(args: Any, message: str) -> None:
    if isinstance(args, str):
        args = (args, "nominal")
    with pytest.raises(ValueError, match=re.escape(message)):
        st.krippendorff_alpha(*args)


# -- bootstrap ----------------------------------------------------------------------------


def _bootstrap_sets() -> list[list[float]]:
    rng = np.random.default_rng(5)
    return [
        rng.normal(3.0, 1.0, 30).tolist(),
        rng.exponential(2.0, 60).tolist(),  # skewed: BCa moves off the percentile interval
        rng.integers(1, 6, 45).astype(float).tolist(),  # Likert scores, many tied means
        [0.0, 1.0],
    ]


@pytest.mark.parametrize("method", ["bca", "percentile"])
@pytest.mark.parametrize("values", _bootstrap_sets())
def test_bootstrap_matches_scipy_with_the_same_seed(values: list[float], method: str) -> None:
    ours = st.bootstrap_mean_ci(values, method=method, seed=42, resamples=4999, level=0.9)
    ref = scipy.stats.bootstrap(
        (np.array(values),), np.mean, n_resamples=4999, method=method, rng=42, confidence_level=0.9
    )
    assert ours["ci_low"] == pytest.approx(ref.confidence_interval.low, abs=1e-9)
    assert ours["ci_high"] == pytest.approx(ref.confidence_interval.high, abs=1e-9)
    assert ours["mean"] == pytest.approx(np.mean(values))
    assert ours["n"] == len(values) and ours["resamples"] == 4999 and ours["method"] == method


@pytest.mark.parametrize("method", ["bca", "percentile"])
def test_bootstrap_close_to_scipy_with_other_seeds(method: str) -> None:
    values = _bootstrap_sets()[1]
    ours = st.bootstrap_mean_ci(values, method=method, seed=1)
    ref = scipy.stats.bootstrap((np.array(values),), np.mean, method=method, rng=99)
    width = ref.confidence_interval.high - ref.confidence_interval.low
    assert ours["ci_low"] == pytest.approx(ref.confidence_interval.low, abs=0.05 * width)
    assert ours["ci_high"] == pytest.approx(ref.confidence_interval.high, abs=0.05 * width)


def test_bootstrap_defaults_seeded_and_missing_values_skipped() -> None:
    values = [4, None, 2, 5, float("nan"), 3, 3, 1, 5, 4]
    first = st.bootstrap_mean_ci(values)
    assert first == st.bootstrap_mean_ci(values)  # seed 0 by default
    assert first["resamples"] >= 2000 and first["method"] == "bca" and first["level"] == 0.95
    assert first["n"] == 8 and first["mean"] == pytest.approx(27 / 8)
    assert first["ci_low"] < first["mean"] < first["ci_high"]
    assert st.bootstrap_mean_ci(values, seed=1) != first
    present = [v for v in values if v is not None and v == v]
    assert st.bootstrap_mean_ci(present) == first


@pytest.mark.parametrize("method", ["bca", "percentile"])
def test_bootstrap_coverage(method: str) -> None:
    # 300 samples of 30 from an exponential with mean 1: a 90% interval should hold the
    # true mean about 90% of the time (bootstrap intervals run a little short on small,
    # skewed samples, hence the loose bounds).
    rng = np.random.default_rng(123)
    hits = 0
    trials = 300
    for trial in range(trials):
        sample = rng.exponential(1.0, 30).tolist()
        ci = st.bootstrap_mean_ci(sample, level=0.9, resamples=2000, seed=trial, method=method)
        hits += ci["ci_low"] <= 1.0 <= ci["ci_high"]
    assert 0.80 <= hits / trials <= 0.97


def test_bootstrap_large_input_is_drawn_in_slices() -> None:
    # 5,000 values x 2,000 resamples is 10 million draws: several slices of the index
    # matrix; the interval still agrees with the normal approximation.
    values = np.random.default_rng(3).normal(10.0, 2.0, 5000)
    ci = st.bootstrap_mean_ci(values.tolist(), resamples=2000, method="percentile")
    half = 1.96 * values.std(ddof=1) / math.sqrt(values.size)
    assert ci["ci_high"] - ci["ci_low"] == pytest.approx(2 * half, rel=0.1)
    assert ci["ci_low"] < values.mean() < ci["ci_high"]


def test_bootstrap_constant_values_give_a_zero_width_interval() -> None:
    for values in ([3.0] * 5, [7]):
        for method in ("bca", "percentile"):
            ci = st.bootstrap_mean_ci(values, method=method)
            assert ci["ci_low"] == ci["mean"] == ci["ci_high"] == values[0]


@pytest.mark.parametrize("values", [[], [None, None]])
def test_bootstrap_of_no_value_is_an_empty_interval_not_an_error(values: list[Any]) -> None:
    """An aggregate over no scored row (faithfulness when no output made a claim) reports
    n 0 and no estimate, rather than failing the run's summary (exit 4)."""
    ci = st.bootstrap_mean_ci(values)
    assert ci["n"] == 0 and ci["mean"] is ci["ci_low"] is ci["ci_high"] is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"values": [1, "2"]}, "values[1] is '2', not a number"),
        ({"values": [1, 2], "level": 95}, "level must be a number between 0 and 1"),
        ({"values": [1, 2], "resamples": 0}, "resamples must be a positive integer"),
        ({"values": [1, 2], "seed": None}, "seed must be an integer"),
        ({"values": [1, 2], "method": "basic"}, "method must be 'bca' or 'percentile'"),
    ],
)
def test_bootstrap_errors_name_the_argument(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        st.bootstrap_mean_ci(**kwargs)
