"""When a Bradley–Terry maximum-likelihood fit exists, and Elo players a replicate missed."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest

from orchestrator.compute.pairwise import pair_key
from orchestrator.compute.ratings import bradley_terry, elo_ratings, unbeaten_group
from orchestrator.errors import NoMaximumLikelihood, OrchestratorError


def match(x: str, y: str, winner: str) -> dict[str, Any]:
    a, b = sorted((x, y))
    return {"pair": pair_key(a, b), "a": a, "b": b, "winner": winner}


def _tournament(rng: np.random.Generator) -> list[dict[str, Any]]:
    """A few players, a random share of the pairs played a few times, lopsided strengths
    and some ties: about half such tournaments have no finite fit."""
    size = int(rng.integers(3, 6))
    names = [f"p{i}" for i in range(size)]
    strength = rng.normal(0.0, 1.5, size)
    out = []
    for i, j in itertools.combinations(range(size), 2):
        if rng.random() < 0.35:
            continue
        for _ in range(int(rng.integers(1, 4))):
            if rng.random() < 0.1:
                winner = "tie"
            else:
                p = 1.0 / (1.0 + math.exp(strength[j] - strength[i]))
                winner = names[i] if rng.random() < p else names[j]
            out.append(match(names[i], names[j], winner))
    return out


def _credits(matches: list[dict[str, Any]]) -> tuple[list[str], np.ndarray]:
    names = sorted({m["a"] for m in matches} | {m["b"] for m in matches})
    index = {name: i for i, name in enumerate(names)}
    credits = np.zeros((len(names), len(names)))
    for m in matches:
        a, b = index[m["a"]], index[m["b"]]
        share = 1.0 if m["winner"] == m["a"] else 0.0 if m["winner"] == m["b"] else 0.5
        credits[a, b] += share
        credits[b, a] += 1.0 - share
    return names, credits


def _fit_exists(credits: np.ndarray) -> bool:
    """Ford's condition, by brute force: every split of the players has a win across it
    from each side (the oracle the strong-connectivity check is tested against)."""
    size = credits.shape[0]
    for r in range(1, size):
        for inside in itertools.combinations(range(size), r):
            outside = [j for j in range(size) if j not in inside]
            if credits[np.ix_(list(inside), outside)].sum() == 0:
                return False
    return True


def test_every_tournament_without_a_fit_is_refused_and_every_other_is_fitted() -> None:
    rng = np.random.default_rng(28)
    refused = fitted = 0
    for _ in range(300):
        data = _tournament(rng)
        if not data:
            continue
        names, credits = _credits(data)
        if _fit_exists(credits):
            players = bradley_terry(data, replicates=1, prior=0.0)["all"]["players"]
            beta = np.array([players[name]["strength"] for name in names])
            assert np.all(np.isfinite(beta))
            # The likelihood's score equations: each player's wins equal its expected wins.
            games = credits + credits.T
            expected = (games / (1.0 + np.exp(beta[None, :] - beta[:, None]))).sum(axis=1)
            assert expected == pytest.approx(credits.sum(axis=1), abs=1e-4)
            fitted += 1
        else:
            with pytest.raises(NoMaximumLikelihood) as caught:
                bradley_terry(data, replicates=1, prior=0.0)
            # The group it names really never lost to anyone outside it.
            inside = [names.index(name) for name in caught.value.players]
            outside = [j for j in range(len(names)) if j not in inside]
            assert inside and outside and credits[np.ix_(outside, inside)].sum() == 0
            assert "prior" in str(caught.value) and "never lost" in str(caught.value)
            refused += 1
    # Both kinds occur often enough for the check to mean something.
    assert refused > 60 and fitted > 60


def test_refusal_is_an_orchestrator_value_error_and_a_prior_still_fits() -> None:
    data = [match("x", "y", "x")] * 6 + [match("y", "z", "y"), match("y", "z", "z")]
    with pytest.raises(OrchestratorError, match="x never lost"):
        bradley_terry(data, replicates=5, prior=0.0)
    with pytest.raises(ValueError):
        bradley_terry(data, replicates=5, prior=0.0)
    assert bradley_terry(data, replicates=5)["all"]["replicates_without_mle"] == 0


def test_two_groups_never_compared_have_no_fit() -> None:
    data = [match("a", "b", "a"), match("a", "b", "b"), match("c", "d", "c")]
    data.append(match("c", "d", "d"))
    _, credits = _credits(data)
    assert unbeaten_group(credits) is not None
    with pytest.raises(NoMaximumLikelihood, match="never compared"):
        bradley_terry(data, replicates=1, prior=0.0)


def test_replicates_without_a_fit_are_counted_and_left_out() -> None:
    # 10 wins, 1 loss: a replicate misses the loss with probability (10/11)^11 ≈ 0.35,
    # and then x is undefeated there.
    data = [match("x", "y", "x")] * 10 + [match("x", "y", "y")]
    replicates = 2000
    table = bradley_terry(data, replicates=replicates, prior=0.0, seed=4)["all"]
    expected = (10 / 11) ** 11
    tolerance = 4 * math.sqrt(expected * (1 - expected) / replicates)
    assert table["replicates_without_mle"] / replicates == pytest.approx(expected, abs=tolerance)
    x = table["players"]["x"]
    # Kept replicates have a finite fit: x's bootstrap ratings stay finite and ordered.
    assert math.isfinite(x["ci_high"]) and x["ci_low"] <= x["median"] <= x["ci_high"]


# -- Elo: a player a replicate did not draw ---------------------------------------------


def test_elo_leaves_a_player_out_of_replicates_that_missed_its_matches() -> None:
    # "rare" plays once and wins; about 37% of replicates draw none of its 1-in-40 match.
    data = [match("x", "y", "x" if i % 3 else "y") for i in range(39)]
    data.append(match("rare", "y", "rare"))
    replicates = 1000
    players = elo_ratings(data, replicates=replicates, seed=5)["all"]["players"]
    rare = players["rare"]
    missed = (39 / 40) ** 40
    tolerance = 4 * math.sqrt(missed * (1 - missed) / replicates)
    assert 1 - rare["replicates"] / replicates == pytest.approx(missed, abs=tolerance)
    # Where it played it only won, so it sits above the start in every replicate it is in;
    # counting the missed ones at 1000 would put the lower bound at 1000 itself.
    assert rare["ci_low"] > 1000.0 and rare["rating"] > 1000.0
    assert players["x"]["replicates"] == replicates


def test_elo_player_in_no_replicate_has_no_rating_and_ranks_last() -> None:
    data = [match("x", "y", "x")] * 30 + [match("rare", "y", "rare")]
    # One replicate that (with this seed) drew no match of "rare".
    for seed in range(50):
        table = elo_ratings(data, replicates=1, seed=seed)["all"]
        if table["players"]["rare"]["replicates"] == 0:
            break
    else:
        pytest.fail("no seed left rare out")
    assert table["players"]["rare"]["rating"] is None
    assert table["ranking"][-1] == "rare"
