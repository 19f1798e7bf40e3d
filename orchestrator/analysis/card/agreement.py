"""Agreement with people: the meta-eval statistics (correlations or accuracy, α, intervals,
the human ceiling) of the run against a labels file, kept whole in the card."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...compute import field_value
from ...errors import ConfigurationError, LabelError
from ...store import RunReader
from ..metaeval import _choice_field, meta_eval, read_labels
from .record import Agreement

SHOWN = 3  # ids named in a refusal


def _listed(ids: list[str]) -> str:
    return ", ".join(repr(i) for i in ids[:SHOWN]) + (", …" if len(ids) > SHOWN else "")


def _check(run_dir: Path, labels: Path, field: str | None) -> None:
    """Refuse what could only give empty tables: labels whose ids name no ok example of
    the run, or a compared field that no ok result has."""
    items = read_labels(labels)
    rows: dict[str, dict[str, Any]] = {
        line.id: line.outputs for line in RunReader(run_dir).latest_results() if line.status == "ok"
    }
    ids = list(dict.fromkeys(item["id"] for item in items))
    if not any(i in rows for i in ids):
        raise LabelError(
            f"{labels}: none of its {len(ids)} label id(s) ({_listed(ids)}) is an ok example "
            f"of {run_dir} ({_listed(sorted(rows)) or 'none ok'})"
        )
    wanted = {field or "score"} if any("score" in item for item in items) else set()
    if any("score" not in item for item in items):
        wanted.add(_choice_field(rows, field))
    outputs = sorted({name for row in rows.values() for name in row})
    for name in sorted(wanted):
        if not any(field_value(row, name) is not None for row in rows.values()):
            given = "" if field is not None else " (the default: name one with field=/--field)"
            raise ConfigurationError(
                f"field {name!r}{given}: no ok result of {run_dir} has it, so no label can be "
                f"compared (its outputs: {', '.join(outputs) or 'none'})"
            )


def agreement(
    run_dir: Path, labels: Path, field: str | None, seed: int = 0, cluster: str | None = None
) -> Agreement:
    """Meta-eval of the run against `labels` (it also writes RUN_DIR/meta_eval.json, as the
    `meta-eval` command does), its bootstrap over the clusters of `cluster` when given."""
    _check(run_dir, labels, field)
    statistics = meta_eval(run_dir, labels, field, seed=seed, cluster=cluster)
    return Agreement(labels=str(labels), field=field, statistics=statistics)
