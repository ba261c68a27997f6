"""`smile bench push`: an incremental push against PostgreSQL's own REFRESH MATERIALIZED VIEW.

Three base relations of `rows` rows each on three machines (`k`, a group `g` of 1 000 that
hashes `k`, so that changed keys spread over every group, a text `p`), and a query over them
(`QUERIES`): joined 3-way on their key; or one grouped by `g` with a count and a sum
(`aggregate`, pg_trickle's aggregate scenario), or two of them joined first (`join_aggregate`),
or joined and grouped with a min and a max (`extremes`); or (`outer`) one LEFT JOIN the other,
which lacks a tenth of the keys; a plan from the optimizer (or, `shape="in-place"`, one that
keeps no copy of a base) is installed and kept by the operators. Each of `repeat` rounds:
`fraction` of each base is updated; capture catches up; the bases' shadow copies R̂ are
advanced (capture's upkeep, paid with or without sharings, as the baseline's co-located copies
are kept up for it: timed apart); VACUUM ANALYZE and a CHECKPOINT on every machine; then the
push of every other vertex to the new watermark — as the executor runs it, each vertex once
what it waits for is there (`bench.dataflow_push`), or (`dataflow` False) one after another,
sources first — is timed against `REFRESH MATERIALIZED VIEW` of the same query over co-located
copies of the three relations (with the same updates applied), in the same run. The MV is
checked equal to the refreshed view. With `union_views` False the deltas Unions make are tables
they copy into (the paper's Union), the baseline of `smile bench push --unions both`. Figures
are the rounds' medians; the per-vertex and per-operator breakdown is the median round's
(throughput: rows each kind of edge wrote per second of its time). Each round also takes the
push's and REFRESH's CPU seconds on the box (`bench.cpu`): `cpu_speedup` is REFRESH's over the
push's, the work saved, where `speedup` is the wall time saved.

Also measured, so the speedup can be read against what is possible here, the *floor*: one
UPDATE of just the changed rows of a copy of the result, found by an index on the key, after a
checkpoint like the push — the least that any method keeping the result in a PostgreSQL table
must write. `full_refresh_s / floor_s` bounds every incremental method's speedup on this
machine.

Must not: leave its tables, publications or slots behind.
"""

from __future__ import annotations

import secrets
import statistics
import threading
import time
from collections import defaultdict
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from psycopg import sql

from smile.bench.cpu import CpuMeter, total
from smile.bench.dataflow_push import DataflowPusher, Ran
from smile.costmodel.time_model import TimeModel
from smile.db import connect
from smile.delta_capture.capturer import Capturer
from smile.delta_capture.publish import publish_relation, unpublish_relation
from smile.delta_capture.registry import SLOT
from smile.deploy.advance import advance_vertex
from smile.deploy.install import MV_SCHEMA, install_plan, stream_rows, uninstall_plan
from smile.deploy.physical import physical_plan
from smile.errors import SmileError
from smile.housekeeping.capture import Housekeeping, run_beside
from smile.operators import vertex_ts
from smile.optimizer.admission import plan_sharing
from smile.optimizer.catalog import CatalogSnapshot, ColumnStats, Machine, RelationStats
from smile.optimizer.dp_build import build_plan
from smile.optimizer.global_plan import GlobalPlan
from smile.optimizer.plan import CopyDelta
from smile.optimizer.sharing import Sharing

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from datetime import datetime

    from smile.deploy.physical import PhysicalPlan
    from smile.deploy.unlogged import Persistence
    from smile.optimizer.admission import Decision, PlanSummary
    from smile.optimizer.plan import Vertex
    from smile.optimizer.recompute import Mode
    from smile.topology import MachineEndpoint, Topology


def significant(x: float, digits: int = 3) -> float:
    """`x` to `digits` significant digits: a figure for people that never rounds a short,
    fast measurement down to 0.

    >>> significant(0.000123456), significant(2.07351), significant(0.0)
    (0.000123, 2.07, 0.0)
    """
    return float(f"{x:.{digits}g}")


def _wait_captured(conns: dict[str, Any], keys: list[tuple[str, str]], timeout: float) -> Any:
    """Until every source's watermark passes the moment this is called (on its own clock)."""
    since = {m: conns[m].execute("SELECT clock_timestamp()").fetchone()[0] for m, _ in keys}
    deadline = time.monotonic() + timeout
    while True:
        marks = {(m, k): vertex_ts.read(conns[m], k) for m, k in keys}
        if all(marks[(m, k)] >= since[m] for m, k in keys):
            return min(marks.values())
        if time.monotonic() > deadline:
            raise SmileError("capture did not catch up for the benchmark")
        time.sleep(0.1)


def _floor(conn: Any, mv: str, step: int) -> float:
    """The least any incremental method that keeps the result in a PostgreSQL table must do:
    change the result's changed rows in place, found through an index on the key — one UPDATE
    of the refreshed view's table, timed (the index is built first, untimed). `full / floor`
    bounds every incremental method's speedup on this machine."""
    table = f"{mv}_floor"
    conn.execute(sql.SQL("CREATE TABLE {} AS SELECT * FROM {}").format(
        sql.Identifier(table), sql.Identifier(mv)))
    conn.execute(sql.SQL("CREATE INDEX ON {} (k)").format(sql.Identifier(table)))
    conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(table)))
    conn.execute("CHECKPOINT")
    keys = [r[0] for r in conn.execute(sql.SQL("SELECT k FROM {} WHERE k %% %s = 0").format(
        sql.Identifier(table)), (step,))]
    started = time.perf_counter()
    conn.execute(sql.SQL("UPDATE {} SET pa = pa || 'y', pb = pb || 'y', pc = pc || 'y' "
                         "WHERE k = ANY(%s)").format(sql.Identifier(table)), (keys,))
    took = time.perf_counter() - started
    conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table)))
    return took


QUERIES = {
    "join": "SELECT a.k, a.pa, b.pb, c.pc FROM {a} a, {b} b, {c} c "
            "WHERE a.k = b.k AND b.k = c.k",
    "aggregate": "SELECT a.g, count(*) AS n, sum(length(a.pa)) AS chars FROM {a} a "
                 "GROUP BY a.g",
    "join_aggregate": "SELECT a.g, count(*) AS n, sum(length(b.pb)) AS chars "
                      "FROM {a} a JOIN {b} b ON a.k = b.k GROUP BY a.g",
    "extremes": "SELECT a.g, count(*) AS n, min(a.pa) AS lo, max(b.pb) AS hi "
                "FROM {a} a JOIN {b} b ON a.k = b.k GROUP BY a.g",
    "outer": "SELECT a.k, a.pa, b.pb FROM {a} a LEFT JOIN {b} b ON a.k = b.k",
}
"""The benchmark's sharings. The floor (one UPDATE of the result's changed rows) is measured
for the join, whose result has a row per key."""
SHAPES = ("optimizer", "in-place")
"""`optimizer`: the plan DPD chooses. `in-place`: every join step in place (paper Fig. 3a) —
each partial join runs where the relation it reads lives, reading that base through capture's
shadow R̂, so no copy of a base is kept anywhere; only the intermediate a⋈b and the MV are
maintained, on a's machine."""


def _transactions(phys: PhysicalPlan, order: list[Vertex], together: bool) -> list[list[Vertex]]:
    """The push order cut into transactions: one per vertex, or (`together`) one per run of
    consecutive vertices on one machine — each operator's own transaction then becomes a
    savepoint in it. A CopyDelta stays alone: its commit on the destination must precede the
    mirror it releases on the source."""
    runs: list[list[Vertex]] = []
    for v in order:
        alone = isinstance(phys.incoming(v), CopyDelta)
        if together and not alone and runs and runs[-1][0].machine == v.machine \
                and not isinstance(phys.incoming(runs[-1][0]), CopyDelta):
            runs[-1].append(v)
        else:
            runs.append([v])
    return runs


def pushing(topology: Topology, dataflow: bool, roll_forward: bool = True
            ) -> AbstractContextManager[DataflowPusher | None]:
    """The push's workers when it runs as a dataflow (None: one vertex after another);
    `roll_forward` False, its joins wait for the relations they probe."""
    if not dataflow:
        return nullcontext()
    return DataflowPusher({m.name: m.dsn for m in topology.machines},
                          roll_forward=roll_forward)


def _in_order(conns: dict[str, Any], phys: PhysicalPlan, pushed: list[Vertex],
              target: datetime, mode: Mapping[Vertex, Mode], one_transaction: bool
              ) -> tuple[float, list[Ran]]:
    """The push one vertex after another in the plan's order (a skipped delta after its
    readers), optionally one transaction per run of a machine's vertices: its seconds, and
    each vertex's run (as `DataflowPusher.push`)."""
    skipped = [v for v in pushed if mode.get(v) == "skip"]
    pushed = [*(v for v in pushed if v not in skipped), *reversed(skipped)]
    ran: list[Ran] = []
    started = time.perf_counter()
    for run in _transactions(phys, pushed, one_transaction):
        with conns[run[0].machine].transaction() if len(run) > 1 else nullcontext():
            for v in run:
                edge = phys.incoming(v)
                assert edge is not None
                how = mode.get(v, "incremental")
                t0 = time.perf_counter()
                moved = advance_vertex(conns, phys, v, target, mode=how)
                ran.append(Ran(v, time.perf_counter() - t0,
                               edge.kind if how == "incremental" else how,
                               moved.rows_out, moved.rows_in, t0 - started))
    return time.perf_counter() - started, ran


def _kinds(kinds: dict[str, float] | None) -> dict[str, float] | None:
    """CPU seconds by kind of process (`CpuMeter.by_kind`), those that took any."""
    return None if kinds is None else {k: significant(s) for k, s in kinds.items() if s > 0}


def _round(conns: dict[str, Any], ms: Sequence[Any], names: list[str], home: Any,
           phys: PhysicalPlan, keys: list[tuple[str, str]], order: list[Vertex], step: int,
           one_transaction: bool, mv: str, view: sql.Identifier,
           modes: Callable[[datetime], Mapping[Vertex, Mode]] | None = None,
           pusher: DataflowPusher | None = None) -> dict[str, Any]:
    """One round: every `step`-th row of each base changed (and of its co-located copy),
    captured; the shadows advanced (timed apart); VACUUM ANALYZE and a CHECKPOINT; the push
    timed against REFRESH MATERIALIZED VIEW; the MV compared with the refreshed view. With
    `modes`, each vertex is pushed in the mode it gives for the round's target (decided
    after the checkpoint, untimed). With `pusher`, the push runs as the executor's dataflow
    (`bench.dataflow_push`), else one vertex after another."""
    for m, n, c in zip(ms, names, "abc", strict=True):
        for conn, table in ((conns[m.name], n), (home, f"{n}_copy")):
            conn.execute(sql.SQL(f"UPDATE {{}} SET p{c} = p{c} || 'x' WHERE k %% %s = 0")
                         .format(sql.Identifier(table)), (step,))
    target = _wait_captured(conns, keys, 300)
    # the bases' shadow copies R̂ first: capture's upkeep, paid with or without sharings
    # (as the baseline's co-located copies are kept for it), so timed apart from the push
    started = time.perf_counter()
    for v in order:
        if phys.vertices[v].base:
            advance_vertex(conns, phys, v, target)
    upkeep = time.perf_counter() - started
    for m in ms:  # what autovacuum would do (statistics, hint bits); then a checkpoint,
        conns[m.name].execute("VACUUM ANALYZE")  # so the push and the floor both pay
        conns[m.name].execute("CHECKPOINT")  # first-touch page images alike
    timing: dict[str, float] = defaultdict(float)
    written: dict[str, int] = defaultdict(int)
    pushed = [v for v in order if not phys.vertices[v].base]
    mode = modes(target) if modes is not None else {}
    cpu = CpuMeter(conns.values())
    before = cpu.take()
    incremental, ran = pusher.push(phys, pushed, target, mode) if pusher is not None else \
        _in_order(conns, phys, pushed, target, mode, one_transaction)
    push_kinds = cpu.by_kind(before, cpu.take())
    for r in ran:
        written[r.kind] += r.rows
        timing[r.kind] += r.seconds
    before = cpu.take()
    started = time.perf_counter()
    home.execute(sql.SQL("REFRESH MATERIALIZED VIEW {}").format(sql.Identifier(mv)))
    full = time.perf_counter() - started
    refresh_kinds = cpu.by_kind(before, cpu.take())
    diff = home.execute(sql.SQL(
        "SELECT (SELECT count(*) FROM (SELECT * FROM {v} EXCEPT ALL SELECT * FROM {m}) x) + "
        "(SELECT count(*) FROM (SELECT * FROM {m} EXCEPT ALL SELECT * FROM {v}) y)").format(
        v=view, m=sql.Identifier(mv))).fetchone()
    return {
        "incremental_s": incremental, "full_refresh_s": full, "shadow_upkeep_s": upkeep,
        "push_cpu_s": total(push_kinds), "refresh_cpu_s": total(refresh_kinds),
        "push_cpu_by_kind": _kinds(push_kinds), "refresh_cpu_by_kind": _kinds(refresh_kinds),
        "mv_equals_refresh": bool(diff and diff[0] == 0),
        "operators": {k: {"seconds": significant(timing[k]), "rows": written[k],
                          "rows_per_s": round(written[k] / timing[k]) if timing[k] else None}
                      for k in sorted(timing)},
        "vertices": [{"vertex": r.vertex.label, "edge": r.kind, "seconds": significant(r.seconds),
                      "rows": r.rows, "rows_in": r.rows_in, "started_s": significant(r.started)}
                     for r in sorted(ran, key=lambda r: (r.seconds, r.vertex.label),
                                     reverse=True)],
    }


def _check(topology: Topology, shape: str, one_transaction: bool, repeat: int, query: str,
           dataflow: bool, roll_forward: str) -> None:
    """SmileError naming what is wrong with `bench_push`'s arguments, if anything."""
    if roll_forward not in ("yes", "no", "both"):
        raise SmileError(f"roll_forward: yes, no or both, not {roll_forward!r}")
    if roll_forward != "yes" and not dataflow:
        raise SmileError("joins wait or roll forward in a dataflow: not with --in-order")
    if one_transaction and dataflow:
        raise SmileError("one transaction per machine pushes one vertex after another: "
                         "it needs --in-order")
    if query not in QUERIES:
        raise SmileError(f"no query {query!r}; the queries are {', '.join(QUERIES)}")
    if query != "join" and shape != "optimizer":
        raise SmileError("the in-place shape is for the join query")
    if len(topology.machines) < 3:
        raise SmileError("the push benchmark needs 3 machines")
    if repeat < 1:
        raise SmileError("the push benchmark needs at least one round")
    if shape not in SHAPES:
        raise SmileError(f"no plan shape {shape!r}; the shapes are {', '.join(SHAPES)}")


def bench_push(topology: Topology, rows: int = 1_000_000, fraction: float = 0.01,
               shape: str = "optimizer", one_transaction: bool = False,
               repeat: int = 1, union_views: bool = True, query: str = "join",
               dataflow: bool = True, roll_forward: str = "yes",
               unlogged: Persistence = "unlogged") -> dict[str, Any]:
    """`roll_forward` (with the dataflow): "yes", each join starts once the deltas it reads
    are there and rolls the relation it probes forward, as the executor runs it; "no", it
    waits for that relation's DeltaToRel; "both", rounds alternate between the two, and the
    report adds the second's medians and their ratio. `unlogged`: which vertices that may
    be are UNLOGGED (`deploy.unlogged.Persistence`: all of them as plans install them, the
    relations only, none)."""
    _check(topology, shape, one_transaction, repeat, query, dataflow, roll_forward)
    tag = secrets.token_hex(3)
    ms = topology.machines[:3]
    names = [f"bp{tag}_{x}" for x in "abc"]
    conns = {m.name: connect(m.dsn, autocommit=True, what=m.name) for m in topology.machines}
    stop = threading.Event()
    threads: list[threading.Thread] = []
    report: dict[str, Any] = {"rows": rows, "fraction": fraction, "shape": shape,
                              "query": query, "repeat": repeat,
                              "one_transaction_per_machine": one_transaction,
                              "push": "dataflow" if dataflow else "in order",
                              "unions": "view" if union_views else "copy",
                              "unlogged": unlogged}
    phys: PhysicalPlan | None = None
    try:
        _bases(conns, ms, names, rows, query == "outer")
        threads = _capturers(conns, ms, stop)
        text = QUERIES[query].format(a=names[0], b=names[1], c=names[2])
        catalog = bench_catalog(topology, ms, names, rows, fraction)
        decision, plan = _planned(catalog, text, tag, shape, names)
        phys = physical_plan(GlobalPlan().add(plan.plan, decision.entry(plan)),
                             catalog.schemas(), union_views)
        report["relations_maintained"] = sum(
            1 for v in phys.vertices if not v.base and v.kind == "relation")
        keys = [(s.machine, phys.vertices[s].ts_key) for s in plan.plan.sources]
        _wait_captured(conns, keys, 120)
        started = time.perf_counter()
        install_plan(conns, phys, unlogged=unlogged)
        report["install_s"] = significant(time.perf_counter() - started)
        home = conns[plan.plan.mv.machine]
        mv = f"bench_mv_{tag}"
        _baseline(conns, ms, names, home, text, mv)
        step = max(1, round(1 / fraction))
        order = phys.order()
        ways = {"yes": (True,), "no": (False,), "both": (True, False)}[roll_forward]
        rounds: dict[bool, list[dict[str, Any]]] = {w: [] for w in ways}
        with ExitStack() as stack:
            pushers = {w: stack.enter_context(pushing(topology, dataflow, w)) for w in ways}
            for i in range(repeat * len(ways)):
                w = ways[i % len(ways)]
                rounds[w].append(_round(conns, ms, names, home, phys, keys, order, step,
                                        one_transaction, mv,
                                        sql.Identifier(MV_SCHEMA, decision.sharing.name),
                                        pusher=pushers[w]))
        floor = _floor(home, mv, step) if query == "join" else None
        pushed = len([v for v in order if not phys.vertices[v].base])
        out = report | _summary(rounds[ways[0]], floor, pushed, rows, step) | {
            "plan": decision.reason if shape == "optimizer" else "every join in place"}
        if len(ways) == 2:
            waited = _summary(rounds[False], floor, pushed, rows, step)
            out["joins_wait"] = {k: waited[k] for k in ("incremental_s", "full_refresh_s",
                                                          "speedup", "mv_equals_refresh",
                                                          "rounds", "vertices")}
            out["roll_forward_speedup"] = significant(
                waited["incremental_s"] / out["incremental_s"])
            out["mv_equals_refresh"] = out["mv_equals_refresh"] and waited["mv_equals_refresh"]
        return out
    finally:
        if phys is not None:
            uninstall_plan(conns, phys)
        stop.set()
        for t in threads:
            t.join(10)
        _dropped(conns, ms, names, tag)


def _bases(conns: dict[str, Any], ms: Sequence[Any], names: list[str], rows: int,
           sparse_b: bool = False) -> None:
    """The three base relations of `rows` rows, one per machine, published; with `sparse_b`,
    the second lacks every tenth key (an outer join then pads those)."""
    for i, (m, name, col) in enumerate(zip(ms, names, "abc", strict=True)):
        cn = conns[m.name]
        cn.execute(sql.SQL(f"CREATE TABLE {{}} (k int, g int, p{col} text)").format(
            sql.Identifier(name)))
        cn.execute(sql.SQL("INSERT INTO {} SELECT i, abs(hashint4(i) %% 1000), md5(i::text) "
                           "FROM generate_series(1, %s) i WHERE %s OR i %% 10 <> 0").format(
            sql.Identifier(name)), (rows, not (sparse_b and i == 1)))
        cn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(name)))
        publish_relation(m.dsn, f"public.{name}")


def _capturers(conns: dict[str, Any], ms: Sequence[Any], stop: threading.Event
               ) -> list[threading.Thread]:
    """Capture run here until `stop`, on each machine whose capturer the cloud does not
    already run."""
    threads = []
    for m in ms:
        if conns[m.name].execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s "
                                 "AND active", (SLOT,)).fetchone():
            continue
        t = threading.Thread(target=run_beside,
                             args=(Capturer(m.dsn), stop, Housekeeping(shadow_s=0)), daemon=True)
        t.start()
        threads.append(t)
    return threads


def bench_catalog(topology: Topology, ms: Sequence[MachineEndpoint], names: list[str],
                  rows: int, fraction: float) -> CatalogSnapshot:
    """The catalog the bench plans on: the three bases `names` of `rows` rows on `ms`, a
    `fraction` of them changed every ten seconds, the machines' cores not a limit."""
    return CatalogSnapshot(
        tuple(Machine(m.name, cpu_cores=64) for m in topology.machines),
        tuple(RelationStats(n, m.name, rows, rows * fraction / 10,
                            (ColumnStats("k", "integer", rows, 0, 4),
                             ColumnStats("g", "integer", 1000, 0, 4),
                             ColumnStats(f"p{c}", "text", rows, 0, 33)))
              for m, n, c in zip(ms, names, "abc", strict=True)))


def _planned(catalog: CatalogSnapshot, query: str, tag: str, shape: str, names: list[str]
             ) -> tuple[Decision, PlanSummary]:
    """The sharing's decision and the plan it runs: the optimizer's, or (`in-place`) every
    join where the relation it reads lives, the MV on the first relation's machine."""
    decision = plan_sharing(catalog, Sharing(f"bench_{tag}", query, 600, 0.0))
    if decision.plan is None:
        raise SmileError(f"the benchmark's sharing was rejected: {decision.reason}")
    chosen = decision.chosen
    assert chosen is not None
    if shape == "in-place":
        mv_home = catalog.relations[0].machine
        chosen = replace(chosen, algorithm="in-place", plan=build_plan(
            catalog, decision.query, decision.sharing, TimeModel(),
            tuple(next(r.alias for r in decision.query.relations if r.relation == n)
                  for n in names),
            (mv_home, mv_home), ("a", "a")))
    return decision, chosen


def _baseline(conns: dict[str, Any], ms: Sequence[Any], names: list[str], home: Any,
              query: str, mv: str) -> None:
    """The baseline on the MV's machine: co-located copies of the three relations and a
    materialized view `mv` of the same query over them."""
    for m, n, c in zip(ms, names, "abc", strict=True):
        home.execute(sql.SQL(f"CREATE TABLE {{}} (k int, g int, p{c} text)").format(
            sql.Identifier(f"{n}_copy")))
        stream_rows(conns[m.name], sql.SQL("SELECT k, g, {} FROM {}").format(
            sql.Identifier(f"p{c}"), sql.Identifier(n)), home,
            sql.Identifier(f"{n}_copy"), ["k", "g", f"p{c}"])
    copy_query = query
    for n in names:
        copy_query = copy_query.replace(f"{n} ", f"{n}_copy ")
    home.execute(f"CREATE MATERIALIZED VIEW {mv} AS {copy_query}")


def cpu_figures(push: Sequence[float | None], refresh: Sequence[float | None]
                ) -> dict[str, float | None]:
    """The medians of the pushes' and REFRESHes' CPU seconds (`bench.cpu`) and REFRESH's over
    the push's: what the push saves in work, where `speedup` says what it saves in wall time.
    None where a cluster was not measured.

    >>> cpu_figures([1.7, 1.6, 2.6], [3.3, 2.8, 2.9])
    {'push_cpu_s': 1.7, 'refresh_cpu_s': 2.9, 'cpu_speedup': 1.71}
    >>> cpu_figures([None], [None])["cpu_speedup"] is None
    True
    """
    if any(x is None for x in (*push, *refresh)) or not push or not refresh:
        return {"push_cpu_s": None, "refresh_cpu_s": None, "cpu_speedup": None}
    p = statistics.median(x for x in push if x is not None)
    r = statistics.median(x for x in refresh if x is not None)
    return {"push_cpu_s": significant(p), "refresh_cpu_s": significant(r),
            "cpu_speedup": significant(r / p) if p > 0 else None}


def _summary(rounds: list[dict[str, Any]], floor: float | None, pushed: int, rows: int,
             step: int) -> dict[str, Any]:
    """The rounds' medians, each round's figures, the floor, and the median round's
    breakdown by operator and by vertex."""
    mid = sorted(rounds, key=lambda r: r["incremental_s"])[len(rounds) // 2]
    incremental = statistics.median(r["incremental_s"] for r in rounds)
    full = statistics.median(r["full_refresh_s"] for r in rounds)
    return {
        "incremental_s": significant(incremental),
        "full_refresh_s": significant(full),
        "speedup": significant(full / incremental),
        "mv_equals_refresh": all(r["mv_equals_refresh"] for r in rounds),
        "rounds": [{k: significant(r[k]) if isinstance(r[k], float) else r[k]
                    for k in ("incremental_s", "full_refresh_s", "shadow_upkeep_s",
                              "mv_equals_refresh", "push_cpu_s", "refresh_cpu_s",
                              "push_cpu_by_kind", "refresh_cpu_by_kind")}
                   for r in rounds],
        **cpu_figures([r["push_cpu_s"] for r in rounds], [r["refresh_cpu_s"] for r in rounds]),
        "vertices_pushed": pushed,
        "shadow_upkeep_s": significant(statistics.median(
            r["shadow_upkeep_s"] for r in rounds)),
        "floor_s": significant(floor) if floor else None,
        "speedup_bound": significant(full / floor) if floor else None,
        "delta_rows": 2 * 3 * (rows // step),
        "operators": mid["operators"],
        "vertices": mid["vertices"],
    }


def _dropped(conns: dict[str, Any], ms: Sequence[Any], names: list[str], tag: str) -> None:
    """Everything the benchmark made dropped (its plan uninstalled first), and the
    connections closed."""
    for m, n in zip(ms, names, strict=True):
        unpublish_relation(m.dsn, f"public.{n}")
        conns[m.name].execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(n)))
    for conn in conns.values():
        conn.execute(f"DROP MATERIALIZED VIEW IF EXISTS bench_mv_{tag}")
        for table in [*(f"{n}_copy" for n in names), f"bench_mv_{tag}_floor"]:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
    for conn in conns.values():
        conn.close()
