"""Output schemas from the graph file compiled to Pydantic models.

The JSON schema sent to the server is derived from the same model that validates the
reply, so the two cannot drift apart.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from ..errors import SchemaError
from .spec import FieldSpec

_SCALARS: dict[str, type] = {"string": str, "integer": int, "number": float, "boolean": bool}
# Lists and objects inside one another; the shipped graphs nest at most 3 deep.
MAX_SCHEMA_DEPTH = 10


def _model_name(path: str) -> str:
    return "".join(p.capitalize() for p in re.split(r"[^A-Za-z0-9]+", path) if p) or "Output"


def _matches(value: Any, kind: str) -> bool:
    """Whether an enum value has the field's type (true/false is not a number)."""
    if isinstance(value, bool):
        return kind == "boolean"
    if kind == "number":
        return isinstance(value, int | float)
    return isinstance(value, _SCALARS.get(kind, object))


def _check_name(path: str, name: str) -> None:
    if not name:
        raise SchemaError(path, "a field needs a non-empty name")
    if name.startswith(("_", "model_")):
        # pydantic drops `_x` fields and reserves `model_*` (model_config would vanish).
        raise SchemaError(path, f"field names may not start with '_' or 'model_' ('{name}')")


def _check(path: str, spec: FieldSpec) -> None:
    numeric = spec.type in ("integer", "number")
    if (spec.min is not None or spec.max is not None) and not numeric:
        raise SchemaError(path, "min/max apply to integer and number fields only")
    if spec.min is not None and spec.max is not None and spec.min > spec.max:
        raise SchemaError(path, f"min {spec.min} is greater than max {spec.max}")
    for key in ("min_length", "max_length", "min_items", "max_items"):
        if (getattr(spec, key) or 0) < 0:
            raise SchemaError(path, f"{key} cannot be negative")
    if (
        spec.min_length is not None
        and spec.max_length is not None
        and spec.min_length > spec.max_length
    ):
        raise SchemaError(path, f"min_length {spec.min_length} > max_length {spec.max_length}")
    if (spec.min_length is not None or spec.max_length is not None) and spec.type != "string":
        raise SchemaError(path, "min_length/max_length apply to string fields only")
    if (spec.min_items is not None or spec.max_items is not None) and spec.type != "list":
        raise SchemaError(path, "min_items/max_items apply to list fields only")
    if (
        spec.min_items is not None
        and spec.max_items is not None
        and spec.min_items > spec.max_items
    ):
        raise SchemaError(path, f"min_items {spec.min_items} > max_items {spec.max_items}")
    if spec.type == "list" and spec.items is None:
        raise SchemaError(path, "a list field needs `items` (the type of one element)")
    if spec.type == "object" and not spec.fields:
        raise SchemaError(path, "an object field needs `fields`")
    if spec.items is not None and spec.type != "list":
        raise SchemaError(path, "`items` belongs to list fields only")
    if spec.fields is not None and spec.type != "object":
        raise SchemaError(path, "`fields` belongs to object fields only")
    if spec.enum is not None and spec.enum_from is not None:
        raise SchemaError(path, "use either `enum` or `enum_from`, not both")
    if spec.enum is not None and not spec.enum:
        raise SchemaError(path, "`enum` must list at least one value")
    if (spec.enum is not None or spec.enum_from is not None) and spec.type not in _SCALARS:
        raise SchemaError(path, "enums apply to string, integer, number or boolean fields")
    for value in spec.enum or []:
        if not _matches(value, spec.type):
            raise SchemaError(path, f"enum value {value!r} is not of type {spec.type}")


def _annotation(
    path: str, spec: FieldSpec, dynamic: dict[str, Sequence[Any]], depth: int = 1
) -> tuple[Any, Any]:
    """The (type, FieldInfo) pair for one field, recursing into lists and objects."""
    if depth > MAX_SCHEMA_DEPTH:
        raise SchemaError(path, f"lists and objects nest more than {MAX_SCHEMA_DEPTH} deep")
    _check(path, spec)
    choices: Sequence[Any] | None = spec.enum
    if spec.enum_from is not None:
        choices = dynamic.get(path)
        if choices is None:
            # At compile time the values are unknown; any value of the base type is fine
            # for checking the schema shape.
            choices = None
        elif not choices:
            raise SchemaError(path, "`enum_from` produced no values for this call")
    kwargs: dict[str, Any] = {}
    if spec.description:
        kwargs["description"] = spec.description
    if choices is not None:
        base: Any = Literal[tuple(choices)]
    elif spec.type in _SCALARS:
        base = _SCALARS[spec.type]
        if spec.type == "number":
            # JSON has no NaN or infinity, yet replies carry them (`NaN`, `Infinity`, `1e400`,
            # "inf"): stored they become null and leave the means in silence. Invalid here,
            # so the reply is re-asked; the schema sent to the server is the same.
            kwargs["allow_inf_nan"] = False
        if spec.min is not None:
            kwargs["ge"] = int(spec.min) if spec.type == "integer" else spec.min
        if spec.max is not None:
            kwargs["le"] = int(spec.max) if spec.type == "integer" else spec.max
        if spec.min_length is not None:
            kwargs["min_length"] = spec.min_length
        if spec.max_length is not None:
            kwargs["max_length"] = spec.max_length
    elif spec.type == "list":
        assert spec.items is not None
        inner, inner_info = _annotation(f"{path}[]", spec.items, dynamic, depth + 1)
        # Built at run time from the graph's declared schema, which no checker can see.
        base = list[Annotated[inner, inner_info]]  # type: ignore[valid-type]
        if spec.min_items is not None:
            kwargs["min_length"] = spec.min_items
        if spec.max_items is not None:
            kwargs["max_length"] = spec.max_items
    else:
        assert spec.fields is not None
        base = build_model(_model_name(path), spec.fields, dynamic, prefix=path, depth=depth + 1)
    if not spec.required:
        return base | None, Field(default=None, **kwargs)
    return base, Field(**kwargs)


def build_model(
    name: str,
    fields: dict[str, FieldSpec],
    dynamic: dict[str, Sequence[Any]] | None = None,
    prefix: str = "",
    depth: int = 1,
) -> type[BaseModel]:
    """Compile a mapping of field specs into a Pydantic model (extra keys forbidden).

    `dynamic` maps a dotted field path to the values its `enum_from` produced for one call.
    """
    dynamic = dynamic or {}
    defs = {}
    for fname, spec in fields.items():
        path = f"{prefix}.{fname}" if prefix else fname
        _check_name(path, fname)
        defs[fname] = _annotation(path, spec, dynamic, depth)
    return create_model(  # type: ignore[call-overload]
        _model_name(name), __config__=ConfigDict(extra="forbid"), **defs
    )


def dynamic_fields(fields: dict[str, FieldSpec], prefix: str = "") -> dict[str, str]:
    """Dotted path → `enum_from` expression for every dynamic enum in a schema."""
    found: dict[str, str] = {}

    def walk(path: str, spec: FieldSpec) -> None:
        if spec.enum_from is not None:
            found[path] = spec.enum_from
        if spec.items is not None:
            walk(f"{path}[]", spec.items)
        for name, sub in (spec.fields or {}).items():
            walk(f"{path}.{name}", sub)

    for fname, spec in fields.items():
        walk(f"{prefix}.{fname}" if prefix else fname, spec)
    return found


@functools.cache
def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema for the server; every property required unless declared optional.

    Memoised per model class: pydantic rebuilds it from scratch on every call, which cost
    about a millisecond per request. Callers must not mutate the returned dict.
    """
    return model.model_json_schema()
