"""Draw a plan DAG as a standalone SVG (no external network or libraries): vertices in layers
by topological generation, coloured by machine, edges labelled with their operator.

Must not: choose or change plans.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from smile.optimizer.plan import Plan

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac")
BOX_W, BOX_H, GAP_X, GAP_Y = 210, 34, 90, 26


def plan_svg(plans: list[Plan]) -> str:
    import networkx as nx

    g = nx.DiGraph()
    for plan in plans:
        g.update(plan.graph())
    layers = list(nx.topological_generations(g)) if len(g) else []
    pos: dict[str, tuple[float, float]] = {}
    for col, layer in enumerate(layers):
        for row, node in enumerate(sorted(layer)):
            pos[node] = (20 + col * (BOX_W + GAP_X), 40 + row * (BOX_H + GAP_Y))
    machines = sorted({d["machine"] for _, d in g.nodes(data=True)})
    color = {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(machines)}
    width = max((p[0] for p in pos.values()), default=0) + BOX_W + 40
    height = max((p[1] for p in pos.values()), default=0) + BOX_H + 60
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
           'markerHeight="6" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
           'fill="#555"/></marker></defs>']
    for i, m in enumerate(machines):
        out.append(f'<rect x="{20 + i * 90}" y="8" width="14" height="14" fill="{color[m]}"/>'
                   f'<text x="{38 + i * 90}" y="19">{escape(m)}</text>')
    for src, dst, data in g.edges(data=True):
        x1, y1 = pos[src][0] + BOX_W, pos[src][1] + BOX_H / 2
        x2, y2 = pos[dst][0], pos[dst][1] + BOX_H / 2
        out.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="#555" '
                   f'marker-end="url(#arrow)"/>')
        out.append(f'<text x="{(x1 + x2) / 2 - 20}" y="{(y1 + y2) / 2 - 3}" fill="#333">'
                   f'{escape(data["op"])}</text>')
    for node, (bx, by) in pos.items():
        m = g.nodes[node]["machine"]
        out.append(f'<rect x="{bx}" y="{by}" width="{BOX_W}" height="{BOX_H}" rx="5" '
                   f'fill="{color[m]}" fill-opacity="0.25" stroke="{color[m]}"/>')
        label = node if len(node) <= 34 else node[:31] + "…"
        out.append(f'<text x="{bx + 6}" y="{by + 21}">{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out)
