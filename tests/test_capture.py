"""Capture's awkward cases against a real PostgreSQL: TOAST, TRUNCATE, NULLs, bags, wide rows,
a 1M-row transaction in bounded memory, schema changes, drops, publishing while capture runs,
idle watermarks, retention, status and refusals."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from psycopg import sql

from smile.delta_capture.publish import publish_relation, unpublish_relation
from smile.delta_capture.registry import delta_table, delta_vertex, shadow_table, shadow_vertex
from smile.delta_capture.status import capture_status
from smile.errors import CaptureError
from smile.operators import vertex_ts
from smile.operators.delta_to_rel import delta_to_rel
from tests.capture_helpers import (
    CapturerProcess,
    CapturerThread,
    audit_history,
    bag_difference,
    connect_retry,
    delta_history,
    fresh_name,
    install_audit,
    wait_caught_up,
)

if TYPE_CHECKING:
    from tests.capture_helpers import History
    from tests.fix_cloud import CloudHandle

pytestmark = pytest.mark.services


def _dsn(handle: CloudHandle) -> str:
    return handle.topology.machines[0].dsn


def _table(dsn: str, ddl: str, prefix: str = "t", audit: bool = True) -> str:
    name = fresh_name(prefix)
    with connect_retry(dsn) as conn:
        conn.execute(sql.SQL(ddl).format(t=sql.Identifier(name)))
        if audit:
            install_audit(conn, name)
    return name


def _status(dsn: str, table: str) -> Any:
    rels, _ = capture_status("m1", dsn)
    return next(r for r in rels if r.relation == f"public.{table}")


def _roll_shadow(conn: psycopg.Connection[Any], table: str, columns: list[str]) -> None:
    delta_to_rel(conn, delta=("_smile", delta_table("public", table)),
                 rel=("_smile", shadow_table("public", table)), columns=columns,
                 rel_vertex=shadow_vertex("public", table),
                 delta_vertex=delta_vertex("public", table),
                 to_ts=vertex_ts.read(conn, delta_vertex("public", table)))


def _shadow_equals_table(conn: psycopg.Connection[Any], table: str) -> bool:
    return bag_difference(conn, sql.Identifier("public", table),
                          sql.Identifier("_smile", shadow_table("public", table))) == 0


def test_toast_nulls_bags_and_truncate(scratch: CloudHandle) -> None:
    dsn = _dsn(scratch)
    t = _table(dsn, "CREATE TABLE {t} (k int, v text, big text)")
    publish_relation(dsn, f"public.{t}")
    big = secrets.token_hex(20_000)  # incompressible: stored out of line
    with CapturerThread(dsn, shadow_s=0), connect_retry(dsn) as conn:
        ins = sql.SQL("INSERT INTO {} VALUES (%s, %s, %s)").format(sql.Identifier(t))
        with conn.transaction():
            for row in [(1, "a", big), (1, "a", big), (2, None, None), (None, "\t\\", "")]:
                conn.execute(ins, row)  # duplicates, NULLs, special characters
        # an UPDATE that leaves the TOASTed value alone: pgoutput does not resend it
        conn.execute(sql.SQL("UPDATE {} SET v = 'b' WHERE k = 1").format(sql.Identifier(t)))
        with conn.transaction():  # rows inserted and truncated in one transaction
            conn.execute(ins, (3, "c", None))
            conn.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(t)))
            conn.execute(ins, (4, "d", big))
        conn.execute(sql.SQL("DELETE FROM {} WHERE k = 4").format(sql.Identifier(t)))
        wait_caught_up(dsn)
        history = delta_history(conn, t)
        assert history == audit_history(conn, t)
        update = history[1]
        assert update[(1, json.dumps({"big": big, "k": 1, "v": "b"}, sort_keys=True))] == 2
        assert sum(n for (sign, _), n in history[2].items() if sign == -1) == 5  # 4 + the new one
        _roll_shadow(conn, t, ["k", "v", "big"])
        assert _shadow_equals_table(conn, t)


def test_wide_rows(scratch: CloudHandle) -> None:
    dsn = _dsn(scratch)
    cols = ", ".join(f"c{i} text" for i in range(300))
    t = _table(dsn, f"CREATE TABLE {{t}} (k int, {cols}, huge text)")
    publish_relation(dsn, f"public.{t}")
    huge = secrets.token_hex(2_500_000)  # 5 MB
    with CapturerThread(dsn, shadow_s=0), connect_retry(dsn) as conn:
        values = [f"value {i} " * 3 for i in range(300)]
        marks = sql.SQL(", ").join(sql.Placeholder() * 302)
        conn.execute(sql.SQL("INSERT INTO {} VALUES ({})").format(sql.Identifier(t), marks),
                     [1, *values, huge])
        conn.execute(sql.SQL("UPDATE {} SET c7 = 'changed', k = 2").format(sql.Identifier(t)))
        wait_caught_up(dsn)
        assert delta_history(conn, t) == audit_history(conn, t)


def test_large_transaction_in_bounded_memory(scratch: CloudHandle) -> None:
    dsn = _dsn(scratch)
    t = _table(dsn, "CREATE TABLE {t} (k int, v text)", audit=False)
    publish_relation(dsn, f"public.{t}")
    with CapturerProcess(scratch) as cap, connect_retry(dsn) as conn:
        assert cap.proc is not None
        conn.execute(sql.SQL("INSERT INTO {} SELECT g, md5(g::text) FROM generate_series(1, "
                             "1000000) g").format(sql.Identifier(t)))
        wait_caught_up(dsn, timeout=180)
        status = Path(f"/proc/{cap.proc.pid}/status").read_text()
        peak_kb = int(next(x for x in status.splitlines() if x.startswith("VmHWM")).split()[1])
        row = conn.execute(sql.SQL("SELECT count(*), count(DISTINCT __lsn), sum(__sign) FROM {}")
                           .format(sql.Identifier("_smile", delta_table("public", t)))).fetchone()
    assert row == (1_000_000, 1, 1_000_000)
    # the transaction's rows (~40 MB as COPY text) never sit in memory at once
    assert peak_kb < 200_000, f"capturer peaked at {peak_kb} kB"


def test_schema_changes_are_followed_until_the_table_is_dropped(scratch: CloudHandle) -> None:
    """A column added is followed (its values left out until the table is published again);
    a column dropped or retyped is followed too — from there R holds NULL in it, every row R
    had turned so in ΔR, and it is noted as gone; a dropped table stops that relation's
    capture, and only its."""
    dsn = _dsn(scratch)
    a = _table(dsn, "CREATE TABLE {t} (k int, v text)", audit=False)
    b = _table(dsn, "CREATE TABLE {t} (k int, v text)", audit=False)
    for t in (a, b):
        publish_relation(dsn, f"public.{t}")
    delta_a = sql.Identifier("_smile", delta_table("public", a))
    with CapturerThread(dsn, shadow_s=0, housekeeping_s=0.5), connect_retry(dsn) as conn:
        for t in (a, b):
            conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 'before')").format(sql.Identifier(t)))
        conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN z int").format(sql.Identifier(a)))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (2, 'after', 9)").format(sql.Identifier(a)))
        conn.execute(sql.SQL("UPDATE {} SET z = 1, v = 'later' WHERE k = 1").format(
            sql.Identifier(a)))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (2, 'after')").format(sql.Identifier(b)))
        wait_caught_up(dsn)
        assert _status(dsn, a).state == "streaming" and _status(dsn, a).error is None
        rows_a = conn.execute(sql.SQL("SELECT k, v, __sign FROM {} ORDER BY __ts, __idx").format(
            delta_a)).fetchall()
        assert rows_a == [(1, "before", 1), (2, "after", 1), (1, "before", -1),
                          (1, "later", 1)]
        conn.execute(sql.SQL("ALTER TABLE {} DROP COLUMN v").format(sql.Identifier(a)))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (3, 9)").format(sql.Identifier(a)))
        conn.execute(sql.SQL("UPDATE {} SET z = 2 WHERE k = 2").format(sql.Identifier(a)))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (3, 'after')").format(sql.Identifier(b)))
        conn.commit()
        wait_caught_up(dsn)
        sa, sb = _status(dsn, a), _status(dsn, b)
        assert sa.state == "streaming" and sa.error is None, sa
        after = Counter(conn.execute(sql.SQL("SELECT k, v, __sign FROM {}").format(
            delta_a)).fetchall()) - Counter(rows_a)
        assert after == Counter([(1, "later", -1), (2, "after", -1), (1, None, 1), (2, None, 1),
                                 (3, None, 1), (2, None, -1), (2, None, 1)]), after
        assert conn.execute("SELECT gone FROM _smile.capture_state WHERE relid = %s::regclass",
                            (f"public.{a}",)).fetchone() == (["v"],)
        conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN z TYPE bigint").format(
            sql.Identifier(a)))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (4, 9)").format(sql.Identifier(a)))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (4, 'after')").format(sql.Identifier(b)))
        wait_caught_up(dsn)
        sa, sb = _status(dsn, a), _status(dsn, b)
        assert sa.state == "streaming" and sa.error is None, sa  # z was never captured
        assert sb.state == "streaming" and sb.error is None and sb.rows_captured == 4
        conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN k TYPE bigint").format(
            sql.Identifier(a)))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (5, 9)").format(sql.Identifier(a)))
        wait_caught_up(dsn)
        assert _status(dsn, a).state == "streaming"
        assert conn.execute("SELECT gone FROM _smile.capture_state WHERE relid = %s::regclass",
                            (f"public.{a}",)).fetchone() == (["k", "v"],)
        rolled = Counter(conn.execute(sql.SQL(
            "SELECT k, v, sum(__sign) FROM {} GROUP BY k, v HAVING sum(__sign) <> 0").format(
            delta_a)).fetchall())
        assert rolled == Counter([(None, None, 5)]), rolled  # R: five rows, k and v NULL
        conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(a)))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (5, 'after')").format(sql.Identifier(b)))
        deadline = time.monotonic() + 15  # the catalog check notices it, the stream passes it
        while (sa := _status(dsn, a)).state != "error" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sa.state == "error" and "dropped" in (sa.error or ""), sa
        assert "publish it again" in sa.error
        # its watermark stops; the healthy relation's goes on
        time.sleep(1)
        assert _status(dsn, b).watermark > _status(dsn, a).watermark
        # a table made again under the name is published afresh
        conn.execute(sql.SQL("CREATE TABLE {} (k bigint, z bigint)").format(sql.Identifier(a)))
        rel = publish_relation(dsn, f"public.{a}")
        assert rel.column_names == ("k", "z") and rel.state == "streaming"
        assert _status(dsn, a).state == "streaming"


def test_publishing_again_takes_added_columns_in(scratch: CloudHandle) -> None:
    dsn = _dsn(scratch)
    t = _table(dsn, "CREATE TABLE {t} (k int)", audit=False)
    assert publish_relation(dsn, f"public.{t}").column_names == ("k",)
    with connect_retry(dsn) as conn:
        conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN z int DEFAULT 7").format(
            sql.Identifier(t)))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (1)").format(sql.Identifier(t)))
    rel = publish_relation(dsn, f"public.{t}")
    assert rel.column_names == ("k", "z") and rel.state == "streaming"
    with connect_retry(dsn) as conn:
        shadow = conn.execute(sql.SQL("SELECT k, z FROM {}").format(
            sql.Identifier("_smile", shadow_table("public", t)))).fetchall()
    assert shadow == [(1, 7)]


def test_dropped_table_is_an_error_state(scratch: CloudHandle) -> None:
    dsn = _dsn(scratch)
    t = _table(dsn, "CREATE TABLE {t} (k int)", audit=False)
    publish_relation(dsn, f"public.{t}")
    with CapturerThread(dsn, shadow_s=0, housekeeping_s=0.3), connect_retry(dsn) as conn:
        conn.execute(sql.SQL("INSERT INTO {} VALUES (1), (2)").format(sql.Identifier(t)))
        wait_caught_up(dsn)
        conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(t)))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _status(dsn, t).state != "error":
            time.sleep(0.2)
        status = _status(dsn, t)
        assert status.state == "error" and "dropped" in status.error
        assert status.rows_captured == 2
    assert unpublish_relation(dsn, f"public.{t}")


def test_publish_while_capture_runs_under_writes(scratch: CloudHandle) -> None:
    """No gap and no overlap between the snapshot and the stream, with writes in flight."""
    dsn = _dsn(scratch)
    t = _table(dsn, "CREATE TABLE {t} (k int, v int)", audit=False)
    other = _table(dsn, "CREATE TABLE {t} (k int)", audit=False)
    publish_relation(dsn, f"public.{other}")
    stop = threading.Event()
    writes = [0]

    def writer() -> None:
        with connect_retry(dsn) as conn:
            i = 0
            while not stop.is_set():
                i += 1
                with conn.transaction():
                    conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, 0)").format(
                        sql.Identifier(t)), (i,))
                    conn.execute(sql.SQL("UPDATE {} SET v = v + 1 WHERE k = %s").format(
                        sql.Identifier(t)), (i // 2,))
                    if i % 5 == 0:
                        conn.execute(sql.SQL("DELETE FROM {} WHERE k = %s").format(
                            sql.Identifier(t)), (i - 3,))
                    conn.execute(sql.SQL("INSERT INTO {} VALUES (%s)").format(
                        sql.Identifier(other)), (i,))
                writes[0] = i

    with CapturerThread(dsn, shadow_s=0), connect_retry(dsn) as conn:
        thread = threading.Thread(target=writer)
        thread.start()
        time.sleep(0.5)
        publish_relation(dsn, f"public.{t}")  # while the writer and the capturer run
        time.sleep(1.0)
        stop.set()
        thread.join()
        wait_caught_up(dsn)
        _roll_shadow(conn, t, ["k", "v"])
        assert writes[0] > 50
        assert _shadow_equals_table(conn, t)
        _roll_shadow(conn, other, ["k"])
        assert _shadow_equals_table(conn, other)


def test_idle_watermark_follows_the_source_clock(scratch: CloudHandle) -> None:
    dsn = _dsn(scratch)
    t = _table(dsn, "CREATE TABLE {t} (k int)", audit=False)
    publish_relation(dsn, f"public.{t}")
    with CapturerThread(dsn, shadow_s=0), connect_retry(dsn) as conn:
        time.sleep(1.0)
        lags = []
        for _ in range(10):
            row = conn.execute(
                "SELECT extract(epoch FROM clock_timestamp() - ts) FROM _smile.vertex_ts "
                "WHERE vertex = %s", (delta_vertex("public", t),)).fetchone()
            assert row is not None
            lags.append(float(row[0]))
            time.sleep(0.3)
    assert max(lags) < 1.0, lags


def test_retention_deletes_what_readers_passed(scratch: CloudHandle) -> None:
    dsn = _dsn(scratch)
    t = _table(dsn, "CREATE TABLE {t} (k int)", audit=False)
    publish_relation(dsn, f"public.{t}")
    d = sql.Identifier("_smile", delta_table("public", t))
    with CapturerThread(dsn, shadow_s=0.5, retention_s=0.5), connect_retry(dsn) as conn:
        conn.execute(sql.SQL("INSERT INTO {} SELECT generate_series(1, 1000)").format(
            sql.Identifier(t)))
        conn.execute(sql.SQL("DELETE FROM {} WHERE k <= 500").format(sql.Identifier(t)))
        wait_caught_up(dsn)
        deadline = time.monotonic() + 30
        left = -1
        while time.monotonic() < deadline:
            row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(d)).fetchone()
            left = int(row[0]) if row else -1
            if left == 0:
                break
            time.sleep(0.2)
        assert left == 0  # the shadow, the only reader, is past every delta row
        assert _shadow_equals_table(conn, t)
        # the slot is confirmed up to (nearly) the end of WAL once capture idles: it holds no
        # WAL back beyond what is not yet in a delta
        lag = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn) "
                "FROM pg_replication_slots WHERE slot_name = 'smile_capture'").fetchone()
            lag = int(row[0]) if row else None
            if lag is not None and lag < 1_000_000:
                break
            time.sleep(0.2)
        assert lag is not None and lag < 1_000_000


def test_capture_streams_on_while_a_join_holds_the_shadow(scratch: CloudHandle) -> None:
    """A join holds R̂ still (a share lock on its TS row) for as long as it runs; capture's
    advance of R̂ waits for it on a side thread while the stream goes on being read, and R̂
    catches up once the join ends."""
    dsn = _dsn(scratch)
    t = _table(dsn, "CREATE TABLE {t} (k int)", audit=False)
    publish_relation(dsn, f"public.{t}")
    sv, dv = shadow_vertex("public", t), delta_vertex("public", t)
    with CapturerThread(dsn, shadow_s=0.2, retention_s=0.2), connect_retry(dsn) as conn, \
            psycopg.connect(dsn) as join:
        join.execute("SELECT ts FROM _smile.vertex_ts WHERE vertex = %s FOR SHARE", (sv,))
        held = vertex_ts.read(conn, sv)
        for i in range(8):
            conn.execute(sql.SQL("INSERT INTO {} SELECT generate_series(%s::int, %s::int)").format(
                sql.Identifier(t)), (i * 100 + 1, i * 100 + 100))
            time.sleep(0.5)
        wait_caught_up(dsn, timeout=10)  # the stream is read while the shadow waits
        row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
            sql.Identifier("_smile", delta_table("public", t)))).fetchone()
        assert row == (800,)
        assert vertex_ts.read(conn, sv) == held  # still held: not advanced under the join
        assert vertex_ts.read(conn, dv) > held
        join.rollback()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not _shadow_equals_table(conn, t):
            time.sleep(0.2)
        assert _shadow_equals_table(conn, t)


def test_status_command_reports_json(scratch: CloudHandle) -> None:
    dsn = _dsn(scratch)
    t = _table(dsn, "CREATE TABLE {t} (k int)", audit=False)
    publish_relation(dsn, f"public.{t}")
    done = subprocess.run(
        [sys.executable, "-m", "smile.cli.main", "capture", "status", "--json"],
        env=os.environ | {"SMILE_STATE_DIR": str(scratch.settings.state_dir)},
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    mine = next(r for r in doc["relations"] if r["relation"] == f"public.{t}")
    assert set(mine) >= {"watermark", "lag_s", "lag_bytes", "lag_txns", "rows_captured", "error",
                         "state"}
    assert doc["slots"][0]["slot"] == "smile_capture"
    assert doc["slots"][0]["retained_wal_bytes"] >= 0


def test_publish_is_idempotent_and_refuses_clearly(scratch: CloudHandle) -> None:
    dsn = _dsn(scratch)
    t = _table(dsn, "CREATE TABLE {t} (k int)", audit=False)
    first = publish_relation(dsn, f"public.{t}")
    again = publish_relation(dsn, f"public.{t}")
    assert (again.relid, again.start_lsn, again.start_ts) == (
        first.relid, first.start_lsn, first.start_ts)
    with pytest.raises(CaptureError, match=r"no table public\.nope.*tables:"):
        publish_relation(dsn, "public.nope")
    with pytest.raises(CaptureError, match="SMILE's own"):
        publish_relation(dsn, "_smile.capture_state")
    g = _table(dsn, "CREATE TABLE {t} (k int, k2 int GENERATED ALWAYS AS (k * 2) STORED)",
               audit=False)
    with pytest.raises(CaptureError, match="generated columns"):
        publish_relation(dsn, f"public.{g}")
    with pytest.raises(CaptureError, match="bad table name"):
        publish_relation(dsn, "a.b.c")


def test_capture_benchmark_runs_and_cleans_up(scratch: CloudHandle) -> None:
    from smile.bench.capture import bench_capture

    dsn = _dsn(scratch)
    report = bench_capture(dsn, rows=2000, repeat=1, bindir=scratch.settings.pg_bindir)
    for key in ("insert_rows_per_s", "capture_rows_per_s", "ceiling_rows_per_s",
                "capture_vs_ceiling", "capture_vs_insert"):
        assert report[key] > 0, key
    with connect_retry(dsn) as conn:
        left = conn.execute(
            "SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE "
            "'smile_bench%%') + (SELECT count(*) FROM pg_tables WHERE tablename LIKE "
            "'smile_bench%%')").fetchone()
    assert left == (0,)


def test_schema_setup_survives_processes_starting_together(cloud: CloudHandle) -> None:
    """Capturers and agents create `_smile` at the same moment on a fresh database, some in a
    transaction of their own (as a capturer's setup does) and some in autocommit (as an
    agent's start): all must come through (CREATE … IF NOT EXISTS alone loses that race), and
    none by failing and trying again — a failed statement is an ERROR in the server's log,
    which a user reading it takes for a fault. The database's rolled-back transactions say
    so."""
    import threading

    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from smile.delta_capture.registry import ensure_capture_schema

    dsn = cloud.topology.machines[0].dsn
    name = f"race_{time.monotonic_ns()}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    fresh = make_conninfo(**{**conninfo_to_dict(dsn), "dbname": name})
    errors: list[BaseException] = []
    go = threading.Barrier(8)

    def setup(in_transaction: bool) -> None:
        try:
            with psycopg.connect(fresh, autocommit=True) as conn:
                go.wait()
                if in_transaction:
                    with conn.transaction():
                        ensure_capture_schema(conn)
                else:
                    ensure_capture_schema(conn)
                # its counters into the shared statistics before this statement returns
                conn.execute("SELECT pg_stat_force_next_flush()")
        except BaseException as exc:
            errors.append(exc)

    try:
        threads = [threading.Thread(target=setup, args=(n % 2 == 0,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors, errors
        with psycopg.connect(fresh) as conn:
            assert conn.execute("SELECT to_regclass('_smile.vertex_ts')").fetchone() != (None,)
            assert conn.execute("SELECT xact_commit > 0, xact_rollback FROM pg_stat_database "
                                "WHERE datname = current_database()").fetchone() == (True, 0)
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def test_schema_setup_takes_no_lock_a_capturer_holds(cloud: CloudHandle) -> None:
    """The schema's setup runs inside deploys beside a streaming capturer: while a transaction
    holds the capturer's progress and state rows, setting up again must not wait for it (an
    ACCESS EXCLUSIVE lock there deadlocked a deploy with the capturer); on tables made before
    a column existed, the setup adds it."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from smile.delta_capture.registry import ensure_capture_schema

    dsn = cloud.topology.machines[0].dsn
    name = f"locks_{time.monotonic_ns()}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    fresh = make_conninfo(**{**conninfo_to_dict(dsn), "dbname": name})
    try:
        with psycopg.connect(fresh, autocommit=True) as conn:
            ensure_capture_schema(conn)
            conn.execute("ALTER TABLE _smile.capture_progress DROP COLUMN last_xid")
            conn.execute("ALTER TABLE _smile.capture_state DROP COLUMN resync_rows")
            ensure_capture_schema(conn)  # an older machine's tables get the new columns
            cols = {r[0] for r in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid IN "
                "('_smile.capture_progress'::regclass, '_smile.capture_state'::regclass) "
                "AND NOT attisdropped")}
            assert {"last_xid", "resync_rows", "resynced_at"} <= cols
        with psycopg.connect(fresh) as holder, psycopg.connect(fresh) as setup:
            holder.execute("INSERT INTO _smile.capture_progress (slot, commit_lsn, end_lsn, "
                           "last_ts, last_xid) VALUES ('s', '0/1', '0/1', now(), 1)")
            holder.execute("INSERT INTO _smile.capture_state (relid) VALUES (1)")
            setup.execute("SET lock_timeout = '2s'")
            ensure_capture_schema(setup)  # in a transaction, as a deploy runs it
            setup.commit()
            holder.commit()
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def test_an_invalidated_slot_is_replaced_and_the_deltas_caught_up(scratch: CloudHandle) -> None:
    """A capturer away while more WAL than `max_slot_wal_keep_size` is written loses its slot
    (`wal_status = 'lost'`): on its return it replaces the slot and writes what ΔR lacks — R
    now minus R as of its watermark, one signed change — so R̂ rolled forward equals R again,
    before and after the changes that follow; the relation says when it was re-synchronised."""
    dsn = _dsn(scratch)
    t = _table(dsn, "CREATE TABLE {t} (k int, v text)", audit=False)
    junk = _table(dsn, "CREATE TABLE {t} (x text)", audit=False)
    publish_relation(dsn, f"public.{t}")
    ins = sql.SQL("INSERT INTO {} SELECT i, 'v' || i "
                  "FROM generate_series(%s::int, %s::int) i").format(sql.Identifier(t))
    with connect_retry(dsn) as conn:
        conn.autocommit = True
        with CapturerThread(dsn, shadow_s=0):
            conn.execute(ins, (1, 100))
            wait_caught_up(dsn)
        try:
            conn.execute("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
            conn.execute("SELECT pg_reload_conf()")
            conn.execute(ins, (101, 150))  # while nobody captures
            conn.execute(sql.SQL("UPDATE {} SET v = 'changed' WHERE k % 7 = 0").format(
                sql.Identifier(t)))
            conn.execute(sql.SQL("DELETE FROM {} WHERE k % 11 = 0").format(sql.Identifier(t)))
            for _ in range(6):  # WAL segments beyond what the slot may keep
                conn.execute(sql.SQL("INSERT INTO {} SELECT repeat('x', 1000) "
                                     "FROM generate_series(1, 2000)").format(
                    sql.Identifier(junk)))
                conn.execute("SELECT pg_switch_wal()")
            conn.execute("CHECKPOINT")
            status = conn.execute("SELECT wal_status FROM pg_replication_slots "
                                  "WHERE slot_name = 'smile_capture'").fetchone()
            assert status == ("lost",)
        finally:
            conn.execute("ALTER SYSTEM RESET max_slot_wal_keep_size")
            conn.execute("SELECT pg_reload_conf()")
        with CapturerThread(dsn, shadow_s=0):
            wait_caught_up(dsn)
            conn.execute(ins, (151, 160))  # and the stream goes on from the new slot
            conn.execute(sql.SQL("DELETE FROM {} WHERE k = 1").format(sql.Identifier(t)))
            wait_caught_up(dsn)
            _roll_shadow(conn, t, ["k", "v"])
            assert _shadow_equals_table(conn, t)
        row = conn.execute("SELECT s.resynced_at IS NOT NULL, s.resync_rows "
                           "FROM _smile.capture_state s JOIN _smile.captured_relations r "
                           "USING (relid) WHERE r.table_name = %s", (t,)).fetchone()
        assert row is not None and row[0] and row[1] == 81  # |R now − R as of W|
        assert _status(dsn, t).resynced_at is not None  # `smile capture status` says so
        assert conn.execute("SELECT wal_status FROM pg_replication_slots "
                            "WHERE slot_name = 'smile_capture'").fetchone() != ("lost",)


def _decoding_memory(conn: psycopg.Connection[Any], value: str | None) -> None:
    """Set (None: reset) the server's logical_decoding_work_mem; walsenders take it on reload."""
    conn.execute(sql.SQL("ALTER SYSTEM SET logical_decoding_work_mem = {}").format(
        sql.Literal(value)) if value else "ALTER SYSTEM RESET logical_decoding_work_mem")
    conn.execute("SELECT pg_reload_conf()")


def _slot_stats(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """(transactions streamed, transactions spilled to disk) by capture's slot so far."""
    row = conn.execute("SELECT stream_txns, spill_txns FROM pg_stat_replication_slots "
                       "WHERE slot_name = 'smile_capture'").fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def _unordered(history: History) -> list[list[tuple[tuple[int, str], int]]]:
    """A history's transactions, each as its sorted rows, in no particular order (the audit
    trail orders them by first change, not by commit)."""
    return sorted(sorted(txn.items()) for txn in history)


def test_big_transactions_stream_through_whole_and_once(scratch: CloudHandle) -> None:
    """Transactions bigger than `logical_decoding_work_mem` (64 kB here) come streamed before
    their commit. ΔR gets each whole at its commit, without the subtransactions it rolled back,
    and once, with the capturer SIGKILLed in the middle of one; an aborted one leaves nothing;
    one on an unpublished table is streamed (its changes dropped as they are decoded), not
    spilled to disk and replayed at its commit ahead of the small commits behind it."""
    dsn = _dsn(scratch)
    t = _table(dsn, "CREATE TABLE {t} (k int, v text)")
    other = _table(dsn, "CREATE TABLE {t} (x int, pad text)", audit=False)
    publish_relation(dsn, f"public.{t}")
    table = sql.Identifier(t)
    ins = sql.SQL("INSERT INTO {} SELECT g, md5(g::text) FROM generate_series(%s::int, %s::int) g"
                  ).format(table)
    with connect_retry(dsn) as conn, connect_retry(dsn) as big:
        _decoding_memory(conn, "64kB")
        try:
            with CapturerProcess(scratch) as cap:
                wait_caught_up(dsn)
                before = _slot_stats(conn)
                with big.transaction():  # small commits land while it is open
                    big.execute(ins, (1, 3000))
                    conn.execute(ins, (100_001, 100_001))
                    big.execute("SAVEPOINT a")
                    big.execute(sql.SQL("UPDATE {} SET v = 'a' WHERE k % 3 = 0").format(table))
                    big.execute("SAVEPOINT b")
                    big.execute(ins, (3001, 6000))
                    big.execute("ROLLBACK TO SAVEPOINT a")  # a and b, nested in it, roll back
                    big.execute("SAVEPOINT c")
                    big.execute(sql.SQL("DELETE FROM {} WHERE k % 5 = 0").format(table))
                    big.execute("RELEASE SAVEPOINT c")
                    conn.execute(ins, (100_002, 100_002))
                    big.execute(ins, (6001, 8000))
                big.execute("BEGIN")  # one that aborts
                big.execute(ins, (10_001, 15_000))
                big.execute("ROLLBACK")
                with big.transaction():
                    big.execute(sql.SQL("INSERT INTO {} SELECT g, repeat('x', 200) FROM "
                                        "generate_series(1, 20000) g").format(
                        sql.Identifier(other)))
                    conn.execute(ins, (100_003, 100_003))
                wait_caught_up(dsn)
                deadline = time.monotonic() + 10  # slot statistics arrive a little later
                while _slot_stats(conn)[0] < before[0] + 3 and time.monotonic() < deadline:
                    time.sleep(0.2)
                streamed, spilled = _slot_stats(conn)
                assert streamed >= before[0] + 3, (before, streamed)
                assert spilled == before[1], "a big transaction went to disk"
                assert _unordered(delta_history(conn, t)) == _unordered(audit_history(conn, t))
                # at its commit: after the small ones that committed while it was open
                first = conn.execute(sql.SQL("SELECT (SELECT __ts FROM {d} WHERE k = 100002) < "
                                             "(SELECT __ts FROM {d} WHERE k = 1)").format(
                    d=sql.Identifier("_smile", delta_table("public", t)))).fetchone()
                assert first == (True,)
                with big.transaction():  # the capturer dies while this one streams
                    big.execute(ins, (20_001, 25_000))
                    time.sleep(1.0)
                    cap.kill()
                    cap.start()
                    big.execute(ins, (25_001, 27_000))
                    conn.execute(ins, (100_004, 100_004))
                wait_caught_up(dsn)
                assert _unordered(delta_history(conn, t)) == _unordered(audit_history(conn, t))
                rows = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE k > 10000 AND k <= "
                                            "15000").format(sql.Identifier(
                    "_smile", delta_table("public", t)))).fetchone()
                assert rows == (0,)  # the aborted transaction left nothing
        finally:
            _decoding_memory(conn, None)
