"""The card as titled tables of text cells: what the terminal and the report both show,
so the two never disagree on a number's rounding."""

from __future__ import annotations

from dataclasses import dataclass

from .flags import interval_text
from .record import Interval, JudgeCard


@dataclass(frozen=True)
class Section:
    """One table of the card: a title, column names and rows of cells."""

    title: str
    columns: list[str]
    rows: list[list[str]]


def _num(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _rate(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def _ci(ci: Interval | None) -> str:
    return interval_text(ci).strip() or "–"


def _p(value: float | None) -> str:
    return "–" if value is None else f"{value:.3g}"


def _model(model: str | None) -> str:
    return model or "–"


def sections(card: JudgeCard) -> list[Section]:
    """Every non-empty part of the card as a table, in the order the docs describe them."""
    found: list[Section] = []
    # An `abstained` column only for a card whose judges abstained: most never can.
    abstaining = any(r.abstentions for r in card.reliability)
    found.append(
        Section(
            "Reliability of the calls",
            ["node", "model", "calls", "first-try invalid", "re-asks", "truncated", "failed"]
            + (["abstained"] if abstaining else []),
            [
                [
                    r.node,
                    _model(r.model),
                    str(r.calls),
                    str(r.first_try_invalid),
                    str(r.reasks),
                    str(r.truncations),
                    str(r.failures),
                ]
                + ([str(r.abstentions)] if abstaining else [])
                for r in card.reliability
            ],
        )
    )
    found.append(
        Section(
            "Score distribution",
            ["node.field", "model", "n", "shares", "entropy (bits)", "at extremes"],
            [
                [
                    f"{d.node}.{d.field}",
                    _model(d.model),
                    str(d.n),
                    " ".join(f"{v}:{s:.0%}" for v, s in d.shares.items()),
                    _num(d.entropy),
                    _rate(d.extremes),
                ]
                for d in card.distributions
            ],
        )
    )
    found.append(
        Section(
            f"Length bias (score vs length of {card.judged})",
            ["node.field", "model", "n", "Spearman", "95% CI", "p"],
            [
                [
                    f"{b.node}.{b.field}",
                    _model(b.model),
                    str(b.n),
                    _num(b.spearman),
                    _ci(b.ci),
                    _p(b.p),
                ]
                for b in card.length_bias
            ],
        )
    )
    found.append(
        Section(
            "Length bias (pairwise): P(prefer the longer)",
            ["votes", "judge", "decisive votes", "rate", "95% CI", "p"],
            [
                [x.votes, x.judge, str(x.decisive_votes), _rate(x.rate), _ci(x.ci), _p(x.p)]
                for x in card.prefer_longer
            ],
        )
    )
    found.append(
        Section(
            "Position bias and swap consistency",
            ["votes", "judge", "decisive votes", "first picked", "95% CI", "p", "flips"],
            [
                [
                    x.votes,
                    x.judge,
                    str(x.decisive_votes),
                    _rate(x.first_rate),
                    _ci(x.ci),
                    _p(x.p),
                    _rate(x.flip_rate),
                ]
                for x in card.position_bias
            ],
        )
    )
    found.append(
        Section(
            "Self-preference",
            ["node.field", "model", "own / other", "gap", "95% CI", "p"],
            [
                [
                    f"{s.node}.{s.field}",
                    s.model,
                    f"{s.own} / {s.others}",
                    _num(s.gap),
                    _ci(s.ci),
                    _p(s.p),
                ]
                for s in card.self_preference
            ],
        )
    )
    found.append(
        Section(
            "Juries",
            ["jurors", "field", "n", "pairwise α", "effective jurors"],
            [
                [
                    ", ".join(j.jurors),
                    j.field,
                    str(j.n),
                    # Each pair's α rests on the examples both scored: say how many.
                    "; ".join(f"{p.a}~{p.b} {_num(p.alpha)} (n {p.n})" for p in j.pairs),
                    _num(j.effective_jurors),
                ]
                for j in card.juries
            ],
        )
    )
    retest = card.stability
    found.append(
        Section(
            f"Stability ({retest.k} repeats of {len(retest.rows)} rows)" if retest else "Stability",
            ["node.field", "model", "rows", "test–retest α", "interval", "rows changed"],
            [
                [
                    f"{s.node}.{s.field}",
                    _model(s.model),
                    str(s.rows),
                    _num(s.alpha),
                    "–" if s.alpha_ci is None else f"[{s.alpha_ci[0]:.2f}, {s.alpha_ci[1]:.2f}]",
                    _rate(s.flip_rate),
                ]
                for s in (retest.stability if retest else ())
            ],
        )
    )
    for report in card.stress:
        found.append(
            Section(
                f"Stress of {report.node} ({report.rows} rows, {report.folder})",
                ["perturbation", "variant", "output", "n", "effect", "95% CI", "Holm p"],
                [
                    [
                        e.perturbation,
                        e.variant,
                        f"{e.node}.{e.field}",
                        str(e.n),
                        f"{e.estimate:+.2f}" if e.kind == "shift" else f"{e.estimate:.0%} flip",
                        "–" if e.low is None or e.high is None else f"[{e.low:.2f}, {e.high:.2f}]",
                        f"{e.p_holm:.3g}",
                    ]
                    for e in report.perturbations
                ],
            )
        )
    return [s for s in found if s.rows]


def flag_lines(card: JudgeCard) -> list[str]:
    """The flags, or one line saying that no finding survived the correction; then each
    stress test's flags (Holm across its own report)."""
    stress = [line for report in card.stress for line in report.flags]
    if card.flags:
        return [*card.flags, *stress]
    tested = len(card.findings)
    return [
        f"no flag: none of {tested} tested effects survives Holm at α = {card.alpha:g}",
        *stress,
    ]


def cluster_line(card: JudgeCard) -> str | None:
    """How the card's intervals and tests treat nested examples (None when not clustered)."""
    if card.cluster is None:
        return None
    return (
        f"clustered by {card.cluster} ({card.clusters} clusters): the bootstraps and sign-flip "
        "tests resample and flip whole clusters"
    )
