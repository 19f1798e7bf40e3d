"""Run identity: a run folder is resumed only by the same judge, one writer at a time, and
it holds everything its readers need (issue: runs you can trust).

Each test here failed on the code before the run key, lock and snapshot existed: a sweep
"resumed" into one folder, an included template edit went unnoticed, two writers lost lines.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, latency_responder, schema_responder
from helpers import (
    REPO,
    judge_graph,
    orchestrator_command,
    results,
    run_graph,
    start_cli_run,
    wait_for_lines,
    write_graph,
    write_rows,
)

from orchestrator import RunFolderError
from orchestrator.kinds.graphs import compile_graph

TEMPLATES = {"judge.jinja": "{% include 'rubric.jinja' %}\nText: {{ text }}\n"}
RUBRIC = "Rate the text from 1 to 10 for clarity.\n"


@pytest.fixture
def graph(tmp_path: Path) -> Path:
    return write_graph(tmp_path / "g", judge_graph(), {**TEMPLATES, "rubric.jinja": RUBRIC})


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_rows(tmp_path / "rows.jsonl", [{"id": f"e{i}", "text": f"t{i}"} for i in range(4)])


def run_cli(
    graph: Path, data: Path, out: Path, url: str, cache: Path
) -> subprocess.CompletedProcess[str]:
    """`orchestrator run` as a user types it again (the same command, the same cache)."""
    command = ["run", str(graph), "--data", str(data), "--out", str(out), "--base-url", url]
    return orchestrator_command(*command, "--cache", str(cache))


def manifest(out: Path) -> dict[str, Any]:
    return json.loads((out / "manifest.json").read_text())


# -- the run key ------------------------------------------------------------------------------


def test_param_sweep_into_one_folder_is_refused_naming_the_param(tmp_path: Path):
    """Case 1 as a user met it: AuPEL with repeats_per_order=1 on 3 rows, then =2 on all."""
    data = REPO / "examples" / "aupel.jsonl"
    out = tmp_path / "run"
    with FakeServer() as server:
        common = ["run", str(REPO / "graphs" / "aupel.yaml"), "--data", str(data)]
        common += ["--out", str(out), "--base-url", server.base_url]
        common += ["--cache", str(tmp_path / "cache.sqlite")]
        first = orchestrator_command(*common, "--param", "repeats_per_order=1", "--limit", "3")
        assert first.returncode == 0, first.stdout + first.stderr
        before = len(server.requests)
        second = orchestrator_command(*common, "--param", "repeats_per_order=2")
    assert second.returncode == 1
    assert "param repeats_per_order: 1 → 2" in second.stderr
    assert "--overwrite" in second.stderr
    assert len(server.requests) == before  # refused before a single request
    assert len(results(out)) == 3
    assert manifest(out)["parameters"]["params"]["repeats_per_order"] == 1


def test_model_change_is_refused(graph: Path, data: Path, tmp_path: Path):
    with FakeServer(model="judge-a") as server:
        run_graph(graph, data, tmp_path / "run", server.base_url, model="judge-a")
        server.model = "judge-b"
        with pytest.raises(RunFolderError, match="model judge: judge-a → judge-b"):
            run_graph(graph, data, tmp_path / "run", server.base_url, model="judge-b")


def test_endpoint_change_is_refused(graph: Path, data: Path, tmp_path: Path):
    with FakeServer() as one, FakeServer() as other:
        run_graph(graph, data, tmp_path / "run", one.base_url)
        with pytest.raises(RunFolderError, match=re.escape(f"→ {other.base_url}")):
            run_graph(graph, data, tmp_path / "run", other.base_url)


def test_structured_mode_change_is_refused(graph: Path, data: Path, tmp_path: Path):
    with FakeServer() as server:
        run_graph(graph, data, tmp_path / "run", server.base_url, structured="server")
        with pytest.raises(RunFolderError, match="structured judge: server → prompt"):
            run_graph(graph, data, tmp_path / "run", server.base_url, structured="prompt")


@pytest.mark.parametrize(
    ("judge", "extra"),
    [
        ("{% include 'rubric.jinja' %}\n{{ text }}", {}),
        ("{% import 'macros.jinja' as m %}{{ m.rubric() }}\n{{ text }}", {}),
        ("{% extends 'base.jinja' %}{% block body %}{{ text }}{% endblock %}", {}),
    ],
    ids=["include", "import", "extends"],
)
def test_edited_pulled_in_template_is_refused(
    tmp_path: Path, data: Path, judge: str, extra: dict[str, str]
):
    """Case 2: a template pulled in by include/import/extends is part of the identity."""
    templates = {
        "judge.jinja": judge,
        "rubric.jinja": RUBRIC,
        "macros.jinja": "{% macro rubric() %}" + RUBRIC + "{% endmacro %}",
        "base.jinja": RUBRIC + "{% block body %}{% endblock %}",
    }
    graph = write_graph(tmp_path / "g", judge_graph(), templates)
    pulled = re.search(r"'(\w+\.jinja)'", judge)
    assert pulled is not None
    with FakeServer() as server:
        run_graph(graph, data, tmp_path / "run", server.base_url)
        path = tmp_path / "g" / "prompts" / pulled.group(1)
        path.write_text(path.read_text().replace("clarity", "warmth"))
        with pytest.raises(RunFolderError, match=f"template {pulled.group(1)} changed"):
            run_graph(graph, data, tmp_path / "run", server.base_url)


def test_dynamic_include_puts_the_whole_prompts_folder_in_the_key(tmp_path: Path):
    templates = {"judge.jinja": "{% include text ~ '.jinja' %}", "a.jinja": "A", "b.jinja": "B"}
    graph = write_graph(tmp_path / "g", judge_graph(), templates)
    assert set(compile_graph(graph).templates) == {"judge.jinja", "a.jinja", "b.jinja"}


def test_template_edited_mid_run_is_not_rendered(graph: Path, tmp_path: Path):
    """What is hashed is what is rendered: an include read at compile time is kept."""
    compiled = compile_graph(graph)
    (tmp_path / "g" / "prompts" / "rubric.jinja").write_text("EDITED\n")
    prompt = compiled.nodes["judge"].messages({"text": "x", "params": {}, "run": {}})
    assert "clarity" in prompt[-1]["content"] and "EDITED" not in prompt[-1]["content"]


def test_user_function_source_is_part_of_the_key(tmp_path: Path, data: Path, monkeypatch):
    module = tmp_path / "mods" / "myscore_identity.py"
    module.parent.mkdir()
    module.write_text("def double(value):\n    return value * 2\n")
    monkeypatch.syspath_prepend(str(module.parent))
    spec = {
        **judge_graph(),
        "nodes": {
            **judge_graph()["nodes"],
            "twice": {
                "kind": "compute",
                "function": "myscore_identity:double",
                "args": {"value": "judge.score"},
            },
        },
        "outputs": {"score": "twice"},
    }
    graph = write_graph(tmp_path / "g", spec, {**TEMPLATES, "rubric.jinja": RUBRIC})
    with FakeServer() as server:
        run_graph(graph, data, tmp_path / "run", server.base_url, trust=True)
        module.write_text("def double(value):\n    return value * 3\n")
        with pytest.raises(RunFolderError, match="function myscore_identity:double changed"):
            run_graph(graph, data, tmp_path / "run", server.base_url, trust=True)


def test_settings_that_do_not_change_replies_still_resume(graph: Path, data: Path, tmp_path: Path):
    with FakeServer() as server:
        run_graph(graph, data, tmp_path / "run", server.base_url, limit=2)
        run_graph(
            graph,
            data,
            tmp_path / "run",
            server.base_url,
            concurrency=3,
            timeout=30.0,
            server_wait=5.0,
            cache=tmp_path / "other-cache.sqlite",
        )
    assert sorted(results(tmp_path / "run")) == ["e0", "e1", "e2", "e3"]
    assert manifest(tmp_path / "run")["resumed"] is True


def test_every_trace_row_carries_the_run_key(graph: Path, data: Path, tmp_path: Path):
    with FakeServer() as server:
        run_graph(graph, data, tmp_path / "run", server.base_url)
    key = manifest(tmp_path / "run")["run_key"]["digest"]
    with sqlite3.connect(tmp_path / "run" / "traces.sqlite") as db:
        keys = {row[0] for row in db.execute("SELECT run_key FROM node_runs")}
        runs = {row[0] for row in db.execute("SELECT run_key FROM runs")}
    assert keys == {key} and runs == {key}


def test_folder_of_a_newer_layout_is_refused(graph: Path, data: Path, tmp_path: Path):
    with FakeServer() as server:
        run_graph(graph, data, tmp_path / "run", server.base_url)
        path = tmp_path / "run" / "manifest.json"
        path.write_text(json.dumps({**manifest(tmp_path / "run"), "layout_version": 99}))
        with pytest.raises(RunFolderError, match="newer orchestrator"):
            run_graph(graph, data, tmp_path / "run", server.base_url)


def test_folder_of_the_old_layout_is_not_resumed_blindly(graph: Path, data: Path, tmp_path: Path):
    with FakeServer() as server:
        run_graph(graph, data, tmp_path / "run", server.base_url)
        old = {k: v for k, v in manifest(tmp_path / "run").items() if k != "layout_version"}
        (tmp_path / "run" / "manifest.json").write_text(json.dumps(old))
        with pytest.raises(RunFolderError, match="older orchestrator"):
            run_graph(graph, data, tmp_path / "run", server.base_url)


# -- one writer -------------------------------------------------------------------------------


def test_second_writer_is_refused_naming_the_first(graph: Path, tmp_path: Path):
    """Case 3: a second `run` on a folder being written is refused; the first loses nothing."""
    rows = [{"id": f"e{i}", "text": f"t{i}"} for i in range(40)]
    data = write_rows(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "run"
    # 40 rows of 0.5 s two at a time: the first run is still writing ~10 s after its first
    # result, time enough for the second to start even on a loaded machine (at 0.2 s it had
    # finished before the second looked, under parallel test workers).
    with FakeServer(latency_responder(0.5)) as server:
        first = start_cli_run(graph, data, out, server.base_url, "--concurrency", "2")
        try:
            wait_for_lines(out / "results.jsonl", 1, first)
            second = run_cli(graph, data, out, server.base_url, tmp_path / "cache.sqlite")
        finally:
            output, _ = first.communicate(timeout=120)
    assert second.returncode == 1
    assert f"being written by another run (pid {first.pid}" in second.stderr
    assert first.returncode == 0, output
    assert sorted(results(out)) == sorted(r["id"] for r in rows)


def test_runs_started_together_never_lose_lines(graph: Path, tmp_path: Path):
    rows = [{"id": f"e{i}", "text": f"t{i}"} for i in range(60)]
    data = write_rows(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "run"
    with FakeServer(latency_responder(0.02)) as server:
        procs = [start_cli_run(graph, data, out, server.base_url) for _ in range(3)]
        outputs = [p.communicate(timeout=120)[0] for p in procs]
    codes = sorted(p.returncode for p in procs)
    # The first to take the lock runs; the others are refused (or, if they started after it
    # finished, resume a complete folder). Never two writers at once.
    assert codes[0] == 0, outputs
    refused = [o for o, p in zip(outputs, procs, strict=True) if p.returncode == 1]
    assert all("being written by another run" in o for o in refused), refused
    lines = (out / "results.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["id"] for line in lines) == sorted(r["id"] for r in rows)
    with sqlite3.connect(out / "traces.sqlite") as db:
        ids = [row[0] for row in db.execute("SELECT id FROM node_runs")]
    assert len(ids) == len(set(ids))


def test_lock_of_a_killed_run_is_taken_over(graph: Path, tmp_path: Path):
    rows = [{"id": f"e{i}", "text": f"t{i}"} for i in range(30)]
    data = write_rows(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "run"
    with FakeServer(latency_responder(0.1)) as server:
        proc = start_cli_run(graph, data, out, server.base_url, "--concurrency", "2")
        wait_for_lines(out / "results.jsonl", 2, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        again = run_cli(graph, data, out, server.base_url, tmp_path / "cache.sqlite")
    assert again.returncode == 0, again.stdout + again.stderr
    # A diagnostic of the library: on stderr, with its other messages.
    assert f"took over the lock of a run that stopped without releasing it (pid {proc.pid}" in (
        again.stderr
    )
    assert sorted(results(out)) == sorted(r["id"] for r in rows)


def test_kill_during_start_up_then_same_command_resumes(graph: Path, data: Path, tmp_path: Path):
    """A run killed while its server did not answer yet leaves a folder without a manifest;
    the same command must run it, not call it 'not a run folder'."""
    out = tmp_path / "run"
    with FakeServer() as server:
        server.hanging.set()
        proc = start_cli_run(graph, data, out, server.base_url)
        deadline = time.monotonic() + 60
        while not (out / "run.lock").is_file() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert not (out / "manifest.json").exists()
        server.hanging.clear()
    with FakeServer() as server:
        again = run_cli(graph, data, out, server.base_url, tmp_path / "cache.sqlite")
    assert again.returncode == 0, again.stdout + again.stderr
    assert sorted(results(out)) == ["e0", "e1", "e2", "e3"]


# -- overwrite and other refusals --------------------------------------------------------------


def test_overwrite_refuses_a_folder_that_is_not_a_run(graph: Path, data: Path, tmp_path: Path):
    """Case 7: `--out . --overwrite` used to delete the working directory."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "thesis.tex").write_text("years of work")
    with FakeServer() as server, pytest.raises(RunFolderError, match="nothing was deleted"):
        run_graph(graph, data, work, server.base_url, overwrite=True)
    assert (work / "thesis.tex").read_text() == "years of work"


def test_overwrite_replaces_a_run_and_keeps_foreign_files(graph: Path, data: Path, tmp_path: Path):
    out = tmp_path / "run"
    with FakeServer() as server:
        run_graph(graph, data, out, server.base_url, limit=1)
        (out / "notes.txt").write_text("mine")
        run_graph(graph, data, out, server.base_url, overwrite=True, params={})
    assert (out / "notes.txt").read_text() == "mine"
    assert sorted(results(out)) == ["e0", "e1", "e2", "e3"]
    assert manifest(out)["resumed"] is False


def test_out_that_is_a_file_is_a_clear_error(graph: Path, data: Path, tmp_path: Path):
    target = tmp_path / "file.txt"
    target.write_text("x")
    with FakeServer() as server:
        done = orchestrator_command(
            "run",
            str(graph),
            "--data",
            str(data),
            "--out",
            str(target),
            "--base-url",
            server.base_url,
        )
    assert done.returncode == 1
    assert "is a file, not a folder" in done.stderr and "Traceback" not in done.stderr


def test_damaged_trace_is_named_and_no_resume_is_promised(graph: Path, data: Path, tmp_path: Path):
    out = tmp_path / "run"
    with FakeServer() as server:
        run_graph(graph, data, out, server.base_url, limit=2)
        for suffix in ("-wal", "-shm"):
            (out / f"traces.sqlite{suffix}").unlink(missing_ok=True)
        (out / "traces.sqlite").write_bytes(b"this is not a database" * 100)
        command = ["run", str(graph), "--data", str(data), "--out", str(out)]
        command += ["--base-url", server.base_url, "--cache", str(tmp_path / "c.sqlite")]
        again = orchestrator_command(*command)
    assert again.returncode == 1
    assert "traces.sqlite cannot be read" in again.stderr and "damaged" in again.stderr
    assert "re-run the same command to resume" not in again.stderr
    assert "Traceback" not in again.stderr
    shown = orchestrator_command("trace", str(out))
    assert shown.returncode == 1 and "damaged" in shown.stderr
    assert "Traceback" not in shown.stderr


def test_trace_of_a_folder_with_no_results_yet(graph: Path, data: Path, tmp_path: Path):
    out = tmp_path / "run"
    with FakeServer() as server:
        run_graph(graph, data, out, server.base_url, limit=2)
    (out / "results.jsonl").write_text("")
    shown = orchestrator_command("trace", str(out))
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"example e[01]\b", shown.stdout), shown.stdout
    with sqlite3.connect(out / "traces.sqlite") as db:
        db.execute("DELETE FROM node_runs")
    empty = orchestrator_command("trace", str(out))
    assert empty.returncode == 1 and "no node of" in empty.stderr
    assert "Traceback" not in empty.stderr


def test_full_disk_leaves_an_error_manifest_and_resumes(graph: Path, tmp_path: Path):
    """Writes fail mid-run (a file-size limit stands in for a full disk): one line, the
    manifest says error, and the same command then finishes the rest."""
    import resource

    rows = [{"id": f"e{i}", "text": "t" * 2000} for i in range(200)]
    data = write_rows(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "run"

    def limit_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, 300_000))

    with FakeServer() as server:
        command = [sys.executable, "-m", "orchestrator", "run", str(graph), "--data", str(data)]
        command += ["--out", str(out), "--base-url", server.base_url, "--no-cache"]
        env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "10000"}
        full = subprocess.run(
            command, capture_output=True, text=True, env=env, preexec_fn=limit_files, timeout=120
        )
        assert full.returncode == 1, full.stdout + full.stderr
        # The file the disk refused is named (the store's StorageError), and the resume.
        assert f"could not write {out}{os.sep}" in full.stderr, full.stderr
        assert f"finished work up to the last write is in {out}" in full.stderr
        assert "re-run the same command to resume" in full.stderr
        assert "Traceback" not in full.stderr
        assert manifest(out)["status"] == "error"
        done_before = len(results(out))
        assert done_before < len(rows)
        again = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert sorted(results(out)) == sorted(r["id"] for r in rows)


# -- self-contained folders -------------------------------------------------------------------


def _normalised_report(folder: Path) -> str:
    html = (folder / "report.html").read_text()
    html = html.replace(str(folder), "RUN")
    return re.sub(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d)?", "TIME", html)


def test_moved_folder_reports_and_traces_the_same(tmp_path: Path):
    """Graph, prompts and data deleted, folder moved: report and trace are unchanged."""
    root = tmp_path / "project"
    graph = write_graph(root, judge_graph(), {**TEMPLATES, "rubric.jinja": RUBRIC})
    data = write_rows(root / "rows.jsonl", [{"id": f"e{i}", "text": f"t{i}"} for i in range(4)])
    out = root / "runs" / "x"
    with FakeServer() as server:
        run_graph(graph, data, out, server.base_url)
    before_trace = orchestrator_command("trace", str(out), "--example", "e2")
    assert orchestrator_command("report", str(out)).returncode == 0
    before_report = _normalised_report(out)
    moved = tmp_path / "elsewhere" / "x"
    moved.parent.mkdir()
    shutil.move(str(out), str(moved))
    shutil.rmtree(root)
    after_trace = orchestrator_command("trace", str(moved), "--example", "e2")
    assert orchestrator_command("report", str(moved)).returncode == 0
    assert after_trace.stdout == before_trace.stdout
    assert _normalised_report(moved) == before_report
    assert "not found" not in before_report and "Text: t2" in after_trace.stdout


def test_snapshot_compiles_to_the_same_hash(graph: Path, data: Path, tmp_path: Path):
    from orchestrator.store.folder import snapshot_graph, snapshot_prompts

    with FakeServer() as server:
        run_graph(graph, data, tmp_path / "run", server.base_url)
    path = snapshot_graph(tmp_path / "run")
    assert path is not None
    again = compile_graph(path, prompts_dir=snapshot_prompts(tmp_path / "run"))
    assert again.content_hash == manifest(tmp_path / "run")["graph"]["hash"]
    inputs = (tmp_path / "run" / "inputs.jsonl").read_text().splitlines()
    assert [json.loads(line)["data"]["text"] for line in inputs] == ["t0", "t1", "t2", "t3"]


def test_reader_works_while_the_run_writes(graph: Path, tmp_path: Path):
    rows = [{"id": f"e{i}", "text": f"t{i}"} for i in range(30)]
    data = write_rows(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "run"
    with FakeServer(latency_responder(0.1)) as server:
        proc = start_cli_run(graph, data, out, server.base_url, "--concurrency", "2")
        try:
            wait_for_lines(out / "results.jsonl", 2, proc)
            seen: list[subprocess.CompletedProcess[str]] = []
            reader = threading.Thread(
                target=lambda: seen.append(orchestrator_command("trace", str(out)))
            )
            reader.start()
            reader.join(60)
            report = orchestrator_command("report", str(out))
        finally:
            proc.communicate(timeout=120)
    assert proc.returncode == 0
    assert seen and seen[0].returncode == 0, seen[0].stderr if seen else "no trace output"
    assert report.returncode == 0, report.stderr


def test_mismatch_is_typed_and_the_demo_restarts_its_own_folder(tmp_path: Path) -> None:
    """A changed graph is refused as RunKeyMismatch naming the change; `orchestrator demo`
    (and only it) starts its own folder afresh rather than stopping on an old demo run."""
    import typer

    from orchestrator import RunKeyMismatch, load_graph, run
    from orchestrator.cli.run import _execute

    graph = judge_graph()
    graph["params"] = {"scale": 10}
    path = write_graph(tmp_path, graph, {"judge.jinja": "Rate {{ text }} of {{ params.scale }}"})
    data = write_rows(tmp_path / "rows.jsonl", [{"id": "a", "text": "x"}])
    out = tmp_path / "run"
    with FakeServer(schema_responder) as server:
        common = {"base_url": server.base_url, "use_cache": False}
        _execute(load_graph(path), data, out, **common)
        changed = {**common, "params": {"scale": 5}}
        with pytest.raises(typer.Exit):
            _execute(load_graph(path), data, out, **changed)
        with pytest.raises(RunKeyMismatch) as error:
            run(load_graph(path), str(data), out=out, params={"scale": 5}, base_url=server.base_url)
        assert error.value.changes == ["param scale: 10 → 5"]
        result = _execute(load_graph(path), data, out, restart_if_changed=True, **changed)
    assert result.manifest.counts.examples_ok == 1
    assert result.manifest.parameters["params"] == {"scale": 5}
