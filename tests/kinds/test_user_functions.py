"""User functions named by module path (issue 16, item 5): found beside the graph file from
either entry point, and `@orchestrator.register(blocking=True)` honoured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import orchestrator_command
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.cli import app

MODULE = """
import threading
import orchestrator


def shout(text):
    return text.upper()


@orchestrator.register(blocking=True)
def where(text):
    # A blocking function runs in a worker thread, never on the event loop's thread.
    return threading.current_thread() is not threading.main_thread()
"""

GRAPH = """
name: mine
prompts: prompts
inputs: [text]
nodes:
  loud:
    kind: compute
    function: {module}:shout
    args: {{text: text}}
  thread:
    kind: compute
    function: {module}:where
    args: {{text: text}}
outputs: {{loud: loud, in_thread: thread}}
"""


def _project(tmp_path: Path, module: str) -> Path:
    folder = tmp_path / "project"
    (folder / "prompts").mkdir(parents=True)
    (folder / f"{module}.py").write_text(MODULE)
    (folder / "graph.yaml").write_text(GRAPH.format(module=module))
    (folder / "rows.jsonl").write_text(json.dumps({"id": "a", "text": "quiet"}) + "\n")
    return folder


@pytest.mark.parametrize("entry", ["console_script", "python_m"])
def test_module_beside_the_graph_is_found_from_any_folder(tmp_path: Path, entry: str) -> None:
    module = f"myjudges_{entry}"  # one module name per test: sys.modules is per process
    folder = _project(tmp_path, module)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    command = (
        [str(Path(sys.executable).parent / "orchestrator")]
        if entry == "console_script"
        else [sys.executable, "-m", "orchestrator"]
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [
            *command,
            "run",
            str(folder / "graph.yaml"),
            "--data",
            str(folder / "rows.jsonl"),
            "--out",
            str(elsewhere / "run"),
            "--no-cache",
            "--trust",  # its own module beside it: the user trusts the graph
        ],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    line = json.loads((elsewhere / "run/results.jsonl").read_text())
    assert line["loud"] == "QUIET" and line["in_thread"] is True


def test_registered_options_reach_a_module_path_function(tmp_path: Path) -> None:
    folder = _project(tmp_path, "myjudges_api")
    graph = orc.load_graph(folder / "graph.yaml", trust=True)
    assert graph.nodes["thread"].function is not None
    assert graph.nodes["thread"].function.blocking is True
    assert graph.nodes["loud"].function is not None
    assert graph.nodes["loud"].function.blocking is False
    assert str(folder) not in sys.path  # found without leaving the folder on the path
    result = orc.run(graph, [{"id": "a", "text": "hi"}], base_url="http://127.0.0.1:9/v1")
    assert result.results[0].outputs == {"loud": "HI", "in_thread": True}


def test_missing_module_names_where_it_looked(tmp_path: Path) -> None:
    folder = _project(tmp_path, "present")
    (folder / "graph.yaml").write_text(GRAPH.format(module="absent_module"))
    with pytest.raises(orc.GraphError) as error:
        orc.load_graph(folder / "graph.yaml", trust=True)
    assert "absent_module" in str(error.value) and str(folder) in str(error.value)


def test_summarize_names_the_graph_to_give_when_the_snapshot_lacks_its_module(
    tmp_path: Path,
) -> None:
    """Item 14 of issue 35: `summarize --trust` of a run whose graph used its own module
    ended in a traceback (the run folder's snapshot keeps the graph, not the module); and
    without --trust too. Now one line each, and the graph beside its module summarizes."""
    folder = _project(tmp_path, "myjudges_summarize")
    run, graph = tmp_path / "run", folder / "graph.yaml"
    rows = [{"id": "a", "text": "quiet"}]
    orc.run(orc.load_graph(graph, trust=True), rows, out=run, base_url="http://127.0.0.1:9/v1")
    # A process that has not imported the module, as a user's next command is.
    trusted = orchestrator_command("summarize", str(run), "--trust")
    assert trusted.returncode == 1 and "Traceback" not in trusted.stderr, trusted.stderr
    assert len(trusted.stderr.strip().splitlines()) == 1, trusted.stderr
    assert "No module named 'myjudges_summarize'" in trusted.stderr
    assert f"summarize with --graph {graph} --trust" in trusted.stderr
    untrusted = CliRunner().invoke(app, ["summarize", str(run)])
    # A refusal exits; an error escaping the command would be the exception here.
    assert isinstance(untrusted.exception, SystemExit), untrusted.exception
    assert untrusted.exit_code == 1, untrusted.output
    assert "run it with --trust" in untrusted.output
    given = CliRunner().invoke(app, ["summarize", str(run), "--graph", str(graph), "--trust"])
    assert given.exit_code == 0, given.output
    summary = json.loads((run / "summary.json").read_text())
    assert summary["aggregates_from"]["graph"] == str(graph)
