"""Results per group: a run's rows grouped by one row field (an output, else an input such
as `language`), with each numeric output's mean and confidence interval per group.

This is the one grouping mechanism of the package. `summarize --by`, `compare --by`, the
report's per-language panel and the distilled scorer's per-language accuracy all go
through it, and a cluster bootstrap (`--cluster FIELD`) needs the same two pieces: a key per
example (`keys_by_id`) and the examples of each key (`ids_by_group`).
"""

from __future__ import annotations

import logging
import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..errors import ConfigurationError
from ..stats import mean_interval, wilson
from ..store import ResultLine

logger = logging.getLogger(__name__)

# The fields a result line carries about itself, never a group or a measurement.
_OWN_FIELDS = ("id", "status", "error", "row")

GroupKey = Callable[[ResultLine], str | None]
Method = Literal["bca", "percentile", "wilson"]


class Estimate(BaseModel):
    """One output's mean over a group's rows, with its confidence interval.

    A 0/1 output (a proportion, such as accuracy) gets the Wilson score interval, which stays
    inside [0, 1] and is not degenerate when every row is right; any other numbers get the
    seeded bootstrap interval `compare` uses (BCa, percentile where BCa is undefined), none
    below two rows."""

    output: str
    n: int
    mean: float | None = None
    low: float | None = None
    high: float | None = None
    level: float = 0.95
    method: Method | None = None


class Group(BaseModel):
    """The rows that share one value of the grouping field, and their estimates."""

    key: str
    n: int  # ok rows in the group
    estimates: list[Estimate] = Field(default_factory=list)

    def estimate(self, output: str) -> Estimate:
        """This group's estimate of one output (KeyError when it has none)."""
        for found in self.estimates:
            if found.output == output:
                return found
        raise KeyError(output)


class Grouping(BaseModel):
    """A run's ok rows grouped by `by`: one `Group` per value, in sorted order."""

    by: str
    source: Literal["output", "input"]  # where the field was found
    groups: list[Group] = Field(default_factory=list)
    ungrouped: int = 0  # ok rows that carry no value of the field
    level: float = 0.95
    resamples: int = 2000
    seed: int = 0

    def group(self, key: str) -> Group:
        """The group of one value of the field (KeyError when no row has it)."""
        for found in self.groups:
            if found.key == key:
                return found
        raise KeyError(key)


def _is_number(value: Any) -> bool:
    return (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def key_text(value: Any) -> str | None:
    """A field's value as a group key: text as it is, true/false in lower case, a whole
    number without `.0`; None (no group) for a missing or empty value, a list or an object."""
    if value is None or isinstance(value, dict | list):
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if value.is_integer():
            return str(int(value))
    text = str(value).strip()
    return text or None


def group_key(by: str, inputs: Mapping[str, Mapping[str, Any]] | None = None) -> GroupKey:
    """The key of a result line under field `by`: its output of that (dotted) name, else its
    input of that name in `inputs` (example id → the inputs the run read)."""

    def key(line: ResultLine) -> str | None:
        flat = line.flat()
        if by in flat and by not in _OWN_FIELDS:
            found = key_text(flat[by])
            if found is not None:
                return found
        if inputs is not None:
            row = inputs.get(line.id)
            if row is not None:
                return key_text(row.get(by))
        return None

    return key


def keys_by_id(
    lines: Iterable[ResultLine], by: str, inputs: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, str]:
    """Example id → its group key, for the lines that carry a value of `by`."""
    key = group_key(by, inputs)
    found: dict[str, str] = {}
    for line in lines:
        value = key(line)
        if value is not None:
            found[line.id] = value
    return found


def ids_by_group(keys: Mapping[str, str]) -> dict[str, list[str]]:
    """Group key → its example ids, both sorted, so seeded statistics over a group do not
    depend on the order a run's examples finished in."""
    groups: dict[str, list[str]] = {}
    for example, value in keys.items():
        groups.setdefault(value, []).append(example)
    return {value: sorted(groups[value]) for value in sorted(groups)}


def cluster_keys(
    lines: Iterable[ResultLine],
    field: str,
    inputs: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, str]:
    """Example id → its cluster for `--cluster FIELD` (the value of `field`, as `keys_by_id`
    finds it); raises ConfigurationError naming the fields there are when no line has one,
    since a mistyped field would otherwise leave every example a cluster of its own."""
    listed = list(lines)
    keys = keys_by_id(listed, field, inputs)
    if not keys:
        fields = sorted({n for line in listed for n in line.flat() if n not in _OWN_FIELDS})
        given = sorted({str(n) for row in (inputs or {}).values() for n in row})
        raise ConfigurationError(
            f"no field {field!r} to cluster by in any example; outputs: "
            f"{', '.join(fields) or 'none'}" + (f"; inputs: {', '.join(given)}" if given else "")
        )
    return keys


def row_cluster_keys(
    rows: Mapping[str, Mapping[str, Any]], ids: Sequence[str], field: str
) -> dict[str, str]:
    """Example id → its cluster from the data rows themselves, for splits made before the
    judge has run (so a cluster cannot be an output); ConfigurationError naming the fields
    the rows have when none of `ids` has a value of `field`."""
    found = {
        example: value
        for example in ids
        if (value := key_text((rows.get(example) or {}).get(field))) is not None
    }
    if not found:
        given = sorted({str(n) for example in ids for n in rows.get(example) or {}})
        raise ConfigurationError(
            f"no field {field!r} to cluster by in any labelled example's data row (the split "
            f"keeps each cluster on one side, so it must be known before the judge runs); "
            f"fields: {', '.join(given) or 'none'}"
        )
    return found


def cluster_labels(ids: Sequence[str], keys: Mapping[str, str]) -> list[str]:
    """Each example's cluster label in the order of `ids`; an example without a value of
    the field is a cluster of its own (its id, marked so it cannot meet a real value)."""
    return [keys.get(example, f"\0{example}") for example in ids]


def rows_by_group(
    lines: Iterable[ResultLine], by: str, inputs: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, list[ResultLine]]:
    """Group key → its result lines, in id order; lines without a value are left out."""
    by_id = {line.id: line for line in lines}
    keys = keys_by_id(by_id.values(), by, inputs)
    return {value: [by_id[i] for i in ids] for value, ids in ids_by_group(keys).items()}


def is_proportion(values: Iterable[float]) -> bool:
    """Every value is 0 or 1: the mean is a share of rows."""
    return all(v in (0.0, 1.0) for v in values)


def estimate(
    output: str,
    values: Sequence[float],
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    proportion: bool | None = None,
) -> Estimate:
    """The mean of `values` with its interval: Wilson for a proportion (`proportion`, by
    default: every value 0 or 1), else the bootstrap."""
    n = len(values)
    found = Estimate(output=output, n=n, level=level)
    if n == 0:
        return found
    found.mean = sum(values) / n
    if proportion is None:
        proportion = is_proportion(values)
    if proportion:
        # Wilson is defined from one row on: a single right answer is [0.21, 1] at 95%.
        share = wilson(sum(values), n, level)
        found.low, found.high = share.low, share.high
        found.method = "wilson"
        return found
    if n < 2:
        return found
    # BCa, or the percentile interval where BCa is undefined (every resample on one side).
    found.method = "bca"
    _, interval = mean_interval(values, level, resamples, seed, "bca")
    if interval is None:
        found.method = "percentile"
        _, interval = mean_interval(values, level, resamples, seed, "percentile")
    if interval is not None:
        found.low, found.high = interval.low, interval.high
    return found


def numeric_outputs(lines: Iterable[ResultLine], skip: Sequence[str] = ()) -> list[str]:
    """The outputs (dotted names) that hold a number in some ok line and nothing but
    numbers or nothing in the others, in the order the lines first show them."""
    seen: dict[str, bool] = {}
    for line in lines:
        if line.status != "ok":
            continue
        for name, value in line.flat().items():
            if name in _OWN_FIELDS or name in skip or value is None:
                continue
            if isinstance(value, float) and math.isnan(value):
                continue  # a value marked not available, as missing as None
            seen[name] = seen.get(name, True) and _is_number(value)
    return [name for name, numeric in seen.items() if numeric]


def group_lines(
    lines: Sequence[ResultLine],
    by: str,
    inputs: Mapping[str, Mapping[str, Any]] | None = None,
    outputs: Sequence[str] | None = None,
    *,
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Grouping:
    """Group the ok lines by `by` and estimate every numeric output (or `outputs`) per group.

    Raises ConfigurationError when no ok line carries the field, naming the fields there are.
    """
    ok = [line for line in lines if line.status == "ok"]
    keys = keys_by_id(ok, by, inputs)
    if not keys:
        fields = sorted({n for line in ok for n in line.flat() if n not in _OWN_FIELDS})
        given = sorted({n for row in (inputs or {}).values() for n in row})
        raise ConfigurationError(
            f"no row has a value of {by!r} to group by; outputs: {', '.join(fields) or 'none'}"
            + (f"; inputs: {', '.join(given)}" if given else "")
        )
    from_outputs = any(by in line.flat() for line in ok)
    names = list(outputs) if outputs is not None else numeric_outputs(ok, skip=(by,))
    by_id = {line.id: line.flat() for line in ok}
    # One interval method per output across its groups: a 0–4 label that happens to be 0/1
    # in one language is not a proportion there and a mean elsewhere.
    shares = {
        name: is_proportion(float(f[name]) for f in by_id.values() if _is_number(f.get(name)))
        for name in names
    }
    groups = []
    for value, ids in ids_by_group(keys).items():
        estimates = []
        for name in names:
            present = [float(by_id[i][name]) for i in ids if _is_number(by_id[i].get(name))]
            estimates.append(estimate(name, present, level, resamples, seed, shares[name]))
        groups.append(Group(key=value, n=len(ids), estimates=estimates))
    return Grouping(
        by=by,
        source="output" if from_outputs else "input",
        groups=groups,
        ungrouped=len(ok) - len(keys),
        level=level,
        resamples=resamples,
        seed=seed,
    )


def run_inputs(folder: Path) -> dict[str, dict[str, Any]] | None:
    """Example id → the inputs a run folder kept (None when it kept none)."""
    from ..store import RunReader

    reader = RunReader(folder)
    if not reader.has_inputs:
        return None
    return {line.id: line.data for line in reader.inputs() if line.data is not None}


def summarize_groups(
    run_dir: Path | str,
    by: str,
    outputs: Sequence[str] | None = None,
    *,
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Grouping:
    """A finished run's results per value of `by` (an output, else an input the run kept)."""
    from ..store import RunReader

    reader = RunReader(run_dir)
    if not reader.has_results:
        raise ConfigurationError(f"{run_dir} has no results.jsonl; is it a run folder?")
    return group_lines(
        reader.latest_results(),
        by,
        run_inputs(reader.path),
        outputs,
        level=level,
        resamples=resamples,
        seed=seed,
    )


def summarize(
    folder: Path | str,
    graph: Path | str | None = None,
    out: Path | str | None = None,
    *,
    trust: bool = False,
    by: str | None = None,
) -> dict[str, Any]:
    """Recompute a finished run's aggregates from its result lines, with no request; with
    `by`, the returned summary also holds `groups`: the results per value of that field.

    `graph` is the run's graph with its aggregates fixed (default: the run's snapshot); the
    summary replaces RUN_DIR/summary.json, or goes to `out`; `trust=True` lets a graph
    import its own modules (`session.summary.summarize` does all of this). The per-group
    results (`Grouping.model_dump()`) are returned only: summary.json's extra keys are the
    graph's aggregates, and a breakdown is not one.
    """
    from ..session import summarize as summarize_run

    summary = summarize_run(folder, graph, out, trust=trust)
    if by is not None:
        if "groups" in summary:
            logger.warning("the aggregate 'groups' is replaced by the results per %s", by)
        summary["groups"] = summarize_groups(folder, by).model_dump()
    return summary


def estimate_cells(found: Estimate, digits: int = 3) -> list[str]:
    """An estimate's cells as tables print them: n, mean, the interval ("—" for none)."""
    from .comparison import format_number

    interval = "—"
    if found.low is not None and found.high is not None:
        interval = f"{format_number(found.low, digits)}, {format_number(found.high, digits)}"
    return [str(found.n), format_number(found.mean, digits), interval]
