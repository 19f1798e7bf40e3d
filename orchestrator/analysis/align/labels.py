"""Labels as align reads them: one truth per example (meta-eval's reader and consensus),
and answers and labels as numbers for the metrics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ...compute import wrong_answer
from ...errors import LabelError
from ..metaeval import annotated, label_truth, read_labels
from ..metaeval_stats import Bootstrap, codes
from .scoring import Kind

if TYPE_CHECKING:
    from ...graph import FieldSpec


def read_truth(
    path: Path, field: str, schema: FieldSpec | None = None, where: str = ""
) -> tuple[Kind, dict[str, Any], dict[str, dict[str, Any]]]:
    """The labels' kind, one truth per example id (several people merged into their
    consensus as meta-eval merges them) and each id's label record; with the compared
    field's `schema` (named `where` in messages), a label it cannot take is refused."""
    items = read_labels(path)
    if schema is not None:
        for item in items:
            _check_fits(path, item, schema, where or field)
    if any(x.get("aspect", x.get("dimension")) is not None or "pair" in x for x in items):
        raise LabelError(f"{path}: align compares one label per example (no aspects or pairs)")
    scored = {"score" in x for x in items}
    if len(scored) != 1:
        raise LabelError(f"{path}: mixes score and choice labels; align needs one kind")
    kind: Kind = "scores" if scored == {True} else "choices"
    level = "interval" if kind == "scores" else "nominal"
    merged = annotated({}, items, field, level, Bootstrap(resamples=1))[0]
    truth = {x["id"]: label_truth(x) for x in merged}
    # A shot states the label's reason when any of the example's lines gives one.
    reasons = {x["id"]: x["reason"] for x in items if x.get("reason") not in (None, "")}
    label_of = {x["id"]: {**x, "reason": reasons.get(x["id"])} for x in merged}
    return kind, truth, label_of


def _check_fits(path: Path, item: dict[str, Any], schema: FieldSpec, where: str) -> None:
    """A label outside the field's `enum`, or a score outside its `min`/`max`, is one the
    judge can never give: it would count as a disagreement on every configuration and move
    the verdict without a word, so it is refused."""
    value = label_truth(item)
    said = f"{path}: example {item['id']!r} is labelled {value!r}"
    if schema.enum is not None and all(wrong_answer(value, e, 0.0) for e in schema.enum):
        allowed = ", ".join(str(e) for e in schema.enum)
        raise LabelError(f"{said}, which {where} cannot say (its enum: {allowed})")
    if "score" not in item or not isinstance(value, int | float):
        return
    low, high = schema.min, schema.max
    if (low is not None and value < low) or (high is not None and value > high):
        if low is not None and high is not None:
            bounds = f"{low:g} to {high:g}"
        else:
            bounds = f"at least {low:g}" if low is not None else f"at most {high:g}"
        raise LabelError(f"{said}, outside the range of {where} ({bounds})")


class Coder:
    """Answers and labels as numbers: scores as they are, choices by one shared code table
    (an answer no label has gets a code of its own), NaN where there is none."""

    def __init__(self, kind: Kind, truth: Mapping[str, Any]) -> None:
        self.kind, self.truth = kind, truth
        self.table = codes(list(truth.values())) if kind == "choices" else {}

    def number(self, value: Any) -> float:
        """One answer or label as a number."""
        if value is None:
            return np.nan
        if self.kind == "scores":
            numeric = isinstance(value, int | float) and not isinstance(value, bool)
            return float(value) if numeric else np.nan
        return self.table.setdefault(str(value).strip().casefold(), float(len(self.table)))

    def answers(self, found: Mapping[str, Any], ids: Sequence[str]) -> np.ndarray:
        """The answers of `ids` (id → answer in `found`), NaN where an example has none."""
        return np.asarray([self.number(found.get(k)) for k in ids], dtype=float)

    def labels(self, ids: Sequence[str]) -> np.ndarray:
        """The labels of `ids`."""
        return np.asarray([self.number(self.truth[k]) for k in ids], dtype=float)
