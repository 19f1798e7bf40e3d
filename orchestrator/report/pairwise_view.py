"""Run views of pairwise battles (AuPEL, and any graph aggregating with the same compute
functions): the win matrix of `win_table`, Elo and Bradley–Terry ratings with their
bootstrap intervals (style-controlled ones beside them), the length-controlled win rates
of `length_controlled_win_rate`, and the position-bias rates of `position_bias`."""

from __future__ import annotations

from typing import Any

from .svg import Cell, Estimate, figure, intervals, matrix, num, stacked
from .views import RunContext, register_run_view


def _dimensions(value: Any) -> list[tuple[str, dict[str, Any]]]:
    """The per-dimension tables of a pairwise aggregate ({dimension: table})."""
    if not isinstance(value, dict):
        return []
    return [(str(k), v) for k, v in value.items() if isinstance(v, dict)]


def win_matrix(context: RunContext) -> str | None:
    """Per dimension: each generator's win rate against each other one, shaded."""
    parts = []
    for aggregate in context.by_function("win_table"):
        for dimension, table in _dimensions(aggregate.value):
            pairs = table.get("pairs")
            if not isinstance(pairs, dict) or not pairs:
                continue
            players = [str(p) for p in table.get("ranking") or sorted(table.get("players", {}))]
            index = {name: i for i, name in enumerate(players)}
            cells: dict[tuple[int, int], Cell] = {}
            for row in pairs.values():
                a, b, rate = str(row["a"]), str(row["b"]), row.get("win_rate_a")
                if a not in index or b not in index or rate is None:
                    continue
                wins, ties, losses = row["wins_a"], row["ties"], row["wins_b"]
                # win_table reports a's rate; b's is its complement, a tie half for each.
                for (me, other), (won, lost), mine in (
                    ((a, b), (wins, losses), rate),
                    ((b, a), (losses, wins), 1.0 - rate),
                ):
                    cells[(index[me], index[other])] = Cell(
                        f"{mine:.2f}",
                        mine,
                        f"{me} against {other}: {won} won, {ties} tied, {lost} lost of "
                        f"{row['matches']}; win rate {num(mine)}",
                    )
            svg = matrix(
                players, players, cells, "row's win rate against the column", corner="row \\ col"
            )
            parts.append(
                figure(
                    f"{aggregate.name} · {dimension}",
                    svg,
                    "A tie counts as half a win; rows and columns in the table's ranking order.",
                )
            )
    return "".join(parts) or None


def _rating_figure(title: str, table: dict[str, Any], caption: str, note: str) -> str | None:
    """Each player's rating with its interval, best first (None without players)."""
    players = table.get("players")
    if not isinstance(players, dict) or not players:
        return None
    rows = sorted(
        (
            Estimate(str(name), float(p["rating"]), p.get("ci_low"), p.get("ci_high"))
            for name, p in players.items()
            if isinstance(p, dict) and p.get("rating") is not None
        ),
        key=lambda e: -e.point,
    )
    return figure(title, intervals(rows, caption), note)


def rating_intervals(context: RunContext) -> str | None:
    """Per rating aggregate and dimension: each player's rating with its interval, and the
    style-controlled ratings beside them when the aggregate fitted them."""
    parts = []
    for aggregate in context.by_function("elo_ratings", "bradley_terry"):
        for dimension, table in _dimensions(aggregate.value):
            level = table.get("level")
            caption = f"{aggregate.name} rating" + (
                f" with its {level:.0%} bootstrap interval" if isinstance(level, float) else ""
            )
            note = ", ".join(
                f"{k} {table[k]}" for k in ("matches", "replicates", "k") if k in table
            )
            title = f"{aggregate.name} · {dimension}"
            parts.append(_rating_figure(title, table, caption, note) or "")
            controlled = table.get("style_controlled")
            if isinstance(controlled, dict):
                weights = controlled.get("coefficients") or {}
                parts.append(
                    _rating_figure(
                        f"{title} · style-controlled",
                        controlled,
                        f"{caption}, style held equal",
                        "Fitted with the answers' style differences as covariates "
                        "(Arena-Hard-Auto's style control); log-odds per unit of each: "
                        + ", ".join(f"{k} {num(v)}" for k, v in weights.items()),
                    )
                    or ""
                )
    return "".join(parts) or None


def length_controlled(context: RunContext) -> str | None:
    """Per dimension: each pair's length-controlled win rate with its interval."""
    parts = []
    for aggregate in context.by_function("length_controlled_win_rate"):
        for dimension, table in _dimensions(aggregate.value):
            pairs = table.get("pairs")
            if not isinstance(pairs, dict) or not pairs:
                continue
            rows = [
                Estimate(
                    f"{row['a']} over {row['b']}",
                    float(row["length_controlled_win_rate_a"]),
                    row.get("ci_low"),
                    row.get("ci_high"),
                )
                for row in pairs.values()
                if isinstance(row, dict)
            ]
            plain = ", ".join(
                f"{row['a']} over {row['b']} {num(row['win_rate_a'])}"
                for row in pairs.values()
                if isinstance(row, dict)
            )
            parts.append(
                figure(
                    f"{aggregate.name} · {dimension}",
                    intervals(rows, "win rate at equal lengths (AlpacaEval's length control)"),
                    f"Plain win rates: {plain}.",
                )
            )
    return "".join(parts) or None


BIAS_PARTS = ("first position", "tie", "second position")


def position_bias(context: RunContext) -> str | None:
    """Per judge and dimension: the shares of votes for the first position, ties and the
    second, against the even split an unbiased judge would tend to."""
    parts = []
    for aggregate in context.by_function("position_bias"):
        rows: list[tuple[str, list[float | None]]] = []
        flips: list[str] = []
        for judge, table in _dimensions(aggregate.value):
            for dimension, stats in _dimensions(table):
                label = f"{judge} · {dimension}" if len(aggregate.value) > 1 else dimension
                label += f" ({stats.get('votes', '?')} votes)"
                shares = [stats.get("first_rate"), stats.get("tie_rate"), stats.get("second_rate")]
                rows.append((label, shares))
                if stats.get("flip_rate") is not None:
                    flips.append(f"{dimension} {num(stats['flip_rate'])}")
        if not rows:
            continue
        note = "The line marks an even split. " + (
            "Flip rate (the verdict followed the position): " + ", ".join(flips)
            if flips
            else "No comparison was shown in both orders, so no flip rate."
        )
        svg = stacked(rows, BIAS_PARTS, "share of votes", reference=0.5)
        parts.append(figure(aggregate.name, svg, note))
    return "".join(parts) or None


register_run_view("win_matrix", "Win matrix", win_matrix, shows=("win_table",))
register_run_view(
    "ratings",
    "Ratings with intervals",
    rating_intervals,
    shows=("elo_ratings", "bradley_terry"),
)
register_run_view(
    "length_controlled",
    "Length-controlled win rates",
    length_controlled,
    shows=("length_controlled_win_rate",),
)
register_run_view("position_bias", "Position bias", position_bias, shows=("position_bias",))
