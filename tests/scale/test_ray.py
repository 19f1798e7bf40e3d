"""`executor="ray"`: the graph on Ray actors, results in one run folder (issue 17).

One local Ray instance for the module (`ray.init(num_cpus=2)`; starting Ray costs
seconds), against the fake server; the workload is the kill-and-resume diamond. Skipped
only when ray cannot be imported (`pip install 'orchestrator-judge[scale]'`).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_workers
from fakeserver import FakeServer, Reply, schema_responder
from test_kill_resume import (
    NODES,
    Workload,
    llm_latency,
    lost_rows,
    make_workload,
    manifest,
    node_requests,
    result_ids,
)

import orchestrator as orc
from orchestrator.scale import WorkerLost

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.reliability

EXAMPLES = 60

# A kind and a function registered inside a function body (see test_workers.py).
registered_in_a_body = test_workers.registered_in_a_body


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def run(work: Workload, out: Path, base_url: str, cache: Path, **options: Any) -> Any:
    return orc.run(
        work.graph, work.data, base_url=base_url, out=out, cache=cache, concurrency=8, **options
    )


def test_ray_run_gives_the_results_of_one_process(tmp_path: Path) -> None:
    work = make_workload(tmp_path, range(EXAMPLES))
    with FakeServer(schema_responder) as server:
        one = run(work, tmp_path / "one", server.base_url, tmp_path / "own.sqlite")
        on_ray = run(work, tmp_path / "ray", server.base_url, tmp_path / "c.sqlite", executor="ray")
        assert node_requests(server) == 2 * len(NODES) * EXAMPLES

    assert on_ray.manifest.status == "complete"
    assert {line.id: line.outputs for line in on_ray.results} == {
        line.id: line.outputs for line in one.results
    }
    assert sorted(result_ids(tmp_path / "ray")) == sorted(work.ids)
    # One actor per CPU of the local instance, each a process of its own.
    workers = on_ray.manifest.workers
    assert len(workers) == 2 and os.getpid() not in {w["pid"] for w in workers}
    assert sorted(w["examples"] > 0 for w in workers) == [True, True]
    db = sqlite3.connect(tmp_path / "ray" / "traces.sqlite")
    ok = db.execute("SELECT example_id, node FROM node_runs WHERE status='ok'").fetchall()
    runs = db.execute("SELECT DISTINCT run_id FROM node_runs").fetchall()
    db.close()
    assert Counter(ok) == Counter((e, n) for e in work.ids for n in NODES)
    assert runs == [(on_ray.manifest.run_id,)]


def test_ray_worker_killed_mid_run_leaves_a_resumable_folder(tmp_path: Path) -> None:
    """SIGKILL to one actor's process: the run stops with WorkerLost naming it; the same
    call again finishes every example exactly once."""
    work = make_workload(tmp_path, range(EXAMPLES))
    out, cache = tmp_path / "run", tmp_path / "c.sqlite"
    outcome: dict[str, Any] = {}

    def first_run() -> None:
        try:
            outcome["result"] = run(work, out, base_url, cache, executor="ray")
        except Exception as exc:
            outcome["error"] = exc

    with FakeServer(llm_latency) as server:
        base_url = server.base_url
        thread = threading.Thread(target=first_run)
        thread.start()
        victim = _wait_for_workers(out, thread)[0]
        _wait_for(lambda: len(result_ids(out, allow_torn_tail=True)) >= 5, thread)
        os.kill(victim, signal.SIGKILL)
        thread.join(timeout=120)
        assert not thread.is_alive()
        error = outcome.get("error")
        assert isinstance(error, WorkerLost), outcome
        assert f"pid {victim}" in str(error) and "re-run the same command" in str(error)
        stopped = manifest(out)
        assert stopped["status"] == "error"
        kept = result_ids(out)
        assert kept and len(kept) == len(set(kept))

        again = run(work, out, base_url, cache, executor="ray")

    assert again.manifest.status == "complete" and again.manifest.resumed
    assert again.manifest.counts.examples_resumed == len(kept)
    assert lost_rows(result_ids(out), work.ids) == 0


def _wait_for(condition: Any, thread: threading.Thread, timeout: float = 120) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if not thread.is_alive():
            pytest.fail("the run ended before the condition held")
        time.sleep(0.05)
    pytest.fail("timed out")


def _wait_for_workers(out: Path, thread: threading.Thread) -> list[int]:
    def listed() -> list[dict[str, Any]]:
        if not (out / "manifest.json").exists():
            return []
        return list(manifest(out).get("workers") or [])

    _wait_for(lambda: len(listed()) == 2, thread)
    return [int(w["pid"]) for w in listed()]


def test_ray_actors_run_kinds_and_functions_registered_in_a_function_body(
    tmp_path: Path, registered_in_a_body: str
) -> None:
    """On Ray as with local workers: the actors never ran the code that registered them,
    the graph brings them along."""
    rows = [{"id": f"e{i}", "text": f"score {i % 10 + 1}"} for i in range(12)]
    graph = test_workers.local_graph()
    with FakeServer(test_workers.scored_by_text) as server:
        one = orc.run(graph, rows, base_url=server.base_url)
        on_ray = orc.run(graph, rows, base_url=server.base_url, executor="ray", workers=2)
    assert on_ray.manifest.status == "complete"
    assert len(on_ray.manifest.workers) == 2
    outputs = {line.id: line.outputs for line in on_ray.results}
    assert outputs == {line.id: line.outputs for line in one.results}
    assert outputs["e3"] == {"score": 4, "bonus": 104, "tag": f"{registered_in_a_body}4"}


def test_ray_actors_read_the_once_value_the_owner_asked_for_once(tmp_path: Path) -> None:
    """A `once: true` node is asked by the run's own process, once; every actor's rows
    read its value."""
    graph = orc.graph_from_dict(
        {
            "name": "once_on_ray",
            "inputs": ["text"],
            "nodes": {
                "steps": {
                    "kind": "llm",
                    "once": True,
                    "prompt": "s",
                    "output": {"steps": "string"},
                },
                "judge": {"kind": "llm", "prompt": "j", "output": {"echo": "string"}},
            },
            "outputs": {"echo": "judge.echo"},
        },
        {"s": "Write the steps.", "j": "Steps [{{ steps.steps }}] for <<{{ text }}>>"},
    )

    def respond(body: dict[str, Any]) -> Any:
        text = body["messages"][-1]["content"]
        if text == "Write the steps.":
            return Reply(content='{"steps": "S"}')
        if text.startswith("Steps"):
            return Reply(content=json.dumps({"echo": text}))
        return schema_responder(body)  # the structured-output canary

    rows = [{"id": f"e{i}", "text": f"t{i}"} for i in range(12)]
    with FakeServer(respond) as server:
        on_ray = orc.run(graph, rows, base_url=server.base_url, executor="ray", workers=2)
        asked = [b for b in server.requests if b["messages"][-1]["content"] == "Write the steps."]
    assert on_ray.manifest.status == "complete" and len(asked) == 1
    assert len(on_ray.manifest.workers) == 2
    assert {line.id: line.outputs["echo"] for line in on_ray.results} == {
        f"e{i}": f"Steps [S] for <<t{i}>>" for i in range(12)
    }


def test_ray_actors_read_once_per_groups_the_owner_asked_once_each(tmp_path: Path) -> None:
    """A `once_per: question` node is asked by the run's own process once per question;
    the actors' rows (each actor gets rows of every question) read its values."""
    graph = orc.graph_from_dict(
        {
            "name": "once_per_on_ray",
            "inputs": ["question", "answer"],
            "nodes": {
                "reference": {
                    "kind": "llm",
                    "once_per": "question",
                    "prompt": "r",
                    "output": {"answer": "string"},
                },
                "judge": {"kind": "llm", "prompt": "j", "output": {"echo": "string"}},
            },
            "outputs": {"echo": "judge.echo"},
        },
        {"r": "Answer {{ question }}", "j": "Ref [{{ reference.answer }}] for <<{{ answer }}>>"},
    )

    def respond(body: dict[str, Any]) -> Any:
        text = body["messages"][-1]["content"]
        if text.startswith("Answer "):
            return Reply(content=json.dumps({"answer": "ref-" + text.split()[1]}))
        if text.startswith("Ref"):
            return Reply(content=json.dumps({"echo": text}))
        return schema_responder(body)  # the structured-output canary

    # By system, then question: at concurrency 2 the chunks of 8 rows reach both actors.
    rows = [
        {"id": f"{q}-{s}", "question": q, "answer": f"{s}:{q}"}
        for s in ("s0", "s1", "s2")
        for q in ("q0", "q1", "q2", "q3")
    ]
    with FakeServer(respond) as server:
        on_ray = orc.run(
            graph, rows, base_url=server.base_url, executor="ray", workers=2, concurrency=2
        )
        asked = Counter(
            b["messages"][-1]["content"]
            for b in server.requests
            if b["messages"][-1]["content"].startswith("Answer ")
        )
    assert on_ray.manifest.status == "complete"
    assert asked == {f"Answer q{i}": 1 for i in range(4)}
    assert [w["examples"] > 0 for w in on_ray.manifest.workers] == [True, True]
    assert {line.id: line.outputs["echo"] for line in on_ray.results} == {
        row["id"]: f"Ref [ref-{row['question']}] for <<{row['answer']}>>" for row in rows
    }
