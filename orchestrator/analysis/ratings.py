"""Elo and Bradley–Terry over the union of several runs' battles (e.g. generators judged in
separate runs of one pairwise graph), by the functions a run's own aggregates call."""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml

from ..compute import bradley_terry, elo_ratings
from ..errors import ConfigurationError, RunFolderError
from ..store import RunReader
from .tables import Column, TextTable

logger = logging.getLogger(__name__)

Method = Literal["elo", "bt", "both"]
DEFAULT_FIELD = "outcomes"  # where AuPEL's result lines keep their pair_outcomes records
FUNCTIONS = {"elo": "elo_ratings", "bradley_terry": "bradley_terry"}
_FIELD = re.compile(r"map\(\s*attribute\s*=\s*['\"]([^'\"]+)['\"]")
_QUOTED = re.compile(r"'([^']*)'")


@dataclasses.dataclass
class Battles:
    """The battles of several runs, in the order one run holding them all would use."""

    runs: list[Path]
    graph: str
    field: str
    matches: list[dict[str, Any]]
    judges: list[str]
    cases: int
    duplicates: int = 0  # battles whose (case, judge, dimension, pair) another run also has
    warnings: list[str] = dataclasses.field(default_factory=list)
    settings: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)


def _literal(value: Any) -> tuple[bool, Any]:
    """An aggregate argument's value when it is a literal (a string there is an expression,
    so only a quoted one, "'fraction'", is a literal string)."""
    if isinstance(value, bool | int | float):
        return True, value
    if isinstance(value, str) and (quoted := _QUOTED.fullmatch(value.strip())):
        return True, quoted.group(1)
    return False, None


def graph_settings(reader: RunReader) -> tuple[str | None, dict[str, dict[str, Any]]]:
    """The battles' field and the literal arguments of the run graph's Elo and Bradley–Terry
    aggregates, read from its snapshot (None and {} when it has none)."""
    snapshot = reader.snapshot_graph
    if snapshot is None or not snapshot.is_file():
        return None, {}
    spec = yaml.safe_load(snapshot.read_text(encoding="utf-8")) or {}
    found_field: str | None = None
    settings: dict[str, dict[str, Any]] = {}
    for agg in (spec.get("aggregates") or {}).values():
        if not isinstance(agg, dict):
            continue
        name = next((k for k, fn in FUNCTIONS.items() if fn == agg.get("function")), None)
        if name is None or name in settings:
            continue
        args = agg.get("args") or {}
        match = _FIELD.search(str(args.get("matches", "")))
        found_field = found_field or (match.group(1) if match else None)
        literals = {k: _literal(v) for k, v in args.items() if k != "matches"}
        settings[name] = {k: value for k, (ok, value) in literals.items() if ok}
    return found_field, settings


def _graph_of(reader: RunReader) -> tuple[str, str | None]:
    graph = reader.manifest.graph
    if not graph.name:
        raise RunFolderError(f"{reader.path} has no readable manifest.json naming its graph")
    return graph.name, graph.hash


def _check_graphs(readers: list[RunReader], mixed: bool) -> str:
    """The graph all runs share; refuse different graphs (or versions) unless `mixed`."""
    graphs = [_graph_of(r) for r in readers]
    if len(set(graphs)) > 1 and not mixed:
        listed = "; ".join(
            f"{r.path}: {name} (hash {digest})"
            for r, (name, digest) in zip(readers, graphs, strict=True)
        )
        same = len({name for name, _ in graphs}) == 1
        why = "the graph file changed between them" if same else "they ran different graphs"
        raise ConfigurationError(
            f"these runs cannot be pooled, {why}: {listed}; pass mixed_graphs=True "
            "(--mixed-graphs) if their battles are comparable all the same"
        )
    params = {repr(sorted(r.manifest.parameters.params.items())) for r in readers}
    if len(params) > 1:
        logger.warning("the runs were made with different params; their battles are pooled")
    return graphs[0][0]


def _battles_of(reader: RunReader, name: str) -> list[tuple[str, list[dict[str, Any]]]]:
    """Each ok example's battles (its latest line), as (example id, records)."""
    latest: dict[str, list[dict[str, Any]] | None] = {}
    for line in reader.results():
        if line.status != "ok":
            latest.pop(line.id, None)
            continue
        value = line.outputs.get(name)
        if value is not None and not (
            isinstance(value, list) and all(isinstance(m, dict) for m in value)
        ):
            raise RunFolderError(
                f"{reader.path}: example {line.id}'s {name!r} is not a list of battle records"
            )
        latest[line.id] = value
    if latest and all(value is None for value in latest.values()):
        raise ConfigurationError(
            f"{reader.path}: no result line has a field {name!r}; name the battles' field"
        )
    return [(example, value or []) for example, value in latest.items()]


def gather_battles(
    run_dirs: Sequence[Path | str],
    *,
    field_name: str | None = None,
    mixed_graphs: bool = False,
    mixed_judges: bool = False,
) -> Battles:
    """The union of several runs' battles, ordered as one run holding them all would order
    them; different graphs or judges refused unless allowed, repeated battles warned of."""
    paths = [Path(p) for p in run_dirs]
    if not paths:
        raise ConfigurationError("name at least one run folder")
    twice = {p.resolve() for p in paths if sum(q.resolve() == p.resolve() for q in paths) > 1}
    if twice:
        raise ConfigurationError(f"a run folder is named twice: {sorted(map(str, twice))[0]}")
    readers = [RunReader(p) for p in paths]
    for reader in readers:
        if not reader.has_results:
            raise RunFolderError(f"{reader.path} has no results.jsonl; is it a run folder?")
    graph = _check_graphs(readers, mixed_graphs)
    found, settings = graph_settings(readers[0])
    name = field_name or found or DEFAULT_FIELD
    entries: list[tuple[str, int, list[dict[str, Any]]]] = []
    judges: dict[str, set[str]] = {}  # judge -> the runs it judged
    for number, reader in enumerate(readers):
        model = reader.manifest.model
        for example, records in _battles_of(reader, name):
            entries.append((example, number, records))
            for record in records:
                judge = record.get("judge", model)
                judges.setdefault(str(judge), set()).add(str(reader.path))
    if len(judges) > 1 and not mixed_judges:
        listed = "; ".join(f"{j} in {', '.join(sorted(r))}" for j, r in sorted(judges.items()))
        raise ConfigurationError(
            f"the battles were judged by different models ({listed}); ratings would mix "
            "judges, pass mixed_judges=True (--mixed-judges) to pool them anyway"
        )
    # A run's aggregates see its ok lines sorted by id (a stable sort), so the same sort of
    # the pooled lines gives the order one run over every example would have used.
    entries.sort(key=lambda entry: str(entry[0]))
    matches: list[dict[str, Any]] = []
    owner: dict[tuple[str, str, str, str], int] = {}
    duplicates = 0
    for example, number, records in entries:
        for record in records:
            missing = [k for k in ("pair", "a", "b", "winner") if k not in record]
            if missing:
                raise RunFolderError(
                    f"{paths[number]}: a battle of example {example} lacks {', '.join(missing)}"
                )
            key = (
                str(record.get("case", example)),
                str(record.get("judge")),
                str(record.get("dimension")),
                str(record["pair"]),
            )
            if owner.setdefault(key, number) != number:
                duplicates += 1
            matches.append(record)
    if not matches:
        raise ConfigurationError(f"no battles in field {name!r} of {', '.join(map(str, paths))}")
    warnings = []
    if duplicates:
        warnings.append(
            f"{duplicates} battles (case, judge, dimension, pair) appear in more than one run; "
            "each run's copy is counted"
        )
        logger.warning("%s", warnings[-1])
    return Battles(
        runs=paths,
        graph=graph,
        field=name,
        matches=matches,
        judges=sorted(judges),
        cases=len({str(m.get("case", e)) for e, _, records in entries for m in records}),
        duplicates=duplicates,
        warnings=warnings,
        settings=settings,
    )


def ratings_across_runs(
    run_dirs: Sequence[Path | str],
    *,
    method: Method = "both",
    field_name: str | None = None,
    replicates: int | None = None,
    seed: int | None = None,
    k: float | None = None,
    level: float | None = None,
    mixed_graphs: bool = False,
    mixed_judges: bool = False,
) -> dict[str, Any]:
    """Elo and/or Bradley–Terry with bootstrap intervals over several runs' battles, with
    the run graph's aggregate arguments unless given here."""
    if method not in ("elo", "bt", "both"):
        raise ConfigurationError(f"method must be elo, bt or both, got {method!r}")
    battles = gather_battles(
        run_dirs, field_name=field_name, mixed_graphs=mixed_graphs, mixed_judges=mixed_judges
    )
    given = {"replicates": replicates, "seed": seed, "level": level}
    wanted = (
        ["elo", "bradley_terry"]
        if method == "both"
        else ["elo" if method == "elo" else "bradley_terry"]
    )
    out: dict[str, Any] = {
        "runs": [str(p) for p in battles.runs],
        "graph": battles.graph,
        "field": battles.field,
        "judges": battles.judges,
        "matches": len(battles.matches),
        "cases": battles.cases,
        "duplicates": battles.duplicates,
        "warnings": battles.warnings,
        "settings": {},
    }
    for name in wanted:
        settings = dict(battles.settings.get(name, {}))
        settings.update({key: v for key, v in given.items() if v is not None})
        if name == "elo" and k is not None:
            settings["k"] = k
        function = elo_ratings if name == "elo" else bradley_terry
        try:
            out[name] = function(battles.matches, **settings)
        except TypeError as exc:  # an argument the graph gave that the function lacks
            raise ConfigurationError(f"{FUNCTIONS[name]}: {exc}") from None
        out["settings"][name] = settings
    return out


def ratings_tables(result: dict[str, Any]) -> list[TextTable]:
    """One table per dimension: each generator's ratings and intervals, best first (the
    style-controlled Bradley–Terry ratings too when the graph's fit asked for them)."""
    elo, bt = result.get("elo", {}), result.get("bradley_terry", {})
    tables = []
    for dimension in dict.fromkeys([*bt, *elo]):
        main = bt.get(dimension) or elo[dimension]  # Bradley–Terry ranks: order-free
        # Style-controlled Bradley–Terry (when the fit had `style`) sits beside the plain one.
        styled = {d: t["style_controlled"] for d, t in bt.items() if "style_controlled" in t}
        columns = [Column("generator")]
        sources = (("Elo", elo), ("Bradley–Terry", bt), ("style-controlled", styled))
        for label, source in sources:
            if dimension in source:
                level = round(100 * (bt.get(dimension) or source[dimension])["level"])
                columns += [Column(label, right=True), Column(f"{level}% CI", right=True)]
        table = TextTable(
            f"{dimension}: {main['matches']} battles", [*columns, Column("matches", right=True)]
        )
        for player in main["ranking"]:
            cells = [player]
            for _, source in sources:
                if dimension in source:
                    row = source[dimension]["players"][player]
                    if row["rating"] is None or row["ci_low"] is None:
                        cells += ["—", "—"]  # an Elo player no replicate drew
                        continue
                    cells += [f"{row['rating']:.1f}", f"{row['ci_low']:.1f}–{row['ci_high']:.1f}"]
            table.add_row(*cells, str(main["players"][player]["matches"]))
        tables.append(table)
    return tables
