"""Fixtures the report's browser modules share: the run of every shipped graph, made once
per worker. The views module ran six of these graphs again for itself: its setup took
94-111 s in `make test`, and 13.5 s on copies of these runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakeserver import FakeServer
from test_report import ROOT, judge_responder, run, shipped_graphs

from orchestrator.report import build_report


@pytest.fixture(scope="session")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path | str]:
    """Run folder (with report.html) per shipped graph, or why the graph could not run.
    Tests read these folders; one that adds to a folder works on a copy."""
    root = tmp_path_factory.mktemp("shipped")
    runs: dict[str, Path | str] = {}
    # jury2's judges name their models; the others take the server's first.
    with FakeServer(judge_responder, also_serves=("judge-a", "judge-b")) as server:
        for name in shipped_graphs():
            try:
                out = run(
                    ROOT / "graphs" / f"{name}.yaml",
                    ROOT / "examples" / f"{name}.jsonl",
                    root / name,
                    server,
                    # Its trained scorer is required; with none there, every row fails, and
                    # the report of a run whose rows all failed is worth a look too.
                    {"model_dir": str(root / "no-model")} if name == "perq_distilled" else None,
                )
            except Exception as exc:  # a graph the fake server cannot run has nothing to report
                runs[name] = f"{type(exc).__name__}: {exc}"
                continue
            build_report(out)
            runs[name] = out
    return runs
