"""Shared test setup: tests/ and its folders importable (fakeserver, shared builders)
from any test file; reliability figures."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).parent
# tests/ and each package-shaped folder under it: a suite may reuse another's builders
# (`from test_expert import ExpertResponder`) whichever file pytest is asked to run.
for _folder in [TESTS, *sorted(p for p in TESTS.iterdir() if p.is_dir() and p.name.isidentifier())]:
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))

# pytest-xdist's workers start with COLUMNS=80 in their environment, which a single
# process does not have; the CLI honours COLUMNS (a user's terminal width), so its output
# would wrap at 80 columns under `make test` only. A test that wants a width sets it.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)

# Where reliability tests' figures go (bench/reliability_table.py sets it and builds the
# table of docs/RELIABILITY.md from the file); unset, figures are only asserted on.
FIGURES_ENV = "ORCHESTRATOR_RELIABILITY_FIGURES"
_figures: list[dict[str, Any]] = []

Figure = Callable[..., None]


@pytest.fixture
def figure(request: pytest.FixtureRequest) -> Figure:
    """Record one row of the reliability table, measured by the calling test.

    fault: what went wrong; injected: how the test caused it; runs: commands run;
    lost: finished examples missing at the end (must be 0); max_requests: most requests the
    server saw for one node call (None when not meaningful); recover_s: seconds from the fault
    to the run going on or stopping cleanly (None when not meaningful).
    """

    def record(
        fault: str,
        injected: str,
        *,
        runs: int,
        lost: int,
        max_requests: int | None = None,
        recover_s: float | None = None,
        note: str = "",
    ) -> None:
        _figures.append(
            {
                "test": request.node.nodeid,
                "fault": fault,
                "injected": injected,
                "runs": runs,
                "lost": lost,
                "max_requests": max_requests,
                "recover_s": None if recover_s is None else round(recover_s, 2),
                "note": note,
            }
        )

    return record


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    target = os.environ.get(FIGURES_ENV)
    if target and _figures:
        Path(target).write_text(json.dumps(_figures, indent=1), encoding="utf-8")


# tryfirst: xdist's worker turns the marks into groups in this same hook, and a conftest's
# plain hook ran after it, so the marks came too late and each worker started a server.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`make test`: `-n 2 --dist loadgroup`), every test that talks to
    the real embedded vLLM server runs on one worker, so the session starts one server
    (each worker would start its own: minutes of CPU and GiBs of memory apiece)."""
    for item in items:
        if item.get_closest_marker("integration") is not None:
            item.add_marker(pytest.mark.xdist_group("embedded-vllm"))
        elif item.path.name in WHOLE_ON_ONE_WORKER:
            item.add_marker(pytest.mark.xdist_group(WHOLE_ON_ONE_WORKER[item.path.name]))


# Modules whose module-scoped fixtures start a Chromium and make runs of several protocols:
# split across two workers, each worker built them again (41 s of setup in
# test_report_views.py, 30 s in test_report_browser.py, 20 s in test_compare_page.py).
# The browser and views modules share one group: both read the run of every shipped graph,
# which tests/report/conftest.py makes once per worker.
WHOLE_ON_ONE_WORKER = {
    "test_report_browser.py": "shipped-graph-runs",
    "test_report_views.py": "shipped-graph-runs",
    "test_compare_page.py": "test_compare_page.py",
    "test_review_browser.py": "test_review_browser.py",
    "test_diff_page.py": "test_diff_page.py",
}
