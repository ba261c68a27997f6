"""Plans from the optimizer, installed and pushed on real machines with real capture, against
the oracle: after every push the MV equals the sharing's query run by PostgreSQL on the base
relations as of TS(MV) (NOTES §2) — for a 2-way join, a 3-way join with selections and
projections, and a self-join, under random INSERT/UPDATE/DELETE (NULLs, duplicates, key
updates) and pushes to random timestamps in random order, repeated."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from psycopg import sql

from smile.db import relkind
from smile.delta_capture.publish import publish_relation, unpublish_relation
from smile.delta_capture.registry import (
    delta_table,
    ensure_capture_schema,
    shadow_table,
    shadow_vertex,
)
from smile.deploy import commands
from smile.deploy.advance import advance_vertex, mv_ts, push_plan
from smile.deploy.install import (
    MV_SCHEMA,
    install_plan,
    materialize,
    mirror_key,
    stream_rows,
    uninstall_plan,
)
from smile.deploy.physical import PhysicalPlan, physical_plan
from smile.deploy.spark_jobs import SparkJoins
from smile.operators import vertex_ts
from smile.operators.as_of import as_of_query
from smile.optimizer.admission import Decision, plan_sharing
from smile.optimizer.catalog import CatalogSnapshot, ColumnStats, Machine, RelationStats
from smile.optimizer.global_plan import SharingEntry
from smile.optimizer.plan import Union
from smile.optimizer.sharing import Sharing
from tests.capture_helpers import CapturerThread, connect_retry, wait_caught_up
from tests.fix_cloud import NO_JIT

if TYPE_CHECKING:
    from collections.abc import Iterator
    from datetime import datetime

    from smile.optimizer.plan import Vertex
    from tests.fix_cloud import CloudHandle

pytestmark = pytest.mark.services
_n = itertools.count()

SHAPES = {
    "two_way": ("SELECT a.k, a.v, b.w FROM {ra} a JOIN {rb} b ON a.k = b.k", ["ra", "rb"]),
    "three_way": ("SELECT a.k, lower(b.w) AS lw, c.z FROM {ra} a, {rb} b, {rc} c "
                  "WHERE a.k = b.k AND b.k = c.k AND a.v <> 'x' AND c.z IS NOT NULL",
                  ["ra", "rb", "rc"]),
    "self_join": ("SELECT a1.k, a1.v AS v1, a2.v AS v2 FROM {ra} a1 JOIN {ra} a2 "
                  "ON a1.k = a2.k", ["ra"]),
    # one relation: its MV sits on the relation's own machine, so the copy of its delta runs
    # on one connection (two COPYs on it used to deadlock the agent)
    "single_table": ("SELECT a.k, upper(a.v) AS uv FROM {ra} a WHERE a.v <> 'x'", ["ra"]),
}
HOME = {"ra": 0, "rb": 1, "rc": 2}
COLS = {"ra": ("k", "v"), "rb": ("k", "w"), "rc": ("k", "z")}


@dataclass
class Installed:
    handle: CloudHandle
    names: dict[str, str]
    phys: PhysicalPlan
    conns: dict[str, psycopg.Connection[Any]]
    sql: str


def _make_relations(machines: Any, names: dict[str, str], rels: list[str]) -> None:
    for r in rels:
        with connect_retry(machines[HOME[r]].dsn) as conn:
            c1, c2 = COLS[r]
            conn.execute(sql.SQL(f"CREATE TABLE {{}} ({c1} int, {c2} text)").format(
                sql.Identifier(names[r])))
            conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 'a'), (1, 'a'), (2, NULL), "
                                 "(NULL, 'x'), (3, 'b')").format(sql.Identifier(names[r])))
        publish_relation(machines[HOME[r]].dsn, f"public.{names[r]}")


def _physical(machines: Any, names: dict[str, str], shape: str, sharing: str) -> PhysicalPlan:
    """The optimizer's plan for SHAPES[shape] over `names`, made physical."""
    return physical_plan(_decision(machines, names, shape, sharing).global_plan(),
                         _schemas(names, SHAPES[shape][1]))


def _schemas(names: dict[str, str], rels: list[str]) -> dict[str, tuple[tuple[str, str], ...]]:
    return {names[r]: tuple((c, "integer" if c == "k" else "text") for c in COLS[r])
            for r in rels}


def _decision(machines: Any, names: dict[str, str], shape: str, sharing: str) -> Decision:
    template, rels = SHAPES[shape]
    catalog = CatalogSnapshot(
        tuple(Machine(m.name) for m in machines),
        tuple(RelationStats(names[r], machines[HOME[r]].name, 100, 10,
                            (ColumnStats(COLS[r][0], "integer", 5, 0.1, 4),
                             ColumnStats(COLS[r][1], "text", 5, 0.1, 4))) for r in rels))
    decision = plan_sharing(catalog, Sharing(sharing, template.format(**names), 60, 0.0))
    assert decision.admitted and decision.plan is not None, decision.reason
    return decision


@contextmanager
def _captured(cloud: CloudHandle, names: dict[str, str],
              rels: list[str]) -> Iterator[dict[str, psycopg.Connection[Any]]]:
    """Connections to every machine while each runs a capturer, caught up on entry; the
    relations are unpublished on the way out."""
    machines = cloud.topology.machines
    conns = {m.name: psycopg.connect(m.dsn, autocommit=True, options=NO_JIT)
             for m in machines}
    threads = [CapturerThread(m.dsn, shadow_s=0) for m in machines]
    for t in threads:
        t.__enter__()
    try:
        for m in machines:
            wait_caught_up(m.dsn)
        yield conns
    finally:
        for t in threads:
            t.__exit__()
        for c in conns.values():
            c.close()
        for r in rels:
            unpublish_relation(machines[HOME[r]].dsn, f"public.{names[r]}")


@pytest.fixture(params=sorted(SHAPES))
def installed(request: pytest.FixtureRequest, cloud: CloudHandle) -> Iterator[Installed]:
    shape = request.param
    template, rels = SHAPES[shape]
    n = next(_n)
    names = {r: f"or{n}_{r}" for r in ("ra", "rb", "rc")}
    machines = cloud.topology.machines
    _make_relations(machines, names, rels)
    phys = _physical(machines, names, shape, f"oracle_{shape}_{n}")
    with _captured(cloud, names, rels) as conns:
        install_plan(conns, phys)
        yield Installed(cloud, names, phys, conns, template.format(**names))


def _short(relation: str, names: dict[str, str]) -> str:
    return next(k for k, v in names.items() if v == relation)


def _oracle(inst: Installed, t: datetime) -> Counter[tuple[Any, ...]]:
    """The sharing's own SQL, run by PostgreSQL over the base relations as of t."""
    machines = inst.handle.topology.machines
    mv_machine = inst.phys.plan.sharings[0].mv.machine
    conn = inst.conns[mv_machine]
    schema = f"oracle_{next(_n)}"
    conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        for short, name in inst.names.items():
            home = machines[HOME[short]]
            src = inst.conns[home.name]
            if src.execute("SELECT to_regclass(%s)", (f"public.{name}",)).fetchone() == (None,):
                continue
            c1, c2 = COLS[short]
            conn.execute(sql.SQL(f"CREATE TABLE {{}} ({c1} int, {c2} text)").format(
                sql.Identifier(schema, name)))
            query = as_of_query(rel=("_smile", shadow_table("public", name)),
                                rel_vertex=shadow_vertex("public", name),
                                delta=("_smile", delta_table("public", name)),
                                columns=COLS[short], t=t)
            stream_rows(src, query, conn, sql.Identifier(schema, name), list(COLS[short]))
        conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        rows = conn.execute(inst.sql).fetchall()
    finally:
        conn.execute("SET search_path = \"$user\", public")
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
    return Counter(rows)


def _mv(inst: Installed) -> Counter[tuple[Any, ...]]:
    conn = inst.conns[inst.phys.plan.sharings[0].mv.machine]
    return Counter(conn.execute(sql.SQL("SELECT * FROM {}").format(
        sql.Identifier(MV_SCHEMA, inst.phys.plan.sharings[0].name))).fetchall())


def _watermark(inst: Installed) -> datetime:
    """The newest time every base delta the plan reads is complete to (all its sharings':
    a plan of two reads the second's bases too)."""
    return min(vertex_ts.read(inst.conns[s.machine], inst.phys.vertices[s].ts_key)
               for sharing in inst.phys.plan.sharings for s in sharing.sources)


keys = st.one_of(st.none(), st.integers(1, 4))
texts = st.sampled_from([None, "a", "b", "x", "B"])
dml = st.one_of(
    st.tuples(st.just("ins"), st.sampled_from(["ra", "rb", "rc"]), keys, texts),
    st.tuples(st.just("upd_key"), st.sampled_from(["ra", "rb", "rc"]), keys, keys),
    st.tuples(st.just("upd_val"), st.sampled_from(["ra", "rb", "rc"]), keys, texts),
    st.tuples(st.just("del"), st.sampled_from(["ra", "rb", "rc"]), keys),
    st.tuples(st.just("trunc"), st.sampled_from(["ra", "rb", "rc"])),
)


def _apply(inst: Installed, op: tuple[Any, ...]) -> None:
    short = op[1]
    name = inst.names[short]
    conn = inst.conns[inst.handle.topology.machines[HOME[short]].name]
    if conn.execute("SELECT to_regclass(%s)", (f"public.{name}",)).fetchone() == (None,):
        return
    c1, c2 = COLS[short]
    t = sql.Identifier(name)
    if op[0] == "ins":
        conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(t), (op[2], op[3]))
    elif op[0] == "upd_key":
        conn.execute(sql.SQL(f"UPDATE {{}} SET {c1} = %s WHERE {c1} IS NOT DISTINCT FROM %s")
                     .format(t), (op[3], op[2]))
    elif op[0] == "upd_val":
        conn.execute(sql.SQL(f"UPDATE {{}} SET {c2} = %s WHERE {c1} IS NOT DISTINCT FROM %s")
                     .format(t), (op[3], op[2]))
    elif op[0] == "del":
        conn.execute(sql.SQL(f"DELETE FROM {{}} WHERE {c1} IS NOT DISTINCT FROM %s").format(t),
                     (op[2],))
    else:
        conn.execute(sql.SQL("TRUNCATE {}").format(t))


rounds_st = st.lists(st.tuples(st.lists(dml, max_size=6), st.floats(0, 1), st.integers(1, 2),
                               st.booleans()), min_size=1, max_size=4)


def _check_rounds(inst: Installed, rounds: Any, spark: SparkJoins | None = None) -> None:
    for ops, where, repeats, by_vertex in rounds:
        for op in ops:
            _apply(inst, op)
        for m in inst.handle.topology.machines:
            wait_caught_up(m.dsn)
        lo, hi = mv_ts(inst.conns, inst.phys), _watermark(inst)
        t = lo + (hi - lo) * where  # anywhere between the MV and what capture has
        for _ in range(repeats):  # duplicated pushes are harmless
            if by_vertex:  # one vertex at a time, as agents would, twice over
                for v in inst.phys.order():
                    advance_vertex(inst.conns, inst.phys, v, t, spark)
            push_plan(inst.conns, inst.phys, t, spark)
        # an older push after a newer one changes nothing
        push_plan(inst.conns, inst.phys, lo, spark)
        at = mv_ts(inst.conns, inst.phys)
        assert at == max(lo, t)
        assert _mv(inst) == _oracle(inst, at)


@settings(max_examples=4, deadline=None, database=None, phases=[Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rounds=rounds_st)
def test_mv_equals_the_query_after_every_push(installed: Installed, rounds: Any) -> None:
    _check_rounds(installed, rounds)


@pytest.mark.spark
@settings(max_examples=2, deadline=None, database=None, phases=[Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rounds=rounds_st)
def test_mv_equals_the_query_with_every_join_on_spark(installed: Installed, spark: Any,
                                                      rounds: Any) -> None:
    """The same test with each join of the plan run by Spark (read and written over JDBC)."""
    dsns = {m.name: m.dsn for m in installed.handle.topology.machines}
    used = []

    def session() -> Any:
        used.append(1)
        return spark

    joins = SparkJoins(dsns, session, every_join=True)
    install_plan(installed.conns, installed.phys, joins)  # first contents by Spark this time
    assert _mv(installed) == _oracle(installed, mv_ts(installed.conns, installed.phys))
    _check_rounds(installed, rounds, joins)
    assert used or not any(e.kind == "join" for e in installed.phys.plan.edges)  # Spark ran


@pytest.mark.parametrize(("shape", "together", "repeat"),
                         [("optimizer", False, 2), ("in-place", True, 1)])
def test_push_benchmark_matches_refresh_and_cleans_up(cloud: CloudHandle, shape: str,
                                                      together: bool, repeat: int) -> None:
    """Both plan shapes, a transaction per vertex or per machine, one round or several, the
    push as a dataflow (rounds alternating between joins that roll the relation they probe
    forward and joins that wait for it) or in order: the MV equals the refreshed view after
    every round, and nothing is left behind."""
    from smile.bench.push import bench_push

    def vertices() -> list[tuple[int, int]]:
        out = []
        for m in cloud.topology.machines:
            with psycopg.connect(m.dsn, autocommit=True) as conn:
                ensure_capture_schema(conn)
                row = conn.execute("SELECT (SELECT count(*) FROM pg_tables WHERE schemaname = "
                                   "'_smile'), (SELECT count(*) FROM _smile.vertex_ts)").fetchone()
                assert row is not None
                out.append((row[0], row[1]))
        return out

    before = vertices()
    report = bench_push(cloud.topology, rows=3000, fraction=0.01, shape=shape,
                        one_transaction=together, repeat=repeat, dataflow=not together,
                        roll_forward="yes" if together else "both")
    assert report["mv_equals_refresh"] is True
    if not together:  # as many rounds with the joins waiting, each exact too
        waited = report["joins_wait"]
        assert [r["mv_equals_refresh"] for r in waited["rounds"]] == [True] * repeat
        assert math.isfinite(report["roll_forward_speedup"])
    assert report["push"] == ("in order" if together else "dataflow")
    if not together:  # the MV is applied once every join it reads has ended
        mv = [v for v in report["vertices"]
              if v["edge"] == "delta_to_rel" and v["vertex"].count("⋈") == 2]
        assert len(mv) == 1, report["vertices"]
        assert all(mv[0]["started_s"] >= 0.99 * (v["started_s"] + v["seconds"]) - 1e-3
                   for v in report["vertices"] if v["edge"] == "join")  # 3 digits each
    assert [r["mv_equals_refresh"] for r in report["rounds"]] == [True] * repeat
    if shape == "in-place":  # no copy of a base: only a⋈b and the MV are kept
        assert report["relations_maintained"] == 2
    assert report["incremental_s"] > 0 and report["full_refresh_s"] > 0
    assert report["operators"]["join"]["rows"] > 0
    assert report["vertices_pushed"] > 0
    # the figures are there, whatever the machine's speed (significant digits, never 0)
    for key in ("incremental_s", "full_refresh_s", "floor_s", "speedup", "speedup_bound"):
        assert isinstance(report[key], float) and math.isfinite(report[key]), key
    assert vertices() == before  # the plan's vertex tables and timestamps are gone again
    for m in cloud.topology.machines:
        with psycopg.connect(m.dsn) as conn:
            left = conn.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'bp%%'"
                                ).fetchone()
            slots = conn.execute("SELECT count(*) FROM pg_publication_tables WHERE "
                                 "tablename LIKE 'bp%%'").fetchone()
        assert left == (0,) and slots == (0,)


def test_withdrawn_plan_leaves_nothing_and_the_other_keeps_going(cloud: CloudHandle) -> None:
    """Two sharings over the same bases merged into one global plan (they share vertices);
    withdrawing one drops the vertices only it needed — tables, timestamps, mirrors and delta
    readers on every machine — keeps the bases' capture and the shared vertices, and the other
    sharing stays exact."""
    n = next(_n)
    names = {r: f"wd{n}_{r}" for r in ("ra", "rb", "rc")}
    machines = cloud.topology.machines
    rels = ["ra", "rb", "rc"]
    _make_relations(machines, names, rels)
    keep_name, drop_name = f"keep_{n}", f"drop_{n}"
    keep = _decision(machines, names, "two_way", keep_name)
    drop = _decision(machines, names, "three_way", drop_name)
    assert drop.plan is not None and drop.chosen is not None
    both = keep.global_plan().add(drop.plan, SharingEntry(
        drop_name, drop.plan.mv, drop.plan.sources, 60, 0.0, drop.plan.outputs))
    phys = physical_plan(both, _schemas(names, rels))
    with _captured(cloud, names, rels) as conns:
        install_plan(conns, phys)
        inst = Installed(cloud, names, phys, conns, SHAPES["two_way"][0].format(**names))
        _apply(inst, ("ins", "ra", 2, "z"))
        _apply(inst, ("upd_key", "rc", 3, 2))
        for m in machines:
            wait_caught_up(m.dsn)
        t = _watermark(inst)
        push_plan(conns, phys, t)

        def owned(vertices: set[Vertex]) -> int:
            pvs = [phys.vertices[v] for v in vertices if not v.base]
            keys = [pv.ts_key for pv in pvs] + [mirror_key(v.label) for v in vertices]
            tables = [pv.table[1] for pv in pvs]
            out = 0
            for conn in conns.values():
                row = conn.execute(
                    "SELECT (SELECT count(*) FROM pg_tables WHERE schemaname = '_smile' AND "
                    "tablename = ANY(%s)) + (SELECT count(*) FROM _smile.vertex_ts WHERE "
                    "vertex = ANY(%s)) + (SELECT count(*) FROM _smile.delta_readers WHERE "
                    "reader_vertex = ANY(%s))", (tables, keys, keys)).fetchone()
                out += int(row[0]) if row else 0
            return out

        after = both.without(drop_name)
        gone = set(both.vertices - after.vertices)
        assert gone and owned(gone) > 0
        uninstall_plan(conns, phys, gone)
        uninstall_plan(conns, phys, gone)  # again: harmless
        assert owned(gone) == 0
        assert owned(set(after.vertices)) > 0
        home = conns[drop.plan.mv.machine]
        assert home.execute("SELECT to_regclass(%s)", (f"{MV_SCHEMA}.\"{drop_name}\"",)
                            ).fetchone() == (None,)
        inst = Installed(cloud, names, physical_plan(after, _schemas(names, rels)), conns,
                         SHAPES["two_way"][0].format(**names))
        _apply(inst, ("del", "ra", 1))
        _apply(inst, ("upd_val", "rb", 2, "w"))
        for m in machines:
            wait_caught_up(m.dsn)
        t = _watermark(inst)
        push_plan(conns, inst.phys, t)
        assert _mv(inst) == _oracle(inst, t)


def test_a_union_stores_nothing_and_a_table_made_of_its_view_keeps_every_row(
        cloud: CloudHandle) -> None:
    """The delta a Union makes is a view over the join's two partial deltas: a push writes
    each of its rows once (into a partial), retention prunes the partials for the view's
    reader (the MV's DeltaToRel), and a view turned into a table (a re-route takes it off its
    Union) holds every row its reader has yet to apply, and is then filled by copying. The MV
    equals the query throughout."""
    n = next(_n)
    names = {r: f"un{n}_{r}" for r in ("ra", "rb", "rc")}
    machines, rels = cloud.topology.machines, ["ra", "rb"]
    _make_relations(machines, names, rels)
    phys = _physical(machines, names, "two_way", f"view_{n}")
    union_edge = next(e for e in phys.edges if isinstance(e, Union))
    view = phys.vertices[union_edge.dst]
    parts = [phys.vertices[s] for s in phys.stored(union_edge.dst)]
    assert view.virtual and len(parts) == 2 and not any(p.virtual for p in parts)
    with _captured(cloud, names, rels) as conns:
        install_plan(conns, phys)
        inst = Installed(cloud, names, phys, conns, SHAPES["two_way"][0].format(**names))
        conn = conns[union_edge.dst.machine]
        assert relkind(conn, view.table) == "v"

        def change(*ops: tuple[Any, ...]) -> datetime:
            for op in ops:
                _apply(inst, op)
            for m in machines:
                wait_caught_up(m.dsn)
            return _watermark(inst)

        def count(table: tuple[str, str]) -> int:
            row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
                sql.Identifier(*table))).fetchone()
            return int(row[0]) if row else -1

        # the partials are read for the view's readers, the view by nobody
        readers = set(conn.execute("SELECT delta_vertex, reader_vertex FROM "
                                   "_smile.delta_readers").fetchall())
        mv_key = phys.vertices[phys.plan.sharings[0].mv].ts_key
        assert {(p.ts_key, mv_key) for p in parts} <= readers
        assert not any(view.ts_key in pair for pair in readers)

        t = change(("ins", "ra", 1, "q"), ("ins", "rb", 1, "z"), ("upd_val", "ra", 3, "c"))
        push_plan(conns, phys, t)
        assert _mv(inst) == _oracle(inst, t)
        assert sum(count(p.table) for p in parts) == count(view.table) > 0
        commands.prune_intermediates(conn)  # the MV is past them: the partials are emptied
        assert [count(p.table) for p in parts] == [0, 0]

        # the Union moves on, the MV does not; then the view becomes a table
        t2 = change(("ins", "rb", 3, "y"), ("del", "ra", 1))
        for v in phys.order():
            if v != phys.plan.sharings[0].mv:
                advance_vertex(conns, phys, v, t2)
        pending = Counter(conn.execute(sql.SQL("SELECT * FROM {}").format(
            sql.Identifier(*view.table))).fetchall())
        assert pending
        assert materialize(conn, view) and relkind(conn, view.table) == "r"
        assert not materialize(conn, view)  # once is enough
        assert Counter(conn.execute(sql.SQL("SELECT * FROM {}").format(
            sql.Identifier(*view.table))).fetchall()) == pending
        push_plan(conns, phys, t2)
        assert _mv(inst) == _oracle(inst, t2)
        # and the Union, finding a table, copies into it
        t3 = change(("ins", "ra", 3, "w"), ("upd_key", "rb", 1, 3))
        push_plan(conns, phys, t3)
        assert _mv(inst) == _oracle(inst, t3)
        assert count(view.table) >= count(parts[0].table) + count(parts[1].table) > 0
        uninstall_plan(conns, phys)
        assert relkind(conn, view.table) is None
