"""Whether an edge of a plan computes its destination from what it reads, in words
(`GlobalPlan.problems`): the check every plumbing's new edges pass before hill-climbing runs
them.

Must not: change plans, or know about costs.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import TYPE_CHECKING

from smile.optimizer.expr import AggPlan
from smile.optimizer.plan import Aggregate, CopyDelta, DeltaToRel, Pad, Union

if TYPE_CHECKING:
    from smile.optimizer.plan import Edge, Join


@lru_cache(maxsize=1 << 16)
def edge_problem(e: Edge) -> str | None:
    """Why `e`'s destination cannot be computed from what it reads, in words (None when it
    can): a copy from a delta holding at least its rows and columns, a DeltaToRel from the
    relation's own delta, a union of the two partial deltas of its join (or of an outer
    join's inner part and padded rows), a join whose two sides hold every column it writes
    and joins on, a Pad from both sides' deltas and relations, an Aggregate from its input's
    delta (and relation, when it keeps an extreme). An edge is a value: told once."""
    if isinstance(e, CopyDelta):
        ok = e.src.expr.covers(e.dst.expr) and e.src.kind == e.dst.kind
        return None if ok else f"{e.src.label} cannot feed {e.dst.label} by a copy"
    if isinstance(e, DeltaToRel):
        ok = e.src.expr == e.dst.expr and e.src.kind == "delta" and e.dst.kind == "relation"
        return None if ok else f"{e.dst.label} is not kept from its own delta"
    if isinstance(e, Union):
        return _union_problem(e)
    if isinstance(e, Pad):
        return None if _pads(e) else f"{e.dst.label} cannot be padded from its sides"
    if isinstance(e, Aggregate):
        return None if _aggregates(e) else f"{e.dst.label} is not aggregated from its input"
    return _join_problem(e)


def _union_problem(e: Union) -> str | None:
    dst = e.dst.expr
    if dst.outer:
        parts = {(v.expr.pad, v.expr) for v in (e.left, e.right)}
        if parts != {(False, dst.whole()), (True, replace(dst, pad=True))}:
            return f"{e.dst.label} is not the union of its inner join and its padded rows"
        return None
    halves = {(v.expr.driving, v.expr.whole()) for v in (e.left, e.right)}
    if halves != {("left", dst), ("right", dst)}:
        return f"{e.dst.label} is not the union of its join's partial deltas"
    return None


def _pads(e: Pad) -> bool:
    dst = e.dst.expr
    left = set(dst.outer.left)
    sides = (dst.restrict(tuple(a for a in dst.aliases if a in left)),
             dst.restrict(tuple(a for a in dst.aliases if a not in left)))
    return dst.pad and all(
        d.expr == r.expr and r.expr.covers(side) and d.kind == "delta" and r.kind == "relation"
        for d, r, side in ((e.left_delta, e.left_rel, sides[0]),
                           (e.right_delta, e.right_rel, sides[1])))


def _aggregates(e: Aggregate) -> bool:
    dst = e.dst.expr
    src = replace(dst, agg=AggPlan())
    if e.delta.expr != src or e.delta.kind != "delta":
        return False
    if e.rel is None:
        return not dst.agg.extreme
    return e.rel.expr == src


def _join_problem(e: Join) -> str | None:
    dst = e.dst.expr
    drive, other = ((dst.left, (dst.right,)) if e.delta_side == "left"
                    else ((dst.right,), dst.left))
    ok = (e.delta.expr.covers(dst.restrict(drive))
          and e.other.expr.covers(dst.restrict(other))
          and e.other_delta.expr == e.other.expr and e.delta_side == dst.driving)
    return None if ok else (f"{e.dst.label} cannot be joined from {e.delta.label} and "
                            f"{e.other.label}")
