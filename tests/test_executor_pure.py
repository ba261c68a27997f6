"""The executor's pure parts: push levels in topological order, the online re-fit of edge lines
and of the dispatch overhead, the time model's JSON with the dispatch overhead. No services."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter, deque
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from smile.costmodel.formulas import edge_load
from smile.costmodel.time_model import DISPATCH_S, TimeModel
from smile.dataset.catalog_model import paper_catalog
from smile.dataset.sharings import table1
from smile.deploy.physical import PhysicalPlan, physical_plan
from smile.executor.auditor import Staleness
from smile.executor.busy import KEEP_S, BusyMeter
from smile.executor.dataflow import Dataflow, PushSpec, push_levels
from smile.executor.inbox import ANSWER_KEEP_S, Inbox
from smile.executor.learning import MODEL_MEMORY_S, SCALE_POINTS, SCALE_RANGE
from smile.executor.machine_load import SUSTAINED_S, machine_loads
from smile.executor.observed import ObservedRates
from smile.executor.pushes import Tracked
from smile.executor.rates import RateMonitor
from smile.executor.runtime import Executor
from smile.executor.skew import DECAY, K_RANGE, Reading, merge_skews
from smile.executor.steady import WINDOW_S, idle_cores, steady_load
from smile.messaging.protocol import AgentFailure, Done, Push, PushDone
from smile.optimizer.admission import admit, plan_sharing
from smile.optimizer.catalog import CatalogSnapshot
from smile.optimizer.estimate import Estimates, skew_key
from smile.optimizer.global_plan import GlobalPlan
from smile.optimizer.load import assess, companions
from smile.optimizer.parse_spj import parse_sharing_sql
from smile.optimizer.plan import JOIN_READ_WEIGHT, Join, Vertex, edge_kind, edge_tuples, route
from smile.optimizer.rates import rerate
from smile.optimizer.recompute import Mode, readers, recompute_modes
from smile.optimizer.sharing import Sharing, SpjQuery
from smile.topology import MachineEndpoint, Topology

TOPOLOGY = Topology((MachineEndpoint("m1", "postgresql://x@127.0.0.1:1/db"),),
                    "postgresql://x@127.0.0.1:1/catalog", "stomp://127.0.0.1:1", "external")


def test_levels_put_every_vertex_after_what_it_reads() -> None:
    catalog = paper_catalog(machines=3)
    spec = next(s for s in table1() if s.name == "S4")
    decision = plan_sharing(catalog, Sharing("S4", spec.sql, 60, 0.01))
    assert decision.plan is not None
    phys = physical_plan(decision.global_plan(), catalog.schemas())
    levels = push_levels(phys)
    depth = {v: i for i, level in enumerate(levels) for v in level}
    assert set(depth) == set(phys.order())  # every non-source vertex, once
    for v, d in depth.items():
        edge = phys.incoming(v)
        assert edge is not None
        assert all(depth.get(s, -1) < d for s in edge.sources), v.label
    assert levels[-1] == [decision.plan.mv]


def test_edge_lines_are_refitted_from_measurements() -> None:
    ex = Executor(TOPOLOGY, TimeModel())
    before = ex.model.line("join_pg")
    for i in range(19):
        ex.learner.learn_line("join_pg", 100.0 * (i + 1), 0.05 + 1e-4 * 100 * (i + 1))
    assert ex.model.line("join_pg") == before and ex.refits == 0  # not yet: every 20
    ex.learner.learn_line("join_pg", 2000.0, 0.05 + 1e-4 * 2000)
    line = ex.model.line("join_pg")
    assert ex.refits == 1
    assert abs(line.a - 0.05) < 1e-6 and abs(line.b - 1e-4) < 1e-9


def test_edge_lines_forget_measurements_older_than_the_model_memory() -> None:
    """Times measured under an earlier, heavier load no longer count once they are older than
    MODEL_MEMORY_S: the line is re-fitted to the recent ones alone."""
    ex = Executor(TOPOLOGY, TimeModel())
    for i in range(40):  # contended: twice the fixed cost and the slope
        ex.learner.learn_line("join_pg", 100.0 * (i + 1), 0.1 + 2e-4 * 100 * (i + 1), now=0.0)
    heavy = ex.model.line("join_pg")
    assert abs(heavy.a - 0.1) < 1e-6 and abs(heavy.b - 2e-4) < 1e-9
    later = MODEL_MEMORY_S + 1.0
    for i in range(19):  # too few recent ones yet: the old line stays
        ex.learner.learn_line("join_pg", 100.0 * (i + 1), 0.05 + 1e-4 * 100 * (i + 1), now=later)
    assert ex.model.line("join_pg") == heavy
    ex.learner.learn_line("join_pg", 2000.0, 0.05 + 1e-4 * 2000, now=later)
    line = ex.model.line("join_pg")
    assert abs(line.a - 0.05) < 1e-6 and abs(line.b - 1e-4) < 1e-9


def test_dispatch_overhead_is_the_median_of_what_was_measured() -> None:
    ex = Executor(TOPOLOGY, TimeModel())
    for i in range(20):
        ex.learner.learn_dispatch(0.003 if i % 2 else 0.005)
    assert abs(ex.model.dispatch_s - 0.004) < 1e-9
    assert ex.model.seconds("union", 0) == ex.model.line("union").a + ex.model.dispatch_s


def test_time_model_json_keeps_the_dispatch_overhead() -> None:
    model = TimeModel(dispatch_s=0.007)
    again = TimeModel.from_json(model.to_json())
    assert again == model
    assert TimeModel.from_json({}).dispatch_s == DISPATCH_S


def test_observed_rates_are_tuples_per_second_of_data_time() -> None:
    """Each push's tuples over the span of data its operator took the vertex across: a push
    that found the vertex there already adds nothing; too little data covered, or a
    computation D no longer has, says nothing; the window keeps the last `window_s`."""
    seen = ObservedRates(window_s=60.0, min_span_s=5.0)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def at(s: float) -> datetime:
        return t0 + timedelta(seconds=s)

    seen.add("Δ(a⋈Δb)~1", at(0), at(2), 40)
    assert seen.rates() == {}  # 2 s of data time
    seen.add("Δ(a⋈Δb)~1", at(2), at(2), 999)  # no span: nothing to count
    for i in range(1, 12):
        seen.add("Δ(a⋈Δb)~1", at(10 * i - 8), at(10 * i + 2), 200)
    rate = seen.rates()["Δ(a⋈Δb)~1"]
    assert abs(rate - 20.0) < 1e-9  # 200 per 10 s; the window keeps the last 60 s
    seen.forget({"other"})
    assert seen.rates() == {}


def test_observed_rates_count_each_push_over_its_own_span() -> None:
    """Sharings push a shared vertex at once and their answers come in any order; a deploy's
    fill advances it with no push to answer for it. Each push's tuples over its own span: a
    vertex every sharing shares reads the rate its data has (2000 rows/s), not what the pushes
    that answered in order took over the time between them, fills included."""
    seen = ObservedRates(window_s=60.0, min_span_s=5.0)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def at(s: float) -> datetime:
        return t0 + timedelta(seconds=s)

    end = 0.0
    for i in range(1, 13):  # every 5 s two sharings push it, the later answer first
        if i % 4 == 0:  # a fill took it 3 s further, its rows counted nowhere
            end += 3.0
        seen.add("tweets", at(end + 2.5), at(end + 5.0), 5000)
        seen.add("tweets", at(end), at(end + 2.5), 5000)
        end += 5.0
    assert seen.rates()["tweets"] == pytest.approx(2000.0)
    seen.add("tweets", at(-100.0), at(-99.0), 10**6)  # older than the window: not counted
    assert seen.rates()["tweets"] == pytest.approx(2000.0)


def test_observed_rates_wait_for_a_minute_of_data_by_default() -> None:
    """A skewed join's first pushes (bursts of one active user's rows, or none) say little
    about its mean: by default the estimate stands until the pushes cover a minute of data."""
    seen = ObservedRates()
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(5):  # 50 s of data time
        seen.add("Δ(loc⋈Δtweets)~1", t0 + timedelta(seconds=10 * i),
                 t0 + timedelta(seconds=10 * i + 10), 100)
    assert seen.rates() == {}
    for i in range(5, 7):  # 70 s
        seen.add("Δ(loc⋈Δtweets)~1", t0 + timedelta(seconds=10 * i),
                 t0 + timedelta(seconds=10 * i + 10), 27_000 if i == 6 else 100)
    assert seen.rates()["Δ(loc⋈Δtweets)~1"] == pytest.approx((6 * 100 + 27_000) / 70)


def test_measured_rates_replace_the_estimates_of_the_computations_they_measure() -> None:
    """A skewed join grows far faster than uniform statistics say: D re-rated with the rate
    measured for a computation charges that rate to every edge into it, on any machine, and
    the load follows; the other edges keep their estimates."""
    catalog = paper_catalog(machines=3)
    spec = next(s for s in table1() if s.name == "S4")
    decision = plan_sharing(catalog, Sharing("S4", spec.sql, 60, 0.01))
    assert decision.plan is not None
    plan = rerate(decision.global_plan(), catalog)
    join = max((e for e in plan.edges if e.dst.kind == "partial"), key=lambda e: e.tuples_per_s)
    measured = join.tuples_per_s * 40
    again = rerate(plan, replace(catalog, observed=((join.dst.computation, measured),)))
    rates = {e.dst: e.tuples_per_s for e in again.edges}
    assert rates[join.dst] == measured
    assert all(rates[e.dst] == e.tuples_per_s for e in plan.edges if e.dst != join.dst)
    model = TimeModel()
    before, after = assess(plan, catalog, model), assess(again, catalog, model)
    m = join.dst.machine
    # its tuples, and a little more: a longer critical path, shorter push periods
    assert after.machine_load[m] - before.machine_load[m] == pytest.approx(
        model.line("join_pg").b * (measured - join.tuples_per_s), rel=0.01)
    assert CatalogSnapshot.from_json(replace(
        catalog, observed=((join.dst.computation, measured),)).to_json()).observed == (
        (join.dst.computation, measured),)


def test_idle_cores_leave_out_the_seconds_a_deploy_ran() -> None:
    """A deploy's burst (first contents) is not what the sharings cost: the box's idle cores
    are measured between deploys, over the operator load's window, and the last such value
    stands while deploys leave too few quiet seconds."""
    monitor = RateMonitor(TOPOLOGY, window_s=30.0)
    cores = os.cpu_count() or 1
    now = time.monotonic()
    # jiffies: (when, busy, all): 25% busy before, 100% during [now-10, now-5], 25% after
    monitor.cpu.extend([(now - 50, 0.0, 0.0), (now - 10, 100.0, 400.0),
                        (now - 5, 150.0, 450.0), (now, 162.5, 500.0)])
    assert monitor.idle_cores() == pytest.approx(cores * (1 - 162.5 / 500))
    monitor.spans.add(now - 9.5, now - 5.5)
    assert monitor.idle_cores() == pytest.approx(cores * 0.75)
    monitor.spans.add(now - 60, now + 1)  # deploys fill the window
    assert monitor.idle_cores() == pytest.approx(cores * 0.75)  # the last clean value
    with monitor.deploying():
        assert monitor.deploy_spans()[-1][1] == float("inf")
    assert monitor.deploy_spans()[-1][1] <= time.monotonic()


def test_idle_and_operator_load_are_measured_over_the_same_quiet_seconds() -> None:
    """The bound is idle cores + operator load: both over one window, leaving out the same
    deploys, and neither from a window with only a few quiet seconds (three saturated
    seconds after a deploy once made a machine's bound 0.001 core-s/s)."""
    # 60 s window [40, 100], samples every 2 s: 50% busy, but saturated in [94, 100]
    cpu = [(40.0 + 2 * i, 0.0, 0.0) for i in range(31)]
    acc = [(t, 0.0, 0.0) for t, _, _ in cpu]
    for i in range(1, len(cpu)):
        t = cpu[i][0]
        share = 1.0 if t > 94 else 0.5
        acc[i] = (t, acc[i - 1][1] + 200 * share, acc[i - 1][2] + 200)
    whole = idle_cores(acc, [], now=100.0, cores=2)
    assert whole == pytest.approx(2 * (1 - (27 * 100 + 3 * 200) / (30 * 200)))
    # a deploy over [45, 89]: with its 5 s settle it leaves [40, 44] and [94, 100], 10 s
    # mostly saturated: too few to say what the box has left
    assert idle_cores(acc, [(45.0, 89.0)], now=100.0, cores=2) is None
    # the same deploy spans make the operator load None too: both keep their last value
    assert steady_load({"m1": [(97.0, 1.0, "v")]}, [(45.0, 89.0)], now=100.0,
                       window_s=WINDOW_S) is None
    # a shorter deploy leaves 36 s quiet ([40, 44] and [68, 100]): counted, and the same
    # seconds for both measures
    quiet = idle_cores(acc, [(44.0, 63.0)], now=100.0, cores=2)
    assert quiet == pytest.approx(2 * (1 - (15 * 100 + 3 * 200) / (18 * 200)))
    load = steady_load({"m1": [(97.0, 1.0, "v"), (60.0, 1.0, "v")]}, [(44.0, 63.0)],
                       now=100.0, window_s=WINDOW_S)
    assert load == {"m1": pytest.approx(1.0 / 36)}


def test_the_load_admission_reads_leaves_out_deploys_and_their_first_pushes() -> None:
    """Operator load outside deploys: a push overlapping a deploy or the settle time after it
    (a first push catching up from t0) is left out, the rest divided by the time outside them
    (overlapping deploys counted once); a window nearly all deploys measures nothing."""
    pushes = {"m1": [(10.0, 2.0, "a"), (45.0, 1.0, "a"), (53.0, 4.0, "b"), (62.0, 0.5, "b"),
                     (99.0, 1.5, "a")],
              "m2": [(58.0, 3.0, "c")]}
    # window [40, 100]; deploys [50, 55] and [52, 57] + 5 s settle: [50, 62] covered, 48 quiet
    load = steady_load(pushes, [(50.0, 55.0), (52.0, 57.0)], now=100.0, window_s=60.0)
    assert load is not None
    assert load["m1"] == pytest.approx((1.0 + 1.5) / 48)  # not the one at 10 s, nor 53 or 62
    assert load["m2"] == 0.0
    assert steady_load(pushes, [], now=100.0, window_s=60.0) == {
        "m1": pytest.approx(7.0 / 60), "m2": pytest.approx(3.0 / 60)}
    # a deploy still running covers up to now: 45 s of 60 under deploys, too little is quiet
    assert steady_load(pushes, [(55.0, float("inf"))], now=100.0, window_s=60.0) is None
    assert steady_load(pushes, [(30.0, 45.0), (60.0, 90.0)], now=100.0, window_s=60.0,
                       settle_s=5.0, min_quiet_s=20.0) is None  # 10 + 35 covered


def test_rates_count_delta_rows_and_growth_counts_rows_kept() -> None:
    """Over the window, a table of inserts grows by all its delta rows; one of updates (two
    delta rows each) does not grow; deletes shrink, which is no growth."""
    monitor = RateMonitor(TOPOLOGY, window_s=30.0)
    for key, (count, net) in {("m1", "tweets"): (100.0, 100.0), ("m1", "curloc"): (40.0, 0.0),
                              ("m2", "gone"): (10.0, -10.0)}.items():
        monitor.samples[key] = deque([(0.0, 0.0, 0.0), (10.0, count, net)])
    assert monitor.rates() == {("m1", "tweets"): 10.0, ("m1", "curloc"): 4.0,
                               ("m2", "gone"): 1.0}
    assert monitor.growth() == {("m1", "tweets"): 10.0, ("m1", "curloc"): 0.0,
                                ("m2", "gone"): 0.0}


def test_a_deploy_first_pushes_the_sharings_due_while_its_fill_runs() -> None:
    """An agent takes one command at a time, so a push queued behind a deploy's fill waits for
    it: before the fill the executor pushes what would fall due meanwhile (`target` with
    `ahead_s`), not what is still far from due. A learnt delay and capture lag (the sources'
    clock ahead of their watermarks) make it due sooner."""
    catalog = paper_catalog(machines=1)
    spec = next(s for s in table1() if s.name == "S5")
    decision = plan_sharing(catalog, Sharing("S5", spec.sql, 10, 0.01))
    assert decision.plan is not None
    phys = physical_plan(decision.global_plan(), catalog.schemas())
    ex = Executor(TOPOLOGY, TimeModel())
    ex.version, ex.plan = 1, phys
    entry = phys.plan.sharing("S5")
    now = datetime.now(UTC)
    # sources current, the MV 6 s behind: due at 8 s (l = 0.8)
    stamps = {phys.vertices[s].ts_key: now for s in entry.sources}
    stamps[phys.vertices[entry.mv].ts_key] = now - timedelta(seconds=6)
    ex.clock.learn("m1", stamps, now)
    ex.tracked["S5"] = Tracked("S5", 10.0)
    assert ex.scheduler.target(ex.tracked["S5"]) is None
    assert ex.scheduler.target(ex.tracked["S5"], ahead_s=1.0) is None
    assert ex.scheduler.target(ex.tracked["S5"], ahead_s=3.0) == now
    ex.tracked["S5"].delay_s = 2.5  # its pushes took 2.5 s longer than the plan said
    assert ex.scheduler.target(ex.tracked["S5"]) == now  # so it is due now, not in 2 s
    ex.tracked["S5"].delay_s = 0.0
    # the sources' clock 2.5 s past their watermarks: capture lag
    ex.clock.learn("m1", stamps, now + timedelta(seconds=2.5))
    assert ex.scheduler.target(ex.tracked["S5"]) == now  # a consumer sees 8.5 s: due now


def test_admission_is_charged_the_delays_of_pushes_outside_deploys_only() -> None:
    """A push that ran beside a deploy shortens the sharing's next wait (`delay_s`) but is not
    what admission charges its period with (`delays`, from `steady_delay_s`): a burst of
    submissions slows every push while it lasts. One outside deploys is both."""
    ex = Executor(TOPOLOGY, TimeModel())
    ex.tracked["S5"] = Tracked("S5", 10.0)
    tr = ex.tracked["S5"]
    now = time.monotonic()
    ex.deployer.spans.add(now - 1.0, now)  # a deploy ran while the push did
    assert ex.pushes.settle(tr, now - 4.0, True, 1.0) is None
    assert tr.delay_s == pytest.approx(3.0, abs=0.1)
    assert tr.steady_delay_s == 0.0 and ex.delays() == {}
    ex.deployer.spans.clear()
    assert ex.pushes.settle(tr, time.monotonic() - 3.0, True, 1.0) is None
    assert tr.steady_delay_s == pytest.approx(2.0, abs=0.1)
    assert ex.delays() == {"S5": tr.steady_delay_s}
    assert tr.delay_s > tr.steady_delay_s  # the deploy's delay wears down more slowly


def test_a_measured_skew_multiplies_what_changes_of_that_relation_meet() -> None:
    """K of `loc.uid>tweets.uid` scales the rate of Δ(Δloc ⋈ tweets) and nothing driven by
    tweets; the parts still add up to the whole join's rate; without K, nothing changes."""
    catalog = paper_catalog(machines=3)
    spec = next(s for s in table1() if s.name == "S14")
    query = parse_sharing_sql(spec.sql, catalog)
    loc = next(r.alias for r in query.relations if r.relation == "loc")
    tweets = next(r.alias for r in query.relations if r.relation == "tweets")
    plain = Estimates(catalog, query)
    skewed = Estimates(replace(catalog, skews=((skew_key("loc", "uid", "tweets", "uid"), 50.0),)),
                       query)
    left = frozenset({loc})
    assert skewed.driving_left(left, tweets) == pytest.approx(
        50 * plain.driving_left(left, tweets))
    assert skewed.driving_right(left, tweets) == pytest.approx(
        plain.driving_right(left, tweets))
    both = left | {tweets}
    for est in (plain, skewed):
        assert est.stats(both).rate == pytest.approx(
            est.driving_left(left, tweets) + est.driving_right(left, tweets))
    assert plain.stats(both).rate == pytest.approx(
        plain.alias[loc].rate * plain.stats(both).rows / plain.alias[loc].rows
        + plain.alias[tweets].rate * plain.stats(both).rows / plain.alias[tweets].rows)


def _s16() -> tuple[CatalogSnapshot, SpjQuery, dict[str, str], frozenset[str]]:
    """S16 on Table 1's catalog model: catalog, query, alias by relation, all its aliases."""
    catalog = paper_catalog(machines=3)
    spec = next(s for s in table1() if s.name == "S16")
    query = parse_sharing_sql(spec.sql, catalog)
    alias = {r.relation: r.alias for r in query.relations}
    return catalog, query, alias, frozenset(alias.values())


def test_a_skew_above_one_carries_along_the_joins_a_change_travels() -> None:
    """S16 (foursq ⋈ tweets ⋈ users ⋈ socnet): a check-in meets its own tweet (K 1), whose
    author has many followers (`tweets.uid>socnet.uid` = 33), so Δ(Δfoursq ⋈ … ⋈ socnet) is
    33× its uniform rate — as measured live, where the uniform estimate was 1/14 of it. A K
    below 1 two joins away (fresh tweets have no check-in yet) does not lower what a change
    of socnet meets; the same K on a change's own predicate still does."""
    catalog, query, alias, every = _s16()
    plain = Estimates(catalog, query)
    skews = ((skew_key("foursq", "tid", "tweets", "tid"), 1.0),
             (skew_key("tweets", "uid", "socnet", "uid"), 33.0),
             (skew_key("tweets", "tid", "foursq", "tid"), 0.01))
    skewed = Estimates(replace(catalog, skews=skews), query)
    assert plain.skew(alias["foursq"], every) == 1.0
    assert skewed.skew(alias["foursq"], every) == pytest.approx(33.0)
    assert skewed.rate_from(every, frozenset({alias["foursq"]})) == pytest.approx(
        33 * plain.rate_from(every, frozenset({alias["foursq"]})))
    assert skewed.skew(alias["socnet"], every) == 1.0  # 0.01 is two joins away from socnet
    assert skewed.skew(alias["tweets"], every) == pytest.approx(0.01 * 33.0)
    # only the joins inside the set count: without socnet, a check-in meets one tweet
    assert skewed.skew(alias["foursq"], frozenset({alias["foursq"], alias["tweets"]})) == 1.0


def test_a_changed_value_meets_further_relations_with_its_own_skew() -> None:
    """S16's joins are a star around tweets: a changed user meets their tweets on uid, and
    those meet socnet on that same uid — the changed user's followers, not those of the
    authors of new tweets (`tweets.uid>socnet.uid`, 33). So a change of users is charged its
    own skew there (`users.uid>socnet.uid`) when above 1, and nothing when unmeasured; a
    check-in's tweet meets socnet on its author, another column than the tid it was met on,
    and keeps the new tweets' 33."""
    catalog, query, alias, every = _s16()
    skews = ((skew_key("users", "uid", "tweets", "uid"), 0.3),
             (skew_key("tweets", "uid", "socnet", "uid"), 33.0))
    skewed = Estimates(replace(catalog, skews=skews), query)
    assert skewed.skew(alias["users"], every) == pytest.approx(0.3)
    assert skewed.skew(alias["foursq"], every) == pytest.approx(33.0)
    measured = Estimates(replace(catalog, skews=(
        *skews, (skew_key("users", "uid", "socnet", "uid"), 5.0))), query)
    assert measured.skew(alias["users"], every) == pytest.approx(0.3 * 5.0)
    assert measured.skew(alias["foursq"], every) == pytest.approx(33.0)


def test_staleness_as_a_consumer_sees_it_counts_capture_lag() -> None:
    """The MV is at 100 s, the sources' watermarks at 104 s, their clock at 130 s (a capturer
    stopped 26 s ago): the consumer's view is 30 s stale, of which 26 s is capture lag."""
    t = datetime(2026, 1, 1, tzinfo=UTC)
    at = [t + timedelta(seconds=x) for x in (100, 102, 104, 130)]
    seen = Staleness(at[0], at[1], at[2], at[3])
    assert seen.seconds == 30.0 and seen.capture_lag_s == 26.0
    remembered = Staleness(at[0], at[1], at[2])  # the executor's own: watermarks only
    assert remembered.seconds == 4.0 and remembered.capture_lag_s is None
    assert Staleness(at[3], at[1], at[2], at[2]).seconds == 0.0  # an MV ahead is not stale


def test_a_due_sharing_takes_along_those_that_share_most_of_its_vertices() -> None:
    """S2, S4, S5 and S1 in one D on one machine, SLA 10 s. S4 falls due (9 s behind); S4 is
    planned on D, so its join of `urls` drives from S2's result and every one of the 11
    vertices S2's push advances is S4's too; S2 is 6 s behind (past half its SLA): it goes
    along, to S4's target. S5 is as far behind but shares 2 of 6; S1 shares 1.
    S2 only 3 s behind waits for its own push, and so does everything with shared pushes
    off."""
    catalog = paper_catalog(machines=1)
    specs = {s.name: s for s in table1()}
    plan = GlobalPlan()
    for name in ("S2", "S4", "S5", "S1"):
        admission = admit(plan, catalog, Sharing(name, specs[name].sql, 10, 0.01))
        assert admission.admitted, admission.reason
        plan = admission.plan
    phys = physical_plan(plan, catalog.schemas())
    adv = {e.name: phys.plan.advanced_by({e.mv}) for e in phys.plan.sharings}
    assert adv["S2"] < adv["S4"] and len(adv["S2"]) == 11
    assert len(adv["S5"] & adv["S4"]) == 2 and len(adv["S1"] & adv["S4"]) == 1
    # the load model charges the pushes of the same companions (`load.companions`)
    assert {k: set(v) for k, v in phys.plan.advances.items()} == adv
    model = companions(phys.plan)
    assert "S4" in model["S2"] and "S4" not in model["S5"] and "S4" not in model["S1"]
    now = datetime.now(UTC)

    def executor(share: bool, behind: dict[str, float]) -> Executor:
        ex = Executor(TOPOLOGY, TimeModel(), share_pushes=share)
        ex.version, ex.plan = 1, phys
        ex.scheduler.advances = {k: frozenset(v) for k, v in adv.items()}
        ex.scheduler.riders = companions(phys.plan)
        stamps: dict[str, datetime] = {}
        for name, seconds in behind.items():
            entry = phys.plan.sharing(name)
            stamps |= {phys.vertices[s].ts_key: now for s in entry.sources}
            stamps[phys.vertices[entry.mv].ts_key] = now - timedelta(seconds=seconds)
            ex.tracked[name] = Tracked(name, 10.0)
        ex.clock.learn("m1", stamps, now)
        return ex

    ex = executor(True, {"S4": 9, "S2": 6, "S5": 6, "S1": 6})
    t = ex.scheduler.target(ex.tracked["S4"])
    assert t == now and all(ex.scheduler.target(ex.tracked[n]) is None for n in ("S2", "S5", "S1"))
    assert [c.name for c in ex.scheduler.companions(ex.tracked["S4"], t)] == ["S2"]
    assert ex.tracked["S2"].pushing and not ex.tracked["S5"].pushing
    assert ex.scheduler.companions(ex.tracked["S4"], t) == []  # S2 is taken: not twice
    ex = executor(True, {"S4": 9, "S2": 3})
    assert ex.scheduler.companions(ex.tracked["S4"], now) == []
    ex = executor(True, {"S4": 9, "S2": 6})  # a sharing the database refuses goes alone
    ex.tracked["S2"].refused = 1
    assert ex.scheduler.companions(ex.tracked["S4"], now) == []
    ex.tracked["S2"].refused, ex.tracked["S4"].refused = 0, 1
    assert ex.scheduler.companions(ex.tracked["S4"], now) == []
    ex = executor(False, {"S4": 9, "S2": 6})
    assert ex.scheduler.companions(ex.tracked["S4"], now) == []


def test_machine_loads_name_each_edge_and_the_sharings_at_risk_over_the_bound() -> None:
    """Per machine: its edges' predicted loads beside what their pushes measured (a vertex
    gone from D still listed while its pushes are in the window), the largest first; over
    its bound for the sustained window (counting the vertices D has now, not those withdrawn
    meanwhile), the sharings with a vertex on it are named, and not before (a minute's burst
    above it is not five minutes')."""
    catalog = paper_catalog(machines=3)
    plan = GlobalPlan()
    for name in ("S5", "S14"):
        spec = next(s for s in table1() if s.name == name)
        admission = admit(plan, catalog, Sharing(name, spec.sql, 45, 0.01))
        assert admission.admitted, admission.reason
        plan = admission.plan
    assessment = assess(rerate(plan, catalog), catalog, TimeModel())
    heaviest = max(assessment.edge_load, key=lambda e: assessment.edge_load[e])
    m = heaviest.dst.machine
    machines = tuple(sorted({v.machine for v in plan.vertices} | {"m1", "m2", "m3"}))
    measured = {m: {heaviest.dst.label: 3 * assessment.edge_load[heaviest], "old@" + m: 1e-3}}
    bound = assessment.bounds[m][0]

    def over_5_min(load: float) -> dict[str, dict[str, float]]:  # and a withdrawn vertex's
        return {m: {heaviest.dst.label: load, "old@" + m: 10 * bound}}

    calm = machine_loads(plan, assessment, measured, over_5_min(bound * 0.9), machines)
    first = calm[m].edges[0]
    assert first.vertex == heaviest.dst.label and first.kind == edge_kind(heaviest)
    assert first.predicted == assessment.edge_load[heaviest]
    assert first.measured == 3 * assessment.edge_load[heaviest]
    assert set(first.sharings) == set(plan.shr[heaviest.dst])
    # the load's parts: the pushes the plan expects and the tuples it charges
    assert first.pushes_per_s == pytest.approx(
        sum(1 / assessment.periods[s] for s in plan.shr[heaviest.dst]))
    assert first.tuples_per_s == edge_tuples(heaviest) and first.tuples_per_s > 0
    line = TimeModel().edge_line(edge_kind(heaviest), heaviest.dst.label)
    assert first.predicted == pytest.approx(
        edge_load(line.a, line.b, first.tuples_per_s, first.pushes_per_s))
    assert (first.fixed_s, first.per_tuple_s, first.scale) == (line.a, line.b, None)
    # a measured vertex's scale is in its line, and the report says so
    scaled = TimeModel(scales={heaviest.dst.label: 2.5})
    twice = machine_loads(plan, assess(rerate(plan, catalog), catalog, scaled), measured,
                          over_5_min(bound * 0.9), machines)[m]
    again = next(e for e in twice.edges if e.vertex == heaviest.dst.label)
    assert again.scale == 2.5
    assert (again.fixed_s, again.per_tuple_s) == pytest.approx((2.5 * line.a, 2.5 * line.b))
    assert again.predicted == pytest.approx(
        (again.fixed_s or 0) * (again.pushes_per_s or 0)
        + (again.per_tuple_s or 0) * (again.tuples_per_s or 0))
    gone = next(e for e in calm[m].edges if e.vertex == "old@" + m)
    assert gone.kind is None and gone.predicted is None
    assert gone.pushes_per_s is None and gone.tuples_per_s is None and gone.fixed_s is None
    assert calm[m].measured == pytest.approx(sum(measured[m].values()))
    assert calm[m].predicted == assessment.machine_load[m] and calm[m].bound == bound
    assert calm[m].sustained == bound * 0.9
    assert not calm[m].over_bound and calm[m].at_risk == () and calm[m].warning(300) is None
    hot = machine_loads(plan, assessment, measured, over_5_min(bound * 1.2), machines)[m]
    on_m = {n for v, names in plan.shr.items() if v.machine == m for n in names}
    assert hot.over_bound and set(hot.at_risk) == on_m and on_m
    warning = hot.warning(300)
    assert warning is not None and m in warning and all(n in warning for n in on_m)
    quiet = next(x for x in machines if x not in measured)
    assert machine_loads(plan, assessment, measured, {}, machines)[quiet].measured is None
    # on one box: its share is its bound, passed while the box has room, flagged once the
    # machines together are over theirs
    box = replace(catalog, one_box=True)
    pooled = assess(rerate(plan, box), box, TimeModel())
    assert pooled.box == pytest.approx(sum(pooled.shares.values()))
    share = pooled.shares[m]
    room = machine_loads(plan, pooled, measured, over_5_min(share * 1.2), machines)[m]
    assert room.bound == share and room.box is not None and room.box[0] < room.box[1]
    assert not room.over_bound and room.warning(300) is None
    full = machine_loads(plan, pooled, measured, over_5_min(pooled.box * 1.1), machines)[m]
    assert full.over_bound and set(full.at_risk) == on_m
    assert "share" in (full.warning(300) or "")


def test_a_join_is_charged_the_driving_rows_it_reads_as_well_as_those_it_writes() -> None:
    """Re-rated, each join carries the rate of the delta driving it (its incoming edge's, or
    a captured base delta's change rate), and its load counts those rows, weighted, beside its
    output: Δtweets ⋈ curloc reads every new tweet and writes one in ten."""
    catalog = paper_catalog(machines=3)
    spec = next(s for s in table1() if s.name == "S6")  # tweets ⋈ curloc
    admission = admit(GlobalPlan(), catalog, Sharing("S6", spec.sql, 45, 0.01))
    assert admission.admitted, admission.reason
    plan = rerate(admission.plan, catalog)
    joins = [e for e in plan.edges if isinstance(e, Join)]
    assert len(joins) == 2
    into = {e.dst: e.tuples_per_s for e in plan.edges}
    for j in joins:
        driving = into.get(j.delta, catalog.relation(j.delta.expr.parts[0].relation).update_rate)
        assert j.rows_in_per_s == driving > 0
        assert edge_tuples(j) == j.tuples_per_s + JOIN_READ_WEIGHT * driving
    by_tweets = next(j for j in joins if "tweets" in j.delta.computation)
    assert by_tweets.rows_in_per_s > 5 * by_tweets.tuples_per_s  # a tweet in ten has a curloc
    model = TimeModel()
    a = assess(plan, catalog, model)
    line = model.line(edge_kind(by_tweets))
    pushes = sum(1.0 / a.periods[s] for s in plan.shr[by_tweets.dst])
    assert a.edge_load[by_tweets] == pytest.approx(line.a * pushes + line.b * (
        by_tweets.tuples_per_s + JOIN_READ_WEIGHT * by_tweets.rows_in_per_s))
    assert a.edge_load[by_tweets] > edge_load(line.a, line.b, by_tweets.tuples_per_s, pushes)
    # re-rating changes estimates, not routes: the executor would re-fill a re-routed vertex
    assert {route(e) for e in plan.edges} == {route(e) for e in admission.plan.edges}
    assert {route(e) for e in rerate(plan, replace(catalog, relations=tuple(
        replace(r, update_rate=3 * r.update_rate) for r in catalog.relations))).edges} == {
        route(e) for e in plan.edges}


def test_each_edge_is_scaled_to_what_its_own_pushes_took() -> None:
    """One line per kind, but each vertex's edge measured against it: its scale is its
    pushes' seconds ÷ the line's (within SCALE_RANGE), from its first push on, at each push
    while it has fewer than SCALE_POINTS in the memory, then at every SCALE_POINTS-th, old
    ones forgotten; D's assessment charges that edge its scaled line and the others their
    kind's."""
    catalog = paper_catalog(machines=3)
    spec = next(s for s in table1() if s.name == "S6")
    admission = admit(GlobalPlan(), catalog, Sharing("S6", spec.sql, 45, 0.01))
    plan = rerate(admission.plan, catalog)
    edge = next(e for e in plan.edges if edge_kind(e) == "delta_to_rel")
    label, kind = edge.dst.label, edge_kind(edge)
    ex = Executor(TOPOLOGY, TimeModel())
    line = ex.model.line(kind)
    assert label not in ex.model.scales  # not measured: its kind's line
    for i in range(SCALE_POINTS - 1):  # a few: scaled to what they took, at each
        factor = 3.0 if i == 0 else 2.0
        ex.learner.learn_vertex(label, kind, 1000.0 * (i + 1),
                         factor * line.seconds(1000.0 * (i + 1)), now=0.0)
        took = sum((3.0 if j == 0 else 2.0) * line.seconds(1000.0 * (j + 1))
                   for j in range(i + 1))
        assert ex.model.scales[label] == pytest.approx(
            took / sum(line.seconds(1000.0 * (j + 1)) for j in range(i + 1)), abs=1e-3)
    ex.learner.learn_vertex(label, kind, 5000.0, 2 * line.seconds(5000.0), now=0.0)
    assert 2.0 < ex.model.scales[label] < 2.2
    before = ex.model.scales[label]  # SCALE_POINTS in the memory: at every SCALE_POINTS-th
    ex.learner.learn_vertex(label, kind, 5000.0, 9 * line.seconds(5000.0), now=1.0)
    assert ex.model.scales[label] == before
    later = MODEL_MEMORY_S + 1.0  # the slow ones forgotten; a far slower run is bounded
    for _ in range(SCALE_POINTS):
        ex.learner.learn_vertex(label, kind, 100.0, 50 * line.seconds(100.0), now=later)
    assert ex.model.scales[label] == SCALE_RANGE[1]
    scaled = assess(plan, catalog, ex.model)
    plain = TimeModel()  # at the scaled assessment's pushes: a longer critical path
    for e in plan.edges:  # shortens the push periods a little
        line = plain.edge_line(edge_kind(e), e.dst.label)
        times = SCALE_RANGE[1] if e is edge else 1.0
        assert scaled.edge_load[e] == pytest.approx(edge_load(
            times * line.a, times * line.b, edge_tuples(e), scaled.pushes(plan.shr[e.dst])))
    assert TimeModel.from_json(ex.model.to_json()).scales == {label: SCALE_RANGE[1]}


def test_pushes_beside_a_deploy_count_until_the_steady_ones_are_enough() -> None:
    """A push that overlaps a deploy, or the settle after it, runs beside its fill and the
    first catch-ups: in a burst of submissions nothing else is measured, and admissions go
    by it (the edge at twice its line); once the deploy settled, SCALE_POINTS steady pushes
    (at its line) are what the edge's scale is, the contended ones left out — until the next
    burst, when the steady ones from before it no longer go alone."""
    catalog = paper_catalog(machines=3)
    spec = next(s for s in table1() if s.name == "S6")
    admission = admit(GlobalPlan(), catalog, Sharing("S6", spec.sql, 45, 0.01))
    phys = physical_plan(admission.plan, catalog.schemas())
    v = next(v for v in phys.order() if edge_kind(phys.incoming(v)) == "delta_to_rel")
    ex = Executor(TOPOLOGY, TimeModel())
    line = ex.model.line("delta_to_rel")

    def push(factor: float) -> None:
        done = PushDone("p", v.label, datetime.now(UTC), factor * line.seconds(1000.0),
                        1000, 1000)
        ex.pushes.record(PushSpec(1, phys, frozenset(), done.ts), v, done)

    ex.deployer.spans.add(time.monotonic() - 2.0, float("inf"))  # one running
    for _ in range(SCALE_POINTS):
        push(2.0)
    assert ex.model.scales[v.label] == pytest.approx(2.0, abs=1e-3)
    ex.deployer.spans.clear()
    ex.deployer.spans.add(time.monotonic() - 30.0, time.monotonic() - 10.0)  # settled since
    for _ in range(SCALE_POINTS - 1):
        push(1.0)
    assert ex.model.scales[v.label] == pytest.approx(2.0, abs=1e-3)  # not re-computed yet
    push(1.0)
    assert ex.model.scales[v.label] == pytest.approx(1.0, abs=1e-3)  # not 1.5: steady only
    ex.deployer.spans.add(time.monotonic(), float("inf"))  # a burst again
    for _ in range(SCALE_POINTS):
        push(2.0)
    # the steady pushes from before it no longer stand alone: all of the window counts
    assert ex.model.scales[v.label] > 1.5


def test_a_new_line_rescales_the_vertices_of_its_kind() -> None:
    """A vertex's scale is relative to its kind's line: when a re-fit makes the line twice
    as steep (other, slower edges of the kind measured), a vertex measured at twice the old
    line in its last SCALE_POINTS pushes is re-scaled to 1 — it still takes what it took; one
    with fewer recent pushes keeps its prediction at their tuples (3 → 1.5, and a vertex
    pushed once 3.5 → 1.75); a vertex of another kind is left as it is, and one never
    measured stays on the line."""
    ex = Executor(TOPOLOGY, TimeModel())
    old = ex.model.line("join_pg")
    sizes = [1000.0 * (i + 1) for i in range(SCALE_POINTS)]
    for n in sizes:
        ex.learner.learn_vertex("fast@m1", "join_pg", n, 2 * old.seconds(n), now=250.0)
        ex.learner.learn_vertex("slow@m1", "join_pg", n, 3 * old.seconds(n), now=0.0)
        ex.learner.learn_vertex("u@m2", "union", n, 3 * ex.model.line("union").seconds(n),
                                now=250.0)
    for n in (2000.0, 4000.0):  # within the memory of the re-fit below, but only two
        ex.learner.learn_vertex("slow@m1", "join_pg", n, 3 * old.seconds(n), now=250.0)
    ex.learner.learn_vertex("young@m1", "join_pg", 500.0, 3.5 * old.seconds(500.0), now=250.0)
    assert ex.model.scales == {"fast@m1": pytest.approx(2.0, abs=1e-3),
                               "slow@m1": pytest.approx(3.0, abs=1e-3),
                               "u@m2": pytest.approx(3.0, abs=1e-3),
                               "young@m1": pytest.approx(3.5, abs=1e-3)}
    later = MODEL_MEMORY_S + 20.0  # slow@m1's first five are forgotten by then
    for i in range(20):  # the slower edges of the kind: the line becomes 2 × the old one
        n = 100.0 * (i + 1)
        ex.learner.learn_line("join_pg", n, 2 * old.seconds(n), now=later)
    new = ex.model.line("join_pg")
    assert new.a == pytest.approx(2 * old.a, rel=1e-6)
    assert new.b == pytest.approx(2 * old.b, rel=1e-6)
    assert ex.model.scales["fast@m1"] == pytest.approx(1.0, abs=1e-3)
    assert ex.model.edge_line("join_pg", "fast@m1").seconds(3000.0) == pytest.approx(
        2 * old.seconds(3000.0), rel=1e-3)  # what its own pushes took, before and after
    assert ex.model.scales["slow@m1"] == pytest.approx(1.5, abs=1e-3)
    assert ex.model.scales["u@m2"] == pytest.approx(3.0, abs=1e-3)
    assert ex.model.scales["young@m1"] == pytest.approx(1.75, abs=1e-3)  # its one push
    assert "unmeasured@m1" not in ex.model.scales


def test_a_withdrawn_vertex_takes_what_was_learnt_of_it_along() -> None:
    """Two vertices measured at twice their line; the plan taken up next keeps only one:
    the other's scale and its measurements go (a later vertex of that label is scaled to its
    own pushes only), the kept one's stay."""
    ex = Executor(TOPOLOGY, TimeModel())
    line = ex.model.line("union")
    for label in ("kept@m1", "gone@m1"):
        for i in range(SCALE_POINTS):
            n = 100.0 * (i + 1)
            ex.learner.learn_vertex(label, "union", n, 2 * line.seconds(n), now=0.0)
    assert set(ex.model.scales) == {"kept@m1", "gone@m1"}
    ex.learner.forget({"kept@m1", "other@m2"})
    assert set(ex.model.scales) == {"kept@m1"}
    learnt = ex.learner
    assert set(learnt.vertex_points) == set(learnt.vertex_measured) == set(learnt.vertex_kind)
    assert set(learnt.vertex_kind) == {"kept@m1"}
    ex.learner.learn_vertex("gone@m1", "union", 100.0, 3 * line.seconds(100.0), now=0.0)
    assert ex.model.scales["gone@m1"] == pytest.approx(3.0, abs=1e-3)  # its own push only
    assert ex.learner.vertex_measured["gone@m1"] == 1


def test_a_line_learnt_under_a_load_that_went_returns_to_the_calibrated_one() -> None:
    """Lines re-fitted while readers saturated the box (Fig. 14: 260× the calibrated
    CopyDelta) must not outlive what they measured. Withdrawing the last vertex of a kind
    takes its line back to the calibrated one at once, with its measurements, and the
    dispatch overhead once nothing measured is left; a kind still running but not measured
    within MODEL_MEMORY_S goes back at the scheduler's next `expire`, and a kind measured
    recently keeps its line."""
    calibrated = TimeModel()
    ex = Executor(TOPOLOGY, calibrated)
    for i in range(20):
        n = 100.0 * (i + 1)
        ex.learner.learn_vertex("j@m1", "join_pg", n, 0.9 + 1e-3 * n, now=0.0)
        ex.learner.learn_line("join_pg", n, 0.9 + 1e-3 * n, now=0.0)
        ex.learner.learn_vertex("d@m2", "delta_to_rel", n, 0.7 + 1e-3 * n, now=0.0)
        ex.learner.learn_line("delta_to_rel", n, 0.7 + 1e-3 * n, now=0.0)
        ex.learner.learn_dispatch(0.5)
    assert ex.model.line("join_pg").a == pytest.approx(0.9)
    assert ex.model.line("delta_to_rel").a == pytest.approx(0.7)
    assert ex.model.dispatch_s == pytest.approx(0.5) and ex.refits == 2
    ex.learner.forget({"d@m2"})  # the join's sharing withdrawn, the DeltaToRel's still running
    assert ex.model.line("join_pg") == calibrated.line("join_pg")
    assert "join_pg" not in ex.learner.points
    assert ex.model.line("delta_to_rel").a == pytest.approx(0.7)
    assert ex.model.dispatch_s == pytest.approx(0.5)  # the DeltaToRel's pushes measure it
    ex.learner.expire(now=MODEL_MEMORY_S - 1.0)  # measured within the memory: kept
    assert ex.model.line("delta_to_rel").a == pytest.approx(0.7)
    ex.learner.expire(now=MODEL_MEMORY_S + 1.0)
    assert ex.model == calibrated and not ex.learner.points and not ex.learner.dispatch
    for i in range(19):  # learnt again from scratch: 20 new measurements before a re-fit
        ex.learner.learn_line("join_pg", 100.0 * (i + 1), 0.9 + 1e-3 * 100.0 * (i + 1), now=400.0)
    assert ex.model.line("join_pg") == calibrated.line("join_pg")


def test_a_machine_keeps_the_pushes_of_its_longest_window_and_no_more() -> None:
    """Every push's operator seconds were kept by `maxlen` alone (100,000 a machine): `serve`
    grew by 8 MB over the hour's long run, and every admission copied them. Now what is older
    than the longest window any measure reads goes, and the measures read the same."""
    meter = BusyMeter(["m1"])
    for i in range(1000):  # a push every second for 1000 s, 0.1 s each
        meter.note("m1", float(i), 0.1, "v")
    kept = meter.pushes()["m1"]
    assert len(kept) == KEEP_S + 1 and kept[0][0] == 999 - KEEP_S
    # the longest window any measure reads still has all its pushes
    load = steady_load({"m1": kept}, [], now=999.0, window_s=SUSTAINED_S)
    assert load is not None and load["m1"] == pytest.approx(0.1, rel=0.01)


def test_an_answer_no_one_claims_is_let_go_and_a_claimed_one_is_taken_once() -> None:
    answers = Inbox()
    late = Done("late", "m1", 0.1)  # its waiter gave up before it came
    answers.put(late, now=0.0)
    answers.put(Done("mine", "m1", 0.2), now=ANSWER_KEEP_S / 2)
    assert answers.take("mine") == (Done("mine", "m1", 0.2), ANSWER_KEEP_S / 2)
    assert answers.take("mine") is None  # taken once
    assert set(answers.held()) == {"late"}
    answers.put(Done("next", "m1", 0.3), now=ANSWER_KEEP_S + 1.0)  # the late one has aged out
    assert set(answers.held()) == {"next"}


def test_an_answer_that_came_twice_does_not_shield_older_ones_from_going() -> None:
    answers = Inbox()
    answers.put(Done("twice", "m1", 0.1), now=0.0)
    answers.put(Done("once", "m1", 0.1), now=100.0)
    answers.put(Done("twice", "m1", 0.1), now=500.0)  # redelivered: now the newest
    answers.put(Done("next", "m1", 0.1), now=ANSWER_KEEP_S + 150.0)
    assert list(answers.held()) == ["twice", "next"]


def test_skew_readings_are_pooled_so_more_of_them_steady_k_instead_of_raising_it() -> None:
    """`skew.merge_skews`: K is all the rows the changes met over all they were promised, an
    earlier reading weighing `DECAY` times the next. Keeping the highest reading of a
    heavy-tailed sample (before) rose with every reading: S14 was charged 3–5× its load."""
    key = skew_key("tweets", "uid", "loc", "uid")
    # nine readings in ten miss the heaviest users (K 5), one meets them (K 70): mean 11.5
    readings = [Reading(500.0, 100.0)] * 9 + [Reading(7000.0, 100.0)]
    pooled: dict[str, Reading] = {}
    for r in readings * 5:
        pooled = merge_skews(pooled, {key: r})
    assert max(r.k for r in readings) == 70.0  # what was kept before
    assert 5.0 < pooled[key].k < 2 * 11.5
    unweighted: dict[str, Reading] = {}
    for r in readings * 5:
        unweighted = merge_skews(unweighted, {key: r}, decay=1.0)
    assert unweighted[key].k == pytest.approx(11.5)  # without decay: the mean itself
    # a reading of many changes counts for more than one of a few
    few, many = Reading(100.0, 10.0), Reading(1000.0, 1000.0)
    assert merge_skews({key: few}, {key: many}, decay=1.0)[key].k == pytest.approx(1100 / 1010)
    # the kept one weighs DECAY against the new one; other keys are left as they were
    other = skew_key("a", "x", "b", "y")
    both = merge_skews({key: Reading(10.0, 1.0), other: few}, {key: Reading(1.0, 1.0)})
    assert both[key].k == pytest.approx((10 * DECAY + 1) / (DECAY + 1))
    assert both[other] == few
    # as kept in the catalog; a bare K (kept before pooling) weighs as one promised row
    assert Reading.from_json(many.to_json()) == many
    assert Reading.from_json(25.8) == Reading(25.8, 1.0)
    assert Reading(0.0, 40.0).k == K_RANGE[0] and Reading(1e9, 1.0).k == K_RANGE[1]
    assert Reading.from_json([5.0, 0.0]).k == 1.0  # an option edited by hand: uniform


def _s1_alone(machines: int = 1) -> PhysicalPlan:
    """S1 at SLA 10 s, alone in D over `machines` machines of the paper's catalog."""
    catalog = paper_catalog(machines=machines)
    spec = next(s for s in table1() if s.name == "S1")
    admission = admit(GlobalPlan(), catalog, Sharing("S1", spec.sql, 10, 0.01))
    assert admission.admitted, admission.reason
    return physical_plan(admission.plan, catalog.schemas())


def test_a_pushed_mv_is_not_pushed_again_before_its_heartbeat_comes() -> None:
    """The main command's push log had one push in ten of its 10-s sharings a second after
    the one before: the tick after a PUSH_DONE still saw the MV's TS of before the push, until
    the agent's heartbeat after it came. The answer's TS counts at once; a heartbeat read
    before the answer came does not take it back, one read after it is believed."""
    phys = _s1_alone()
    entry = phys.plan.sharing("S1")
    mv_key = (entry.mv.machine, phys.vertices[entry.mv].ts_key)
    now = datetime.now(UTC)
    ex = Executor(TOPOLOGY, TimeModel())
    ex.version, ex.plan = 1, phys
    stamps = {phys.vertices[s].ts_key: now for s in entry.sources}
    stamps[mv_key[1]] = now - timedelta(seconds=9)
    ex.clock.learn("m1", stamps, now - timedelta(seconds=1))
    ex.tracked["S1"] = tr = Tracked("S1", 10.0)
    assert ex.scheduler.target(tr) == now  # 9 s behind at SLA 10 s: due
    spec = PushSpec(1, phys, frozenset(), now, "S1")
    ex.pushes.record(spec, entry.mv, PushDone("p1", entry.mv.label, now, 0.01, 0, 0))
    assert ex.clock.get(mv_key) == now and ex.scheduler.target(tr) is None
    ex.clock.learn("m1", stamps, now - timedelta(seconds=0.5))  # read before it
    assert ex.clock.get(mv_key) == now and ex.scheduler.target(tr) is None
    later = datetime.now(UTC) + timedelta(seconds=0.1)
    ex.clock.learn("m1", stamps, later)  # read after the answer: the machine's word
    assert ex.clock.get(mv_key) == now - timedelta(seconds=9)
    assert ex.scheduler.target(tr) == now and not ex.clock.pushed_ahead()
    ex.pushes.record(spec, entry.mv, PushDone("p2", entry.mv.label, now, 0.01, 0, 0))
    assert mv_key in ex.clock.pushed_ahead()  # a heartbeat without the vertex: dropped
    ex.clock.learn("m1", {k: v for k, v in stamps.items() if k != mv_key[1]},
                         later + timedelta(seconds=1))
    assert ex.clock.get(mv_key) is None and not ex.clock.pushed_ahead()  # and forgotten


def test_a_push_over_a_span_without_changes_scales_its_vertex_but_not_the_line() -> None:
    """The load model charges a vertex's fixed cost at every push, also those that find no
    change: a push that advanced its vertex over a span with no rows is part of what the
    vertex's scale averages (`users@m1` was charged 15 ms a push, scaled by its pushes with
    rows, where its pushes took 8.9 ms); one that found the vertex there already did nothing
    and counts for nothing; neither moves its kind's line, fitted to sizes."""
    phys = _s1_alone()
    entry = phys.plan.sharing("S1")
    v = entry.mv
    kind = edge_kind(phys.incoming(v))  # type: ignore[arg-type]
    ex = Executor(TOPOLOGY, TimeModel())
    line = ex.model.line(kind)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    full = line.seconds(1000.0)

    def done(i: int, rows: int, seconds: float, moved: bool) -> PushDone:
        frm = t0 + timedelta(seconds=i)
        return PushDone(f"p{i}", v.label, frm, seconds, rows, rows, 0, None, frm,
                        frm + timedelta(seconds=1 if moved else 0))

    spec = PushSpec(1, phys, frozenset(), t0, "S1")
    ex.pushes.record(spec, v, done(0, 1000, 2 * full, True))
    assert ex.model.scales[v.label] == pytest.approx(2.0, abs=1e-3)
    ex.pushes.record(spec, v, done(1, 0, 0.0, False))  # found it there: nothing
    assert ex.model.scales[v.label] == pytest.approx(2.0, abs=1e-3)
    ex.pushes.record(spec, v, done(2, 0, 0.5 * line.seconds(0.0), True))
    expected = (2 * full + 0.5 * line.seconds(0.0)) / (full + line.seconds(0.0))
    assert ex.model.scales[v.label] == pytest.approx(expected, abs=1e-3)
    assert ex.model.scales[v.label] < 2.0 and ex.model.line(kind) == line
    assert len(ex.learner.points[kind]) == 1  # the line's points: the push with rows only


def test_a_late_push_its_agent_holds_is_waited_for_not_sent_again() -> None:
    """Under overload a push's answer comes after `push_timeout_s`: sent again, the copy
    queued behind the first, waited for its lock and failed. A push the agent's heartbeat
    says it holds is waited for; one it does not hold is sent again as before (here, with
    no retry left, the push fails)."""
    phys = _s1_alone()
    vertices = len(phys.plan.advanced_by({phys.plan.sharing("S1").mv}))
    assert _late_answers(phys, holds=True) == (True, vertices)  # each sent once, waited for
    assert _late_answers(phys, holds=False)[0] is False  # not held: lost, out of retries


def _late_answers(phys: PhysicalPlan, holds: bool) -> tuple[bool, int]:
    """S1's push, every answer 0.5 s after its command against a 0.2-s timeout, the agent
    saying it holds each command until it has answered (`holds`) or saying nothing: whether
    the push succeeded, and how many commands were sent."""
    inbox, stop = Inbox(), threading.Event()
    sent: list[Push] = []
    held: set[str] = set()

    def answer(c: Push) -> None:  # as an agent: answered, then no longer held
        inbox.put(PushDone(c.id, c.vertex, c.to_ts, 0.5, 0, 0))
        held.discard(c.id)

    def send(queue: str, command: object) -> None:
        assert isinstance(command, Push)
        sent.append(command)
        held.add(command.id)
        threading.Timer(0.5, answer, (command,)).start()

    flow = Dataflow(send, inbox, stop, push_timeout_s=0.2, retries=0,
                    holding=lambda machine, pid: holds and pid in held)
    spec = PushSpec(1, phys, frozenset({phys.plan.sharing("S1").mv}), datetime.now(UTC), "S1")
    try:
        return flow.run(spec), len(sent)
    finally:
        stop.set()


def test_a_command_unanswered_across_a_broker_reconnection_is_sent_again_at_once() -> None:
    """A broker that restarts loses the non-persistent commands it held: the dataflow sends
    each unanswered one again as soon as the connection is back, without waiting out its
    timeout and without counting it as a retry; a reconnection after its answer changes
    nothing."""
    phys = _s1_alone()
    entry = phys.plan.sharing("S1")
    inbox, stop, epoch = Inbox(), threading.Event(), [0]
    sent: list[Push] = []

    def send(queue: str, command: object) -> None:
        assert isinstance(command, Push)
        sent.append(command)
        if len(sent) == 1:
            epoch[0] += 1  # the first is lost with the broker, which comes back
            return
        inbox.put(PushDone(command.id, command.vertex, command.to_ts, 0.01, 0, 0))

    flow = Dataflow(send, inbox, stop, push_timeout_s=60.0, retries=0,
                    epoch=lambda: epoch[0])
    started = time.monotonic()
    spec = PushSpec(1, phys, frozenset({entry.mv}), datetime.now(UTC), "S1")
    assert flow.run(spec)  # retries=0: a resend counted as a retry would fail the push
    assert time.monotonic() - started < 10.0  # not after the 60-s timeout
    again = [c for c in sent[1:] if c.vertex == sent[0].vertex]
    assert len(again) == 1 and again[0].id != sent[0].id
    assert len(sent) == len(phys.plan.advanced_by({entry.mv})) + 1


def test_a_refused_skip_is_left_for_the_next_push_not_sent_again() -> None:
    """S1's push by the recompute path, its agent refusing every skip (a deploy's lease on
    the machine): the MV gets to `t`, each skip is sent once — the union's, then the joins'
    that wait for it — and left where it is, and the push counts as done. The same refusal
    without `deferred` is an error: retried, then the push fails; and so is `deferred` for a
    vertex the push does not skip (only a skip may be left behind)."""
    phys = _s1_alone()
    mv = phys.plan.sharing("S1").mv
    modes = recompute_modes(phys.plan, phys.plan.advanced_by({mv}))
    skips = {v for v, m in modes.items() if m == "skip"}
    assert mv in modes and len(skips) == 3
    left: list[str] = []
    ok, skipped, reached = _skips_refused(phys, modes, deferred=True, left=left)
    assert ok
    assert sorted(skipped) == sorted(v.label for v in skips)  # each once
    assert sorted(left) == sorted(skipped)  # and each told as left behind
    union = next(v for v in skips if not any(s in skips for s in readers(phys.plan, v)))
    assert skipped[0] == union.label  # the joins' skips waited for it
    assert mv.label in reached and not set(reached) & set(skipped)
    ok, skipped, _ = _skips_refused(phys, modes, deferred=False, left=left)
    assert not ok and len(left) == len(skips)  # none more left
    assert len(skipped) == 2 and len(set(skipped)) == 1  # retried once, then the push failed
    ok, refused, reached = _skips_refused(phys, {}, deferred=True, mode="", left=left)
    assert not ok and mv.label not in reached and len(left) == len(skips)  # none left
    assert refused and set(Counter(refused).values()) == {2}  # each retried once, not left


def test_a_stale_vertex_fails_the_push_at_once() -> None:
    """An agent answering that a vertex was stale (`AgentFailure.stale`: a relation to
    recompute, a delta a crash emptied) fails the push at its first answer, no command sent
    again: the same mode would be refused again until the executor has read the stale
    vertices and priced the push anew. Any other error is retried."""
    phys = _s1_alone()
    ok, refused, reached = _skips_refused(phys, {}, deferred=False, mode="", stale=True)
    assert not ok and refused and set(Counter(refused).values()) == {1}
    assert phys.plan.sharing("S1").mv.label not in reached
    ok, refused, _ = _skips_refused(phys, {}, deferred=False, mode="")
    assert not ok and set(Counter(refused).values()) == {2}  # retried once, then failed


def test_a_push_through_a_delta_left_behind_is_priced_from_its_ts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The executor told that a refused skip left a delta of S1's push below `t` reads that
    delta's TS when it next chooses the push's path, and counts the rows of the bases below
    it from there, the others from the MV's TS. The delta is forgotten once it has reached
    that `t` — not merely the MV's TS of a later push, and not if left behind again while
    its TS was being read — and kept while its machine cannot be read."""
    from smile.errors import SmileError
    from smile.executor import paths
    from smile.optimizer.recompute import update_rates

    phys = _s1_alone(machines=3)  # socnet's delta copied to users' machine
    mv = phys.plan.sharing("S1").mv
    modes = recompute_modes(phys.plan, phys.plan.advanced_by({mv}))
    bases = update_rates(phys.plan, [mv])
    lagging = next(v for v, m in sorted(modes.items()) if m == "skip"
                   and phys.plan.ancestors(v) & bases.keys() != bases.keys())
    below = phys.plan.ancestors(lagging) & bases.keys()
    assert below
    until = datetime.now(UTC)
    since, back = until - timedelta(seconds=10), until - timedelta(seconds=60)
    left_at = until - timedelta(seconds=5)
    at: dict[str, object] = {"ts": back}
    reads: list[str] = []
    chooser = paths.PathChooser(TOPOLOGY, TimeModel)

    def ts_of(sessions: object, machine: str, key: str) -> datetime:
        reads.append(key)
        if at.get("again"):  # a push leaves it behind again meanwhile
            chooser.left_behind(lagging, left_at)
        if isinstance(at["ts"], Exception):
            raise at["ts"]
        assert isinstance(at["ts"], datetime)
        return at["ts"]

    counted: dict[str, datetime] = {}

    def rows_between(sessions: object, machine: str, table: tuple[str, str], lo: datetime,
                     hi: datetime) -> int:
        assert hi == until
        counted[table[1]] = lo
        return 0

    monkeypatch.setattr(paths, "vertex_timestamp", ts_of)
    monkeypatch.setattr(paths, "rows_between", rows_between)
    monkeypatch.setattr(paths, "stale_vertices", lambda sessions, machine: [])
    monkeypatch.setattr(paths.table_stats, "relation_rows", lambda conn, tables: {})
    monkeypatch.setattr(paths.Sessions, "get", lambda self, machine: None)
    assert chooser.behind_at(phys, [mv], since) == {} and not reads  # nothing told
    chooser.left_behind(lagging, left_at)
    chooser.choose(phys, [mv], 1.0, since=since, until=until)
    assert reads == [phys.vertices[lagging].ts_key]
    assert counted == {phys.vertices[s].table[1]: back if s in below else since for s in bases}
    at["ts"] = SmileError("cannot connect to m1")  # unreachable: left out, kept
    assert chooser.behind_at(phys, [mv], since) == {} and lagging in chooser.behind
    at["ts"] = since + timedelta(seconds=1)  # past the MV's TS, short of where it was left
    assert chooser.behind_at(phys, [mv], since) == {} and lagging in chooser.behind
    at.update(ts=left_at, again=True)  # there, but left behind again meanwhile
    assert chooser.behind_at(phys, [mv], since) == {} and lagging in chooser.behind
    at["again"] = False
    assert chooser.behind_at(phys, [mv], since) == {} and not chooser.behind


def _skips_refused(phys: PhysicalPlan, modes: dict[Vertex, Mode], deferred: bool,
                   mode: str = "skip", left: list[str] | None = None, stale: bool = False
                   ) -> tuple[bool, list[str], list[str]]:
    """S1's push in `modes`, the agent refusing every command of `mode` ('' incremental)
    (`deferred`, `stale` or as an error) and doing everything else: whether the push succeeded, the
    commands refused (labels, in order), and the vertices reached; the vertices the dataflow
    says it left behind are appended to `left`."""
    inbox, stop = Inbox(), threading.Event()
    sent: list[Push] = []
    reached: list[str] = []

    def send(queue: str, command: object) -> None:
        assert isinstance(command, Push)
        sent.append(command)
        if command.mode == mode:
            inbox.put(AgentFailure(command.id, "m1", "cannot skip: lease:7 reads it",
                                   command.vertex, deferred=deferred, stale=stale))
        else:
            inbox.put(PushDone(command.id, command.vertex, command.to_ts, 0.01, 0, 0))

    flow = Dataflow(send, inbox, stop, push_timeout_s=5.0, retries=1,
                    on_left=None if left is None else lambda v, t: left.append(v.label))
    spec = PushSpec(1, phys, frozenset({phys.plan.sharing("S1").mv}), datetime.now(UTC), "S1",
                    modes=modes)
    try:
        ok = flow.run(spec, lambda v: reached.append(v.label))
    finally:
        stop.set()
    return ok, [c.vertex for c in sent if c.mode == mode], reached
