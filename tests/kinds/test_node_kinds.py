"""A new node kind is one module plus its registration: `kind: lookup`, defined only here,
is parsed, checked (problems by file/node/field), scheduled (deps, foreach, when), run end
to end next to an LLM node and traced, without touching any other file."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from fakeserver import FakeServer, Reply, schema_responder
from helpers import is_canary, user_text
from pydantic import BaseModel

import orchestrator as orc
from orchestrator import GraphError
from orchestrator.graph.checks import NodeScope
from orchestrator.graph.compiled import CompiledNode
from orchestrator.graph.spec import NodeBase
from orchestrator.graph.templates import Expression
from orchestrator.kinds import (
    NodeKind,
    RunServices,
    evaluate,
    get_kind,
    kinds,
    register_kind,
    unregister_kind,
)
from orchestrator.store.reader import RunReader
from orchestrator.store.trace import NodeRecord

# -- the new kind: everything it is, in one place ------------------------------------------


class LookupNode(NodeBase):
    """`kind: lookup`: the value of `key` looked up in a fixed table; no server call."""

    kind: Literal["lookup"]
    key: str
    table: dict[str, Any]
    default: Any = None


@dataclass
class CompiledLookup(CompiledNode):
    spec: LookupNode
    key: Expression | None = None


class LookupKind(NodeKind[LookupNode, CompiledLookup]):
    name = "lookup"
    spec_model = LookupNode
    compiled = CompiledLookup

    def compile(self, cn: CompiledLookup, scope: NodeScope) -> None:
        if not cn.spec.table:
            scope.problem("the table is empty", "table")
        cn.key = scope.expression(cn.spec.key, "key")

    async def execute(
        self, cn: CompiledLookup, ctx: dict[str, Any], example: str, item: int, run: RunServices
    ) -> Any:
        assert cn.key is not None
        value = cn.spec.table.get(str(evaluate(cn.key, ctx, cn.name, "key")), cn.spec.default)
        run.trace.record(NodeRecord(example_id=example, node=cn.name, item=item, value=value))
        return value


@pytest.fixture(autouse=True)
def lookup_kind() -> Iterator[LookupKind]:
    kind = LookupKind()
    register_kind(kind)
    yield kind
    unregister_kind("lookup")


# -- a graph that uses it -------------------------------------------------------------------

BANDS = {
    str(score): "low" if score <= 3 else "mid" if score <= 7 else "high" for score in range(1, 11)
}
WORDS = {"good": 1, "bad": -1}


def spec(**band: Any) -> dict[str, Any]:
    """judge (LLM) -> band (lookup of its score); per_word: a lookup per word of the text,
    skipped for short words."""
    return {
        "name": "lookup-demo",
        "inputs": ["text"],
        "nodes": {
            "judge": {
                "kind": "llm",
                "prompt": "judge.jinja",
                "output": {"score": {"type": "integer", "min": 1, "max": 10}},
            },
            "band": {"kind": "lookup", "key": "judge.score", "table": BANDS, **band},
            "per_word": {
                "kind": "lookup",
                "foreach": "text.split()",
                "as": "word",
                "when": "word | length > 2",
                "key": "word",
                "table": WORDS,
                "default": 0,
            },
        },
        "outputs": {"score": "judge.score", "band": "band", "words": "per_word"},
    }


PROMPTS = {"judge.jinja": "Rate this text:\n{{ text }}"}
ROWS = [{"id": f"e{i}", "text": f"score {i} is good or bad"} for i in range(1, 11)]


def scored(body: dict[str, Any]) -> Reply:
    """The judge gives each text the number in it as its score."""
    if is_canary(body):
        return schema_responder(body)
    match = re.search(r"score (\d+)", user_text(body))
    assert match, user_text(body)
    return Reply(content=json.dumps({"score": int(match.group(1))}))


def problems(graph: dict[str, Any]) -> list[tuple[str, str | None, str | None, str]]:
    with pytest.raises(GraphError) as caught:
        orc.Graph.from_dict(graph, PROMPTS, name="demo.yaml")
    return [(p.file, p.node, p.field, p.message) for p in caught.value.problems]


# -- checks ---------------------------------------------------------------------------------


def test_a_graph_using_the_new_kind_compiles_with_its_edges() -> None:
    graph = orc.Graph.from_dict(spec(), PROMPTS)
    band = graph.nodes["band"]
    assert isinstance(band, CompiledLookup) and isinstance(band.key, Expression)
    assert band.kind is get_kind("lookup")
    assert band.deps == {"judge"}  # implied by `judge.score` in its key
    assert graph.order.index("judge") < graph.order.index("band")
    assert graph.nodes["per_word"].deps == set()
    assert not band.uses_server and graph.nodes["judge"].uses_server


def test_bad_fields_of_the_new_kind_are_named_by_file_node_and_field() -> None:
    found = problems(spec(table=5, tabel={}))
    assert ("demo.yaml", "band", "table", "Input should be a valid dictionary, got number") in found
    assert ("demo.yaml", "band", "tabel", "unknown key (did you mean 'table'?)") in found
    assert len(found) == 2

    # Its own compile step's problems, and the generic checks on its expressions.
    found = problems(spec(table={}, key="judge.scoer + nothing"))
    assert ("demo.yaml", "band", "table", "the table is empty") in found
    assert (
        "demo.yaml",
        "band",
        "key",
        "variable 'nothing' is not provided by the dataset inputs, params or any node",
    ) in found
    assert (
        "demo.yaml",
        "band",
        "key",
        "'judge.scoer': node 'judge' has no output field 'scoer' "
        "(did you mean 'score'? fields: score)",
    ) in found
    assert len(found) == 3


def test_unknown_kind_lists_every_registered_kind() -> None:
    graph = spec()
    graph["nodes"]["band"]["kind"] = "lokup"
    [(file, node, field, message)] = problems(graph)
    assert (file, node, field) == ("demo.yaml", "band", "kind")
    assert message == "unknown kind 'lokup': use 'llm', 'compute', 'cascade' or 'lookup'"


def test_registration_is_checked_and_undone() -> None:
    assert list(kinds()) == ["llm", "compute", "cascade", "lookup"]
    with pytest.raises(ValueError, match="already registered"):
        register_kind(LookupKind())

    class Untagged(LookupKind):
        name = "untagged"  # its spec model still says kind: lookup

    with pytest.raises(TypeError, match="Literal\\['untagged'\\]"):
        register_kind(Untagged())

    class Loose(BaseModel):  # no foreach/when/after for the engine to read
        kind: Literal["loose"]

    class LooseKind(LookupKind):
        name = "loose"
        spec_model = Loose  # type: ignore[assignment]

    with pytest.raises(TypeError, match=r"must subclass orchestrator\.graph\.spec\.NodeBase"):
        register_kind(LooseKind())
    assert list(kinds()) == ["llm", "compute", "cascade", "lookup"]

    unregister_kind("lookup")
    message = "unknown kind 'lookup': use 'llm', 'compute' or 'cascade'"
    assert problems(spec()) == [
        ("demo.yaml", "band", "kind", message),
        ("demo.yaml", "per_word", "kind", message),
    ]


# -- running --------------------------------------------------------------------------------


def expected(row: dict[str, Any]) -> dict[str, Any]:
    score = int(row["text"].split()[1])
    words = [WORDS.get(w, 0) if len(w) > 2 else None for w in row["text"].split()]
    return {"score": score, "band": BANDS[str(score)], "words": words}


def test_runs_end_to_end_in_memory_with_its_values_in_the_results() -> None:
    graph = orc.Graph.from_dict(spec(), PROMPTS)
    with FakeServer(scored) as server:
        result = orc.run(graph, ROWS, base_url=server.base_url, out=None)
    calls = [body for body in server.requests if not is_canary(body)]
    assert len(calls) == len(ROWS)  # one per judge; the lookups never ask the server
    assert result.failed == []
    lines = {line.id: line for line in result.results}
    for row in ROWS:
        assert lines[row["id"]].outputs == expected(row)
    assert {line.outputs["band"] for line in lines.values()} == {"low", "mid", "high"}


def test_its_node_runs_are_in_the_trace(tmp_path: Path) -> None:
    graph = orc.Graph.from_dict(spec(), PROMPTS)
    with FakeServer(scored) as server:
        orc.run(graph, ROWS[:3], base_url=server.base_url, out=tmp_path / "run")
    reader = RunReader(tmp_path / "run")
    for row in ROWS[:3]:
        want = expected(row)
        [band] = list(reader.node_runs(example=row["id"], node="band"))
        assert (band.status, band.value, band.item) == ("ok", want["band"], -1)
        assert band.model is None and band.messages is None  # no request was made
        runs = {r.item: r for r in reader.node_runs(example=row["id"], node="per_word")}
        # One run per word (the short ones skipped), then the whole list.
        statuses = [runs[i].status for i in range(6)]
        assert statuses == ["ok", "skipped", "skipped", "ok", "skipped", "ok"]
        assert [runs[i].value for i in (0, 3, 5)] == [0, 1, -1]  # score, good, bad
        assert runs[-1].value == want["words"]
