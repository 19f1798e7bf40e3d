"""Estimates and label plans kept in their run folder (`estimate --keep`, `label-plan
--keep`), one JSON file each under `RUN/estimates/`, for the report's Estimates panel.

A kept file is named after what it estimates, so running the same estimate again replaces
its own earlier result; a file there that is not one of ours is never replaced."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from ..errors import RunFolderError
from ..store import write_out_file
from .estimate import Estimation
from .label_plan import LabelPlan

__all__ = ["ESTIMATES", "keep_estimate", "keep_plan", "kept_estimates", "kept_plans"]

log = logging.getLogger(__name__)
Kept = TypeVar("Kept", Estimation, LabelPlan)

ESTIMATES = "estimates"  # the folder of a run that holds its kept estimates and plans
PLAN_PREFIX = "plan."


def _safe(name: str) -> str:
    """A file-name part from a field or side (a path separator or space becomes `_`)."""
    return re.sub(r"[^\w.-]+", "_", name).strip(".") or "_"


def estimate_file(found: Estimation) -> Path:
    """Where `found` is kept: its (first) run's `estimates/FIELD[.win-SIDE|.vs-RUN_B].json`."""
    stem = _safe(found.field)
    if stem.startswith(PLAN_PREFIX):
        stem = "_" + stem  # the plans' names stay theirs
    if found.win is not None:
        stem += f".win-{_safe(found.win)}"
    if found.other_run is not None:
        stem += f".vs-{_safe(Path(found.other_run).name)}"
    return Path(found.run) / ESTIMATES / f"{stem}.json"


def _reads_as(model: type[BaseModel]) -> Callable[[Path], bool]:
    def ours(path: Path) -> bool:
        try:
            model.model_validate_json(path.read_bytes())
        except (OSError, ValidationError):
            return False
        return True

    return ours


def _keep(record: BaseModel, path: Path, what: str) -> Path:
    """Write `record` to `path`, replacing only a file that reads as the same kind."""
    if path.is_dir() or (path.exists() and not _reads_as(type(record))(path)):
        raise RunFolderError(
            f"--keep: {path} is not {what}, so it was left as it is and nothing was kept; "
            "move it away to keep this one"
        )
    write_out_file(path, record.model_dump_json(indent=2).encode() + b"\n")
    return path


def keep_estimate(found: Estimation) -> Estimation:
    """Keep `found` in its run folder (`estimate_file`); the record says where (`kept`)."""
    path = estimate_file(found)
    kept = found.model_copy(update={"kept": str(path)})
    _keep(kept, path, "an estimate kept by `estimate --keep`")
    return kept


def keep_plan(plan: LabelPlan) -> LabelPlan:
    """Keep `plan` (its lines and summary) as `RUN/estimates/plan.FIELD.json`."""
    path = Path(plan.run) / ESTIMATES / f"{PLAN_PREFIX}{_safe(plan.field)}.json"
    kept = plan.model_copy(update={"kept": str(path)})
    _keep(kept, path, "a label plan kept by `label-plan --keep`")
    return kept


def _read(run_dir: Path, model: type[Kept], plans: bool) -> list[Kept]:
    """The kept records of one kind (plans or estimates), by file name; a file that does
    not read is logged and left out."""
    found = []
    for path in sorted((run_dir / ESTIMATES).glob("*.json")):
        if path.name.startswith(PLAN_PREFIX) != plans:
            continue
        try:
            found.append(model.model_validate_json(path.read_bytes()))
        except (OSError, ValidationError) as exc:
            log.warning("%s left out: %s", path, exc)
    return found


def kept_estimates(run_dir: Path) -> list[Estimation]:
    """The estimates kept in a run folder (`estimate --keep`)."""
    return _read(run_dir, Estimation, plans=False)


def kept_plans(run_dir: Path) -> list[LabelPlan]:
    """The label plans kept in a run folder (`label-plan --keep`)."""
    return _read(run_dir, LabelPlan, plans=True)
