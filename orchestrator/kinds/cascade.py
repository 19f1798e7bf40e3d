"""The `cascade` node kind: one decision that LLM nodes (its stages, cheapest first) answer in
turn, each only when every stage before it was less sure than its threshold.

    decision:
      kind: cascade
      escalate: [judge_small, judge_large]
      field: score
      thresholds: [0.93, 0.81]   # per stage; null: that stage never answers on its own

A stage's confidence is `compute.confidence.judged`, the measure `abstain:` applies and
`orchestrator calibrate --cascade` picks the thresholds with. With thresholds, each later
stage waits for the ones before it and runs only past them (`link` gives it that `when`), so
an example costs only the stages it reaches; one no stage is sure of ends "abstained", the
review queue. Without thresholds (before calibration) every stage runs on every example and
the last one answers: the run a calibration reads.

The node's value says who decided and why: the answer under the field's name, `stage`,
`confidence`, `threshold`, `asked` (each stage reached: its answer, confidence, threshold)
and `why`, in words.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator

from ..compute import ASK_FOR_CONFIDENCE, Judged, judged
from ..errors import NodeAbstained, NodeError
from ..graph import CompiledNode, Expression, FieldSpec, NodeBase
from ..store import AbstainCheck, NodeRecord
from .abstain import field_known, no_confidence
from .base import NodeKind, RunServices

if TYPE_CHECKING:
    from ..graph import Checker, GraphSpec, NodeScope

__all__ = ["CascadeKind", "CascadeNode", "CascadeRule", "stage_decides"]

# What the node's value holds besides the answer (the answer's key is the field's name).
VALUE_KEYS = ("stage", "confidence", "threshold", "asked", "why")


class CascadeNode(NodeBase):
    """One decision answered by the first of its stages sure enough (see the module)."""

    kind: Literal["cascade"]
    escalate: list[str]
    field: str | None = None  # may be left out when the stages' output has one field
    # One per stage, in [0, 1], or null (that stage never answers); none: every stage runs.
    thresholds: list[float | None] | None = None
    # Samples within this of their majority agree with it (as `abstain:` and calibrate).
    tolerance: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)

    @field_validator("thresholds", mode="before")
    @classmethod
    def _numbers(cls, value: Any) -> Any:
        if isinstance(value, list):
            for entry in value:
                if isinstance(entry, bool) or not (entry is None or isinstance(entry, int | float)):
                    raise ValueError(f"a threshold is a number between 0 and 1 or null: {entry!r}")
                if entry is not None and not 0.0 <= float(entry) <= 1.0:
                    raise ValueError(f"a threshold is between 0 and 1, got {entry}")
        return value


@dataclass(frozen=True)
class CascadeRule:
    """A compiled cascade: its stages in order, the field judged and each stage's threshold
    (None for all: uncalibrated, the last stage answers; None for one: it never does)."""

    stages: tuple[str, ...]
    field: str
    thresholds: tuple[float | None, ...] | None
    tolerance: float = 0.0

    def threshold(self, stage: int) -> float | None:
        return None if self.thresholds is None else self.thresholds[stage]

    def sure(self, stage: int, found: Judged) -> bool:
        """Whether stage number `stage` answers with this confidence."""
        return stage_decides(self.thresholds, stage, len(self.stages), found.confidence)

    def judge(self, stage: str, value: Any) -> Judged:
        """A stage's answer and confidence; ValueError when its reply carries none."""
        found = judged(value, self.field, self.tolerance)
        if found is None:
            raise ValueError(
                f"stage '{stage}' gave no confidence for '{self.field}' (neither token "
                f"logprobs nor several samples): ask it for {ASK_FOR_CONFIDENCE}"
            )
        return found


def stage_decides(
    thresholds: tuple[float | None, ...] | list[float | None] | None,
    stage: int,
    stages: int,
    confidence: float,
) -> bool:
    """Whether stage number `stage` of `stages` answers at `confidence`: at or above its
    threshold; never with none; the last stage always when the cascade has no thresholds."""
    if thresholds is None:
        return stage == stages - 1
    threshold = thresholds[stage]
    return threshold is not None and confidence >= threshold


class EscalationGate(Expression):
    """The `when` a cascade gives each later stage: no stage before it answered. An earlier
    stage that did not run was passed over because one before it answered."""

    def __init__(self, cascade: str, rule: CascadeRule, stage: int) -> None:
        # Nothing to parse: a compiled expression's interface over a Python test.
        self.rule, self.stage = rule, stage
        earlier = rule.stages[:stage]
        self.names = set(earlier)
        self.source = f"no earlier stage of cascade {cascade} answered ({', '.join(earlier)})"

    def __call__(self, context: dict[str, Any]) -> Any:
        for index, name in enumerate(self.rule.stages[: self.stage]):
            value = context.get(name)
            if value is None or self.rule.sure(index, self.rule.judge(name, value)):
                return False
        return True


@dataclass
class CompiledCascade(CompiledNode):
    """A cascade ready to run: its rule, or None when the spec had problems."""

    spec: CascadeNode
    rule: CascadeRule | None = None


def _stage_spec(graph: GraphSpec, name: str) -> Any:
    node = graph.nodes.get(name)
    return node if getattr(node, "kind", None) == "llm" else None


def _leaf(output: dict[str, FieldSpec], path: str) -> FieldSpec | None:
    fields: dict[str, FieldSpec] | None = output
    found = None
    for part in path.split("."):
        if not fields or part not in fields:
            return None
        found = fields[part]
        fields = found.fields
    return found


class CascadeKind(NodeKind[CascadeNode, CompiledCascade]):
    """`kind: cascade`."""

    name = "cascade"
    spec_model = CascadeNode
    compiled = CompiledCascade

    def compile(self, cn: CompiledCascade, scope: NodeScope) -> None:
        spec, graph = cn.spec, scope.ck.spec
        stages = list(spec.escalate)
        if not stages:
            scope.problem("name the judging LLM nodes, cheapest first", "escalate")
        if len(set(stages)) != len(stages):
            scope.problem("a stage is listed twice", "escalate")
        if spec.foreach is not None:
            scope.problem("a cascade decides once per example: no foreach", "foreach")
        outputs = []
        for stage in stages:
            node = _stage_spec(graph, stage)
            if node is None:
                known = stage in graph.nodes
                what = "is not an LLM node" if known else "is not a node of this graph"
                scope.problem(f"stage '{stage}' {what}", "escalate")
                continue
            for key, why in (
                ("foreach", "runs once per example"),
                ("when", "runs when the stage before it was not sure (put `when` elsewhere)"),
                ("abstain", "is answered or passed on by the cascade, not by `abstain:`"),
            ):
                if getattr(node, key, None) is not None:
                    scope.problem(f"stage '{stage}' has `{key}:`, but a stage {why}", "escalate")
            if node.once or node.once_per is not None:
                scope.problem(f"stage '{stage}' runs once for many rows: not a stage", "escalate")
            outputs.append((stage, node.output))
        field = spec.field
        if field is None and outputs:
            names = list(outputs[0][1])
            if len(names) == 1:
                field = names[0]
            else:
                scope.problem(f"the stages output {', '.join(names)}: name one", "field")
        for stage, output in outputs:
            if field is not None and not field_known(output, field):
                scope.problem(f"stage '{stage}' has no output field '{field}'", "field")
        if field is not None and field.split(".")[-1] in VALUE_KEYS:
            scope.problem(f"'{field}' would clash with the value's own keys", "field")
        thresholds = spec.thresholds
        if thresholds is not None and len(thresholds) != len(stages):
            scope.problem(
                f"{len(thresholds)} thresholds for {len(stages)} stages: one per stage",
                "thresholds",
            )
        scope.use(set(stages), "escalate")
        if field is not None and stages:
            cn.rule = CascadeRule(
                tuple(stages),
                field,
                None if thresholds is None else tuple(thresholds),
                spec.tolerance,
            )

    def link(self, cn: CompiledCascade, nodes: Mapping[str, CompiledNode], ck: Checker) -> None:
        rule = cn.rule
        if rule is None:
            return
        for index, stage in enumerate(rule.stages):
            node = nodes.get(stage)
            sampling = getattr(node, "sampling", None)
            if node is None or sampling is None:
                continue  # reported by compile
            if no_confidence(sampling):
                ck.problem(
                    f"stage '{stage}' asks for neither token logprobs nor several samples, so "
                    f"it has no confidence to escalate by: ask it for {ASK_FOR_CONFIDENCE}",
                    cn.name,
                    "escalate",
                )
            if isinstance(node.when, EscalationGate):
                ck.problem(f"stage '{stage}' is a stage of another cascade too", cn.name)
                continue
            if index and rule.thresholds is not None:
                gate = EscalationGate(cn.name, rule, index)
                node.when = gate
                node.deps |= gate.names
                for earlier in gate.names:
                    ck.refs.setdefault(stage, {}).setdefault(earlier, f"escalate of {cn.name}")

    def value_fields(self, spec: CascadeNode, graph: GraphSpec) -> dict[str, FieldSpec] | None:
        first = _stage_spec(graph, spec.escalate[0]) if spec.escalate else None
        if first is None:
            return None
        field = spec.field or (next(iter(first.output)) if len(first.output) == 1 else None)
        answer = _leaf(first.output, field) if field else None
        if field is None or answer is None:
            return None
        return {
            field.split(".")[-1]: answer,
            "stage": FieldSpec(type="string"),
            "confidence": FieldSpec(type="number"),
            "threshold": FieldSpec(type="number", required=False),
            "asked": FieldSpec(type="list"),
            "why": FieldSpec(type="string"),
        }

    async def execute(
        self, cn: CompiledCascade, ctx: dict[str, Any], example: str, item: int, run: RunServices
    ) -> Any:
        rule = cn.rule
        assert rule is not None, f"{cn.name} did not compile"
        rec = NodeRecord(example_id=example, node=cn.name, item=item)
        asked: list[dict[str, Any]] = []
        decided: dict[str, Any] | None = None
        found: Judged | None = None
        for index, stage in enumerate(rule.stages):
            value = ctx.get(stage)
            if value is None:
                break  # passed over: a stage before it answered
            try:
                found = rule.judge(stage, value)
            except ValueError as exc:
                rec.status, rec.error = "failed", str(exc)
                run.trace.record(rec)
                raise NodeError(cn.name, str(exc)) from exc
            entry = {
                "node": stage,
                "answer": found.answer,
                "confidence": found.confidence,
                "threshold": rule.threshold(index),
                "answered": rule.sure(index, found),
                "source": found.source,
            }
            asked.append(entry)
            if entry["answered"]:
                decided = entry
                break
        why = _why(asked, rule)
        last = decided or (asked[-1] if asked else None)
        value = {
            rule.field.split(".")[-1]: decided["answer"] if decided else None,
            "stage": decided["node"] if decided else None,
            "confidence": last["confidence"] if last else None,
            "threshold": last["threshold"] if last else None,
            "asked": asked,
            "why": why,
        }
        rec.value = value
        if last is not None and last["threshold"] is not None:
            rec.abstain = AbstainCheck(
                field=rule.field,
                threshold=last["threshold"],
                confidence=last["confidence"],
                source=last["source"],
            )
        if decided is None:
            rec.status, rec.error = "abstained", f"for review: {why}"
            run.trace.record(rec)
            confidence = last["confidence"] if last else 0.0
            threshold = last["threshold"] if last and last["threshold"] is not None else math.inf
            raise NodeAbstained(cn.name, confidence, threshold, reason=rec.error)
        run.trace.record(rec)
        return value


def _why(asked: list[dict[str, Any]], rule: CascadeRule) -> str:
    """Who answered and why, in words: each stage reached, its confidence against its
    threshold."""
    parts = []
    for entry in asked:
        sure, threshold = f"{entry['confidence']:.3f}", entry["threshold"]
        if rule.thresholds is None:
            verdict = (
                "answered (no thresholds: the last stage answers)"
                if entry["answered"]
                else ("passed on (no thresholds)")
            )
        elif threshold is None:
            verdict = "passed on (this stage never answers)"
        elif entry["answered"]:
            verdict = f"answered (at least {threshold:g})"
        else:
            verdict = f"passed on (below {threshold:g})"
        parts.append(f"{entry['node']} {sure} sure: {verdict}")
    if asked and not asked[-1]["answered"]:
        parts.append("no stage was sure enough")
    return "; ".join(parts)
