"""Capture under an OLTP load: many small transactions on two machines at once, the capture
process SIGKILLed again and again while they run, and every change in ΔR exactly once after;
and `smile bench capture --oltp`, briefly (slow)."""

from __future__ import annotations

import random
import threading
import time
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from psycopg import sql

from smile.bench.capture_oltp import bench_capture_oltp
from smile.delta_capture.publish import (
    ensure_capture_setup,
    publish_relation,
    unpublish_relation,
)
from smile.delta_capture.registry import delta_table, delta_vertex, shadow_table, shadow_vertex
from smile.delta_capture.status import capture_status
from smile.operators import vertex_ts
from smile.operators.delta_to_rel import delta_to_rel
from tests import capture_helpers as ch

if TYPE_CHECKING:
    from tests.fix_cloud import CloudHandle

pytestmark = pytest.mark.services

KILLS = 6


class _Writer(threading.Thread):
    """Small transactions on one machine's tables until stopped: mostly one-row INSERTs, some
    UPDATEs and DELETEs of a few keys, some rolled back."""

    def __init__(self, dsn: str, tables: list[str], seed: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.tables, self.rng = dsn, tables, random.Random(seed)
        self.stop = threading.Event()
        self.committed = 0
        self.failure: BaseException | None = None

    def _op(self, conn: psycopg.Connection[Any]) -> None:
        t = sql.Identifier(self.rng.choice(self.tables))
        roll, k = self.rng.random(), self.rng.randrange(50)
        if roll < 0.8:
            conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(t),
                         (k, self.rng.choice(["x", None, "tab\there", "back\\slash"])))
        elif roll < 0.93:
            conn.execute(sql.SQL("UPDATE {} SET v = %s WHERE k = %s").format(t), ("u", k))
        else:
            conn.execute(sql.SQL("DELETE FROM {} WHERE k = %s").format(t), (k,))

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, options=ch.SYNC) as conn:
                while not self.stop.is_set():
                    for _ in range(self.rng.choice([1, 1, 1, 2, 3])):
                        self._op(conn)
                    if self.rng.random() < 0.05:
                        conn.rollback()
                    else:
                        conn.commit()
                        self.committed += 1
        except BaseException as exc:  # the test says so
            self.failure = exc


def _tables(dsn: str, n: int) -> list[str]:
    names = [ch.fresh_name("oltp") for _ in range(n)]
    with ch.connect_retry(dsn) as conn:
        for t in names:
            conn.execute(sql.SQL("CREATE TABLE {} (k int, v text)").format(sql.Identifier(t)))
            ch.install_audit(conn, t)
    for t in names:
        publish_relation(dsn, f"public.{t}")
    return names


def _exact(dsn: str, table: str) -> None:
    """ΔR holds every committed transaction once (in an order `delta_history` checks), and R̂
    rolled to the watermark is R."""
    with ch.connect_retry(dsn) as conn:
        captured, true = ch.delta_history(conn, table), ch.audit_history(conn, table)
        assert ch.as_bag(captured) == ch.as_bag(true), table
        delta_to_rel(conn, delta=("_smile", delta_table("public", table)),
                     rel=("_smile", shadow_table("public", table)), columns=["k", "v"],
                     rel_vertex=shadow_vertex("public", table),
                     delta_vertex=delta_vertex("public", table),
                     to_ts=vertex_ts.read(conn, delta_vertex("public", table)))
        assert ch.bag_difference(conn, sql.Identifier("public", table),
                              sql.Identifier("_smile", shadow_table("public", table))) == 0


def test_small_transactions_on_two_machines_survive_sigkills(cloud: CloudHandle) -> None:
    m1, m2 = cloud.topology.machines[:2]
    tables = {m1.dsn: _tables(m1.dsn, 2), m2.dsn: _tables(m2.dsn, 1)}
    writers = [_Writer(dsn, names, seed) for seed, (dsn, names) in enumerate(tables.items())]
    writers.append(_Writer(m1.dsn, tables[m1.dsn], 7))  # two clients on one machine
    cap = ch.CapturerProcess(cloud, machine=(m1.name, m2.name))
    rng = random.Random(66)
    try:
        cap.start()
        for w in writers:
            w.start()
        for _ in range(KILLS):
            time.sleep(rng.uniform(0.3, 1.2))
            cap.kill()
            cap.start()
        time.sleep(1.0)
        for w in writers:
            w.stop.set()
            w.join(30)
            assert w.failure is None, w.failure
        assert sum(w.committed for w in writers) > 500  # many small transactions
        for dsn, names in tables.items():
            ch.wait_caught_up(dsn, timeout=120)
            for t in names:
                _exact(dsn, t)
    finally:
        for w in writers:
            w.stop.set()
        cap.stop()
        for dsn, names in tables.items():
            for t in names:
                unpublish_relation(dsn, f"public.{t}")
            with ch.connect_retry(dsn) as conn:
                for t in names:
                    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(t)))
                conn.execute("DELETE FROM audit.log WHERE tbl = ANY(%s)", (names,))


def _lag(dsn: str, table: str) -> tuple[int | None, float | None]:
    rels, _ = capture_status("m1", dsn)
    mine = next(r for r in rels if r.relation == f"public.{table}")
    return mine.lag_txns, mine.lag_s


def test_a_capturer_behind_says_so_in_transactions_and_seconds(scratch: CloudHandle) -> None:
    dsn = scratch.topology.machines[0].dsn
    t = ch.fresh_name("lag")
    with ch.connect_retry(dsn) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (k int)").format(sql.Identifier(t)))
    publish_relation(dsn, f"public.{t}")
    insert = sql.SQL("INSERT INTO {} VALUES (1)").format(sql.Identifier(t))
    try:
        with ch.CapturerThread(dsn, shadow_s=0), ch.connect_retry(dsn) as conn:
            conn.execute(insert)
            ch.wait_caught_up(dsn)
            caught_up, _ = _lag(dsn, t)
            assert caught_up is not None and caught_up <= 3  # SMILE's own commits, a tick
        with ch.connect_retry(dsn) as conn:  # the capturer is stopped: the app writes on
            for _ in range(40):
                conn.execute(insert)
        time.sleep(1.0)
        behind, seconds = _lag(dsn, t)
        assert behind is not None and behind >= 40
        assert seconds is not None and seconds >= 1.0
        with ch.CapturerThread(dsn, shadow_s=0):
            ch.wait_caught_up(dsn)
            again, _ = _lag(dsn, t)
        assert again is not None and again <= 3
    finally:
        unpublish_relation(dsn, f"public.{t}")
        with ch.connect_retry(dsn) as conn:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(t)))


@pytest.mark.slow
def test_oltp_benchmark_runs_and_cleans_up(scratch: CloudHandle) -> None:
    dsn = scratch.topology.machines[0].dsn
    ensure_capture_setup(dsn)  # the machine's own slot and publication stay
    with ch.connect_retry(dsn) as conn:
        before = conn.execute("SELECT (SELECT count(*) FROM pg_replication_slots), "
                              "(SELECT count(*) FROM pg_publication), "
                              "(SELECT count(*) FROM pg_tables WHERE schemaname = 'public')"
                              ).fetchone()
    doc = bench_capture_oltp(dsn, scratch.settings.pg_bindir, seconds=2, repeat=1)
    for way in ("none", "pg_recvlogical", "smile"):
        assert doc[way]["tps"] > 0, way
    assert doc["smile"]["capturer_cpu_us_per_txn"] > 0
    assert doc["smile"]["drain_s"] is not None
    with ch.connect_retry(dsn) as conn:
        after = conn.execute("SELECT (SELECT count(*) FROM pg_replication_slots), "
                             "(SELECT count(*) FROM pg_publication), "
                             "(SELECT count(*) FROM pg_tables WHERE schemaname = 'public')"
                             ).fetchone()
    assert after == before
