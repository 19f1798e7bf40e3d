"""Distil a jury's labels into a cheap scorer: local sentence embeddings + logistic regression.

`distill` reads a run folder's results.jsonl (text and jury label per line), splits it
(group-aware when rows carry `group`, so every variant of one source stays on one side),
trains a class-balanced classifier on the train side and reports accuracy, macro-F1 and
Spearman against the jury on the held-out side, and the accuracy per language. The saved
scorer (scorer.joblib plus a JSON card) is what the `distilled_score` compute node loads.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..compute import CARD_FILE, SCORER_FILE, compose
from ..compute import Scorer as Scorer  # what `distill` trains, read back
from ..compute import load_scorer as load_scorer
from ..stats import finite, spearman
from ..store import RunReader
from .groups import estimate, ids_by_group, key_text

FORMAT_VERSION = 1


def read_labelled(
    run_dir: Path, text_field: str, label_field: str, context_field: str | None
) -> list[dict[str, Any]]:
    """Ok result lines that carry a text and a label (jury N/A rows are left out)."""
    run = RunReader(run_dir)
    if not run.has_results:
        path = run.path / "results.jsonl"
        raise FileNotFoundError(f"{path} not found: give a run folder of a jury graph")
    rows = []
    for line in run.results():
        if line.status != "ok":
            continue
        outputs = line.outputs
        text, label = outputs.get(text_field), outputs.get(label_field)
        if not isinstance(text, str) or label is None or isinstance(label, bool):
            continue
        rows.append(
            {
                "id": line.id,
                "text": text,
                "label": int(label),
                "group": outputs.get("group"),
                "language": outputs.get("language"),
                "context": outputs.get(context_field) if context_field else None,
            }
        )
    return rows


def split_indices(
    labels: Sequence[int],
    groups: Sequence[Any] | None,
    test_size: float,
    seed: int,
) -> tuple[list[int], list[int], str]:
    """Train and test row indices and the kind of split used.

    With groups: StratifiedGroupKFold's first fold (k = round(1 / test_size)) is the test
    side, so no group straddles the split and classes stay roughly balanced. Without:
    a stratified split when every class has two rows, else a plain random one.
    """
    import numpy as np
    from sklearn.model_selection import StratifiedGroupKFold, train_test_split

    if not 0 < test_size < 1:
        raise ValueError("test_size must be between 0 and 1")
    y = np.asarray(labels)
    index = np.arange(len(y))
    if groups is not None and len(set(groups)) >= 2:
        folds = max(2, min(round(1 / test_size), len(set(groups))))
        splitter = StratifiedGroupKFold(n_splits=folds, shuffle=True, random_state=seed)
        train, test = next(splitter.split(index, y, groups=list(groups)))
        return sorted(train.tolist()), sorted(test.tolist()), f"group-aware ({folds} folds)"
    counts = Counter(labels)
    stratify = y if min(counts.values()) >= 2 else None
    train, test = train_test_split(index, test_size=test_size, random_state=seed, stratify=stratify)
    kind = "stratified" if stratify is not None else "random"
    return sorted(train.tolist()), sorted(test.tolist()), kind


def held_out_by(
    rows: Sequence[dict[str, Any]],
    test: Sequence[int],
    truth: Sequence[int],
    predicted: Sequence[int],
    field: str = "language",
    level: float = 0.95,
) -> dict[str, dict[str, Any]]:
    """Held-out accuracy per value of a row field (the `analysis.groups` mechanism): for
    each, its n and accuracy with a Wilson interval; test rows without a value are left out."""
    keys: dict[str, str] = {}
    right: dict[str, float] = {}
    for position, index in enumerate(test):
        example = str(rows[index]["id"])
        right[example] = float(truth[position] == predicted[position])
        value = key_text(rows[index].get(field))
        if value is not None:
            keys[example] = value
    found = {}
    for value, ids in ids_by_group(keys).items():
        accuracy = estimate("accuracy", [right[i] for i in ids], level, proportion=True)
        found[value] = {
            "n": accuracy.n,
            "accuracy": None if accuracy.mean is None else round(accuracy.mean, 4),
            "ci_low": None if accuracy.low is None else round(accuracy.low, 4),
            "ci_high": None if accuracy.high is None else round(accuracy.high, 4),
            "level": level,
            "method": accuracy.method,
        }
    return found


def distill(
    run_dir: Path,
    out: Path,
    text_field: str = "text",
    label_field: str = "label",
    embedding_model: Path | None = None,
    test_size: float = 0.25,
    seed: int = 0,
    context_field: str | None = "platform",
) -> dict[str, Any]:
    """Train a scorer on a jury run's labels, evaluate it on a held-out split, save it to `out`.

    `context_field` (default `platform`) is prefixed to each text when rows carry it,
    because the same post can be well or badly personalised depending on its target.
    Returns the card: split, sizes, label counts, held-out accuracy/macro-F1/Spearman, and
    the held-out accuracy per language (with its n and a Wilson interval) when rows carry one.
    """
    import joblib
    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, f1_score

    from ..compute import encoder, resolve_model_path

    started = time.perf_counter()
    rows = read_labelled(Path(run_dir), text_field, label_field, context_field)
    if len(rows) < 4:
        raise ValueError(f"{run_dir}: only {len(rows)} labelled rows; need at least 4")
    labels = [r["label"] for r in rows]
    if len(set(labels)) < 2:
        raise ValueError(f"{run_dir}: every row has label {labels[0]}; nothing to learn")
    groups = [r["group"] for r in rows]
    has_groups = all(g is not None for g in groups)
    train, test, split_kind = split_indices(labels, groups if has_groups else None, test_size, seed)
    if len({labels[i] for i in train}) < 2:
        raise ValueError("the train split holds a single label; add data or change the seed")

    model_path = resolve_model_path(embedding_model)
    enc = encoder(model_path)
    features = enc.encode([compose(r["text"], r["context"]) for r in rows])
    y = np.asarray(labels)
    classifier = LogisticRegression(class_weight="balanced", max_iter=5000, random_state=seed)
    classifier.fit(features[train], y[train])
    predicted = classifier.predict(features[test]).tolist()
    truth = y[test].tolist()
    classes = sorted({int(c) for c in classifier.classes_})

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    card: dict[str, Any] = {
        "format": FORMAT_VERSION,
        "source_run": str(Path(run_dir).resolve()),
        "text_field": text_field,
        "label_field": label_field,
        "context_field": context_field if any(r["context"] for r in rows) else None,
        "embedding_model": str(embedding_model) if embedding_model else None,
        "embedding_model_resolved": str(model_path),
        "classifier": "LogisticRegression(class_weight='balanced')",
        "classes": classes,
        "split": split_kind,
        "seed": seed,
        "test_size": test_size,
        "n_train": len(train),
        "n_test": len(test),
        "labels_train": dict(sorted(Counter(str(labels[i]) for i in train).items())),
        "labels_test": dict(sorted(Counter(str(labels[i]) for i in test).items())),
        "held_out": {
            "accuracy": round(float(accuracy_score(truth, predicted)), 4),
            "macro_f1": round(
                float(f1_score(truth, predicted, average="macro", labels=classes, zero_division=0)),
                4,
            ),
            "spearman": finite(spearman(truth, predicted)),  # None when either is constant
        },
        # PerQ asks whether quality differs among languages: so may the scorer's accuracy.
        "held_out_by_language": held_out_by(rows, test, truth, predicted),
        "train_seconds": round(time.perf_counter() - started, 3),
    }
    joblib.dump({"classifier": classifier, "classes": classes}, out / SCORER_FILE)
    (out / CARD_FILE).write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")
    return card


def format_card(card: dict[str, Any]) -> str:
    """A few lines for the terminal."""
    held = card["held_out"]
    spearman = "n/a" if held["spearman"] is None else f"{held['spearman']:.3f}"
    lines = [
        f"split: {card['split']}, train {card['n_train']} / test {card['n_test']} rows",
        f"held-out vs jury: accuracy {held['accuracy']:.3f}, macro-F1 {held['macro_f1']:.3f}, "
        f"Spearman {spearman}",
    ]
    for language, found in (card.get("held_out_by_language") or {}).items():
        interval = ""
        if found.get("ci_low") is not None and found.get("ci_high") is not None:
            interval = f" [{found['ci_low']:.3f}, {found['ci_high']:.3f}]"
        lines.append(f"  {language}: accuracy {found['accuracy']:.3f}{interval}, n {found['n']}")
    return "\n".join(lines)
