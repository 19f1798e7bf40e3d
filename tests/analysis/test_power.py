"""`orc.power` / `orchestrator power`: the sample size a paired comparison needs, checked
against statsmodels and against seeded simulations of compare's sign-flip test at that
size (power ≈ 0.8) and at half of it (clearly lower), with and without clusters."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import scripted_run
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator import stats
from orchestrator.analysis.power import SIGN_FLIP_MINIMUM, compare_power, power_range, required_n
from orchestrator.cli import app
from orchestrator.errors import ConfigurationError

PILOT = 240  # examples: 48 users of 5
USERS, PER_USER = 48, 5
SIMULATIONS = 1000
DRAWS = 199  # sign-flip draws per simulated data set: exact level, fast

SPEC: dict[str, Any] = {
    "name": "quality",
    "inputs": ["text"],
    "nodes": {
        "judge": {"kind": "llm", "prompt": "judge.jinja", "output": {"score": {"type": "number"}}}
    },
    "outputs": {"score": "judge.score"},
}


def _run(out: Path, system: str, scores: np.ndarray, users: np.ndarray) -> Path:
    rows = [
        {"id": f"e{i:03d}", "text": f"{system} #{i}#", "user": f"u{users[i]:02d}"}
        for i in range(len(scores))
    ]
    return scripted_run(out, SPEC, "Rate {{ text }}", rows, scores)


@pytest.fixture(scope="module")
def pilot(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two systems scored on the same examples, nested in users: b − a = 0.2 + a user
    effect (sd 0.7) + noise (sd 1), so the differences' ICC is about 0.33."""
    rng = np.random.default_rng(28)
    users = np.repeat(np.arange(USERS), PER_USER)
    a = rng.normal(5.0, 1.0, PILOT)
    b = a + 0.2 + rng.normal(0.0, 0.7, USERS)[users] + rng.normal(0.0, 1.0, PILOT)
    root = tmp_path_factory.mktemp("pilot")
    return _run(root / "a", "a", a, users), _run(root / "b", "b", b, users)


def _power_of_sign_flip(data: np.ndarray) -> float:
    """Share of simulated data sets (rows) where compare's test gives p < 0.05."""
    hits = sum(stats.sign_flip_test(row, DRAWS, seed, 0).p < 0.05 for seed, row in enumerate(data))
    return hits / len(data)


def _tolerance(rate: float) -> float:
    return 4.0 * math.sqrt(rate * (1.0 - rate) / SIMULATIONS)


def test_required_n_matches_statsmodels() -> None:
    power = pytest.importorskip("statsmodels.stats.power")
    for effect in (0.2, 0.35, 0.5, 0.8):
        n, normal, reached = required_n(1.0, effect, 0.05, 0.8)
        exact = power.TTestPower().solve_power(effect_size=effect, alpha=0.05, power=0.8)
        assert n == max(SIGN_FLIP_MINIMUM, math.ceil(exact))
        assert normal == pytest.approx(((1.959964 + 0.841621) / effect) ** 2, rel=1e-5)
        assert reached >= 0.8


def test_sample_size_gives_the_power_it_promises(pilot: tuple[Path, Path]) -> None:
    diff = 0.3
    found = orc.power(*pilot, diff=diff)
    assert found.unit == "examples" and found.source == "two runs" and found.pilot_n == PILOT
    sd = found.sd_difference
    rng = np.random.default_rng(1)
    at_n = diff + sd * rng.standard_normal((SIMULATIONS, found.n_required))
    half = diff + sd * rng.standard_normal((SIMULATIONS, found.n_required // 2))
    assert _power_of_sign_flip(at_n) == pytest.approx(0.8, abs=_tolerance(0.8))
    assert _power_of_sign_flip(half) < 0.8 - 3 * _tolerance(0.8)


def test_clusters_are_counted_by_the_design_effect(pilot: tuple[Path, Path]) -> None:
    diff = 0.3
    plain = orc.power(*pilot, diff=diff)
    assert not any("small pilot" in note for note in plain.notes)  # 240 examples
    found = orc.power(*pilot, diff=diff, cluster="user")
    assert found.unit == "clusters" and found.clusters == USERS
    assert found.mean_cluster_size == PER_USER
    assert found.icc is not None and 0.15 < found.icc < 0.55  # planted ≈ 0.33
    assert found.design_effect == pytest.approx(1 + (PER_USER - 1) * found.icc)
    # Nested examples are worth fewer independent ones: more examples in all.
    assert found.examples_required > plain.n_required
    # Simulate users as the pilot has them (its σ and ICC) and test users' mean
    # differences with the sign-flip test, as a clustered comparison does.
    sd, icc = found.sd_difference, found.icc

    def users(count: int, rng: np.random.Generator) -> np.ndarray:
        effect = rng.normal(0.0, sd * math.sqrt(icc), (SIMULATIONS, count, 1))
        noise = rng.normal(0.0, sd * math.sqrt(1 - icc), (SIMULATIONS, count, PER_USER))
        return (diff + effect + noise).mean(axis=2)

    rng = np.random.default_rng(2)
    at_n = _power_of_sign_flip(users(found.n_required, rng))
    half = _power_of_sign_flip(users(found.n_required // 2, rng))
    assert at_n == pytest.approx(0.8, abs=_tolerance(0.8))
    assert half < 0.8 - 3 * _tolerance(0.8)


def test_one_pilot_run_assumes_a_correlation(pilot: tuple[Path, Path]) -> None:
    alone = orc.power(pilot[0], diff=0.3)
    assert alone.source == "one run" and alone.correlation == 0.0 and alone.notes
    correlated = orc.power(pilot[0], diff=0.3, correlation=0.5)
    # σ_d = √(2(1 − ρ))·σ: ρ = 0.5 leaves σ, a quarter of ρ = 0's n, about.
    assert correlated.sd_difference == pytest.approx(alone.sd_difference / math.sqrt(2))
    assert correlated.n_required < alone.n_required


def test_refusals(pilot: tuple[Path, Path]) -> None:
    with pytest.raises(ConfigurationError, match="non-zero"):
        orc.power(*pilot, diff=0.0)
    with pytest.raises(ConfigurationError, match="no numeric output 'nope'"):
        orc.power(*pilot, diff=0.3, output="nope")
    with pytest.raises(ConfigurationError, match="no field 'nobody'"):
        orc.power(*pilot, diff=0.3, cluster="nobody")


def test_cli_json_and_table(pilot: tuple[Path, Path]) -> None:
    runner = CliRunner()
    args = ["power", str(pilot[0]), str(pilot[1]), "--diff", "0.3", "--cluster", "user"]
    as_json = runner.invoke(app, [*args, "--format", "json"])
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.output)
    expected = orc.power(*pilot, diff=0.3, cluster="user")
    assert data == expected.model_dump(mode="json") and data["n_required"] > 0
    table = runner.invoke(app, args)
    assert table.exit_code == 0, table.output
    assert f"{expected.n_required} clusters (user)" in table.output
    assert "design effect" in table.output
    refused = runner.invoke(app, ["power", str(pilot[0]), "--diff", "0"])
    assert refused.exit_code != 0 and "non-zero" in refused.output


def test_scores_too_large_to_compute_with_are_refused(tmp_path: Path) -> None:
    """Item 6 of issue 35: a pilot scored ±1e308 (20 wins, 20 losses) ended in `ValueError:
    cannot convert float NaN to integer`; now one line names the run and the field."""
    split = np.array([1e308 if i < 20 else -1e308 for i in range(40)])
    users = np.zeros(40, dtype=int)
    a, b = _run(tmp_path / "a", "a", split, users), _run(tmp_path / "b", "b", -split, users)
    where = rf"^{re.escape(str(a))}: output 'score' of example 'e000' is 1e\+308"
    with pytest.raises(ConfigurationError, match=where):
        orc.power(a, b, diff=1.0)
    with pytest.raises(ConfigurationError, match=where):
        orc.power(a, diff=1.0)
    shown = CliRunner().invoke(app, ["power", str(a), str(b), "--diff", "1"])
    assert shown.exit_code == 1, shown.output
    assert shown.output.count("\n") == 1 and "output 'score'" in shown.output, shown.output


def test_a_diff_at_the_ends_of_the_float_range_gives_a_number_or_a_refusal() -> None:
    """A --diff of 1e-200 against σ 1 overflowed the sample size (OverflowError), and one of
    1e308 reported `nan%` power: the first is refused, the second needs the fewest examples
    with power 1, and a tiny one gets the normal answer rather than an endless walk."""
    with pytest.raises(ConfigurationError, match=r"diff 1e-200 is too small .*past counting"):
        required_n(1.0, 1e-200, 0.05, 0.8)
    assert required_n(1.0, 1e308, 0.05, 0.8) == (SIGN_FLIP_MINIMUM, pytest.approx(0.0), 1.0)
    n, normal, reached = required_n(1.0, 1e-9, 0.05, 0.8)
    assert n == math.ceil(normal) and normal == pytest.approx(((1.959964 + 0.841621) / 1e-9) ** 2)
    assert reached == pytest.approx(0.8, abs=1e-6)


@pytest.mark.parametrize("effect", [1.5, 1.3, 1.0])
def test_a_small_answer_has_the_power_of_the_exact_sign_flip_test(effect: float) -> None:
    """Where the answer is a handful of examples, compare's exact sign-flip test is
    coarser than the t-test (at n = 6 it rejects only when all six differences share a
    sign): the n given must reach the power with that test, checked on 20,000 fresh data
    sets. The t-test's n fell short: 6 at Δ/σ = 1.5 has 0.66 power, 7 at 1.3 has 0.77."""
    n, _, reached = required_n(1.0, effect, 0.05, 0.8)
    data = effect + np.random.default_rng(int(effect * 10)).standard_normal((20_000, n))
    simulated = float((stats.sign_flip_p(data, exact=True) < 0.05).mean())
    allowance = 3.0 * math.sqrt(0.8 * 0.2 / 20_000) + 3.0 * math.sqrt(0.8 * 0.2 / 4000)
    assert simulated >= 0.8 - allowance
    assert reached == pytest.approx(simulated, abs=allowance)
    # At six examples only the two uniform sign vectors reach p < 0.05.
    from scipy.stats import norm

    six = norm.cdf(1.5) ** 6 + norm.cdf(-1.5) ** 6
    assert stats.sign_flip_power(6, 1.5, 0.05) == pytest.approx(six, abs=3 * math.sqrt(0.25 / 4000))


def test_a_small_pilot_says_how_uncertain_its_power_is(tmp_path: Path) -> None:
    """Pilots of 12: σ is a rough guess, so the n they give has well under the target
    power in about a third of them. The power range (σ's 80% chi-square interval) holds
    the power n really has in 80% of pilots, and the answer says so in a note."""
    rng = np.random.default_rng(12)
    below, covered, pilots, diff = 0, 0, 300, 0.3
    for _ in range(pilots):
        sd = float(rng.standard_normal(12).std(ddof=1))
        n, _, _ = required_n(sd, diff, 0.05, 0.8)
        low, high = power_range(sd, diff, 0.05, n, 11)
        true = compare_power(n, diff, 0.05)  # σ is 1; n is 25 or more here (the t-test's)
        below += true < 0.7
        covered += low <= true <= high
    assert 0.2 < below / pilots < 0.45
    assert covered / pilots == pytest.approx(0.8, abs=3 * math.sqrt(0.16 / pilots))
    a = rng.normal(5.0, 1.0, 12)
    small = (
        _run(tmp_path / "a", "a", a, np.arange(12)),
        _run(tmp_path / "b", "b", a + rng.normal(0.3, 1.0, 12), np.arange(12)),
    )
    found = orc.power(*small, diff=0.5)
    assert found.power_range is not None and found.power_range[0] < 0.8 < found.power_range[1]
    assert any("small pilot (12 examples)" in note for note in found.notes)
