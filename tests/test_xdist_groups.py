"""`make test` relies on pytest-xdist's `--dist loadgroup` keeping every real-server test on
one worker (tests/conftest.py marks them), so one embedded vLLM starts, not two. Two things
broke it without a word: the conftest hook ran after xdist's worker had read the marks (it
needs `tryfirst`), and pytest 9.2 stores node ids so that xdist 3.8's grouping no longer
takes effect (pytest-dev/pytest-xdist#1386). Either way both workers started a server on the
2-core CI machine. This runs the real conftest on a tiny suite under the installed pair."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).parent / "conftest.py"
XDIST = ["-n", "2", "--dist", "loadgroup"]  # as `make test` runs


def test_real_server_tests_share_one_worker(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nmarkers =\n  integration: x\nasyncio_default_fixture_loop_scope = function\n",
        encoding="utf-8",
    )
    body = (
        "import time\n\n\n@pytest.mark.parametrize('i', range(6))\n"
        "def test_it(i):\n    time.sleep(0.1)\n"
    )
    (tmp_path / "test_real.py").write_text(
        "import pytest\n\npytestmark = pytest.mark.integration\n\n" + body, encoding="utf-8"
    )
    (tmp_path / "test_plain.py").write_text("import pytest\n\n" + body, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", *XDIST],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    real = re.findall(r"\[(gw\d)\].*PASSED test_real\.py", done.stdout)
    assert len(real) == 6, done.stdout
    assert len(set(real)) == 1, f"real-server tests spread over workers {set(real)}"
