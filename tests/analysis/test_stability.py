"""The judge card's stability (`orc.retest`): re-asks go through the normal run path under
fresh sample indices, leave the run and its cache as they were, cost nothing when repeated,
and α / flip rate find a stable judge stable and a flipping one unstable."""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from helpers import judge_graph, trace_records, user_text, write_graph, write_rows

import orchestrator as orc
from orchestrator.analysis.card.stability import stability_of
from orchestrator.analysis.metaeval_stats import Bootstrap
from orchestrator.providers.fake import FakeRequest

ROWS = 30


def _score(text: str) -> int:
    return zlib.crc32(text.encode()) % 10 + 1


def steady(request: FakeRequest) -> str:
    """A deterministic judge: the same text always gets the same score."""
    return json.dumps({"score": _score(user_text(request.body))})


class Flipper:
    """A judge whose every answer is drawn afresh: seeded per prompt and per time asked,
    so the answers do not depend on the order the engine sends requests in."""

    def __init__(self, seed: int, p_flip: float = 1.0) -> None:
        self.seed = seed
        self.p_flip = p_flip
        self.asked: Counter[str] = Counter()

    def __call__(self, request: FakeRequest) -> str:
        text = user_text(request.body)
        self.asked[text] += 1
        rng = np.random.default_rng([self.seed, zlib.crc32(text.encode()), self.asked[text]])
        return json.dumps({"score": int(rng.integers(1, 11))})


class BinaryJudge:
    """A yes/no judge that gives each text's true verdict, flipped with probability p."""

    def __init__(self, seed: int, p_flip: float) -> None:
        self.seed = seed
        self.p_flip = p_flip
        self.asked: Counter[str] = Counter()

    def __call__(self, request: FakeRequest) -> str:
        text = user_text(request.body)
        self.asked[text] += 1
        truth = zlib.crc32(text.encode()) % 2 == 1
        rng = np.random.default_rng([self.seed, zlib.crc32(text.encode()), self.asked[text]])
        return json.dumps({"reason": "…", "ok": bool(truth ^ (rng.random() < self.p_flip))})


@pytest.fixture
def finished(tmp_path: Path) -> Path:
    """A finished run of the one-node judge over ROWS texts, with its cache beside it."""
    graph = write_graph(tmp_path, judge_graph(temperature=0.7), {"judge.jinja": "Rate: {{ text }}"})
    rows = [{"id": f"r{i}", "text": f"text number {i}"} for i in range(ROWS)]
    data = write_rows(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "run"
    orc.run(graph, data, out=out, transport=orc.FakeTransport(steady), cache=tmp_path / "c.sqlite")
    return out


def _files(folder: Path) -> dict[str, bytes]:
    """The run's own files byte for byte (the trace is compared by its records: a reader
    leaves SQLite's -shm/-wal beside it), the retest's sub-folder left out."""
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in folder.rglob("*")
        if path.is_file()
        and not path.relative_to(folder).parts[0].startswith("retest-")
        and not path.name.startswith("traces.sqlite")
    }


def _cache(path: Path) -> dict[str, bytes]:
    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT key, value FROM responses").fetchall())


def test_a_steady_judge_has_alpha_one_no_flips_and_a_repeat_costs_nothing(finished: Path) -> None:
    transport = orc.FakeTransport(steady)
    found = orc.retest(finished, k=3, rows=12, transport=transport)
    assert len(transport.node_requests) == 3 * 12  # K × N, none answered by the run's cache
    (only,) = found.stability
    assert (only.node, only.field, only.level, only.model) == (
        "judge",
        "score",
        "interval",
        "fake-model",
    )
    assert (only.k, only.rows, only.flips, only.flip_rate) == (3, 12, 0, 0.0)
    assert only.alpha == pytest.approx(1.0) and only.alpha_ci == pytest.approx((1.0, 1.0))
    assert only.inputs_held
    assert [(o.output, o.rows, o.flip_rate) for o in found.outputs] == [("score", 12, 0.0)]
    assert len(found.rows) == 12 and len(set(found.rows)) == 12
    assert found.folder == finished / "retest-k3-n12"
    shown = json.loads(json.dumps(found.as_dict()))
    assert shown["folder"] == str(found.folder) and shown["stability"][0]["alpha_ci"] == [1, 1]

    again = orc.FakeTransport(steady)
    assert orc.retest(finished, k=3, rows=12, transport=again) == found
    assert again.node_requests == []  # each repeat resumed, nothing asked


def test_the_run_and_its_cache_are_untouched_and_each_repeat_is_a_run_of_its_own(
    finished: Path,
) -> None:
    cache = finished.parent / "c.sqlite"
    files, cached = _files(finished), _cache(cache)
    calls = trace_records(finished / "traces.sqlite")
    orc.retest(finished, k=2, rows=5, transport=orc.FakeTransport(Flipper(1)))
    assert _files(finished) == files
    assert trace_records(finished / "traces.sqlite") == calls
    after = _cache(cache)
    assert {key: after[key] for key in cached} == cached  # the run's replies as they were
    assert len(after) == len(cached) + 2 * 5  # and each repeat's own beside them

    keys = {json.loads((finished / "manifest.json").read_text())["run_key"]["digest"]}
    for repeat in ("repeat-1", "repeat-2"):
        manifest = json.loads((finished / "retest-k2-n5" / repeat / "manifest.json").read_text())
        keys.add(manifest["run_key"]["digest"])
        assert manifest["parameters"]["resample"]["repeat"] == int(repeat[-1])
        (record, *_) = trace_records(finished / "retest-k2-n5" / repeat / "traces.sqlite")
        assert record["request"]["first_sample"] == int(repeat[-1])  # n = 1: index j
    assert len(keys) == 3

    # The run itself resumed: everything it had is still its own, nothing is asked.
    resumed = orc.FakeTransport(steady)
    graph, data = finished.parent / "graph.yaml", finished.parent / "rows.jsonl"
    orc.run(graph, data, out=finished, transport=resumed, cache=cache)
    assert resumed.node_requests == []


def test_a_judge_that_answers_at_random_is_found_unstable(finished: Path) -> None:
    found = orc.retest(finished, k=3, rows=ROWS, transport=orc.FakeTransport(Flipper(2)))
    (only,) = found.stability
    assert only.alpha is not None and only.alpha_ci is not None
    assert only.alpha_ci[0] < 0.0 < only.alpha_ci[1]  # no agreement beyond chance
    assert abs(only.alpha) < 0.25
    # Three draws of ten values all alike: 1 in 100; 30 rows see at most a couple.
    assert only.flip_rate is not None and only.flip_rate >= 0.9


def test_flip_rate_and_alpha_of_a_judge_flipping_at_a_known_rate(tmp_path: Path) -> None:
    p, k, n = 0.2, 3, 150
    graph = write_graph(
        tmp_path,
        {
            "name": "yes-no",
            "inputs": ["text"],
            "defaults": {"temperature": 1.0},
            "nodes": {
                "judge": {
                    "kind": "llm",
                    "prompt": "judge.jinja",
                    "output": {"reason": "string", "ok": "boolean"},
                }
            },
            "outputs": {"ok": "judge.ok"},
        },
        {"judge.jinja": "Is it fine? {{ text }}"},
    )
    data = write_rows(tmp_path / "rows.jsonl", [{"id": f"r{i}", "text": f"t{i}"} for i in range(n)])
    orc.run(graph, data, out=tmp_path / "run", transport=orc.FakeTransport(BinaryJudge(0, 0.0)))
    found = orc.retest(
        tmp_path / "run", k=k, rows=n, transport=orc.FakeTransport(BinaryJudge(3, p))
    )
    (only,) = found.stability  # the free-text reason is not a verdict: left out
    assert (only.field, only.level, only.rows) == ("ok", "nominal", n)
    expected = 1 - (1 - p) ** k - p**k  # not every repeat alike
    tolerance = 3 * (expected * (1 - expected) / n) ** 0.5
    assert only.flip_rate == pytest.approx(expected, abs=tolerance)
    assert only.alpha_ci is not None
    assert only.alpha_ci[0] <= 1 - 4 * p * (1 - p) <= only.alpha_ci[1]


def test_alpha_intervals_cover_the_true_reliability_about_95_percent() -> None:
    # Simulated yes/no judges (truth 50/50, each answer flipped with p): α = 1 − 4p(1 − p).
    sims, rows, k, p = 200, 60, 3, 0.2
    truth = 1 - 4 * p * (1 - p)
    rng = np.random.default_rng(11)
    answers = (rng.random((sims, rows))[:, :, None] < 0.5) ^ (rng.random((sims, rows, k)) < p)
    covered = 0
    for s in range(sims):
        repeats = [
            {(f"e{u}", -1): [{"ok": bool(answers[s, u, j])}] for u in range(rows)} for j in range(k)
        ]
        found = stability_of(
            "judge",
            "ok",
            "nominal",
            repeats,
            model=None,
            inputs_held=True,
            boot=Bootstrap(resamples=1000, seed=s),
        )
        assert found.alpha_ci is not None
        covered += found.alpha_ci[0] <= truth <= found.alpha_ci[1]
    # 95% nominal; a binomial 3-σ band around it (±4.6 points at 200 simulations).
    assert abs(covered / sims - 0.95) <= 3 * (0.95 * 0.05 / sims) ** 0.5


def _two_step(root: Path) -> tuple[Path, Path]:
    """draft (an LLM node) writes a line about the text; judge scores the draft."""
    graph = write_graph(
        root,
        {
            "name": "two-step",
            "inputs": ["text"],
            "defaults": {"temperature": 0.5},
            "nodes": {
                "draft": {
                    "kind": "llm",
                    "prompt": "draft.jinja",
                    "output": {"line": "string", "score": {"type": "integer", "min": 1, "max": 10}},
                },
                "judge": {
                    "kind": "llm",
                    "prompt": "judge.jinja",
                    "output": {"score": {"type": "integer", "min": 1, "max": 10}},
                },
            },
            "outputs": {"score": "judge.score"},
        },
        {"draft.jinja": "Draft: {{ text }}", "judge.jinja": "Judge: {{ draft.line }}"},
    )
    rows = [{"id": f"r{i}", "text": f"t{i}"} for i in range(10)]
    return graph, write_rows(root / "rows.jsonl", rows)


def test_one_node_is_reasked_with_its_inputs_held_at_another_temperature(tmp_path: Path) -> None:
    graph, data = _two_step(tmp_path)
    drafts = Flipper(4)

    def answer(request: FakeRequest) -> str:
        text = user_text(request.body)
        if text.startswith("Draft"):
            return json.dumps(
                {"line": f"{text} {json.loads(drafts(request))['score']}", "score": 1}
            )
        return steady(request)

    cache = tmp_path / "c.sqlite"
    orc.run(graph, data, out=tmp_path / "run", transport=orc.FakeTransport(answer), cache=cache)
    transport = orc.FakeTransport(answer)
    found = orc.retest(
        tmp_path / "run", node="judge", k=2, rows=6, temperature=0.9, transport=transport
    )
    # Only the judge is asked (the drafts come from the run's cache), at the new temperature.
    assert [user_text(r.body)[:5] for r in transport.node_requests] == ["Judge"] * 12
    assert {r.params["temperature"] for r in transport.node_requests} == {0.9}
    assert found.folder.name == "retest-k2-n6-t0.9-judge"
    (judge,) = found.stability
    assert (judge.node, judge.inputs_held, judge.flip_rate) == ("judge", True, 0.0)

    # Every LLM node re-asked: the drafts change, so the judge's inputs are not held.
    everything = orc.retest(tmp_path / "run", k=2, rows=6, transport=orc.FakeTransport(answer))
    held = {(s.node, s.field): s.inputs_held for s in everything.stability}
    assert held == {("draft", "score"): True, ("judge", "score"): False}


def test_what_a_retest_refuses(finished: Path) -> None:
    transport = orc.FakeTransport(steady)
    with pytest.raises(orc.ConfigurationError, match="k ≥ 2"):
        orc.retest(finished, k=1, transport=transport)
    with pytest.raises(orc.ConfigurationError, match=r"not an LLM node.*nope"):
        orc.retest(finished, node="nope", transport=transport)
    with pytest.raises(orc.ConfigurationError, match="sets params itself"):
        orc.retest(finished, params={"x": 1}, transport=transport)
    with pytest.raises(orc.RunFolderError, match="graph snapshot"):
        orc.retest(finished.parent, transport=transport)
    # Other weights under the run's model name: not the run's judge.
    other = orc.FakeTransport(steady, root="other-weights")
    with pytest.raises(orc.ConfigurationError, match="server judge: fake-model → other-weights"):
        orc.retest(finished, k=2, rows=3, transport=other)
    assert transport.node_requests == []


def test_a_node_of_several_samples_takes_a_fresh_block_of_indices_per_repeat(
    tmp_path: Path,
) -> None:
    graph = write_graph(
        tmp_path,
        {
            "name": "samples",
            "inputs": ["text"],
            "defaults": {"temperature": 0.8, "n": 2},
            "nodes": {
                "judge": {
                    "kind": "llm",
                    "prompt": "judge.jinja",
                    "output": {"score": {"type": "integer", "min": 1, "max": 10}},
                }
            },
            "outputs": {"scores": "judge | map(attribute='score') | list"},
        },
        {"judge.jinja": "Rate: {{ text }}"},
    )
    data = write_rows(tmp_path / "rows.jsonl", [{"id": f"r{i}", "text": f"t{i}"} for i in range(8)])
    orc.run(
        graph,
        data,
        out=tmp_path / "run",
        transport=orc.FakeTransport(steady),
        cache=tmp_path / "c.sqlite",
    )
    transport = orc.FakeTransport(steady)
    found = orc.retest(tmp_path / "run", k=3, rows=5, transport=transport)
    assert len(transport.node_requests) == 3 * 5  # both samples in one request (n = 2)
    assert {r.params["n"] for r in transport.node_requests} == {2}
    for repeat in (1, 2, 3):
        folder = found.folder / f"repeat-{repeat}"
        assert {r["request"]["first_sample"] for r in trace_records(folder / "traces.sqlite")} == {
            2 * repeat
        }
    (only,) = found.stability
    assert (only.rows, only.flip_rate, only.alpha) == (5, 0.0, pytest.approx(1.0))


def test_alpha_is_undefined_where_nothing_varies_or_nothing_was_answered_twice() -> None:
    boot = Bootstrap(resamples=50)
    alike = [{("a", -1): [{"v": "x"}], ("b", -1): [{"v": "x"}]} for _ in range(2)]
    same = stability_of("j", "v", "nominal", alike, model=None, inputs_held=True, boot=boot)
    assert (same.rows, same.alpha, same.alpha_ci, same.flip_rate) == (2, None, None, 0.0)
    once = [{("a", -1): [{"v": 3}]}, {}]
    lone = stability_of("j", "v", "interval", once, model=None, inputs_held=True, boot=boot)
    assert (lone.rows, lone.alpha, lone.flip_rate) == (0, None, None)


def _simulated_judges(p: float, sims: int, rows: int, k: int, seed: int) -> list[object]:
    """`stability_of` of `sims` simulated yes/no judges (truth 50/50, each answer flipped
    with p, so α = 1 − 4p(1 − p))."""
    rng = np.random.default_rng(seed)
    answers = (rng.random((sims, rows))[:, :, None] < 0.5) ^ (rng.random((sims, rows, k)) < p)
    found = []
    for s in range(sims):
        repeats = [
            {(f"e{u}", -1): [{"ok": bool(answers[s, u, j])}] for u in range(rows)} for j in range(k)
        ]
        found.append(
            stability_of(
                "judge",
                "ok",
                "nominal",
                repeats,
                model=None,
                inputs_held=True,
                boot=Bootstrap(resamples=500, seed=s),
            )
        )
    return found


def test_the_unreliability_test_holds_its_level_and_finds_a_weak_judge() -> None:
    """p_unreliable tests α < 0.8: a judge exactly at 0.8 is called unreliable in at most
    ~5% of simulations (binomial band), one at α 0.36 (p 0.2) nearly always."""
    from orchestrator.analysis.card.stability import RELIABLE_ALPHA

    at_floor = (1 - (RELIABLE_ALPHA) ** 0.5) / 2  # 1 − 4p(1 − p) = 0.8
    sims = 200
    boundary = _simulated_judges(at_floor, sims, rows=80, k=3, seed=21)
    rejected = sum(s.p_unreliable is not None and s.p_unreliable <= 0.05 for s in boundary)
    assert rejected / sims <= 0.05 + 3 * (0.05 * 0.95 / sims) ** 0.5
    weak = _simulated_judges(0.2, 40, rows=80, k=3, seed=22)
    found = sum(s.p_unreliable is not None and s.p_unreliable <= 0.05 for s in weak)
    assert found >= 38


def test_the_judge_card_flags_a_judge_that_answers_at_random_and_not_a_steady_one(
    finished: Path,
) -> None:
    """`judge_card(retest=K)`: the stability line joins the card's Holm-tested findings."""
    steady_card = orc.judge_card(finished, retest=3, rows=ROWS, transport=orc.FakeTransport(steady))
    assert steady_card.stability is not None
    (line,) = steady_card.stability.stability
    assert line.alpha == 1.0 and line.p_unreliable is not None and line.p_unreliable > 0.5
    assert not any(f.startswith("stability") for f in steady_card.flags)
    assert any(f.kind == "stability" for f in steady_card.findings)
    random_card = orc.judge_card(
        finished, retest=3, rows=ROWS, temperature=1.0, transport=orc.FakeTransport(Flipper(4))
    )
    flagged = [f for f in random_card.flags if f.startswith("stability: judge.score")]
    assert len(flagged) == 1 and "below 0.8" in flagged[0]
    # The JSON the CLI prints holds the retest too.
    dumped = json.loads(random_card.model_dump_json())
    assert dumped["stability"]["stability"][0]["field"] == "score"


def test_run_settings_without_a_retest_are_refused(finished: Path) -> None:
    with pytest.raises(orc.ConfigurationError, match="--retest"):
        orc.judge_card(finished, base_url="http://127.0.0.1:1/v1")
