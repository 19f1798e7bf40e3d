"""The Python API as a notebook uses it: in-memory data in, DataFrames out, sweeps with
nothing written, typed errors (issue: the library core)."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer
from helpers import REPO, judge_graph, write_graph, write_rows

import orchestrator as orc

pd = pytest.importorskip("pandas")
datasets = pytest.importorskip("datasets")
pl = pytest.importorskip("polars")

PROMPTS = {"judge.jinja": "Rate 1-{{ params.scale }} for clarity:\n{{ text }}"}


def spec() -> dict[str, Any]:
    graph = judge_graph()
    return {**graph, "params": {"scale": 10}, "outputs": {"score": "judge.score"}}


ROWS = [{"id": f"e{i}", "text": f"text number {i}"} for i in range(6)]


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


@pytest.fixture
def quiet_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory and cache home that a run must leave untouched."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.chdir(home)
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    return home


def test_notebook_script_judges_dataframes_and_datasets(quiet_home: Path):
    graph = orc.Graph.from_dict(spec(), PROMPTS)
    frame = pd.DataFrame(ROWS)
    # The subject is the data containers, not HTTP: the in-process transport answers.
    fake = orc.FakeTransport()
    from_pandas = orc.run(graph, frame, transport=fake)
    from_hf = orc.run(graph, datasets.Dataset.from_pandas(frame), transport=fake)
    from_polars = orc.run(graph, pl.DataFrame(ROWS), transport=fake)
    streamed = orc.run(
        graph, datasets.IterableDataset.from_generator(lambda: iter(ROWS)), transport=fake
    )
    assert len(fake.node_requests) == 4 * len(ROWS)
    for result in (from_pandas, from_hf, from_polars, streamed):
        table = result.to_pandas()
        assert isinstance(table, pd.DataFrame)
        assert list(table["id"]) == [r["id"] for r in ROWS]
        assert set(table["status"]) == {"ok"}
        assert table["score"].between(1, 10).all()
        assert result.manifest.status == "complete"
        assert result.manifest.counts.examples_ok == len(ROWS)
        assert result.failed == []
    # The same rows give the same data fingerprint whichever container held them.
    hashes = {r.manifest.dataset["hash"] for r in (from_pandas, from_polars)}
    assert len(hashes) == 1
    assert files_under(quiet_home) == set()


def test_sweep_of_two_models_and_two_params_writes_nothing(quiet_home: Path):
    graph = orc.Graph.from_dict(spec(), PROMPTS)
    results = {}
    with FakeServer(model="judge-a") as a, FakeServer(model="judge-b") as b:
        for model, server in (("judge-a", a), ("judge-b", b)):
            for scale in (5, 10):
                results[model, scale] = orc.run(
                    graph, ROWS, base_url=server.base_url, model=model, params={"scale": scale}
                )
        prompts = {
            (s.model, json.dumps(body["messages"][-1]["content"]).split("clarity")[0])
            for s in (a, b)
            for body in s.requests
            if "clarity" in json.dumps(body["messages"])
        }
    assert len(results) == 4
    assert {r.manifest.model for r in results.values()} == {"judge-a", "judge-b"}
    # Each run's identity differs, and the param reached the prompt of every request.
    assert len({r.manifest.run_key.digest for r in results.values()}) == 4
    assert {p for _, p in prompts} == {'"Rate 1-5 for ', '"Rate 1-10 for '}
    assert files_under(quiet_home) == set()


def test_broken_graph_and_dead_server_raise_orchestrator_errors(quiet_home: Path):
    broken = {**spec(), "nodes": {"judge": {**spec()["nodes"]["judge"], "prompt": "nope.jinja"}}}
    with pytest.raises(orc.GraphError) as graph_error:
        orc.Graph.from_dict(broken, PROMPTS)
    assert isinstance(graph_error.value, orc.OrchestratorError)
    assert "nope.jinja" in str(graph_error.value)
    graph = orc.Graph.from_dict(spec(), PROMPTS)
    with FakeServer() as server:
        url = server.base_url
    with pytest.raises(orc.OrchestratorError) as dead:
        orc.run(graph, ROWS, base_url=url, timeout=2)
    assert isinstance(dead.value, orc.ServerUnavailable)
    assert url in str(dead.value)


def test_run_inside_a_running_event_loop(quiet_home: Path):
    """Jupyter runs cells inside an event loop; `orc.run` must still work there."""
    graph = orc.Graph.from_dict(spec(), PROMPTS)
    with FakeServer() as server:

        async def cell() -> orc.RunResult:
            return orc.run(graph, ROWS, base_url=server.base_url)

        result = asyncio.run(cell())
        awaited = asyncio.run(orc.arun(graph, ROWS, base_url=server.base_url))
    assert len(result.results) == len(awaited.results) == len(ROWS)


def test_string_paths_and_a_run_folder(tmp_path: Path):
    graph = write_graph(tmp_path / "g", spec(), PROMPTS)
    data = write_rows(tmp_path / "rows.jsonl", ROWS)
    with FakeServer() as server:
        first = orc.run(str(graph), str(data), base_url=server.base_url, out=str(tmp_path / "r"))
        again = orc.run(str(graph), str(data), base_url=server.base_url, out=str(tmp_path / "r"))
        with pytest.raises(orc.RunFolderError, match="param scale: 10 → 3"):
            orc.run(
                str(graph),
                str(data),
                base_url=server.base_url,
                out=tmp_path / "r",
                params={"scale": 3},
            )
    assert first.folder == tmp_path / "r"
    assert again.manifest.resumed and again.manifest.counts.examples_resumed == len(ROWS)
    assert [line.id for line in again.results] == [r["id"] for r in ROWS]
    assert (tmp_path / "r" / "results.jsonl").is_file()


def test_no_output_and_no_lasting_global_changes(quiet_home: Path, capsys: pytest.CaptureFixture):
    graph = orc.Graph.from_dict(spec(), PROMPTS)
    logger = logging.getLogger("orchestrator")
    before = (gc.get_threshold(), list(logger.handlers), logger.level, logger.propagate)
    with FakeServer() as server:
        orc.run(graph, ROWS, base_url=server.base_url)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert (gc.get_threshold(), list(logger.handlers), logger.level, logger.propagate) == before


def test_bad_rows_fail_alone_with_their_place(quiet_home: Path):
    graph = orc.Graph.from_dict(spec(), PROMPTS)
    rows = [{"id": "a", "text": "x"}, {"id": "b"}, "not a row"]
    with FakeServer() as server:
        result = orc.run(graph, rows, base_url=server.base_url)
        # An id used twice is no bad row but bad data: refused whole, before any request.
        asked = len(server.requests)
        with pytest.raises(orc.DatasetError, match=r"rows:4: duplicate id 'a'"):
            orc.run(graph, [*rows, {"id": "a", "text": "y"}], base_url=server.base_url)
        assert len(server.requests) == asked
    by_row = {line.row: line for line in result.failed}
    assert result.ok[0].id == "a"
    assert "rows:2:" in (by_row[2].error or "") and "text" in (by_row[2].error or "")
    assert "not a mapping" in (by_row[3].error or "")


def test_one_shot_iterator_is_refused_with_advice(quiet_home: Path):
    graph = orc.Graph.from_dict(spec(), PROMPTS)
    with pytest.raises(orc.DatasetError, match="can be read only once"):
        orc.run(graph, (r for r in ROWS), base_url="http://127.0.0.1:9/v1")


def test_docs_example_runs(quiet_home: Path, monkeypatch: pytest.MonkeyPatch):
    """The sweep in docs/python-api.md, executed as written against the fake server."""
    text = (REPO / "docs" / "python-api.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    example = next(b for b in blocks if "for scale in" in b)
    with FakeServer(model="judge-docs") as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("JUDGE_MODEL", "judge-docs")
        namespace: dict[str, Any] = {}
        exec(compile(example, "docs/python-api.md", "exec"), namespace)
    table = namespace["table"]
    assert len(table) == 6 and set(table["scale"]) == {5, 10}
    assert os.listdir(quiet_home) == []
    # The FakeTransport example of the seams section, on the sweep's graph and rows.
    fake_example = textwrap.dedent(next(b for b in blocks if "FakeTransport" in b))
    exec(compile(fake_example, "docs/python-api.md", "exec"), namespace)
    assert [line.outputs for line in namespace["result"].results] == [{"score": 7}] * 3


def test_results_of_a_resumed_folder_hold_each_example_once(tmp_path: Path):
    """An example that failed and then succeeded on resume is written last; `results`
    gives every example once, in source order."""
    from orchestrator.providers.fake import schema_answer

    graph = orc.graph_from_dict(spec(), PROMPTS)

    def flaky(request: Any) -> Any:
        asked = " ".join(str(m["content"]) for m in request.messages)
        return "not json" if "number 2" in asked else schema_answer(request)

    out = tmp_path / "run"
    first = orc.run(graph, ROWS, out=out, transport=orc.FakeTransport(respond=flaky), cache=False)
    assert [line.id for line in first.failed] == ["e2"]
    second = orc.run(graph, ROWS, out=out, transport=orc.FakeTransport(), cache=False)
    written = [json.loads(x)["id"] for x in (out / "results.jsonl").read_text().splitlines()]
    assert written[-1] == "e2" and len(written) == len(ROWS)
    assert [line.id for line in second.results] == [row["id"] for row in ROWS]
    assert second.failed == [] and second.manifest.counts.examples_resumed == len(ROWS) - 1


def test_a_graph_of_compute_nodes_only_needs_no_server(
    quiet_home: Path, monkeypatch: pytest.MonkeyPatch
):
    """Nothing in it talks to a model (as graphs/perq_distilled.yaml): no base_url or
    OPENAI_BASE_URL is needed, and no embedded server is looked for. A graph with an LLM
    node and none of those still says where to find one."""
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    from orchestrator.local import server as embedded

    looked: list[int] = []
    monkeypatch.setattr(embedded, "find_running", lambda port: looked.append(port))
    scored = orc.Graph.from_dict(
        {
            "name": "spread",
            "inputs": ["scores"],
            "nodes": {
                "top": {"kind": "compute", "function": "maximum", "args": {"values": "scores"}}
            },
            "outputs": {"top": "top"},
        },
        {},
    )
    result = orc.run(scored, [{"id": "a", "scores": [2, 7, 5]}])
    assert [line.outputs["top"] for line in result.results] == [7]
    assert result.manifest.counts.requests == 0 and looked == []
    with pytest.raises(orc.ConfigurationError, match="no server to talk to"):
        orc.run(orc.Graph.from_dict(spec(), PROMPTS), ROWS)
    assert looked  # that one did look for the embedded server


def test_execute_and_run_config_remain_a_deprecated_shim_over_run(tmp_path: Path):
    """`execute(RunConfig(...))` (public before `orc.run`) still runs, says it is
    deprecated, and leaves the folder `orc.run` leaves with the same settings."""
    path = write_graph(tmp_path / "g", spec(), PROMPTS)
    data = write_rows(tmp_path / "rows.jsonl", ROWS)
    fake = orc.FakeTransport()
    config = orc.RunConfig(
        graph=str(path),
        data=str(data),
        out=str(tmp_path / "old"),
        base_url="http://fake/v1",
        transport=fake,
        use_cache=False,
        params={"scale": 5},
        progress=False,
    )
    with pytest.warns(DeprecationWarning, match="orchestrator.run"):
        old = asyncio.run(orc.execute(config))
    new = orc.run(
        path,
        data,
        out=tmp_path / "new",
        base_url="http://fake/v1",
        transport=fake,
        params={"scale": 5},
    )
    assert isinstance(old, orc.RunOutcome) and old.folder == tmp_path / "old"
    assert old.manifest["status"] == "complete" == new.manifest.status
    assert old.manifest["run_key"]["digest"] == new.manifest.run_key.digest
    assert old.manifest["parameters"] == new.manifest.parameters
    assert old.summary == json.loads((tmp_path / "new" / "summary.json").read_text())
    old_lines = [json.loads(x) for x in (tmp_path / "old" / "results.jsonl").read_text().split()]
    assert {line["id"]: line["score"] for line in old_lines} == {
        line.id: line.outputs["score"] for line in new.results
    }
