"""Draw a global plan D as a standalone SVG (no external libraries or network): one column per
machine, each vertex a labelled box in its machine's column, rows by depth (a vertex below
everything it reads), MVs marked with their sharings, every box's tooltip listing its SHR, and
edges as thin curves coloured by operator. Readable with all 25 sharings of Table 1.

Must not: choose or change plans.
"""

from __future__ import annotations

from collections import defaultdict
from html import escape
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from smile.optimizer.global_plan import GlobalPlan
    from smile.optimizer.plan import Vertex

OPS = {"copy_delta": "#4e79a7", "delta_to_rel": "#59a14f", "union": "#b07aa1", "join": "#e15759",
       "pad": "#f28e2b", "aggregate": "#76b7b2"}
KIND = {"delta": "#eef3fb", "partial": "#fdf1e6", "relation": "#eaf5e9"}
BOX_W, BOX_H, COL_GAP, ROW_GAP, TOP = 250, 26, 70, 8, 70


def plan_svg(plan: GlobalPlan) -> str:
    depth: dict[Vertex, int] = {}
    for v in plan.order():
        depth[v] = 1 + max(depth.get(s, 0) for s in plan.incoming[v].sources)
    machines = sorted({v.machine for v in plan.vertices})
    mvs: dict[Vertex, list[str]] = defaultdict(list)
    for s in plan.sharings:
        mvs[s.mv].append(s.name)
    shr = plan.shr
    columns: dict[str, list[Vertex]] = {m: [] for m in machines}
    for v in sorted(plan.vertices, key=lambda v: (depth.get(v, 0), v.label)):
        columns[v.machine].append(v)
    pos: dict[Vertex, tuple[float, float]] = {}
    for i, m in enumerate(machines):
        for row, v in enumerate(columns[m]):
            pos[v] = (20 + i * (BOX_W + COL_GAP), TOP + row * (BOX_H + ROW_GAP))
    width = 40 + len(machines) * (BOX_W + COL_GAP)
    height = TOP + max((len(c) for c in columns.values()), default=0) * (BOX_H + ROW_GAP) + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
           f'<text x="20" y="18" font-size="13" font-weight="bold">global plan: '
           f'{len(plan.sharings)} sharings, {len(plan.vertices)} vertices, {len(plan.edges)} '
           f'edges</text>']
    x = 20
    for op, color in OPS.items():
        out.append(f'<line x1="{x}" y1="32" x2="{x + 18}" y2="32" stroke="{color}" '
                   f'stroke-width="2"/><text x="{x + 22}" y="36">{op}</text>')
        x += 120
    for i, m in enumerate(machines):
        cx = 20 + i * (BOX_W + COL_GAP)
        out.append(f'<rect x="{cx - 6}" y="{TOP - 24}" width="{BOX_W + 12}" '
                   f'height="{height - TOP + 14}" fill="#f7f7f7" stroke="#ddd"/>'
                   f'<text x="{cx}" y="{TOP - 8}" font-weight="bold">{escape(m)} '
                   f'({len(columns[m])} vertices)</text>')
    for e in plan.edges:
        color = OPS.get(e.kind, "#888")
        x2, y2 = pos[e.dst][0], pos[e.dst][1] + BOX_H / 2
        for src in dict.fromkeys(e.sources):
            x1, y1 = pos[src][0] + BOX_W, pos[src][1] + BOX_H / 2
            if src.machine == e.dst.machine:  # within a column: a loop on its left side
                x1, x2b = pos[src][0], pos[e.dst][0]
                bend = x1 - 14 - 4 * (depth.get(e.dst, 0) % 4)
                out.append(f'<path d="M {x1} {y1} C {bend} {y1}, {bend} {y2}, {x2b} {y2}" '
                           f'fill="none" stroke="{color}" stroke-opacity="0.55"/>')
                continue
            mid = (x1 + x2) / 2
            out.append(f'<path d="M {x1} {y1} C {mid} {y1}, {mid} {y2}, {x2} {y2}" '
                       f'fill="none" stroke="{color}" stroke-opacity="0.45"/>')
    for v, (bx, by) in pos.items():
        names = mvs.get(v, [])
        serves = ", ".join(sorted(shr.get(v, ())))
        label = v.label.rsplit("@", 1)[0]
        label = label if len(label) <= 36 else label[:35] + "…"
        stroke = "#222" if names else "#999"
        out.append(f'<g><title>{escape(v.label)}&#10;SHR: {escape(serves)}</title>'
                   f'<rect x="{bx}" y="{by}" width="{BOX_W}" height="{BOX_H}" rx="4" '
                   f'fill="{KIND.get(v.kind, "#fff")}" stroke="{stroke}" '
                   f'stroke-width="{2 if names else 1}"/>'
                   f'<text x="{bx + 5}" y="{by + 12}">{escape(label)}</text>'
                   f'<text x="{bx + 5}" y="{by + 23}" fill="#555" font-size="9">'
                   f'{escape(("MV " + ", ".join(names) + " · ") if names else "")}'
                   f'SHR {len(shr.get(v, ()))}</text></g>')
    out.append("</svg>")
    return "\n".join(out)
