"""The comparison page: one self-contained HTML file of a `compare` result. It holds the
compare table, where each two runs part node by node (`diff`: the first differing node of
every changed example), and per output the paired differences with their intervals, a
scatter of run a against run b per example, and the examples that moved most, each linked
to its decision path in both runs' reports (built beside the runs when missing)."""

from __future__ import annotations

import logging
import os
import time
from html import escape
from pathlib import Path
from urllib.parse import quote

from ..analysis import (
    Comparison,
    ExampleShift,
    OutputComparison,
    PairExamples,
    RunDiff,
    diff,
    paired_examples,
)
from ..analysis import format_number as number
from ..errors import OrchestratorError, ReadOnlyRunFolder
from ..shipped import __version__
from .build import REPORT, asset, build_report
from .compare_tables import (
    agreement_tables,
    diff_examples_table,
    diff_nodes_table,
    differences_table,
    group_differences_table,
    runs_table,
)
from .render import html_table
from .svg import Estimate, Point, figure, intervals, scatter

log = logging.getLogger(__name__)

TOP = 20  # examples listed open per output and pair; the rest are folded
MAX_LISTED = 2000  # past this many, an output's examples are not all listed (and say so)


def _reports(result: Comparison, out_dir: Path, build: bool) -> dict[str, str]:
    """Run label → the link to its report.html from the page's folder (built if missing)."""
    links: dict[str, str] = {}
    for run in result.runs:
        if run.path is None:
            continue
        report = Path(run.path) / REPORT
        if not report.is_file() and build:
            log.debug("building %s for the comparison page's links", report)
            try:
                build_report(Path(run.path))
            except ReadOnlyRunFolder:
                # A read-only run is still compared; its examples are listed unlinked.
                log.warning(
                    "%s is read-only, so the page does not link to its report (build one "
                    "elsewhere with: orchestrator report %s --out FILE)",
                    run.path,
                    run.path,
                )
        if report.is_file():
            links[run.label] = Path(os.path.relpath(report.resolve(), out_dir.resolve())).as_posix()
    return links


def _example_link(report: str | None, example: str, text: str) -> str:
    if report is None:
        return f'<span class="muted">{escape(text)}</span>'
    href = f"{report}#example={_quote(example)}"
    return f'<a class="path-link" href="{escape(href)}">{escape(text)}</a>'


def _quote(example: str) -> str:
    # The report decodes the hash with decodeURIComponent, as its own rows encode it.
    return quote(example, safe="")


def _anchor(output: int, pair: int, example: str) -> str:
    return f"o{output}-p{pair}-{_quote(example).replace('%', '_')}"


def _folded(table: str, count: int) -> str:
    """Rows past the first few, folded away under a line that says how many."""
    return f"<details><summary>the other {count} examples</summary>{table}</details>"


def _moved(
    shifts: PairExamples, k: int, n: int, reports: dict[str, str], top: int
) -> tuple[str, set[str]]:
    """The examples of one output and pair, largest move first: the first `top` open, the
    rest folded; returns the ids listed (a scatter point links to its row)."""
    listed = shifts.examples[:MAX_LISTED]
    columns = ["example", shifts.run_a, shifts.run_b, "b − a", "decision paths"]

    def row(s: ExampleShift) -> list[str]:
        links = (
            _example_link(reports.get(shifts.run_a), s.id, f"in {shifts.run_a}")
            + " · "
            + _example_link(reports.get(shifts.run_b), s.id, f"in {shifts.run_b}")
        )
        return [
            f'<span class="mono" id="{_anchor(k, n, s.id)}">{escape(s.id)}</span>',
            number(s.a),
            number(s.b),
            f"<b>{number(s.difference, scale=max(abs(s.a), abs(s.b)))}</b>",
            links,
        ]

    head = html_table(columns, [row(s) for s in listed[:top]], "data moved")
    rest = ""
    if len(listed) > top:
        rest = _folded(
            html_table(columns, [row(s) for s in listed[top:]], "data moved"), len(listed) - top
        )
    if len(shifts.examples) > MAX_LISTED:
        rest += (
            f'<p class="muted">{len(shifts.examples) - MAX_LISTED} examples that moved least are '
            "not listed; `orchestrator compare --format json` and the runs' reports have them.</p>"
        )
    return head + rest, {s.id for s in listed}


def _group_figure(result: Comparison, found: OutputComparison) -> str:
    """`compare --by`: b − a of every pair within each group, one row per group and pair."""
    estimates = [
        Estimate(
            f"{group.key} · {p.run_a} → {p.run_b} (n {p.n})",
            p.difference,
            p.ci.low if p.ci else None,
            p.ci.high if p.ci else None,
        )
        for group in result.groups
        for p in group.output(found.output).pairs
        if p.difference is not None
    ]
    if not estimates:
        return ""
    svg = intervals(estimates, f"mean of b − a per {result.by} ({found.output})", reference=0)
    return figure(f"paired difference per {result.by}", svg, "The line marks no difference.")


def _output_section(
    k: int,
    found: OutputComparison,
    shifts: list[PairExamples],
    reports: dict[str, str],
    top: int,
    result: Comparison | None = None,
) -> str:
    """One output: b − a with its interval per pair, then per pair a scatter and the
    examples that moved most."""
    estimates = [
        Estimate(
            f"{p.run_a} → {p.run_b}",
            p.difference,
            p.ci.low if p.ci else None,
            p.ci.high if p.ci else None,
        )
        for p in found.pairs
        if p.difference is not None
    ]
    plots, tables = [], []
    if estimates:
        svg = intervals(estimates, f"mean of b − a with its interval ({found.output})", reference=0)
        plots.append(figure("paired difference", svg, "The line marks no difference."))
    if result is not None and result.groups:
        plots.append(_group_figure(result, found))
    for n, pair in enumerate(shifts):
        listed_html, listed = _moved(pair, k, n, reports, top)
        points: dict[tuple[float, float], list[str]] = {}
        for s in pair.examples:
            points.setdefault((s.a, s.b), []).append(s.id)
        marks = [
            Point(x, y, tuple(ids), f"#{_anchor(k, n, ids[0])}" if ids[0] in listed else None)
            for (x, y), ids in points.items()
        ]
        svg = scatter(
            marks,
            pair.run_a,
            pair.run_b,
            f"{found.output}: {pair.run_a} (x) against {pair.run_b} (y)",
        )
        above = sum(s.difference > 0 for s in pair.examples)
        below = sum(s.difference < 0 for s in pair.examples)
        note = (
            f"{len(pair.examples)} examples; {above} above the diagonal (higher in "
            f"{pair.run_b}), {below} below. A point stands for every example at its place "
            "(larger for more); click it for its row."
        )
        plots.append(figure(f"{pair.run_a} → {pair.run_b}", svg, note))
        tables.append(
            f'<div class="pair" data-pair="{escape(pair.run_a)} → {escape(pair.run_b)}">'
            f"<h3>Examples that moved most ({escape(pair.run_a)} → {escape(pair.run_b)})</h3>"
            f"{listed_html}</div>"
        )
    return (
        f'<section class="panel output" id="output-{k}"><h2>{escape(found.output)}</h2>'
        f'<div class="figures">{"".join(plots)}</div>{"".join(tables)}</section>'
    )


def run_diffs(result: Comparison) -> tuple[list[RunDiff], list[str]]:
    """Each two runs' `diff`, for runs read from folders; a pair that cannot be diffed (a
    folder without its trace) is a note instead, since the comparison stands without it."""
    found: list[RunDiff] = []
    notes: list[str] = []
    folders = [run for run in result.runs if run.path is not None]
    for i, run_a in enumerate(folders):
        for run_b in folders[i + 1 :]:
            assert run_a.path is not None and run_b.path is not None
            try:
                found.append(diff(run_a.path, run_b.path))
            except OrchestratorError as exc:
                notes.append(f"{run_a.label} → {run_b.label} cannot be diffed node by node: {exc}")
    return found, notes


def _diff_section(
    diffs: list[RunDiff], notes: list[str], result: Comparison, reports: dict[str, str], top: int
) -> str:
    """Where each two runs part: per node how many examples changed, and each changed
    example's first differing node with both values, linked to that node in both reports."""
    if not diffs and not notes:
        return ""
    labels = {run.path: run.label for run in result.runs if run.path is not None}
    parts = []
    for found in diffs:
        pair = (
            labels.get(found.run_a.path, found.run_a.label),
            labels.get(found.run_b.path, found.run_b.label),
        )
        links = (reports.get(pair[0]), reports.get(pair[1]))
        listed = found.differences[:MAX_LISTED]
        body = diff_examples_table(listed[:top], pair, links) if listed else ""
        if len(listed) > top:
            body += _folded(diff_examples_table(listed[top:], pair, links), len(listed) - top)
        if len(found.differences) > MAX_LISTED:
            body += (
                f'<p class="muted">{len(found.differences) - MAX_LISTED} more changed examples '
                "are not listed; `orchestrator diff --format json` has them all.</p>"
            )
        summary = (
            f"{found.shared} examples in both runs, {found.changed} with a changed final output"
            + ("; no node value differs." if found.identical else ".")
        )
        extra = "".join(f'<p class="note">{escape(n)}</p>' for n in found.notes)
        parts.append(
            f'<div class="diff-pair" data-diff="{escape(pair[0])} → {escape(pair[1])}">'
            f"<h3>{escape(pair[0])} → {escape(pair[1])}</h3><p>{escape(summary)}</p>{extra}"
            f"{diff_nodes_table(found)}{body}</div>"
        )
    parts += [f'<p class="note">{escape(n)}</p>' for n in notes]
    return (
        '<section class="panel" id="diff"><h2>Where the runs part</h2>'
        '<p class="muted small">Node values from the traces, in graph order; for each example '
        "whose final output changed, the first node whose value differs.</p>"
        + "".join(parts)
        + "</section>"
    )


def render_compare_page(
    result: Comparison,
    shifts: list[PairExamples],
    reports: dict[str, str],
    top: int = TOP,
    diffs: list[RunDiff] | None = None,
    diff_notes: list[str] | None = None,
) -> str:
    """The page's HTML: compare table, agreement, where the runs part (`diffs`), then one
    section per output."""
    title = " vs ".join(run.label for run in result.runs)
    parted = _diff_section(diffs or [], diff_notes or [], result, reports, top)
    anchors = {found.output: f"output-{k}" for k, found in enumerate(result.outputs)}
    sections = [
        _output_section(
            k, found, [s for s in shifts if s.output == found.output], reports, top, result
        )
        for k, found in enumerate(result.outputs)
    ]
    notes = "".join(f'<p class="note">{escape(n)}</p>' for n in result.notes)
    if not result.outputs:
        notes += '<p class="note">No numeric output is shared by the runs.</p>'
    footer = (
        f"orchestrator {__version__} · comparison generated {time.strftime('%Y-%m-%d %H:%M:%S')}"
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="generator" content="orchestrator compare"><link rel="icon" href="data:,">'
        f"<title>compare: {escape(title)}</title><style>{asset('style.css')}</style></head>"
        '<body><header class="top"><h1><span class="brand">orchestrator compare</span> '
        f"{escape(title)}</h1></header><main>"
        f'<section class="panel" id="overview"><h2>{escape(result.kind)} comparison</h2>'
        f"<p>{escape(result.kind_reason)}; {result.common} examples ok in every run.</p>{notes}"
        f"<h3>Runs</h3>{runs_table(result, reports)}"
        f"<h3>Paired differences</h3>{differences_table(result, anchors)}"
        f"{group_differences_table(result)}"
        f'<p class="muted small">{escape(result.method_note())}</p>'
        f"{agreement_tables(result)}</section>"
        + parted
        + "".join(sections)
        + f'</main><footer class="muted small">{escape(footer)}</footer></body></html>'
    )


def write_compare_page(
    result: Comparison,
    out: Path | str,
    top: int = TOP,
    build_reports: bool = True,
) -> Path:
    """Write the comparison page of `result` (from `orc.compare` over run folders) to `out`.

    The runs' own report.html files are built when missing, so each example links to its
    decision path in both runs; `build_reports=False` links only to reports that exist.
    Each two run folders are also diffed node by node (`orc.diff`) for the page.
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    shifts = paired_examples(result)
    reports = _reports(result, out.parent, build_reports)
    diffs, diff_notes = run_diffs(result)
    html = render_compare_page(result, shifts, reports, top, diffs, diff_notes)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(html, encoding="utf-8")
    os.replace(tmp, out)
    return out
