"""The `llm` node kind: prompt template(s) in, schema-validated JSON out, one server call
(with its re-asks) per run of the node."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from jinja2 import TemplateError
from pydantic import BaseModel

from ..calls import request_params
from ..errors import LLMCallError, NodeError, Problem
from ..graph import (
    SAMPLING_TYPES,
    CompiledNode,
    FieldSpec,
    GraphSpec,
    NodeBase,
    Sampling,
    SchemaError,
    build_model,
    check_sampling,
    dynamic_fields,
    json_schema,
    sampling_problem,
)
from ..providers import unknown_provider
from ..servers import PARAM_PREFIX, start_seconds_within
from ..store import NodeRecord
from .abstain import Abstain, AbstainRule, compile_abstain
from .base import EndpointWant, NodeKind, RunServices, evaluate
from .harden import Harden, HardenRule, compile_harden

if TYPE_CHECKING:
    from ..graph import Expression, NodeScope, Prompt
    from ..servers import Endpoint

log = logging.getLogger(__name__)


class LLMNode(NodeBase, Sampling):
    """A call to the model: prompt template(s) in, schema-validated JSON out."""

    kind: Literal["llm"]
    prompt: str
    system: str | None = None
    output: dict[str, FieldSpec]
    model: str | None = None
    base_url: str | list[str] | None = None  # a list: replicas serving the same model
    api_key_env: str | None = None
    provider: str | None = None  # a built-in provider by name (None: the run's, --provider)
    on_error: Literal["fail", "record"] = "fail"
    # An expression giving the node's few-shot set (normally `files.shots`): records with
    # `inputs` and `output`, shown as example turns or given to the template as `shots`.
    shots: str | None = None
    abstain: Abstain | None = None  # too unsure of a field: the example abstains (abstain.py)
    # Judged texts in unguessable delimiters, the verdict from the JSON alone (harden.py).
    harden: Harden | None = None


@dataclass
class CompiledLLM(CompiledNode):
    """An LLM node ready to run: loaded templates, compiled schema, merged sampling."""

    spec: LLMNode
    prompt: Prompt | None = None
    system: Prompt | None = None
    model: type[BaseModel] | None = None  # static schema (dynamic enums left open)
    dynamic: dict[str, Expression] = field(default_factory=dict)
    sampling: Sampling = field(default_factory=Sampling)
    sampling_exprs: dict[str, Expression] = field(default_factory=dict)
    warned_deterministic: bool = False  # the n > 1 at temperature 0 warning, once a run
    shots: Expression | None = None
    # The prompt or system template reads `shots` and lays the examples out itself.
    shots_in_template: bool = False
    abstain: AbstainRule | None = None
    harden: HardenRule | None = None

    def messages(self, context: dict[str, Any]) -> list[dict[str, str]]:
        """The chat messages for one call: system (if any), the few-shot example turns (if
        the template does not lay them out), then user."""
        assert self.prompt is not None, f"{self.name} did not compile"
        shots = self._shots(context)
        if self.shots_in_template:
            context = {**context, "shots": shots}  # the node's own; [] without `shots:`
        messages = []
        if self.system is not None:
            messages.append({"role": "system", "content": self.system.render(context)})
        if not self.shots_in_template:
            # A shot's turn sees the run-wide names and the shot's own inputs, never the
            # current row's: a name the shot lacks fails the render instead of leaking.
            shared = {k: context[k] for k in ("params", "run") if k in context}
            for shot in shots:
                turn = {**shared, **shot["inputs"]}
                messages.append({"role": "user", "content": self.prompt.render(turn)})
                messages.append({"role": "assistant", "content": _shot_answer(shot["output"])})
        messages.append({"role": "user", "content": self.prompt.render(context)})
        return messages

    def _shots(self, context: dict[str, Any]) -> list[dict[str, Any]]:
        """The node's few-shot set for this call, each record checked for its shape."""
        if self.shots is None:
            return []
        value = self.shots(context)
        if not isinstance(value, list | tuple):
            raise ValueError(f"shots `{self.shots.source}` gave {type(value).__name__}, not a list")
        for index, shot in enumerate(value):
            ok = isinstance(shot, dict)
            ok = (
                ok
                and isinstance(shot.get("inputs", {}), dict)
                and isinstance(shot.get("output"), dict)
            )
            if not ok:
                raise ValueError(
                    f"shots `{self.shots.source}` item {index}: a shot is a mapping with "
                    "`output` (a mapping of the node's fields) and optionally `inputs`"
                )
        return [{**shot, "inputs": shot.get("inputs") or {}} for shot in value]


def _shot_answer(output: dict[str, Any]) -> str:
    # The answer as the model is asked to give it: one JSON object.
    return json.dumps(output, ensure_ascii=False)


def _merge_sampling(defaults: Sampling, node: LLMNode) -> Sampling:
    values = defaults.model_dump(exclude_none=True)
    values.update(
        {k: v for k, v in node.model_dump().items() if k in Sampling.model_fields and v is not None}
    )
    return Sampling(**values)


class LLMKind(NodeKind[LLMNode, CompiledLLM]):
    """`kind: llm`."""

    name = "llm"
    spec_model = LLMNode
    compiled = CompiledLLM

    def compile(self, cn: CompiledLLM, scope: NodeScope) -> None:
        node = cn.spec
        cn.sampling = _merge_sampling(scope.ck.spec.defaults, node)
        # The node's templates may read its few-shot set as `shots` (none without `shots:`);
        # nothing else of the node can.
        scope.known.add("shots")
        cn.prompt = scope.template(node.prompt, "prompt")
        if node.system is not None:
            cn.system = scope.template(node.system, "system")
        scope.known.discard("shots")
        if node.shots is not None:
            cn.shots = scope.expression(node.shots, "shots")
        cn.shots_in_template = any("shots" in t.names for t in (cn.prompt, cn.system) if t)
        if not node.output:
            scope.problem("the output declares no fields", "output")
        try:
            cn.model = build_model(cn.name, node.output)
        except SchemaError as exc:
            scope.problem(f"bad output schema: {exc}", f"output.{exc.field}")
        except (TypeError, ValueError) as exc:
            scope.problem(f"bad output schema: {exc}", "output")
        for fpath, source in dynamic_fields(node.output).items():
            expr = scope.expression(source, f"output.{fpath}.enum_from", f"output.{fpath}")
            if expr:
                cn.dynamic[fpath] = expr
        check_sampling(scope.ck, node, cn.name, "")
        for key, value in cn.sampling.model_dump(exclude_none=True).items():
            if isinstance(value, str):
                expr = scope.expression(value, key)
                if expr:
                    cn.sampling_exprs[key] = expr
        _check_samples(cn, scope)
        if node.abstain is not None:
            cn.abstain = compile_abstain(node.abstain, node.output, cn.sampling, node.once, scope)
        if node.harden is not None:
            cn.harden = compile_harden(node.harden, scope)
        if node.provider is not None and (gap := unknown_provider(node.provider)):
            scope.problem(gap, "provider")
        if node.api_key_env is not None and node.base_url is None:
            # The run's server gets the user's key; a graph choosing which variable becomes
            # that key could send any secret of the user's environment (issue 35).
            scope.problem(
                f"api_key_env names {node.api_key_env}, but the node has no base_url of its "
                "own: the run's server always gets your key (--api-key / OPENAI_API_KEY); "
                "remove api_key_env, or give the node its own base_url",
                "api_key_env",
            )
        urls = [node.base_url] if isinstance(node.base_url, str) else node.base_url or []
        for key, named in [("model", node.model), *(("base_url", url) for url in urls)]:
            # `model: params.X` is resolved when the run starts; the param must exist.
            if named is not None and named.startswith(PARAM_PREFIX):
                param = named.removeprefix(PARAM_PREFIX)
                if param not in scope.ck.params:
                    scope.problem(f"'{named}': the graph declares no param '{param}'", key)

    def endpoint_want(self, spec: LLMNode) -> EndpointWant:
        return EndpointWant(spec.base_url, spec.model, spec.api_key_env, spec.provider)

    def value_fields(self, spec: LLMNode, graph: GraphSpec) -> dict[str, FieldSpec] | None:
        # With n > 1 the value is a list of samples, not one output object.
        return spec.output if (spec.n or graph.defaults.n or 1) == 1 else None

    async def execute(
        self, cn: CompiledLLM, ctx: dict[str, Any], example: str, item: int, run: RunServices
    ) -> Any:
        messages = _messages(cn, ctx)
        model = _schema_for(cn, ctx, run.memo)
        sampling = _sampling_for(cn, ctx)
        first_sample = 0
        resample = run.settings.resample
        if resample is not None and resample.covers(cn.name):
            if resample.temperature is not None:
                sampling = sampling.model_copy(update={"temperature": resample.temperature})
            first_sample = resample.first_sample(cn.name, int(sampling.n or 1))
        ep = run.endpoints[cn.name]
        rec = NodeRecord(
            example_id=example,
            node=cn.name,
            item=item,
            messages=messages,
            model=ep.model,
            endpoint=ep.base_url,
            request=_request(sampling, ep.structured, first_sample),
            schema=json_schema(model),
        )
        started = time.perf_counter()
        try:
            result = await run.client.call(
                ep,
                messages,
                model,
                sampling,
                first_sample=first_sample,
                strict=cn.harden is not None and cn.harden.schema_only,
            )
        except LLMCallError as exc:
            rec.attempts = exc.attempts
            rec.error = str(exc)
            rec.status = "failed"
            rec.latency = _latency(ep, started)
            if cn.spec.on_error == "record":
                # The protocol counts this call as a known failure (e.g. ExPerT: unmatched);
                # the value says so, and the trace keeps every attempt.
                rec.value = {"failed": True, "error": str(exc)}
                run.trace.record(rec)
                return rec.value
            run.trace.record(rec)
            raise NodeError(cn.name, str(exc)) from exc
        value: Any = result.values[0] if (sampling.n or 1) == 1 else result.values
        rec.value = value
        rec.raw = result.raw
        rec.attempts = result.attempts
        rec.cached = result.cached
        rec.prompt_tokens = result.prompt_tokens
        rec.completion_tokens = result.completion_tokens
        rec.latency = _latency(ep, started)
        ends = None if cn.abstain is None else cn.abstain.check(cn.name, ctx, value, rec)
        run.trace.record(rec)
        if ends is not None:
            raise ends
        return value


def _schema_for(cn: CompiledLLM, ctx: dict[str, Any], memo: dict[Any, Any]) -> type[BaseModel]:
    """The node's model, with dynamic enums filled in for this call (memoised per run)."""
    assert cn.model is not None
    if not cn.dynamic:
        return cn.model
    choices: dict[str, tuple[Any, ...]] = {}
    for path, expr in cn.dynamic.items():
        value = evaluate(expr, ctx, cn.name, f"output.{path}.enum_from")
        if not isinstance(value, list | tuple) or not value:
            raise NodeError(
                cn.name, f"enum_from for '{path}' must give a non-empty list, got {value!r}"
            )
        choices[path] = tuple(value)
    key = ("llm schema", cn.name, tuple(sorted(choices.items())))
    if key not in memo:
        memo[key] = build_model(cn.name, cn.spec.output, dict(choices))
    model: type[BaseModel] = memo[key]
    return model


def _sampling_for(cn: CompiledLLM, ctx: dict[str, Any]) -> Sampling:
    """The node's sampling values with expression-valued ones evaluated for this call."""
    if not cn.sampling_exprs:
        return cn.sampling
    values = cn.sampling.model_dump(exclude_none=True)
    for key, expr in cn.sampling_exprs.items():
        raw = evaluate(expr, ctx, cn.name, key)
        try:
            values[key] = SAMPLING_TYPES[key](raw)
        except (TypeError, ValueError) as exc:
            wanted = "an integer" if SAMPLING_TYPES[key] is int else "a number"
            raise NodeError(cn.name, f"{key} `{expr.source}` gave {raw!r}, not {wanted}") from exc
        problem = sampling_problem(key, values[key])
        if problem is not None:
            raise NodeError(cn.name, f"{key} `{expr.source}`: {problem}")
    sampling = Sampling(**values)
    n = int(sampling.n or 1)
    if sampling.min_samples is not None and int(sampling.min_samples) > n:
        raise NodeError(cn.name, _more_than_n(int(sampling.min_samples), n))
    exprs = cn.sampling_exprs
    if not cn.warned_deterministic and ("n" in exprs or "temperature" in exprs):
        # Literal values were warned about at compile time; these are known only now.
        warning = _deterministic(n, sampling.temperature)
        if warning is not None:
            cn.warned_deterministic = True
            log.warning("node '%s': %s", cn.name, warning)
    return sampling


def _more_than_n(least: int, n: int) -> str:
    return f"min_samples {least} is more than the {n} sample(s) asked for (n)"


def _deterministic(n: int, temperature: Any) -> str | None:
    """The warning for n samples at temperature 0, or None when they can differ."""
    if n <= 1 or temperature is None or float(temperature) != 0:
        return None
    return (
        f"n={n} samples at temperature 0: a deterministic server gives {n} identical "
        "samples; raise the temperature, or ask for one"
    )


def _check_samples(cn: CompiledLLM, scope: NodeScope) -> None:
    """min_samples within n, and a warning for identical samples, where both are literals."""
    n, least, temperature = cn.sampling.n, cn.sampling.min_samples, cn.sampling.temperature
    if isinstance(n, str):
        return
    count = 1 if n is None else n
    if isinstance(least, int) and least > count:
        scope.problem(_more_than_n(least, count), "min_samples")
    if not isinstance(temperature, str):
        warning = _deterministic(count, temperature)
        if warning is not None:
            log.warning("%s", Problem(scope.ck.file, warning, cn.name, "n"))


def _request(sampling: Sampling, structured: str, first_sample: int = 0) -> dict[str, Any]:
    """What the trace records of how the call was asked (min_samples and a retest's first
    sample index only when set)."""
    request: dict[str, Any] = {
        "params": {**request_params(sampling), "n": sampling.n or 1},
        "structured": structured,
    }
    if sampling.min_samples is not None:
        request["min_samples"] = sampling.min_samples
    if first_sample:
        request["first_sample"] = first_sample
    return request


def _messages(cn: CompiledLLM, ctx: dict[str, Any]) -> list[dict[str, str]]:
    try:
        if cn.harden is not None:
            return cn.harden.messages(cn.name, ctx, cn.messages)
        return cn.messages(ctx)
    except (TemplateError, TypeError, ValueError) as exc:
        raise NodeError(cn.name, f"rendering the prompt failed: {exc}") from exc


def _latency(ep: Endpoint, started: float) -> float:
    """The node's seconds since `started`, less any part spent starting its server (a
    server started on first use takes minutes, which are no call's latency)."""
    now = time.perf_counter()
    return now - started - start_seconds_within(ep.starts, started, now)
