"""The executor's pure parts: push levels in topological order, the online re-fit of edge lines
and of the dispatch overhead, the time model's JSON with the dispatch overhead. No services."""

from __future__ import annotations

from smile.costmodel.time_model import DISPATCH_S, TimeModel
from smile.dataset.catalog_model import paper_catalog
from smile.dataset.sharings import table1
from smile.deploy.physical import physical_plan
from smile.executor.scheduler import Executor, push_levels
from smile.optimizer.admission import plan_sharing
from smile.optimizer.sharing import Sharing
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
        ex._learn("join_pg", 100.0 * (i + 1), 0.05 + 1e-4 * 100 * (i + 1))
    assert ex.model.line("join_pg") == before and ex.refits == 0  # not yet: every 20
    ex._learn("join_pg", 2000.0, 0.05 + 1e-4 * 2000)
    line = ex.model.line("join_pg")
    assert ex.refits == 1
    assert abs(line.a - 0.05) < 1e-6 and abs(line.b - 1e-4) < 1e-9


def test_dispatch_overhead_is_the_median_of_what_was_measured() -> None:
    ex = Executor(TOPOLOGY, TimeModel())
    for i in range(20):
        ex._learn_dispatch(0.003 if i % 2 else 0.005)
    assert abs(ex.model.dispatch_s - 0.004) < 1e-9
    assert ex.model.seconds("union", 0) == ex.model.line("union").a + ex.model.dispatch_s


def test_time_model_json_keeps_the_dispatch_overhead() -> None:
    model = TimeModel(dispatch_s=0.007)
    again = TimeModel.from_json(model.to_json())
    assert again == model
    assert TimeModel.from_json({}).dispatch_s == DISPATCH_S
