"""Run the reliability tests and print the table of docs/RELIABILITY.md from their figures.

Every row comes from a test that asserts the property it reports (no example lost, bounded
requests, a clean stop); the figures are what that test measured in this run.

    python bench/reliability_table.py            # runs `pytest -m reliability`, prints the table
    python bench/reliability_table.py --from F   # only formats figures saved earlier
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
FIGURES_ENV = "ORCHESTRATOR_RELIABILITY_FIGURES"  # read by tests/conftest.py

COLUMNS = (
    "Fault",
    "How it was injected",
    "Runs",
    "Examples lost",
    "Max requests / node call",
    "Time to recover (s)",
    "Measured",
    "Test",
)


def run_tests(figures: Path, pytest_args: list[str]) -> int:
    command = [sys.executable, "-m", "pytest", "-m", "reliability", "-q", "-p", "no:cacheprovider"]
    env = {**os.environ, FIGURES_ENV: str(figures)}
    return subprocess.call([*command, *pytest_args], cwd=REPO, env=env)


def cell(value: Any) -> str:
    if value is None:
        return "–"
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        test = row["test"].split("::", 1)
        name = f"`{Path(test[0]).name}::{test[1]}`" if len(test) == 2 else row["test"]
        values = (
            row["fault"],
            row["injected"],
            row["runs"],
            row["lost"],
            row["max_requests"],
            row["recover_s"],
            row["note"],
        )
        lines.append("| " + " | ".join(cell(v) for v in values) + f" | {name} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", type=Path, help="figures JSON saved earlier")
    parser.add_argument("--save", type=Path, help="also keep the figures JSON here")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments")
    args = parser.parse_args()
    if args.source is not None:
        rows = json.loads(args.source.read_text(encoding="utf-8"))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            figures = Path(tmp) / "figures.json"
            code = run_tests(figures, args.pytest_args)
            if not figures.exists():
                sys.exit(f"the tests recorded no figures (pytest exit {code})")
            rows = json.loads(figures.read_text(encoding="utf-8"))
            if args.save is not None:
                args.save.write_text(figures.read_text(encoding="utf-8"), encoding="utf-8")
            if code != 0:
                print(f"WARNING: pytest exited {code}; some rows may be missing", file=sys.stderr)
    print(table(rows))
    lost = sum(int(r["lost"]) for r in rows)
    print(f"\n{len(rows)} rows; examples lost in all: {lost}")


if __name__ == "__main__":
    main()
