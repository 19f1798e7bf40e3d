"""Run views "Replay" and "Stress": where a replayed run comes from (the run it replays, the
nodes asked again, what changed), and the stress tests made from a run (their flags and
effects, read from each `stress.json` in the run folder)."""

from __future__ import annotations

import logging
from html import escape
from pathlib import Path

from ..analysis import kept_stress
from ..errors import OrchestratorError
from ..store import RunReader
from .render import html_table
from .views import RunContext, register_run_view

log = logging.getLogger(__name__)


def replay_panel(context: RunContext) -> str | None:
    """The lineage of a replay (its manifest's `parameters.replay`), None for another run."""
    if context.run_dir is None:
        return None
    try:
        lineage = RunReader(context.run_dir).manifest.parameters.replay
    except OrchestratorError as exc:
        log.warning("replay lineage of %s left out of the report: %s", context.run_dir, exc)
        return None
    if lineage is None:
        return None
    asked = lineage.nodes or []
    rows = [
        ["replays", escape(f"{lineage.source} (run key {lineage.source_key})")],
        ["nodes named", escape(", ".join(lineage.named or []))],
        ["asked again", escape(", ".join(asked))],
    ]
    rows += [[escape(what), escape(change)] for what, change in (lineage.changes or {}).items()]
    return html_table(["", ""], rows)


def stress_panel(context: RunContext) -> str | None:
    """The flags and effects of each stress test of the run, None when none was run."""
    if context.run_dir is None:
        return None
    reports = kept_stress(context.run_dir)
    if not reports:
        return None
    parts = []
    for report in reports:
        folder = Path(report.folder)
        flags = report.flags or ["no perturbation moved the judge beyond chance"]
        parts.append(
            f"<h4>{escape(report.node)}: {escape(folder.name)} ({report.rows} rows)</h4>"
            + '<ul class="card-flags">'
            + "".join(f"<li>{escape(line)}</li>" for line in flags)
            + "</ul>"
        )
        rows = [
            [
                escape(e.perturbation),
                escape(e.variant),
                escape(f"{e.node}.{e.field}"),
                str(e.n),
                f"{e.estimate:+.2f}" if e.kind == "shift" else f"{e.estimate:.0%} flip",
                "" if e.low is None or e.high is None else f"{e.low:.2f} … {e.high:.2f}",
                f"{e.p_holm:.3g}",
            ]
            for e in report.perturbations
        ]
        columns = ["perturbation", "variant", "output", "n", "effect", "95% CI", "Holm p"]
        parts.append(html_table(columns, rows, numeric=(3, 4, 6)))
    return f'<div class="judge-card">{"".join(parts)}</div>'


register_run_view("replay", "Replay", replay_panel)
register_run_view("stress", "Stress", stress_panel)
