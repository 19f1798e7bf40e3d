"""Meta-evaluation: how well a run's outputs agree with human labels.

Labels are JSONL keyed by example id. A line with `score` is a true score (compared by
Pearson, Spearman and Kendall correlation); a line with `choice` or `winner` is a true
choice (compared by accuracy), optionally per `aspect`/`dimension` and, for protocols
that judge several pairs per example, per `pair` ("a|b", or `a` and `b`).

Several humans per example: lines that share an id (and aspect and pair) with different
`annotator` fields (`reviewer`, as `orchestrator review` writes it, is the annotator), or
one line with a `labels` list of {annotator, score|choice}. The run is then compared with
their consensus, and their agreement with each other is the ceiling (section `humans`).
Every statistic gets a seeded bootstrap interval over examples.

One person's later line for the same example replaces their earlier one (an edit is a new
line, so a labels file is only ever appended to); a line flagged without an answer
(`"flag": true`, a note and no score or choice) withdraws theirs. A last line cut short
without its newline (a writer killed mid-line) is left out with a warning.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from ..compute import LEVELS, field_value
from ..errors import LabelError
from ..stats import Method, correlation_test, finite
from ..store import RunReader
from .groups import cluster_keys, run_inputs
from .metaeval_stats import (
    Bootstrap,
    choice_intervals,
    code,
    codes,
    consensus,
    human_ceiling,
    score_intervals,
)
from .metaeval_table import meta_eval_table

log = logging.getLogger(__name__)

META_EVAL = "meta_eval.json"
CHOICE_FIELDS = ("choices", "outcomes", "choice", "winner")  # tried in order by default
__all__ = ["LabelError", "label_lines", "meta_eval", "meta_eval_table", "read_labels"]
SHOWN_MISSING = 20  # ids listed per section; the count is always complete
TRUTH_FIELDS = ("score", "choice", "winner")
NO_CEILING = "one human label per example: no human–human agreement to compare the run with"
NO_PAIRS = "no example has two human labels and a result: no human–human agreement"


def _score(label: dict[str, Any], where: str) -> None:
    """Check a label's `score` is a finite number (a string holding one becomes it): NaN,
    infinity, true/false or a list would pass for a score and make every statistic, error
    count and shot that reads it silently wrong."""
    if "score" not in label:
        return
    value = label["score"]
    number: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
        else:
            label["score"] = number
    if number is None or not math.isfinite(number):
        raise LabelError(f"{where}: 'score' must be a finite number, got {value!r}")


def _choice(label: dict[str, Any], where: str) -> None:
    """Check a label's `choice` or `winner` is one plain value (a name, a number, true or
    false): null, a list or an object would compare unequal to every answer and count as
    the judge's error without a word."""
    for key in ("choice", "winner"):
        if key in label and (label[key] is None or isinstance(label[key], list | dict)):
            raise LabelError(f"{where}: {key!r} must be a name or a number, got {label[key]!r}")


def _expand(item: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """One line's labels: itself, or one label per entry of its `labels` list."""
    listed = item.pop("labels", None)
    if listed is None:
        if not any(k in item for k in TRUTH_FIELDS):
            if item.get("flag") is True:
                return [item]  # flagged without an answer: no label, but it replaces one
            raise LabelError(f"{where}: a label needs 'score', 'choice' or 'winner'")
        _score(item, where)
        _choice(item, where)
        return [item]
    if not isinstance(listed, list) or not listed:
        raise LabelError(f"{where}: 'labels' is a non-empty list of {{annotator, score|choice}}")
    out = []
    for position, entry in enumerate(listed, start=1):
        if not isinstance(entry, dict) or not any(k in entry for k in TRUTH_FIELDS):
            raise LabelError(f"{where}: labels[{position}] needs 'score', 'choice' or 'winner'")
        label = {**item, "annotator": f"#{position}", **entry}
        _score(label, f"{where}: labels[{position}]")
        _choice(label, f"{where}: labels[{position}]")
        out.append(label)
    return out


def _keyed(item: dict[str, Any], key: str, where: str) -> None:
    """A line whose label sits under another key: that value as its score or choice."""
    if item.get(key) is None:
        raise LabelError(f"{where}: no {key!r} (the label field asked for)")
    value = item[key]
    for name in TRUTH_FIELDS:
        item.pop(name, None)
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    item["score" if numeric else "choice"] = value


def label_lines(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each line of a labels file as (where, object): checked to be an object with an id
    (made a string), `where` naming the file and line. A last line without its newline
    that is not JSON is a line a killed writer left half written: skipped, with a warning."""
    if not path.is_file():
        raise LabelError(f"{path}: labels file not found")
    data = path.read_bytes()
    lines = data.splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            if number == len(lines) and not data.endswith(b"\n"):
                log.warning(
                    "%s: a last line cut short (a writer stopped mid-line): left out", where
                )
                return
            raise LabelError(f"{where}: not valid JSON ({exc})") from exc
        if not isinstance(item, dict) or item.get("id") in (None, ""):
            raise LabelError(f"{where}: a label is an object with an 'id'")
        item["id"] = str(item["id"])
        yield where, item


def label_unit(label: dict[str, Any]) -> tuple[str, str | None, str | None, str | None]:
    """What one person labels once: (id, aspect, pair, annotator); a later line of the same
    unit replaces an earlier one."""
    annotator = label.get("annotator")
    return label["id"], _label_key(label), _label_pair(label), annotator


def read_labels(path: Path, key: str | None = None) -> list[dict[str, Any]]:
    """Every label, each checked to carry an id and a score or a choice; `reviewer` is the
    annotator, and of one annotator's lines for one example the last stands. With `key`,
    each line's label is that key's value instead (a number its score, else its choice)."""
    place: dict[tuple[str, str | None, str | None, str | None], int] = {}
    labels: list[dict[str, Any]] = []
    for where, item in label_lines(path):
        if item.get("reviewer") not in (None, ""):
            item["annotator"] = item["reviewer"]
        if key is not None and key not in TRUTH_FIELDS:
            _keyed(item, key, where)
        for label in _expand(item, where):
            if "annotator" not in label:
                labels.append(label)
                continue
            label["annotator"] = str(label["annotator"])
            unit = label_unit(label)
            # The unit keeps the place of its first line and takes its latest line.
            if unit in place:
                labels[place[unit]] = label
            else:
                place[unit] = len(labels)
                labels.append(label)
    # A flag without an answer only withdraws the person's earlier answer.
    return [x for x in labels if any(k in x for k in TRUTH_FIELDS)]


def _label_key(label: dict[str, Any]) -> str | None:
    key = label.get("aspect", label.get("dimension"))
    return None if key is None else str(key)


def _label_pair(label: dict[str, Any]) -> str | None:
    if label.get("pair") is not None:
        names = str(label["pair"]).split("|")
    elif label.get("a") is not None and label.get("b") is not None:
        names = [str(label["a"]), str(label["b"])]
    else:
        return None
    return "|".join(sorted(names))


def _predicted_choice(row: dict[str, Any], field: str, label: dict[str, Any]) -> Any:
    """The run's choice for one label: from a scalar, a key→choice map or a list of records."""
    value = field_value(row, field)
    key, pair = _label_key(label), _label_pair(label)
    if isinstance(value, dict):
        return value.get(key) if key is not None else None
    if isinstance(value, list):
        found = [
            r
            for r in value
            if isinstance(r, dict)
            and (key is None or str(r.get("dimension", r.get("aspect"))) == key)
            and (pair is None or r.get("pair") == pair)
        ]
        if len(found) != 1:
            return None  # absent, or ambiguous without a pair in the label
        record = found[0]
        return record.get("winner", record.get("choice"))
    return value


def _same(predicted: Any, truth: Any) -> bool:
    return str(predicted).strip().casefold() == str(truth).strip().casefold()


def correlations(predicted: list[float], truth: list[float]) -> dict[str, Any]:
    """Pearson, Spearman and Kendall (tau-b) with p-values, plus the mean absolute error."""
    n = len(predicted)
    out: dict[str, Any] = {"n": n}
    out["mae"] = (sum(abs(p - t) for p, t in zip(predicted, truth, strict=True)) / n) if n else None
    constant = len(set(predicted)) < 2 or len(set(truth)) < 2
    if n < 3 or constant:
        # Correlation is undefined for fewer than three points or a constant series.
        for name in ("pearson", "spearman", "kendall"):
            out[name] = {"r": None, "p": None}
        return out
    methods: tuple[Method, ...] = ("pearson", "spearman", "kendall")
    for name in methods:
        r, p = correlation_test(name, predicted, truth)
        out[name] = {"r": finite(r), "p": finite(p)}
    return out


def _score_section(
    rows: dict[str, dict[str, Any]],
    labels: list[dict[str, Any]],
    field: str,
    baseline: str | None,
    level: str,
    boot: Bootstrap,
) -> dict[str, Any]:
    pairs: list[tuple[float, float, float | None]] = []
    ids: list[str] = []
    missing: list[str] = []
    for label in labels:
        row = rows.get(label["id"])
        value = field_value(row, field) if row else None
        if not isinstance(value, int | float) or isinstance(value, bool):
            missing.append(label["id"])
            continue
        base = field_value(row, baseline) if (row and baseline) else None
        base_value = float(base) if isinstance(base, int | float) else None
        pairs.append((float(value), float(label["score"]), base_value))
        ids.append(label["id"])
    section: dict[str, Any] = {
        "field": field,
        "labels": len(labels),
        "missing": len(missing),
        "missing_ids": missing[:SHOWN_MISSING],
        **correlations([p for p, _, _ in pairs], [t for _, t, _ in pairs]),
        **score_intervals(ids, [p for p, _, _ in pairs], [t for _, t, _ in pairs], level, boot),
    }
    if baseline:
        usable = [(i, b, t) for i, (_, t, b) in zip(ids, pairs, strict=True) if b is not None]
        guesses, truths = [b for _, b, _ in usable], [t for _, _, t in usable]
        section["baseline"] = {
            "field": baseline,
            **correlations(guesses, truths),
            **score_intervals([i for i, _, _ in usable], guesses, truths, level, boot),
        }
    return section


def _accuracy(records: list[tuple[str | None, str | None, bool, bool]]) -> dict[str, Any]:
    """Accuracy over (key, pair, correct, tie) records, overall, per key and per pair."""

    def tally(items: list[tuple[str | None, str | None, bool, bool]]) -> dict[str, Any]:
        n = len(items)
        correct = sum(c for _, _, c, _ in items)
        ties = sum(t for _, _, _, t in items)
        decisive = n - ties
        return {
            "n": n,
            "correct": correct,
            "accuracy": correct / n if n else None,
            "ties": ties,
            "accuracy_decisive": correct / decisive if decisive else None,
        }

    out = tally(records)
    keys = sorted({k for k, _, _, _ in records if k is not None})
    if keys:
        out["per_key"] = {k: tally([r for r in records if r[0] == k]) for k in keys}
        rates = [v["accuracy"] for v in out["per_key"].values() if v["accuracy"] is not None]
        out["macro_accuracy"] = sum(rates) / len(rates) if rates else None
    pair_names = sorted({p for _, p, _, _ in records if p is not None})
    if pair_names:
        out["per_pair"] = {p: tally([r for r in records if r[1] == p]) for p in pair_names}
    return out


def _with_intervals(records: list[dict[str, Any]], boot: Bootstrap) -> dict[str, Any]:
    """Accuracies with `accuracy_ci` (per key and pair too), `macro_accuracy_ci` and α."""
    tuples = [(r["key"], r["pair"], r["correct"], r["tie"]) for r in records]
    out = _accuracy(tuples)
    found = choice_intervals(records, boot)
    ci = found.pop("ci")
    out["accuracy_ci"], out["accuracy_decisive_ci"] = ci["accuracy"], ci["accuracy_decisive"]
    for key, tally in (out.get("per_key") or {}).items():
        tally["accuracy_ci"] = ci[f"key:{key}"]
    for pair, tally in (out.get("per_pair") or {}).items():
        tally["accuracy_ci"] = ci[f"pair:{pair}"]
    if "macro_accuracy" in out:
        out["macro_accuracy_ci"] = ci["macro_accuracy"]
    return {**out, **found}


def _choice_field(rows: dict[str, dict[str, Any]], field: str | None) -> str:
    if field is not None:
        return field
    present = {k for row in rows.values() for k in row}
    return next((f for f in CHOICE_FIELDS if f in present), CHOICE_FIELDS[0])


def _choice_section(
    rows: dict[str, dict[str, Any]],
    labels: list[dict[str, Any]],
    field: str,
    baseline: str | None,
    boot: Bootstrap,
) -> dict[str, Any]:
    judged: list[dict[str, Any]] = []
    base: list[dict[str, Any]] = []
    missing: list[str] = []
    for label in labels:
        truth = label.get("choice", label.get("winner"))
        row = rows.get(label["id"])
        predicted = _predicted_choice(row, field, label) if row else None
        if predicted is None:
            missing.append(label["id"])
            continue
        record = {"id": label["id"], "key": _label_key(label), "pair": _label_pair(label)}
        tie = _same(predicted, "tie") and not _same(truth, "tie")
        judged.append({**record, "correct": _same(predicted, truth), "tie": tie})
        judged[-1].update(predicted=predicted, truth=truth)
        if baseline and row:
            guess = _predicted_choice(row, baseline, label)
            if guess is not None:
                base.append({**record, "correct": _same(guess, truth), "tie": False})
                base[-1].update(predicted=guess, truth=truth)
    section: dict[str, Any] = {
        "field": field,
        "labels": len(labels),
        "missing": len(missing),
        "missing_ids": sorted(set(missing))[:SHOWN_MISSING],
        **_with_intervals(judged, boot),
    }
    if baseline:
        section["baseline"] = {"field": baseline, **_with_intervals(base, boot)}
    return section


def label_truth(label: dict[str, Any]) -> Any:
    return label["score"] if "score" in label else label.get("choice", label.get("winner"))


def judge_value(row: dict[str, Any] | None, field: str, label: dict[str, Any]) -> Any:
    if row is None:
        return None
    if "score" in label:
        value = field_value(row, field)
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        return float(value) if numeric else None
    return _predicted_choice(row, field, label)


def annotated(
    rows: dict[str, dict[str, Any]],
    labels: list[dict[str, Any]],
    field: str,
    level: str,
    boot: Bootstrap,
) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """Labels → one consensus label per (id, aspect, pair), the `humans` block, section notes.

    Without `annotator` fields the labels stay as they are and the block gives the reason.
    """
    if not any("annotator" in x for x in labels):
        return labels, {"reason": NO_CEILING}, {}
    kind = "scores" if "score" in labels[0] else "choices"
    units: dict[tuple[str, str | None, str | None], list[dict[str, Any]]] = {}
    for label in labels:
        units.setdefault((label["id"], _label_key(label), _label_pair(label)), []).append(label)
    names = sorted({str(x.get("annotator", "(unnamed)")) for x in labels})
    column = {name: i for i, name in enumerate(names)}
    groups = list(units.values())
    judged = [judge_value(rows.get(g[0]["id"]), field, g[0]) for g in groups]
    table = {} if kind == "scores" else codes([label_truth(x) for x in labels] + judged)
    as_number = (lambda v: float(v)) if kind == "scores" else (lambda v: code(v, table))
    ratings = np.full((len(groups), len(names)), np.nan)
    for row, group in enumerate(groups):
        for label in group:
            rater = column[str(label.get("annotator", "(unnamed)"))]
            ratings[row, rater] = as_number(label_truth(label))
    crowd = consensus(ratings, kind)
    decoded = {number: name for name, number in table.items()}
    merged = []
    for group, value in zip(groups, crowd, strict=True):
        if np.isnan(value):
            continue  # humans split evenly: no majority to compare with
        label = {k: v for k, v in group[0].items() if k not in (*TRUTH_FIELDS, "annotator")}
        label["score" if kind == "scores" else "choice"] = (
            float(value) if kind == "scores" else decoded[float(value)]
        )
        merged.append(label)
    notes = {
        "consensus": "mean" if kind == "scores" else "majority",
        "annotators": len(names),
        "no_majority": len(groups) - len(merged),
    }
    judge = np.asarray([np.nan if j is None else as_number(j) for j in judged])
    keep = ~np.isnan(judge) & ((~np.isnan(ratings)).sum(axis=1) >= 2)
    if len(names) < 2 or not keep.any():
        return merged, {"reason": NO_PAIRS if len(names) >= 2 else NO_CEILING}, notes
    ids = [g[0]["id"] for g, k in zip(groups, keep, strict=True) if k]
    block = human_ceiling(ids, judge[keep], ratings[keep], names, kind, level, boot)
    return merged, block, notes


def meta_eval(
    run_dir: Path,
    labels: Path,
    field: str | None = None,
    baseline: str | None = None,
    *,
    level: str | None = None,
    resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
    cluster: str | None = None,
) -> dict[str, Any]:
    """Compare a run's ok results with labels; write RUN_DIR/meta_eval.json and return it.

    `field` is the result field to compare (dots reach into objects): default `score` for
    score labels, and for choice labels the first of choices/outcomes/choice/winner that
    the results have. `baseline` names a result field scored the same way for reference
    (PERSE: `profile_mean`, `profile_choices`). `level` is Krippendorff's level for score
    labels (default interval; choices are always nominal); `resamples`, `seed` and
    `confidence` set the percentile bootstrap over examples; `cluster` names the row field
    (an output or a kept input, e.g. a user id) whose clusters it draws instead, since
    examples nested in one user are not independent.
    """
    if level is not None and level not in LEVELS:
        raise ValueError(f"level must be one of {', '.join(LEVELS)}, got {level!r}")
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise ValueError(f"resamples must be a positive integer, got {resamples!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence!r}")
    run_dir = Path(run_dir)
    items = read_labels(Path(labels))
    results = list(RunReader(run_dir).results())
    if not results:
        raise LabelError(f"{run_dir}: no results.jsonl with result lines")
    clusters = None
    if cluster is not None:
        clusters = cluster_keys(
            [r for r in results if r.status == "ok"], cluster, run_inputs(run_dir)
        )
    boot = Bootstrap(resamples, seed, confidence, cluster, clusters)
    # Fields are looked up among the outputs (dots reach into them); a later line wins.
    rows = {r.id: r.outputs for r in results if r.status == "ok"}
    score_labels = [x for x in items if "score" in x]
    choice_labels = [x for x in items if "score" not in x]
    report: dict[str, Any] = {
        "run_dir": str(run_dir),
        "labels": str(labels),
        "examples_ok": len(rows),
        "examples_failed": sum(r.status != "ok" for r in results),
        "bootstrap": boot.describe(),
    }
    if score_labels:
        scale, name = level or "interval", field or "score"
        merged, humans, notes = annotated(rows, score_labels, name, scale, boot)
        report["scores"] = _score_section(rows, merged, name, baseline, scale, boot)
        report["scores"].update(labels=len(score_labels), **notes, humans=humans)
    if choice_labels:
        name = _choice_field(rows, field)
        merged, humans, notes = annotated(rows, choice_labels, name, "nominal", boot)
        report["choices"] = _choice_section(rows, merged, name, baseline, boot)
        report["choices"].update(labels=len(choice_labels), **notes, humans=humans)
    (run_dir / META_EVAL).write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    return report
