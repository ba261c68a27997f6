"""Plans: DAGs of frozen vertices and edges (paper §4–5, NOTES §4).

A vertex is a relation, a delta, a partial delta Δ(ΔL⋈X)/Δ(L⋈ΔX) or an MV, placed on one
machine. The base relation R's own delta ΔR and shadow copy R̂ (NOTES §3) are named by the
relation; everything a sharing adds is named `sharing/expression`, so different sharings'
vertices stay apart until a multi-sharing optimizer merges them. Edges carry the tuples per
second flowing through them (for one second of source updates), which with a time model gives
their seconds, and what they must apply (pushed-down selections and projections).

Must not: choose plans (that is `dp.py`); no database access.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from smile.costmodel.formulas import critical_path

if TYPE_CHECKING:
    from smile.costmodel.time_model import EdgeKind, TimeModel

VertexKind = Literal["delta", "relation", "partial", "mv"]


@dataclass(frozen=True, order=True)
class Vertex:
    kind: VertexKind
    expr: str
    machine: str

    @property
    def label(self) -> str:
        name = {"delta": f"Δ{self.expr}", "relation": self.expr, "partial": self.expr,
                "mv": f"MV {self.expr}"}[self.kind]
        return f"{name}@{self.machine}"


@dataclass(frozen=True)
class CopyDelta:
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
    NOTES §4: each delta row joins the other side rolled to its timestamp with that side's own
    delta; left changes see the right side strictly before them."""

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
    kind: Literal["join"] = field(default="join", init=False)

    @property
    def sources(self) -> tuple[Vertex, ...]:
        return (self.delta, self.other, self.other_delta)


Edge = CopyDelta | DeltaToRel | Union | Join


def edge_kind(edge: Edge) -> EdgeKind:
    if isinstance(edge, Join):
        return "join_spark" if edge.engine == "spark" else "join_pg"
    return edge.kind


def edge_seconds(edge: Edge, model: TimeModel, x: float = 1.0) -> float:
    """Seconds to push `x` seconds' worth of updates through the edge."""
    return model.seconds(edge_kind(edge), edge.tuples_per_s * x)


@dataclass(frozen=True)
class Plan:
    sharing: str
    edges: tuple[Edge, ...]
    mv: Vertex
    sources: tuple[Vertex, ...]

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
        import networkx as nx

        g = nx.DiGraph()
        for v in self.vertices():
            g.add_node(v.label, kind=v.kind, machine=v.machine)
        for e in self.edges:
            for src in e.sources:
                g.add_edge(src.label, e.dst.label, op=e.kind)
        return g

    def to_json(self) -> dict[str, Any]:
        def edge(e: Edge) -> dict[str, Any]:
            out: dict[str, Any] = {
                "op": e.kind, "from": [s.label for s in e.sources], "to": e.dst.label,
                "tuples_per_s": round(e.tuples_per_s, 3),
            }
            if isinstance(e, Join):
                out |= {"engine": e.engine, "delta_side": e.delta_side,
                        "on": [f"{a} = {b}" for a, b in e.predicates],
                        "filters": list(e.filters)}
            if isinstance(e, CopyDelta):
                out |= {"selection": list(e.selection), "projection": list(e.projection)}
            return out

        return {
            "sharing": self.sharing,
            "mv": {"machine": self.mv.machine, "vertex": self.mv.label},
            "sources": [s.label for s in self.sources],
            "vertices": sorted(v.label for v in self.vertices()),
            "edges": [edge(e) for e in self.edges],
        }
