"""orchestrator: evaluation protocols for personalized text as graph files, run against an
OpenAI-compatible (vLLM) server with structured output, caching and full decision traces.

    import orchestrator as orc
    result = orc.run("graphs/pointwise.yaml", rows, base_url="http://gpu:8000/v1")

The public names below are imported on first use, so `orchestrator --help` and
`orchestrator report` do not pay for the HTTP client stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .shipped import __version__

_EXPORTS = {
    "Graph": ".api.run",
    "RunResult": ".api.run",
    "arun": ".api.run",
    "graph_from_dict": ".api.run",
    "load_graph": ".api.run",
    "run": ".api.run",
    "aretest": ".api.retest",
    "areplay": ".api.replay",
    "replay": ".api.replay",
    "astress": ".api.stress",
    "stress": ".api.stress",
    "StressReport": ".analysis.stress",
    "register_perturbation": ".analysis.stress",
    "retest": ".api.retest",
    "Retest": ".analysis.card.stability",
    "Stability": ".analysis.card.stability",
    "compare": ".analysis.compare",
    "diff": ".api.diff",
    "estimate": ".api.estimate",
    "Estimation": ".api.estimate",
    "label_plan": ".api.estimate",
    "LabelPlan": ".api.estimate",
    "power": ".api.power",
    "PowerEstimate": ".api.power",
    "calibrate": ".analysis.calibrate",
    "Calibration": ".analysis.calibrate",
    "align": ".api.align",
    "Alignment": ".api.align",
    "export": ".analysis.export",
    "node_runs_frame": ".analysis.export",
    "ratings_across_runs": ".analysis.ratings",
    "JudgeCard": ".api.card",
    "judge_card": ".api.card",
    "FakeAnswer": ".providers.fake",
    "FakeTransport": ".providers.fake",
    "RetryPolicy": ".calls.retry",
    "Transport": ".providers.base",
    "CompiledGraph": ".kinds.graphs",  # importing it lets CompiledGraph.load compile
    "compile_graph": ".kinds.graphs",
    "register": ".compute.registry",
    "ConfigurationError": ".errors",
    "DamagedRunFile": ".errors",
    "DatasetError": ".errors",
    "GraphError": ".errors",
    "NodeError": ".errors",
    "OrchestratorError": ".errors",
    "ReadOnlyRunFolder": ".errors",
    "RunFolderError": ".errors",
    "RunKeyMismatch": ".errors",
    "ServerExited": ".errors",
    "ServerGone": ".errors",
    "ServerUnavailable": ".errors",
    "StorageError": ".errors",
    "WorkerFailed": ".errors",
    "WorkerLost": ".errors",
    "NodeKind": ".kinds",
    "register_kind": ".kinds",
    "Attempt": ".store.records",
    "Manifest": ".store.records",
    "NodeRun": ".store.records",
    "ResultLine": ".store.records",
    "Summary": ".store.records",
    "RunReader": ".store.reader",
    "RunConfig": ".api.runner",
    "RunOutcome": ".api.runner",
    "execute": ".api.runner",
    "RowSource": ".data.sources",
    "summarize": ".analysis.groups",
    "MemoryStore": ".store.protocol",
    "RunStore": ".store.protocol",
}

if TYPE_CHECKING:
    from .analysis.calibrate import Calibration, calibrate
    from .analysis.card.stability import Retest, Stability
    from .analysis.compare import compare
    from .analysis.export import export, node_runs_frame
    from .analysis.groups import summarize
    from .analysis.ratings import ratings_across_runs
    from .analysis.stress import StressReport, register_perturbation
    from .api.align import Alignment, align
    from .api.card import JudgeCard, judge_card
    from .api.diff import diff
    from .api.estimate import Estimation, LabelPlan, estimate, label_plan
    from .api.power import PowerEstimate, power
    from .api.replay import areplay, replay
    from .api.retest import aretest, retest
    from .api.run import Graph, RunResult, arun, graph_from_dict, load_graph, run
    from .api.runner import RunConfig, RunOutcome, execute
    from .api.stress import astress, stress
    from .calls.retry import RetryPolicy
    from .compute.registry import register
    from .data.sources import RowSource
    from .errors import (
        ConfigurationError,
        DamagedRunFile,
        DatasetError,
        GraphError,
        NodeError,
        OrchestratorError,
        ReadOnlyRunFolder,
        RunFolderError,
        RunKeyMismatch,
        ServerExited,
        ServerGone,
        ServerUnavailable,
        StorageError,
        WorkerFailed,
        WorkerLost,
    )
    from .graph.compiled import CompiledGraph
    from .kinds import NodeKind, register_kind
    from .kinds.graphs import compile_graph
    from .providers.base import Transport
    from .providers.fake import FakeAnswer, FakeTransport
    from .store.protocol import MemoryStore, RunStore
    from .store.reader import RunReader
    from .store.records import Attempt, Manifest, NodeRun, ResultLine, Summary


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")


__all__ = [
    "Alignment",
    "Attempt",
    "Calibration",
    "CompiledGraph",
    "ConfigurationError",
    "DamagedRunFile",
    "DatasetError",
    "Estimation",
    "FakeAnswer",
    "FakeTransport",
    "Graph",
    "GraphError",
    "JudgeCard",
    "LabelPlan",
    "Manifest",
    "MemoryStore",
    "NodeError",
    "NodeKind",
    "NodeRun",
    "OrchestratorError",
    "PowerEstimate",
    "ReadOnlyRunFolder",
    "ResultLine",
    "Retest",
    "RetryPolicy",
    "RowSource",
    "RunConfig",
    "RunFolderError",
    "RunKeyMismatch",
    "RunOutcome",
    "RunReader",
    "RunResult",
    "RunStore",
    "ServerExited",
    "ServerGone",
    "ServerUnavailable",
    "Stability",
    "StorageError",
    "StressReport",
    "Summary",
    "Transport",
    "WorkerFailed",
    "WorkerLost",
    "__version__",
    "align",
    "areplay",
    "aretest",
    "arun",
    "astress",
    "calibrate",
    "compare",
    "compile_graph",
    "diff",
    "estimate",
    "execute",
    "export",
    "graph_from_dict",
    "judge_card",
    "label_plan",
    "load_graph",
    "node_runs_frame",
    "power",
    "ratings_across_runs",
    "register",
    "register_kind",
    "register_perturbation",
    "replay",
    "retest",
    "run",
    "stress",
    "summarize",
]
