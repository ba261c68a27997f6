"""`smile bench capture`: end-to-end capture throughput against PostgreSQL's own ceiling.

On one machine: a fresh table is published and a capturer runs; a second slot is created as
the ceiling's starting point. Then `rows` rows are inserted in one transaction (the source's own
bulk insert rate; the same rows sent by a client give the rate an app's writes reach), capture
is timed from that commit until every row is durable in ΔR (the sink's commit confirmed), and
PostgreSQL's `pg_recvlogical` reads the same WAL range with pgoutput into a file (the ceiling:
decoding and shipping, no parsing, no storing). Each of `repeat` rounds measures all of them;
the medians are reported with every round.

Must not: leave anything behind (table, publication entry, slots).
"""

from __future__ import annotations

import os
import secrets
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from smile.db import connect
from smile.delta_capture.capturer import Capturer
from smile.delta_capture.decode import parse_lsn
from smile.delta_capture.publish import publish_relation, unpublish_relation
from smile.delta_capture.registry import PUBLICATION
from smile.errors import SmileError
from smile.housekeeping.capture import Housekeeping, run_beside

if TYPE_CHECKING:
    from pathlib import Path

    from smile.delta_capture.progress import Progress


@dataclass(frozen=True)
class Round:
    insert_s: float
    client_insert_s: float
    capture_s: float
    capture_cpu_s: float
    ceiling_s: float


def _recvlogical(bindir: Path, dsn: str, slot: str, end_lsn: str) -> float:
    info = conninfo_to_dict(dsn)
    env = os.environ | {"PGPASSWORD": str(info.get("password", ""))}
    with tempfile.NamedTemporaryFile(prefix="smile-ceiling-") as out:
        started = time.perf_counter()
        subprocess.run(
            [str(bindir / "pg_recvlogical"), "-h", str(info.get("host", "127.0.0.1")),
             "-p", str(info.get("port", 5432)), "-U", str(info.get("user", "")),
             "-d", str(info.get("dbname", "")), "--slot", slot, "--start",
             "-o", "proto_version=1", "-o", f"publication_names={PUBLICATION}",
             "--endpos", end_lsn, "-f", out.name, "--no-loop"],
            env=env, check=True, capture_output=True, timeout=600,
        )
        return time.perf_counter() - started


def bench_capture(dsn: str, rows: int, repeat: int, bindir: Path) -> dict[str, Any]:
    if rows < 1 or repeat < 1:
        raise SmileError("--rows and --repeat must be positive")
    table = f"smile_bench_capture_{secrets.token_hex(3)}"
    ceiling_slot = f"smile_bench_ceiling_{secrets.token_hex(3)}"
    with connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(
            "CREATE TABLE {} (k bigint, v text, x double precision, t timestamptz)"
        ).format(sql.Identifier(table)))
    publish_relation(dsn, f"public.{table}")
    durable = threading.Condition()
    seen: list[int] = [0]

    def on_commit(progress: Progress) -> None:
        with durable:
            seen[0] = max(seen[0], progress.end_lsn)
            durable.notify_all()

    stop = threading.Event()
    capturer = Capturer(dsn, on_commit=on_commit)
    thread = threading.Thread(target=run_beside, args=(capturer, stop, Housekeeping(shadow_s=0)),
                              daemon=True)
    thread.start()
    rounds: list[Round] = []
    try:
        with connect(dsn, autocommit=True) as conn:
            for _ in range(repeat):
                _wait_for(durable, seen, _current_lsn(conn), 60)
                conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')",
                             (ceiling_slot,))
                cpu0 = time.process_time()
                started = time.perf_counter()
                conn.execute(sql.SQL(
                    "INSERT INTO {} SELECT g, md5(g::text), g * 1.5, now() "
                    "FROM generate_series(1, %s) g").format(sql.Identifier(table)), (rows,))
                committed = time.perf_counter()
                end = _current_lsn(conn)
                _wait_for(durable, seen, end, 600)
                captured = time.perf_counter()
                cpu = time.process_time() - cpu0
                end_text = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
                assert end_text is not None
                ceiling = _recvlogical(bindir, dsn, ceiling_slot, end_text[0])
                conn.execute("SELECT pg_drop_replication_slot(%s)", (ceiling_slot,))
                conn.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(table)))
                client = _client_insert(conn, rows)
                rounds.append(Round(committed - started, client, captured - committed, cpu,
                                    ceiling))
    finally:
        stop.set()
        thread.join(10)
        with connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                         "WHERE slot_name = %s", (ceiling_slot,))
        unpublish_relation(dsn, f"public.{table}")
        with connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
    return _report(rows, rounds)


def _client_insert(conn: Any, rows: int) -> float:
    """The same rows sent by a client as an application would (pipelined INSERTs in one
    transaction), into an unpublished table: the rate an app's own writes reach."""
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS smile_bench_client "
                 "(k bigint, v text, x double precision, t timestamptz)")
    data = [(g, f"{g:032x}", g * 1.5) for g in range(1, rows + 1)]
    started = time.perf_counter()
    with conn.transaction(), conn.cursor() as cur:
        cur.executemany("INSERT INTO smile_bench_client VALUES (%s, %s, %s, now())", data)
    elapsed = time.perf_counter() - started
    conn.execute("DROP TABLE smile_bench_client")
    return elapsed


def _current_lsn(conn: Any) -> int:
    row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    return parse_lsn(row[0])


def _wait_for(cond: threading.Condition, seen: list[int], lsn: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with cond:
        while seen[0] < lsn:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SmileError(f"capture did not reach the benchmark's LSN in {timeout:.0f}s")
            cond.wait(left)


def _report(rows: int, rounds: list[Round]) -> dict[str, Any]:
    insert = statistics.median(rows / r.insert_s for r in rounds)
    client = statistics.median(rows / r.client_insert_s for r in rounds)
    capture = statistics.median(rows / r.capture_s for r in rounds)
    ceiling = statistics.median(rows / r.ceiling_s for r in rounds)
    cpu_share = statistics.median(r.capture_cpu_s / r.capture_s for r in rounds)
    return {
        "rows": rows,
        "rounds": len(rounds),
        "insert_rows_per_s": round(insert),
        "client_insert_rows_per_s": round(client),
        "capture_rows_per_s": round(capture),
        "ceiling_rows_per_s": round(ceiling),
        "capture_vs_ceiling": round(capture / ceiling, 3),
        "capture_vs_insert": round(capture / insert, 3),
        "capture_vs_client_insert": round(capture / client, 3),
        "capture_cpu_share": round(cpu_share, 2),
        "limits": (
            "the capturer's Python thread (parsing pgoutput tuples and building COPY lines under "
            "the GIL) when capture_cpu_share is near 1; the walsender's decoding (the ceiling) "
            "bounds both; a server-side bulk INSERT ... SELECT outruns logical decoding itself "
            "(the ceiling is below insert_rows_per_s), so no pgoutput consumer can match it, "
            "while rows sent by a client (client_insert_rows_per_s) are captured faster than "
            "they arrive"
        ),
        "per_round": [
            {"insert_s": round(r.insert_s, 3), "client_insert_s": round(r.client_insert_s, 3),
             "capture_s": round(r.capture_s, 3),
             "capture_cpu_s": round(r.capture_cpu_s, 3), "ceiling_s": round(r.ceiling_s, 3)}
            for r in rounds
        ],
    }
