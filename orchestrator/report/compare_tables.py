"""The comparison page's tables, from the `Comparison` record: the runs, every output's
paired differences (the columns `orchestrator compare` prints), the judges' agreement, and
where two runs part node by node (`RunDiff`)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from ..analysis import (
    CORRELATION_COLUMNS,
    DIFFERENCE_COLUMNS,
    LABEL_COLUMNS,
    STYLE_COLUMNS,
    Comparison,
    FirstDifference,
    RunDiff,
    correlation_rows,
    difference_cells,
    label_rows,
    pair_label,
    path_anchor,
    run_rows,
    style_rows,
)
from .render import html_table


def runs_table(result: Comparison, reports: dict[str, str]) -> str:
    """One row per run, its label linked to its report where there is one."""
    columns, cells = run_rows(result, shown=5)
    rows = []
    for run, row in zip(result.runs, cells, strict=True):
        href = reports.get(run.label)
        label = escape(run.label)
        name = f'<a href="{escape(href)}">{label}</a>' if href else label
        rows.append(
            [
                f"<b>{name}</b>",
                escape(run.model or "?"),
                *map(escape, row),
                escape(run.path or "(in memory)"),
            ]
        )
    return html_table([*columns, "folder"], rows, "data runs")


def differences_table(result: Comparison, anchors: dict[str, str]) -> str:
    """Every output and pair: means, b − a with its CI, p, Holm, d_z, wins/ties/losses."""
    rows = []
    for found in result.outputs:
        anchor = anchors.get(found.output)
        name = escape(found.output)
        if anchor:
            name = f'<a href="#{escape(anchor)}">{name}</a>'
        for pair in found.pairs:
            cells = difference_cells(pair)
            cells[3] = f"<b>{cells[3]}</b>"  # b − a, the number the table is about
            rows.append([name, escape(pair_label(pair.run_a, pair.run_b)), *cells])
    return html_table(DIFFERENCE_COLUMNS, rows, "data compare")


def group_differences_table(result: Comparison) -> str:
    """`compare --by`: every output and pair within each group ("" when not grouped)."""
    if not result.groups:
        return ""
    rows = []
    for found in result.outputs:
        for group in result.groups:
            for pair in group.output(found.output).pairs:
                cells = difference_cells(pair)
                cells[3] = f"<b>{cells[3]}</b>"
                rows.append(
                    [
                        escape(group.key),
                        escape(found.output),
                        escape(pair_label(pair.run_a, pair.run_b)),
                        *cells,
                    ]
                )
    columns = [result.by or "group", *DIFFERENCE_COLUMNS]
    return f"<h3>Per {escape(result.by or 'group')}</h3>" + html_table(
        columns, rows, "data compare groups"
    )


def agreement_tables(result: Comparison) -> str:
    """A judge comparison's correlations of the scores and agreement on the labels."""
    parts = []
    for title, columns, rows in (
        ("Agreement of the scores", CORRELATION_COLUMNS, correlation_rows(result)),
        ("Agreement of the labels", LABEL_COLUMNS, label_rows(result)),
        ("Pairwise ratings, plain and style-controlled", STYLE_COLUMNS, style_rows(result)),
    ):
        if rows:
            escaped = [[escape(cell) for cell in row] for row in rows]
            parts.append(f"<h3>{title}</h3>" + html_table(columns, escaped))
    return "".join(parts)


def diff_nodes_table(found: RunDiff) -> str:
    """Per node in graph order: on how many examples its value changed, of how many."""
    rows = [
        [
            f'<span class="mono">{escape(node.node)}</span>'
            + (' <span class="muted">(once per run)</span>' if node.once else ""),
            f"<b>{node.changed}</b>" if node.changed else "0",
            str(node.compared),
        ]
        for node in found.nodes
    ]
    return html_table(["node", "changed", "compared"], rows, "data diff-nodes")


def diff_examples_table(
    changes: Sequence[FirstDifference],
    labels: tuple[str, str],
    links: tuple[str | None, str | None],
) -> str:
    """Each changed example's first differing node, both values, and links that open that
    node in both runs' reports (plain text where a run has no report)."""
    rows = []
    for change in changes:
        paths = []
        for label, report in zip(labels, links, strict=True):
            text = escape(f"in {label}")
            if report is None:
                paths.append(f'<span class="muted">{text}</span>')
            else:
                href = f"{report}#{path_anchor(change.example, change.node)}"
                paths.append(f'<a class="diff-link" href="{escape(href)}">{text}</a>')
        rows.append(
            [
                f'<span class="mono">{escape(change.example)}</span>',
                f'<span class="mono">{escape(change.where())}</span>',
                f'<span class="mono">{escape(change.shown("a"))}</span>',
                f'<span class="mono">{escape(change.shown("b"))}</span>',
                " · ".join(paths),
            ]
        )
    columns = ["example", "first differing node", labels[0], labels[1], "decision paths"]
    return html_table(columns, rows, "data diff-examples")
