"""One timed `orchestrator.run` in a child process importing orchestrator from a given
source tree: the two sides of `engine_overhead.py --against REF` run the same code path,
each from its own checkout, in a fresh interpreter of this venv.

The child first runs a small warm-up (imports, SDK set-up, first sqlite open) so the timed
run measures requests, not one-off start-up; it prints its seconds and request count as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# Uses only `orc.run` keywords that both the starting commit and the head accept.
_CHILD = """
import json, sys, time
from pathlib import Path
import orchestrator as orc
graph, data, warm, out, base_url, concurrency = sys.argv[1:7]
def once(rows, folder):
    started = time.perf_counter()
    result = orc.run(graph, rows, out=folder, base_url=base_url, concurrency=int(concurrency),
                     cache=Path(folder).parent / (Path(folder).name + "-cache.sqlite"),
                     structured="server", overwrite=True)
    seconds = time.perf_counter() - started
    counts = result.manifest.counts
    if counts.examples_failed:
        raise SystemExit(f"{counts.examples_failed} failed examples")
    return seconds, counts.requests + counts.cache_hits
once(warm, out + "-warm")
seconds, requests = once(data, out)
print(json.dumps({"seconds": seconds, "requests": requests,
                  "module": orc.__file__}))
"""


def timed_run_in_tree(
    tree: Path,
    graph: Path,
    data: Path,
    warm: Path,
    out: Path,
    base_url: str,
    concurrency: int,
) -> tuple[float, int]:
    """Seconds and requests of one run of `graph` over `data` with `tree`'s orchestrator."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _CHILD,
            str(graph),
            str(data),
            str(warm),
            str(out),
            base_url,
            str(concurrency),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=tree,
    )
    if done.returncode != 0:
        raise SystemExit(f"run with {tree} failed:\n{done.stderr[-3000:]}")
    reply = json.loads(done.stdout.strip().splitlines()[-1])
    if not reply["module"].startswith(str(tree)):
        raise SystemExit(f"the child imported {reply['module']}, not the tree {tree}")
    return float(reply["seconds"]), int(reply["requests"])
