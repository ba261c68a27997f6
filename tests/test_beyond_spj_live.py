"""Every accepted sharing of the corpus beyond SPJ (`tests/beyond_spj_corpus.py`: aggregates,
DISTINCT, HAVING, global aggregates, LEFT/RIGHT/FULL joins, merged columns), admitted into one
global plan over three relations on three machines with real capture, installed and pushed
under random INSERT/UPDATE/DELETE (NULLs in keys and values, a group's last row deleted, a
side of an outer join emptied and refilled, key updates) to random timestamps: after every
push each consumer's view equals the sharing's query run by PostgreSQL on the relations as of
its MV's timestamp (docs/design/semantics.md §2)."""

from __future__ import annotations

import itertools
from collections import Counter
from contextlib import ExitStack
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from psycopg import sql

from smile.delta_capture.publish import publish_relation, unpublish_relation
from smile.delta_capture.registry import delta_table, shadow_table, shadow_vertex
from smile.deploy.advance import mv_ts, push_plan
from smile.deploy.install import MV_SCHEMA, install_plan, stream_rows, uninstall_plan
from smile.deploy.physical import PhysicalPlan, physical_plan
from smile.operators import vertex_ts
from smile.operators.as_of import as_of_query
from smile.optimizer.admission import admit
from smile.optimizer.catalog import CatalogSnapshot, ColumnStats, Machine, RelationStats
from smile.optimizer.global_plan import GlobalPlan
from smile.optimizer.sharing import Sharing
from tests.beyond_spj_corpus import ACCEPTED, SCHEMA
from tests.capture_helpers import CapturerThread, wait_caught_up
from tests.fix_cloud import NO_JIT

if TYPE_CHECKING:
    from collections.abc import Iterator
    from datetime import datetime

    from tests.fix_cloud import CloudHandle

pytestmark = pytest.mark.services
_n = itertools.count()
HOME = {"ra": 0, "rb": 1, "rc": 2}
ROWS = {"ra": [(1, "a", 1, Decimal("1.5")), (1, "a", 1, Decimal("1.5")), (2, None, 5, None),
               (None, "x", None, Decimal("0.25")), (3, "b", -2, Decimal(2))],
        "rb": [(1, "a", 3), (2, "b", None), (2, "b", 1), (None, "c", 4), (4, None, 2)],
        "rc": [(1, "p"), (3, None), (None, "q"), (4, "p")]}


class Corpus:
    def __init__(self, cloud: CloudHandle, names: dict[str, str], phys: PhysicalPlan,
                 conns: dict[str, psycopg.Connection[Any]], sql_of: dict[str, str]) -> None:
        self.cloud, self.names, self.phys, self.conns, self.sql = cloud, names, phys, conns, \
            sql_of


def _catalog(cloud: CloudHandle, names: dict[str, str]) -> CatalogSnapshot:
    machines = cloud.topology.machines
    return CatalogSnapshot(
        tuple(Machine(m.name, cpu_cores=64) for m in machines),
        tuple(RelationStats(names[r], machines[HOME[r]].name, 100, 1,
                            tuple(ColumnStats(c, t, 5, 0.1, 4) for c, t in cols))
              for r, cols in SCHEMA.items()))


@pytest.fixture(scope="module")
def corpus(cloud: CloudHandle) -> Iterator[Corpus]:
    n = next(_n)
    names = {r: f"bs{n}_{r}" for r in SCHEMA}
    machines = cloud.topology.machines
    for r, cols in SCHEMA.items():
        with psycopg.connect(machines[HOME[r]].dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE TABLE {} ({})").format(
                sql.Identifier(names[r]), sql.SQL(", ").join(
                    sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(t)) for c, t in cols)))
            conn.cursor().executemany(sql.SQL("INSERT INTO {} VALUES ({})").format(
                sql.Identifier(names[r]), sql.SQL(", ").join(sql.Placeholder() * len(cols))),
                ROWS[r])
        publish_relation(machines[HOME[r]].dsn, f"public.{names[r]}")
    catalog = _catalog(cloud, names)
    plan = GlobalPlan()
    sql_of = {}
    for name, (_, template) in sorted(ACCEPTED.items()):
        text = template.format(**names)
        admission = admit(plan, catalog, Sharing(f"{name}_{n}", text, 600, 0.0))
        assert admission.admitted, f"{name}: {admission.reason}"
        plan = admission.plan
        sql_of[f"{name}_{n}"] = text
    phys = physical_plan(plan, catalog.schemas())
    with ExitStack() as stack:
        conns = {m.name: stack.enter_context(psycopg.connect(m.dsn, autocommit=True,
                                                             options=NO_JIT))
                 for m in machines}
        for m in machines:
            stack.enter_context(CapturerThread(m.dsn, shadow_s=0))
        for m in machines:
            wait_caught_up(m.dsn)
        install_plan(conns, phys)
        try:
            yield Corpus(cloud, names, phys, conns, sql_of)
        finally:
            uninstall_plan(conns, phys)
    for r in SCHEMA:
        unpublish_relation(machines[HOME[r]].dsn, f"public.{names[r]}")


def _norm(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(v.normalize() if isinstance(v, Decimal) else v for v in row)


def _oracles(c: Corpus, t: datetime) -> dict[str, Counter[tuple[Any, ...]]]:
    """Each sharing's SQL, run by PostgreSQL over the relations as of t (copied to one
    machine)."""
    machines = c.cloud.topology.machines
    conn = c.conns[machines[0].name]
    schema = f"oracle_{next(_n)}"
    conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        for short, name in c.names.items():
            cols = [col for col, _ in SCHEMA[short]]
            conn.execute(sql.SQL("CREATE TABLE {} ({})").format(
                sql.Identifier(schema, name), sql.SQL(", ").join(
                    sql.SQL("{} {}").format(sql.Identifier(col), sql.SQL(t_))
                    for col, t_ in SCHEMA[short])))
            query = as_of_query(rel=("_smile", shadow_table("public", name)),
                                rel_vertex=shadow_vertex("public", name),
                                delta=("_smile", delta_table("public", name)),
                                columns=cols, t=t)
            stream_rows(c.conns[machines[HOME[short]].name], query, conn,
                        sql.Identifier(schema, name), cols)
        conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        return {s: Counter(_norm(r) for r in conn.execute(text).fetchall())
                for s, text in c.sql.items()}
    finally:
        conn.execute('SET search_path = "$user", public')
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def _view(c: Corpus, sharing: str) -> Counter[tuple[Any, ...]]:
    entry = c.phys.plan.sharing(sharing)
    conn = c.conns[entry.mv.machine]
    return Counter(_norm(r) for r in conn.execute(sql.SQL("SELECT * FROM {}").format(
        sql.Identifier(MV_SCHEMA, sharing))).fetchall())


keys = st.one_of(st.none(), st.integers(1, 4))
words = st.sampled_from([None, "a", "b", "x", "p"])
nums = st.one_of(st.none(), st.integers(-3, 6))
dml = st.one_of(
    st.tuples(st.just("ins"), st.sampled_from(sorted(SCHEMA)), keys, words, nums),
    st.tuples(st.just("upd_key"), st.sampled_from(sorted(SCHEMA)), keys, keys),
    st.tuples(st.just("upd_val"), st.sampled_from(sorted(SCHEMA)), keys, words, nums),
    st.tuples(st.just("del"), st.sampled_from(sorted(SCHEMA)), keys),
    st.tuples(st.just("empty"), st.sampled_from(sorted(SCHEMA))),
)


def _apply(c: Corpus, op: tuple[Any, ...]) -> None:
    short = op[1]
    conn = c.conns[c.cloud.topology.machines[HOME[short]].name]
    t = sql.Identifier(c.names[short])
    text_col = SCHEMA[short][1][0]
    num_col = SCHEMA[short][2][0] if len(SCHEMA[short]) > 2 else None
    if op[0] == "ins":
        values = [op[2], op[3], op[4], None if op[4] is None else Decimal(op[4]) / 4][
            :len(SCHEMA[short])]
        conn.execute(sql.SQL("INSERT INTO {} VALUES ({})").format(
            t, sql.SQL(", ").join(sql.Placeholder() * len(values))), values)
    elif op[0] == "upd_key":
        conn.execute(sql.SQL("UPDATE {} SET k = %s WHERE k IS NOT DISTINCT FROM %s").format(t),
                     (op[3], op[2]))
    elif op[0] == "upd_val":
        sets = [sql.SQL("{} = %s").format(sql.Identifier(text_col))]
        args: list[Any] = [op[3]]
        if num_col is not None:
            sets.append(sql.SQL("{} = %s").format(sql.Identifier(num_col)))
            args.append(op[4])
        conn.execute(sql.SQL("UPDATE {} SET {} WHERE k IS NOT DISTINCT FROM %s").format(
            t, sql.SQL(", ").join(sets)), [*args, op[2]])
    elif op[0] == "del":
        conn.execute(sql.SQL("DELETE FROM {} WHERE k IS NOT DISTINCT FROM %s").format(t),
                     (op[2],))
    else:
        conn.execute(sql.SQL("DELETE FROM {}").format(t))


def _watermark(c: Corpus) -> datetime:
    return min(vertex_ts.read(c.conns[s.machine], c.phys.vertices[s].ts_key)
               for e in c.phys.plan.sharings for s in e.sources)


def test_the_corpus_covers_every_class() -> None:
    classes = Counter(cls for cls, _ in ACCEPTED.values())
    assert len(ACCEPTED) >= 80 and len(classes) >= 10, classes


@settings(max_examples=3, deadline=None, database=None, phases=[Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rounds=st.lists(st.tuples(st.lists(dml, max_size=8), st.floats(0, 1)), min_size=1,
                       max_size=3))
def test_every_view_equals_its_query_after_every_push(
        corpus: Corpus, rounds: list[tuple[list[tuple[Any, ...]], float]]) -> None:
    for ops, where in rounds:
        for op in ops:
            _apply(corpus, op)
        for m in corpus.cloud.topology.machines:
            wait_caught_up(m.dsn)
        lo, hi = min(mv_ts(corpus.conns, corpus.phys, s) for s in corpus.sql), _watermark(corpus)
        t = lo + (hi - lo) * where
        push_plan(corpus.conns, corpus.phys, t)
        push_plan(corpus.conns, corpus.phys, t)  # again: nothing to do
        at = {s: mv_ts(corpus.conns, corpus.phys, s) for s in corpus.sql}
        assert len(set(at.values())) == 1, at  # one plan pushed to one t
        expected = _oracles(corpus, next(iter(at.values())))
        wrong = [s for s in corpus.sql if _view(corpus, s) != expected[s]]
        assert not wrong, {s: (corpus.sql[s], sorted(map(repr, _view(corpus, s).elements())),
                               sorted(map(repr, expected[s].elements()))) for s in wrong[:3]}


@pytest.mark.parametrize("query", ["aggregate", "join_aggregate", "extremes", "outer"])
def test_push_benchmark_beyond_spj_matches_refresh(cloud: CloudHandle, query: str) -> None:
    """`smile bench push --query` of each query beyond SPJ at a small scale: the MV equals
    the refreshed view after every round."""
    from smile.bench.push import bench_push

    report = bench_push(cloud.topology, rows=4000, fraction=0.01, repeat=2, query=query)
    assert report["mv_equals_refresh"] is True, report
    assert [r["mv_equals_refresh"] for r in report["rounds"]] == [True, True]
    assert report["operators"]["pad" if query == "outer" else "aggregate"]["rows"] > 0
    assert report["incremental_s"] > 0 and report["full_refresh_s"] > 0
