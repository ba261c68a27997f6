"""The DP's states and what one join step does to them (paper §6, Algorithm 1).

A state `<R, m>` keeps the best way found to produce R's relation and delta on machine `m`:
when a push reaches ΔR and R (`dl`, `rl`, for one second of updates), what it costs (resCost
and ρ) and the capacity it uses. A step `<L, mj> ⋈ <a, mk> → <R, mi>` (`join_step.Step`) is
timed in one place (`arrive`) and charged in one place (`costmodel.ledger.charge`):
`quick` scores a candidate without its capacity figures (the search's hot loop), `extend`
makes the state of one that wins, with them.

Must not: search, build plans or touch a database.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from smile.costmodel.formulas import late_penalty_per_s, plan_cost
from smile.costmodel.ledger import charge
from smile.optimizer.plan import join_tuples

if TYPE_CHECKING:
    from smile.optimizer.dp_context import Context
    from smile.optimizer.dp_space import Space
    from smile.optimizer.join_step import Step

Metric = Literal["time", "dollar"]


@dataclass(frozen=True)
class State:
    dl: float  # critical path to ΔR at the state's machine
    rl: float  # ... to R itself
    res: float
    rho: float
    usage: tuple[float, ...]  # 3 per machine: cores, GB, MB/s
    back: tuple[frozenset[str], int, str, str] | None  # (R−a, mj, a, case)
    hang: float = 0.0  # the longest path ending anywhere else in the plan (e.g. at R̂)
    reused: bool = False  # R's delta and relation at the state's machine are D's already

    @property
    def cp(self) -> float:
        return max(self.rl, self.hang)


States = dict[frozenset[str], dict[int, State]]
"""Every state the DP keeps: alias set → machine → best state."""
Scores = dict[int, tuple[float, float]]
"""machine → the score of the best state there so far (`score_of`)."""


@dataclass(frozen=True)
class StepFigures:
    """Per-edge seconds (x = 1 s), loads and sizes of joining `left` with base alias `a`:
    copies of L and a, their relations kept, the two partial joins and their copies to the
    result's machine, the union, the result's DeltaToRel."""

    t: dict[str, float]
    w: dict[str, float]
    nbytes: dict[str, float]


def join_kind(space: Space, tuples: float) -> str:
    return "join_spark" if space.model.join(tuples)[1] == "spark" else "join_pg"


def step_figures(space: Space, left: frozenset[str], a: str) -> StepFigures:
    """The figures of every edge a step joining `left` with `a` may add, wherever it runs."""
    est = space.est
    ls, aa = est.stats(left), est.alias[a]
    out = est.stats(left | {a})
    p1 = est.driving_left(left, a)  # Δ(ΔL ⋈ a)
    p2 = est.driving_right(left, a)  # Δ(L ⋈ Δa)
    kinds = {"cL": ("copy_delta", ls.rate), "dL": ("delta_to_rel", ls.rate),
             "ca": ("copy_delta", aa.rate), "da": ("delta_to_rel", aa.rate),
             # a join is charged the driving rows it reads and the rows it writes
             "j1": (join_kind(space, join_tuples(p1, ls.rate)), join_tuples(p1, ls.rate)),
             "j2": (join_kind(space, join_tuples(p2, aa.rate)), join_tuples(p2, aa.rate)),
             "c1": ("copy_delta", p1), "c2": ("copy_delta", p2),
             "u": ("union", out.rate), "dJ": ("delta_to_rel", out.rate)}
    return StepFigures(
        {k: space.seconds(kind, n) for k, (kind, n) in kinds.items()},
        {k: space.load(kind, n) for k, (kind, n) in kinds.items()},
        # bytes moved / kept, a join's rows with skew counted (as `dp_build` keeps them)
        {"cL": ls.rate * ls.width, "dL": est.stored_rows(left) * ls.width,
         "ca": aa.rate * aa.width, "da": aa.rows * aa.width,
         "c1": p1 * out.width, "c2": p2 * out.width,
         "dJ": est.stored_rows(left | {a}) * out.width})


def arrive(s: Step, t: dict[str, float], dl: float, rl: float, ra: float) -> float:
    """When a push reaches the result's delta ΔR through step `s`, given when it reaches ΔL
    (`dl`), L (`rl`) and a's R̂ (`ra`). Δ(ΔL⋈a) reads ΔL, a and Δa where it runs; Δ(L⋈Δa)
    reads Δa, L and ΔL — each at home, or after its copy (and the DeltaToRel keeping a
    relation from it); each partial is copied to the result's machine and united there."""
    copied_l, copied_a = dl + t["cL"], t["ca"]
    e1 = max(dl if s.j1 == s.mj else copied_l,
             ra if s.j1 == s.mk else copied_a + t["da"],
             0.0 if s.j1 == s.mk else copied_a) + t["j1"]
    e2 = max(0.0 if s.j2 == s.mk else copied_a,
             rl if s.j2 == s.mj else copied_l + t["dL"],
             dl if s.j2 == s.mj else copied_l) + t["j2"]
    if s.j1 != s.mi:
        e1 += t["c1"]
    if s.j2 != s.mi:
        e2 += t["c2"]
    return max(e1, e2) + t["u"]


def score_of(ctx: Context, cp: float, res: float, rho: float, rate: float,
             metric: Metric) -> tuple[float, float]:
    """COSTCALC: (CP, resCost) for DPT, (COST, CP) for DPD."""
    if metric == "time":
        return (cp, res)
    staleness = ctx.sharing.staleness_s
    pen = late_penalty_per_s(rate, rho, staleness, ctx.sharing.penalty_per_tuple)
    return (plan_cost(res, cp, staleness, pen), cp)


def score(ctx: Context, s: State, rate: float, metric: Metric) -> tuple[float, float]:
    return score_of(ctx, s.cp, s.res, s.rho, rate, metric)


def extend(ctx: Context, L: State, A: State, a_new: bool, s: Step, f: StepFigures,
           back: tuple[frozenset[str], int, str, str] | None = None) -> State:
    """`<L, mj> ⋈ <a, mk> → <R, mi>` by step `s`, with its capacity figures (and `back`, the
    way back to L). `A` is base alias a's own state (its R̂'s upkeep), counted unless L
    already holds the same relation (a self-join shares ΔR and R̂)."""
    usage = [x + y for x, y in zip(L.usage, A.usage, strict=True)] if a_new else list(L.usage)
    res, rho = charge(s.charges, f.t, f.w, f.nbytes, ctx.cpu_price, ctx.net_price,
                      ctx.store_price, L.res + (A.res if a_new else 0.0),
                      max(L.rho, A.rho) if a_new else L.rho, usage)
    d_new = arrive(s, f.t, L.dl, L.rl, A.rl)
    return State(d_new, d_new + f.t["dJ"], res, rho, tuple(usage), back,
                 max(L.hang, L.rl, A.rl))


def quick(ctx: Context, L: State, A: State, a_new: bool, s: Step,
          f: StepFigures) -> tuple[float, float, float]:
    """(CP, resCost, ρ) of `extend`'s result, without its capacity figures or objects: the
    DP's inner loop scores every candidate this way, and `extend`s only those that win."""
    res, rho = charge(s.charges, f.t, f.w, f.nbytes, ctx.cpu_price, ctx.net_price,
                      ctx.store_price, L.res + (A.res if a_new else 0.0),
                      max(L.rho, A.rho) if a_new else L.rho, None)
    rl = arrive(s, f.t, L.dl, L.rl, A.rl) + f.t["dJ"]
    return max(rl, L.hang, L.rl, A.rl), res, rho
