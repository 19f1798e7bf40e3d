"""`harden:` measured: stress --perturb injection on the pointwise judge, with and without it.

Runs graphs/pointwise.yaml twice on the same 20 rows (examples/pointwise, gemba and geval,
which all carry input, reference and output): once as shipped, once with
`harden: {delimit: [output], schema_only: true}` on its judge. Each run is then stressed
with `--perturb injection` on all its rows, against the same server, and the script prints
each stress report's effects (mean shift of `content` and `style` with their intervals and
Holm p-values) and the wall time of each step. By default the server is the embedded
SmolLM2-135M vLLM CPU server, started here on a free port (or the one `orchestrator serve`
keeps on the default port); --base-url names another.

    python bench/harden_injection.py [--base-url URL] [--out DIR]

The numbers are recorded in docs/stress.md ("Hardening, measured").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("pointwise", "gemba", "geval")


def rows(out: Path) -> Path:
    """The 20 rows judged: every example row with input, reference and output."""
    lines = []
    for name in SOURCES:
        for line in (ROOT / "examples" / f"{name}.jsonl").read_text().splitlines():
            row = json.loads(line)
            kept = {k: row[k] for k in ("input", "reference", "output")}
            lines.append(json.dumps({"id": f"{name}-{row['id']}", **kept}))
    path = out / "rows.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def graph(out: Path, hardened: bool) -> Path:
    """The shipped pointwise graph, its judge hardened or not, next to a copy of prompts/."""
    folder = out / ("hardened" if hardened else "plain")
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ROOT / "prompts", folder / "prompts", dirs_exist_ok=True)
    spec = {
        "prompts": "prompts",
        **yaml.safe_load((ROOT / "graphs" / "pointwise.yaml").read_text()),
    }
    if hardened:
        spec["nodes"]["judge"]["harden"] = {"delimit": ["output"], "schema_only": True}
    path = folder / "graph.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def orchestrator(*args: str) -> tuple[str, float]:
    """Run one CLI command; its stdout and wall time."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        capture_output=True,
        text=True,
        env=os.environ,
    )
    if done.returncode not in (0, 2):  # 2: some rows failed, which stress tolerates
        raise SystemExit(f"orchestrator {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return done.stdout, time.monotonic() - started


def measure(base_url: str, out: Path) -> None:
    data = rows(out)
    for hardened in (False, True):
        path = graph(out, hardened)
        run = out / "runs" / path.parent.name
        _, ran = orchestrator(
            "run", str(path), "--data", str(data), "--out", str(run), "--base-url", base_url
        )
        report, stressed = orchestrator(
            "stress", str(run), "--node", "judge", "--perturb", "injection",
            "--rows", "20", "--base-url", base_url, "--format", "json",
        )  # fmt: skip
        print(f"== {path.parent.name}: run {ran:.0f} s, stress {stressed:.0f} s")
        found = json.loads(report)
        print(json.dumps(found, indent=1)[:6000])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="harden-"))
    out.mkdir(parents=True, exist_ok=True)
    if args.base_url:
        measure(args.base_url, out)
        return
    from orchestrator.local import find_running, free_port, server_url, start_server

    running = find_running()
    if running:
        measure(running, out)
        return
    port = free_port()
    with start_server(port, log=lambda m: print(m, file=sys.stderr)):
        measure(server_url(port), out)


if __name__ == "__main__":
    main()
