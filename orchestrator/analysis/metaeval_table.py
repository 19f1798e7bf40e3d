"""The meta-eval result as a table of text cells, each statistic shown as
`0.620 [0.480, 0.740]` (the terminal draws it: `orchestrator.ui.tables`)."""

from __future__ import annotations

from typing import Any

from .tables import Column, TextTable


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _ci(value: Any, interval: list[float] | None) -> str:
    """A value with its bootstrap interval, or the value alone when there is none."""
    if value is None or interval is None:
        return _fmt(value)
    return f"{_fmt(value)} [{_fmt(interval[0])}, {_fmt(interval[1])}]"


def _scores(table: TextTable, scores: dict[str, Any]) -> None:
    base = scores.get("baseline") or {}
    label = f"scores ({scores['field']})"
    for name in ("pearson", "spearman", "kendall"):
        mine, theirs = scores[name], base.get(name) or {}
        table.add_row(
            label,
            name,
            f"{_ci(mine['r'], scores.get(f'{name}_ci'))} (p={_fmt(mine['p'])})",
            f"{_ci(theirs.get('r'), base.get(f'{name}_ci'))} ({base.get('field')})" if base else "",
            str(scores["n"]),
        )
        label = ""
    mae = _ci(scores["mae"], scores.get("mae_ci"))
    table.add_row("", "mean abs error", mae, _ci(base.get("mae"), base.get("mae_ci")), "")
    _alpha_row(table, scores, base)
    if scores["missing"]:
        table.add_row("", "labels without a result", str(scores["missing"]), "", "")


def _alpha_row(table: TextTable, section: dict[str, Any], base: dict[str, Any]) -> None:
    if "alpha" not in section:
        return
    table.add_row(
        "",
        f"Krippendorff α ({section['alpha_level']})",
        _ci(section["alpha"], section.get("alpha_ci")),
        _ci(base.get("alpha"), base.get("alpha_ci")) if base else "",
        "",
    )


def _choices(table: TextTable, choices: dict[str, Any]) -> None:
    base = choices.get("baseline") or {}
    label = f"choices ({choices['field']})"
    rows: list[tuple[str, dict[str, Any], dict[str, Any]]] = [("accuracy (all)", choices, base)]
    for key, stats in (choices.get("per_key") or {}).items():
        rows.append((f"accuracy: {key}", stats, (base.get("per_key") or {}).get(key, {})))
    for pair, stats in (choices.get("per_pair") or {}).items():
        rows.append((f"agreement: {pair}", stats, (base.get("per_pair") or {}).get(pair, {})))
    for measure, mine, theirs in rows:
        table.add_row(
            label,
            measure,
            _ci(mine.get("accuracy"), mine.get("accuracy_ci")),
            _ci(theirs.get("accuracy"), theirs.get("accuracy_ci")),
            str(mine.get("n", "")),
        )
        label = ""
    if "macro_accuracy" in choices:
        table.add_row(
            "",
            "mean over keys",
            _ci(choices["macro_accuracy"], choices.get("macro_accuracy_ci")),
            _ci(base.get("macro_accuracy"), base.get("macro_accuracy_ci")),
            "",
        )
    _alpha_row(table, choices, base)
    if choices["ties"]:
        table.add_row("", "tie predictions (counted wrong)", str(choices["ties"]), "", "")
    if choices["missing"]:
        table.add_row("", "labels without a result", str(choices["missing"]), "", "")


def _humans(table: TextTable, section: dict[str, Any]) -> None:
    humans = section.get("humans") or {}
    if "reason" in humans:
        table.add_row("", "human ceiling", humans["reason"], "", "")
        return
    if not humans:
        return
    label = f"humans ({len(humans['annotators'])} annotators, {section['consensus']})"
    alpha_all = _ci(humans["alpha_all_humans"], humans["alpha_all_humans_ci"])
    table.add_row(label, "α across all humans", alpha_all, "", str(humans["units"]))
    for name in humans["verdicts"]:
        for group, words in (
            ("human_human", "human–human"),
            ("judge_human", "judge–human"),
            ("judge_consensus", "judge–consensus"),
        ):
            found = humans[group]
            table.add_row("", f"{name}: {words}", _ci(found[name], found[f"{name}_ci"]), "", "")
    table.add_row("", "verdict", humans["verdict"], "", "")


def meta_eval_table(result: dict[str, Any]) -> TextTable:
    """The meta-eval result as one table: correlations and/or accuracies, with intervals."""
    boot = result.get("bootstrap")
    columns = [Column("section"), Column("measure"), Column("run"), Column("baseline")]
    table = TextTable(
        f"meta-eval: {result.get('run_dir', '')}", [*columns, Column("n", right=True)]
    )
    if boot:
        unit = "examples"
        if boot.get("unit") == "cluster":
            unit = f"clusters of {boot['cluster']} ({boot['clusters']} clusters)"
        table.caption = (
            f"[lo, hi]: {boot['confidence']:.0%} {boot['method']} bootstrap over {unit}, "
            f"{boot['resamples']} resamples, seed {boot['seed']}"
        )
    for name, show in (("scores", _scores), ("choices", _choices)):
        section = result.get(name)
        if section:
            show(table, section)
            _humans(table, section)
    return table
