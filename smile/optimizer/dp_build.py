"""A plan as vertices and edges (paper §4–6): the DP's winner rebuilt from its back-pointers,
or any point of the DP's space (`build_plan`: a join order, a machine and a way for each join),
by the same steps the DP priced (`join_step.Step`).

Every vertex is named by its contents (`expr.Expr`), never by the sharing, so identical
computations of different sharings come out as equal vertices; a state D holds already is
D's own route there (`dp_context.Reuse`).

Must not: price or choose anything; touch a database.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Literal

from smile.costmodel.prices import Prices
from smile.optimizer.dp_context import Context
from smile.optimizer.dp_state import State
from smile.optimizer.expr import Expr
from smile.optimizer.join_step import Step, step
from smile.optimizer.plan import CopyDelta, DeltaToRel, Edge, Join, Plan, Union, Vertex, join_tuples

if TYPE_CHECKING:
    from smile.costmodel.time_model import TimeModel
    from smile.optimizer.catalog import CatalogSnapshot
    from smile.optimizer.sharing import Sharing, SpjQuery


def build_plan(catalog: CatalogSnapshot, query: SpjQuery, sharing: Sharing, model: TimeModel,
               order: tuple[str, ...], machines: tuple[str, ...], cases: tuple[str, ...],
               prices: Prices | None = None) -> Plan:
    """The plan of one point of the DP's space: join `order` left-deep, result i on
    `machines[i]` by way `cases[i]` ('a' in place, 'b' copy the left side, 'c' copy the right,
    'd' both); for one relation, its MV on `machines[0]`."""
    ctx = Context(catalog, query, sharing, model, prices or Prices())
    if len(order) == 1:
        return Builder(ctx).build(ctx.index[machines[0]])
    states: dict[frozenset[str], dict[int, State]] = {}
    prev = ctx.index[ctx.est.alias[order[0]].home]
    for i in range(1, len(order)):
        left = frozenset(order[:i])
        mi = ctx.index[machines[i - 1]]
        states[left | {order[i]}] = {mi: State(0.0, 0.0, 0.0, 0.0, (), (
            left, prev, order[i], cases[i - 1]))}
        prev = mi
    return Builder(ctx, states).build(prev)


class Builder:
    """Rebuild a plan as vertices and edges, following the DP's back-pointers and the same
    steps the DP priced. Every vertex is named by its contents (`Expr`), never by the sharing,
    so identical computations of different sharings come out as equal vertices."""

    def __init__(self, ctx: Context,
                 states: dict[frozenset[str], dict[int, State]] | None = None) -> None:
        self.ctx = ctx
        self.edges: dict[Edge, None] = {}
        self.s = ctx.sharing.name
        self._states = states or {}

    def add(self, e: Edge) -> None:
        self.edges[e] = None

    def build(self, mi: int) -> Plan:
        ctx = self.ctx
        aliases = ctx.query.aliases
        if len(aliases) == 1:
            mv = self._single(aliases[0], ctx.machines[mi])
        else:
            _, _, mv = self._set(ctx.all, mi)
        sources = tuple(sorted({Vertex("delta", Expr.base(ctx.est.alias[a].relation.name),
                                       ctx.est.alias[a].home) for a in aliases}))
        outputs = tuple((p.name, p.sql) for p in ctx.query.projections)
        return Plan(self.s, tuple(self.edges), mv, sources, outputs)

    def content(self, aliases: frozenset[str] | list[str] | tuple[str, ...]) -> Expr:
        return self.ctx.content(aliases)

    def _base(self, a: str) -> tuple[Vertex, Vertex]:
        st = self.ctx.est.alias[a]
        rel = st.relation
        d = Vertex("delta", Expr.base(rel.name), rel.machine)
        r = Vertex("relation", Expr.base(rel.name), rel.machine)
        self.add(DeltaToRel(d, r, rel.update_rate, rel.rows * rel.width))
        return d, r

    def _single(self, a: str, machine: str) -> Vertex:
        st = self.ctx.est.alias[a]
        dmv, _ = self._base_copy(a, machine, "delta")
        mv = Vertex("relation", dmv.expr, machine)
        self.add(DeltaToRel(dmv, mv, st.rate, st.rows * st.width))
        return mv

    def _filters(self, a: str) -> tuple[str, ...]:
        return tuple(s.sql for s in self.ctx.query.selections_of(a))

    def _base_copy(self, a: str, machine: str, need: str) -> tuple[Vertex, Vertex | None]:
        """Base alias `a`'s delta (and, for a 'relation' need, a relation kept from it) at
        `machine`: filtered and projected on the way from the base delta."""
        st = self.ctx.est.alias[a]
        d, _ = self._base(a)
        dc = Vertex("delta", self.content([a]), machine)
        self.add(CopyDelta(d, dc, st.rate, st.width, self._filters(a), st.needed))
        if need == "delta":
            return dc, None
        rc = Vertex("relation", dc.expr, machine)
        self.add(DeltaToRel(dc, rc, st.rate, st.rows * st.width))
        return dc, rc

    def _set(self, R: frozenset[str], m: int) -> tuple[list[str], Vertex, Vertex]:
        """Build <R, m> of a join sequence; returns (join order, ΔR vertex, R vertex)."""
        ctx = self.ctx
        if len(R) == 1:  # where a sequence starts: the base relation at home, as captured
            (a,) = R
            return [a], *self._base(a)
        if R not in self._states or m not in self._states[R]:
            raise AssertionError("unreachable: the DP keeps every state it points back to")
        if self._states[R][m].reused:  # D's own vertices, by D's own route
            assert ctx.reuse is not None
            d, r = ctx.result(R, m)
            for e in ctx.reuse.d.feeding((d, r)):
                self.add(e)
            return sorted(R), d, r
        back = self._states[R][m].back
        assert back is not None
        left, mj, a, case = back
        order, dL, rL = self._set(left, mj)
        s = step(mj, ctx.index[ctx.est.alias[a].home], m, case)
        assert s is not None, "the DP only points back to real steps"
        return self._join(order, left, dL, rL, a, s)

    def _join(self, order: list[str], left: frozenset[str], dL: Vertex, rL: Vertex, a: str,
              s: Step) -> tuple[list[str], Vertex, Vertex]:
        ctx, est = self.ctx, self.ctx.est
        M = ctx.machines
        ls = est.stats(left)
        out = est.stats(left | {a})
        p1_rate, p2_rate = est.driving_left(left, a), est.driving_right(left, a)
        L_expr = self.content(order)
        J_expr = self.content([*order, a])
        base_left = len(order) == 1
        # each side where the step needs it: (delta, relation or None, still raw?)
        lefts: dict[int, tuple[Vertex, Vertex | None, bool]] = {s.mj: (dL, rL, base_left)}
        for m, need in s.left_needs().items():
            if base_left:
                dc, rc = self._base_copy(order[0], M[m], need)
            else:
                dc = Vertex("delta", L_expr, M[m])
                self.add(CopyDelta(dL, dc, ls.rate, ls.width))
                rc = None
                if need == "relation":
                    rc = Vertex("relation", L_expr, M[m])
                    self.add(DeltaToRel(dc, rc, ls.rate, est.stored_rows(left) * ls.width))
            lefts[m] = (dc, rc, False)
        da, ra = self._base(a)
        rights: dict[int, tuple[Vertex, Vertex | None, bool]] = {s.mk: (da, ra, True)}
        for m, need in s.right_needs().items():
            dc, rc = self._base_copy(a, M[m], need)
            rights[m] = (dc, rc, False)
        preds = tuple(
            (j.left.sql(), j.right.sql()) if j.left.alias in left else (j.right.sql(), j.left.sql())
            for j in ctx.query.joins_between(left, a))
        lhs = tuple(sorted(order))
        left_filters = tuple(f for x in order for f in self._filters(x))
        a_filters = self._filters(a)
        partials = []
        sides: tuple[tuple[int, Literal["left", "right"], float, float], ...] = (
            (s.j1, "left", p1_rate, ls.rate), (s.j2, "right", p2_rate, est.alias[a].rate))
        for where, driving, rate, rows_in in sides:
            engine = ctx.model.join(join_tuples(rate, rows_in))[1]
            p = Vertex("partial", replace(J_expr, left=lhs, driving=driving), M[where])
            (dl, rl, raw_l), (dr, rr, raw_r) = lefts[where], rights[where]
            if driving == "left":  # ΔL drives; a (and Δa) compensate
                assert rr is not None
                self.add(Join(dl, rr, dr, p, driving, preds,
                              (left_filters if raw_l else ()) + (a_filters if raw_r else ()),
                              rate, engine, rows_in))  # type: ignore[arg-type]
            else:  # Δa drives; L (and ΔL) compensate
                assert rl is not None
                self.add(Join(dr, rl, dl, p, driving, preds,
                              (a_filters if raw_r else ()) + (left_filters if raw_l else ()),
                              rate, engine, rows_in))  # type: ignore[arg-type]
            if where != s.mi:
                moved = p.at(M[s.mi])
                self.add(CopyDelta(p, moved, rate, out.width))
                p = moved
            partials.append(p)
        dJ = Vertex("delta", J_expr, M[s.mi])
        self.add(Union(partials[0], partials[1], dJ, out.rate))
        J = Vertex("relation", J_expr, M[s.mi])  # the MV itself when R is the whole join
        self.add(DeltaToRel(dJ, J, out.rate, est.stored_rows(left | {a}) * out.width))
        return [*order, a], dJ, J
