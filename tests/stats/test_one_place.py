"""The package's statistics live in orchestrator/stats/ alone (issue 36, item 3): no other
module defines a rank correlation, a bootstrap, a sign-flip test or an interval of its own,
or reaches for scipy's statistics; a registered compute function may wrap stats in name."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "orchestrator"

# Routines that have one home, stats/: a function of this name anywhere else is a copy.
STATISTICS = {
    "ranks",
    "_ranks",
    "pearson",
    "spearman",
    "_spearman",
    "kendall_tau_b",
    "_kendall",
    "correlation_p",
    "spearman_p",
    "spearman_interval",
    "sign_flip_p",
    "sign_flip_test",
    "sign_flip_interval",
    "cluster_sign_flip",
    "cluster_sums",
    "holm",
    "wilson",
    "_wilson",
    "binomial_tail",
    "welch_p",
    "cohens_dz",
    "bootstrap",
    "resampled",
    "_draws",
    "_cluster_draws",
    "percentile_interval",
    "bca_interval",
    "bootstrap_p",
    "paired_interval",
    "weighted_alpha",
    "fleiss_kappa",
    "t_power",
    "one_way_icc",
    "ppi_mean",
    "ppi_terms",
    "tuned_lambda",
}
# The graph's registered functions of the same name: argument checks and a record around
# the stats routine (tests/compute/ check them against scipy).
WRAPPERS = {("compute/correlation.py", "pearson"), ("compute/correlation.py", "spearman")}
# scipy's statistics and the special functions intervals are made of.
SCIPY = {"scipy.stats"}
SPECIAL = {"ndtr", "ndtri", "betainc", "erf", "erfinv"}


def _modules() -> list[Path]:
    return [p for p in PACKAGE.rglob("*.py") if PACKAGE / "stats" not in p.parents]


def test_no_statistical_routine_is_defined_outside_stats() -> None:
    copies = []
    for path in _modules():
        where = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef):
                continue
            if node.name in STATISTICS and (where, node.name) not in WRAPPERS:
                copies.append(f"{where}:{node.lineno} {node.name}")
    assert not copies, copies


def test_no_module_outside_stats_imports_scipys_statistics() -> None:
    found = []
    for path in _modules():
        where = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = {alias.name for alias in node.names}
                if node.module in SCIPY or (node.module == "scipy" and "stats" in names):
                    found.append(f"{where}:{node.lineno} from {node.module}")
                if node.module == "scipy.special" and names & SPECIAL:
                    found.append(f"{where}:{node.lineno} {sorted(names & SPECIAL)}")
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in SCIPY:
                        found.append(f"{where}:{node.lineno} import {alias.name}")
    assert not found, found


def test_stats_imports_nothing_of_the_package_but_errors() -> None:
    # The bottom layer (pyproject's contract says so too; this names the offender).
    found = []
    for path in (PACKAGE / "stats").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level >= 2 and node.module != "errors":
                found.append(f"{path.name}:{node.lineno} {node.module}")
    assert not found, found
