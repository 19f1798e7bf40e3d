"""The suite's real-vLLM fixture says when it is waiting (issue 26): a line every few seconds
with the port, the seconds so far and the phase, shown by pytest even under `-q`, and on
failure the server log's last lines. vLLM is replaced by a stand-in that never answers."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from vllm_fixture import ServerDidNotStart, start_for_tests

import orchestrator.local.server as embedded

TESTS = Path(__file__).resolve().parents[1]

# A "vLLM" that writes a line to its log and never answers.
NEVER_READY = "import time; print('stand-in: loading weights', flush=True); time.sleep(60)"


def _never_ready(monkeypatch: pytest.MonkeyPatch, cache: Path, preparing: float) -> None:
    """Put the stand-in in `server_command`, and a model that takes `preparing` s to ready."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setattr(embedded, "require_modules", lambda names, purpose: None)

    def prepare(model_dir: Path | None, log: object) -> Path:
        time.sleep(preparing)  # a download or a conversion: no line of its own meanwhile
        return cache

    monkeypatch.setattr(embedded, "prepare_model", prepare)
    monkeypatch.setattr(
        embedded, "server_command", lambda folder, port: [sys.executable, "-c", NEVER_READY]
    )


def test_a_start_that_never_gets_ready_says_it_waits_and_fails_with_the_log_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _never_ready(monkeypatch, tmp_path, preparing=0.8)
    port = embedded.free_port()
    lines: list[str] = []
    with pytest.raises(ServerDidNotStart) as info:
        start_for_tests(port, lines.append, timeout=1.5, every=0.25)
    waiting = [line for line in lines if line.startswith("waiting for vLLM")]
    assert len(waiting) >= 4, lines
    pattern = rf"waiting for vLLM on port {port}: \d+ s, phase: "
    assert all(re.match(pattern, line) for line in waiting), waiting
    # Said in every phase, the one that logs nothing of its own included.
    assert any("phase: Preparing the model" in line for line in waiting), waiting
    assert any("phase: Waiting for vLLM" in line for line in waiting), waiting
    assert any(line.startswith("[embedded server] [") for line in lines), lines  # the phases
    message = str(info.value)
    assert f"vLLM on port {port} did not start" in message, message
    assert "did not answer" in message and "--- last lines of" in message, message
    assert "stand-in: loading weights" in message, message  # the log's tail


INNER_CONFTEST = """
import sys, time
from pathlib import Path
import pytest
import orchestrator.local.server as embedded
from vllm_fixture import ServerDidNotStart, start_for_tests, terminal_say

@pytest.fixture(scope="session")
def server(request):
    embedded.require_modules = lambda names, purpose: None
    embedded.prepare_model = lambda model_dir, log: Path(".")
    embedded.server_command = lambda folder, port: [sys.executable, "-c", {never!r}]
    failed = None
    try:
        start_for_tests(embedded.free_port(), terminal_say(request.config), timeout=2.5,
                        every=0.5)
    except ServerDidNotStart as exc:
        failed = str(exc)
    pytest.fail(failed, pytrace=False)
"""


def test_the_waiting_lines_and_the_tail_show_in_pytest_output_under_q(tmp_path: Path) -> None:
    """A session as `make test` runs one, output captured (pytest's default), `-q`."""
    (tmp_path / "conftest.py").write_text(INNER_CONFTEST.format(never=NEVER_READY))
    (tmp_path / "test_inner.py").write_text("def test_needs_it(server):\n    pass\n")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent)]),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert len(re.findall(r"waiting for vLLM on port \d+: \d+ s, phase: ", out)) >= 2, out
    assert "stand-in: loading weights" in out, out
    # Said once in the error's report, not once per chain link. The short summary repeats
    # it whole when the CI variable is set (pytest leaves it uncut there), so it is not counted.
    report = out.split("short test summary info")[0]
    assert report.count("did not answer on port") == 1, out
