"""Dataset-level ratings and bias statistics on synthetic matches with a known truth."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from orchestrator.compute.bias import position_bias, same_answer_rate
from orchestrator.compute.pairwise import pair_key
from orchestrator.compute.ratings import (
    bradley_terry,
    elo_ratings,
    ranking_consistency,
    win_table,
)

STRENGTH = {"strong": 1.5, "middle": 0.0, "weak": -1.5}


def match(x: str, y: str, winner: str, dimension: str = "d", case: str = "c") -> dict[str, Any]:
    a, b = sorted((x, y))
    return {
        "pair": pair_key(a, b),
        "a": a,
        "b": b,
        "winner": winner,
        "dimension": dimension,
        "case": case,
    }


def battles(cases: int = 80, seed: int = 7, tie_rate: float = 0.1) -> list[dict[str, Any]]:
    """Round robins drawn from Bradley–Terry with the strengths above, some ties mixed in."""
    rng = random.Random(seed)
    out = []
    for case in range(cases):
        for x, y in (("strong", "middle"), ("strong", "weak"), ("middle", "weak")):
            if rng.random() < tie_rate:
                winner = "tie"
            else:
                p = 1.0 / (1.0 + math.exp(STRENGTH[y] - STRENGTH[x]))
                winner = x if rng.random() < p else y
            out.append(match(x, y, winner, case=str(case)))
    return out


# -- win table ------------------------------------------------------------------------


def test_win_table_counts_per_pair_and_player() -> None:
    data = [
        match("x", "y", "x"),
        match("x", "y", "x"),
        match("x", "y", "tie"),
        match("y", "z", "z"),
        match("x", "y", "y", dimension="other"),
    ]
    table = win_table(data)
    pair = table["d"]["pairs"]["x|y"]
    assert (pair["wins_a"], pair["wins_b"], pair["ties"], pair["matches"]) == (2, 0, 1, 3)
    assert pair["win_rate_a"] == pytest.approx(2.5 / 3)
    players = table["d"]["players"]
    assert players["y"] == {"wins": 0, "losses": 3, "ties": 1, "matches": 4, "win_rate": 0.125}
    assert table["d"]["ranking"] == ["z", "x", "y"]  # z: 1 of 1; x: 2.5 of 3
    assert table["other"]["players"]["y"]["wins"] == 1


# -- Elo ------------------------------------------------------------------------------


def test_elo_single_update_matches_the_formula() -> None:
    # Equal ratings expect 0.5, so a win moves K * 0.5 points each way.
    result = elo_ratings([match("x", "y", "x")], k=4, replicates=1, resample=False)
    players = result["d"]["players"]
    assert players["x"]["rating"] == pytest.approx(1002.0)
    assert players["y"]["rating"] == pytest.approx(998.0)
    # Second match in a fixed order: x (1002) beats y (998) again.
    expected = 1.0 / (1.0 + 10 ** ((998.0 - 1002.0) / 400.0))
    two = elo_ratings([match("x", "y", "x")] * 2, k=4, replicates=3, resample=False)
    assert two["d"]["players"]["x"]["rating"] == pytest.approx(1002.0 + 4 * (1 - expected))


def test_elo_recovers_the_true_order_with_separated_intervals() -> None:
    result = elo_ratings(battles(), k=4, replicates=1000, seed=1)["d"]
    assert result["ranking"] == ["strong", "middle", "weak"]
    players = result["players"]
    assert players["strong"]["ci_low"] > players["weak"]["ci_high"]
    assert (
        players["strong"]["ci_low"] <= players["strong"]["rating"] <= players["strong"]["ci_high"]
    )
    assert result["replicates"] == 1000 and result["matches"] == 240
    # Zero-sum updates: the ratings of each replicate average the initial rating.
    mean = sum(p["rating"] for p in players.values()) / 3
    assert mean == pytest.approx(1000.0, abs=3.0)


def test_elo_is_reproducible_by_seed_and_k_zero_freezes_ratings() -> None:
    data = battles(cases=20)
    assert elo_ratings(data, replicates=200, seed=3) == elo_ratings(data, replicates=200, seed=3)
    assert elo_ratings(data, replicates=200, seed=3) != elo_ratings(data, replicates=200, seed=4)
    frozen = elo_ratings(data, k=0, replicates=50)["d"]["players"]
    assert {p["rating"] for p in frozen.values()} == {1000.0}


def test_elo_fraction_score_uses_s() -> None:
    record = match("x", "y", "x") | {"score": 0.75}
    result = elo_ratings([record], k=4, replicates=1, resample=False, score="fraction")
    assert result["d"]["players"]["x"]["rating"] == pytest.approx(1001.0)
    with pytest.raises(ValueError, match="outcome"):
        elo_ratings([record], score="votes")


# -- Bradley–Terry --------------------------------------------------------------------


def test_bradley_terry_two_players_matches_the_closed_form() -> None:
    # Without a prior, the MLE strength gap is log(wins_x / wins_y); ties add half to each.
    data = [match("x", "y", "x")] * 25 + [match("x", "y", "y")] * 5 + [match("x", "y", "tie")] * 10
    result = bradley_terry(data, replicates=20, prior=0.0)["d"]["players"]
    gap = result["x"]["strength"] - result["y"]["strength"]
    assert gap == pytest.approx(math.log(30 / 10), abs=1e-4)
    assert result["x"]["rating"] - result["y"]["rating"] == pytest.approx(
        400 * math.log10(3), abs=0.05
    )


def test_bradley_terry_recovers_the_true_order_with_separated_intervals() -> None:
    result = bradley_terry(battles(), replicates=1000, seed=2)["d"]
    assert result["ranking"] == ["strong", "middle", "weak"]
    players = result["players"]
    assert players["strong"]["ci_low"] > players["weak"]["ci_high"]
    assert players["strong"]["ci_low"] > players["middle"]["ci_low"]
    # Strength gaps near the generating ones (1.5 per step, ties add noise).
    gap = players["strong"]["strength"] - players["weak"]["strength"]
    assert 2.0 < gap < 4.0


def test_bradley_terry_keeps_an_undefeated_player_finite() -> None:
    data = [match("x", "y", "x")] * 6 + [match("y", "z", "y"), match("y", "z", "z")]
    players = bradley_terry(data, replicates=50)["d"]["players"]
    assert math.isfinite(players["x"]["rating"]) and players["x"]["rating"] > 1300
    assert players["y"]["rating"] == pytest.approx(players["z"]["rating"], abs=150)


# -- position bias --------------------------------------------------------------------


def vote(
    pair: tuple[str, str],
    order: str,
    picked: str,
    case: str = "c",
    dim: str = "d",
    judge: str = "j",
) -> dict[str, Any]:
    a, b = sorted(pair)
    first, second = (a, b) if order == "ab" else (b, a)
    winner = {"first": first, "second": second, "tie": "tie"}[picked]
    return {
        "pair": pair_key(a, b),
        "a": a,
        "b": b,
        "winner": winner,
        "shown_first": first,
        "picked_position": picked,
        "dimension": dim,
        "order": order,
        "case": case,
        "judge": judge,
    }


def test_position_bias_rates_and_flips() -> None:
    votes = [
        # case 1: the judge follows the position -> a flip
        vote(("x", "y"), "ab", "first", case="1"),
        vote(("x", "y"), "ba", "first", case="1"),
        # case 2: consistent (x both times)
        vote(("x", "y"), "ab", "first", case="2"),
        vote(("x", "y"), "ba", "second", case="2"),
        # case 3: a tie in one order -> inconsistent but not a flip
        vote(("x", "y"), "ab", "tie", case="3"),
        vote(("x", "y"), "ba", "second", case="3"),
        # case 4: one order only -> not counted for flips
        vote(("x", "y"), "ab", "second", case="4"),
    ]
    stats = position_bias(votes)["j"]["d"]
    assert stats["votes"] == 7
    assert stats["first_rate"] == pytest.approx(3 / 7)
    assert stats["second_rate"] == pytest.approx(3 / 7)
    assert stats["tie_rate"] == pytest.approx(1 / 7)
    assert stats["first_rate_decisive"] == pytest.approx(3 / 6)
    assert stats["comparisons_both_orders"] == 3
    assert stats["flip_rate"] == pytest.approx(1 / 3)
    assert stats["inconsistent_rate"] == pytest.approx(2 / 3)


def test_position_bias_groups_by_judge_and_dimension() -> None:
    votes = [
        vote(("x", "y"), "ab", "first", judge="small"),
        vote(("x", "y"), "ba", "first", judge="small"),
        vote(("x", "y"), "ab", "tie", judge="large", dim="quality"),
        vote(("x", "y"), "ab", "second", judge="large", dim="relevance"),
    ]
    tables = position_bias(votes)
    assert tables["small"]["d"]["first_rate"] == 1.0 and tables["small"]["d"]["flip_rate"] == 1.0
    assert set(tables["large"]) == {"quality", "relevance", "all"}
    assert tables["large"]["quality"]["tie_rate"] == 1.0
    assert tables["large"]["all"]["votes"] == 2 and tables["large"]["all"]["flip_rate"] is None


def test_same_answer_rate() -> None:
    found = same_answer_rate([{"a": "A", "b": "A"}, {"a": "A", "b": "B"}, {"a": "B"}, None])
    assert found == {"examples": 2, "same": 1, "rate": 0.5}


def test_ranking_consistency_is_perfect_for_a_dominant_order_and_lower_for_noise() -> None:
    clear = [
        match(x, y, x, case=str(c))
        for c in range(30)
        for x, y in (("strong", "middle"), ("strong", "weak"), ("middle", "weak"))
    ]
    table = ranking_consistency(clear, sizes=[5, 20], replicates=100)["d"]
    assert table["cases"] == 30
    assert table["sizes"]["5"]["verdict_agreement"] == 1.0
    assert table["sizes"]["20"]["order_agreement"] == 1.0
    noisy = battles(cases=30, seed=3, tie_rate=0.3)
    small = ranking_consistency(noisy, sizes=[3, 30], replicates=300)["d"]["sizes"]
    assert small["3"]["verdict_agreement"] < small["30"]["verdict_agreement"]
