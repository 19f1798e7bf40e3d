"""The alignment page: one self-contained HTML file of an `align` result in the report's
style: baseline against aligned judge on the held-out test set (values, intervals, the
paired difference and its verdict), the chosen configuration and shots, and the search
trace with every configuration's fold scores."""

from __future__ import annotations

import os
import time
from html import escape
from pathlib import Path

from ..analysis import Alignment, Estimate, Trial
from ..shipped import __version__
from .build import asset
from .render import fmt, html_table
from .svg import Estimate as Mark
from .svg import figure, intervals


def _ci(found: Estimate | None) -> str:
    if found is None or found.ci is None:
        return fmt(None)
    return f"[{fmt(found.ci[0])}, {fmt(found.ci[1])}]"


def _test_section(record: Alignment) -> str:
    rows = [
        [
            escape(name),
            escape(side.configuration.label),
            fmt(side.test.value),
            _ci(side.test),
            fmt(side.test.n),
        ]
        for name, side in (("baseline", record.baseline), ("aligned", record.aligned))
    ]
    gap = record.difference
    gap_ci = "—" if gap.ci is None else f"[{fmt(gap.ci[0])}, {fmt(gap.ci[1])}]"
    rows.append(["aligned − baseline", "", fmt(gap.value), gap_ci, ""])
    marks = [
        Mark(name, side.test.value, *(side.test.ci or (None, None)))
        for name, side in (("baseline", record.baseline), ("aligned", record.aligned))
        if side.test.value is not None
    ]
    plot = (
        figure(f"{record.metric} on the test set", intervals(marks, record.metric)) if marks else ""
    )
    return (
        '<section class="panel" id="test"><h2>Held-out test set</h2>'
        f"<p>The aligned judge is <strong>{escape(_phrase(record))}</strong> the graph as "
        f"given on {len(record.test_ids)} test examples the search never saw "
        f"({escape(record.metric)} of node {escape(record.node)}'s "
        f"{escape(record.field)} against the labels).</p>"
        + html_table(
            ["judge", "configuration", record.metric, "interval", "answered"],
            rows,
            numeric=(2, 3, 4),
        )
        + plot
        + f'<p class="muted small">Bootstrap: {escape(_bootstrap(record))}; the difference\'s '
        "interval comes from the same resamples (paired). Better or worse when it excludes 0, "
        "else the same.</p></section>"
    )


def _phrase(record: Alignment) -> str:
    """The verdict in a sentence: better than, worse than, the same as."""
    return "the same as" if record.verdict == "same" else f"{record.verdict} than"


def _bootstrap(record: Alignment) -> str:
    found = record.bootstrap
    unit = found.get("unit", "example")
    where = f" by {found['cluster']}" if found.get("cluster") else ""
    return (
        f"{found.get('resamples')} resamples over {unit}s{where}, "
        f"{found.get('confidence', 0.95):.0%} percentile intervals, seed {found.get('seed')}"
    )


def _trace_section(record: Alignment) -> str:
    folds = max((len(t.folds) for t in record.trace), default=0)
    ordered = sorted(record.trace, key=_rank)

    def row(trial: Trial) -> list[str]:
        chosen = trial.configuration == record.chosen
        name = escape(trial.configuration.label) + (" <strong>(chosen)</strong>" if chosen else "")
        return [name, fmt(trial.score), *(fmt(v) for v in trial.folds)]

    columns = ["configuration", "mean", *(f"fold {k + 1}" for k in range(folds))]
    return (
        '<section class="panel" id="search"><h2>Search trace</h2>'
        f"<p>{len(record.search_ids)} search examples in {record.folds} folds; each "
        "configuration ran on every fold with shots drawn from the other folds only.</p>"
        + html_table(columns, [row(t) for t in ordered], numeric=range(1, len(columns)))
        + "</section>"
    )


def _rank(trial: Trial) -> tuple[float, int]:
    return (-(trial.score if trial.score is not None else float("-inf")), trial.configuration.shots)


def _chosen_section(record: Alignment) -> str:
    notes = "".join(f'<p class="note">{escape(n)}</p>' for n in record.notes)
    shots = ", ".join(escape(s) for s in record.shots) or "none"
    return (
        '<section class="panel" id="chosen"><h2>The aligned judge</h2>'
        f"<p>Protocol <code>{escape(record.name)}</code> in <code>{escape(record.graph)}</code>: "
        f"{escape(record.chosen.label)}. Shots (search-set examples): {shots}.</p>"
        f"{notes}</section>"
    )


def render_align_page(record: Alignment) -> str:
    """The page's HTML."""
    title = f"{record.source_graph} → {record.name}"
    footer = (
        f"orchestrator {__version__} · alignment generated {time.strftime('%Y-%m-%d %H:%M:%S')}"
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="generator" content="orchestrator align"><link rel="icon" href="data:,">'
        f"<title>align: {escape(title)}</title><style>{asset('style.css')}</style></head>"
        '<body><header class="top"><h1><span class="brand">orchestrator align</span> '
        f"{escape(title)}</h1></header><main>"
        + _test_section(record)
        + _chosen_section(record)
        + _trace_section(record)
        + f'</main><footer class="muted small">{escape(footer)}</footer></body></html>'
    )


def write_page(out: Path, record: Alignment) -> Path:
    """Write the alignment page of `record` to `out` (whole, or not at all)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(render_align_page(record), encoding="utf-8")
    os.replace(tmp, out)
    return out
