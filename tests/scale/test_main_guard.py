"""A script calling `orc.run(..., workers=2)` at its top level, with no `if __name__ ==
"__main__":` guard, is refused up front with the fix (issue 26): each worker process
imports the script again as it starts, which used to fail in a worker with `RuntimeError:
no running event loop`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fakeserver import FakeServer, schema_responder
from helpers import judge_graph, write_graph, write_rows

ROOT = Path(__file__).parents[2]

CALL = "orc.run(sys.argv[1], sys.argv[2], base_url=sys.argv[3], out=sys.argv[4], workers=2)"
UNGUARDED = f"import sys\nimport orchestrator as orc\n\nresult = {CALL}\nprint('finished')\n"
GUARDED = (
    "import sys\nimport orchestrator as orc\n\n\ndef main() -> None:\n"
    f"    {CALL}\n    print('finished')\n\n\nif __name__ == '__main__':\n    main()\n"
)


def _script(tmp_path: Path, name: str, text: str) -> subprocess.CompletedProcess[str]:
    graph = write_graph(tmp_path, judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    data = write_rows(tmp_path / "rows.jsonl", [{"id": f"r{i}", "text": "t"} for i in range(4)])
    script = tmp_path / name
    script.write_text(text, encoding="utf-8")
    with FakeServer(schema_responder) as server:
        return subprocess.run(
            [sys.executable, str(script), str(graph), str(data), server.base_url,
             str(tmp_path / f"{name}.run")],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=180,
            check=False,
        )  # fmt: skip


def test_a_script_without_the_main_guard_is_told_to_add_it(tmp_path: Path) -> None:
    done = _script(tmp_path, "unguarded.py", UNGUARDED)
    assert done.returncode != 0
    assert "ConfigurationError" in done.stderr, done.stderr
    assert 'if __name__ == "__main__":' in done.stderr, done.stderr
    assert "unguarded.py, line 4" in done.stderr, done.stderr  # where the call is
    assert "no running event loop" not in done.stderr
    assert "finished" not in done.stdout
    assert not (tmp_path / "unguarded.py.run").exists()  # refused before the folder


def test_a_script_with_the_main_guard_runs_with_workers(tmp_path: Path) -> None:
    done = _script(tmp_path, "guarded.py", GUARDED)
    assert done.returncode == 0, done.stderr
    assert "finished" in done.stdout
