"""The global plan to JSON and back, so it can live in the catalog and every agent (and the
executor after a restart) rebuilds the very same plan from it. Vertices are listed once and
edges refer to them by position.

Must not: touch a database; it only converts values.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from smile.errors import PlanError
from smile.optimizer.expr import AggPlan, Expr, OuterPlan, Part
from smile.optimizer.global_plan import GlobalPlan, SharingEntry
from smile.optimizer.plan import (
    VERTEX_FIELDS,
    Aggregate,
    CopyDelta,
    DeltaToRel,
    Edge,
    Join,
    Pad,
    Union,
    Vertex,
)

_EDGES: dict[str, type[Any]] = {"copy_delta": CopyDelta, "delta_to_rel": DeltaToRel,
                                "union": Union, "join": Join, "pad": Pad,
                                "aggregate": Aggregate}
_TUPLE_FIELDS = ("selection", "projection", "filters")


def vertex_to_json(v: Vertex) -> dict[str, Any]:
    e = v.expr
    doc: dict[str, Any] = {"kind": v.kind, "machine": v.machine, "parts": [
        [p.alias, p.relation, list(p.columns), list(p.selections)] for p in e.parts],
        "joins": [list(j) for j in e.joins], "left": list(e.left), "driving": e.driving}
    if e.outer:
        doc["outer"] = [e.outer.kind, list(e.outer.left), [list(p) for p in e.outer.predicates]]
    if e.pad:
        doc["pad"] = True
    if e.agg:
        a = e.agg
        doc["agg"] = {"keys": list(a.keys), "calls": [list(c) for c in a.calls],
                      "where": list(a.where), "global": a.global_,
                      "distinct_rows": a.distinct_rows}
    return doc | {"owner": v.owner} if v.owner else doc


def vertex_from_json(doc: dict[str, Any]) -> Vertex:
    outer = OuterPlan(doc["outer"][0], tuple(doc["outer"][1]),
                      tuple((lhs, rhs) for lhs, rhs in doc["outer"][2])) \
        if "outer" in doc else OuterPlan()
    a = doc.get("agg")
    agg = AggPlan(tuple(a["keys"]), tuple((f, arg, bool(d)) for f, arg, d in a["calls"]),
                  tuple(a["where"]), bool(a["global"]), bool(a["distinct_rows"])) \
        if a else AggPlan()
    expr = Expr(tuple(Part(a, r, tuple(c), tuple(s)) for a, r, c, s in doc["parts"]),
                tuple((lhs, rhs) for lhs, rhs in doc["joins"]), tuple(doc["left"]),
                doc["driving"], outer, bool(doc.get("pad", False)), agg)
    return Vertex(doc["kind"], expr, doc["machine"], doc.get("owner", ""))


def plan_to_json(plan: GlobalPlan) -> dict[str, Any]:
    index: dict[Vertex, int] = {}
    for v in sorted(plan.vertices):
        index[v] = len(index)

    def edge(e: Edge) -> dict[str, Any]:
        doc: dict[str, Any] = {"kind": e.kind}
        for f in fields(e):
            if f.name == "kind":
                continue
            value = getattr(e, f.name)
            doc[f.name] = (None if value is None else index[value]) \
                if f.name in VERTEX_FIELDS else (
                [list(p) for p in value] if f.name == "predicates" else
                list(value) if f.name in _TUPLE_FIELDS else value)
        return doc

    return {
        "vertices": [vertex_to_json(v) for v in index],
        "edges": [edge(e) for e in plan.edges],
        "sharings": [{"name": s.name, "mv": index[s.mv], "sources": [index[x] for x in s.sources],
                      "sla_s": s.sla_s, "penalty_per_tuple": s.penalty_per_tuple,
                      "outputs": [list(o) for o in s.outputs], "mv_rate": s.mv_rate,
                      "algorithm": s.algorithm} | ({"where": s.where} if s.where else {})
                     | ({"group": s.group} if s.group else {})
                     for s in plan.sharings],
        "extra": dict(plan.extra),
    }


def plan_from_json(doc: dict[str, Any]) -> GlobalPlan:
    try:
        vertices = [vertex_from_json(v) for v in doc["vertices"]]

        def edge(d: dict[str, Any]) -> Edge:
            d = dict(d)
            cls = _EDGES[d.pop("kind")]
            for key in VERTEX_FIELDS:
                if key in d:
                    d[key] = None if d[key] is None else vertices[d[key]]
            for key in _TUPLE_FIELDS:
                if key in d:
                    d[key] = tuple(d[key])
            if "predicates" in d:
                d["predicates"] = tuple((lhs, rhs) for lhs, rhs in d["predicates"])
            out: Edge = cls(**d)
            return out

        sharings = tuple(SharingEntry(
            s["name"], vertices[s["mv"]], tuple(vertices[x] for x in s["sources"]), s["sla_s"],
            s["penalty_per_tuple"], tuple((n, t) for n, t in s["outputs"]), s["mv_rate"],
            s["algorithm"], s.get("where", ""), s.get("group", "")) for s in doc["sharings"])
        return GlobalPlan(tuple(edge(e) for e in doc["edges"]), sharings,
                          dict(doc.get("extra", {})))
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise PlanError(f"stored plan is malformed: {exc!r}") from exc
