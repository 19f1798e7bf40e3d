"""The pure parts of `align`: the split and folds (seeded, disjoint, stratified), shot
draws, the metrics and verdict, the isotonic map, variant graphs and the folder writer."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from orchestrator.analysis.align import isotonic, scoring
from orchestrator.analysis.align.labels import Coder
from orchestrator.analysis.align.record import Configuration, Shot, Trial, Variant
from orchestrator.analysis.align.search import choose
from orchestrator.analysis.align.shots import draw_shots, shot_record
from orchestrator.analysis.align.split import folds, split, strata
from orchestrator.analysis.align.variants import (
    integer_range,
    parse_variant,
    variant_spec,
    variant_texts,
    with_isotonic,
)
from orchestrator.analysis.align.writer import write_graph
from orchestrator.analysis.metaeval_stats import Bootstrap
from orchestrator.errors import ConfigurationError

IDS = [f"e{i:03d}" for i in range(100)]
TRUTH = {k: ("yes" if i % 4 == 0 else "no") for i, k in enumerate(IDS)}  # 25 yes, 75 no


def test_the_split_is_seeded_disjoint_complete_and_stratified() -> None:
    groups = strata(TRUTH)
    search, test = split(IDS, groups, 0.3, seed=7)
    assert (search, test) == split(IDS, groups, 0.3, seed=7)
    assert split(IDS, groups, 0.3, seed=8) != (search, test)
    assert not set(search) & set(test) and set(search) | set(test) == set(IDS)
    assert len(test) == 30
    assert Counter(TRUTH[k] for k in test) == {"yes": 7, "no": 23} or Counter(
        TRUTH[k] for k in test
    ) == {"yes": 8, "no": 22}


def test_folds_are_seeded_disjoint_complete_and_stratified() -> None:
    groups = strata(TRUTH)
    search, _ = split(IDS, groups, 0.3, seed=0)
    found = folds(search, groups, 5, seed=0)
    assert found == folds(search, groups, 5, seed=0)
    assert sorted(x for fold in found for x in fold) == sorted(search)
    assert sum(len(f) for f in found) == len(set().union(*map(set, found)))
    yes = [sum(TRUTH[k] == "yes" for k in fold) for fold in found]
    assert max(yes) - min(yes) <= 1
    with pytest.raises(ConfigurationError, match="cannot fill"):
        folds(search[:3], groups, 5, seed=0)


def test_many_distinct_scores_are_binned_into_strata() -> None:
    truth = {k: float(i) / 7 for i, k in enumerate(IDS)}
    assert len(set(strata(truth).values())) == 5
    assert len(set(strata({k: i % 3 for i, k in enumerate(IDS)}).values())) == 3


def test_shot_draws_are_seeded_nested_stratified_and_from_the_pool_only() -> None:
    groups = strata(TRUTH)
    pool = IDS[:40]
    four = draw_shots(pool, groups, 4, seed=1, draw=0)
    assert four == draw_shots(pool, groups, 4, seed=1, draw=0)
    assert draw_shots(pool, groups, 2, seed=1, draw=0) == four[:2]
    assert set(four) <= set(pool)
    assert {TRUTH[k] for k in four[:2]} == {"yes", "no"}
    assert draw_shots(pool, groups, 100, seed=1, draw=0) != draw_shots(pool, groups, 100, 1, 1)
    assert sorted(draw_shots(pool, groups, 100, seed=1, draw=0)) == sorted(pool)


def test_a_shot_record_carries_inputs_label_and_reason() -> None:
    row = {"id": "e1", "text": "hello", "extra": 3}
    shot = shot_record("e1", row, ["text"], "score", {"id": "e1", "reason": "why"}, 7.0)
    assert shot.model_dump() == {
        "id": "e1",
        "inputs": {"text": "hello"},
        "output": {"score": 7, "reason": "why"},
    }
    assert shot_record("e1", row, [], "score", {}, 2.5).inputs == {"text": "hello", "extra": 3}


def test_metrics() -> None:
    truth = np.array([1.0, 2, 3, 4, 5, 1, 2, 3])
    assert scoring.measure("accuracy", truth, truth, "scores") == 1.0
    assert scoring.measure("alpha", truth, truth, "scores") == pytest.approx(1.0)
    assert scoring.measure("spearman", truth, truth, "scores") == pytest.approx(1.0)
    assert scoring.measure("kappa", truth, truth, "scores") == pytest.approx(1.0)
    judged = truth.copy()
    judged[0] = np.nan
    assert scoring.measure("accuracy", judged, truth, "scores") == 1.0
    assert scoring.measure("kappa", np.full(3, np.nan), truth[:3], "scores") is None


def test_verdict_follows_the_swap_test_of_the_difference() -> None:
    assert scoring.verdict(0.2, 0.01, 0.95) == "better"
    assert scoring.verdict(-0.2, 0.01, 0.95) == "worse"
    assert scoring.verdict(0.2, 0.2, 0.95) == "same"  # not rejected at 5%
    assert scoring.verdict(0.2, 0.03, 0.99) == "same"  # not at 1%
    assert scoring.verdict(None, None, 0.95) == "same"


def test_swap_test_swaps_whole_clusters() -> None:
    """With one cluster holding every difference, a swap moves all of them together: the
    observed gap is then as extreme as half of all swaps, where per example it is rare."""
    truth = np.ones(12)
    base, mine = np.zeros(12), np.ones(12)  # aligned right on every example, baseline never
    boot = Bootstrap(resamples=400, seed=0)
    gap = scoring.rows_gap("accuracy", truth, "choices")
    apart = scoring.swap_p(base, mine, gap, np.arange(12), boot)
    together = scoring.swap_p(base, mine, gap, np.zeros(12, dtype=int), boot)
    assert apart is not None and apart < 0.01
    assert together is not None and together > 0.9


def test_compare_finds_a_planted_gain_and_no_gain() -> None:
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 2, 60).astype(float)
    noise = np.where(rng.random(60) < 0.5, truth, 1 - truth)
    ids = [f"x{i}" for i in range(60)]
    boot = Bootstrap(resamples=500, seed=0)
    base, mine, gap = scoring.compare(ids, noise, truth, truth, "accuracy", "choices", boot)
    assert mine.value == 1.0 and gap.verdict == "better" and base.n == 60
    assert gap.ci is not None and gap.ci[0] > 0
    _, _, same = scoring.compare(ids, noise, noise, truth, "accuracy", "choices", boot)
    assert same.value == 0.0 and same.verdict == "same"


def test_isotonic_fit_is_monotone_and_maps_onto_the_labels() -> None:
    judged = np.array([1.0, 2, 3, 4, 5, 6])
    truth = np.array([2.0, 1, 5, 6, 8, 9])
    found = isotonic.fit(judged, truth)
    assert found is not None and found.y == sorted(found.y)
    assert found.y[:2] == [1.5, 1.5]
    mapped = isotonic.apply(found, np.array([1.0, np.nan, 10.0]))
    assert mapped[0] == 1.5 and np.isnan(mapped[1]) and mapped[2] == 9.0
    snapped = isotonic.apply(found, np.array([5.0, np.nan]), levels=[1, 2, 5, 9])
    assert snapped[0] == 9.0 and np.isnan(snapped[1])
    assert isotonic.fit(np.ones(4), truth[:4]) is None


def test_variants_parse_and_apply() -> None:
    assert parse_variant("prompt=b.jinja") == Variant(key="prompt", value="b.jinja")
    assert parse_variant("params.k=3") == Variant(key="params.k", value=3)
    assert parse_variant("params.tone=dry").value == "dry"
    for bad in ("prompt", "colour=red", "params.=1"):
        with pytest.raises(ConfigurationError):
            parse_variant(bad)
    spec = {"name": "g", "params": {"k": 1}, "nodes": {"j": {"kind": "llm", "prompt": "a"}}}
    out = variant_spec(spec, "j", Variant(key="params.k", value=3), shots=True, name="g2")
    assert out["params"] == {"k": 3} and out["name"] == "g2"
    assert out["files"] == {"shots": "shots.json"} and out["nodes"]["j"]["shots"] == "files.shots"
    assert spec["params"] == {"k": 1} and "shots" not in spec["nodes"]["j"]
    plain = variant_spec(spec, "j", Variant(key="prompt", value="b"), shots=False)
    assert plain["nodes"]["j"]["prompt"] == "b" and "files" not in plain


def test_the_writer_puts_graph_templates_and_shots_in_the_folder(tmp_path: Path) -> None:
    shots = [Shot(id="e1", inputs={"text": "t"}, output={"score": 3})]
    texts = variant_texts({"sub/a.jinja": "A {{ text }}"}, shots)
    path = write_graph(tmp_path, {"name": "g-aligned", "prompts": "prompts"}, texts)
    assert path == tmp_path / "graph.yaml"
    assert (tmp_path / "prompts/sub/a.jinja").read_text() == "A {{ text }}"
    assert json.loads((tmp_path / "prompts/shots.json").read_text())[0]["id"] == "e1"
    with pytest.raises(ConfigurationError, match="leave"):
        write_graph(tmp_path, {}, {"../x": ""})


def test_the_isotonic_lookup_and_the_graph_output_that_applies_it() -> None:
    found = isotonic.fit(np.array([3.0, 5.0]), np.array([2.0, 9.0]))
    assert found is not None
    assert isotonic.table(found, 1, 6) == {
        "1": 2.0,
        "2": 2.0,
        "3": 2.0,
        "4": 5.5,
        "5": 9.0,
        "6": 9.0,
    }
    assert isotonic.table(found, 3, 4, levels=[2, 9])["4"] == 2.0
    spec = {"nodes": {"j": {"output": {"s": {"type": "integer", "min": 1, "max": 5}}}}}
    assert integer_range(spec, "j", "s") == (1, 5)
    assert integer_range({"nodes": {"j": {"output": {"s": {"type": "number"}}}}}, "j", "s") is None
    spec["outputs"] = {"s_isotonic": "j.s"}
    out, name = with_isotonic(spec, "j", "s")
    assert name == "s_isotonic2" and out["outputs"][name] == "files.isotonic[j.s | string]"
    assert out["files"] == {"isotonic": "isotonic.json"} and "files" not in spec


def test_the_choice_prefers_the_score_then_fewer_shots_then_the_graph_as_given() -> None:
    base, other = Variant(), Variant(key="prompt", value="b")

    def tried(shots: int, variant: Variant, score: float | None) -> Trial:
        return Trial(
            configuration=Configuration(shots=shots, variant=variant), folds=[], score=score
        )

    variants = [base, other]
    trace = [tried(4, base, 0.9), tried(2, other, 0.9), tried(2, base, 0.9), tried(0, base, None)]
    assert choose(trace, variants) == Configuration(shots=2, variant=base)
    assert choose([tried(0, base, None), tried(8, other, 0.1)], variants).shots == 8


def test_the_coder_gives_choices_one_table_and_unknown_answers_their_own_code() -> None:
    coder = Coder("choices", {"a": "Good", "b": "bad"})
    assert coder.labels(["a", "b"]).tolist() == [1.0, 0.0]
    judged = coder.answers({"a": " good", "b": "meh"}, ["a", "b", "c"])
    assert judged[0] == 1.0 and judged[1] not in (0.0, 1.0) and np.isnan(judged[2])
    assert np.isnan(Coder("scores", {"a": 3}).answers({"a": True}, ["a"])[0])
