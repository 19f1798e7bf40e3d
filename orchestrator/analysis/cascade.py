"""A certified cascade: one confidence threshold per judge, cheapest first, so that the
examples answered automatically disagree with people at most R, with probability ≥ 1 − δ.

Trust or Escalate (Jung, Brahman, Choi, 2024): stage k answers an example that reaches it
when its confidence is at or above t_k, else passes it on; what no stage answers goes to
people. The thresholds are picked stage by stage on the labelled examples that reach the
stage (those every earlier stage passed on), each with Learn then Test's fixed-sequence
testing (`select_threshold`, as `calibrate` picks one judge's) at level δ/K: by the union
bound, with probability ≥ 1 − δ every stage errs on at most R of what it answers, so the
examples answered by all stages together err on at most R. A stage whose confidence says
nothing of its errors gets no threshold and never answers on its own.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel

from ..compute import judged, wrong_answer
from ..errors import CalibrationError, ConfigurationError, LabelError
from ..stats import generator
from ..store import (
    NodeRun,
    RunReader,
    TraceReader,
    check_out,
    claim_out,
    clear_out,
    command_output,
    on_disk,
)
from .calibrate import NO_CONFIDENCE, check_bounds, consensus_labels, select_threshold
from .metaeval import label_truth, read_labels

__all__ = [
    "CascadeCalibration",
    "Stage",
    "calibrate_cascade",
    "cascade_thresholds",
    "write_calibrated",
]


class Stage(BaseModel):
    """One stage of a calibrated cascade and what it does on the labelled examples."""

    node: str
    threshold: float | None  # None: this stage never answers on its own
    reached: int  # labelled calibration examples that reach it
    answered: int
    errors: int
    requests: int = 0  # what the stage sent per example reaching it, summed as the cascade
    tokens: int = 0  # would send it (from the trace of the run every stage ran on)


class CascadeCalibration(BaseModel):
    """Thresholds per stage, coverage, and the disagreement on held-out labels."""

    field: str
    stages: list[Stage]
    n: int  # labelled examples calibrated on
    answered: int
    errors: int
    to_review: int  # examples no stage answers: the review queue
    target_risk: float
    delta: float
    tolerance: float
    held_out: int = 0
    held_out_answered: int = 0
    held_out_errors: int = 0
    message: str | None = None

    @property
    def thresholds(self) -> list[float | None]:
        return [s.threshold for s in self.stages]


def cascade_thresholds(
    confidence: np.ndarray, wrong: np.ndarray, risk: float, delta: float
) -> list[float | None]:
    """Each stage's threshold from (stages, examples) confidences and errors: stage k is
    calibrated on the examples every earlier stage passes on, at δ/K (see the module)."""
    conf = np.asarray(confidence, dtype=float)
    bad = np.asarray(wrong, dtype=bool)
    level = delta / conf.shape[0]
    reaching = np.ones(conf.shape[1], dtype=bool)
    chosen: list[float | None] = []
    for stage in range(conf.shape[0]):
        threshold = math.nan
        if reaching.any():
            threshold = float(
                select_threshold(conf[stage, reaching], bad[stage, reaching], risk, level)[0]
            )
        if math.isnan(threshold):
            chosen.append(None)
            continue
        chosen.append(threshold)
        reaching &= conf[stage] < threshold
    return chosen


def answering_stage(confidence: np.ndarray, thresholds: list[float | None]) -> np.ndarray:
    """Per example, the index of the stage that answers it, −1 when none does."""
    conf = np.asarray(confidence, dtype=float)
    stage = np.full(conf.shape[1], -1)
    for index in range(conf.shape[0] - 1, -1, -1):  # the earliest sure stage wins
        threshold = thresholds[index]
        if threshold is not None:
            stage = np.where(conf[index] >= threshold, index, stage)
    return stage


def _cost(record: NodeRun) -> tuple[int, int]:
    """The requests a node run sent (re-asks included; a cached reply sent none) and its
    tokens, prompt and completion."""
    tally = record.tally()
    return (tally.requests if tally else 0), record.prompt_tokens + record.completion_tokens


def _stage_values(
    folder: Path, stages: list[str]
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, tuple[int, int]]]]:
    """Each stage's ok values by example, and its requests and tokens by example."""
    reader = RunReader(folder)
    if not reader.has_trace:
        raise CalibrationError(f"{folder}: no trace to read the stages from")
    values: dict[str, dict[str, Any]] = {}
    costs: dict[str, dict[str, tuple[int, int]]] = {}
    with TraceReader.open(reader.traces_path) as trace:
        for stage in stages:
            records = [r for r in trace.node_runs(node=stage) if r.status == "ok"]
            if not records:
                raise CalibrationError(f"{folder}: the trace has no ok run of node '{stage}'")
            values[stage] = {r.example_id: r.value for r in records}
            costs[stage] = {r.example_id: _cost(r) for r in records}
    return values, costs


def calibrate_cascade(
    run_dir: str | Path,
    labels: str | Path,
    *,
    stages: list[str],
    field: str,
    risk: float,
    delta: float = 0.1,
    tolerance: float = 0.0,
    holdout: float = 0.0,
    seed: int = 0,
) -> CascadeCalibration:
    """Thresholds for `stages` (LLM nodes, cheapest first) from a run in which every stage
    judged every example, against `labels` (as meta-eval reads them). `holdout` keeps that
    share of the labelled examples (a seeded draw) out of calibration to report the
    realised disagreement of the calibrated cascade on them."""
    check_bounds(risk, delta, tolerance)
    if not stages or len(set(stages)) != len(stages):
        raise CalibrationError(
            f"--cascade {','.join(stages)}: name each stage once, cheapest first"
        )
    if not 0.0 <= holdout < 1.0:
        raise ValueError(f"holdout must be in [0, 1), got {holdout!r}")
    folder = Path(run_dir)
    rows = {r.id: r.outputs for r in RunReader(folder).results() if r.status == "ok"}
    values, costs = _stage_values(folder, stages)
    ids, conf, bad = [], [], []
    for label in consensus_labels(rows, read_labels(Path(labels)), field):
        if not all(label["id"] in values[s] for s in stages):
            continue
        found = []
        for stage in stages:
            one = judged(values[stage][label["id"]], field, tolerance)
            if one is None:
                raise CalibrationError(NO_CONFIDENCE.format(node=stage))
            found.append(one)
        ids.append(label["id"])
        conf.append([f.confidence for f in found])
        bad.append([wrong_answer(f.answer, label_truth(label), tolerance) for f in found])
    if not ids:
        raise LabelError(f"{labels}: no label matches an example every stage judged")
    confidence, wrong = np.asarray(conf, dtype=float).T, np.asarray(bad, dtype=bool).T
    test = np.zeros(len(ids), dtype=bool)
    if holdout:
        draw = generator(seed).permutation(len(ids))
        test[draw[: round(holdout * len(ids))]] = True
    fit = ~test
    thresholds = cascade_thresholds(confidence[:, fit], wrong[:, fit], risk, delta)
    who = answering_stage(confidence, thresholds)
    index = np.arange(len(ids))
    kept: list[Stage] = []
    reaching = fit.copy()
    for k, stage in enumerate(stages):
        mine = fit & (who == k)
        reached_ids = [ids[i] for i in index[reaching]]
        kept.append(
            Stage(
                node=stage,
                threshold=thresholds[k],
                reached=int(reaching.sum()),
                answered=int(mine.sum()),
                errors=int(wrong[k, mine].sum()),
                requests=sum(costs[stage][i][0] for i in reached_ids),
                tokens=sum(costs[stage][i][1] for i in reached_ids),
            )
        )
        reaching &= who != k
    answered_fit = fit & (who >= 0)
    errors_fit = int(sum(wrong[who[i], i] for i in index[answered_fit]))
    answered_test = test & (who >= 0)
    message = None
    if all(t is None for t in thresholds):
        message = (
            f"no stage keeps the error among its answers at most {risk:g} with probability "
            f"{1 - delta:g}: every example goes to review (more labels or a better judge help)"
        )
    return CascadeCalibration(
        field=field,
        stages=kept,
        n=int(fit.sum()),
        answered=int(answered_fit.sum()),
        errors=errors_fit,
        to_review=int((fit & (who < 0)).sum()),
        target_risk=risk,
        delta=delta,
        tolerance=tolerance,
        held_out=int(test.sum()),
        held_out_answered=int(answered_test.sum()),
        held_out_errors=int(sum(wrong[who[i], i] for i in index[answered_test])),
        message=message,
    )


GRAPH_FILE = "graph.yaml"
RECORD_FILE = "calibration.json"
PROMPTS = "prompts"
# What `orchestrator calibrate --out` writes, and how it knows the folder is its own.
CALIBRATED_FOLDER = command_output("calibrate", {GRAPH_FILE, RECORD_FILE, PROMPTS})


def cascade_node(spec: dict[str, Any], stages: list[str], where: Path) -> str:
    """The name of the graph's cascade node whose `escalate:` is `stages`, in order."""
    nodes = spec.get("nodes") if isinstance(spec.get("nodes"), dict) else {}
    for name, node in (nodes or {}).items():
        cascade = isinstance(node, dict) and node.get("kind") == "cascade"
        if cascade and list(node.get("escalate") or []) == stages:
            return str(name)
    raise ConfigurationError(
        f"{where}: no node of kind cascade has escalate: [{', '.join(stages)}] "
        "(add one to the graph, run it, then calibrate)"
    )


def write_calibrated(
    out: Path, run_dir: Path, record: CascadeCalibration, stages: list[str], overwrite: bool
) -> Path:
    """OUT/graph.yaml: the run's graph with the cascade's thresholds set, its prompts
    copied beside it, and OUT/calibration.json. OUT follows the one `--out` rule (missing,
    empty or calibrate's own, never a folder holding what the command reads)."""
    reader = RunReader(run_dir)
    known = reader.manifest.graph.path
    source = Path(known) if known else None
    if source is None or not source.is_file():
        raise ConfigurationError(f"{run_dir}: its graph file {known!r} is not there to copy")
    spec = yaml.safe_load(source.read_text(encoding="utf-8"))
    if not isinstance(spec, dict):
        raise ConfigurationError(f"{source}: not a graph file")
    node = cascade_node(spec, stages, source)
    prompts = (source.parent / str(spec.get("prompts", "../prompts"))).resolve()
    check_out(out, CALIBRATED_FOLDER, overwrite, reads=[source, prompts, reader.path])
    if overwrite and out.is_dir():
        clear_out(out, CALIBRATED_FOLDER)
    claim_out(out, CALIBRATED_FOLDER)
    with on_disk(out):
        if prompts.is_dir():
            shutil.copytree(prompts, out / PROMPTS, dirs_exist_ok=True)
        spec["prompts"] = PROMPTS
        spec["nodes"][node]["thresholds"] = record.thresholds
        graph = out / GRAPH_FILE
        graph.write_text(
            yaml.safe_dump(spec, sort_keys=False, allow_unicode=True), encoding="utf-8"
        )
        (out / RECORD_FILE).write_text(record.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return graph
