"""`judge_card`: how far a finished run's judges can be trusted, as a typed `JudgeCard`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..analysis import JudgeCard
from ..analysis import judge_card as _build
from ..errors import ConfigurationError
from .retest import retest as _retest

if TYPE_CHECKING:
    from .run import RunResult

__all__ = ["JudgeCard", "judge_card"]


def judge_card(
    run_dir: Path | str | RunResult,
    labels: Path | str | None = None,
    field: str | None = None,
    jury: Sequence[str] | None = None,
    generator_field: str | None = None,
    *,
    judged: str | None = None,
    alpha: float = 0.05,
    seed: int = 0,
    retest: int | None = None,
    rows: int = 50,
    temperature: float | None = None,
    cluster: str | None = None,
    **run_options: Any,
) -> JudgeCard:
    """The judge card of RUN_DIR: reliability, score distribution, length, position and
    self-preference bias, agreement with people (`labels`, compared on `field` as
    meta-eval does), juries (`jury`, default the graph's `jury:`), and `flags` for every
    finding that survives Holm's correction across the card at `alpha`. `run_dir` may also
    be what `orc.run` returned, when that run wrote a folder.

    `retest=K` also re-asks `rows` of the run's rows K times (`orc.retest`, at the nodes'
    own sampling settings or `temperature`) and adds the stability line, tested with the
    rest; `run_options` reach those runs (base_url, allow_servers, model, transport,
    cache, …): they ask only the servers named there, never those the folder records.

    `cluster` names the row field examples are nested in (e.g. a user id): the card's
    bootstraps and sign-flip tests then resample and flip whole clusters."""
    if run_options and retest is None:
        raise ConfigurationError(
            f"{', '.join(sorted(run_options))}: run settings are for the re-asks of --retest"
        )
    if not isinstance(run_dir, str | Path):  # a RunResult (its module is not imported here)
        if run_dir.folder is None:
            raise ConfigurationError("the run kept no folder (out=None): the card reads its trace")
        run_dir = run_dir.folder
    if isinstance(jury, str):
        jury = [name.strip() for name in jury.split(",") if name.strip()]
    stability = None
    if retest is not None:
        stability = _retest(
            run_dir, k=retest, rows=rows, temperature=temperature, seed=seed, **run_options
        )
    return _build(
        run_dir,
        labels=labels,
        field=field,
        jury=jury,
        generator_field=generator_field,
        judged=judged,
        alpha=alpha,
        seed=seed,
        stability=stability,
        cluster=cluster,
    )
