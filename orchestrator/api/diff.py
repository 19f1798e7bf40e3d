"""`orc.diff`: where two runs of one graph part, node by node (analysis/diff.py holds the
work; the API and the CLI's `diff` verb reach it through here)."""

from __future__ import annotations

from ..analysis import DiffRun, FirstDifference, NodeChange, RunDiff, diff

__all__ = ["DiffRun", "FirstDifference", "NodeChange", "RunDiff", "diff"]
