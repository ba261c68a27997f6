"""The states of one alias set found with bounds (`dp.optimize(..., fast=True)`): the same
states as `dp.reference_into`, found trying far fewer candidates in full.

The reference tries every step `<L, mj> ⋈ a → <R, mi>` in a fixed order and keeps at `mi` the
first one (in that order) of the least score among those that fit. So does this search, with
the candidates grouped by left state (`_Group`: one `<R−a, mj>` and the base alias `a`) and
each judged first by figures that need neither a ledger nor an object:

- its critical path exactly: the arrival at ΔR (`dp_state.arrive`) is a max and sums of the
  step's edge times, and for one left state the max over the inputs takes one of four values
  per partial join, which depend only on which inputs are on that join's machine (`arrivals`);
  all result machines other than L's and a's give the same steps the same times;
- its ρ exactly: the left state's (and a's), or the step's busiest edge (`Space.step_prices`);
- its resCost as the left state's plus the step's own, priced once per query
  (`Space.step_prices`): the reference's terms added in another order, so equal up to rounding.

Groups are tried best bound first, so the best states are found early; a group whose bound at
a machine (the least critical path and resCost of its steps there) is worse than the state
kept there is not looked at for it, and a step so judged worse is skipped — by more than
`MARGIN` where the resCost decides. The steps left are scored and kept as the reference does
(`dp_state.quick`, `extend`), ties going to the earlier in the reference's order, so the states,
their figures and the plans built from them are the reference's, bit for bit.

Must not: keep a state the reference would not, or figures rounded otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from smile.costmodel.formulas import late_penalty_per_s, plan_cost
from smile.optimizer.dp_state import extend, quick, score_of
from smile.optimizer.join_step import steps_from

if TYPE_CHECKING:
    from collections.abc import Iterator

    from smile.optimizer.dp_context import Context
    from smile.optimizer.dp_space import StepPrices
    from smile.optimizer.dp_state import Metric, Scores, State, States
    from smile.optimizer.join_step import Step

MARGIN = 1e-9
"""How much worse than the best a candidate's resCost-led bound must be for it to be skipped:
a resCost summed in another order differs from the reference's by ~1e-16 of itself."""
Shape = tuple[int, bool, int, bool]
"""What a step's critical path depends on besides its left state and its figures: which of
the four arrivals its first partial join has (`arrivals`), whether that partial is copied to
the result's machine, and the same two for the second."""


def joinable(ctx: Context, R: frozenset[str], best: States) -> Iterator[tuple[str, frozenset[str]]]:
    """(a, R − a) for every base alias `a` a state of R can be joined from, in the
    reference's order."""
    for a in sorted(R):
        left = R - {a}
        if left in best and ctx.query.joins_between(left, a):
            yield a, left


@dataclass(frozen=True)
class Steps:
    """The steps from L on `mj` and a on `mk` (`join_step.steps_from`, in order), by shape."""

    steps: tuple[Step, ...]
    shapes: tuple[Shape, ...]
    """The distinct shapes of the steps."""
    shape: tuple[int, ...]
    """Per step, its shape's index in `shapes`."""
    slices: tuple[tuple[int, int], ...]
    """Per result machine, the slice of `steps` that ends there."""
    at: tuple[tuple[int, ...], ...]
    """Per result machine, the indices of its steps' shapes."""


@cache
def steps_by_shape(mj: int, mk: int, machines: int) -> Steps:
    """`Steps` from `mj` and `mk` into any of `machines`."""
    steps = steps_from(mj, mk, machines)
    shapes: dict[Shape, int] = {}
    shape = []
    for s in steps:
        key = (2 * (s.j1 == mj) + (s.j1 == mk), s.j1 != s.mi,
               2 * (s.j2 == mk) + (s.j2 == mj), s.j2 != s.mi)
        shape.append(shapes.setdefault(key, len(shapes)))
    slices, at = [], []
    for mi in range(machines):
        idx = [i for i, s in enumerate(steps) if s.mi == mi]
        slices.append((idx[0], idx[-1] + 1))
        at.append(tuple(shape[i] for i in idx))
    return Steps(steps, tuple(shapes), tuple(shape), tuple(slices), tuple(at))


def arrivals(t: dict[str, float], dl: float, rl: float,
             ra: float) -> tuple[list[float], list[float]]:
    """Before their copies to the result's machine: when Δ(ΔL⋈a) is done, by whether it runs
    on L's machine (×2) and on a's home (×1), and when Δ(L⋈Δa) is done, by whether it runs on
    a's home (×2) and on L's machine (×1) — `dp_state.arrive`'s terms, in its order."""
    copied_l, copied_a = dl + t["cL"], t["ca"]
    j1, j2, da, dL = t["j1"], t["j2"], t["da"], t["dL"]
    first = [max(copied_l, copied_a + da, copied_a) + j1, max(copied_l, ra, 0.0) + j1,
             max(dl, copied_a + da, copied_a) + j1, max(dl, ra, 0.0) + j1]
    second = [max(copied_a, copied_l + dL, copied_l) + j2, max(copied_a, rl, dl) + j2,
              max(0.0, copied_l + dL, copied_l) + j2, max(0.0, rl, dl) + j2]
    return first, second


class _Judge:
    """Scores (`dp_state.score_of`) from a critical path, a resCost and a ρ, and whether a
    score so made from bounds is surely no better than a state's score."""

    def __init__(self, ctx: Context, rate: float, metric: Metric) -> None:
        self.dollar = metric == "dollar"
        self.rate, self.sla = rate, ctx.sharing.staleness_s
        self.per_tuple = ctx.sharing.penalty_per_tuple
        self.penalties: dict[float, float] = {}

    def score(self, cp: float, res: float, rho: float) -> tuple[float, float]:
        if not self.dollar:
            return (cp, res)
        pen = self.penalties.get(rho)
        if pen is None:
            pen = self.penalties[rho] = late_penalty_per_s(self.rate, rho, self.sla,
                                                           self.per_tuple)
        return (plan_cost(res, cp, self.sla, pen), cp)

    def beaten(self, best: tuple[float, float], bound: tuple[float, float]) -> bool:
        """Whether every candidate whose critical path, resCost (up to rounding) and ρ are at
        least those `bound` was made from scores worse than `best` — or the same: it would
        not replace it."""
        if not self.dollar:  # (CP, resCost)
            return bound[0] > best[0] or (bound[0] == best[0]
                                          and bound[1] > best[1] * (1 + MARGIN))
        if math.isinf(best[0]):  # (∞, CP): the critical path decides among those
            return math.isinf(bound[0]) and bound[1] > best[1]
        return bound[0] > best[0] * (1 + MARGIN)


class _Group:
    """The candidates from one left state `<R−a, mj>` joining base alias `a`, with the least
    score any of its steps can have at each result machine (`bounds`)."""

    def __init__(self, ctx: Context, judge: _Judge, order: int, a: str, left: frozenset[str],
                 mj: int, L: State) -> None:
        space = ctx.space
        self.order, self.a, self.left, self.mj, self.L = order, a, left, mj, L
        mk, self.A = space.base(a)
        self.a_new = space.new_relation(left, a)
        self.f = f = space.figures(left, a)
        self.res0 = L.res + (self.A.res if self.a_new else 0.0)
        self.rho0 = max(L.rho, self.A.rho) if self.a_new else L.rho
        self.by = steps_by_shape(mj, mk, len(ctx.machines))
        self.prices: StepPrices = space.step_prices(left, a, mj)
        first, second = arrivals(f.t, L.dl, L.rl, self.A.rl)
        c1, c2, u, dJ = f.t["c1"], f.t["c2"], f.t["u"], f.t["dJ"]
        hang = max(L.hang, L.rl, self.A.rl)
        self.cps = [max(max(first[k1] + c1 if copy1 else first[k1],
                            second[k2] + c2 if copy2 else second[k2]) + u + dJ, hang)
                    for k1, copy1, k2, copy2 in self.by.shapes]
        """Per shape, the critical path of its steps, exactly as `dp_state.quick` makes it."""
        least: dict[tuple[int, ...], float] = {}
        self.bounds: list[tuple[float, float]] = []
        p = self.prices
        for mi, shapes in enumerate(self.by.at):
            cp = least.get(shapes)
            if cp is None:  # all result machines but L's and a's have the same shapes
                cp = least[shapes] = min(self.cps[k] for k in shapes)
            self.bounds.append(judge.score(cp, self.res0 + p.least_res[mi],
                                           max(self.rho0, p.least_rho[mi])))

    def ranked(self, judge: _Judge, mi: int) -> list[tuple[tuple[float, float], int]]:
        """The steps into `mi`, as (the least score each can have, index), best first."""
        start, end = self.by.slices[mi]
        p, cps, shape = self.prices, self.cps, self.by.shape
        return sorted((judge.score(cps[shape[i]], self.res0 + p.res[i], max(self.rho0, p.rho[i])),
                       i) for i in range(start, end))


def bounded_into(ctx: Context, R: frozenset[str], best: States, rate: float,
                 metric: Metric) -> tuple[dict[int, State], Scores]:
    """The states of `R` (`dp.reference_into`'s): at each machine, the left states tried by
    the least score they can lead to anywhere (`_least`), until the state kept there beats
    it; each looked at closer (`_Group`) when its own bound there does not."""
    judge = _Judge(ctx, rate, metric)
    pairs = [(a, left, mj, L) for a, left in joinable(ctx, R, best)
             for mj, L in best[left].items()]
    least = [_least(ctx, judge, *pair) for pair in pairs]
    order = sorted(range(len(pairs)), key=lambda n: (least[n], n))
    groups: dict[int, _Group] = {}
    kept = _Kept(ctx, rate, metric)
    for mi in range(len(ctx.machines)):
        for n in order:
            now = kept.scores.get(mi)
            if now is not None and judge.beaten(now, least[n]):
                break
            g = groups.get(n)
            if g is None:
                g = groups[n] = _Group(ctx, judge, n, *pairs[n])
            if now is not None and judge.beaten(now, g.bounds[mi]):
                continue
            for bound, i in g.ranked(judge, mi):
                now = kept.scores.get(mi)
                if now is not None and judge.beaten(now, bound):
                    break
                kept.consider(g, i)
    return kept.states, kept.scores


def _least(ctx: Context, judge: _Judge, a: str, left: frozenset[str], mj: int,
           L: State) -> tuple[float, float]:
    """The least score any step from `<left, mj>` joining `a` can have, at any machine: both
    partial joins read ΔL, and the union and the result's DeltaToRel follow them."""
    space = ctx.space
    _, A = space.base(a)
    a_new = space.new_relation(left, a)
    t = space.figures(left, a).t
    p = space.step_prices(left, a, mj)
    cp = max(max(L.dl + t["j1"], L.dl + t["j2"]) + t["u"] + t["dJ"], L.hang, L.rl, A.rl)
    res = L.res + (A.res if a_new else 0.0) + p.least
    rho = max(L.rho, A.rho, p.least_rho_all) if a_new else max(L.rho, p.least_rho_all)
    return judge.score(cp, res, rho)


class _Kept:
    """The best state so far at each machine, as the reference keeps it: the least score,
    ties to the earlier candidate in the reference's order ((group, step) index)."""

    def __init__(self, ctx: Context, rate: float, metric: Metric) -> None:
        self.ctx, self.rate, self.metric = ctx, rate, metric
        self.states: dict[int, State] = {}
        self.scores: Scores = {}
        self.index: dict[int, tuple[int, int]] = {}

    def consider(self, g: _Group, i: int) -> None:
        """Step i of group `g`, scored and kept the reference's way (`dp.reference_joins`)."""
        ctx = self.ctx
        s = g.by.steps[i]
        mi, case = s.mi, s.case
        cp, res, rho = quick(ctx, g.L, g.A, g.a_new, s, g.f)
        sc = score_of(ctx, cp, res, rho, self.rate, self.metric)
        at = (g.order, i)
        now = self.scores.get(mi)
        if now is not None and not (sc < now or (sc == now and at < self.index[mi])):
            return
        full = extend(ctx, g.L, g.A, g.a_new, s, g.f, (g.left, g.mj, g.a, case))
        if ctx.fits(full.usage):
            self.scores[mi], self.index[mi] = sc, at
            self.states[mi] = full
