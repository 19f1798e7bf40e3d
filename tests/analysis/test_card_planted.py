"""The judge card on runs of planted judges (FakeTransport responders): a judge that rates
longer texts higher, one that favours its own model's texts, one that always picks the
first answer and one that prefers the longer answer must be flagged; fair ones must not."""

from __future__ import annotations

import hashlib
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

import orchestrator as orc
from orchestrator.errors import ConfigurationError, LabelError
from orchestrator.providers.fake import FAKE_MODEL, FakeRequest

WORDS = [
    "the",
    "judge",
    "reads",
    "every",
    "word",
    "of",
    "a",
    "text",
    "and",
    "then",
    "decides",
    "what",
    "it",
    "is",
    "worth",
]


def _noise(text: str, salt: str, top: int) -> int:
    """A fixed pseudo-random integer in [0, top) for a text: a judge's opinion of it."""
    return int(hashlib.sha256(f"{salt}:{text}".encode()).hexdigest(), 16) % top


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def _score(content: str) -> str:
    kind, generator, text = content.split("|", 2)
    if kind == "long":
        value = 1 + min(9, len(text) // 40) if _noise(text, kind, 5) else 5
    elif kind == "self":
        value = 1 + _noise(text, kind, 6) + (4 if generator == FAKE_MODEL else 0)
    else:
        value = 1 + _noise(text, kind, 10)
    return json.dumps({"score": value})


def _pointwise_respond(request: FakeRequest) -> str:
    return _score(str(request.messages[-1]["content"]))


def _judge_node(kind: str) -> dict[str, Any]:
    return {
        "kind": "llm",
        "prompt": f"{kind}.jinja",
        "output": {"score": {"type": "integer", "min": 1, "max": 10}},
    }


POINTWISE = {
    "name": "planted_pointwise",
    "inputs": ["output", "generator"],
    "defaults": {"temperature": 0.0, "max_tokens": 40},
    "jury": ["fair", "fair_too"],
    "nodes": {
        "long": _judge_node("long"),
        "self": _judge_node("self"),
        "fair": _judge_node("fair"),
        "fair_too": _judge_node("fair_too"),
    },
    "outputs": {"long": "long.score", "self": "self.score", "fair": "fair.score"},
}


@pytest.fixture(scope="module")
def pointwise_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pointwise")
    prompts = root / "prompts"
    prompts.mkdir()
    for kind in ("long", "self", "fair"):
        (prompts / f"{kind}.jinja").write_text(f"{kind}|{{{{ generator }}}}|{{{{ output }}}}")
    # The second fair juror says the same as the first: a jury of near-copies.
    (prompts / "fair_too.jinja").write_text("fair|{{ generator }}|{{ output }}")
    graph = root / "graph.yaml"
    graph.write_text(json.dumps({**POINTWISE, "prompts": "prompts"}), encoding="utf-8")
    rng = random.Random(7)
    generators = [FAKE_MODEL, "other-a", "other-b"]
    rows = [
        {"id": f"r{i}", "output": _text(rng, rng.randint(3, 70)), "generator": generators[i % 3]}
        for i in range(60)
    ]
    out = root / "run"
    orc.run(graph, rows, out=out, transport=orc.FakeTransport(_pointwise_respond), cache=False)
    return out


def test_length_and_self_preference_are_flagged_and_fair_judges_are_not(
    pointwise_run: Path,
) -> None:
    card = orc.judge_card(pointwise_run)
    assert card.judged == "output"
    length = {b.node: b for b in card.length_bias}
    assert length["long"].spearman is not None and length["long"].spearman > 0.5
    assert length["long"].ci is not None and length["long"].ci.low > 0.0
    own = {s.node: s for s in card.self_preference}
    assert own["self"].gap is not None and own["self"].gap > 2.0
    assert own["self"].ci is not None and own["self"].ci.low > 0.0
    flagged = {f.where for f in card.findings if f.flagged}
    assert flagged == {"long.score", "self.score"}
    assert any(line.startswith("length bias: long.score") for line in card.flags)
    assert any(line.startswith("self-preference: self.score") for line in card.flags)
    assert len(card.flags) == 2


def test_reliability_distribution_and_jury(pointwise_run: Path) -> None:
    card = orc.judge_card(pointwise_run)
    lines = {r.node: r for r in card.reliability}
    assert set(lines) == {"long", "self", "fair", "fair_too"}
    assert all(r.calls == 60 and r.failures == 0 and r.reasks == 0 for r in lines.values())
    spread = {(d.node, d.field): d for d in card.distributions}
    fair = spread[("fair", "score")]
    assert fair.n == 60 and abs(sum(fair.shares.values()) - 1.0) < 1e-9
    assert 2.5 < fair.entropy <= 3.33  # ten values about evenly used: near log2(10)
    (jury,) = card.juries
    assert jury.jurors == ["fair", "fair_too"] and jury.n == 60
    assert jury.pairs[0].alpha == pytest.approx(1.0)
    assert jury.effective_jurors == pytest.approx(1.0)  # two copies count as one juror
    mixed = orc.judge_card(pointwise_run, jury=["fair", "long"]).juries[0]
    assert mixed.effective_jurors is not None and mixed.effective_jurors > 1.5


def test_unknown_juror_is_refused(pointwise_run: Path) -> None:
    with pytest.raises(ConfigurationError, match="nope"):
        orc.judge_card(pointwise_run, jury=["fair", "nope"])


def test_reasks_and_truncations_are_counted(tmp_path: Path) -> None:
    replies: dict[str, int] = {}

    def respond(request: FakeRequest) -> Any:
        text = str(request.messages[-1]["content"])
        replies[text] = replies.get(text, 0) + 1
        if replies[text] == 1 and text.endswith("0"):
            return orc.FakeAnswer(content='{"score": ', finish_reason="length")
        if replies[text] == 1 and text.endswith("1"):
            return "not json"
        return '{"score": 3}'

    graph = {**POINTWISE, "jury": [], "inputs": ["output"], "nodes": {"fair": _judge_node("x")}}
    graph["outputs"] = {"fair": "fair.score"}
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "x.jinja").write_text("{{ output }}")
    path = tmp_path / "graph.yaml"
    path.write_text(json.dumps({**graph, "prompts": "prompts"}), encoding="utf-8")
    rows = [{"id": f"r{i}", "output": f"text {i}"} for i in range(6)]
    done = orc.run(
        path, rows, out=tmp_path / "run", transport=orc.FakeTransport(respond), cache=False
    )
    (line,) = orc.judge_card(done).reliability  # what orc.run returned will do
    assert (line.calls, line.first_try_invalid, line.reasks, line.truncations) == (6, 2, 2, 1)


PAIRWISE = {
    "name": "planted_pairwise",
    "inputs": ["id", "model_a", "answer_a", "model_b", "answer_b"],
    "defaults": {"temperature": 0.0, "max_tokens": 40},
    "nodes": {
        "comparisons": {
            "kind": "compute",
            "function": "pairs",
            "args": {"candidates": "{model_a: answer_a, model_b: answer_b}", "orders": "'both'"},
        },
        "judge": {
            "kind": "llm",
            "foreach": "comparisons",
            "as": "cmp",
            "prompt": "judge.jinja",
            "output": {"verdict": {"type": "string", "enum": ["A", "B", "tie"]}},
        },
        "votes": {
            "kind": "compute",
            "function": "map_votes",
            "args": {
                "comparisons": "comparisons",
                "judgments": "judge",
                "field": "'verdict'",
                "positions": "{'A': 'first', 'B': 'second', 'tie': 'tie'}",
                "judge": "run.model",
                "case": "id",
            },
        },
    },
    "outputs": {"votes": "votes"},
}


def _pairwise_run(root: Path, verdict: Any) -> Path:
    (root / "prompts").mkdir(parents=True)
    (root / "prompts" / "judge.jinja").write_text("{{ cmp.first.text }}|||{{ cmp.second.text }}")
    graph = root / "graph.yaml"
    graph.write_text(json.dumps({**PAIRWISE, "prompts": "prompts"}), encoding="utf-8")
    rng = random.Random(11)
    rows = [
        {
            "id": f"p{i}",
            "model_a": "m1",
            "answer_a": _text(rng, rng.randint(3, 40)),
            "model_b": "m2",
            "answer_b": _text(rng, rng.randint(3, 40)),
        }
        for i in range(40)
    ]

    def respond(request: FakeRequest) -> str:
        first, second = str(request.messages[-1]["content"]).split("|||")
        return json.dumps({"verdict": verdict(first, second)})

    out = root / "run"
    orc.run(graph, rows, out=out, transport=orc.FakeTransport(respond), cache=False)
    return out


def _fair(first: str, second: str) -> str:
    """A consistent opinion of the two texts whatever the order: no position, no length."""
    better = min(first, second, key=lambda t: _noise(t, "pair", 1000))
    return "A" if better == first else "B"


def test_first_position_judge_is_flagged(tmp_path: Path) -> None:
    card = orc.judge_card(_pairwise_run(tmp_path, lambda first, second: "A"))
    (position,) = card.position_bias
    assert position.first_rate == 1.0 and position.flip_rate == 1.0
    assert position.comparisons_both_orders == 40
    assert [f.kind for f in card.findings if f.flagged] == ["position_bias"]
    assert card.flags[0].startswith("position bias: fake-model (votes) picks the first answer")


def test_longer_answer_judge_is_flagged(tmp_path: Path) -> None:
    card = orc.judge_card(_pairwise_run(tmp_path, lambda a, b: "A" if len(a) >= len(b) else "B"))
    (longer,) = card.prefer_longer
    assert longer.rate == 1.0 and longer.ci is not None and longer.ci.low == 1.0
    assert [f.kind for f in card.findings if f.flagged] == ["prefer_longer"]


def test_fair_pairwise_judge_is_not_flagged(tmp_path: Path) -> None:
    card = orc.judge_card(_pairwise_run(tmp_path, _fair))
    (position,) = card.position_bias
    assert position.first_rate == pytest.approx(0.5) and position.flip_rate == 0.0
    assert card.findings and card.flags == []


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"judged": "nope"}, "judged: 'nope' is not among the inputs"),
        ({"jury": ["fair"]}, "two different LLM nodes"),
        ({"jury": ["fair", "fair"]}, "two different LLM nodes"),
        ({"jury": ["fair", "missing"]}, "'missing' is not an LLM node"),
    ],
)
def test_card_keys_are_validated(extra: dict[str, Any], message: str) -> None:
    graph = {**POINTWISE, "jury": [], **extra}
    with pytest.raises(orc.GraphError, match=message):
        orc.graph_from_dict(graph)


def test_judged_key_names_the_measured_input(tmp_path: Path) -> None:
    graph = {
        **POINTWISE,
        "jury": [],
        "inputs": ["output", "generator", "draft"],
        "judged": "draft",
        "nodes": {"long": _judge_node("long")},
        "outputs": {"long": "long.score"},
    }
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "long.jinja").write_text("long|{{ generator }}|{{ output }}")
    path = tmp_path / "graph.yaml"
    path.write_text(json.dumps({**graph, "prompts": "prompts"}), encoding="utf-8")
    rng = random.Random(5)
    rows = []
    for i in range(30):
        text = _text(rng, rng.randint(3, 70))
        rows.append({"id": f"r{i}", "output": text, "generator": "g", "draft": text[::-1]})
    orc.run(
        path,
        rows,
        out=tmp_path / "run",
        transport=orc.FakeTransport(_pointwise_respond),
        cache=False,
    )
    card = orc.judge_card(tmp_path / "run")
    assert card.judged == "draft" and card.length_bias[0].judged == "draft"
    shuffled = orc.judge_card(tmp_path / "run", judged="generator").length_bias[0]
    assert shuffled.spearman is None  # every generator is "g": no length to rank by


def unjudged_run(root: Path) -> Path:
    """A pointwise run whose graph judges an input named `answer`, not the default
    `output`, and has no `judged:` key: the card cannot measure length bias."""
    graph = {
        **POINTWISE,
        "jury": [],
        "inputs": ["answer", "generator"],
        "nodes": {"long": _judge_node("long")},
        "outputs": {"long": "long.score"},
        "prompts": "prompts",
    }
    (root / "prompts").mkdir()
    (root / "prompts" / "long.jinja").write_text("long|{{ generator }}|{{ answer }}")
    (root / "graph.yaml").write_text(json.dumps(graph), encoding="utf-8")
    rng = random.Random(4)
    rows = [
        {"id": f"r{i}", "answer": _text(rng, rng.randint(3, 70)), "generator": "g"}
        for i in range(12)
    ]
    out = root / "run"
    fake = orc.FakeTransport(_pointwise_respond)
    orc.run(root / "graph.yaml", rows, out=out, transport=fake, cache=False)
    return out


UNMEASURED = (
    "length bias: not measured, the run has no input 'output' (its inputs: answer, "
    "generator); name the judged input with --judged or judged:"
)


def test_what_the_card_cannot_use_is_refused_or_noted(pointwise_run: Path, tmp_path: Path) -> None:
    """Item 12 of issue 35: an unknown field, an unknown judged input and labels whose ids
    match no example gave empty tables (exit 0); a graph without an `output` input lost its
    length bias without a word. Each is now one line."""
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"id": f"r{i}", "score": i}) + "\n" for i in range(5)))
    with pytest.raises(
        ConfigurationError,
        match=r"^field 'nope': no ok result of .* has it, .*\(its outputs: fair, long, self\)$",
    ):
        orc.judge_card(pointwise_run, labels=labels, field="nope")
    with pytest.raises(ConfigurationError, match=r"^field 'score' \(the default: name one"):
        orc.judge_card(pointwise_run, labels=labels)
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text("".join(json.dumps({"id": f"x{i}", "score": i}) + "\n" for i in range(5)))
    with pytest.raises(
        LabelError,
        match=rf"^{re.escape(str(elsewhere))}: none of its 5 label id\(s\) \('x0', 'x1', 'x2', …\)",
    ):
        orc.judge_card(pointwise_run, labels=elsewhere, field="fair")
    with pytest.raises(
        ConfigurationError,
        match=r"^judged 'nope': not an input of the run \(its inputs: output, generator\)$",
    ):
        orc.judge_card(pointwise_run, judged="nope")
    with pytest.raises(ConfigurationError, match=r"^field 'fair' is compared with labels"):
        orc.judge_card(pointwise_run, field="fair")
    # What is known still works, and a real input is taken as given.
    assert orc.judge_card(pointwise_run, labels=labels, field="fair").agreement is not None
    assert orc.judge_card(pointwise_run, judged="generator").judged == "generator"

    card = orc.judge_card(unjudged_run(tmp_path))
    assert card.length_bias == [] and card.notes == [UNMEASURED]
    assert orc.judge_card(tmp_path / "run", judged="answer").length_bias
