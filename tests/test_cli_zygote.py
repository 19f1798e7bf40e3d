"""The tests' CLI zygote (cli_zygote.py): a forked command must behave as a new interpreter
would, or the suites that run `orchestrator` through it would test something else."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_zygote import Zygotes
from helpers import REPO

PROBE = """
import json, os, sys
print(json.dumps({
    "cwd": os.getcwd(), "probe": os.environ.get("PROBE"), "argv": sys.argv[1:],
    "path0": sys.path[0], "pid": os.getpid(), "hash": hash("a string to hash"),
    "orchestrator": "orchestrator" in sys.modules, "openai": "openai" in sys.modules,
}), flush=True)
action = os.environ.get("PROBE_ACTION", "")
if action == "raise":
    raise ValueError("the probe failed on purpose")
if action == "signal":
    import signal
    os.kill(os.getpid(), signal.SIGTERM)
if action == "sleep":
    open("pid", "w").write(str(os.getpid()))
    import time
    time.sleep(120)
if action == "flood":
    sys.stdout.write("x" * 1_000_000)
    sys.stderr.write("y" * 300_000)
sys.exit(int(os.environ.get("PROBE_EXIT", "0")))
"""


@pytest.fixture(scope="module")
def zygotes() -> Iterator[Zygotes]:
    pair = Zygotes()
    yield pair
    pair.close()
    assert all(z.process.poll() is not None for z in pair.zygotes) or not pair.zygotes


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "probe.py").write_text(PROBE, encoding="utf-8")
    return tmp_path


def env(**extra: str) -> dict[str, str]:
    # COLUMNS as orchestrator_command sets it: at their floors, typer or rich read it at import.
    return {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "10000", **extra}


def probe(zygotes: Zygotes, folder: Path, **extra: str) -> tuple[Any, dict[str, Any]]:
    result = zygotes.run("probe", ["one", "two words"], env(**extra), cwd=str(folder))
    return result, json.loads(result.stdout.splitlines()[0])


def test_a_forked_command_has_its_own_process_folder_environment_and_argv(
    zygotes: Zygotes, folder: Path
) -> None:
    forked = zygotes.forked
    first, seen = probe(zygotes, folder, PROBE="first")
    second, again = probe(zygotes, folder, PROBE="second", PROBE_EXIT="3")
    assert zygotes.forked == forked + 2
    assert (first.returncode, second.returncode) == (0, 3)
    assert seen["openai"], "not forked from the preloaded interpreter"
    assert not seen["orchestrator"], "orchestrator must be imported fresh by each command"
    assert seen["cwd"] == seen["path0"] == str(folder)
    assert seen["argv"] == ["one", "two words"]
    assert (seen["probe"], again["probe"]) == ("first", "second")
    assert len({seen["pid"], again["pid"], os.getpid()}) == 3
    # Two commands in a row come from zygotes with different hash seeds.
    assert seen["hash"] != again["hash"]


def test_a_variable_read_at_import_sends_the_command_to_a_new_interpreter(
    zygotes: Zygotes, folder: Path
) -> None:
    # The zygotes start with the first command's environment: under xdist this test may be
    # its module's first on a worker, so a plain command starts them.
    probe(zygotes, folder)
    for extra in ({"OPENAI_LOG": "debug"}, {"PYTHONHASHSEED": "7"}, {"LC_ALL": "C.UTF-8"}):
        spawned = zygotes.spawned
        result, seen = probe(zygotes, folder, PROBE="fresh", **extra)
        assert zygotes.spawned == spawned + 1, extra
        assert result.returncode == 0 and seen["probe"] == "fresh"
        assert not seen["openai"], extra


def test_failures_end_the_command_as_they_would_end_an_interpreter(
    zygotes: Zygotes, folder: Path
) -> None:
    raised, _ = probe(zygotes, folder, PROBE_ACTION="raise")
    assert raised.returncode == 1
    assert "Traceback" in raised.stderr and "ValueError: the probe failed on purpose" in (
        raised.stderr
    )
    signalled, _ = probe(zygotes, folder, PROBE_ACTION="signal")
    assert signalled.returncode == -15
    flooded, _ = probe(zygotes, folder, PROBE_ACTION="flood")
    assert flooded.stdout.endswith("x" * 1_000_000) and flooded.stderr == "y" * 300_000


def test_a_command_past_its_timeout_is_killed(zygotes: Zygotes, folder: Path) -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        zygotes.run("probe", [], env(PROBE_ACTION="sleep"), cwd=str(folder), timeout=3)
    pid = int((folder / "pid").read_text())
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # its monitor reaps it
    assert not Path(f"/proc/{pid}").exists()


def test_orchestrator_through_the_zygote_prints_what_a_new_interpreter_prints(
    zygotes: Zygotes, tmp_path: Path
) -> None:
    args = ["validate", str(REPO / "graphs" / "expert.yaml"), str(tmp_path / "missing.yaml")]
    wide = env()
    forked = zygotes.forked
    through = zygotes.run("orchestrator", args, wide, cwd=str(tmp_path))
    assert zygotes.forked == forked + 1
    fresh = subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        capture_output=True,
        text=True,
        env=wide,
        cwd=tmp_path,
        timeout=120,
    )
    assert through.returncode == fresh.returncode == 1
    assert through.stdout == fresh.stdout and "graph 'expert' is valid" in through.stdout
    assert through.stderr == fresh.stderr and "1 of 2 graphs has problems" in through.stderr


def test_a_started_command_is_polled_signalled_and_waited_for_as_popen_is(
    zygotes: Zygotes, folder: Path
) -> None:
    started = zygotes.start(
        "probe", [], env(PROBE_ACTION="sleep"), cwd=folder, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 30
    while not (folder / "pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert int((folder / "pid").read_text()) == started.pid
    assert started.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        started.wait(timeout=0.2)
    started.send_signal(signal.SIGKILL)
    assert started.wait(timeout=30) == -signal.SIGKILL
    out, err = started.communicate(timeout=30)
    assert json.loads(out or "")["pid"] == started.pid and err is None
