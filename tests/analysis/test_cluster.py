"""Clustered statistics (`--cluster FIELD`) where the judge card and meta-eval use them:
position bias and self-preference resample and flip whole users, meta-eval's bootstrap
draws whole clusters. The clustered test, interval and bootstrap themselves are checked by
simulation in tests/stats/ (test_sign_flip_cluster.py, test_bootstrap.py)."""

from __future__ import annotations

import numpy as np

from orchestrator.analysis.card.bias import position_bias
from orchestrator.analysis.metaeval_stats import Bootstrap, intervals


def test_position_bias_takes_clusters() -> None:
    """A position leaning carried by three users of eight: clear per comparison, weak over
    users (three whole users leaning one way happen often by chance)."""
    votes = []
    for user in range(8):
        for case in range(6):
            first = user < 3 or (case % 2 == 0)  # three users always pick the first slot
            for order in ("ab", "ba"):
                votes.append(
                    {
                        "case": f"u{user}-{case}",
                        "pair": "a|b",
                        "dimension": "overall",
                        "picked_position": "first" if first else "second",
                        "winner": order[0] if first else order[1],
                        "a": order[0],
                        "b": order[1],
                    }
                )
    plain = position_bias("votes", "judge", votes)
    clusters = {f"u{user}-{case}": f"u{user}" for user in range(8) for case in range(6)}
    nested = position_bias("votes", "judge", votes, clusters=clusters)
    assert plain.first_rate == nested.first_rate
    assert plain.p is not None and nested.p is not None and nested.p > plain.p
    assert plain.ci is not None and nested.ci is not None
    assert nested.ci.high - nested.ci.low > plain.ci.high - plain.ci.low


def test_meta_eval_bootstrap_draws_clusters() -> None:
    ids = [f"e{i}" for i in range(12)]
    clusters = {f"e{i}": f"u{i // 4}" for i in range(12)}
    boot = Bootstrap(resamples=200, seed=0, cluster="user", clusters=clusters)
    owner = np.repeat(np.arange(3), 4)
    checked: list[bool] = []

    def whole(rows: np.ndarray) -> float:
        counts = np.bincount(owner[rows], minlength=3)
        checked.append(bool(np.all(counts % 4 == 0)))
        return float(len(rows))

    intervals(ids, {"size": whole}, boot)
    assert len(checked) == 200 and all(checked)
    assert boot.describe()["unit"] == "cluster" and boot.describe()["clusters"] == 3
    assert Bootstrap().describe()["unit"] == "example"


def test_self_preference_resamples_whole_users() -> None:
    """Scores driven by the user (ICC 0.8) and no gap. When each user's texts all come from
    one generator, users are the unit and resampling them widens the interval; when every
    user has texts of both, the user effect cancels in the gap and keeping a user's texts
    together narrows it. Either way p comes from the cluster bootstrap, not Welch's test."""
    from orchestrator.analysis.card.bias import self_preference

    rng = np.random.default_rng(9)
    users = np.repeat(np.arange(20), 6)
    scores = rng.normal(0.0, 2.0, 20)[users] + rng.normal(0.0, 1.0, users.size)
    labels = [f"u{u}" for u in users]
    widths = {}
    for design, makers in (
        ("per user", ["judge" if u % 2 else "other" for u in users]),
        ("within user", ["judge" if i % 2 else "other" for i in range(users.size)]),
    ):
        plain = self_preference("n", "judge", "score", "generator", scores, makers)
        nested = self_preference(
            "n", "judge", "score", "generator", scores, makers, clusters=labels
        )
        assert plain.gap == nested.gap and plain.ci is not None and nested.ci is not None
        assert nested.p is not None and plain.p is not None and nested.p != plain.p
        if design == "per user":  # by chance the 10 "judge" users score higher here
            assert plain.p < 1e-4 and nested.p > 0.01
        widths[design] = (nested.ci.high - nested.ci.low) / (plain.ci.high - plain.ci.low)
    assert widths["per user"] > 1.3 and widths["within user"] < 0.8
