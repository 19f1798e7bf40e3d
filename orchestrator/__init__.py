"""orchestrator: evaluation protocols for personalized text as graph files, run against an
OpenAI-compatible (vLLM) server with structured output, caching and full decision traces.

The public names below are imported on first use, so `orchestrator --help` and
`orchestrator report` do not pay for the HTTP client stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "CompiledGraph": ".compile",
    "compile_graph": ".compile",
    "DatasetError": ".errors",
    "GraphError": ".errors",
    "NodeError": ".errors",
    "RunFolderError": ".errors",
    "RunConfig": ".runner",
    "RunOutcome": ".runner",
    "execute": ".runner",
}

if TYPE_CHECKING:
    from .compile import CompiledGraph, compile_graph
    from .errors import DatasetError, GraphError, NodeError, RunFolderError
    from .runner import RunConfig, RunOutcome, execute


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")


__all__ = [
    "CompiledGraph",
    "DatasetError",
    "GraphError",
    "NodeError",
    "RunConfig",
    "RunFolderError",
    "RunOutcome",
    "__version__",
    "compile_graph",
    "execute",
]
