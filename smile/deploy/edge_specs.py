"""The physical form of the edges beyond SPJ for their operators: an Aggregate's input and
destination tables, group key and calls in physical column names; a Pad's two sides with
their join columns. Also what a consumer's view reads of an aggregate: each output slot as an
expression of the aggregate's columns (docs/design/beyond_spj.md).

Must not: touch a database (installation and advancing do, with these).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from smile.deploy.physical import column_name, column_ref
from smile.operators.aggregate import AggregateSpec, Call
from smile.operators.pad import PadSide, PadSpec
from smile.operators.rewrite import rewrite_columns
from smile.optimizer.sharing import SLOT

if TYPE_CHECKING:
    from smile.deploy.physical import PhysicalPlan
    from smile.optimizer.expr import AggPlan
    from smile.optimizer.plan import Aggregate, Pad, Vertex


def _physical(alias: str, column: str) -> tuple[str]:
    return (column_name(alias, column),)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def aggregate_spec(phys: PhysicalPlan, e: Aggregate) -> AggregateSpec:
    agg = e.dst.expr.agg
    src, dst = phys.vertices[e.delta], phys.vertices[e.dst]
    rel = phys.vertices[e.rel] if e.rel is not None else None
    keys = tuple(_quoted(column_name(*column_ref(k))) for k in agg.keys)
    calls = tuple(Call(f, rewrite_columns(arg, _physical) if arg else None, d)  # type: ignore[arg-type]
                  for f, arg, d in agg.calls)
    where = tuple(rewrite_columns(w, _physical) for w in agg.where)
    return AggregateSpec(src.table, src.ts_key, dst.table, dst.ts_key, keys, calls,
                         rel.table if rel else None, rel.ts_key if rel else None, where,
                         agg.global_)


def pad_spec(phys: PhysicalPlan, e: Pad) -> PadSpec:
    outer = e.dst.expr.outer
    left = set(outer.left)
    dst = phys.vertices[e.dst]

    def side(delta: Vertex, rel: Vertex, is_left: bool) -> PadSide:
        pd, pr = phys.vertices[delta], phys.vertices[rel]
        cols = tuple(name for (a, _), name in dst.columns if (a in left) == is_left)
        keys = tuple(column_name(*column_ref(pair[0 if is_left else 1]))
                     for pair in outer.predicates)
        return PadSide(pr.table, pr.ts_key, pd.table, pd.ts_key, cols, keys)

    return PadSpec(side(e.left_delta, e.left_rel, True), side(e.right_delta, e.right_rel, False),
                   outer.kind, dst.table, dst.ts_key)  # type: ignore[arg-type]


def slot_expressions(agg: AggPlan) -> dict[str, str]:
    """What each slot of an aggregated output reads of the aggregate's table (the columns
    `operators.aggregate` keeps): `g0` its first group column, `a1` its second call."""
    out = {f"g{i}": f"g{i}" for i in range(len(agg.keys))}
    for j, (func, arg, distinct) in enumerate(agg.calls):
        if func == "count":
            out[f"a{j}"] = "__n" if not arg else f"d{j}" if distinct else f"nn{j}"
        elif func == "sum":
            out[f"a{j}"] = f"(CASE WHEN nn{j} > 0 THEN s{j} END)"
        elif func == "avg":  # what PostgreSQL's avg computes: the sum ÷ the count
            out[f"a{j}"] = f"(CASE WHEN nn{j} > 0 THEN s{j} / nn{j}::numeric END)"
        else:
            out[f"a{j}"] = f"m{j}"
    return out


def over_slots(text: str, agg: AggPlan) -> str:
    """An output or HAVING written over `SLOT` references, over the aggregate's columns."""
    slots = slot_expressions(agg)

    def mapped(alias: str, column: str) -> tuple[str, ...]:
        if alias != SLOT or column not in slots:
            raise ValueError(f"{alias}.{column} is not a slot of the aggregate")
        return (f"__slot_{column}",)

    out = rewrite_columns(text, mapped)
    for name, expr in sorted(slots.items(), key=lambda kv: -len(kv[0])):
        out = out.replace(f"__slot_{name}", expr)
    return out
