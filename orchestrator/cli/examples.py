"""The `examples` verb: a ready-to-paste run line per shipped protocol and its data."""

from __future__ import annotations

import shlex
from pathlib import Path

from .app import app, console, fail


@app.command()
def examples() -> None:
    """Print a ready-to-paste `orchestrator run` line for each shipped graph and its data."""
    from ..shipped import shipped_data, shipped_root

    root = shipped_root()
    if root is None:
        fail("the shipped protocols are not installed; reinstall orchestrator")
    # `--data NAME.jsonl` finds the shipped file when the working folder has none of that
    # name, so the short name pastes anywhere (a site-packages path is long and fragile).
    for comment in (
        f"# the shipped graphs/, prompts/ and examples/ (to copy from): {root}",
        "# --data NAME.jsonl is the shipped example unless your working folder has that file",
    ):
        console.print(comment, markup=False, highlight=False, soft_wrap=True)
    for graph in sorted((root / "graphs").glob("*.yaml")):
        data = shipped_data(graph.stem)
        words = ["orchestrator", "run", graph.stem, "--data"]
        words.append(data.name if data is not None else "YOUR_DATA.jsonl")
        needs = _needs(graph)
        for name in needs.params:
            words += ["--param", f"{name}=VALUE"]
        line = shlex.join(words)
        notes = [*needs.notes, *needs.extras]
        console.print(
            line + (f"   # {'; '.join(notes)}" if notes else ""),
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


class _Needs:
    """What a shipped graph needs beyond its data: required params, install extras."""

    def __init__(self, params: list[str], notes: list[str], extras: list[str]) -> None:
        self.params, self.notes, self.extras = params, notes, extras


def _needs(graph: Path) -> _Needs:
    """Read from the graph file itself, without compiling it: compiling a graph whose
    functions need a missing extra fails, and saying which extra is the point here."""
    import yaml

    from ..compute import resolve
    from ..shipped import pip_install

    spec = yaml.safe_load(graph.read_text(encoding="utf-8")) or {}
    params = [str(p) for p in spec.get("required_params") or []]
    notes = [f"{p} is required (graphs/{graph.name} says what it is)" for p in params]
    entries = [*(spec.get("nodes") or {}).values(), *(spec.get("aggregates") or {}).values()]
    extras: set[str] = set()
    for entry in entries:
        name = entry.get("function") if isinstance(entry, dict) else None
        if isinstance(name, str):
            try:
                extra = resolve(name).extra
            except LookupError:
                continue
            if extra:
                extras.add(extra)
    return _Needs(params, notes, [f"needs {pip_install(extra)}" for extra in sorted(extras)])
