"""`harden:` measured: stress --perturb injection on the pointwise judge, with and without it.

Runs graphs/pointwise.yaml twice on the same 20 rows (examples/pointwise, gemba and geval,
which all carry input, reference and output): once as shipped, once with
`harden: {delimit: [output], schema_only: true}` on its judge. Each run is then stressed
with `--perturb injection` on all its rows, against the same server, and the script prints
each stress report's effects (mean shift of `content` and `style` with their intervals and
Holm p-values) and the wall time of each step. By default the server is the embedded
SmolLM2-135M vLLM CPU server, started here on a free port (or the one `orchestrator serve`
keeps on the default port); --base-url names another.

    python bench/harden_injection.py [--base-url URL] [--out DIR] [--rows N] [--reason-chars C]

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


def rows(out: Path, count: int) -> Path:
    """The first `count` example rows with input, reference and output (20 in all)."""
    lines = []
    for name in SOURCES:
        for line in (ROOT / "examples" / f"{name}.jsonl").read_text().splitlines():
            row = json.loads(line)
            kept = {k: row[k] for k in ("input", "reference", "output")}
            lines.append(json.dumps({"id": f"{name}-{row['id']}", **kept}))
    path = out / "rows.jsonl"
    path.write_text("\n".join(lines[:count]) + "\n")
    return path


def graph(out: Path, hardened: bool, reason_chars: int) -> Path:
    """The shipped pointwise graph, its judge hardened or not, next to a copy of prompts/;
    its reasons capped at `reason_chars` (0: as shipped). The cap is for the 135M model: its
    reasons ran to the 300-token limit, so the JSON was cut off and re-asked, and the first
    attempt stalled there (docs/stress.md)."""
    folder = out / ("hardened" if hardened else "plain")
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ROOT / "prompts", folder / "prompts", dirs_exist_ok=True)
    spec = {
        "prompts": "prompts",
        **yaml.safe_load((ROOT / "graphs" / "pointwise.yaml").read_text()),
    }
    if reason_chars:
        for field in ("content_reason", "style_reason"):
            spec["nodes"]["judge"]["output"][field]["max_length"] = reason_chars
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


def measure(base_url: str, out: Path, count: int, reason_chars: int) -> None:
    data = rows(out, count)
    for hardened in (False, True):
        path = graph(out, hardened, reason_chars)
        run = out / "runs" / path.parent.name
        _, ran = orchestrator(
            "run", str(path), "--data", str(data), "--out", str(run), "--base-url", base_url
        )
        report, stressed = orchestrator(
            "stress", str(run), "--node", "judge", "--perturb", "injection",
            "--rows", str(count), "--base-url", base_url, "--format", "json",
        )  # fmt: skip
        print(f"== {path.parent.name}: run {ran:.0f} s, stress {stressed:.0f} s")
        found = json.loads(report)
        print(json.dumps(found, indent=1)[:6000])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--rows", type=int, default=20, help="rows judged and stressed (<= 20)")
    parser.add_argument(
        "--reason-chars", type=int, default=0, help="cap each reason at this many characters"
    )
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="harden-"))
    out.mkdir(parents=True, exist_ok=True)
    if args.base_url:
        measure(args.base_url, out, args.rows, args.reason_chars)
        return
    from orchestrator.local import find_running, free_port, server_url, start_server

    running = find_running()
    if running:
        measure(running, out, args.rows, args.reason_chars)
        return
    port = free_port()
    with start_server(port, log=lambda m: print(m, file=sys.stderr)):
        measure(server_url(port), out, args.rows, args.reason_chars)


if __name__ == "__main__":
    main()
