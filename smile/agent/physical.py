"""The physical side of a plan: for every vertex, the table that holds it on its machine, the
key of its timestamp in `_smile.vertex_ts`, and its columns as (alias, column) → physical name.

A base relation's ΔR and R̂ are capture's own tables (columns named as in the relation). Every
vertex a sharing adds lives in `_smile.v_<hash of its label>` with columns `alias__column` for
the columns the sharing needs of each alias it covers (its projection pushed down); deltas add
`__sign` and `__ts`. The alias sets come from the vertex names the optimizer gives
(`S/a`, `S/a⋈b`, `S/Δ(Δa⋈b)`, `S/Δ(a⋈Δb)`, and `S` for ΔMV and the MV).

Must not: touch a database (installation is `install.py`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from smile.delta_capture.registry import delta_table, delta_vertex, shadow_table, shadow_vertex
from smile.errors import AgentError

if TYPE_CHECKING:
    from smile.optimizer.plan import Edge, Plan, Vertex
    from smile.optimizer.sharing import SpjQuery

Col = tuple[str, str]


@dataclass(frozen=True)
class PhysicalVertex:
    vertex: Vertex
    table: tuple[str, str]
    ts_key: str
    columns: tuple[tuple[Col, str], ...]
    """(alias, column) → physical column, in table order; for base vertices the alias is '*'."""
    is_delta: bool
    base: bool

    @property
    def names(self) -> list[str]:
        return [p for _, p in self.columns]

    def mapping(self, alias: str | None = None) -> dict[Col, str]:
        if self.base:
            assert alias is not None
            return {(alias, c): p for (_, c), p in self.columns}
        return dict(self.columns)


def physical_name(label: str) -> str:
    """The table name of a sharing vertex: stable, short, a valid identifier.

    >>> physical_name("ΔS/a@m1")
    'v_fa1456dbaec334cb'
    """
    return "v_" + hashlib.sha1(label.encode()).hexdigest()[:16]


def aliases_of(expr: str, query: SpjQuery) -> tuple[str, ...]:
    """The aliases a sharing vertex covers, from its name.

    >>> from smile.optimizer.sharing import SpjQuery, RelRef
    >>> q = SpjQuery((RelRef("a", "r"), RelRef("b", "s")), (), (), ())
    >>> aliases_of("S/Δ(Δa⋈b)", q), aliases_of("S", q)
    (('a', 'b'), ('a', 'b'))
    """
    if "/" not in expr:
        return query.aliases
    body = expr.split("/", 1)[1]
    if body.startswith("Δ(") and body.endswith(")"):
        body = body[2:-1]
    return tuple(part.removeprefix("Δ") for part in body.split("⋈"))


def join_sides(dst_expr: str) -> tuple[tuple[str, ...], str]:
    """(left aliases, right alias) of a partial delta's name.

    >>> join_sides("S/Δ(a⋈b⋈Δc)")
    (('a', 'b'), 'c')
    """
    body = dst_expr.split("/", 1)[1][2:-1]
    parts = [p.removeprefix("Δ") for p in body.split("⋈")]
    return tuple(parts[:-1]), parts[-1]


@dataclass(frozen=True)
class PhysicalPlan:
    plan: Plan
    query: SpjQuery
    vertices: dict[Vertex, PhysicalVertex]
    column_types: dict[Col, str]
    """(alias, column) → SQL type, for creating tables."""
    relation_columns: dict[str, tuple[str, ...]]
    """base relation → its columns in order."""

    def probe_column(self, pv: PhysicalVertex) -> str | None:
        """An indexed join-key column of a relation vertex (install indexes them), if any."""
        for (alias, c), p in pv.columns:
            for j in self.query.joins:
                for side in (j.left, j.right):
                    if pv.base and (self.query.relation_of(side.alias), side.column) == (
                            pv.vertex.expr, c):
                        return p
                    if not pv.base and (side.alias, side.column) == (alias, c):
                        return p
        return None

    def incoming(self, v: Vertex) -> Edge | None:
        for e in self.plan.edges:
            if e.dst == v:
                return e
        return None

    def order(self) -> list[Vertex]:
        """Vertices with an incoming edge, sources first (the push order)."""
        import networkx as nx

        by_label = {v.label: v for v in self.vertices}
        return [by_label[lbl] for lbl in nx.topological_sort(self.plan.graph())
                if self.incoming(by_label[lbl]) is not None]


def physical_plan(plan: Plan, query: SpjQuery, relation_columns: dict[str, tuple[str, ...]],
                  column_types: dict[Col, str]) -> PhysicalPlan:
    out: dict[Vertex, PhysicalVertex] = {}
    for v in plan.vertices():
        if "/" not in v.expr and v.kind in ("delta", "relation") and v.expr != plan.sharing:
            rel = v.expr
            if rel not in relation_columns:
                raise AgentError(f"no columns known for base relation {rel}")
            cols = tuple((("*", c), c) for c in relation_columns[rel])
            schema, table = ("public", rel)
            if v.kind == "delta":
                out[v] = PhysicalVertex(v, ("_smile", delta_table(schema, table)),
                                        delta_vertex(schema, table), cols, True, True)
            else:
                out[v] = PhysicalVertex(v, ("_smile", shadow_table(schema, table)),
                                        shadow_vertex(schema, table), cols, False, True)
            continue
        cols_list: list[tuple[Col, str]] = []
        for alias in aliases_of(v.expr, query):
            for c in sorted(query.needed_columns(alias)) or [
                    relation_columns[query.relation_of(alias)][0]]:
                cols_list.append(((alias, c), f"{alias}__{c}"))
        out[v] = PhysicalVertex(v, ("_smile", physical_name(v.label)), v.label,
                                tuple(cols_list), v.kind in ("delta", "partial"), False)
    return PhysicalPlan(plan, query, out, column_types, relation_columns)
