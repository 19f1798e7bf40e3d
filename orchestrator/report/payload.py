"""The report page's per-execution payload, derived from the trace's models in one place.

Every field of `NodeRun` and `Attempt` is listed here with the short key the page reads it
under (short keys keep a 10,000-example page small), or None with the reason it is left
out. The key maps travel in the page's meta block and app.js reads records only through
them, so a field added to a model fails here at import until it is given a key or a reason,
and a keyed field the page has no special view for is still shown among "other fields".
What the page shows but no field holds (a run's tally) is computed here, under DERIVED_KEYS.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from ..store import WHOLE, Attempt, NodeRun
from .values import abridge

PROMPT_LIMIT = 3000  # characters of per-example prompt text kept when abridging
ITEM_PROMPT_LIMIT = 1200  # tighter for foreach items: a node may run dozens of them
RAW_LIMIT = 1500  # characters of a rejected reply kept when abridging

RUN_KEYS: dict[str, str | None] = {
    "example_id": None,  # the page is the example's
    "node": None,  # the card is the node's
    "item": "i",
    "status": "s",
    "value": "v",
    "error": "e",
    "messages": "m",
    "raw": "r",
    "model": "model",
    "endpoint": "ep",
    "cached": "c",
    "prompt_tokens": "pt",
    "completion_tokens": "ct",
    "latency": "l",
    "started": None,  # latency says how long it took; `orchestrator trace` has the clock
    "finished": None,
    "attempts": "a",
    "request": None,  # sampling params: `orchestrator trace` prints them per call
    "schema": None,  # one per node, often kilobytes: repeating it per example would swell
    "abstain": "ab",  # how sure a node with `abstain:` was, against its threshold
    "id": None,  # storage identity, meaningless on the page
    "run_id": None,  # shown only for earlier executions (see `node_path`)
    "graph_hash": None,  # the run facts show the graph's hash
    "run_key": None,
}
ATTEMPT_KEYS: dict[str, str | None] = {
    "number": "n",
    "kind": "k",
    "error": "e",
    "raw": "r",
    "finish_reason": "f",
    "latency": "l",
    "prompt_tokens": "pt",
    "completion_tokens": "ct",
    "cached": "c",
    "sample": "sm",
    "replica": None,  # which server answered: `orchestrator trace` prints it per attempt
}
# Shown per node run, computed from its fields: the page displays it as sent.
DERIVED_KEYS: dict[str, str] = {"tally": "t"}
EARLIER_RUN = "run"  # an earlier execution's run id (the only place run_id is sent)


def _check(model: type[NodeRun] | type[Attempt], keys: dict[str, str | None]) -> None:
    fields, listed = set(model.model_fields), set(keys)
    if fields != listed:
        raise RuntimeError(
            f"report payload out of step with {model.__name__}: give "
            f"{sorted(fields - listed)} a key or a reason in report/payload.py"
            + (f"; drop {sorted(listed - fields)}" if listed - fields else "")
        )
    used = [k for k in keys.values() if k is not None]
    if len(used) != len(set(used)):
        raise RuntimeError(f"report payload keys of {model.__name__} repeat: {used}")


_check(NodeRun, RUN_KEYS)
_check(Attempt, ATTEMPT_KEYS)
if set(DERIVED_KEYS.values()) & set(RUN_KEYS.values()) or set(DERIVED_KEYS) & set(RUN_KEYS):
    raise RuntimeError("report payload: a derived key repeats a field's name or key")


# The fields sent, by key, and what is computed from them.
RUN = {f: k for f, k in RUN_KEYS.items() if k is not None} | DERIVED_KEYS
ATTEMPT = {f: k for f, k in ATTEMPT_KEYS.items() if k is not None}


def page_keys() -> dict[str, Any]:
    """The key maps app.js reads records through (meta.keys)."""
    return {"run": RUN, "attempt": ATTEMPT, "earlier_run": EARLIER_RUN}


class DetailOptions:
    """How much of each example's trace to keep, and the prompt heads stored once."""

    def __init__(
        self,
        full: bool = False,
        shared: list[str] | None = None,
        shared_index: dict[tuple[str, str], int] | None = None,
    ) -> None:
        self.full = full
        self.shared = shared or []
        self.shared_index = shared_index or {}

    def limit(self, base: int) -> int | None:
        return None if self.full else base


_SKIP: Any = object()  # a view's "leave this field out"


def _messages(rec: NodeRun, opts: DetailOptions) -> Any:
    """[role, shared head index or -1, the rest of the text] per message."""
    if not rec.messages:
        return _SKIP
    out: list[list[Any]] = []
    limit = opts.limit(PROMPT_LIMIT if rec.item == WHOLE else ITEM_PROMPT_LIMIT)
    for message in rec.messages:
        role = str(message.get("role"))
        text = str(message.get("content") or "")
        shared = opts.shared_index.get((rec.node, role), -1)
        if shared >= 0 and text.startswith(opts.shared[shared]):
            text = text[len(opts.shared[shared]) :]
        else:
            shared = -1
        out.append([role, shared, abridge(text, limit)])
    return out


def _value(rec: NodeRun, opts: DetailOptions) -> Any:
    value = rec.value
    if value is None:
        return _SKIP  # a value of 0 or False is still a value
    if opts.full or not isinstance(value, dict) or "_logprobs" not in value:
        return value
    return {**value, "_logprobs": "(token logprobs omitted; `report --full-prompts` keeps them)"}


def _raw_repeats_value(raw: Any, value: Any) -> bool:
    if not isinstance(raw, list) or len(raw) != 1 or not isinstance(raw[0], str):
        return raw is None
    try:
        return bool(orjson.loads(raw[0]) == value)
    except orjson.JSONDecodeError:
        return False


def _raw(rec: NodeRun, opts: DetailOptions) -> Any:
    raw = rec.raw
    if _raw_repeats_value(raw, rec.value):
        return _SKIP
    limit = opts.limit(RAW_LIMIT)
    return [abridge(str(r), limit) for r in raw] if isinstance(raw, list) else raw


def _attempt_raw(att: Attempt, opts: DetailOptions) -> Any:
    # An accepted reply is the record's value; only a rejected one is worth showing.
    if att.kind in ("ok", "cache") or not att.raw:
        return _SKIP
    return abridge(str(att.raw), opts.limit(RAW_LIMIT))


def _tokens(att: Attempt, field: str) -> Any:
    # Both or neither: the page shows "pt + ct".
    return getattr(att, field) if (att.prompt_tokens or att.completion_tokens) else _SKIP


def _flag(on: bool) -> Any:
    return 1 if on else _SKIP


def _seconds(latency: float) -> Any:
    return round(float(latency), 4) if latency else _SKIP


_ATTEMPT_VIEWS: dict[str, Callable[[Attempt, DetailOptions], Any]] = {
    "raw": _attempt_raw,
    "latency": lambda att, _: _seconds(att.latency),
    "prompt_tokens": lambda att, _: _tokens(att, "prompt_tokens"),
    "completion_tokens": lambda att, _: _tokens(att, "completion_tokens"),
    "cached": lambda att, _: _flag(att.cached),
    "sample": lambda att, _: _SKIP if att.sample is None else att.sample,  # sample 0 is one
}
_RUN_VIEWS: dict[str, Callable[[NodeRun, DetailOptions], Any]] = {
    "item": lambda rec, _: rec.item,  # item 0 is an item
    "status": lambda rec, _: rec.status,
    "value": _value,
    "messages": _messages,
    "raw": _raw,
    "cached": lambda rec, _: _flag(rec.cached),
    "latency": lambda rec, _: _seconds(rec.latency),
    "attempts": lambda rec, opts: [compact_attempt(a, opts) for a in rec.attempts] or _SKIP,
}


def _compact(
    model: Any, keys: dict[str, str | None], views: dict[str, Any], opts: Any
) -> dict[str, Any]:
    """A model's fields under their page keys: through its view, else as is unless empty."""
    out: dict[str, Any] = {}
    for field, key in keys.items():
        if key is None:
            continue
        view = views.get(field)
        value = view(model, opts) if view is not None else (getattr(model, field) or _SKIP)
        if value is not _SKIP:
            out[key] = value
    return out


def compact_attempt(att: Attempt, opts: DetailOptions) -> dict[str, Any]:
    """One attempt under ATTEMPT_KEYS; empty fields are left out."""
    return _compact(att, ATTEMPT_KEYS, _ATTEMPT_VIEWS, opts)


def compact_record(rec: NodeRun, opts: DetailOptions) -> dict[str, Any]:
    """One node execution as the page shows it, under RUN_KEYS; empty fields left out."""
    out = _compact(rec, RUN_KEYS, _RUN_VIEWS, opts)
    tally = rec.tally()
    if tally is not None:
        out[DERIVED_KEYS["tally"]] = str(tally)
    return out
