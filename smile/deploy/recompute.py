"""The physical side of the recompute path (`optimizer.recompute`): a vertex's Recompute edge
as the operator's spec — its inputs' tables, TS keys, deltas, columns and selections in
physical names — and its run, or a delta's Skip with the readers it must find at `t`, or a
relation left stale.

A Recompute that reads the parts' bases (`from_bases`: an aggregate, an outer join, a copy of
an intermediate) is the deploy's own fill (`install.fill_at`), in one transaction with TS(v).

Must not: decide which path a push takes (the executor does).
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from psycopg import sql

from smile.deploy.install import base_vertex, fill_at, mirror_key
from smile.deploy.physical import column_name, column_ref, physical_vertex
from smile.errors import AgentError
from smile.operators import vertex_ts
from smile.operators.recompute import (
    Input,
    Recomputed,
    RecomputeSpec,
    Skipped,
    begin_recompute,
    hold_as_of,
    mark_stale,
    recompute,
    skip,
)
from smile.operators.rewrite import rewrite_columns
from smile.optimizer.plan import Aggregate, CopyDelta, DeltaToRel, Vertex
from smile.optimizer.recompute import Recompute, readers, recomputes

if TYPE_CHECKING:
    from datetime import datetime

    import psycopg

    from smile.deploy.physical import PhysicalPlan


def _refs(text: str) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()

    def note(a: str, c: str) -> tuple[str, ...]:
        found.add((a, c))
        return (a, c)

    rewrite_columns(text, note)
    return found


def _named(text: str) -> str:
    """A predicate over alias-qualified columns, over the recomputation's names."""
    return rewrite_columns(text, lambda a, c: (column_name(a, c),))


def _alone(r: Recompute, aliases: tuple[str, ...]) -> list[str]:
    """The filters that read only these aliases' columns (pushed into that input's read)."""
    return [f for f in r.filters if {a for a, _ in _refs(f)} <= set(aliases)]


def _input(phys: PhysicalPlan, r: Recompute, s: Vertex, aliases: tuple[str, ...],
           needed: set[tuple[str, str]]) -> Input:
    pv = phys.vertices.get(s) or physical_vertex(s, phys.schemas)
    if pv.base:
        (alias,) = aliases
        delta = physical_vertex(Vertex("delta", s.expr, s.machine), phys.schemas)
        own = _alone(r, aliases)
        dst = [c for (a, c), _ in phys.vertices[r.dst].columns if a == alias]
        read = needed | {ref for f in own for ref in _refs(f)}  # as_of keeps what they read
        cols = tuple([*dst, *(c for (_, c), _ in pv.columns
                              if (alias, c) in read and c not in dst)])
        return Input(s.machine, pv.table, pv.ts_key, delta.table, delta.ts_key, cols,
                     tuple(column_name(alias, c) for c in cols),
                     tuple(phys.column_type(r.dst, (alias, c)) for c in cols),
                     " AND ".join(f"({rewrite_columns(f, lambda a, c: (c,))})" for f in own),
                     rolls_forward=True, stored=(delta.ts_key,))
    feed = phys.incoming(s)
    if not isinstance(feed, DeltaToRel):
        raise AgentError(f"{s.label} cannot be read as of a timestamp: no delta keeps it")
    delta = phys.vertices[feed.src]
    return Input(s.machine, pv.table, pv.ts_key, delta.table, delta.ts_key,
                 tuple(pv.names), tuple(pv.names),
                 tuple(phys.column_type(s, c) for c, _ in pv.columns),
                 stored=tuple(phys.vertices[d].ts_key for d in phys.stored(feed.src)))


def recompute_spec(phys: PhysicalPlan, r: Recompute) -> RecomputeSpec:
    """The operator's spec of a Recompute that reads relations (not `from_bases`): a filter
    that reads one base input only is applied where that input is read."""
    dst = phys.vertices[r.dst]
    pushed = {f for s, aliases in zip(r.inputs, r.aliases, strict=True)
              if s.base for f in _alone(r, aliases)}
    kept = [f for f in r.filters if f not in pushed]
    needed = {c for c, _ in dst.columns}
    for text in kept:
        needed |= _refs(text)
    needed |= {column_ref(x) for pair in r.predicates for x in pair}
    inputs = tuple(_input(phys, r, s, aliases, needed)
                   for s, aliases in zip(r.inputs, r.aliases, strict=True))
    return RecomputeSpec(
        r.dst.machine, dst.table, dst.ts_key, tuple(dst.names), inputs,
        tuple((column_name(*column_ref(a)), column_name(*column_ref(b))) for a, b in r.predicates),
        tuple(_named(f) for f in kept))


def run_recompute(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan, v: Vertex,
                  t: datetime) -> Recomputed:
    """Recompute `v` at `t` (its Recompute edge in the plan)."""
    r = recomputes(phys.plan).get(v)
    if r is None:
        raise AgentError(f"{v.label} cannot be recomputed")
    if not r.from_bases:
        return recompute(conns, recompute_spec(phys, r), t)
    conn, pv = conns[v.machine], phys.vertices[v]
    with conn.transaction(), ExitStack() as held:
        have, to = begin_recompute(conn, pv.ts_key, t)
        if to is None:
            return Recomputed(have, have, 0, 0)
        t = to
        for relation in sorted({p.relation for p in v.expr.parts}):  # its bases, held still
            home = base_vertex(phys, relation, "relation")
            at = conns[home.vertex.machine]
            held.enter_context(at.transaction())
            hold_as_of(at, home.ts_key, [base_vertex(phys, relation, "delta").ts_key], t)
        if not isinstance(phys.incoming(v), Aggregate):  # an aggregate's fill empties it
            conn.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(*pv.table)))
        fill_at(conns, phys, pv, t)
        vertex_ts.advance(conn, pv.ts_key, t)
        row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
            sql.Identifier(*pv.table))).fetchone()
        return Recomputed(have, t, 0, int(row[0]) if row else 0)


def recompute_stale(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan,
                    targets: list[Vertex]) -> list[Vertex]:
    """Recompute, each at its own TS and sources first, every relation `targets` read (and
    they themselves) that is stale — a vertex a new sharing takes as its MV must be whole
    before its view shows it; returns them."""
    done: list[Vertex] = []
    todo, rec = phys.plan.advanced_by(targets), recomputes(phys.plan)
    wanted = [v for v in phys.order() if not v.is_delta and v in rec and v in todo]
    # one read per machine; a crash's emptied relations count, and the recompute settles them
    stale = {m: vertex_ts.read_stale(conns[m]) for m in sorted({v.machine for v in wanted})}
    for v in wanted:
        at = stale[v.machine].get(phys.vertices[v].ts_key)
        if at is not None:
            run_recompute(conns, phys, v, at)
            done.append(v)
    return done


def run_stale(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan, v: Vertex,
              t: datetime) -> Skipped:
    """Leave relation `v` stale at `t` (`operators.recompute.mark_stale`)."""
    if v.is_delta or v not in recomputes(phys.plan):
        raise AgentError(f"{v.label} cannot be left stale: only a relation that can be "
                         "recomputed can")
    pv = phys.vertices[v]
    return mark_stale(conns[v.machine], pv.ts_key, pv.table, t)


def run_skip(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan, v: Vertex,
             t: datetime) -> Skipped:
    """Move delta `v`'s TS to `t` with no row, once its readers are all there. A copy's
    mirror on its source machine goes with it, committed there as the copy's is."""
    if not v.is_delta:
        raise AgentError(f"{v.label} is not a delta: only a delta can be skipped")
    keys = [(conns[u.machine], phys.vertices[u].ts_key) for u in sorted(readers(phys.plan, v))]
    feed = phys.incoming(v)
    remote = isinstance(feed, CopyDelta) and feed.src.machine != v.machine
    # a copy's source forgets rows once the mirror moves: its TS must be durable first
    done = skip(conns[v.machine], phys.vertices[v].ts_key, t, keys, durable=remote,
                stored=[phys.vertices[s].ts_key for s in phys.stored(v)])
    if remote and isinstance(feed, CopyDelta):
        here = conns[feed.src.machine]
        with here.transaction():
            vertex_ts.raise_to(here, [mirror_key(v.label)], done.to_ts)
    return done
