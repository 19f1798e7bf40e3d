"""A run folder from someone else directs no request (issue 35): what re-asks from a folder
(`judge-card --retest`, `orc.retest`, a batch folder's rounds) asks only the servers the user
names on that command — `--base-url` / `base_url=` for the run's, `--allow-server` /
`allow_servers=` for a node's own — and, with none named, refuses with one line listing the
servers the folder records and those two options, before any request. The servers here are
real sockets (the fake server), so "nothing sent" counts every request that reached them."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, Reply, schema_responder
from helpers import is_canary, judge_graph, orchestrator_command, write_graph, write_rows

import orchestrator as orc
from orchestrator.batch import BatchFolder, BatchJob, export_round, import_output
from orchestrator.servers.reask import FolderServers, Reask, reask_servers

pytestmark = pytest.mark.reliability

ROWS = [{"id": f"r{i}", "text": f"text number {i}"} for i in range(4)]
TEMPLATES = {"judge.jinja": "Rate: {{ text }}", "second.jinja": "Rate again: {{ text }}"}


def with_node_server() -> dict[str, Any]:
    """The judge, plus a node whose own server is a param the sender filled in."""
    graph = judge_graph()
    graph["params"] = {"other": None}
    graph["nodes"]["second"] = {
        **graph["nodes"]["judge"],
        "prompt": "second.jinja",
        "base_url": "params.other",
    }
    graph["outputs"]["again"] = "second.score"
    return graph


@pytest.fixture
def servers() -> Iterator[tuple[FakeServer, FakeServer, FakeServer]]:
    """The sender's server, a node server the sender allowed, and the user's own."""
    with FakeServer() as theirs, FakeServer() as node, FakeServer() as mine:
        yield theirs, node, mine


def sent_folder(root: Path, theirs: FakeServer, node: FakeServer | None = None) -> Path:
    """A finished run folder as someone else made it: against their server (and, with
    `node`, a node server they allowed by giving its param)."""
    graph_spec = with_node_server() if node is not None else judge_graph()
    graph = write_graph(root / "g", graph_spec, TEMPLATES)
    data = write_rows(root / "rows.jsonl", ROWS)
    params = {"other": node.base_url} if node is not None else {}
    orc.run(graph, data, out=root / "run", base_url=theirs.base_url, params=params, cache=False)
    return root / "run"


def quiet(*servers: FakeServer) -> list[int]:
    """How many requests each server has seen so far."""
    return [len(server.paths) for server in servers]


@pytest.mark.parametrize("node_server", [False, True], ids=["run server", "and a node server"])
def test_judge_card_retest_without_a_named_server_sends_nothing(
    tmp_path: Path, servers: tuple[FakeServer, FakeServer, FakeServer], node_server: bool
) -> None:
    """Before issue 35, `judge-card RUN --retest 2 --rows 3` sent the user's key and rows to
    the server recorded in the folder, naming it nowhere."""
    theirs, node, _ = servers
    run = sent_folder(tmp_path, theirs, node if node_server else None)
    before = quiet(theirs, node)
    done = orchestrator_command(
        "judge-card", str(run), "--retest", "2", "--rows", "3", env={"OPENAI_API_KEY": "sk-mine"}
    )
    assert quiet(theirs, node) == before  # not even the model list
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.strip()]
    recorded = [theirs.base_url, node.base_url] if node_server else [theirs.base_url]
    for named in (*recorded, "--base-url", "--allow-server"):
        assert named in line, line
    assert "Traceback" not in done.stderr


def test_judge_card_retest_asks_only_the_servers_named_on_the_command(
    tmp_path: Path, servers: tuple[FakeServer, FakeServer, FakeServer]
) -> None:
    theirs, node, mine = servers
    run = sent_folder(tmp_path, theirs, node)
    before = quiet(theirs, node)
    args = ["judge-card", str(run), "--retest", "2", "--rows", "3", "--base-url", mine.base_url]
    refused = orchestrator_command(*args)
    # The run's server named, the node's own not: refused, naming it and --allow-server.
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "--allow-server" in refused.stderr and node.base_url in refused.stderr
    assert quiet(theirs, node) == before and mine.paths == []
    # The user allows the node's server by name: asked, and the run's server still is not.
    done = orchestrator_command(*args, "--allow-server", node.base_url, "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert quiet(theirs)[0] == before[0]
    asked = [[b for b in server.requests if not is_canary(b)] for server in (mine, node)]
    assert [len(bodies) for bodies in asked] == [2 * 3, len(ROWS) + 2 * 3]  # the run's, k × rows
    told = next(line for line in done.stderr.splitlines() if "asks only" in line)
    assert mine.base_url in told and node.base_url in told and theirs.base_url not in told
    stability = json.loads(done.stdout)["stability"]["stability"]
    assert {line["node"] for line in stability} == {"judge", "second"}


def test_retest_in_python_refuses_the_folders_servers_and_any_fallback(
    tmp_path: Path,
    servers: tuple[FakeServer, FakeServer, FakeServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    theirs, node, mine = servers
    run = sent_folder(tmp_path, theirs, node)
    before = quiet(theirs, node)
    # Not OPENAI_BASE_URL, not the embedded server: only what the caller names.
    monkeypatch.setenv("OPENAI_BASE_URL", mine.base_url)
    with pytest.raises(orc.ConfigurationError) as none:
        orc.retest(run, k=2, rows=3)
    message = str(none.value)
    assert "\n" not in message
    for named in (theirs.base_url, node.base_url, "base_url=", "allow_servers="):
        assert named in message, message
    # The node server the sender allowed (by a param the folder records) is not the user's.
    with pytest.raises(orc.ConfigurationError, match="node 'second'"):
        orc.retest(run, k=2, rows=3, base_url=mine.base_url)
    assert quiet(theirs, node) == before and mine.paths == []


def test_retest_says_which_servers_it_asks_before_the_first_request(
    tmp_path: Path,
    servers: tuple[FakeServer, FakeServer, FakeServer],
    caplog: pytest.LogCaptureFixture,
) -> None:
    theirs, _, mine = servers
    run = sent_folder(tmp_path, theirs, mine)  # its node server is one the user has too
    before = quiet(theirs)
    told_first: list[bool] = []

    def answer(body: dict[str, Any]) -> Reply:
        told_first.append(any("asks only" in r.getMessage() for r in caplog.records))
        return schema_responder(body)

    mine.responder = answer
    with caplog.at_level(logging.INFO, logger="orchestrator"):
        found = orc.retest(run, k=2, rows=3, base_url=mine.base_url, allow_servers=[mine.base_url])
    assert told_first and all(told_first)
    assert {s.node for s in found.stability} == {"judge", "second"}
    assert quiet(theirs) == before


def batch_folder_from_someone_else(root: Path, url: str) -> BatchFolder:
    """A batch folder whose job's params point a node, through a named provider, at `url`."""
    graph = judge_graph()
    graph["params"] = {"judge_url": None}
    graph["nodes"]["judge"].update(base_url="params.judge_url", provider="openai")
    path = write_graph(root / "g", graph, TEMPLATES)
    folder = BatchFolder(root / "batch")
    folder.save_job(
        BatchJob(
            graph=path,
            data=write_rows(root / "rows.jsonl", ROWS),
            model="fake-model",
            params={"judge_url": url},
            cache=root / "cache.sqlite",
            server_root="/models/fake",
        )
    )
    return folder


def test_a_batch_folder_directs_no_request(tmp_path: Path) -> None:
    """Before issue 35, `batch export --dir` / `batch import` of a folder whose job named a
    node's server (a param, with `provider: openai`) sent that server the rows and key."""
    with FakeServer() as theirs:
        folder = batch_folder_from_someone_else(tmp_path, theirs.base_url)
        with pytest.raises(orc.ConfigurationError, match="--allow-server") as refused:
            asyncio.run(export_round(folder))
        assert theirs.base_url in str(refused.value) and "\n" not in str(refused.value)
        output = tmp_path / "out.jsonl"
        output.write_text("")
        with pytest.raises(orc.ConfigurationError, match="--allow-server"):
            asyncio.run(import_output(folder, output, partial=True))
        assert theirs.paths == []
        # Named on the command, it is the user's to ask.
        done = asyncio.run(export_round(folder, allow_servers=[theirs.base_url]))
    assert done.round is None and done.state.ok == len(ROWS)
    assert len(theirs.requests) == len(ROWS)


def test_the_rule_itself() -> None:
    """`reask_servers`, the one rule later re-asking commands call, on its own."""
    found = FolderServers(Path("RUN"), run=("http://a:1/v1",), nodes={"second": ("http://b:2/v1",)})
    with pytest.raises(orc.ConfigurationError) as none:
        reask_servers(found, base_url=None)
    assert str(none.value).startswith("RUN records http://a:1/v1 (its run's server), ")
    assert "--base-url URL" in str(none.value) and "--allow-server URL" in str(none.value)
    with pytest.raises(orc.ConfigurationError, match=r"did not name http://b:2/v1 \(node"):
        reask_servers(found, base_url="http://mine:3/v1")
    chosen = reask_servers(found, base_url="http://mine:3/v1", allow_servers=["http://b:2/v1/"])
    assert chosen == Reask(base_url="http://mine:3/v1", allow_servers=("http://b:2/v1/",))
    # The command's own transport stands for the run's server; trust allows node servers.
    assert reask_servers(found, base_url=None, transport="t", trust=True).base_url is None
    replicas = reask_servers(found, base_url=["http://m:1/v1", "http://m:2/v1"], trust=True)
    assert replicas.base_url == ["http://m:1/v1", "http://m:2/v1"]
