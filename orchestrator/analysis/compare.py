"""`compare`: runs of one graph over the same examples, matched by example id, compared
output by output and pair by pair (a system comparison or a judge comparison)."""

from __future__ import annotations

import logging
import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any, Protocol

from ..compute import bradley_terry, cohen_kappa, length_controlled_win_rate
from ..errors import ConfigurationError, RunFolderError
from ..stats import (
    EXACT_UP_TO,
    PERMUTATIONS,
    SignFlip,
    SignFlipInterval,
    cluster_sign_flip,
    cohens_dz,
    finite,
    holm,
    kendall_tau_b,
    pearson,
    sign_flip_interval,
    sign_flip_test,
    spearman,
)
from ..store import Manifest, ResultLine
from .comparison import (
    Comparison,
    Correlation,
    GroupComparison,
    Interval,
    Kind,
    LabelAgreement,
    LabelComparison,
    OutputComparison,
    PairDifference,
    RunInfo,
    StyleControl,
)
from .groups import cluster_labels, ids_by_group, keys_by_id


class RunResult(Protocol):
    """A run held in memory, as `orc.run` returns it (api/'s `RunResult`, above analysis):
    what the analyses read of it."""

    @property
    def folder(self) -> Path | None: ...

    @property
    def results(self) -> list[ResultLine]: ...

    @property
    def manifest(self) -> Manifest: ...


log = logging.getLogger(__name__)

# A string or boolean output with at most this many distinct values is a label; an integer
# one with at most MAX_NUMERIC_LABELS (a 1–10 score), since κ over more values says little.
MAX_LABELS = 20
MAX_NUMERIC_LABELS = 10
_VERDICT_NAMES = ("winner", "verdict", "choice", "preferred", "preference")
_NO_SIDE = {"tie", "draw", "equal", "none", "both", "neither"}
_FIELDS = ("id", "status", "error")
# Compared scores are squared (sd, d_z, correlations) and summed over every example: past
# this size that leaves the float range and the statistics come out inf or nan. A score
# this large is a fault of the run, not a finding, so it is refused rather than compared.
LARGEST = 1e150


@dataclass
class _Run:
    info: RunInfo
    lines: dict[str, ResultLine]  # example id → its latest line
    inputs: dict[str, Any] | None  # example id → inputs as read, None when not kept


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _model(manifest: Manifest) -> str | None:
    if manifest.model:
        return manifest.model
    components = manifest.run_key.components if manifest.run_key else {}
    models = sorted({v for k, v in components.items() if k.startswith("model ")})
    return ", ".join(models) or None


def _inputs(folder: Path | None) -> dict[str, Any] | None:
    from ..store import RunReader

    if folder is None or not RunReader(folder).has_inputs:
        return None
    return {line.id: line.data for line in RunReader(folder).inputs()}


def load_run(run: str | Path | RunResult, position: int) -> _Run:
    """A run folder or an in-memory RunResult as its latest line per example."""
    from ..store import RunReader

    if isinstance(run, str | Path):
        folder: Path | None = Path(run)
        reader = RunReader(run)
        if not reader.has_results:
            raise ConfigurationError(f"{run} has no results.jsonl; is it a run folder?")
        lines, manifest = reader.latest_results(), reader.manifest
    elif hasattr(run, "results") and hasattr(run, "manifest"):
        folder, lines, manifest = run.folder, list(run.results), run.manifest
    else:
        raise ConfigurationError(
            f"run {position + 1} is a {type(run).__name__}; pass a run folder or a RunResult"
        )
    info = RunInfo(
        label=folder.name if folder is not None and folder.name else f"run{position + 1}",
        path=None if folder is None else str(folder),
        graph=manifest.graph.name,
        graph_hash=manifest.graph.hash,
        model=_model(manifest),
        dataset_hash=manifest.dataset.hash,
        examples=len(lines),
        ok=sum(line.status == "ok" for line in lines),
        failed=[line.id for line in lines if line.status == "failed"],
        abstained=[line.id for line in lines if line.status == "abstained"],
    )
    return _Run(info, {line.id: line for line in lines}, _inputs(folder))


def _unique_labels(runs: list[_Run]) -> None:
    """Labels tell the runs apart in tables: a repeated folder name gives way to its path,
    then to its position."""
    for attempt in ("path", "position"):
        seen: dict[str, int] = {}
        for run in runs:
            seen[run.info.label] = seen.get(run.info.label, 0) + 1
        for position, run in enumerate(runs):
            if seen[run.info.label] > 1:
                if attempt == "path" and run.info.path:
                    run.info.label = run.info.path
                elif attempt == "position":
                    run.info.label = f"{run.info.label}#{position + 1}"


def _check_graphs(runs: list[_Run], notes: list[str]) -> None:
    names = {run.info.graph for run in runs if run.info.graph}
    if len(names) > 1:
        which = ", ".join(f"{run.info.label} runs {run.info.graph!r}" for run in runs)
        raise ConfigurationError(f"runs of different graphs cannot be compared: {which}")
    hashes = {run.info.graph_hash for run in runs if run.info.graph_hash}
    if len(hashes) > 1:
        message = (
            "the runs' graphs share a name but not a hash (edited between runs?): "
            + ", ".join(f"{run.info.label} {run.info.graph_hash}" for run in runs)
        )
        log.warning(message)
        notes.append(message)


def _detect_kind(runs: list[_Run]) -> tuple[Kind, str]:
    """Same inputs → the judging differs (judge); different inputs → the outputs being
    judged differ (system). Inputs are compared per example where the folders keep them."""
    first = runs[0]
    if all(run.inputs is not None for run in runs):
        for run in runs[1:]:
            assert first.inputs is not None and run.inputs is not None
            for key in first.inputs:
                if key not in run.inputs:
                    continue
                if first.inputs[key] != run.inputs[key]:
                    return "system", (
                        f"inputs differ (example {key!r} in {first.info.label} and "
                        f"{run.info.label}): the outputs being judged differ"
                    )
        reason = "same inputs for every shared example"
    else:
        hashes = [run.info.dataset_hash for run in runs]
        if None in hashes:
            return "system", "inputs not recorded for every run; assumed (pass kind='judge')"
        if len(set(hashes)) > 1:
            return "system", "the datasets differ (dataset hashes): the outputs judged differ"
        reason = "same dataset (hash)"
    models = [run.info.model or "?" for run in runs]
    judged = " vs ".join(models) if len(set(models)) > 1 else f"judge {models[0]}"
    return "judge", f"{reason}: the judging differs ({judged})"


def ok_values(runs: list[_Run]) -> list[dict[str, dict[str, Any]]]:
    """Per run: example id → its flattened outputs, ok lines only."""
    out = []
    for run in runs:
        flat = {}
        for key, line in run.lines.items():
            if line.status == "ok":
                flat[key] = {k: v for k, v in line.flat().items() if k not in _FIELDS}
        out.append(flat)
    return out


def check_numbers(
    runs: list[_Run], values: list[dict[str, dict[str, Any]]], names: Sequence[str]
) -> None:
    """Refuse a compared output's value that is infinite or too large to compute with
    (`LARGEST`), naming the run folder, the output and the example; None and NaN stay
    missing values."""
    for run, flats in zip(runs, values, strict=True):
        for name in names:
            for key in sorted(flats):
                value = flats[key].get(name)
                if value is None or not _is_number(value) or _missing(value):
                    continue
                if abs(value) <= LARGEST:
                    continue
                raise ConfigurationError(
                    f"{run.info.path or run.info.label}: output {name!r} of example {key!r} "
                    f"is {value!r}, which the statistics cannot compute with (a compared "
                    f"score must be finite and at most {LARGEST:g} in size)"
                )


def _shared_names(values: list[dict[str, dict[str, Any]]]) -> list[str]:
    """Output names present in every run, in the order the first run has them."""
    per_run = [{name for flat in run.values() for name in flat} for run in values]
    first = list(dict.fromkeys(name for flat in values[0].values() for name in flat))
    return [name for name in first if all(name in names for names in per_run)]


def _present(values: list[dict[str, dict[str, Any]]], name: str) -> list[Any]:
    return [v for run in _per_run(values, name) for v in run]


def _per_run(values: list[dict[str, dict[str, Any]]], name: str) -> list[list[Any]]:
    """Each run's present values of one output."""
    return [
        [flat[name] for flat in run.values() if name in flat and not _missing(flat[name])]
        for run in values
    ]


def _is_numeric(seen: list[Any]) -> bool:
    return bool(seen) and all(_is_number(v) for v in seen)


def _is_label(per_run: list[list[Any]]) -> bool:
    """Few distinct scalar values, one repeated within a run (free text, one per example,
    is not): a label."""
    seen = [v for run in per_run for v in run]
    if not seen or any(isinstance(v, dict | list) for v in seen):
        return False
    if all(_is_number(v) for v in seen):
        if not all(float(v).is_integer() for v in seen):
            return False
        limit = MAX_NUMERIC_LABELS
    else:
        limit = MAX_LABELS
    repeats = any(len({_label(v) for v in run}) < len(run) for run in per_run)
    return repeats and len({_label(v) for v in seen}) <= limit


def _label(value: Any) -> Any:
    # cohen_kappa takes strings and numbers; true/false become text, 3.0 the label 3.
    if isinstance(value, bool):
        return str(value).lower()
    if _is_number(value) and float(value).is_integer():
        return int(value)
    return value


def _select(
    names: list[str], values: list[dict[str, dict[str, Any]]], wanted: Sequence[str] | None
) -> list[str]:
    numeric = [name for name in names if _is_numeric(_present(values, name))]
    if wanted is None:
        return numeric
    unknown = [name for name in wanted if name not in numeric]
    if unknown:
        raise ConfigurationError(
            f"no numeric output {unknown[0]!r} in every run; numeric outputs shared by the "
            f"runs: {', '.join(numeric) or 'none'}"
        )
    return list(dict.fromkeys(wanted))


def _select_labels(
    names: list[str], values: list[dict[str, dict[str, Any]]], wanted: Sequence[str] | None
) -> list[str]:
    if wanted is None:
        return [name for name in names if _is_label(_per_run(values, name))]
    for name in wanted:
        seen = _present(values, name)
        if name not in names or not seen or any(isinstance(v, dict | list) for v in seen):
            raise ConfigurationError(
                f"no label output {name!r} in every run; outputs shared by the runs: "
                f"{', '.join(names) or 'none'}"
            )
    return list(dict.fromkeys(wanted))


def matched_by_id(
    values: list[dict[str, dict[str, Any]]], name: str, i: int, j: int
) -> list[tuple[str, Any, Any]]:
    """(example id, run i's value, run j's value) of one output on the examples where both
    runs have one, by id: a run's lines are in the order its examples finished, and the
    seeded bootstrap must not give another interval for another finishing order."""
    found = []
    for key, flat in sorted(values[i].items()):
        other = values[j].get(key)
        if other is None or _missing(flat.get(name)) or _missing(other.get(name)):
            continue
        found.append((key, flat[name], other[name]))
    return found


def _matched(
    values: list[dict[str, dict[str, Any]]], name: str, i: int, j: int
) -> tuple[list[Any], list[Any]]:
    """The two runs' values of one output on the examples where both have one."""
    found = matched_by_id(values, name, i, j)
    return [a for _, a, _ in found], [b for _, _, b in found]


@dataclass(frozen=True)
class _Settings:
    level: float
    resamples: int
    permutations: int
    seed: int
    judge: bool
    clusters: Mapping[str, str] | None = None  # example id → cluster (`cluster=`)


def _sign_flip(
    differences: list[float], ids: list[str], s: _Settings
) -> tuple[SignFlip, SignFlipInterval, int | None]:
    """The sign-flip test and the interval inverting it, over examples or, with
    `cluster=`, over whole clusters; and how many clusters there were."""
    if s.clusters is not None:
        found = cluster_sign_flip(
            differences, cluster_labels(ids, s.clusters), s.level, s.permutations, s.seed
        )
        return found.test, found.interval, found.clusters
    # The interval inverts the test below with the same sign vectors, so it excludes 0
    # exactly when p < 1 − level (a bootstrap interval disagreed with it at small n).
    interval = sign_flip_interval(differences, s.level, s.permutations, s.seed)
    # Where ties are too many for the interval to enumerate, the test draws too: with the
    # same draws the two still agree.
    exact_up_to = EXACT_UP_TO if interval.method == "exact" else 0
    test = sign_flip_test(differences, s.permutations, s.seed, exact_up_to)
    return test, interval, None


def _win_tie_loss(a: list[float], b: list[float]) -> tuple[int, int, int]:
    """Examples where b scored higher, the same, and lower than a."""
    wins = sum(y > x for x, y in zip(a, b, strict=True))
    ties = sum(y == x for x, y in zip(a, b, strict=True))
    return wins, ties, len(a) - wins - ties


def _pair(
    a: list[float],
    b: list[float],
    labels: tuple[str, str],
    s: _Settings,
    ids: list[str] | None = None,
) -> PairDifference:
    """The paired statistics of b against a (already matched by example, `ids` in order)."""
    n = len(a)
    found = PairDifference(run_a=labels[0], run_b=labels[1], n=n)
    if n == 0:
        return found
    differences = [y - x for x, y in zip(a, b, strict=True)]
    found.mean_a, found.mean_b = sum(a) / n, sum(b) / n
    found.difference = sum(differences) / n
    found.wins, found.ties, found.losses = _win_tie_loss(a, b)
    if n < 2:
        return found
    test, interval, found.clusters = _sign_flip(differences, ids or [], s)
    if interval.low is not None and interval.high is not None:
        found.ci = Interval(
            low=interval.low,
            high=interval.high,
            level=s.level,
            method="sign-flip",
            draws=interval.method,
            resamples=interval.count,
            seed=s.seed,
        )
    found.p, found.p_method, found.p_count = test.p, test.method, test.count
    found.effect_size = cohens_dz(differences)
    if s.judge:
        found.agreement = Correlation(
            pearson=finite(pearson(a, b)),
            spearman=finite(spearman(a, b)),
            kendall_tau_b=finite(kendall_tau_b(a, b)),
        )
    return found


def _numeric(
    name: str, runs: list[_Run], values: list[dict[str, dict[str, Any]]], s: _Settings
) -> OutputComparison:
    means: dict[str, float | None] = {}
    counts: dict[str, int] = {}
    for run, flats in zip(runs, values, strict=True):
        present = [float(f[name]) for f in flats.values() if not _missing(f.get(name))]
        means[run.info.label] = sum(present) / len(present) if present else None
        counts[run.info.label] = len(present)
    pairs = []
    for i, j in combinations(range(len(runs)), 2):
        matched = matched_by_id(values, name, i, j)
        fa, fb = [float(x) for _, x, _ in matched], [float(y) for _, _, y in matched]
        ids = [key for key, _, _ in matched]
        pairs.append(_pair(fa, fb, (runs[i].info.label, runs[j].info.label), s, ids))
    tested = [pair for pair in pairs if pair.p is not None]
    for pair, adjusted in zip(tested, holm([pair.p or 0.0 for pair in tested]), strict=True):
        pair.p_holm = adjusted
    return OutputComparison(output=name, means=means, counts=counts, pairs=pairs)


def _group_keys(
    runs: list[_Run], by: str, notes: list[str], purpose: str = "group by"
) -> dict[str, str]:
    """Example id → its value of `by`, from the first run that has one; runs that put an
    example in different groups are noted (the first run's group is used). `purpose`
    (group by, cluster by) words the error when no example has the field."""
    keys: dict[str, str] = {}
    disagree = []
    for run in runs:
        for key, value in keys_by_id(run.lines.values(), by, run.inputs).items():
            if key not in keys:
                keys[key] = value
            elif keys[key] != value:
                disagree.append(key)
    if not keys:
        raise ConfigurationError(
            f"no example has a value of {by!r} (an output or a kept input) to {purpose}"
        )
    if disagree:
        moved = sorted(set(disagree))
        shown = ", ".join(moved[:3]) + (", …" if len(moved) > 3 else "")
        count = f"{len(moved)} example" + ("s" if len(moved) > 1 else "")
        notes.append(
            f"the runs give {count} different values of {by!r} ({shown}); each is "
            f"grouped by {runs[0].info.label}'s value where it has one"
        )
    return keys


def _by_group(
    by: str,
    runs: list[_Run],
    values: list[dict[str, dict[str, Any]]],
    numeric: list[str],
    s: _Settings,
    notes: list[str],
) -> tuple[list[GroupComparison], int]:
    """Every numeric output compared within each group of `by`, and how many examples were
    in no group; Holm adjusts each output's p-values over its pairs in every group."""
    keys = _group_keys(runs, by, notes)
    groups = []
    for key, ids in ids_by_group(keys).items():
        members = set(ids)
        subset = [{i: flat for i, flat in run.items() if i in members} for run in values]
        common = set.intersection(*(set(flats) for flats in subset))
        compared = [_numeric(name, runs, subset, s) for name in numeric]
        groups.append(GroupComparison(key=key, n=len(common), outputs=compared))
    for name in numeric:
        tested = [
            pair for group in groups for pair in group.output(name).pairs if pair.p is not None
        ]
        for pair, adjusted in zip(tested, holm([pair.p or 0.0 for pair in tested]), strict=True):
            pair.p_holm = adjusted
    every = {key for run in runs for key in run.lines}
    return groups, len(every - set(keys))


def _is_verdict(name: str, seen: Iterable[Any]) -> bool:
    """A pairwise winner: named like one, or labelled a / b (/ tie)."""
    last = name.rsplit(".", 1)[-1].lower()
    if any(last.startswith(word) for word in _VERDICT_NAMES):
        return True
    texts = {str(v).lower() for v in seen}
    return {"a", "b"} <= texts and texts <= {"a", "b"} | _NO_SIDE


def _labels(
    name: str, runs: list[_Run], values: list[dict[str, dict[str, Any]]]
) -> LabelComparison:
    seen = [_label(v) for v in _present(values, name)]
    verdict = _is_verdict(name, seen)
    pairs = []
    for i, j in combinations(range(len(runs)), 2):
        raw_a, raw_b = _matched(values, name, i, j)
        a, b = [_label(v) for v in raw_a], [_label(v) for v in raw_b]
        found = LabelAgreement(run_a=runs[i].info.label, run_b=runs[j].info.label, n=len(a))
        if a:
            found.agreement = sum(x == y for x, y in zip(a, b, strict=True)) / len(a)
            found.kappa = cohen_kappa(a, b)
            if all(_is_number(v) for v in a + b):
                found.kappa_quadratic = cohen_kappa(a, b, weights="quadratic")
        if verdict and a:
            sided = [
                (x, y)
                for x, y in zip(a, b, strict=True)
                if str(x).lower() not in _NO_SIDE and str(y).lower() not in _NO_SIDE
            ]
            found.flips = sum(x != y for x, y in sided)
            found.flip_rate = found.flips / len(sided) if sided else None
        pairs.append(found)
    shown = sorted({str(v) for v in seen}, key=lambda v: (len(v), v))
    return LabelComparison(output=name, values=shown, verdict=verdict, pairs=pairs)


# Fewer bootstrap draws than `ratings` takes by default: compare shows these beside its
# own tests, and 200 replicates put a 95% interval's ends within a point or two.
STYLE_REPLICATES = 200


def _style_control(
    runs: list[_Run], seed: int, level: float, notes: list[str]
) -> list[StyleControl]:
    """Each pairwise run's Bradley–Terry ratings and win rates, plain and style-controlled;
    none for a run without battle records, a note for one whose battles lack style."""
    from .ratings import gather_battles

    found = []
    for run in runs:
        if run.info.path is None:
            continue
        try:
            battles = gather_battles([run.info.path])
        except (ConfigurationError, RunFolderError):
            continue  # not a pairwise run: nothing to rate
        try:
            fitted = bradley_terry(
                battles.matches, replicates=STYLE_REPLICATES, seed=seed, level=level, style=True
            )
            controlled = length_controlled_win_rate(
                battles.matches, replicates=STYLE_REPLICATES, seed=seed, level=level
            )
        except ValueError as exc:  # battles without style records (an older graph)
            notes.append(f"{run.info.label}: no style-controlled ratings ({exc})")
            continue
        found.append(
            StyleControl(
                run=run.info.label,
                matches=len(battles.matches),
                bradley_terry=fitted,
                length_controlled=controlled,
            )
        )
    return found


def compare(
    *runs: str | Path | RunResult,
    outputs: Sequence[str] | None = None,
    labels: Sequence[str] | None = None,
    kind: Kind | None = None,
    resamples: int = 2000,
    permutations: int = PERMUTATIONS,
    seed: int = 0,
    level: float = 0.95,
    by: str | None = None,
    cluster: str | None = None,
) -> Comparison:
    """Compare runs of one graph example by example: every numeric output's paired
    differences between each two runs and, for a judge comparison, how the runs agree.

    `runs` are run folders or `RunResult`s; `outputs` (default: every numeric output) and
    `labels` (default: detected) pick what is compared; `kind` overrides the detection of
    judge vs system comparison. `by` names a row field (an output, or an input the runs
    kept, such as `language`): the numeric outputs are then also compared within each of
    its values (`groups`). `cluster` names the row field examples are nested in (a user
    id): the test and its interval then flip the signs of whole clusters (see
    `stats.cluster_sign_flip`), as nested examples are not independent. The interval
    inverts the sign-flip test (see `stats.sign_flip_interval`), so `resamples` no longer
    shapes it; it is still checked and recorded, for callers that pass it. Raises
    ConfigurationError for runs that cannot be compared.
    """
    if len(runs) < 2:
        raise ConfigurationError(f"compare needs at least two runs, got {len(runs)}")
    if kind not in (None, "judge", "system"):
        raise ConfigurationError(f"kind must be 'judge' or 'system', got {kind!r}")
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise ConfigurationError(f"resamples must be a positive integer, got {resamples!r}")
    if isinstance(permutations, bool) or not isinstance(permutations, int) or permutations < 1:
        raise ConfigurationError(f"permutations must be a positive integer, got {permutations!r}")
    if not 0.0 < level < 1.0:
        raise ConfigurationError(f"level must be between 0 and 1, got {level!r}")
    loaded = [load_run(run, position) for position, run in enumerate(runs)]
    _unique_labels(loaded)
    notes: list[str] = []
    _check_graphs(loaded, notes)
    every = list(dict.fromkeys(key for run in loaded for key in run.lines))
    for run in loaded:
        run.info.missing = [key for key in every if key not in run.lines]
    if not set.intersection(*(set(run.lines) for run in loaded)):
        raise ConfigurationError(
            "the runs share no example id: "
            + ", ".join(f"{run.info.label} has {len(run.lines)}" for run in loaded)
        )
    if kind is None:
        kind, reason = _detect_kind(loaded)
    else:
        reason = "given"
    values = ok_values(loaded)
    names = _shared_names(values)
    numeric = _select(names, values, outputs)
    check_numbers(loaded, values, numeric)
    if labels is None and outputs is not None:
        labels = [name for name in numeric if _is_label(_per_run(values, name))]
    categorical = _select_labels(names, values, labels)
    ok_everywhere = set.intersection(*(set(flats) for flats in values))
    if kind == "system" and categorical and labels:
        notes.append("labels are compared for agreement only in a judge comparison")
    clusters = None
    if cluster is not None:
        clusters = _group_keys(loaded, cluster, notes, "cluster by")
        alone = len(ok_everywhere - set(clusters))
        if alone:
            notes.append(
                f"{alone} example(s) have no value of {cluster!r}: each is a cluster of its own"
            )
    settings = _Settings(level, resamples, permutations, seed, kind == "judge", clusters)
    groups: list[GroupComparison] = []
    ungrouped = 0
    if by is not None:
        groups, ungrouped = _by_group(by, loaded, values, numeric, settings, notes)
    style = _style_control(loaded, seed, level, notes)
    return Comparison(
        kind=kind,
        kind_reason=reason,
        runs=[run.info for run in loaded],
        common=len(ok_everywhere),
        outputs=[_numeric(name, loaded, values, settings) for name in numeric],
        labels=[_labels(name, loaded, values) for name in categorical] if kind == "judge" else [],
        level=level,
        resamples=resamples,
        permutations=permutations,
        seed=seed,
        notes=notes,
        by=by,
        cluster=cluster,
        groups=groups,
        ungrouped=ungrouped,
        style=style,
    )
