"""`orchestrator diff` / `orc.diff` (issue 28): two runs of one graph over the same examples,
node by node. A change planted in one upstream node must be named as the first difference
for exactly the examples it was planted in, with the nodes downstream counted as changed;
foreach items, n samples and once-nodes are compared too."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import orchestrator as orc
from orchestrator.analysis.diff import RunDiff, path_anchor
from orchestrator.providers.fake import FakeRequest

N = 10
PLANTED = {"e01", "e04", "e07"}
SPEC: dict[str, Any] = {
    "name": "layered",
    "inputs": ["text", "items"],
    "defaults": {"temperature": 0.0, "max_tokens": 60},
    "nodes": {
        "steps": {
            "kind": "llm",
            "once": True,
            "prompt": "steps.jinja",
            "output": {"steps": "string"},
        },
        "extract": {"kind": "llm", "prompt": "extract.jinja", "output": {"key": "string"}},
        "check": {
            "kind": "llm",
            "prompt": "check.jinja",
            "foreach": "items",
            "as": "it",
            "output": {"ok": "boolean"},
        },
        "sample": {
            "kind": "llm",
            "prompt": "sample.jinja",
            "n": 3,
            "temperature": 0.7,
            "output": {"s": "integer"},
        },
        "judge": {
            "kind": "llm",
            "prompt": "judge.jinja",
            "output": {"score": {"type": "integer", "min": 1, "max": 10}},
        },
    },
    "outputs": {"score": "judge.score", "checks": "check", "samples": "sample"},
}
PROMPTS = {
    "steps.jinja": "STEPS: write the evaluation steps.",
    "extract.jinja": "EXTRACT [{{ steps.steps }}] <<{{ text }}>>",
    "check.jinja": "CHECK {{ it }} <<{{ text }}>>",
    "sample.jinja": "SAMPLE <<{{ text }}>>",
    "judge.jinja": "JUDGE {{ extract.key }} <<{{ text }}>>",
}
ROWS = [{"id": f"e{i:02d}", "text": f"t{i}", "items": ["x", "y", "z"]} for i in range(N)]


def responder(
    steps: str = "S1",
    key: Callable[[str], str] = lambda t: f"k-{t}",
    check: Callable[[str, str], bool] = lambda it, t: True,
    samples: Callable[[str], list[int]] = lambda t: [1, 2, 3],
) -> Callable[[FakeRequest], Any]:
    """Answers each node from its prompt; the judge scores by the extracted key, so a change
    in `extract` (or in `steps`, which extract reads) moves the final score."""

    def respond(request: FakeRequest) -> Any:
        text = request.messages[0]["content"]
        row = text.split("<<")[-1].split(">>")[0]
        if text.startswith("STEPS"):
            return json.dumps({"steps": steps})
        if text.startswith("EXTRACT"):
            found = text.split("[")[1].split("]")[0]
            return json.dumps({"key": key(row) + ("" if found == "S1" else f"/{found}")})
        if text.startswith("CHECK"):
            return json.dumps({"ok": check(text.split()[1], row)})
        if text.startswith("SAMPLE"):
            return [json.dumps({"s": s}) for s in samples(row)]
        extracted = text.split()[1]
        return json.dumps({"score": 1 + sum(map(ord, extracted)) % 10})

    return respond


def run(out: Path, respond: Callable[[FakeRequest], Any]) -> Path:
    graph = orc.Graph.from_dict(SPEC, prompts=PROMPTS)
    fake = orc.FakeTransport(respond, models=["judge"])
    orc.run(graph, ROWS, out=out, transport=fake, model="judge", overwrite=True, cache=False)
    return out


def _planted_key(t: str) -> str:
    # Chosen so the judge's score really moves: a changed key with the same score would be a
    # node difference that never reaches the output.
    return f"k-{t}" if f"e0{t[1:]}" not in PLANTED else f"other-{t}!"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("diff")
    return {
        "a": run(root / "a", responder()),
        "again": run(root / "again", responder()),
        "planted": run(root / "planted", responder(key=_planted_key)),
        "item": run(root / "item", responder(check=lambda it, t: not (it == "y" and t == "t2"))),
        "sample": run(
            root / "sample", responder(samples=lambda t: [1, 5, 3] if t == "t3" else [1, 2, 3])
        ),
        "once": run(root / "once", responder(steps="S3")),
        "two": run(
            root / "two",
            responder(key=_planted_key, samples=lambda t: [9, 9, 9] if t == "t1" else [1, 2, 3]),
        ),
    }


def counts(found: RunDiff) -> dict[str, tuple[int, int]]:
    return {n.node: (n.changed, n.compared) for n in found.nodes}


def test_identical_runs_give_no_difference(runs: dict[str, Path]) -> None:
    found = orc.diff(runs["a"], runs["again"])
    assert found.identical
    assert found.changed == 0 and found.differences == []
    assert found.order == ["steps", "extract", "check", "sample", "judge"]
    assert counts(found) == {
        "steps": (0, 1),
        "extract": (0, N),
        "check": (0, N),
        "sample": (0, N),
        "judge": (0, N),
    }
    assert found.shared == N and not found.only_in_a and not found.only_in_b


def test_a_planted_upstream_change_is_the_first_difference(runs: dict[str, Path]) -> None:
    found = orc.diff(runs["a"], runs["planted"])
    assert not found.identical
    assert {d.example for d in found.differences} == PLANTED
    assert all(d.node == "extract" for d in found.differences)
    # extract changed for exactly the planted rows and judge, downstream, with them.
    assert counts(found)["extract"] == (3, N)
    assert counts(found)["judge"] == (3, N)
    assert counts(found)["check"] == (0, N) and counts(found)["steps"] == (0, 1)
    first = next(d for d in found.differences if d.example == "e04")
    assert first.value_a == {"key": "k-t4"} and first.value_b == {"key": "other-t4!"}
    assert first.changed_nodes == ["extract", "judge"]
    assert first.parted_at == ["extract"]  # judge differs only by what it read
    assert first.outputs_a["score"] != first.outputs_b["score"]
    assert first.link_a == f"{runs['a'] / 'report.html'}#example=e04&node=extract"
    assert first.link_b == f"{runs['planted'] / 'report.html'}#example=e04&node=extract"


def test_a_foreach_item_and_a_sample_are_compared_by_position(runs: dict[str, Path]) -> None:
    item = orc.diff(runs["a"], runs["item"])
    (only,) = item.differences
    assert only.example == "e02" and only.node == "check"
    assert (only.parts, only.parts_changed, only.first_part) == (3, 1, 1)
    assert counts(item)["check"] == (1, N) and counts(item)["judge"] == (0, N)
    sample = orc.diff(runs["a"], runs["sample"])
    (only,) = sample.differences
    assert only.example == "e03" and only.node == "sample"
    assert (only.parts, only.parts_changed, only.first_part) == (3, 1, 1)
    assert only.value_b == [{"s": 1}, {"s": 5}, {"s": 3}]


def test_a_changed_once_node_is_every_examples_first_difference(runs: dict[str, Path]) -> None:
    found = orc.diff(runs["a"], runs["once"])
    assert counts(found)["steps"] == (1, 1)
    assert counts(found)["extract"] == (N, N)
    assert found.changed == N
    assert all(d.node == "steps" and d.once for d in found.differences)
    assert found.differences[0].value_b == {"steps": "S3"}


def test_runs_that_cannot_be_diffed_are_refused(runs: dict[str, Path], tmp_path: Path) -> None:
    other = orc.Graph.from_dict({**SPEC, "name": "other"}, prompts=PROMPTS)
    fake = orc.FakeTransport(responder(), models=["judge"])
    orc.run(other, ROWS, out=tmp_path / "other", transport=fake, model="judge", cache=False)
    with pytest.raises(orc.ConfigurationError, match="different graphs"):
        orc.diff(runs["a"], tmp_path / "other")
    disjoint = [{**row, "id": f"z{row['id']}"} for row in ROWS]
    graph = orc.Graph.from_dict(SPEC, prompts=PROMPTS)
    orc.run(graph, disjoint, out=tmp_path / "z", transport=fake, model="judge", cache=False)
    with pytest.raises(orc.ConfigurationError, match="share no example"):
        orc.diff(runs["a"], tmp_path / "z")
    orc.run(graph, ROWS[:7], out=tmp_path / "part", transport=fake, model="judge", cache=False)
    found = orc.diff(runs["a"], tmp_path / "part")
    assert found.only_in_a == ["e07", "e08", "e09"] and found.only_in_b == []
    assert found.shared == 7 and found.identical
    assert any("3 examples only in a" in note for note in found.notes)


def test_an_id_that_needs_quoting_keeps_it_in_the_link() -> None:
    assert path_anchor("odd id #1 & é/2", "judge") == (
        "example=odd%20id%20%231%20%26%20%C3%A9%2F2&node=judge"
    )


def broken(request: FakeRequest) -> Any:
    text = request.messages[0]["content"]
    if text.startswith("JUDGE") and "<<t5>>" in text:
        return "not JSON"  # the judge of e05 fails in this run
    return responder()(request)


def test_a_failed_node_differs_by_its_status(runs: dict[str, Path], tmp_path: Path) -> None:
    found = orc.diff(runs["a"], run(tmp_path / "broken", broken))
    (only,) = found.differences
    assert (only.example, only.node, only.status_a, only.status_b) == (
        "e05",
        "judge",
        "ok",
        "failed",
    )
    assert (only.node_status_a, only.node_status_b) == ("ok", "failed")
    assert only.shown("b") == "(failed)" and only.shown("a") == json.dumps(only.value_a)
    assert counts(found)["judge"] == (1, N)
    # The failure stopped e05 before check gathered its items and before sample ran: those
    # differ in the trace, but the runs part at the judge, the first node both settled.
    assert only.changed_nodes == ["check", "sample", "judge"]


def test_graphs_with_other_nodes_are_refused_naming_them(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    nodes = {k: v for k, v in SPEC["nodes"].items() if k != "sample"}
    outputs = {k: v for k, v in SPEC["outputs"].items() if k != "samples"}
    graph = orc.Graph.from_dict({**SPEC, "nodes": nodes, "outputs": outputs}, prompts=PROMPTS)
    fake = orc.FakeTransport(responder(), models=["judge"])
    orc.run(graph, ROWS, out=tmp_path / "fewer", transport=fake, model="judge", cache=False)
    with pytest.raises(orc.ConfigurationError, match=r"different nodes.*only a has sample"):
        orc.diff(runs["a"], tmp_path / "fewer")


def test_a_run_held_in_memory_is_refused() -> None:
    graph = orc.Graph.from_dict(SPEC, prompts=PROMPTS)
    fake = orc.FakeTransport(responder(), models=["judge"])
    held = orc.run(graph, ROWS[:2], transport=fake, model="judge", cache=False)
    with pytest.raises(orc.ConfigurationError, match="held in memory"):
        orc.diff(held, held)


def test_without_a_snapshot_the_other_runs_graph_gives_the_order(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    # Tied nodes run in file order, so the trace's order alone could differ from the graph's.
    copy = tmp_path / "old"
    shutil.copytree(runs["planted"], copy)
    shutil.rmtree(copy / "snapshot")
    found = orc.diff(copy, runs["a"])
    assert found.order == ["steps", "extract", "check", "sample", "judge"]
    assert any("keeps no graph snapshot" in note for note in found.notes)
    assert {d.example for d in found.differences} == PLANTED
    assert all(d.node == "extract" for d in found.differences)
    assert json.loads(found.model_dump_json())["identical"] is False


def test_a_resumed_run_is_read_at_its_latest_values(runs: dict[str, Path], tmp_path: Path) -> None:
    folder = run(tmp_path / "resumed", broken)
    graph = orc.Graph.from_dict(SPEC, prompts=PROMPTS)
    fake = orc.FakeTransport(responder(), models=["judge"])
    orc.run(graph, ROWS, out=folder, transport=fake, model="judge", cache=False)  # resume
    judged = [r for r in orc.RunReader(folder).node_runs("e05", "judge")]
    assert [r.status for r in judged] == ["failed", "ok"]  # both kept in the trace
    assert orc.diff(runs["a"], folder).identical


def test_two_independent_changes_are_both_where_the_runs_part(runs: dict[str, Path]) -> None:
    found = orc.diff(runs["a"], runs["two"])
    e01 = next(d for d in found.differences if d.example == "e01")
    assert e01.node == "extract" and e01.changed_nodes == ["extract", "sample", "judge"]
    assert e01.parted_at == ["extract", "sample"]
    assert e01.where() == "extract; also parts at sample"
    # A changed once-node is where every example parts; the nodes reading it inherit it.
    once = orc.diff(runs["a"], runs["once"])
    assert all(d.parted_at == ["steps"] for d in once.differences)
