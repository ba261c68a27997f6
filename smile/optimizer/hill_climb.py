"""Greedy hill-climbing over the global plan D (paper §7.2): apply the best feasible plumbing
(`plumbing.candidates`), check that COST(D) really fell, repeat until none applies.

Each round finds the candidates anew, best benefit first, and tries them in turn: one that
conflicts with one taken this round, that is not feasible (a machine over its bound, a
sharing over its SLA) or after which D re-assessed does not cost less by `EPS`, no machine
it loads more is over its bound and no sharing is late, is passed over.

With `Context.fast` it finds the same plumbings faster:
- a candidate is first judged on what it touches alone (`reassess.Reassessor`), and D is
  re-assessed whole only when that judgement keeps it, or cannot tell;
- a climb that ends with nothing to take leaves a mark with its D (`LOCAL_OPTIMUM`). Climbing
  a D made from a marked one by adding sharings (`since`: admission merges a plan into it),
  the first round looks only at the vertices whose candidates may have changed
  (`plumbing.changed`); each later round at what the round before changed, at the
  candidates it passed over because they conflicted with one it took or — when it took
  several — before its last take (judged on a D it changed since), and, when it freed a
  machine or brought a late sharing back within its SLA, at every destination passed over
  since (`_Watch`); a candidate refused on the very D of a round is not tried again
  (`_refused`). Every other
  candidate is what it was when it was last passed over, or dearer: adding a sharing, or a
  plumbing elsewhere, leaves what it removes, what its new edges cost and what the edges
  feeding its sources cost more as they were, except where `plumbing.changed` says —
  including the over-provisioning the paper charges an edge by the most demanding sharing it
  serves (`load.provision_of`), which couples sharings that share an edge. One coupling is
  left out: a vertex that gains a sharing charges a plumbing that reads it, and serves more
  demanding sharings, `a·price/P·Δprovisioning` more (~1e-11 $/s an edge on Table 1); the
  tests compare the climbs with the reference on random workloads and on Table 1's copies.
  With shared pushes (a period moves every other) every round looks at all of D.

Must not: touch a database; change the D it is handed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from smile.costmodel.formulas import LAZINESS
from smile.errors import PlanError
from smile.optimizer.load import assess, raised
from smile.optimizer.plumbing import apply, candidates, changed, conflict, feasible
from smile.optimizer.reassess import EPS, Reassessor
from smile.optimizer.soundness import edge_problem

if TYPE_CHECKING:
    from smile.optimizer.global_plan import GlobalPlan
    from smile.optimizer.load import Assessment
    from smile.optimizer.plan import Vertex
    from smile.optimizer.plumbing import Context, Plumbing

LOCAL_OPTIMUM = "local optimum"
"""What `GlobalPlan.remember` keeps, under the catalog snapshot, model and prices, with a D a
climb left with no plumbing to take: the destinations whose candidates it passed over."""


@dataclass
class Climb:
    plan: GlobalPlan
    applied: list[Plumbing]
    trace: list[tuple[int, int, float]]
    """(vertices, edges, COST) before the first and after each applied plumbing."""
    seconds: float
    candidates_seen: int


def hill_climb(plan: GlobalPlan, ctx: Context, rounds: int | None = None,
               deadline_s: float | None = None, since: GlobalPlan | None = None) -> Climb:
    """Greedy hill-climbing: apply the best feasible plumbing, re-assess, repeat; candidates
    are found anew each round (up to `rounds`), so a plumbing can build on the last one.
    `since`: a D that `plan` is, with sharings added (see the module's docstring)."""
    started = time.perf_counter()
    a = assess(plan, ctx.catalog, ctx.model, ctx.prices)
    trace = [(len(plan.vertices), len(plan.edges), a.total)]
    applied: list[Plumbing] = []
    seen = 0
    n = 0
    watch = _Watch.since(since, plan, ctx, a)
    stop = None if deadline_s is None else started + deadline_s
    while rounds is None or n < rounds:
        n += 1
        found = candidates(plan, ctx, a, watch.only)
        seen += len(found)
        before, a0 = plan, a
        plan, a, taken, passed = _climb_once(plan, a, found, ctx, stop, trace)
        applied += taken
        if passed is None:  # stopped by the deadline
            break
        watch = watch.after(before, a0, plan, a, ctx, passed)
        if not taken:
            if ctx.fast:
                plan.remember(LOCAL_OPTIMUM, (ctx.catalog, ctx.model, ctx.prices),
                              frozenset(watch.rejected))
            break
    return Climb(plan, applied, trace, time.perf_counter() - started, seen)


@dataclass
class _Passed:
    """The destinations of the candidates a round passed over: before the last one it took
    (judged on a D it has changed since), after it, or because they conflicted with one; and
    how many it took."""

    before: set[Vertex]
    after: set[Vertex]
    conflicted: set[Vertex]
    takes: int = 0


@dataclass(frozen=True)
class _Watch:
    """Where the next round looks (`only`; None: all of D), and the destinations whose
    candidates were passed over on the D they were last judged on (`rejected`): a change that
    frees a machine or brings a late sharing back within its SLA may let them in."""

    only: set[Vertex] | None
    rejected: set[Vertex]

    @staticmethod
    def since(since: GlobalPlan | None, plan: GlobalPlan, ctx: Context,
              a: Assessment) -> _Watch:
        """The first round: what may have changed since `since` (`plumbing.changed`), if a
        climb left it at a local optimum under this catalog snapshot, model and prices and
        pushes are not shared; else all of D. Adding sharings frees no machine."""
        key = (ctx.catalog, ctx.model, ctx.prices)
        mark = since.recalled(LOCAL_OPTIMUM, key) if since is not None else None
        if mark is None or since is None or not ctx.fast or a.rides is not None:
            return _Watch(None, set())
        only = changed(since, assess(since, *key), plan, a, ctx.model)
        return _Watch(only, set(mark) & plan.incoming.keys() if only is not None else set())

    def after(self, before: GlobalPlan, a0: Assessment, plan: GlobalPlan, a: Assessment,
              ctx: Context, passed: _Passed) -> _Watch:
        """The round after one that looked at `self.only` on `before` and left `plan`."""
        looked = before.incoming.keys() if self.only is None else self.only
        rejected = (self.rejected - looked) | passed.before | passed.after | passed.conflicted
        rejected &= plan.incoming.keys()
        if not ctx.fast or a.rides is not None or plan is before:
            return _Watch(None, rejected)
        only = changed(before, a0, plan, a, ctx.model)
        if only is None:
            return _Watch(None, rejected)
        # what was passed over before the one take was judged on `before`: where the take
        # changed nothing for it (not in `only`), its verdict stands
        only |= passed.conflicted | (passed.before if passed.takes > 1 else set())
        if _freed(a0, a):
            only |= rejected
        return _Watch(only, rejected)


def _freed(a0: Assessment, a: Assessment) -> bool:
    """Whether some machine carries less under `a` than under `a0`, or the late sharings
    differ: a candidate refused for either may now be taken."""
    for now, then in ((a.machine_load, a0.machine_load), (a.machine_disk_gb, a0.machine_disk_gb),
                      (a.machine_net_mb_s, a0.machine_net_mb_s)):
        if any(x < then.get(m, 0.0) for m, x in now.items()):
            return True
    return set(a.late()) != set(a0.late())


def _climb_once(plan: GlobalPlan, a: Assessment, found: list[Plumbing], ctx: Context,
                stop: float | None, trace: list[tuple[int, int, float]]
                ) -> tuple[GlobalPlan, Assessment, list[Plumbing], _Passed | None]:
    """One round: each candidate in turn that conflicts with none taken, is feasible and
    makes COST(D) fall is taken (and D re-assessed). Also what it passed over (None: the
    deadline stopped the round)."""
    taken: list[Plumbing] = []
    passed = _Passed(set(), set(), set())
    arrive = plan.arrivals(ctx.model)
    judge = _reassessor(plan, a, ctx)
    refused = _refused(plan, ctx)
    for p in found:
        if stop is not None and time.perf_counter() > stop:
            return plan, a, taken, None
        if any(conflict(p, q) for q in taken):
            passed.conflicted.add(p.dst)
            continue
        if p in refused or not feasible(plan, a, p, ctx.model, arrive) or \
                (judge is not None and _sound(plan, p) and judge.judge(p) is False):
            passed.after.add(p.dst)
            refused.add(p)
            continue
        nxt = apply(plan, p)
        wrong = nxt.problems()
        if wrong:  # never reached with sound candidates; refuse rather than run it
            raise PlanError(f"{p.describe()} would make the plan unsound: {wrong[0]}")
        b = assess(nxt, ctx.catalog, ctx.model, ctx.prices)
        if b.total >= a.total - EPS or raised(a, b) or b.late():
            passed.after.add(p.dst)
            refused.add(p)
            continue
        plan, a = nxt, b
        arrive = plan.arrivals(ctx.model)
        judge = _reassessor(plan, a, ctx)
        refused = _refused(plan, ctx)
        taken.append(p)
        passed.takes += 1
        passed.before.update(passed.after)
        passed.after.clear()
        trace.append((len(plan.vertices), len(plan.edges), a.total))
    return plan, a, taken, passed


def _refused(plan: GlobalPlan, ctx: Context) -> set[Plumbing]:
    """The candidates found infeasible, or not making COST(D) fall, on `plan` itself (kept
    with it: the next round, on the same D, need not try them again); none without
    `ctx.fast`."""
    if not ctx.fast:
        return set()
    refused: set[Plumbing] = plan.remembered(
        "refused", (ctx.catalog, ctx.model, ctx.prices), set)
    return refused


def _reassessor(plan: GlobalPlan, a: Assessment, ctx: Context) -> Reassessor | None:
    return Reassessor(plan, a, ctx.catalog, ctx.model, ctx.prices, LAZINESS) \
        if ctx.fast else None


def _sound(plan: GlobalPlan, p: Plumbing) -> bool:
    """Whether D with `p` done would be sound (`GlobalPlan.problems`) because D is and its
    new edges are: else it is applied and its problem raised, as without `ctx.fast`."""
    return not plan.remembered("problems", (), plan.problems) and \
        all(edge_problem(e) is None for e in p.new_edges)
