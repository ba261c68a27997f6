"""Plans to JSON and back, so an installed plan can live in the catalog and every agent (and
the executor after a restart) rebuilds the same physical plan from it.

Must not: choose or install plans.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from smile.agent.physical import PhysicalPlan, physical_plan
from smile.errors import AgentError
from smile.optimizer.plan import CopyDelta, DeltaToRel, Edge, Join, Plan, Union, Vertex
from smile.optimizer.sharing import ColRef, JoinPredicate, Projection, RelRef, Selection, SpjQuery

_EDGES: dict[str, type[Any]] = {"copy_delta": CopyDelta, "delta_to_rel": DeltaToRel,
                                "union": Union, "join": Join}
_VERTEX_FIELDS = {"src", "dst", "left", "right", "delta", "other", "other_delta"}


def _edge_doc(e: Edge) -> dict[str, Any]:
    doc = asdict(e)
    return doc


def _edge(doc: dict[str, Any]) -> Edge:
    doc = dict(doc)
    kind = doc.pop("kind")
    for key in _VERTEX_FIELDS & doc.keys():
        doc[key] = Vertex(**doc[key])
    for key in ("selection", "projection", "filters"):
        if key in doc:
            doc[key] = tuple(doc[key])
    if "predicates" in doc:
        doc["predicates"] = tuple(tuple(p) for p in doc["predicates"])
    edge: Edge = _EDGES[kind](**doc)
    return edge


def encode_physical(phys: PhysicalPlan) -> dict[str, Any]:
    q = phys.query
    return {
        "plan": {"sharing": phys.plan.sharing, "mv": asdict(phys.plan.mv),
                 "sources": [asdict(s) for s in phys.plan.sources],
                 "edges": [_edge_doc(e) for e in phys.plan.edges]},
        "query": {"relations": [asdict(r) for r in q.relations],
                  "joins": [asdict(j) for j in q.joins],
                  "selections": [{**asdict(s), "columns": sorted(s.columns)}
                                 for s in q.selections],
                  "projections": [{**asdict(p), "columns": sorted(p.columns)}
                                  for p in q.projections],
                  "sql": q.sql},
        "relation_columns": {k: list(v) for k, v in phys.relation_columns.items()},
        "column_types": [[a, c, t] for (a, c), t in sorted(phys.column_types.items())],
    }


def decode_physical(doc: dict[str, Any]) -> PhysicalPlan:
    try:
        p = doc["plan"]
        plan = Plan(p["sharing"], tuple(_edge(e) for e in p["edges"]), Vertex(**p["mv"]),
                    tuple(Vertex(**s) for s in p["sources"]))
        q = doc["query"]
        query = SpjQuery(
            tuple(RelRef(**r) for r in q["relations"]),
            tuple(JoinPredicate(ColRef(**j["left"]), ColRef(**j["right"])) for j in q["joins"]),
            tuple(Selection(s["alias"], s["sql"], frozenset(s["columns"]))
                  for s in q["selections"]),
            tuple(Projection(x["name"], x["sql"], x["alias"], frozenset(x["columns"]))
                  for x in q["projections"]),
            q.get("sql", ""))
        return physical_plan(plan, query,
                             {k: tuple(v) for k, v in doc["relation_columns"].items()},
                             {(a, c): t for a, c, t in doc["column_types"]})
    except (KeyError, TypeError, ValueError) as exc:
        raise AgentError(f"stored plan is malformed: {exc!r}") from exc
