"""The exact optimum over a set of candidate plumbings, with PuLP and CBC
(docs/design/semantics.md §8): the reference that measures how far greedy hill-climbing
lands from the best choice among the *same* candidates, benefits, times and conflicts.

- One binary x_p per candidate; maximise Σ benefit_p · x_p.
- At most one candidate re-routes a given DST; two conflicting candidates (`plumbing.conflict`:
  one removes what the other reads or re-routes, their removals overlap, or they add the same
  vertex) are not both taken.
- Capacity: each machine's load now plus Σ Δload_p · x_p stays within its bound.
- Critical paths as linear constraints: an arrival time a_v ≥ 0 per vertex; a_v ≥ a_u + t_e
  for every edge of D, relaxed by M when a chosen candidate removes it; a_v ≥ a_u + t_e −
  M(1 − x_p) for an edge candidate p adds; a_MV ≤ SLA for every sharing. Edge times are
  positive, so a choice that would close a cycle is infeasible too.

Must not: touch a database; CBC runs as a local process on the model PuLP writes.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pulp

from smile.optimizer.load import assess
from smile.optimizer.plan import edge_seconds
from smile.optimizer.plumbing import apply, conflict

if TYPE_CHECKING:
    from smile.optimizer.global_plan import GlobalPlan
    from smile.optimizer.load import Assessment
    from smile.optimizer.plan import Edge, Vertex
    from smile.optimizer.plumbing import Context, Plumbing


@dataclass(frozen=True)
class Exact:
    chosen: tuple[Plumbing, ...]
    objective: float
    """Σ benefit of the chosen candidates, $/s."""
    optimal: bool
    """CBC proved optimality within the time limit."""
    status: str
    seconds: float
    plan: GlobalPlan
    """D with the chosen plumbings applied."""


def solve(plan: GlobalPlan, ctx: Context, cands: list[Plumbing],
          time_limit_s: float = 60.0) -> Exact:
    started = time.perf_counter()
    a = assess(plan, ctx.catalog, ctx.model, ctx.prices)
    prob = pulp.LpProblem("plumbing", pulp.LpMaximize)
    x = [prob.add_variable(f"x{i}", cat="Binary") for i in range(len(cands))]
    # benefits are ~1e-7 $/s: scaled so that the largest is 1, or CBC's tolerances see zeros
    scale = max((p.benefit for p in cands), default=1.0) or 1.0
    prob += pulp.lpSum(p.benefit / scale * xi for p, xi in zip(cands, x, strict=True))
    _exclusions(prob, cands, x)
    _capacity(prob, a, cands, x)
    _critical_paths(prob, plan, a, ctx, cands, x)
    with warnings.catch_warnings():  # PuLP 3 warns that PuLP 4 will ship CBC apart
        warnings.simplefilter("ignore", DeprecationWarning)
        prob.solve(pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit_s))
    status = pulp.LpStatus[prob.status]
    chosen = tuple(p for p, xi in zip(cands, x, strict=True) if (xi.value() or 0) > 0.5)
    done = plan
    for p in sorted(chosen, key=lambda p: -p.benefit):
        done = apply(done, p)
    solution = prob.sol_status if hasattr(prob, "sol_status") else prob.status
    optimal = status == "Optimal" and solution == pulp.LpSolutionOptimal
    return Exact(chosen, sum(p.benefit for p in chosen), optimal, status,
                 time.perf_counter() - started, done)


def _exclusions(prob: Any, cands: list[Plumbing], x: list[Any]) -> None:
    """At most one candidate per DST; two conflicting candidates not both."""
    by_dst: dict[Vertex, list[int]] = {}
    for i, p in enumerate(cands):
        by_dst.setdefault(p.dst, []).append(i)
    for idx in by_dst.values():
        if len(idx) > 1:
            prob += pulp.lpSum(x[i] for i in idx) <= 1
    for i in range(len(cands)):
        for j in range(i + 1, len(cands)):
            if cands[i].dst != cands[j].dst and conflict(cands[i], cands[j]):
                prob += x[i] + x[j] <= 1


def _capacity(prob: Any, a: Assessment, cands: list[Plumbing], x: list[Any]) -> None:
    """Each machine's load now plus what the chosen candidates add within its bound (or
    within what it carries now, if that is more)."""
    for m, (bound, _, _) in a.bounds.items():
        terms = [p.dload.get(m, 0.0) * xi for p, xi in zip(cands, x, strict=True)
                 if p.dload.get(m, 0.0)]
        if terms:
            prob += a.machine_load.get(m, 0.0) + pulp.lpSum(terms) <= max(
                bound, a.machine_load.get(m, 0.0))


def _critical_paths(prob: Any, plan: GlobalPlan, a: Assessment, ctx: Context,
                    cands: list[Plumbing], x: list[Any]) -> None:
    """Arrival times: a_v ≥ a_u + t_e for D's edges (relaxed when a chosen candidate removes
    it) and for the candidates' new edges (when chosen); every MV within its SLA."""
    seconds = {e: edge_seconds(e, ctx.model)
               for e in (*plan.edges, *(e for p in cands for e in p.new_edges))}
    big = sum(seconds.values()) + max((s.sla_s for s in plan.sharings), default=0.0) + 1.0
    names: dict[Vertex, Any] = {}

    def arrival(v: Vertex) -> Any:
        if v not in names:
            names[v] = prob.add_variable(f"a{len(names)}", lowBound=0)
        return names[v]

    removers: dict[Edge, list[int]] = {}
    for i, p in enumerate(cands):
        for e in p.removed_edges:
            removers.setdefault(e, []).append(i)
    for e in plan.edges:
        relax = pulp.lpSum(big * x[i] for i in removers.get(e, ()))
        for u in dict.fromkeys(e.sources):
            prob += arrival(e.dst) >= arrival(u) + seconds[e] - relax
    for p, xi in zip(cands, x, strict=True):
        for e in p.new_edges:
            for u in dict.fromkeys(e.sources):
                prob += arrival(e.dst) >= arrival(u) + seconds[e] - big * (1 - xi)
    for s in plan.sharings:
        prob += arrival(s.mv) <= max(s.sla_s, a.cps[s.name])
