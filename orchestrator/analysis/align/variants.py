"""The graphs a search runs: the user's graph dict with one variant applied and, when it
shows shots, a `shots.json` data file the judging node reads through `shots:`."""

from __future__ import annotations

import copy
import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from ...errors import ConfigurationError
from .record import BASELINE, Shot, Variant

SHOTS_FILE = "shots.json"
PROMPTS = "prompts"  # the aligned folder's templates, beside its graph.yaml
TEMPLATE_KEYS = ("prompt", "system")


def parse_variant(text: str) -> Variant:
    """`prompt=NAME`, `system=NAME` (a template in the graph's prompts folder) or
    `params.NAME=VALUE` (VALUE read as JSON when it is, else as text)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not raw.strip():
        raise ConfigurationError(f"a variant is KEY=VALUE, got {text!r}")
    if key in TEMPLATE_KEYS:
        return Variant(key=key, value=raw.strip())
    if key.startswith("params.") and len(key) > len("params."):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        return Variant(key=key, value=value)
    raise ConfigurationError(
        f"variant {text!r}: the key is prompt, system or params.NAME, not {key!r}"
    )


def check_variant(
    variant: Variant, templates: Mapping[str, str], params: Collection[str] = ()
) -> None:
    """A template variant must name a template the graph's prompts folder holds, and a
    param variant a param the graph declares (`params`): an undeclared one changes nothing
    the graph reads, yet would be searched as if it were a configuration."""
    if variant.key in TEMPLATE_KEYS and variant.value not in templates:
        known = ", ".join(sorted(n for n in templates if n != SHOTS_FILE)) or "none"
        raise ConfigurationError(
            f"variant {variant.label}: no template {variant.value!r} in the graph's prompts "
            f"folder (it has: {known})"
        )
    name = variant.key.removeprefix("params.")
    if variant.key.startswith("params.") and name not in params:
        known = ", ".join(sorted(params)) or "none"
        raise ConfigurationError(
            f"variant {variant.label}: the graph declares no param {name!r} (it declares: "
            f"{known}); declare it under params: or required_params:"
        )


def variant_spec(
    spec: Mapping[str, Any],
    node: str,
    variant: Variant,
    *,
    shots: bool,
    name: str | None = None,
) -> dict[str, Any]:
    """A copy of the graph dict with `variant` applied to `node` (or to the params); with
    `shots`, the node reads `files.shots` from SHOTS_FILE. `name` renames the protocol."""
    out = copy.deepcopy(dict(spec))
    out["prompts"] = PROMPTS
    if name is not None:
        out["name"] = name
    target = out["nodes"][node]
    if variant.key in TEMPLATE_KEYS:
        target[variant.key] = variant.value
    elif variant.key != BASELINE:
        params = dict(out.get("params") or {})
        params[variant.key.removeprefix("params.")] = variant.value
        out["params"] = params
    if shots:
        out["files"] = {**dict(out.get("files") or {}), "shots": SHOTS_FILE}
        target["shots"] = "files.shots"
    return out


def variant_texts(templates: Mapping[str, str], shots: Sequence[Shot] | None) -> dict[str, str]:
    """The graph's templates, plus SHOTS_FILE holding `shots` when given."""
    texts = dict(templates)
    if shots is not None:
        texts[SHOTS_FILE] = shots_text(shots)
    return texts


def shots_text(shots: Sequence[Shot]) -> str:
    """The shots as the data file holds them: a JSON list of {id, inputs, output}."""
    return json.dumps([s.model_dump() for s in shots], indent=2, ensure_ascii=False) + "\n"


ISOTONIC_FILE = "isotonic.json"


def integer_range(spec: Mapping[str, Any], node: str, field: str) -> tuple[int, int] | None:
    """The bounds of `node`'s output `field` when it is an integer with `min` and `max`."""
    output = (spec.get("nodes") or {}).get(node, {}).get("output") or {}
    entry = output.get(field) if isinstance(output, dict) else None
    if not isinstance(entry, dict) or entry.get("type") != "integer":
        return None
    low, high = entry.get("min"), entry.get("max")
    return (int(low), int(high)) if isinstance(low, int) and isinstance(high, int) else None


def with_isotonic(spec: Mapping[str, Any], node: str, field: str) -> tuple[dict[str, Any], str]:
    """A copy of the graph dict that also outputs `node.field` through the lookup in
    ISOTONIC_FILE, and the new output's name (`<field>_isotonic`, numbered if taken)."""
    out = copy.deepcopy(dict(spec))
    outputs = dict(out.get("outputs") or {})
    name, number = f"{field}_isotonic", 2
    while name in outputs:
        name, number = f"{field}_isotonic{number}", number + 1
    outputs[name] = f"files.isotonic[{node}.{field} | string]"
    out["outputs"] = outputs
    out["files"] = {**dict(out.get("files") or {}), "isotonic": ISOTONIC_FILE}
    return out, name
