"""Dataset-level statistics for pairwise protocols: win tables, Elo, Bradley–Terry, bias.

These run as graph `aggregates` over every example's match or vote records (see
compute/pairwise.py for their shape). Each takes plain lists and returns plain dicts,
one table per dimension; numpy/scipy are imported inside so the package imports fast.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from ..errors import NoMaximumLikelihood
from .pairwise import TIE, plurality
from .registry import register
from .style import style_differences, style_names

ALL = "all"  # the dimension name used when records carry none


def _dimension(record: dict[str, Any]) -> str:
    value = record.get("dimension")
    return ALL if value is None else str(value)


def by_dimension(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Records grouped by dimension, in first-seen order."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault(_dimension(record), []).append(record)
    return groups


def _score(match: dict[str, Any], score: str) -> float:
    """The result of a match for its `a` side: 1 win, 0 loss, 0.5 tie (or the fraction S)."""
    if score == "fraction":
        return float(match["score"])
    if score != "outcome":
        raise ValueError(f"score must be 'outcome' or 'fraction', got {score!r}")
    winner = match["winner"]
    if winner == match["a"]:
        return 1.0
    if winner == match["b"]:
        return 0.0
    if winner == TIE:
        return 0.5
    raise ValueError(f"match winner {winner!r} is neither {match['a']!r}, {match['b']!r} nor tie")


def _encode(matches: list[dict[str, Any]], score: str) -> tuple[list[str], Any, Any, Any]:
    """Player names plus numpy arrays of a-index, b-index and a's score per match."""
    import numpy as np

    names = sorted({m["a"] for m in matches} | {m["b"] for m in matches})
    index = {name: i for i, name in enumerate(names)}
    a = np.array([index[m["a"]] for m in matches], dtype=np.int64)
    b = np.array([index[m["b"]] for m in matches], dtype=np.int64)
    s = np.array([_score(m, score) for m in matches], dtype=np.float64)
    return names, a, b, s


def _interval(values: Any, level: float) -> tuple[float | None, float | None]:
    """The percentile interval of the bootstrap replicates; (None, None) without one."""
    from ..stats import percentile_interval

    found = percentile_interval(values, level)
    return (None, None) if found is None else (found.low, found.high)


def _ranking(players: dict[str, dict[str, Any]], key: str) -> list[str]:
    """Names by `key`, best first; a player without a value (None) goes last."""

    def rank(name: str) -> tuple[bool, float, str]:
        value = players[name][key]
        return (value is None, -(value or 0.0), name)

    return sorted(players, key=rank)


# -- win/loss/tie ---------------------------------------------------------------------


@register("win_table")
def win_table(matches: list[dict[str, Any]]) -> dict[str, Any]:
    """Per dimension: wins/losses/ties for every generator pair and each generator's win rate.

    `win_rate` counts a tie as half a win: (wins + ties/2) / matches.

    Returns {dimension: {"pairs": {pair: {a, b, wins_a, wins_b, ties, matches,
    win_rate_a}}, "players": {name: {wins, losses, ties, matches, win_rate}}, "ranking":
    [names by win rate]}}.
    """
    tables: dict[str, Any] = {}
    for dimension, group in by_dimension(matches).items():
        pairs: dict[str, dict[str, Any]] = {}
        players: dict[str, Counter[str]] = {}
        for m in group:
            a, b, winner = m["a"], m["b"], m["winner"]
            row = pairs.setdefault(
                m["pair"], {"a": a, "b": b, "wins_a": 0, "wins_b": 0, "ties": 0, "matches": 0}
            )
            row["matches"] += 1
            row["wins_a" if winner == a else "wins_b" if winner == b else "ties"] += 1
            for me, other in ((a, b), (b, a)):
                tally = players.setdefault(me, Counter())
                tally["matches"] += 1
                tally["wins" if winner == me else "losses" if winner == other else "ties"] += 1
        for row in pairs.values():
            row["win_rate_a"] = (row["wins_a"] + 0.5 * row["ties"]) / row["matches"]
        summary = {
            name: {
                "wins": t["wins"],
                "losses": t["losses"],
                "ties": t["ties"],
                "matches": t["matches"],
                "win_rate": (t["wins"] + 0.5 * t["ties"]) / t["matches"],
            }
            for name, t in sorted(players.items())
        }
        tables[dimension] = {
            "pairs": dict(sorted(pairs.items())),
            "players": summary,
            "ranking": _ranking(summary, "win_rate"),
        }
    return tables


# -- Elo ------------------------------------------------------------------------------


def _elo_runs(a: Any, b: Any, s: Any, players: int, order: Any, k: float, initial: float) -> Any:
    """Online Elo over each row of `order` (match indices), all replicates at once."""
    import numpy as np

    replicates, steps = order.shape
    ratings = np.full((replicates, players), float(initial))
    rows = np.arange(replicates)
    for t in range(steps):
        m = order[:, t]
        ia, ib = a[m], b[m]
        expected = 1.0 / (1.0 + 10.0 ** ((ratings[rows, ib] - ratings[rows, ia]) / 400.0))
        delta = k * (s[m] - expected)
        ratings[rows, ia] += delta
        ratings[rows, ib] -= delta
    return ratings


def _absent(a: Any, b: Any, order: Any, players: int) -> Any:
    """Per replicate and player: True where none of the replicate's matches involve it."""
    import numpy as np

    played = np.zeros((order.shape[0], players), dtype=bool)
    rows = np.arange(order.shape[0])[:, None]
    played[rows, a[order]] = True
    played[rows, b[order]] = True
    return ~played


@register("elo_ratings")
def elo_ratings(
    matches: list[dict[str, Any]],
    k: float = 4.0,
    initial: float = 1000.0,
    replicates: int = 1000,
    seed: int | None = 0,
    score: str = "outcome",
    resample: bool = True,
    level: float = 0.95,
) -> dict[str, Any]:
    """Per dimension: Elo median and confidence interval over bootstrap replicates.

    Online Elo depends on match order, so each replicate replays the matches in a fresh
    random order; with `resample` (default, as Chatbot Arena does) it also draws them with
    replacement so the interval reflects which cases happened to be judged. A player none
    of whose matches a replicate drew is left out of that replicate, as FastChat does (it
    has no rating there; its `initial` would pull the median towards 1000), and
    `replicates` per player counts the ones it is in; a player in none has rating None.
    `score`: "outcome" (plurality win/loss/tie per match) or "fraction" (S, the share of
    votes).
    """
    import numpy as np

    from ..stats import resample as draw

    if replicates < 1:
        raise ValueError("replicates must be at least 1")
    rng = np.random.default_rng(seed)
    tables: dict[str, Any] = {}
    for dimension, group in by_dimension(matches).items():
        names, a, b, s = _encode(group, score)
        count = len(group)
        if resample:
            order = draw(rng, count, replicates)  # the bootstrap's draw (stats.resample)
        else:
            order = np.argsort(rng.random((replicates, count)), axis=1)
        ratings = _elo_runs(a, b, s, len(names), order, k, initial)
        absent = _absent(a, b, order, len(names))
        played = Counter([m["a"] for m in group] + [m["b"] for m in group])
        players: dict[str, dict[str, Any]] = {}
        for i, name in enumerate(names):
            kept = ratings[~absent[:, i], i]
            low, high = _interval(kept, level)
            players[name] = {
                "rating": float(np.median(kept)) if kept.size else None,
                "ci_low": low,
                "ci_high": high,
                "matches": played[name],
                "replicates": int(kept.size),
            }
        tables[dimension] = {
            "players": players,
            "ranking": _ranking(players, "rating"),
            "matches": count,
            "k": k,
            "replicates": replicates,
            "level": level,
        }
    return tables


# -- Bradley–Terry --------------------------------------------------------------------


def _bt_fit(
    a: Any, b: Any, wins: Any, losses: Any, size: int, prior: float, covariates: Any = None
) -> tuple[Any, Any]:
    """Maximum-likelihood log-strengths (and covariate coefficients) for a stack of fits.

    Each design row u is player a[u] against b[u], with a's wins and losses in
    wins[r, u] / losses[r, u] for replicate r (fractions allowed: a tie is half of each),
    and optionally the row's covariates (a's style minus b's, `covariates[u]`): the
    log-odds that a wins are strength[a] - strength[b] + covariates[u] · coefficients. The
    replicates are independent, so their summed likelihood separates and one scipy
    Newton-CG run (exact gradient and Hessian-vector products) fits them all at once; 1000
    separate fits took ~25x longer. A weak Gaussian prior keeps an undefeated player's
    strength (and a coefficient of a covariate that explains everything) finite.
    Returns strengths (replicates x players, centred) and coefficients (replicates x k).
    """
    import numpy as np
    from scipy.optimize import minimize
    from scipy.special import expit, log_expit

    reps, rows = wins.shape
    k = 0 if covariates is None else covariates.shape[1]
    # The design: +1 at a, -1 at b, then the covariates; z = theta @ design.T.
    design = np.zeros((rows, size + k))
    np.add.at(design, (np.arange(rows), a), 1.0)
    np.add.at(design, (np.arange(rows), b), -1.0)
    if k:
        design[:, size:] = covariates
    games = wins + losses
    width = size + k

    def objective(flat: Any) -> tuple[float, Any]:
        theta = flat.reshape(reps, width)
        z = theta @ design.T
        loglik = float(np.sum(wins * log_expit(z) + losses * log_expit(-z)))
        slope = wins * expit(-z) - losses * expit(z)
        penalty = 0.5 * prior * float(np.sum(theta * theta))
        return -loglik + penalty, (-(slope @ design) + prior * theta).ravel()

    def hessian_times(flat: Any, vector: Any) -> Any:
        theta, v = flat.reshape(reps, width), vector.reshape(reps, width)
        z = theta @ design.T
        curvature = games * expit(z) * expit(-z)
        return ((curvature * (v @ design.T)) @ design + prior * v).ravel()

    fit = minimize(
        objective,
        np.zeros(reps * width),
        jac=True,
        hessp=hessian_times,
        method="Newton-CG",
        options={"xtol": 1e-8},
    )
    theta = fit.x.reshape(reps, width)
    beta = theta[:, :size]
    return beta - beta.mean(axis=1, keepdims=True), theta[:, size:]


def _credit_fit(credits: Any, prior: float) -> Any:
    """Strengths from credit matrices (credits[r, i, j]: i's wins over j), one row per pair."""
    import numpy as np

    size = credits.shape[1]
    a, b = np.triu_indices(size, 1)
    return _bt_fit(a, b, credits[:, a, b], credits[:, b, a], size, prior)[0]


def _credits(a: Any, b: Any, s: Any, weights: Any, players: int) -> Any:
    """Win credits per replicate and ordered pair (weights: replicates x matches).

    A tie is half a win for each side.
    """
    import numpy as np

    count = len(s)
    # One row per match: where its credit lands in the flattened players x players matrix.
    spread = np.zeros((count, players * players))
    rows = np.arange(count)
    np.add.at(spread, (rows, a * players + b), s)
    np.add.at(spread, (rows, b * players + a), 1.0 - s)
    return (weights @ spread).reshape(weights.shape[0], players, players)


def unbeaten_group(credits: Any) -> list[int] | None:
    """Players no one outside them ever beat, when the win graph is not strongly connected.

    `credits[i, j]` is i's wins over j (a tie is half a win each way). A finite
    maximum-likelihood Bradley–Terry fit exists exactly when every player reaches every
    other along "beat" edges (Zermelo; Ford 1957); otherwise some group never lost to the
    rest and the likelihood keeps rising as it pulls away. Returns that group's indices
    (the first such group by index), or None when the fit exists.
    """
    import numpy as np
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    size = credits.shape[0]
    if size < 2:
        return None
    beat = np.asarray(credits) > 0
    count, label = connected_components(csr_matrix(beat), directed=True, connection="strong")
    if count == 1:
        return None
    # A component that no outside player beat: no edge j -> i with j outside, i inside.
    outside = label[:, None] != label[None, :]
    beaten = np.zeros(count, dtype=bool)
    _, cols = np.nonzero(beat & outside)
    beaten[label[cols]] = True
    top = int(np.flatnonzero(~beaten)[0])
    return [int(i) for i in np.flatnonzero(label == top)]


def _refuse_without_prior(names: list[str], credits: Any, dimension: str) -> None:
    """Raise NoMaximumLikelihood when prior 0 is asked of data no finite fit explains."""
    group = unbeaten_group(credits)
    if group is None:
        return
    players = [names[i] for i in group]
    who = ", ".join(players)
    raise NoMaximumLikelihood(
        f"bradley_terry(prior=0), dimension {dimension!r}: no maximum-likelihood fit "
        f"exists, because {who} never lost to any other player (undefeated, or never "
        "compared with the rest); the ratings would run off to infinity. Use a prior > 0 "
        "(the default 0.01 keeps them finite), or add matches that connect the players.",
        players,
    )


@register("bradley_terry", blocking=True)
def bradley_terry(
    matches: list[dict[str, Any]],
    replicates: int = 1000,
    seed: int | None = 0,
    prior: float = 0.01,
    score: str = "outcome",
    scale: float = 400.0,
    initial: float = 1000.0,
    level: float = 0.95,
    style: bool | list[str] | None = None,
) -> dict[str, Any]:
    """Per dimension: Bradley–Terry ratings (maximum likelihood) with a bootstrap interval.

    Order-independent, unlike Elo. Ratings are on the Elo scale (`scale` points = 10:1
    odds) centred on `initial`; `strength` is the natural-log parameter. Replicates
    resample the matches with replacement and refit. With `prior=0` (pure maximum
    likelihood) data where some player never lost (see `unbeaten_group`) raise
    NoMaximumLikelihood, and replicates without a finite fit are left out of the interval
    (`replicates_without_mle` counts them).

    With `style` (true: every feature of compute/style.py; or a list of them) each
    dimension also gets `style_controlled`: the same model fitted with the answers' style
    differences as covariates, as Arena-Hard-Auto's style control does, so a judge's taste
    for long or formatted answers is credited to the covariates, not the players; its
    `coefficients` are the log-odds per standard deviation of each feature's difference.
    The matches then need `style_a`/`style_b` (map_votes and pair_outcomes carry them).
    """
    import numpy as np

    features = style_names(style)
    if replicates < 1:
        raise ValueError("replicates must be at least 1")
    rng = np.random.default_rng(seed)
    to_rating = scale / math.log(10.0)
    tables: dict[str, Any] = {}
    for dimension, group in by_dimension(matches).items():
        names, a, b, s = _encode(group, score)
        count, size = len(group), len(names)
        whole = _credits(a, b, s, np.ones((1, count)), size)
        if prior == 0:
            _refuse_without_prior(names, whole[0], dimension)
        full = _credit_fit(whole, prior)[0]
        draws = rng.multinomial(count, np.full(count, 1.0 / count), size=replicates)
        resampled = _credits(a, b, s, draws.astype(float), size)
        without = 0
        if prior == 0:
            # Fit only the replicates a finite fit exists for: the others would run
            # Newton-CG off towards infinity until it gives up.
            fitted = np.array([unbeaten_group(c) is None for c in resampled], dtype=bool)
            without = int(np.count_nonzero(~fitted))
            resampled = resampled[fitted]
            draws = draws[fitted]
        boot = _credit_fit(resampled, prior) if len(resampled) else np.empty((0, size))
        played = Counter([m["a"] for m in group] + [m["b"] for m in group])
        rate = _Rater(names, played, initial, to_rating, level)
        players = rate(full, boot)
        extra: dict[str, Any] = {}
        if features:
            covariates = style_differences(group, features)
            weights = np.vstack([np.ones(count), draws.astype(float)])
            strengths, coefficients = _bt_fit(
                a, b, weights * s, weights * (1.0 - s), size, prior, covariates
            )
            controlled = rate(strengths[0], strengths[1:])
            extra["style_controlled"] = {
                "players": controlled,
                "ranking": _ranking(controlled, "rating"),
                "features": features,
                "coefficients": {
                    f: float(c) for f, c in zip(features, coefficients[0], strict=True)
                },
            }
        tables[dimension] = {
            "players": players,
            "ranking": _ranking(players, "rating"),
            "matches": count,
            "replicates": replicates,
            "replicates_without_mle": without,
            "prior": prior,
            "level": level,
            **extra,
        }
    return tables


class _Rater:
    """Per player: the full fit's rating and the bootstrap's median and interval."""

    def __init__(
        self, names: list[str], played: Counter[str], initial: float, to_rating: float, level: float
    ) -> None:
        self.names, self.played, self.level = names, played, level
        self.initial, self.to_rating = initial, to_rating

    def __call__(self, full: Any, boot: Any) -> dict[str, dict[str, Any]]:
        import numpy as np

        players = {}
        for i, name in enumerate(self.names):
            rated = self.initial + self.to_rating * boot[:, i]
            low, high = _interval(rated, self.level)
            players[name] = {
                "rating": float(self.initial + self.to_rating * full[i]),
                "strength": float(full[i]),
                "median": float(np.median(rated)) if rated.size else None,
                "ci_low": low,
                "ci_high": high,
                "matches": self.played[name],
            }
        return players


# -- length-controlled win rate -------------------------------------------------------


@register("length_controlled_win_rate", blocking=True)
def length_controlled_win_rate(
    matches: list[dict[str, Any]],
    score: str = "outcome",
    replicates: int = 200,
    seed: int | None = 0,
    prior: float = 0.01,
    level: float = 0.95,
) -> dict[str, Any]:
    """Per dimension and pair: a's win rate, plain and length-controlled (AlpacaEval 2.0).

    AlpacaEval's length-controlled win rate fits the judge's preference for a as a logistic
    model of a's advantage plus tanh of the length difference (a's characters minus b's)
    over its standard deviation, then predicts the win rate at equal lengths: sigmoid of
    the advantage. This is the two-player Bradley–Terry fit with that one covariate, so it
    is `bradley_terry`'s fit; it matches AlpacaEval's `length_controlled_minimal` GLM (its
    default adds a per-instruction difficulty learnt from its own leaderboard, which a
    user's data lacks). `ci_low`/`ci_high` resample the pair's matches `replicates` times;
    `length_coefficient` > 0 means the judge favours the longer answer. The matches need
    `style_a`/`style_b` with `length` (map_votes and pair_outcomes carry them).
    """
    import numpy as np
    from scipy.special import expit

    if replicates < 1:
        raise ValueError("replicates must be at least 1")
    rng = np.random.default_rng(seed)
    tables: dict[str, Any] = {}
    for dimension, group in by_dimension(matches).items():
        by_pair: dict[str, list[dict[str, Any]]] = {}
        for m in group:
            by_pair.setdefault(m["pair"], []).append(m)
        pairs: dict[str, dict[str, Any]] = {}
        for pair, games in sorted(by_pair.items()):
            names, a, b, s = _encode(games, score)
            if len(names) != 2:
                raise ValueError(f"pair {pair!r} names {len(names)} players; it needs two")
            delta = np.array(
                [_length(m, "style_a", i) - _length(m, "style_b", i) for i, m in enumerate(games)]
            )
            spread = float(np.std(delta, ddof=1)) if len(games) > 1 else 0.0
            covariate = np.tanh(delta / spread) if spread > 0 else np.zeros(len(games))
            count = len(games)
            draws = rng.multinomial(count, np.full(count, 1.0 / count), size=replicates)
            weights = np.vstack([np.ones(count), draws.astype(float)])
            strengths, coefficients = _bt_fit(
                a, b, weights * s, weights * (1.0 - s), 2, prior, covariate[:, None]
            )
            # _encode sorts the names, and a pair's `a` is its alphabetically first name.
            controlled = expit(strengths[:, 0] - strengths[:, 1])
            low, high = _interval(controlled[1:], level)
            pairs[pair] = {
                "a": names[0],
                "b": names[1],
                "matches": count,
                "win_rate_a": float(np.mean(s)),
                "length_controlled_win_rate_a": float(controlled[0]),
                "ci_low": low,
                "ci_high": high,
                "length_coefficient": float(coefficients[0, 0]),
            }
        tables[dimension] = {"pairs": pairs, "replicates": replicates, "level": level}
    return tables


def _length(match: dict[str, Any], side: str, row: int) -> float:
    """One answer's character count from a match's style record, named in the error."""
    found = match.get(side)
    if not isinstance(found, dict) or "length" not in found:
        raise ValueError(
            f"match {row} ({match.get('pair')}) has no {side}.length; the length-controlled "
            "win rate needs the matches of map_votes and pair_outcomes, which carry it"
        )
    return float(found["length"])


# -- consistency under resampling -----------------------------------------------------


@register("ranking_consistency", blocking=True)
def ranking_consistency(
    matches: list[dict[str, Any]],
    sizes: list[int] | None = None,
    replicates: int = 200,
    seed: int | None = 0,
    k: float = 4.0,
) -> dict[str, Any]:
    """How often a sample of n cases reproduces the full set's verdicts (AuPEL consistency).

    For each size n, draws n cases with replacement `replicates` times and reports the
    mean share of pairs whose verdict (more case wins) matches the full set's, and how
    often one shuffled Elo pass over the sample orders all players as the full set does.
    Matches need a `case` key.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    tables: dict[str, Any] = {}
    for dimension, group in by_dimension(matches).items():
        positions: dict[str, list[int]] = {}
        for i, m in enumerate(group):
            positions.setdefault(str(m.get("case")), []).append(i)
        cases = sorted(positions)
        names, a, b, s = _encode(group, "outcome")
        # A no-op match (a player against itself, drawn) pads samples to equal length so
        # every replicate's Elo pass runs in one vectorised sweep.
        pad = len(group)
        a, b, s = np.append(a, 0), np.append(b, 0), np.append(s, 0.5)
        full_runs = np.array([rng.permutation(pad) for _ in range(200)])
        full_order = _order(np.median(_elo_runs(a, b, s, len(names), full_runs, k, 1000.0), 0))
        full_verdict = _verdicts(group)
        wanted = sizes or [n for n in (10, 20, 50, 100) if n <= len(cases)] or [len(cases)]
        rows: dict[str, Any] = {}
        for n in wanted:
            samples = [
                [i for c in rng.integers(0, len(cases), size=n) for i in positions[cases[c]]]
                for _ in range(replicates)
            ]
            verdict_agree: list[float] = []
            for picked in samples:
                verdict = _verdicts([group[i] for i in picked])
                shared = [p for p in full_verdict if p in verdict]
                if shared:
                    verdict_agree.append(
                        sum(verdict[p] == full_verdict[p] for p in shared) / len(shared)
                    )
            longest = max(len(p) for p in samples)
            runs = np.array(
                [rng.permutation(p + [pad] * (longest - len(p))) for p in samples], dtype=np.int64
            )
            ratings = _elo_runs(a, b, s, len(names), runs, k, 1000.0)
            order_agree = [_order(r) == full_order for r in ratings]
            rows[str(n)] = {
                "verdict_agreement": float(np.mean(verdict_agree)) if verdict_agree else None,
                "order_agreement": float(np.mean(order_agree)),
            }
        tables[dimension] = {"cases": len(cases), "replicates": replicates, "sizes": rows}
    return tables


def _order(ratings: Any) -> tuple[int, ...]:
    """Player indices, best rating first (stable on equal ratings)."""
    import numpy as np

    return tuple(int(i) for i in np.argsort(-ratings, kind="stable"))


def _verdicts(matches: list[dict[str, Any]]) -> dict[str, str]:
    """Per pair, the generator with more case wins (or tie)."""
    tally: dict[str, Counter[str]] = {}
    sides: dict[str, tuple[str, str]] = {}
    for m in matches:
        tally.setdefault(m["pair"], Counter())[m["winner"]] += 1
        sides[m["pair"]] = (m["a"], m["b"])
    return {
        pair: plurality(c[sides[pair][0]], c[sides[pair][1]], *sides[pair])
        for pair, c in tally.items()
    }
