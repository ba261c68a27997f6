"""Join skew measured on live data (smile/executor/skew.py) against a real PostgreSQL: the
changes of `r` all hit the one key of `x` that 100 rows share, so each meets ~50× what uniform
statistics promise; UPDATEs of a column the sharing does not read dilute it (they cancel in its
joins), and too few changes say nothing."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from psycopg import sql

from smile.delta_capture.publish import publish_relation
from smile.delta_capture.registry import delta_table
from smile.executor.catalog_live import snapshot_live
from smile.executor.skew import DECAY, measure_skews
from smile.optimizer.estimate import skew_key
from smile.optimizer.parse_spj import parse_sharing_sql

if TYPE_CHECKING:
    from smile.optimizer.catalog import CatalogSnapshot
    from smile.optimizer.sharing import SpjQuery
    from tests.fix_cloud import CloudHandle

pytestmark = pytest.mark.services
_n = itertools.count()


def _tables(dsn: str) -> tuple[str, str]:
    """r (k, v, f), empty, and x (k): key 1 in 100 rows, keys 2..101 in one row each — 200
    rows, 101 distinct keys."""
    r, x = f"sk_r{next(_n)}", f"sk_x{next(_n)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (k int, v text, f int)").format(sql.Identifier(r)))
        conn.execute(sql.SQL("CREATE TABLE {} (k int)").format(sql.Identifier(x)))
        conn.execute(sql.SQL("INSERT INTO {} SELECT 1 FROM generate_series(1, 100) "
                             "UNION ALL SELECT generate_series(2, 101)").format(
            sql.Identifier(x)))
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(x)))
    return r, x


def _add_changes(conn: psycopg.Connection[Any], delta: sql.Identifier, tag: str, first: int,
                 last: int) -> None:
    """Inserts of key 1 into ΔR, one per ms, numbered first..last (v = tag || i)."""
    conn.execute(sql.SQL("INSERT INTO {} (k, v, f, __sign, __ts, __lsn, __idx) SELECT 1, "
                         "%s::text || i, 0, 1, now() + i * interval '1 ms', '0/1', i "
                         "FROM generate_series(%s::int, %s::int) i").format(delta),
                 (tag, first, last))


def _join_of(cloud: CloudHandle, r: str, x: str
             ) -> tuple[CatalogSnapshot, SpjQuery, str, sql.Identifier]:
    """r and x published on the first machine; the live catalog, `r ⋈ x` on k, the skew's key
    and r's delta table."""
    m = cloud.topology.machines[0]
    for t in (r, x):
        publish_relation(m.dsn, f"public.{t}")
    catalog = snapshot_live(cloud.topology, sample_s=0.1)
    query = parse_sharing_sql(f"SELECT a.v, b.k FROM {r} a JOIN {x} b ON a.k = b.k", catalog)
    return (catalog, query, skew_key(r, "k", x, "k"),
            sql.Identifier("_smile", delta_table("public", r)))


def test_skew_is_what_the_changes_meet_over_what_statistics_promise(cloud: CloudHandle) -> None:
    m = cloud.topology.machines[0]
    topology = cloud.topology
    catalog, query, key, delta = _join_of(cloud, *_tables(m.dsn))
    with psycopg.connect(m.dsn, autocommit=True) as conn:
        _add_changes(conn, delta, "a", 1, 10)
        assert key not in measure_skews(topology, catalog, query)  # 10 changes: too few
        _add_changes(conn, delta, "b", 11, 40)
        uniform = 200 / 101
        first = measure_skews(topology, catalog, query)[key]
        assert first.k == pytest.approx(100 / uniform, rel=0.02)
        assert first.promised == pytest.approx(40 * uniform)  # all 40 changes, as promised
        # 40 UPDATEs of f alone (a − and a + each, same instant): they meet nothing
        conn.execute(sql.SQL("INSERT INTO {} (k, v, f, __sign, __ts, __lsn, __idx) SELECT 1, "
                             "'a1', s, CASE s WHEN 0 THEN -1 ELSE 1 END, "
                             "now() + interval '1 hour' + i * interval '1 ms', '0/1', i "
                             "FROM generate_series(1, 40) i, generate_series(0, 1) s").format(
            delta))
        assert measure_skews(topology, catalog, query)[key].k == pytest.approx(
            100 / uniform * 40 / 120, rel=0.02)


def test_the_skew_times_the_estimate_is_what_a_change_meets(cloud: CloudHandle) -> None:
    """r holds 400 distinct keys, x 101: the estimate counts on 200/400 rows of x per change
    of r (selectivity 1/max of the distinct keys), not 200/101. Changes all of key 1, which
    meets 100 rows: K = 100 ÷ 0.5, and the estimated rate of Δ(Δr ⋈ x) per change is 100."""
    from smile.optimizer.estimate import Estimates

    m = cloud.topology.machines[0]
    r, x = _tables(m.dsn)
    with psycopg.connect(m.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("INSERT INTO {} SELECT i, 'r', 0 FROM generate_series(1, 400) i"
                             ).format(sql.Identifier(r)))
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(r)))
    catalog, query, key, delta = _join_of(cloud, r, x)
    assert catalog.relation(r).column("k").n_distinct == pytest.approx(400)
    with psycopg.connect(m.dsn, autocommit=True) as conn:
        _add_changes(conn, delta, "a", 1, 40)
    k = measure_skews(cloud.topology, catalog, query)[key].k
    assert k == pytest.approx(100 / (200 / 400), rel=0.02)
    rels = tuple(replace(rel, update_rate=1.0) if rel.name == r else rel
                 for rel in catalog.relations)  # one change a second
    est = Estimates(replace(catalog, relations=rels, skews=((key, k),)), query)
    a, b = (next(ref.alias for ref in query.relations if ref.relation == t) for t in (r, x))
    assert est.driving_left(frozenset({a}), b) == pytest.approx(100, rel=0.02)


def test_skews_measured_at_one_submission_reach_every_later_estimate(
        cloud: CloudHandle) -> None:
    """The API makes a service per request; the skews one submission measures are kept by the
    executor, so the next request's catalog — its admission re-rates all of D — still carries
    them; a lower reading later is pooled with them, neither replacing them nor ignored
    (`skew.merge_skews`); and a restarted API's executor takes them up from the catalog."""
    from smile.executor.runtime import Executor
    from smile.executor.sharings import SharingService
    from smile.executor.store import CatalogStore

    m = cloud.topology.machines[0]
    r, x = _tables(m.dsn)
    executor = Executor(cloud.topology)  # not started: only what it keeps is used
    key = skew_key(r, "k", x, "k")
    text = f"SELECT a.v, b.k FROM {r} a JOIN {x} b ON a.k = b.k"
    delta = sql.Identifier("_smile", delta_table("public", r))
    stores = [CatalogStore(cloud.topology.catalog_dsn) for _ in range(3)]
    try:
        first = SharingService(cloud.topology, stores[0], executor)
        for t in (r, x):
            first.publish(m.name, f"public.{t}")
        with psycopg.connect(m.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("INSERT INTO {} (k, v, __sign, __ts, __lsn, __idx) SELECT 1, "
                                 "'a' || i, 1, now() + i * interval '1 ms', '0/1', i "
                                 "FROM generate_series(1, 40) i").format(delta))
        catalog = first.catalog(analyze=False)
        learnt = first.learn_skews(catalog, parse_sharing_sql(text, catalog))
        assert dict(learnt.skews)[key] == pytest.approx(100 / (200 / 101), rel=0.02)
        later = SharingService(cloud.topology, stores[1], executor)  # the next request
        assert dict(later.catalog(analyze=False).skews)[key] == dict(learnt.skews)[key]
        # the keys now meet uniformly: a second reading is lower, and pooled with the first
        with psycopg.connect(m.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DELETE FROM {}").format(delta))
            conn.execute(sql.SQL("INSERT INTO {} (k, v, __sign, __ts, __lsn, __idx) SELECT "
                                 "i % 100 + 2, 'b' || i, 1, now() + i * interval '1 ms', "
                                 "'0/1', i FROM generate_series(1, 40) i").format(delta))
        again = SharingService(cloud.topology, stores[2], executor)
        catalog = again.catalog(analyze=False)
        kept = executor.skews[key]
        second = measure_skews(cloud.topology, catalog, parse_sharing_sql(text, catalog))[key]
        assert second.k < 1
        relearnt = again.learn_skews(catalog, parse_sharing_sql(text, catalog))
        pooled = dict(relearnt.skews)[key]
        assert pooled == pytest.approx((DECAY * kept.met + second.met)
                                       / (DECAY * kept.promised + second.promised))
        assert second.k < pooled < dict(learnt.skews)[key]
        # the API restarts: its new executor takes the skews up from the catalog
        restarted = Executor(cloud.topology, pusher="skew-test")
        assert key not in restarted.skews
        restarted.start()
        try:
            assert restarted.skews[key].k == pytest.approx(pooled)
            after = SharingService(cloud.topology, stores[2], restarted)
            assert dict(after.catalog(analyze=False).skews)[key] == pytest.approx(pooled)
        finally:
            restarted.close()
    finally:
        for store in stores:
            store.close()
