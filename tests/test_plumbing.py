"""Plumbing and hill-climbing on the global plan D (paper §7, docs/design/semantics.md §8), and
the Fig. 12–13 benchmark: properties over random small instances (hill-climbing never raises
COST, keeps every sharing within its SLA and every machine within its bound, never does worse
than nothing against the exact ILP's objective over the same candidates, and leaves D an
acyclic plan whose every MV still reads all its sources), plus the benchmark on Table 1.

Pure: no database, broker or Spark.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from smile.bench.plumbing import bench_plumbing
from smile.costmodel.prices import Prices
from smile.costmodel.time_model import TimeModel
from smile.dataset.catalog_model import paper_catalog
from smile.dataset.sharings import table1
from smile.optimizer.admission import plan_sharing
from smile.optimizer.catalog import CatalogSnapshot, ColumnStats, Machine
from smile.optimizer.dp_context import Reuse
from smile.optimizer.expr import Expr, Part
from smile.optimizer.global_plan import GlobalPlan
from smile.optimizer.hill_climb import hill_climb
from smile.optimizer.ilp import solve
from smile.optimizer.load import assess
from smile.optimizer.plan import CopyDelta, Vertex
from smile.optimizer.plumbing import Context, candidates, covering
from smile.optimizer.sharing import Sharing
from tests.test_optimizer import random_relation

if TYPE_CHECKING:
    from pathlib import Path

MODEL = TimeModel()
EXAMPLES = int(os.environ.get("SMILE_PROPERTY_EXAMPLES", "20"))
SLAS = (5.0, 20.0, 60.0)
TOL = 1e-12


@dataclass(frozen=True)
class Instance:
    catalog: CatalogSnapshot
    sharings: tuple[Sharing, ...]


def _tiny_catalog(machines: int, relations: int, draw: st.DrawFn) -> CatalogSnapshot:
    rels = [random_relation(draw, i, machines, [1.0, 20.0, 200.0], [100.0, 1e3], 0,
                            ColumnStats("w", "integer", 1000, 0, 4)) for i in range(relations)]
    return CatalogSnapshot(
        tuple(Machine(f"m{i + 1}", cpu_cores=1e6, disk_gb=1e9, network_mb_s=1e9)
              for i in range(machines)),
        tuple(rels))


def _tiny_sql(rels: list[int], wide: list[bool]) -> str:
    cols = [f"t{i}.v AS v{i}" + (f", t{i}.w AS w{i}" if w else "")
            for i, w in zip(rels, wide, strict=True)]
    preds = [f"t{rels[0]}.k = t{i}.k" for i in rels[1:]]
    return (f"SELECT {', '.join(cols)} FROM {', '.join(f'r{i} t{i}' for i in rels)} "
            f"WHERE {' AND '.join(preds)}")


@st.composite
def instances(draw: st.DrawFn) -> Instance:
    """2–3 machines, 2–4 relations, 3–6 sharings over overlapping sets of them, ample
    capacity: either the paper's relations (Table 1's sharings that read only the chosen
    ones, repeats allowed, MVs anywhere) or a tiny hand-made catalog joined on one key."""
    machines = draw(st.integers(2, 3))
    n = draw(st.integers(3, 6))
    slas = [draw(st.sampled_from(SLAS)) for _ in range(n)]
    mvs = [f"m{draw(st.integers(1, machines))}" for _ in range(n)]
    if draw(st.booleans()):
        cat = paper_catalog(machines=machines, tweet_rate=draw(st.sampled_from([10.0, 100.0])),
                            cores=1e6)
        cat = CatalogSnapshot(tuple(Machine(m.name, cpu_cores=1e6, disk_gb=1e9,
                                            network_mb_s=1e9) for m in cat.machines),
                              cat.relations)
        families = (("users", "tweets", "curloc", "urls"), ("tweets", "curloc", "photos"),
                    ("users", "socnet", "loc"), ("tweets", "hashtags", "foursq", "curloc"))
        family = set(draw(st.sampled_from(families)))
        eligible = [s for s in table1() if set(s.relations) <= family]
        specs = [draw(st.sampled_from(eligible)) for _ in range(n)]
        sqls = [s.sql for s in specs]
    else:
        nrel = draw(st.integers(2, 4))
        cat = _tiny_catalog(machines, nrel, draw)
        sqls = []
        for _ in range(n):
            rels = sorted(draw(st.sets(st.integers(0, nrel - 1), min_size=2, max_size=3)))
            sqls.append(_tiny_sql(rels, [draw(st.booleans()) for _ in rels]))
    return Instance(cat, tuple(Sharing(f"G{i + 1}", sql, sla, 0.001, mv)
                               for i, (sql, sla, mv) in enumerate(zip(sqls, slas, mvs,
                                                                      strict=True))))


def _merged(inst: Instance, ctx: Context) -> GlobalPlan:
    """D: every admitted sharing's DPD plan (DPT's when DPD's misses the SLA), merged."""
    d = GlobalPlan()
    for sharing in inst.sharings:
        decision = plan_sharing(inst.catalog, sharing, ctx.model, ctx.prices)
        if not decision.admitted or decision.dpt is None:
            continue
        summary = decision.dpd if decision.dpd and decision.dpd.cp_s <= sharing.staleness_s \
            else decision.dpt
        d = d.add(summary.plan, decision.entry(summary))
    return d


PROPERTY = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(instances())
def test_hill_climbing_never_raises_cost_and_keeps_slas_and_bounds(inst: Instance) -> None:
    ctx = Context(inst.catalog, MODEL, Prices())
    d = _merged(inst, ctx)
    before = assess(d, ctx.catalog, ctx.model, ctx.prices)
    climb = hill_climb(d, ctx)
    costs = [t[2] for t in climb.trace]
    assert math.isclose(costs[0], before.total, rel_tol=1e-12)
    assert all(b <= a for a, b in itertools.pairwise(costs))
    after = assess(climb.plan, ctx.catalog, ctx.model, ctx.prices)
    assert after.total <= before.total
    assert math.isclose(after.total, costs[-1], rel_tol=1e-12)
    assert len(climb.trace) == len(climb.applied) + 1
    for s, cp in after.cps.items():
        # merging alone may route a sharing through a slower copy of a shared vertex;
        # hill-climbing must never be what puts it (further) over its SLA
        assert cp <= max(after.slas[s], before.cps[s]) + TOL, (s, cp, after.slas[s])
    assert not after.over()


@PROPERTY
@given(instances())
def test_ilp_objective_is_at_least_one_round_of_hill_climbing(inst: Instance) -> None:
    ctx = Context(inst.catalog, MODEL, Prices())
    d = _merged(inst, ctx)
    cands = candidates(d, ctx)
    exact = solve(d, ctx, cands, 20)
    assume(exact.optimal)  # CBC stopped by its time limit (a loaded machine) proves nothing
    one = hill_climb(d, ctx, rounds=1)
    assert all(p in cands for p in one.applied)
    greedy = sum(p.benefit for p in one.applied)
    # CBC's own tolerances make its optimum exact to ~1e-8 relative, not to the last bit
    assert exact.objective >= greedy - 1e-6 * max(abs(greedy), abs(exact.objective))


@PROPERTY
@given(instances())
def test_hill_climbed_plan_is_acyclic_and_every_mv_reads_its_sources(inst: Instance) -> None:
    ctx = Context(inst.catalog, MODEL, Prices())
    merged = _merged(inst, ctx)
    assert merged.problems() == []
    climbed = hill_climb(merged, ctx).plan
    assert climbed.problems() == []  # every edge computes its destination from what it reads
    climbed.order()  # a cycle raises PlanError
    for entry in climbed.sharings:
        assert set(entry.sources) <= climbed.ancestors(entry.mv), entry.name
        assert entry.mv in climbed.incoming


@PROPERTY
@given(instances())
def test_plans_made_on_d_are_sound_and_charge_only_what_they_add(inst: Instance) -> None:
    """Each sharing planned on the D of those before it (`Reuse`, as admission does): every
    plan computes its MV from its sources by itself (it carries D's route to what it reads),
    D stays sound, a plan's added cost never exceeds its own, and hill-climbing such a D
    keeps it sound."""
    ctx = Context(inst.catalog, MODEL, Prices())
    d = GlobalPlan()
    for sharing in inst.sharings:
        decision = plan_sharing(inst.catalog, sharing, ctx.model, ctx.prices,
                                reuse=Reuse.of(d, ctx.model))
        if not decision.admitted or decision.chosen is None:
            continue
        chosen = decision.chosen
        own = GlobalPlan().add(chosen.plan, decision.entry())
        assert own.problems() == [], sharing.name
        assert set(chosen.plan.sources) <= own.ancestors(chosen.plan.mv)
        assert chosen.added_cost_per_s is not None
        assert chosen.added_cost_per_s <= chosen.cost_per_s + TOL
        d = d.add(chosen.plan, decision.entry())
        assert d.problems() == [], sharing.name
    climbed = hill_climb(d, ctx).plan
    assert climbed.problems() == []
    for entry in climbed.sharings:
        assert set(entry.sources) <= climbed.ancestors(entry.mv), entry.name


REQUIRED = ("sharings", "dpt_cost", "dpd_cost", "dpt_hc_cost", "dpd_hc_cost",
            "vertices_before", "vertices_after", "edges_before", "edges_after",
            "plumbings_applied", "ilp_cost", "ilp_sharings", "hc_ilp_gap", "hc_seconds",
            "dpd_merged_cost", "dpt_merged_cost", "vertices_merged", "edges_merged",
            "hc_over_merged", "hc_over_separate", "ilp_objective", "hc_objective",
            "ilp_seconds", "ilp_status", "goals", "dpd_on_d_cost", "dpd_on_d_hc_cost",
            "vertices_on_d", "vertices_on_d_hc")


def _check_bench(doc: dict[str, object], sharings: int, tmp_path: Path) -> None:
    assert set(REQUIRED) <= set(doc)
    json.dumps(doc)  # printable as is
    for key in REQUIRED:
        if key not in ("ilp_status", "goals"):
            value = doc[key]
            assert isinstance(value, (int, float)) and math.isfinite(value), (key, value)
    assert doc["sharings"] == sharings
    assert isinstance(doc["dpd_hc_cost"], float) and isinstance(doc["dpd_cost"], float)
    assert doc["dpd_hc_cost"] < doc["dpd_cost"]
    # R̂'s upkeep once per relation, not once per plan: never dearer than every plan its own
    assert 0 < doc["dpd_separate_bases_once_cost"] <= doc["dpd_cost"]  # type: ignore[operator]
    ratio = doc["dpd_hc_cost"] / doc["dpd_separate_bases_once_cost"]  # type: ignore[operator]
    assert abs(doc["hc_over_separate_bases_once"] - ratio) <= 1e-4 * ratio  # type: ignore[operator]
    assert 1 <= doc["ilp_sharings"] <= sharings  # type: ignore[operator]
    # planned on D, then hill-climbed: never dearer than before the climb, fewer vertices
    assert doc["dpd_on_d_hc_cost"] <= doc["dpd_on_d_cost"]  # type: ignore[operator]
    assert doc["vertices_on_d"] < doc["vertices_merged"]  # type: ignore[operator]
    goals = doc["goals"]
    assert isinstance(goals, dict) and all(isinstance(v, bool) for v in goals.values())
    figures = doc["figures"]
    assert isinstance(figures, dict)
    for name in ("fig12", "fig13"):
        path = tmp_path / f"{name}.png"
        assert figures[name] == str(path)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_plumbing_on_table1(tmp_path: Path) -> None:
    _check_bench(bench_plumbing(ilp_limit_s=20, out_dir=tmp_path), 25, tmp_path)


def test_bench_plumbing_on_a_subset(tmp_path: Path) -> None:
    doc = bench_plumbing(machines=3, sharings=10, ilp_limit_s=20, out_dir=tmp_path)
    _check_bench(doc, 10, tmp_path)
    assert doc["machines"] == 3


def test_a_narrower_copy_never_covers_a_wider_vertex() -> None:
    """A copy of a relation keeping fewer columns has the same shape (relations, joins,
    selections) as the relation as captured, but holds less than a vertex needing more
    columns: it must not feed one — by a copy, or as the delta driving a join (a live run of
    Table 1 once drove users ⋈ Δtweets with a copy of tweets lacking `uid`)."""
    def copy(columns: tuple[str, ...], machine: str) -> Vertex:
        return Vertex("delta", Expr((Part("tweets", "tweets", columns),)), machine)

    raw = Vertex("delta", Expr.base("tweets"), "m2")
    narrow, wide = copy(("text", "tid"), "m1"), copy(("text", "tid", "uid"), "m3")
    plan = GlobalPlan(tuple(
        CopyDelta(raw, v, 10.0, 8.0, (), v.expr.parts[0].columns) for v in (narrow, wide)))
    assert set(covering(plan, "delta", wide.expr)) == {raw, wide}
    assert set(covering(plan, "delta", narrow.expr)) == {raw, narrow, wide}
    assert covering(plan, "delta", copy(("text", "tid", "uid", "lang"), "m1").expr) == [raw]
    assert not covering(plan, "relation", wide.expr)
