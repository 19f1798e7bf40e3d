"""The comparison page's tables, from the `Comparison` record: the runs, every output's
paired differences (the columns `orchestrator compare` prints), and the judges' agreement."""

from __future__ import annotations

from html import escape

from ..analysis.comparison import DIFFERENCE_COLUMNS, Comparison
from ..analysis.comparison import format_number as number
from ..analysis.comparison import format_p as p_value
from .render import html_table


def runs_table(result: Comparison, reports: dict[str, str]) -> str:
    """One row per run, its label linked to its report where there is one."""
    rows = []
    for run in result.runs:
        href = reports.get(run.label)
        label = escape(run.label)
        name = f'<a href="{escape(href)}">{label}</a>' if href else label
        missing = str(len(run.missing))
        if run.missing:
            shown = ", ".join(run.missing[:5]) + (", …" if len(run.missing) > 5 else "")
            missing += f" ({escape(shown)})"
        rows.append(
            [
                f"<b>{name}</b>",
                escape(run.model or "?"),
                str(run.examples),
                str(run.ok),
                str(len(run.failed)),
                missing,
                escape(run.path or "(in memory)"),
            ]
        )
    columns = ["run", "model", "examples", "ok", "failed", "missing", "folder"]
    return html_table(columns, rows, "data runs")


def differences_table(result: Comparison, anchors: dict[str, str]) -> str:
    """Every output and pair: means, b − a with its CI, p, Holm, d_z, wins/ties/losses."""
    rows = []
    for found in result.outputs:
        anchor = anchors.get(found.output)
        name = escape(found.output)
        if anchor:
            name = f'<a href="#{escape(anchor)}">{name}</a>'
        for pair in found.pairs:
            ci = "—" if pair.ci is None else f"{number(pair.ci.low)}, {number(pair.ci.high)}"
            rows.append(
                [
                    name,
                    escape(f"{pair.run_a} → {pair.run_b}"),
                    str(pair.n),
                    number(pair.mean_a),
                    number(pair.mean_b),
                    f"<b>{number(pair.difference)}</b>",
                    ci,
                    p_value(pair.p),
                    p_value(pair.p_holm),
                    number(pair.effect_size, 2),
                    f"{pair.wins}/{pair.ties}/{pair.losses}",
                ]
            )
    return html_table(DIFFERENCE_COLUMNS, rows, "data compare")


def agreement_tables(result: Comparison) -> str:
    """A judge comparison's correlations of the scores and agreement on the labels."""
    parts = []
    rows = [
        [
            escape(found.output),
            escape(f"{pair.run_a} → {pair.run_b}"),
            str(pair.n),
            number(pair.agreement.pearson),
            number(pair.agreement.spearman),
            number(pair.agreement.kendall_tau_b),
        ]
        for found in result.outputs
        for pair in found.pairs
        if pair.agreement is not None
    ]
    if rows:
        columns = ["output", "a → b", "n", "pearson", "spearman", "kendall τb"]
        parts.append("<h3>Agreement of the scores</h3>" + html_table(columns, rows))
    rows = []
    for label in result.labels:
        for pair in label.pairs:
            flips = "—"
            if pair.flips is not None:
                flips = f"{pair.flips} ({number(pair.flip_rate, 2)})"
            rows.append(
                [
                    escape(label.output),
                    escape(f"{pair.run_a} → {pair.run_b}"),
                    str(pair.n),
                    number(pair.agreement),
                    number(pair.kappa),
                    number(pair.kappa_quadratic),
                    flips,
                ]
            )
    if rows:
        columns = ["output", "a → b", "n", "same", "κ", "κ quadratic", "flips"]
        parts.append("<h3>Agreement of the labels</h3>" + html_table(columns, rows))
    return "".join(parts)
