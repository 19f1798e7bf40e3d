"""The compare verb: runs of one graph side by side, as tables or JSON."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from ..errors import OrchestratorError
from .app import app, console, fail

if TYPE_CHECKING:
    from ..analysis.comparison import Comparison, OutputComparison


def _num(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "—"
    # Fixed decimals read best in a column; a tiny non-zero value would show as 0.000.
    return f"{value:.{digits}g}" if 0 < abs(value) < 1e-3 else f"{value:.{digits}f}"


def _p(value: float | None) -> str:
    if value is None:
        return "—"
    # Below 0.001 the digits mean little at these sample sizes; the JSON has them all.
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def _table(title: str, *columns: str, left: int = 1) -> Table:
    """A compact table: no vertical rules, so it fits an 80-column terminal."""
    table = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    for position, column in enumerate(columns):
        table.add_column(column, justify="left" if position < left else "right")
    return table


def _pair(a: str, b: str) -> str:
    return escape(f"{a} → {b}")


def _differences(found: OutputComparison) -> Table:
    table = _table(
        f"{found.output}: b − a, paired by example",
        "a → b",
        "n",
        "mean a",
        "mean b",
        "b − a",
        "95% CI",
        "p",
        "Holm",
        "d_z",
        "W/T/L",
    )
    for pair in found.pairs:
        ci = "—" if pair.ci is None else f"{_num(pair.ci.low)}, {_num(pair.ci.high)}"
        table.add_row(
            _pair(pair.run_a, pair.run_b),
            str(pair.n),
            _num(pair.mean_a),
            _num(pair.mean_b),
            _num(pair.difference),
            ci,
            _p(pair.p),
            _p(pair.p_holm),
            _num(pair.effect_size, 2),
            f"{pair.wins}/{pair.ties}/{pair.losses}",
        )
    return table


def _correlations(result: Comparison) -> Table | None:
    table = _table(
        "agreement of the scores",
        "output",
        "a → b",
        "n",
        "pearson",
        "spearman",
        "kendall τb",
        left=2,
    )
    for found in result.outputs:
        for pair in found.pairs:
            if pair.agreement is not None:
                a = pair.agreement
                table.add_row(
                    escape(found.output),
                    _pair(pair.run_a, pair.run_b),
                    str(pair.n),
                    _num(a.pearson),
                    _num(a.spearman),
                    _num(a.kendall_tau_b),
                )
    return table if table.row_count else None


def _label_agreement(result: Comparison) -> Table | None:
    table = _table(
        "agreement of the labels",
        "output",
        "a → b",
        "n",
        "same",
        "κ",
        "κ quadratic",
        "flips",
        left=2,
    )
    for found in result.labels:
        for pair in found.pairs:
            flips = "—"
            if pair.flips is not None:
                flips = f"{pair.flips} ({_num(pair.flip_rate, 2)})"
            table.add_row(
                escape(found.output),
                _pair(pair.run_a, pair.run_b),
                str(pair.n),
                _num(pair.agreement),
                _num(pair.kappa),
                _num(pair.kappa_quadratic),
                flips,
            )
    return table if table.row_count else None


def _runs(result: Comparison) -> Table:
    table = _table("runs", "run", "model", "examples", "ok", "failed", "missing", left=2)
    for run in result.runs:
        missing = str(len(run.missing))
        if run.missing:
            shown = ", ".join(run.missing[:3]) + (", …" if len(run.missing) > 3 else "")
            missing += f" ({shown})"
        table.add_row(
            escape(run.label),
            escape(run.model or "?"),
            str(run.examples),
            str(run.ok),
            str(len(run.failed)),
            escape(missing),
        )
    return table


def _show(result: Comparison) -> None:
    console.print(
        f"[bold]{result.kind} comparison[/] ({escape(result.kind_reason)}); "
        f"{result.common} examples ok in every run",
        soft_wrap=True,
    )
    tables = [_runs(result), *map(_differences, result.outputs)]
    tables += [t for t in (_correlations(result), _label_agreement(result)) if t is not None]
    for table in tables:
        console.print()
        console.print(table)
    console.print()
    methods = {pair.p_method for found in result.outputs for pair in found.pairs if pair.p_method}
    test = " / ".join(
        "exact (all 2^n signs)" if m == "exact" else f"Monte Carlo ({result.permutations} draws)"
        for m in sorted(methods)
    )
    intervals = {p.ci.method for o in result.outputs for p in o.pairs if p.ci is not None}
    kinds = " / ".join("BCa" if m == "bca" else "percentile" for m in sorted(intervals))
    console.print(
        f"CI: paired bootstrap ({kinds or 'none'}, {result.resamples} resamples, seed "
        f"{result.seed}); p: two-sided sign-flip test, {test or 'not run'}; Holm over each "
        "output's pairs; d_z = mean difference / sd of the differences; W/T/L: examples where "
        "b scored higher / the same / lower.",
        soft_wrap=True,
    )
    for note in result.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
    if not result.outputs and not result.labels:
        console.print("no numeric output is shared by the runs", soft_wrap=True)


@app.command()
def compare(
    runs: Annotated[list[Path], typer.Argument(help="Two or more run folders of one graph.")],
    output: Annotated[
        list[str] | None,
        typer.Option("--output", "-o", help="Numeric output to compare (repeat; default all)."),
    ] = None,
    labels: Annotated[
        list[str] | None,
        typer.Option("--labels", help="Output to treat as labels for κ (default: detected)."),
    ] = None,
    kind: Annotated[
        str | None, typer.Option(help="judge | system (default: from the runs' inputs).")
    ] = None,
    format: Annotated[str, typer.Option(help="table | json")] = "table",
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples.")] = 2000,
    permutations: Annotated[int, typer.Option(help="Sign-flip draws when n > 20.")] = 10_000,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap and the test.")] = 0,
) -> None:
    """Compare runs of one graph example by example: paired differences, CIs, p-values."""
    from ..analysis.compare import compare as run_compare

    if format not in ("table", "json"):
        fail(f"--format must be table or json, got {format!r}")
    if kind not in (None, "judge", "system"):
        fail(f"--kind must be judge or system, got {kind!r}")
    try:
        result = run_compare(
            *runs,
            outputs=output or None,
            labels=labels or None,
            kind=kind,  # type: ignore[arg-type]
            resamples=resamples,
            permutations=permutations,
            seed=seed,
        )
    except OrchestratorError as exc:
        fail(str(exc))
    if format == "json":
        typer.echo(result.model_dump_json(indent=2))
    else:
        _show(result)
