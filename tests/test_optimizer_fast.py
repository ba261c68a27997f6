"""Admission's bounds and caches: each fast path decides and plans as its reference does.

- the bounded DP on a cached space (`dp_bounded`, `dp_space`) keeps the reference DP's plans
  and figures, bit for bit, with capacity to spare or short;
- a query's space is kept between admissions and made anew when what it depends on changes
  (the catalog's statistics, the time model's lines, the prices, the period), not when only
  the capacity used does; D keeps what is made from it (its arrivals, its assessment) for
  equal models and catalog snapshots only, and a D made by adding a sharing knows what its
  parent knew as a D built afresh would;
- plumbing's bound (`plumbing_bound`) never cuts a candidate: what a plumbing removes is
  within what its destination can remove, and the candidates found are the reference's;
- the partial re-assessment of a plumbing (`reassess`) gives D re-assessed whole's verdict
  whenever it gives one;
- hill-climbing with all of them, and admissions one after the other into a growing D (the
  first round of each looking only at what the new sharing may have changed), take the
  reference's plumbings and leave the reference's D.

Pure: no database, broker or Spark.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from smile.bench.admission_scale import bench_admission_scale, copies
from smile.costmodel.formulas import LAZINESS
from smile.costmodel.prices import Prices
from smile.costmodel.time_model import Line, TimeModel
from smile.dataset.catalog_model import paper_catalog
from smile.dataset.sharings import table1
from smile.optimizer.admission import PlannerOptions, admit
from smile.optimizer.catalog import CatalogSnapshot, ColumnStats, Machine, RelationStats, Usage
from smile.optimizer.dp import optimize
from smile.optimizer.dp_context import Reuse
from smile.optimizer.dp_space import space_for
from smile.optimizer.global_plan import GlobalPlan
from smile.optimizer.hill_climb import hill_climb
from smile.optimizer.load import Assessment, assess, raised
from smile.optimizer.parse_spj import parse_sharing_sql
from smile.optimizer.plumbing import Context, apply, candidates
from smile.optimizer.plumbing_bound import removable
from smile.optimizer.reassess import EPS, Reassessor
from smile.optimizer.sharing import Sharing
from tests.test_optimizer import instances as queries
from tests.test_plumbing import Instance, _merged
from tests.test_plumbing import instances as workloads

MODEL = TimeModel()
PROPERTY = settings(max_examples=25, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _on_d(inst: Instance, fast: bool = True) -> tuple[Context, GlobalPlan, Assessment]:
    """The instance's sharings merged into D (`test_plumbing._merged`), and its assessment."""
    ctx = Context(inst.catalog, MODEL, Prices(), fast)
    d = _merged(inst, ctx)
    return ctx, d, assess(d, ctx.catalog, ctx.model, ctx.prices)


def _tight(cat: CatalogSnapshot, cores: float) -> CatalogSnapshot:
    """`cat` on machines of `cores` cores, the first of them half busy."""
    small = tuple(replace(m, cpu_cores=cores) for m in cat.machines)
    return replace(cat, machines=small).with_usage(
        {small[0].name: Usage(small[0].cpu_bound / 2)})


# -- the DP ---------------------------------------------------------------------------------------

@PROPERTY
@given(queries(), st.sampled_from([None, 2.0, 0.05]), st.booleans())
def test_the_bounded_dp_keeps_the_reference_plans(inst: tuple[CatalogSnapshot, str, float],
                                                  cores: float | None, pinned: bool) -> None:
    cat, sql, sla = inst
    if cores is not None:
        cat = _tight(cat, cores)
    sharing = Sharing("S", sql, sla, 0.01, "m2" if pinned else None)
    q = parse_sharing_sql(sql, cat)
    for metric in ("time", "dollar"):
        fast = optimize(cat, q, sharing, MODEL, metric)  # type: ignore[arg-type]
        ref = optimize(cat, q, sharing, MODEL, metric, fast=False)  # type: ignore[arg-type]
        assert (fast is None) == (ref is None)
        if fast is not None and ref is not None:
            assert fast.plan == ref.plan
            assert (fast.dp_cp_s, fast.dp_resource_cost) == (ref.dp_cp_s, ref.dp_resource_cost)
            assert fast.metrics == ref.metrics and fast.usage == ref.usage


def test_the_bounded_dp_keeps_the_reference_plans_on_d() -> None:
    """Table 1 on 12 machines, each sharing planned on the D of those before it (`Reuse`)."""
    cat = paper_catalog(machines=12)
    d = GlobalPlan()
    for s in copies(30, 12, 45.0):
        q = parse_sharing_sql(s.sql, cat)
        reuse = Reuse.of(d, MODEL)
        for metric in ("time", "dollar"):
            fast = optimize(cat, q, s, MODEL, metric, reuse=reuse)  # type: ignore[arg-type]
            ref = optimize(cat, q, s, MODEL, metric, reuse=reuse,  # type: ignore[arg-type]
                           fast=False)
            assert fast is not None and ref is not None
            assert (fast.plan, fast.dp_cp_s, fast.added_cost) == (ref.plan, ref.dp_cp_s,
                                                                  ref.added_cost), s.name
        d = admit(d, cat, s, MODEL).plan


def test_a_query_space_is_kept_until_what_it_depends_on_changes() -> None:
    cat = paper_catalog(machines=4)
    q = parse_sharing_sql(table1()[1].sql, cat)
    first = space_for(cat, q, MODEL, Prices(), 30.0)
    busy = cat.with_usage({"m1": Usage(1.0, 2.0, 3.0)})
    assert space_for(busy, q, MODEL, Prices(), 30.0) is first
    assert space_for(replace(cat, busy=(("m2", 0.4),)), q, MODEL, Prices(), 30.0) is first
    grown = replace(cat, relations=tuple(replace(r, rows=r.rows * 2) if r.name == "tweets"
                                         else r for r in cat.relations))
    others = [space_for(grown, q, MODEL, Prices(), 30.0),
              space_for(replace(cat, skews=(("users.uid>tweets.uid", 3.0),)), q, MODEL,
                        Prices(), 30.0),
              space_for(cat, q, MODEL.with_line("union", Line(0.01, 0.0)), Prices(), 30.0),
              space_for(cat, q, MODEL, Prices(network_per_gb=0.02), 30.0),
              space_for(cat, q, MODEL, Prices(), 31.0),
              space_for(cat, parse_sharing_sql(table1()[2].sql, cat), MODEL, Prices(), 30.0)]
    assert all(o is not first for o in others)
    assert others[0].est.stats(frozenset(q.aliases)).rows \
        != first.est.stats(frozenset(q.aliases)).rows


# -- what D keeps -----------------------------------------------------------------------------

def test_d_keeps_its_arrivals_and_assessment_for_equal_models_and_snapshots_only() -> None:
    cat = paper_catalog(machines=6)
    d = GlobalPlan()
    for s in copies(6, 6, 45.0):
        d = admit(d, cat, s, MODEL).plan
    a = assess(d, cat, MODEL)
    assert assess(d, replace(cat), TimeModel()) is a  # equal values: the same assessment
    late = assess(d, replace(cat, delays=(("S1", 5.0),)), MODEL)
    assert late is not a and late.periods["S1"] < a.periods["S1"]
    slower = MODEL.with_line("copy_delta", Line(0.05, 1e-5))
    assert d.arrivals(slower) != d.arrivals(MODEL) and d.arrivals(MODEL) is d.arrivals(MODEL)
    assert assess(d, cat, slower).total != a.total
    fresh = replace(d)  # the same D, nothing kept
    assert assess(fresh, cat, MODEL) == a and fresh.arrivals(slower) == d.arrivals(slower)


def test_a_d_made_by_adding_a_sharing_knows_what_a_fresh_one_would() -> None:
    cat = paper_catalog(machines=12)
    d = GlobalPlan()
    for s in copies(40, 12, 45.0):
        d.arrivals(MODEL, 1.0)
        d.arrivals(MODEL, 0.0)
        decision = admit(d, cat, s, MODEL).decision
        assert decision.chosen is not None
        grown = d.add(decision.chosen.plan, decision.entry())
        fresh = replace(grown)
        assert grown.incoming == fresh.incoming and grown.vertices == fresh.vertices
        assert dict(grown.outgoing) == dict(fresh.outgoing)
        assert grown.shr_masks == fresh.shr_masks and grown.shr == fresh.shr
        for x in (1.0, 0.0):
            assert grown.arrivals(MODEL, x) == fresh.arrivals(MODEL, x)
        at = grown.position
        assert all(at[u] < at[e.dst] for e in grown.edges for u in e.sources)
        d = admit(d, cat, s, MODEL).plan


# -- plumbing -------------------------------------------------------------------------------------

@PROPERTY
@given(workloads())
def test_the_bound_never_cuts_a_candidate(inst: Instance) -> None:
    ctx, d, a = _on_d(inst, fast=False)
    most = removable(d, a)
    found = candidates(d, ctx, a)
    for p in found:
        gone = sum(a.edge_cost[e] for e in p.removed_edges)
        assert gone <= most[p.dst] * (1 + 1e-12), p.describe()
    fast = candidates(d, replace(ctx, fast=True), a)
    assert [(p.describe(), p.benefit) for p in fast] == [(p.describe(), p.benefit)
                                                          for p in found]


@PROPERTY
@given(workloads())
def test_partial_reassessment_agrees_with_d_reassessed_whole(inst: Instance) -> None:
    ctx, d, a = _on_d(inst)
    judge = Reassessor(d, a, ctx.catalog, ctx.model, ctx.prices, LAZINESS)
    for p in candidates(d, ctx, a):
        verdict = judge.judge(p)
        if verdict is None:
            continue
        b = assess(apply(d, p), ctx.catalog, ctx.model, ctx.prices)
        whole = b.total < a.total - EPS and not raised(a, b) and not b.late()
        assert verdict == whole, p.describe()


@PROPERTY
@given(workloads())
def test_hill_climbing_fast_takes_the_reference_plumbings(inst: Instance) -> None:
    ctx, d, _ = _on_d(inst)
    fast = hill_climb(d, ctx)
    ref = hill_climb(d, replace(ctx, fast=False))
    assert [p.describe() for p in fast.applied] == [p.describe() for p in ref.applied]
    assert fast.plan.edges == ref.plan.edges
    assert all(math.isclose(x[2], y[2], rel_tol=1e-12)
               for x, y in zip(fast.trace, ref.trace, strict=True))


@PROPERTY
@given(workloads())
def test_admissions_into_a_growing_d_decide_and_plan_as_the_reference(inst: Instance) -> None:
    fast, ref = GlobalPlan(), GlobalPlan()
    for s in inst.sharings:
        f = admit(fast, inst.catalog, s, MODEL)
        r = admit(ref, inst.catalog, s, MODEL, options=PlannerOptions(fast=False))
        assert (f.admitted, f.reason, f.plumbings) == (r.admitted, r.reason, r.plumbings)
        fast, ref = f.plan, r.plan
        assert fast.edges == ref.edges


def test_a_sharing_re_using_an_mv_lets_the_fast_climb_take_what_now_pays() -> None:
    """Found by the property above: G5 re-uses G3's MV, adding no vertex. Its vertices then
    feed one more sharing, which makes copying G1's delta from theirs pay (22 → 18 vertices);
    the fast climb, looking only where D changed, must look at the vertices that could read
    them too."""
    cols = (ColumnStats("k", "bigint", 100.0, 0, 8), ColumnStats("v", "text", 100, 0, 4),
            ColumnStats("w", "integer", 1000, 0, 4))
    catalog = CatalogSnapshot(
        tuple(Machine(m, cpu_cores=1e6, disk_gb=1e9, network_mb_s=1e9) for m in ("m1", "m2")),
        tuple(RelationStats(r, "m1", 1000.0, 20.0, cols) for r in ("r0", "r1")))
    two = "SELECT t0.v AS v0, t1.v AS v1 FROM r0 t0, r1 t1 WHERE t0.k = t1.k"
    three = "SELECT t0.v AS v0, t1.v AS v1, t1.w AS w1 FROM r0 t0, r1 t1 WHERE t0.k = t1.k"
    fast, ref = GlobalPlan(), GlobalPlan()
    for name, text, sla, home in (("G1", two, 5.0, "m1"), ("G2", two, 20.0, "m2"),
                                  ("G3", three, 20.0, "m2"), ("G4", two, 5.0, "m1"),
                                  ("G5", three, 20.0, "m2")):
        s = Sharing(name, text, sla, 0.001, mv_machine=home)
        f = admit(fast, catalog, s, MODEL)
        r = admit(ref, catalog, s, MODEL, options=PlannerOptions(fast=False))
        assert (f.admitted, f.reason, f.plumbings) == (r.admitted, r.reason, r.plumbings), name
        fast, ref = f.plan, r.plan
    assert r.plumbings and "computed by D already" in r.reason  # the case it is about


@pytest.mark.slow
def test_admission_scale_matches_the_reference_on_table1_copies() -> None:
    """60 sharings on 12 machines: the benchmark's own comparison."""
    doc = bench_admission_scale(12, (25, 60))
    for size in doc["sizes"]:
        assert size["same_plan"] and size["cost_ratio"] == 1.0
        assert size["decided_otherwise"] == []
