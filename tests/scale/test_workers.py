"""`--workers N`: one run's rows in N processes, one run folder, one cache (issue 17).

The workload is the kill-and-resume diamond (three LLM calls per example, 0.1–0.3 s per
reply from the fake server), so a kill finds examples half done in several processes.
Everything is checked through what a user has: the folder's files, the server's request
log, the command's exit code and words.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from fakeserver import FakeServer, Reply, latency_responder, schema_responder
from helpers import is_canary, requests_per_call, user_text
from test_kill_resume import (
    NODES,
    ROOT,
    Cli,
    Workload,
    half_done,
    integrity,
    llm_latency,
    lost_rows,
    make_workload,
    manifest,
    node_requests,
    result_ids,
    traced,
    wait_until,
)
from test_kill_resume import start_cli as start_run_cli

import orchestrator as orc
from orchestrator.errors import ConfigurationError, RunFolderError
from orchestrator.report import build_report

pytestmark = pytest.mark.reliability

EXAMPLES = 60


def start_cli(work: Workload, out: Path, base_url: str, cache: Path, *extra: str) -> Cli:
    """`python -m orchestrator run …` at concurrency 8 with `extra` flags, as typed."""
    return start_run_cli(work, out, base_url, cache, concurrency=8, extra=extra)


def run_api(work: Workload, out: Path, base_url: str, cache: Path, **options: Any) -> Any:
    return orc.run(
        work.graph, work.data, base_url=base_url, out=out, cache=cache, concurrency=8, **options
    )


def node_rows(out: Path) -> list[tuple[Any, ...]]:
    """(id, example, node, item, status, value) of every node run in the trace."""
    db = sqlite3.connect(out / "traces.sqlite")
    try:
        return db.execute(
            "SELECT id, example_id, node, item, status, value FROM node_runs ORDER BY id"
        ).fetchall()
    finally:
        db.close()


def worker_pids(out: Path, count: int, cli: Cli) -> list[int]:
    """The worker processes the running command lists in its manifest."""

    def listed() -> list[dict[str, Any]]:
        if not (out / "manifest.json").exists():  # written (atomically) once it starts
            return []
        return list(manifest(out).get("workers") or [])

    wait_until(lambda: len(listed()) == count, f"{count} workers listed", cli)
    return [int(worker["pid"]) for worker in listed()]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (dead, not yet reaped) counts as gone.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


def test_two_workers_give_the_results_and_trace_of_one(tmp_path: Path) -> None:
    """Same lines, same trace shape, one folder; then a second folder from the same cache
    sends nothing: the workers shared the one response cache."""
    work = make_workload(tmp_path, range(EXAMPLES))
    cache = tmp_path / "cache.sqlite"
    with FakeServer(schema_responder) as server:
        one = run_api(work, tmp_path / "one", server.base_url, tmp_path / "own.sqlite")
        two = run_api(work, tmp_path / "two", server.base_url, cache, workers=2)
        sent = node_requests(server)
        again = run_api(work, tmp_path / "again", server.base_url, cache, workers=2)
        sent_again = node_requests(server) - sent

    assert two.manifest.status == "complete"
    assert {line.id: line.outputs for line in two.results} == {
        line.id: line.outputs for line in one.results
    }
    assert [line.id for line in two.results] == work.ids  # in the source's order
    assert sorted(result_ids(tmp_path / "two")) == sorted(work.ids)
    # Both workers took rows, and they are two processes other than this one.
    workers = two.manifest.workers
    pids = {worker["pid"] for worker in workers}
    assert len(pids) == 2 and os.getpid() not in pids
    assert sum(w["examples"] for w in workers) == EXAMPLES
    assert all(w["examples"] >= EXAMPLES // 4 for w in workers), workers  # both did a share
    # The trace: each (example, node) once, ids unique, every attempt tied to a node run.
    rows = node_rows(tmp_path / "two")
    assert Counter((r[1], r[2]) for r in rows if r[4] == "ok") == Counter(
        (e, n) for e in work.ids for n in NODES
    )
    assert len({r[0] for r in rows}) == len(rows)
    db = sqlite3.connect(tmp_path / "two" / "traces.sqlite")
    orphans = db.execute(
        "SELECT COUNT(*) FROM attempts WHERE node_run_id NOT IN (SELECT id FROM node_runs)"
    ).fetchone()[0]
    schemas = db.execute("SELECT COUNT(*) FROM schemas").fetchone()[0]
    db.close()
    assert orphans == 0 and schemas > 0
    assert {r[1:] for r in rows} == {r[1:] for r in node_rows(tmp_path / "one")}
    # Counters summed over workers: one request per call, none counted twice.
    assert two.manifest.counts.examples_ok == EXAMPLES
    assert two.manifest.counts.requests == len(NODES) * EXAMPLES + 1  # + the canary
    assert sent == 2 * len(NODES) * EXAMPLES
    assert sent_again == 0 and again.manifest.counts.cache_hits == len(NODES) * EXAMPLES
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == sorted(
        p.name for p in (tmp_path / "one").iterdir()
    )
    # The one reader and the report take the folder as any run's.
    reader = orc.RunReader(tmp_path / "two")
    assert len(reader.latest_results()) == EXAMPLES
    assert build_report(tmp_path / "two").stat().st_size > 0


def test_parent_killed_then_resumed_with_workers(tmp_path: Path) -> None:
    """SIGKILL to the command (the owner): its workers exit on their own, and the same
    command resumes, reusing half-done examples' finished nodes from the trace."""
    work = make_workload(tmp_path, range(EXAMPLES))
    out, cache = tmp_path / "run", tmp_path / "cache.sqlite"
    with FakeServer(llm_latency) as server:
        first = start_cli(work, out, server.base_url, cache, "--workers", "2")
        pids = worker_pids(out, 2, first)
        target = len(NODES) * EXAMPLES // 2
        wait_until(lambda: node_requests(server) >= target, f"{target} requests", first)
        first.proc.send_signal(signal.SIGKILL)
        assert first.wait() == -signal.SIGKILL
        deadline = time.monotonic() + 30
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(alive(pid) for pid in pids), "workers outlived their owner"
        assert integrity(out / "traces.sqlite") == "ok"
        kept = result_ids(out, allow_torn_tail=True)
        partial = half_done(out)

        second = start_cli(work, out, server.base_url, cache, "--workers", "2")
        assert second.wait() == 0, second.output()
        per_call = requests_per_call(server.requests)

    assert "Resuming" in second.output()
    ids = result_ids(out)
    assert lost_rows(ids, work.ids) == 0
    assert set(kept) <= set(ids)
    after = manifest(out)
    assert after["status"] == "complete" and after["resumed"] is True
    assert after["counts"]["examples_resumed"] == len(set(kept))
    # Half-done examples were finished from the trace, not asked again.
    again = {e for e, node in traced(out, after["run_id"]) if node == "extract"}
    assert partial, "the kill should have found examples half done"
    assert not again & partial
    assert len(per_call) == len(NODES) * EXAMPLES


def test_worker_killed_mid_run_stops_with_a_clear_error_and_resumes(tmp_path: Path) -> None:
    """SIGKILL to one worker: the command stops (exit 1) saying which worker died and how
    to resume; what was reported is kept; the same command finishes every example once."""
    work = make_workload(tmp_path, range(EXAMPLES))
    out, cache = tmp_path / "run", tmp_path / "cache.sqlite"
    with FakeServer(llm_latency) as server:
        first = start_cli(work, out, server.base_url, cache, "--workers", "2")
        victim = worker_pids(out, 2, first)[0]
        wait_until(lambda: len(result_ids(out, allow_torn_tail=True)) >= 5, "5 lines", first)
        os.kill(victim, signal.SIGKILL)
        code = first.wait()
        said = " ".join(first.output().split())
        assert code == 1, said
        assert f"pid {victim}" in said and "killed by SIGKILL" in said
        assert "re-run the same command to resume" in said
        assert "Traceback" not in said
        stopped = manifest(out)
        assert stopped["status"] == "error" and "died" in stopped["error"]
        kept = result_ids(out)
        assert kept and len(kept) == len(set(kept))

        second = start_cli(work, out, server.base_url, cache, "--workers", "2")
        assert second.wait() == 0, second.output()

    ids = result_ids(out)
    assert lost_rows(ids, work.ids) == 0
    assert manifest(out)["status"] == "complete"


def test_lock_refuses_a_second_run_while_workers_run(tmp_path: Path) -> None:
    work = make_workload(tmp_path, range(EXAMPLES))
    out, cache = tmp_path / "run", tmp_path / "cache.sqlite"
    with FakeServer(llm_latency) as server:
        first = start_cli(work, out, server.base_url, cache, "--workers", "2")
        worker_pids(out, 2, first)
        with pytest.raises(RunFolderError, match="being written by another run"):
            run_api(work, out, server.base_url, cache, workers=2)
        first.proc.send_signal(signal.SIGINT)
        assert first.wait() == 130, first.output()
    assert manifest(out)["status"] == "interrupted"
    assert len(result_ids(out)) == len(set(result_ids(out)))


def test_workers_setting_is_checked(tmp_path: Path) -> None:
    work = make_workload(tmp_path, range(2))
    with pytest.raises(ConfigurationError, match="--workers"):
        run_api(work, tmp_path / "run", "http://127.0.0.1:9/v1", tmp_path / "c", workers=0)
    cli = subprocess.run(
        [
            *(sys.executable, "-m", "orchestrator", "run", str(work.graph)),
            *("--data", str(work.data), "--base-url", "http://127.0.0.1:9/v1"),
            *("--workers", "many"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert cli.returncode != 0 and "--workers" in cli.stdout + cli.stderr


def test_ray_executor_without_ray_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    work = make_workload(tmp_path, range(2))
    with (
        FakeServer() as server,
        pytest.raises(ConfigurationError, match=r"orchestrator-judge\[scale\]"),
    ):
        run_api(work, tmp_path / "run", server.base_url, tmp_path / "c", executor="ray")
    assert not (tmp_path / "run").exists()  # said before the folder was touched


def test_ray_flag_without_ray_says_how_to_install(tmp_path: Path) -> None:
    """`--ray local` where `import ray` fails: exit 1 naming the extra, before any row."""
    shadow = tmp_path / "shadow" / "ray"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('no ray here')\n")
    work = make_workload(tmp_path, range(2))
    with FakeServer() as server:
        cli = subprocess.run(
            [
                *(sys.executable, "-m", "orchestrator", "run", str(work.graph)),
                *("--data", str(work.data), "--out", str(tmp_path / "run")),
                *("--base-url", server.base_url, "--ray", "local"),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": f"{shadow.parent}{os.pathsep}{ROOT}"},
            check=False,
        )
    said = " ".join((cli.stdout + cli.stderr).split())
    assert cli.returncode == 1, said
    assert "pip install 'orchestrator-judge[scale]'" in said
    assert not (tmp_path / "run").exists()


def dict_graph() -> orc.Graph:
    """A one-judge graph built in Python, its template given as text."""
    return orc.graph_from_dict(
        {
            "name": "judge",
            "inputs": ["text"],
            "nodes": {
                "judge": {
                    "kind": "llm",
                    "prompt": "judge.jinja",
                    "output": {"score": {"type": "integer", "min": 1, "max": 10}},
                }
            },
            "outputs": {"score": "judge.score"},
        },
        {"judge.jinja": "Rate {{ text }}"},
    )


def test_workers_run_a_graph_built_in_python_kept_in_memory() -> None:
    """A graph from a dict (its templates as texts) and no run folder: the workers compile
    the same graph (same hash) and the lines come back in the source's order."""
    graph = dict_graph()
    rows: list[dict[str, Any]] = [{"id": f"r{i}", "text": f"text {i}"} for i in range(40)]
    rows.append({"text": None})  # a bad row fails in a worker as in one process
    with FakeServer() as server:
        one = orc.run(graph, rows, base_url=server.base_url)
        two = orc.run(graph, rows, base_url=server.base_url, workers=2)
    assert two.folder is None and two.manifest.status == "complete"
    assert [line.model_dump() for line in two.results] == [
        line.model_dump() for line in one.results
    ]
    assert two.failed and "null" in (two.failed[0].error or "")


def test_the_number_of_workers_is_not_part_of_the_run_key(tmp_path: Path) -> None:
    """A folder written by two workers is resumed by one process (and the other way):
    the same key, every example skipped, nothing sent again."""
    work = make_workload(tmp_path, range(20))
    out, cache = tmp_path / "run", tmp_path / "cache.sqlite"
    with FakeServer(schema_responder) as server:
        two = run_api(work, out, server.base_url, cache, workers=2)
        sent = node_requests(server)
        one = run_api(work, out, server.base_url, cache)
        again = run_api(work, out, server.base_url, cache, workers=2)
        assert node_requests(server) == sent
    assert one.manifest.run_key == two.manifest.run_key == again.manifest.run_key
    assert one.manifest.resumed and again.manifest.resumed
    assert one.manifest.counts.examples_resumed == again.manifest.counts.examples_resumed == 20
    assert lost_rows(result_ids(out), work.ids) == 0


def test_workers_spread_over_replicas_and_record_which_served(tmp_path: Path) -> None:
    """Two workers against two replicas of one model: each worker rebuilds the endpoint
    from every replica URL (not one joined name), so both replicas serve, every attempt
    in the one trace names a real replica, and the results equal one process's."""
    graph = dict_graph()
    rows: list[dict[str, Any]] = [{"id": f"r{i}", "text": f"text {i}"} for i in range(40)]
    with FakeServer() as a, FakeServer() as b:
        urls = [a.base_url, b.base_url]
        one = orc.run(graph, rows, base_url=urls, concurrency=4)
        before = {url: len(s.requests) for url, s in ((a.base_url, a), (b.base_url, b))}
        two = orc.run(graph, rows, base_url=urls, concurrency=4, workers=2, out=tmp_path / "run")
        served = {
            url: len(s.requests) - before[url] for url, s in ((a.base_url, a), (b.base_url, b))
        }
    assert two.manifest.status == "complete"
    assert [line.model_dump() for line in two.results] == [
        line.model_dump() for line in one.results
    ]
    assert all(count > 0 for count in served.values()), served
    with sqlite3.connect(tmp_path / "run" / "traces.sqlite") as db:
        replicas = [r for (r,) in db.execute("SELECT replica FROM attempts WHERE kind = 'ok'")]
    assert len(replicas) == len(rows) and set(replicas) == set(urls)


def test_each_worker_keeps_every_replica_full(tmp_path: Path) -> None:
    """Six replicas at a fixed 16 each, two workers: each worker holds 8 per replica, 48 in
    all, so it must be handed at least that many examples. Its share used to be sized from
    one server's limit (32 examples per worker), which left every replica about a third
    idle (peaks of 10-12 of its 16 slots)."""
    graph = dict_graph()
    rows: list[dict[str, Any]] = [{"id": f"r{i}", "text": f"text {i}"} for i in range(400)]
    servers = [FakeServer(latency_responder(0.3)) for _ in range(6)]
    for server in servers:
        server.start()
    try:
        result = orc.run(
            graph, rows, base_url=[s.base_url for s in servers], concurrency=16, workers=2
        )
        peaks = [server.peak_running for server in servers]
    finally:
        for server in servers:
            server.stop()
    assert result.manifest.counts.examples_ok == len(rows)
    assert min(peaks) >= 14, peaks  # 16 each when full


ENV_MODULE = """
import os


def mark(text):
    return os.environ.get("ORCHESTRATOR_TEST_MARK", "unset")
"""

ENV_GRAPH = """
name: env-mark
prompts: .
inputs: [text]
nodes:
  mark:
    kind: compute
    function: {module}:mark
    args: {{text: text}}
outputs: {{mark: mark}}
"""


def test_workers_see_the_environment_as_it_is_when_their_run_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers come from a fork server that outlives a run: a variable set after the first
    run with workers (when that server started) must still reach the second run's."""
    module = "envmark_workers"  # its own name: sys.modules is per process
    (tmp_path / f"{module}.py").write_text(ENV_MODULE)
    graph = tmp_path / "graph.yaml"
    graph.write_text(ENV_GRAPH.format(module=module))
    rows = [{"id": f"r{i}", "text": "t"} for i in range(6)]
    monkeypatch.setenv("ORCHESTRATOR_TEST_MARK", "first")
    first = orc.run(graph, rows, workers=2, trust=True)  # its module beside it
    monkeypatch.setenv("ORCHESTRATOR_TEST_MARK", "second")
    second = orc.run(graph, rows, workers=2, trust=True)
    monkeypatch.delenv("ORCHESTRATOR_TEST_MARK")
    third = orc.run(graph, rows, workers=2, trust=True)
    assert {line.outputs["mark"] for line in first.results} == {"first"}
    assert {line.outputs["mark"] for line in second.results} == {"second"}
    assert {line.outputs["mark"] for line in third.results} == {"unset"}
    assert {w["pid"] for w in second.manifest.workers} != {w["pid"] for w in first.manifest.workers}


# -- registries travel with the graph --------------------------------------------------------

LOCAL_PROMPTS = {"judge.jinja": "Rate this text:\n{{ text }}"}


LOCAL_NODES = {
    "bonus": {
        "kind": "compute",
        "function": "plus_bonus_in_a_body",
        "args": {"score": "judge.score"},
    },
    "tag": {"kind": "tag_in_a_body", "key": "judge.score"},
}


def local_graph(uses: tuple[str, ...] = ("bonus", "tag")) -> orc.Graph:
    """judge (LLM) -> `bonus`, a compute function, and/or `tag`, a node kind, each named by
    what the test registers inside its own body."""
    return orc.graph_from_dict(
        {
            "name": "local-registries",
            "inputs": ["text"],
            "nodes": {
                "judge": {
                    "kind": "llm",
                    "prompt": "judge.jinja",
                    "output": {"score": {"type": "integer", "min": 1, "max": 10}},
                },
                **{name: LOCAL_NODES[name] for name in uses},
            },
            "outputs": {"score": "judge.score", **{name: name for name in uses}},
        },
        LOCAL_PROMPTS,
    )


@pytest.fixture
def registered_in_a_body() -> Iterator[str]:
    """A compute function and a node kind registered the way a user's `main()` would:
    defined inside a function, each a closure over one of its local variables, so no
    fresh process can import them. Yields the text the kind prefixes its values with."""
    from orchestrator.compute import registry
    from orchestrator.graph.checks import NodeScope
    from orchestrator.graph.compiled import CompiledNode
    from orchestrator.graph.spec import NodeBase
    from orchestrator.graph.templates import Expression
    from orchestrator.kinds import RunServices, evaluate, register_kind, unregister_kind
    from orchestrator.store.trace import NodeRecord

    bonus = 100
    prefix = "band-"

    @orc.register("plus_bonus_in_a_body")
    def plus_bonus(score: int) -> int:
        return score + bonus

    class TagNode(NodeBase):
        kind: Literal["tag_in_a_body"]
        key: str

    @dataclass
    class CompiledTag(CompiledNode):
        spec: TagNode
        key: Expression | None = None

    class TagKind(orc.NodeKind[TagNode, CompiledTag]):
        name = "tag_in_a_body"
        spec_model = TagNode
        compiled = CompiledTag

        def compile(self, cn: CompiledTag, scope: NodeScope) -> None:
            cn.key = scope.expression(cn.spec.key, "key")

        async def execute(
            self, cn: CompiledTag, ctx: dict[str, Any], example: str, item: int, run: RunServices
        ) -> Any:
            assert cn.key is not None
            value = f"{prefix}{evaluate(cn.key, ctx, cn.name, 'key')}"
            run.trace.record(NodeRecord(example_id=example, node=cn.name, item=item, value=value))
            return value

    register_kind(TagKind())
    try:
        yield prefix
    finally:
        unregister_kind("tag_in_a_body")
        registry._REGISTRY.pop("plus_bonus_in_a_body", None)


def scored_by_text(body: dict[str, Any]) -> Reply:
    """The judge gives each text the number in it as its score."""
    if is_canary(body):
        return schema_responder(body)
    return Reply(content=json.dumps({"score": int(user_text(body).split()[-1])}))


@pytest.mark.parametrize("uses", [("bonus",), ("tag",), ("bonus", "tag")])
def test_a_kind_and_a_function_registered_in_a_function_body_run_on_workers(
    tmp_path: Path, registered_in_a_body: str, uses: tuple[str, ...]
) -> None:
    """What works in one process works with workers: a worker process never ran the code
    that registered them, the graph brings them along (they used to fail the run with
    `WorkerFailed … unknown compute function`, or unknown kind)."""
    rows = [{"id": f"e{i}", "text": f"score {i % 10 + 1}"} for i in range(24)]
    graph = local_graph(uses)
    with FakeServer(scored_by_text) as server:
        one = orc.run(graph, rows, base_url=server.base_url, workers=1)
        two = orc.run(graph, rows, base_url=server.base_url, workers=2, out=tmp_path / "run")

    assert two.manifest.status == "complete"
    assert len({w["pid"] for w in two.manifest.workers}) == 2
    every = {
        f"e{i}": {
            "score": i % 10 + 1,
            "bonus": i % 10 + 101,
            "tag": f"{registered_in_a_body}{i % 10 + 1}",
        }
        for i in range(24)
    }
    expected = {
        example: {k: v for k, v in outputs.items() if k in ("score", *uses)}
        for example, outputs in every.items()
    }
    assert {line.id: line.outputs for line in one.results} == expected
    assert {line.id: line.outputs for line in two.results} == expected


def test_what_a_graph_brings_to_workers_is_never_written_to_its_run_folder(
    tmp_path: Path, registered_in_a_body: str
) -> None:
    """The kinds and functions go to workers pickled by value; loading such bytes runs
    code, so none of them may reach a run folder, which others open."""
    from orchestrator.scale.messages import pack_registries

    rows = [{"id": f"e{i}", "text": f"score {i % 10 + 1}"} for i in range(8)]
    graph = local_graph()
    packed = pack_registries(graph)
    assert b"<locals>" in packed  # pickled by value: what the folder must never hold
    out = tmp_path / "run"
    with FakeServer(scored_by_text) as server:
        result = orc.run(graph, rows, base_url=server.base_url, workers=2, out=out)
    assert result.manifest.status == "complete"
    files = [path for path in out.rglob("*") if path.is_file()]
    assert files
    for path in files:
        data = path.read_bytes()
        assert b"<locals>" not in data, path
        assert b"cloudpickle" not in data, path
        assert packed not in data, path
