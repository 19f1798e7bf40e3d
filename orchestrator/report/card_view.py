"""Run view "Judge card": the card's flags in plain words, then each of its tables (the same
cells `orchestrator judge-card` prints), built from the run folder's trace."""

from __future__ import annotations

import logging
from html import escape

from ..analysis import flag_lines, judge_card, sections
from ..errors import OrchestratorError
from .render import html_table
from .views import RunContext, register_run_view

log = logging.getLogger(__name__)


def card_panel(context: RunContext) -> str | None:
    """The judge card of the run, or None for a run without LLM calls in its trace."""
    if context.run_dir is None:
        return None
    try:
        card = judge_card(context.run_dir)
    except (OrchestratorError, OSError, ValueError) as exc:
        # A report still opens without the card; the reason goes to the log.
        log.warning("judge card of %s left out of the report: %s", context.run_dir, exc)
        return None
    if not card.reliability:
        return None
    lines = flag_lines(card) + [f"note: {note}" for note in card.notes]
    flags = "".join(f"<li>{escape(line)}</li>" for line in lines)
    parts = [f'<ul class="card-flags">{flags}</ul>']
    for section in sections(card):
        rows = [[escape(cell) for cell in row] for row in section.rows]
        parts.append(f"<h4>{escape(section.title)}</h4>" + html_table(section.columns, rows))
    return f'<div class="judge-card">{"".join(parts)}</div>'


register_run_view("judge_card", "Judge card", card_panel)
