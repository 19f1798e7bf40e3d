"""The Python API: graphs and rows in, typed records out (`run.py`: `run`, `arun`, `RunResult`,
`load_graph`, `graph_from_dict`; `card.py`: `judge_card`; `estimate.py`: `estimate`, `label_plan`;
`runner.py`: the deprecated `execute(RunConfig)` shim). `orchestrator/__init__.py`
re-exports the public names."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..faces import lazy

if TYPE_CHECKING:
    from .align import Alignment, align
    from .card import JudgeCard, judge_card
    from .diff import RunDiff, diff
    from .estimate import Estimation, LabelPlan, estimate, label_plan
    from .power import PowerEstimate, power
    from .replay import areplay, replay
    from .retest import aretest, retest
    from .run import Graph, RunResult, arun, graph_from_dict, load_graph, run
    from .runner import RunConfig, RunOutcome, execute
    from .stress import astress, stress

lazy(__name__)

__all__ = [
    "Alignment",
    "Estimation",
    "Graph",
    "JudgeCard",
    "LabelPlan",
    "PowerEstimate",
    "RunConfig",
    "RunDiff",
    "RunOutcome",
    "RunResult",
    "align",
    "areplay",
    "aretest",
    "arun",
    "astress",
    "diff",
    "estimate",
    "execute",
    "graph_from_dict",
    "judge_card",
    "label_plan",
    "load_graph",
    "power",
    "replay",
    "retest",
    "run",
    "stress",
]
