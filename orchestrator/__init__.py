"""orchestrator: evaluation protocols for personalized text as graph files, run against an
OpenAI-compatible (vLLM) server with structured output, caching and full decision traces."""

__version__ = "0.1.0"

from .compile import CompiledGraph, compile_graph
from .errors import DatasetError, GraphError, NodeError, RunFolderError
from .runner import RunConfig, RunOutcome, execute

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
