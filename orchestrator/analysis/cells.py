"""The cells of `compare`'s tables as plain text: one source for the terminal table and the
comparison page, which each escape and decorate them for their medium."""

from __future__ import annotations

from typing import Any

from .comparison import Comparison, PairDifference
from .comparison import format_number as number
from .comparison import format_p as p_value

CORRELATION_COLUMNS = ["output", "a → b", "n", "pearson", "spearman", "kendall τb"]
LABEL_COLUMNS = ["output", "a → b", "n", "same", "κ", "κ quadratic", "flips"]
STYLE_COLUMNS = ["run", "dimension", "figure", "plain", "controlled", "interval"]


def run_rows(result: Comparison, shown: int) -> tuple[list[str], list[list[str]]]:
    """The runs table after each run's label and model: the columns and a row per run
    (examples, ok, failed, abstained when any run has such, missing with the first
    `shown` ids)."""
    abstaining = any(run.abstained for run in result.runs)
    columns = ["run", "model", "examples", "ok", "failed"]
    columns += ["abstained", "missing"] if abstaining else ["missing"]
    rows = []
    for run in result.runs:
        missing = str(len(run.missing))
        if run.missing:
            listed = ", ".join(run.missing[:shown]) + (", …" if len(run.missing) > shown else "")
            missing += f" ({listed})"
        row = [str(run.examples), str(run.ok), str(len(run.failed))]
        row += [str(len(run.abstained)), missing] if abstaining else [missing]
        rows.append(row)
    return columns, rows


def pair_label(run_a: str, run_b: str) -> str:
    return f"{run_a} → {run_b}"


def difference_cells(pair: PairDifference) -> list[str]:
    """A pair's row from `n` on: means, b − a, its CI, p, Holm, d_z, wins/ties/losses."""
    # A difference is as noisy as the scores it came from: their size is its scale.
    scale = max(abs(pair.mean_a or 0.0), abs(pair.mean_b or 0.0))
    ci = "—"
    if pair.ci is not None:
        ci = f"{number(pair.ci.low, scale=scale)}, {number(pair.ci.high, scale=scale)}"
    return [
        str(pair.n),
        number(pair.mean_a),
        number(pair.mean_b),
        number(pair.difference, scale=scale),
        ci,
        p_value(pair.p),
        p_value(pair.p_holm),
        number(pair.effect_size, 2),
        f"{pair.wins}/{pair.ties}/{pair.losses}",
    ]


def correlation_rows(result: Comparison) -> list[list[str]]:
    """One row per output and pair whose scores were correlated (a judge comparison)."""
    return [
        [
            found.output,
            pair_label(pair.run_a, pair.run_b),
            str(pair.n),
            number(pair.agreement.pearson),
            number(pair.agreement.spearman),
            number(pair.agreement.kendall_tau_b),
        ]
        for found in result.outputs
        for pair in found.pairs
        if pair.agreement is not None
    ]


def label_rows(result: Comparison) -> list[list[str]]:
    """One row per label output and pair: agreement, κ, quadratic κ, verdict flips."""
    rows = []
    for found in result.labels:
        for pair in found.pairs:
            flips = "—"
            if pair.flips is not None:
                flips = f"{pair.flips} ({number(pair.flip_rate, 2)})"
            rows.append(
                [
                    found.output,
                    pair_label(pair.run_a, pair.run_b),
                    str(pair.n),
                    number(pair.agreement),
                    number(pair.kappa),
                    number(pair.kappa_quadratic),
                    flips,
                ]
            )
    return rows


def _interval(row: dict[str, Any], digits: int) -> str:
    low, high = row.get("ci_low"), row.get("ci_high")
    if low is None or high is None:
        return "—"
    return f"{low:.{digits}f}–{high:.{digits}f}"


def style_rows(result: Comparison) -> list[list[str]]:
    """Per pairwise run and dimension: each generator's Bradley–Terry rating plain and
    style-controlled, then each pair's win rate plain and length-controlled (AlpacaEval);
    the interval is the controlled figure's."""
    rows = []
    for style in result.style:
        for dimension, fit in style.bradley_terry.items():
            controlled = fit.get("style_controlled", {}).get("players", {})
            for player in fit["ranking"]:
                plain, styled = fit["players"][player], controlled.get(player, {})
                rows.append([
                    style.run, dimension, f"Bradley–Terry {player}",
                    number(plain.get("rating"), 0), number(styled.get("rating"), 0),
                    _interval(styled, 0),
                ])  # fmt: skip
        for dimension, table in style.length_controlled.items():
            for pair in table["pairs"].values():
                rows.append([
                    style.run, dimension, f"win rate {pair['a']} vs {pair['b']}",
                    number(pair["win_rate_a"], 3), number(pair["length_controlled_win_rate_a"], 3),
                    _interval(pair, 3),
                ])  # fmt: skip
    return rows
