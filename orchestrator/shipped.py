"""The protocols that ship with orchestrator (graphs/, prompts/, examples/): found beside
the package in a source checkout, or as the package's own data in an installed wheel."""

from __future__ import annotations

from pathlib import Path

# The name on the package index. `orchestrator` there is an unrelated project, so the
# distribution has its own name; the import name and the command stay `orchestrator`.
DISTRIBUTION = "orchestrator-judge"
# Its version (pyproject.toml says the same; `orchestrator.__version__` is this one).
__version__ = "0.1.0"


def pip_install(extra: str | None = None) -> str:
    """The pip command that installs this package (with `extra`), for hints the tool prints."""
    return f"pip install '{DISTRIBUTION}[{extra}]'" if extra else f"pip install {DISTRIBUTION}"


_PACKAGE = Path(__file__).resolve().parent
# In a wheel the three folders are copied under the package (see pyproject.toml).
_CANDIDATES = (_PACKAGE / "_shipped", _PACKAGE.parent)


def shipped_root() -> Path | None:
    """The folder holding graphs/, prompts/ and examples/, or None when not installed."""
    for root in _CANDIDATES:
        if (root / "graphs").is_dir() and (root / "prompts").is_dir():
            return root
    return None


def shipped_graph(name: str) -> Path | None:
    """graphs/NAME.yaml of the shipped protocols, if there is one."""
    root = shipped_root()
    path = root / "graphs" / f"{name}.yaml" if root else None
    return path if path is not None and path.is_file() else None


def shipped_examples(name: str) -> Path | None:
    """examples/NAME.jsonl, the example data of a shipped graph."""
    root = shipped_root()
    path = root / "examples" / f"{name}.jsonl" if root else None
    return path if path is not None and path.is_file() else None


def shipped_example_files() -> list[Path]:
    """Every data file in the shipped examples/ folder, sorted by name."""
    root = shipped_root()
    folder = root / "examples" if root else None
    return sorted(folder.glob("*.jsonl")) if folder is not None and folder.is_dir() else []


def shipped_data(name: str) -> Path | None:
    """A shipped example data file named ``name`` (``expert.jsonl``) or by its stem (``expert``)."""
    for path in shipped_example_files():
        if name in (path.name, path.stem):
            return path
    return None
