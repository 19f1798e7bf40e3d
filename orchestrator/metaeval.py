"""Meta-evaluation: how well a run's outputs agree with human labels.

Labels are JSONL keyed by example id. A line with `score` is a true score (compared by
Pearson, Spearman and Kendall correlation); a line with `choice` or `winner` is a true
choice (compared by accuracy), optionally per `aspect`/`dimension` and, for protocols
that judge several pairs per example, per `pair` ("a|b", or `a` and `b`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
from rich.table import Table

from .reader import RunReader

META_EVAL = "meta_eval.json"
CHOICE_FIELDS = ("choices", "outcomes", "choice", "winner")  # tried in order by default
SHOWN_MISSING = 20  # ids listed per section; the count is always complete


class LabelError(ValueError):
    """A labels file that cannot be used; the message names the file and line."""


def read_labels(path: Path) -> list[dict[str, Any]]:
    """Every label line, each checked to carry an id and a score or a choice."""
    if not path.is_file():
        raise LabelError(f"{path}: labels file not found")
    labels = []
    for number, line in enumerate(path.read_bytes().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise LabelError(f"{path}:{number}: not valid JSON ({exc})") from exc
        if not isinstance(item, dict) or item.get("id") in (None, ""):
            raise LabelError(f"{path}:{number}: a label is an object with an 'id'")
        if not any(k in item for k in ("score", "choice", "winner")):
            raise LabelError(f"{path}:{number}: a label needs 'score', 'choice' or 'winner'")
        item["id"] = str(item["id"])
        labels.append(item)
    return labels


def _get(row: dict[str, Any], field: str) -> Any:
    """A result field, with dots reaching into nested objects (`judge.score`)."""
    value: Any = row
    for part in field.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


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
    value = _get(row, field)
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


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def correlations(predicted: list[float], truth: list[float]) -> dict[str, Any]:
    """Pearson, Spearman and Kendall (tau-b) with p-values, plus the mean absolute error."""
    from scipy import stats

    n = len(predicted)
    out: dict[str, Any] = {"n": n}
    out["mae"] = (sum(abs(p - t) for p, t in zip(predicted, truth, strict=True)) / n) if n else None
    constant = len(set(predicted)) < 2 or len(set(truth)) < 2
    if n < 3 or constant:
        # Correlation is undefined for fewer than three points or a constant series.
        for name in ("pearson", "spearman", "kendall"):
            out[name] = {"r": None, "p": None}
        return out
    for name, fn in (
        ("pearson", stats.pearsonr),
        ("spearman", stats.spearmanr),
        ("kendall", stats.kendalltau),
    ):
        result = fn(predicted, truth)
        out[name] = {"r": _finite(result.statistic), "p": _finite(result.pvalue)}
    return out


def _score_section(
    rows: dict[str, dict[str, Any]], labels: list[dict[str, Any]], field: str, baseline: str | None
) -> dict[str, Any]:
    pairs: list[tuple[float, float, float | None]] = []
    missing: list[str] = []
    for label in labels:
        row = rows.get(label["id"])
        value = _get(row, field) if row else None
        if not isinstance(value, int | float) or isinstance(value, bool):
            missing.append(label["id"])
            continue
        base = _get(row, baseline) if (row and baseline) else None
        base_value = float(base) if isinstance(base, int | float) else None
        pairs.append((float(value), float(label["score"]), base_value))
    section: dict[str, Any] = {
        "field": field,
        "labels": len(labels),
        "missing": len(missing),
        "missing_ids": missing[:SHOWN_MISSING],
        **correlations([p for p, _, _ in pairs], [t for _, t, _ in pairs]),
    }
    if baseline:
        usable = [(b, t) for _, t, b in pairs if b is not None]
        section["baseline"] = {
            "field": baseline,
            **correlations([b for b, _ in usable], [t for _, t in usable]),
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


def _choice_section(
    rows: dict[str, dict[str, Any]],
    labels: list[dict[str, Any]],
    field: str | None,
    baseline: str | None,
) -> dict[str, Any]:
    if field is None:
        present = {k for row in rows.values() for k in row}
        field = next((f for f in CHOICE_FIELDS if f in present), CHOICE_FIELDS[0])
    judged: list[tuple[str | None, str | None, bool, bool]] = []
    base: list[tuple[str | None, str | None, bool, bool]] = []
    missing: list[str] = []
    for label in labels:
        truth = label.get("choice", label.get("winner"))
        row = rows.get(label["id"])
        predicted = _predicted_choice(row, field, label) if row else None
        if predicted is None:
            missing.append(label["id"])
            continue
        key, pair = _label_key(label), _label_pair(label)
        tie = _same(predicted, "tie") and not _same(truth, "tie")
        judged.append((key, pair, _same(predicted, truth), tie))
        if baseline and row:
            guess = _predicted_choice(row, baseline, label)
            if guess is not None:
                base.append((key, pair, _same(guess, truth), False))
    section: dict[str, Any] = {
        "field": field,
        "labels": len(labels),
        "missing": len(missing),
        "missing_ids": sorted(set(missing))[:SHOWN_MISSING],
        **_accuracy(judged),
    }
    if baseline:
        section["baseline"] = {"field": baseline, **_accuracy(base)}
    return section


def meta_eval(
    run_dir: Path,
    labels: Path,
    field: str | None = None,
    baseline: str | None = None,
) -> dict[str, Any]:
    """Compare a run's ok results with labels; write RUN_DIR/meta_eval.json and return it.

    `field` is the result field to compare (dots reach into objects): default `score` for
    score labels, and for choice labels the first of choices/outcomes/choice/winner that
    the results have. `baseline` names a result field scored the same way for reference
    (PERSE: `profile_mean`, `profile_choices`).
    """
    run_dir = Path(run_dir)
    items = read_labels(Path(labels))
    results = list(RunReader(run_dir).results())
    if not results:
        raise LabelError(f"{run_dir}: no results.jsonl with result lines")
    # Fields are looked up among the outputs (dots reach into them); a later line wins.
    rows = {r.id: r.outputs for r in results if r.status == "ok"}
    score_labels = [x for x in items if "score" in x]
    choice_labels = [x for x in items if "score" not in x]
    report: dict[str, Any] = {
        "run_dir": str(run_dir),
        "labels": str(labels),
        "examples_ok": len(rows),
        "examples_failed": sum(r.status != "ok" for r in results),
    }
    if score_labels:
        report["scores"] = _score_section(rows, score_labels, field or "score", baseline)
    if choice_labels:
        report["choices"] = _choice_section(rows, choice_labels, field, baseline)
    (run_dir / META_EVAL).write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    return report


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def format_table(result: dict[str, Any]) -> Table:
    """The meta-eval result as one Rich table: correlations and/or accuracies."""
    table = Table(title=f"meta-eval: {result.get('run_dir', '')}")
    table.add_column("section")
    table.add_column("measure")
    table.add_column("run")
    table.add_column("baseline")
    table.add_column("n", justify="right")
    scores = result.get("scores")
    if scores:
        base = scores.get("baseline") or {}
        label = f"scores ({scores['field']})"
        for name in ("pearson", "spearman", "kendall"):
            mine, theirs = scores[name], base.get(name) or {}
            table.add_row(
                label,
                name,
                f"{_fmt(mine['r'])} (p={_fmt(mine['p'])})",
                f"{_fmt(theirs.get('r'))} ({base.get('field')})" if base else "",
                str(scores["n"]),
            )
            label = ""
        table.add_row("", "mean abs error", _fmt(scores["mae"]), _fmt(base.get("mae")), "")
        if scores["missing"]:
            table.add_row("", "labels without a result", str(scores["missing"]), "", "")
    choices = result.get("choices")
    if choices:
        base = choices.get("baseline") or {}
        label = f"choices ({choices['field']})"
        rows: list[tuple[str, dict[str, Any], dict[str, Any]]] = [("accuracy (all)", choices, base)]
        for key, stats in (choices.get("per_key") or {}).items():
            rows.append((f"accuracy: {key}", stats, (base.get("per_key") or {}).get(key, {})))
        for pair, stats in (choices.get("per_pair") or {}).items():
            rows.append((f"agreement: {pair}", stats, (base.get("per_pair") or {}).get(pair, {})))
        for measure, mine, theirs in rows:
            table.add_row(
                label,
                measure,
                _fmt(mine.get("accuracy")),
                _fmt(theirs.get("accuracy")),
                str(mine.get("n", "")),
            )
            label = ""
        if "macro_accuracy" in choices:
            table.add_row(
                "",
                "mean over keys",
                _fmt(choices["macro_accuracy"]),
                _fmt(base.get("macro_accuracy")),
                "",
            )
        if choices["ties"]:
            table.add_row("", "tie predictions (counted wrong)", str(choices["ties"]), "", "")
        if choices["missing"]:
            table.add_row("", "labels without a result", str(choices["missing"]), "", "")
    return table
