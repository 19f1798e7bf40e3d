"""Node kinds: each owns its spec model, its compile step and its executor (see base.py).

The built-in kinds, `llm` and `compute`, are registered on first use of the registry.
"""

from .base import (
    EndpointWant,
    NodeKind,
    RunServices,
    evaluate,
    get_kind,
    kind_of,
    kinds,
    register_kind,
    unregister_kind,
)

__all__ = [
    "EndpointWant",
    "NodeKind",
    "RunServices",
    "evaluate",
    "get_kind",
    "kind_of",
    "kinds",
    "register_kind",
    "unregister_kind",
]
