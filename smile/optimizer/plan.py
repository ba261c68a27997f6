"""Plans: DAGs of frozen vertices and edges (paper §4–5, docs/design/semantics.md §4 and §8).

A vertex is *what it holds* (an `Expr`, `expr.py`) placed on one machine. The contents of a
vertex depend on nothing else: not on the sharing that asked for it, nor on the route its
tuples take. So two sharings that compute the same thing on the same machine produce *equal*
vertices, and merging their plans into the global plan is a set union
(docs/design/semantics.md §8). A base relation as captured — all columns, unfiltered — is a
one-part `Expr` without columns: its delta ΔR and shadow copy R̂ (docs/design/semantics.md §3)
are capture's. An MV is the relation vertex of its sharing's whole join (the consumer's view
projects it): another sharing may read it like any intermediate, and two sharings asking for
the same join on the same machine keep one table.

Edges carry the tuples per second flowing through them (for one second of source updates),
which with a time model gives their seconds, and what they must apply (pushed-down selections
and projections).

Must not: choose plans (that is `dp.py`); no database access.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from smile.costmodel.formulas import critical_path
from smile.optimizer.expr import (
    Expr,
    _cached_hash,
)

if TYPE_CHECKING:
    from smile.costmodel.time_model import EdgeKind, TimeModel

VertexKind = Literal["delta", "relation", "partial"]


@dataclass(frozen=True, order=True)
class Vertex:
    __hash__ = _cached_hash

    kind: VertexKind
    expr: Expr
    machine: str
    owner: str = ""
    """The one sharing whose own vertex this is, never merged with another's equal vertex
    (`owned`); empty for the vertices of D, which any sharing may share."""

    @cached_property
    def computation(self) -> str:
        """What the vertex holds, wherever it is: its label without the machine."""
        return f"Δ{self.expr.text}" if self.kind == "delta" else self.expr.text

    @cached_property
    def label(self) -> str:
        own = f"#{self.owner}" if self.owner else ""
        return f"{self.computation}@{self.machine}{own}"

    @property
    def is_delta(self) -> bool:
        return self.kind in ("delta", "partial")

    @property
    def base(self) -> bool:
        """A base relation's own ΔR or shadow copy R̂, kept by capture."""
        return self.expr.raw and self.kind in ("delta", "relation")

    def at(self, machine: str) -> Vertex:
        return replace(self, machine=machine)


@dataclass(frozen=True)
class CopyDelta:
    __hash__ = _cached_hash

    src: Vertex
    dst: Vertex
    tuples_per_s: float
    bytes_per_tuple: float
    selection: tuple[str, ...] = ()
    """Predicates applied on the way (pushed-down selections)."""
    projection: tuple[str, ...] = ()
    """Columns kept (pushed-down projection); empty keeps all."""
    kind: Literal["copy_delta"] = field(default="copy_delta", init=False)

    @property
    def sources(self) -> tuple[Vertex, ...]:
        return (self.src,)

    @property
    def crosses_machines(self) -> bool:
        return self.src.machine != self.dst.machine


@dataclass(frozen=True)
class DeltaToRel:
    __hash__ = _cached_hash

    src: Vertex
    dst: Vertex
    tuples_per_s: float
    stored_bytes: float
    """Size of the relation it maintains (its storage cost)."""
    projection: tuple[str, ...] = ()
    kind: Literal["delta_to_rel"] = field(default="delta_to_rel", init=False)

    @property
    def sources(self) -> tuple[Vertex, ...]:
        return (self.src,)


@dataclass(frozen=True)
class Union:
    __hash__ = _cached_hash

    left: Vertex
    right: Vertex
    dst: Vertex
    tuples_per_s: float
    kind: Literal["union"] = field(default="union", init=False)

    @property
    def sources(self) -> tuple[Vertex, ...]:
        return (self.left, self.right)


@dataclass(frozen=True)
class Join:
    """Δ(ΔL ⋈ X) (`delta_side='left'`) or Δ(L ⋈ ΔX) (`'right'`), with the compensation of
    docs/design/semantics.md §4: each delta row joins the other side rolled to its timestamp
    with that side's own delta; left changes see the right side strictly before them."""

    __hash__ = _cached_hash

    delta: Vertex
    """The delta whose rows drive the join."""
    other: Vertex
    """The other side's relation."""
    other_delta: Vertex
    """The other side's delta, for the compensation."""
    dst: Vertex
    delta_side: Literal["left", "right"]
    predicates: tuple[tuple[str, str], ...]
    """Equalities `left column = right column` (alias-qualified)."""
    filters: tuple[str, ...]
    """Selections still to apply (those of base sides read in place)."""
    tuples_per_s: float
    engine: Literal["postgres", "spark"] = "postgres"
    rows_in_per_s: float = 0.0
    """Rows of `delta` it reads per second: a push's work grows with the driving slice it
    joins as well as with what it writes (`edge_tuples`)."""
    kind: Literal["join"] = field(default="join", init=False)

    @property
    def sources(self) -> tuple[Vertex, ...]:
        return (self.delta, self.other, self.other_delta)


@dataclass(frozen=True)
class Pad:
    """The NULL-padded rows of an outer join, as a delta (`operators/pad.py`): from both
    sides' relations and deltas, all on the destination's machine."""

    __hash__ = _cached_hash

    left_delta: Vertex
    left_rel: Vertex
    right_delta: Vertex
    right_rel: Vertex
    dst: Vertex
    tuples_per_s: float
    rows_in_per_s: float = 0.0
    """Rows of both deltas it reads per second."""
    kind: Literal["pad"] = field(default="pad", init=False)

    @property
    def sources(self) -> tuple[Vertex, ...]:
        return (self.left_delta, self.left_rel, self.right_delta, self.right_rel)


@dataclass(frozen=True)
class Aggregate:
    """A GROUP BY (or DISTINCT) kept from its input's delta (`operators/aggregate.py`); its
    input's relation, when it keeps a min or max, to recompute an extreme from."""

    __hash__ = _cached_hash

    delta: Vertex
    rel: Vertex | None
    dst: Vertex
    tuples_per_s: float
    """Groups written per second."""
    rows_in_per_s: float = 0.0
    """Delta rows it reads per second."""
    stored_bytes: float = 0.0
    """Size of the aggregate it keeps (its storage cost)."""
    kind: Literal["aggregate"] = field(default="aggregate", init=False)

    @property
    def sources(self) -> tuple[Vertex, ...]:
        return (self.delta,) if self.rel is None else (self.delta, self.rel)


Edge = CopyDelta | DeltaToRel | Union | Join | Pad | Aggregate
VERTEX_FIELDS = ("src", "dst", "left", "right", "delta", "other", "other_delta",
                 "left_delta", "left_rel", "right_delta", "right_rel", "rel")
"""The fields of an edge that hold vertices (`rel` of an Aggregate may be None)."""


def route(edge: Edge) -> Edge:
    """The edge without its estimates (rates, sizes): what it does and what it reads. Two
    versions of D route a vertex alike when their incoming edges' routes are equal, however
    differently they estimated its traffic."""
    if isinstance(edge, DeltaToRel):
        return replace(edge, tuples_per_s=0.0, stored_bytes=0.0)
    if isinstance(edge, CopyDelta):
        return replace(edge, tuples_per_s=0.0, bytes_per_tuple=0.0)
    if isinstance(edge, (Join, Pad)):  # its driving rate is an estimate too: a re-rated join
        return replace(edge, tuples_per_s=0.0, rows_in_per_s=0.0)  # is not re-routed
    if isinstance(edge, Aggregate):
        return replace(edge, tuples_per_s=0.0, rows_in_per_s=0.0, stored_bytes=0.0)
    return replace(edge, tuples_per_s=0.0)


def edge_kind(edge: Edge) -> EdgeKind:
    if isinstance(edge, Join):
        return "join_spark" if edge.engine == "spark" else "join_pg"
    return edge.kind


JOIN_READ_WEIGHT = 0.2
"""A driving row a join reads, in rows it writes: Δtweets ⋈ curloc reads every new tweet and
writes one row in ten, and `smile bench admission` measured it at 3× what its output alone
predicted (1 + 0.2 × 10 = 3); counting a row read as a row written (weight 1) halved what a
join writing far more than it reads is charged (Δloc ⋈ tweets), and admission let in more
than the machines could carry."""


def join_tuples(rows_out: float, rows_in: float) -> float:
    """The tuples the time model charges a join that reads `rows_in` driving rows and writes
    `rows_out`; `smile calibrate` and the executor's re-fit count a join's points this way.

    >>> join_tuples(100.0, 1000.0)
    300.0
    """
    return rows_out + JOIN_READ_WEIGHT * rows_in


def charged_tuples(kind: str, rows_out: float, rows_in: float) -> float:
    """The tuples the time model charges one push of an edge of `kind` that read `rows_in`
    and wrote `rows_out` (as `edge_tuples` charges the edge per second): a DeltaToRel the
    delta rows it reads, a join its output and its driving rows (`join_tuples`), any other
    edge what it writes.

    >>> charged_tuples("delta_to_rel", 7, 50), charged_tuples("copy_delta", 40, 40)
    (50.0, 40.0)
    >>> charged_tuples("join_pg", 100, 1000) == join_tuples(100.0, 1000.0)
    True
    """
    if kind in ("join_pg", "join_spark"):
        return join_tuples(float(rows_out), float(rows_in))
    return float(rows_in if kind in ("delta_to_rel", "aggregate", "pad") else rows_out)


def edge_tuples(edge: Edge) -> float:
    """Tuples per second the time model charges an edge: what it writes, and for a join the
    driving rows it reads too (`join_tuples`)."""
    if isinstance(edge, Join):
        return join_tuples(edge.tuples_per_s, edge.rows_in_per_s)
    if isinstance(edge, (Aggregate, Pad)):  # what it reads, as a DeltaToRel
        return edge.rows_in_per_s
    return edge.tuples_per_s


def edge_seconds(edge: Edge, model: TimeModel, x: float = 1.0) -> float:
    """Seconds to push `x` seconds' worth of updates through the edge."""
    return model.seconds(edge_kind(edge), edge_tuples(edge) * x, edge.dst.label)


def edges_graph(edges: tuple[Edge, ...] | list[Edge], extra: tuple[Vertex, ...] = ()) -> Any:
    """A networkx DiGraph of vertex labels (hyperedges spread per source)."""
    import networkx as nx

    g = nx.DiGraph()
    for v in extra:
        g.add_node(v.label, kind=v.kind, machine=v.machine)
    for e in edges:
        for v in (*e.sources, e.dst):
            g.add_node(v.label, kind=v.kind, machine=v.machine)
        for src in e.sources:
            g.add_edge(src.label, e.dst.label, op=e.kind)
    return g


def edge_to_json(e: Edge) -> dict[str, Any]:
    """An edge for people (the API, `smile plan --json`)."""
    out: dict[str, Any] = {
        "op": e.kind, "from": [s.label for s in e.sources], "to": e.dst.label,
        "tuples_per_s": round(e.tuples_per_s, 3),
    }
    if isinstance(e, Join):
        out |= {"engine": e.engine, "delta_side": e.delta_side,
                "rows_in_per_s": round(e.rows_in_per_s, 3),
                "on": [f"{a} = {b}" for a, b in e.predicates], "filters": list(e.filters)}
    if isinstance(e, CopyDelta):
        out |= {"selection": list(e.selection), "projection": list(e.projection)}
    return out


@dataclass(frozen=True)
class Plan:
    sharing: str
    edges: tuple[Edge, ...]
    mv: Vertex
    sources: tuple[Vertex, ...]
    outputs: tuple[tuple[str, str], ...] = ()
    """The MV's columns as the consumer sees them: (name, SQL over `alias.column`)."""
    where: str = ""
    """What the consumer's view filters its rows by (`global_plan.SharingEntry.where`)."""

    def vertices(self) -> frozenset[Vertex]:
        out: set[Vertex] = {self.mv, *self.sources}
        for e in self.edges:
            out.add(e.dst)
            out.update(e.sources)
        return frozenset(out)

    def critical_path(self, model: TimeModel, x: float = 1.0) -> float:
        """Longest path in seconds when `x` seconds of updates are pushed (paper's CP(D, x))."""
        return critical_path(
            (src.label, e.dst.label, edge_seconds(e, model, x))
            for e in self.edges for src in e.sources
        )

    def graph(self) -> Any:
        """The plan as a networkx DiGraph of vertex labels (hyperedges spread per source)."""
        return edges_graph(self.edges, (self.mv, *self.sources))

    def to_json(self) -> dict[str, Any]:
        return {
            "sharing": self.sharing,
            "mv": {"machine": self.mv.machine, "vertex": self.mv.label},
            "sources": [s.label for s in self.sources],
            "vertices": sorted(v.label for v in self.vertices()),
            "edges": [edge_to_json(e) for e in self.edges],
        }


def owned(plan: Plan) -> Plan:
    """`plan` with every vertex but the base relations' (ΔR and R̂ as captured, and their raw
    copies, which are kept once per machine) made its sharing's own: merged into D, it shares
    nothing with other sharings (the separate plans of Fig. 12, `PlannerOptions.merge` off).

    >>> from smile.optimizer.expr import Part
    >>> t = Vertex("delta", Expr.base("t"), "m1")
    >>> kept = Vertex("delta", Expr((Part("t", "t", ("k",)),)), "m2")
    >>> p = owned(Plan("S1", (CopyDelta(t, kept, 1.0, 8.0),), kept.at("m2"), (t,)))
    >>> [v.label for v in (p.edges[0].src, p.edges[0].dst, p.mv)]
    ['Δt@m1', 'Δt~...@m2#S1', 'Δt~...@m2#S1']
    """
    def own(v: Vertex | None) -> Vertex | None:
        return v if v is None or v.expr.raw else replace(v, owner=plan.sharing)

    def edge(e: Edge) -> Edge:
        changes: dict[str, Any] = {f: own(getattr(e, f)) for f in VERTEX_FIELDS if hasattr(e, f)}
        return replace(e, **changes)

    def own_v(v: Vertex) -> Vertex:
        return v if v.expr.raw else replace(v, owner=plan.sharing)

    return replace(plan, edges=tuple(edge(e) for e in plan.edges), mv=own_v(plan.mv),
                   sources=tuple(own_v(s) for s in plan.sources))
