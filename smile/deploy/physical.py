"""The physical side of a plan: for every vertex, the table that holds it on its machine, the
key of its timestamp in its machine's TS table (`operators/vertex_ts.py`), and its columns as
(alias, column) → physical name.

A base relation's ΔR and R̂ are capture's own tables (columns named as in the relation). Every
other vertex lives in `_smile.v_<hash of its label>`; its columns follow from what it holds
(`expr.Expr`): `alias__column` for each column it keeps of each relation it covers (aliases are
canonical, so two sharings' equal vertices are one table); deltas add `__sign` and `__ts`.
The delta a Union makes is not stored: it is a view over its two inputs (`view_of`), so its rows
are written once, by the joins, and read where they lie; the Union only moves its TS
(docs/design/agents.md, "A Union stores nothing"). Everything here follows from the global plan D
and the relations' schemas, so an agent (or the executor after a restart) rebuilds the same
physical plan from the catalog.

Must not: touch a database (installation is `install.py`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING

from smile.delta_capture.registry import delta_table, delta_vertex, shadow_table, shadow_vertex
from smile.errors import AgentError
from smile.optimizer.expr import split_ref
from smile.optimizer.plan import Join, Union

if TYPE_CHECKING:
    from collections.abc import Mapping

    from smile.optimizer.global_plan import GlobalPlan, SharingEntry
    from smile.optimizer.plan import Edge, Vertex

Col = tuple[str, str]
Schemas = dict[str, tuple[tuple[str, str], ...]]
"""relation → its (column, SQL type) in table order."""

def column_ref(text: str) -> Col:
    """(alias, column) of a `"alias"."column"` reference as plans write them.

    >>> column_ref('"users#2"."uid"')
    ('users#2', 'uid')
    """
    try:
        return split_ref(text)
    except ValueError as exc:
        raise AgentError(f"cannot read column reference {text!r}") from exc


def column_name(alias: str, column: str) -> str:
    """The physical column holding `alias.column` in a SMILE table: readable when it fits in
    PostgreSQL's 63 bytes, a digest otherwise.

    >>> column_name("users", "uid"), column_name("x" * 40, "y" * 30)[:2]
    ('users__uid', 'c_')
    """
    name = f"{alias}__{column}"
    if len(name.encode()) <= 63:
        return name
    return "c_" + hashlib.sha1(name.encode()).hexdigest()[:20]


@dataclass(frozen=True)
class PhysicalVertex:
    vertex: Vertex
    table: tuple[str, str]
    ts_key: str
    columns: tuple[tuple[Col, str], ...]
    """(alias, column) → physical column, in table order; for base vertices the alias is '*'."""
    is_delta: bool
    base: bool
    view_of: tuple[tuple[str, str], ...] = ()
    """For the delta of a Union: the tables (or views) of its inputs, which it is a view over."""

    @property
    def virtual(self) -> bool:
        """A view over its inputs, not a table of its own."""
        return bool(self.view_of)

    @property
    def names(self) -> list[str]:
        return [p for _, p in self.columns]

    def mapping(self, alias: str | None = None) -> dict[Col, str]:
        if self.base:
            assert alias is not None
            return {(alias, c): p for (_, c), p in self.columns}
        return dict(self.columns)


def physical_name(label: str) -> str:
    """The table name of a SMILE vertex: stable, short, a valid identifier.

    >>> physical_name("Δa~1f2e3d@m1")
    'v_bce57c05b8f7c70a'
    """
    return "v_" + hashlib.sha1(label.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class PhysicalPlan:
    plan: GlobalPlan
    vertices: Mapping[Vertex, PhysicalVertex]
    schemas: Schemas

    @property
    def edges(self) -> tuple[Edge, ...]:
        return self.plan.edges

    @property
    def views(self) -> tuple[SharingEntry, ...]:
        return self.plan.sharings

    def incoming(self, v: Vertex) -> Edge | None:
        return self.plan.incoming.get(v)

    def stored(self, v: Vertex) -> tuple[Vertex, ...]:
        """The deltas whose tables hold v's rows: v itself, or for the view a Union makes, the
        stored deltas behind its inputs (retention keeps their rows for v's readers)."""
        e = self.plan.incoming.get(v)
        if not isinstance(e, Union):
            return (v,)
        return tuple(s for src in e.sources for s in self.stored(src))

    def order(self) -> list[Vertex]:
        """Vertices with an incoming edge, sources first (the push order)."""
        return self.plan.order()

    def column_type(self, v: Vertex, col: Col) -> str:
        relation = v.expr.part(col[0]).relation
        return dict(self.schemas[relation])[col[1]]

    @cached_property
    def _probed(self) -> dict[Vertex, list[str]]:
        """Physical columns of each relation vertex that joins look up by key."""
        out: dict[Vertex, list[str]] = {}
        for e in self.plan.edges:
            if not isinstance(e, Join):
                continue
            pv = self.vertices[e.other]
            other_alias = e.dst.expr.right if e.delta_side == "left" else e.dst.expr.left[0]
            mapping = pv.mapping(other_alias)
            for lhs, rhs in e.predicates:
                for ref in (column_ref(lhs), column_ref(rhs)):
                    if ref in mapping and mapping[ref] not in out.setdefault(e.other, []):
                        out[e.other].append(mapping[ref])
        return out

    def join_keys(self, pv: PhysicalVertex) -> list[str]:
        """The columns of a relation vertex that joins probe (install indexes them). A
        relation vertex no join probes — an MV — is indexed on a column of its own join
        predicates, else its first column: DeltaToRel finds the rows it replaces or deletes
        through it instead of scanning the relation."""
        probed = list(self._probed.get(pv.vertex, ()))
        if probed or pv.is_delta or pv.base or not pv.columns:
            return probed
        mapping = pv.mapping()
        for pair in pv.vertex.expr.joins:
            for ref in map(column_ref, pair):
                if ref in mapping:
                    return [mapping[ref]]
        return [pv.columns[0][1]]

    def probed(self, pv: PhysicalVertex) -> bool:
        """Whether a join looks rows of this relation vertex up (else it is an MV, or a
        relation only DeltaToRel writes)."""
        return bool(self._probed.get(pv.vertex))

    def probe_column(self, pv: PhysicalVertex) -> str | None:
        """An indexed column of a relation vertex, for DeltaToRel to find rows by."""
        keys = self.join_keys(pv)
        return keys[0] if keys else None


def physical_vertex(v: Vertex, schemas: Schemas) -> PhysicalVertex:
    if v.base:
        rel = v.expr.parts[0].relation
        if rel not in schemas:
            raise AgentError(f"no columns known for base relation {rel}")
        cols = tuple((("*", c), c) for c, _ in schemas[rel])
        schema, table = ("public", rel)
        if v.kind == "delta":
            return PhysicalVertex(v, ("_smile", delta_table(schema, table)),
                                  delta_vertex(schema, table), cols, True, True)
        return PhysicalVertex(v, ("_smile", shadow_table(schema, table)),
                              shadow_vertex(schema, table), cols, False, True)
    cols = tuple((c, column_name(*c)) for c in v.expr.columns())
    return PhysicalVertex(v, ("_smile", physical_name(v.label)), v.label, cols, v.is_delta,
                          False)


def physical_plan(plan: GlobalPlan, schemas: Schemas, union_views: bool = True) -> PhysicalPlan:
    """`plan`'s vertices on their machines; with `union_views` False (a benchmark's baseline)
    the deltas Unions make are tables they copy into, as in the paper."""
    out = {v: physical_vertex(v, schemas) for v in plan.vertices}
    for e in plan.edges:
        if isinstance(e, Union) and union_views:
            out[e.dst] = replace(out[e.dst], view_of=tuple(out[s].table for s in e.sources))
    return PhysicalPlan(plan, out, schemas)
