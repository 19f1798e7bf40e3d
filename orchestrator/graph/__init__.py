"""A graph file from YAML to something runnable: bounded YAML (`yamlfile.py`), the typed spec,
the checks, compilation into a `CompiledGraph` (`compiled.py`), output schemas, and the
templates with the sandbox they render in."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..faces import lazy

if TYPE_CHECKING:
    from .checks import (
        SAMPLE_ROWS,
        Checker,
        NodeScope,
        check_arguments,
        check_input_types,
        check_sampling,
        resolve_function,
    )
    from .compile import compile_dict, compile_graph, compile_source
    from .compiled import (
        CompiledAggregate,
        CompiledGraph,
        CompiledNode,
        GraphRegistries,
        install_compilers,
    )
    from .loaders import PromptLoader
    from .once import ONCE_EXAMPLE, group_example, group_orders, once_order, row_order
    from .schemas import SchemaError, build_model, dynamic_fields, json_schema
    from .spec import SAMPLING_TYPES, FieldSpec, GraphSpec, NodeBase, Sampling, sampling_problem
    from .templates import Expression, Prompt
    from .yamlfile import load_yaml

lazy(__name__)

__all__ = [
    "ONCE_EXAMPLE",
    "SAMPLE_ROWS",
    "SAMPLING_TYPES",
    "Checker",
    "CompiledAggregate",
    "CompiledGraph",
    "CompiledNode",
    "Expression",
    "FieldSpec",
    "GraphRegistries",
    "GraphSpec",
    "NodeBase",
    "NodeScope",
    "Prompt",
    "PromptLoader",
    "Sampling",
    "SchemaError",
    "build_model",
    "check_arguments",
    "check_input_types",
    "check_sampling",
    "compile_dict",
    "compile_graph",
    "compile_source",
    "dynamic_fields",
    "group_example",
    "group_orders",
    "install_compilers",
    "json_schema",
    "load_yaml",
    "once_order",
    "resolve_function",
    "row_order",
    "sampling_problem",
]
