"""The graph drawn as inline SVG: a left-to-right layered layout, no layout engine needed.

Layers are the longest path from a source; edges that skip layers pass through invisible
waypoints so they do not cut through boxes; a few barycenter sweeps order each layer to
keep crossings down.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from html import escape

from .sources import NodeInfo

CHAR_WIDTH = 7.4  # of the 12px monospace label font, generously
BOX_HEIGHT = 42
ROW_GAP = 18
COLUMN_GAP = 64
PAD = 12
WAYPOINT_HEIGHT = 8


@dataclass
class Placed:
    """A node or a waypoint with its box."""

    name: str
    layer: int
    x: float = 0.0
    y: float = 0.0
    width: float = 0.0
    height: float = BOX_HEIGHT
    waypoint: bool = False


def subtitle(node: NodeInfo) -> str:
    """The second line of a node's box: its kind and the clauses that change how it runs."""
    parts = [node.kind if node.kind != "compute" else f"compute {node.function or ''}".strip()]
    if node.foreach:
        parts.append("foreach")
    if node.when:
        parts.append("when")
    return " · ".join(parts)


def layout(nodes: list[NodeInfo]) -> tuple[dict[str, Placed], list[list[str]], float, float]:
    """Positions of every node and waypoint; the edge routes; the drawing's width and height."""
    import networkx as nx

    names = [n.name for n in nodes]
    known = set(names)
    dag = nx.DiGraph()
    dag.add_nodes_from(names)
    for node in nodes:
        dag.add_edges_from((dep, node.name) for dep in node.deps if dep in known)
    layer: dict[str, int] = {}
    for depth, generation in enumerate(nx.topological_generations(dag)):
        for name in generation:
            layer[name] = depth
    placed = {n.name: Placed(n.name, layer[n.name]) for n in nodes}
    info = {n.name: n for n in nodes}
    for name, box in placed.items():
        text = max(len(name), len(subtitle(info[name])))
        box.width = max(90.0, text * CHAR_WIDTH + 20)

    # Split every edge that skips layers into one hop per layer through waypoints.
    routes: list[list[str]] = []
    for src, dst in dag.edges:
        route = [src]
        for step in range(layer[src] + 1, layer[dst]):
            wp = f"\x00{src}\x00{dst}\x00{step}"
            placed[wp] = Placed(wp, step, width=0, height=WAYPOINT_HEIGHT, waypoint=True)
            route.append(wp)
        route.append(dst)
        routes.append(route)
    hops: dict[str, list[str]] = {name: [] for name in placed}
    for route in routes:
        for a, b in itertools.pairwise(route):
            hops[a].append(b)
            hops[b].append(a)

    depth = max((box.layer for box in placed.values()), default=-1) + 1
    layers: list[list[str]] = [[] for _ in range(depth)]
    file_order = {name: i for i, name in enumerate(names)}
    for name in sorted(placed, key=lambda n: (file_order.get(n, len(names)), n)):
        layers[placed[name].layer].append(name)

    def sweep(rows: range, neighbour_layer: int) -> None:
        for index in rows:
            rank = {n: i for i, n in enumerate(layers[index + neighbour_layer])}
            current = {n: i for i, n in enumerate(layers[index])}

            def centre(name: str, rank: dict[str, int] = rank, current=current) -> float:
                linked = [rank[m] for m in hops[name] if m in rank]
                return sum(linked) / len(linked) if linked else float(current[name])

            layers[index].sort(key=centre)

    for _ in range(4):
        sweep(range(1, depth), -1)
        sweep(range(depth - 2, -1, -1), 1)

    heights = [
        sum(placed[n].height for n in column) + ROW_GAP * max(len(column) - 1, 0)
        for column in layers
    ]
    total_height = max(heights, default=0.0)
    x: float = PAD
    for index, column in enumerate(layers):
        width = max((placed[n].width for n in column), default=0.0)
        y = PAD + (total_height - heights[index]) / 2
        for name in column:
            box = placed[name]
            box.x = x + (width - box.width) / 2
            box.y = y
            y += box.height + ROW_GAP
        x += width + COLUMN_GAP
    return placed, routes, x - COLUMN_GAP + PAD, total_height + 2 * PAD


def _edge_path(route: list[Placed]) -> str:
    """A smooth path through a route's boxes: out of the right side, into the left side."""
    points = []
    for index, box in enumerate(route):
        mid = box.y + box.height / 2
        if index > 0:
            points.append((box.x, mid))
        if index < len(route) - 1:
            points.append((box.x + box.width, mid))
    d = f"M{points[0][0]:.1f},{points[0][1]:.1f}"
    for (x1, y1), (x2, y2) in zip(points[::2], points[1::2], strict=False):
        bend = (x2 - x1) / 2
        d += f" C{x1 + bend:.1f},{y1:.1f} {x2 - bend:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"
        # Across a waypoint the line just continues straight to the next hop's start.
    return d


def dag_svg(nodes: list[NodeInfo]) -> str:
    """The whole drawing, with `data-node` on every box so the page can colour it by status."""
    if not nodes:
        return '<p class="muted">No nodes to draw.</p>'
    placed, routes, width, height = layout(nodes)
    info = {n.name: n for n in nodes}
    parts = [
        f'<svg class="dag" viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" '
        f'height="{height:.0f}" role="img" aria-label="graph of the nodes">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'class="dag-arrow"/></marker></defs>',
    ]
    for route in routes:
        boxes = [placed[name] for name in route]
        parts.append(
            f'<path class="dag-edge" data-from="{escape(route[0])}" data-to="{escape(route[-1])}" '
            f'd="{_edge_path(boxes)}" marker-end="url(#arrow)"/>'
        )
    for name, box in placed.items():
        if box.waypoint:
            continue
        node = info[name]
        tip = [f"{name} ({node.kind})"]
        if node.description:
            tip.append(node.description)
        if node.foreach:
            tip.append(f"foreach: {node.foreach}")
        if node.when:
            tip.append(f"when: {node.when}")
        parts.append(
            f'<g class="dag-node kind-{escape(node.kind.strip("?") or "unknown")}" '
            f'data-node="{escape(name)}" transform="translate({box.x:.1f},{box.y:.1f})">'
            f"<title>{escape(chr(10).join(tip))}</title>"
            f'<rect width="{box.width:.1f}" height="{box.height}" rx="6"/>'
            f'<text x="{box.width / 2:.1f}" y="17" class="dag-name">{escape(name)}</text>'
            f'<text x="{box.width / 2:.1f}" y="33" class="dag-sub">{escape(subtitle(node))}</text>'
            "</g>"
        )
    parts.append("</svg>")
    return "".join(parts)
