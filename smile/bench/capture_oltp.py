"""`smile bench capture --oltp`: what capture costs an app writing small transactions.

On one machine, in one run, `pgbench` sends single-row INSERTs from `clients` clients for
`seconds` seconds three ways, each `repeat` times in turn: with no capture, with PostgreSQL's
own `pg_recvlogical` reading pgoutput from a slot of its own (the ceiling: decoding and
shipping, no parsing, no storing), and with SMILE's capturer (a child process, as `smile
capture run` runs it, housekeeping beside it). For each it reports the app's transactions per
second, the capturing process's CPU per source transaction (`/proc/PID/stat`, all its threads,
from the load's start until it has drained), the source cluster's CPU per transaction (every
process of the PostgreSQL server: the app's backends, the walsender, SMILE's own sessions),
the WAL written per transaction, and how long capture took to drain after the load stopped.

The ways write to two tables of the same shape: the baseline and `pg_recvlogical` to one in a
publication of the benchmark's own, SMILE to one it publishes; so SMILE's slot never has to
wade through the others' rows, and `pg_recvlogical`'s never sees SMILE's deltas. The server's
CPU is read from /proc, so only for a machine on this host (else None).

Must not: leave anything behind (tables, publication, slots, processes).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import re
import secrets
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from smile.cloud.procs import parent_pid, stat_fields
from smile.db import connect
from smile.delta_capture.decode import parse_lsn
from smile.delta_capture.publish import publish_relation, unpublish_relation
from smile.errors import SmileError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import psycopg

TICKS_PER_S = float(os.sysconf("SC_CLK_TCK"))
WAYS = ("none", "pg_recvlogical", "smile")
DRAIN_LIMIT_S = 120.0
"""How long a capturer may take to drain before the benchmark gives up on it."""
SCRIPT = (
    "\\set k random(1, 1000000000)\n"
    "INSERT INTO {table} VALUES (:k, md5(:k::text), :k * 1.5, now());\n"
)


@dataclass(frozen=True)
class Way:
    way: str
    transactions: int
    tps: float
    capturer_cpu_us_per_txn: float | None
    source_cpu_us_per_txn: float | None
    """Every process of the source's server, the app's backends included."""
    walsender_cpu_us_per_txn: float
    """Of that, the walsender's (decoding the WAL for the slot)."""
    smile_sessions_cpu_us_per_txn: float
    """Of that, SMILE's own sessions' (writing ΔR, R̂, retention, progress)."""
    wal_bytes_per_txn: float
    drain_s: float | None


@dataclass(frozen=True)
class _Target:
    dsn: str
    bindir: Path
    seconds: float
    clients: int


def process_ticks(pid: int) -> int:
    """User and system clock ticks of a process, all its threads (0 once it is gone)."""
    fields = stat_fields(pid)
    return int(fields[11]) + int(fields[12]) if fields else 0


def server_ticks(postmaster: int | None) -> int | None:
    """Clock ticks of a PostgreSQL server: the postmaster, its children now, and the children
    it reaped (their times are added to its own `cutime` and `cstime`)."""
    if postmaster is None:
        return None
    fields = stat_fields(postmaster)
    if not fields:
        return None
    total = sum(int(f) for f in fields[11:15])
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and parent_pid(int(entry.name)) == postmaster:
            total += process_ticks(int(entry.name))
    return total


def _postmaster(conn: psycopg.Connection[Any]) -> int | None:
    """The server's postmaster, when it runs on this host (its backends are its children)."""
    host = conn.info.host
    if host not in ("", "localhost", "127.0.0.1", "::1") and not host.startswith("/"):
        return None
    parent = parent_pid(int(conn.info.backend_pid))
    return parent or None


def _lsn(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    return parse_lsn(row[0])


def _pgbench(t: _Target, table: str) -> tuple[int, float]:
    """(transactions, tps) of one pgbench run inserting into `table`."""
    with tempfile.NamedTemporaryFile("w", suffix=".sql", prefix="smile-oltp-") as script:
        script.write(SCRIPT.format(table=sql.Identifier(table).as_string(None)))
        script.flush()
        done = subprocess.run(
            [str(t.bindir / "pgbench"), "-n", "-c", str(t.clients), "-j", str(t.clients),
             "-T", str(round(t.seconds)), "-f", script.name, t.dsn],
            check=True, capture_output=True, text=True, timeout=t.seconds + 120,
        )
    txns = re.search(r"number of transactions actually processed: (\d+)", done.stdout)
    tps = re.search(r"tps = ([\d.]+)", done.stdout)
    if txns is None or tps is None:
        raise SmileError(f"pgbench said nothing of its rate: {done.stdout[-500:]}")
    return int(txns.group(1)), float(tps.group(1))


def _sessions(conn: psycopg.Connection[Any]) -> dict[int, str]:
    """The server processes a capture runs on the source, by pid: its walsender (reading the
    slot) and SMILE's own sessions (the sink, housekeeping)."""
    rows = conn.execute(
        "SELECT pid, CASE WHEN backend_type = 'walsender' THEN 'walsender' ELSE 'smile' END "
        "FROM pg_stat_activity WHERE backend_type = 'walsender' "
        "OR application_name LIKE 'smile-capture%'").fetchall()
    return {int(pid): str(kind) for pid, kind in rows}


def _session_ticks(pids: dict[int, str]) -> dict[str, int]:
    out = {"walsender": 0, "smile": 0}
    for pid, kind in pids.items():
        out[kind] += process_ticks(pid)
    return out


def _app_gone(conn: psycopg.Connection[Any]) -> None:
    """Until pgbench's backends have exited (and been reaped: their CPU is the server's)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgbench'"
    ).fetchone() != (0,):
        time.sleep(0.02)
    time.sleep(0.1)


def _measure(t: _Target, way: str, table: str, capturer: int | None,
             drained: Callable[[int], bool] | None) -> Way:
    """One load: pgbench into `table` while `capturer` (a pid) captures it, until `drained`
    says the LSN at the load's end is durable on the capture side."""
    with connect(t.dsn, autocommit=True) as conn:
        postmaster = _postmaster(conn)
        before = _sessions(conn)
        lsn0, cpu0, src0 = _lsn(conn), process_ticks(capturer or 0), server_ticks(postmaster)
        sessions0 = _session_ticks(before)
        txns, tps = _pgbench(t, table)
        end = _lsn(conn)
        stopped = time.monotonic()
        drain: float | None = None
        if drained is not None:
            while not drained(end):
                if time.monotonic() - stopped > DRAIN_LIMIT_S:
                    raise SmileError(f"{way} did not drain in {DRAIN_LIMIT_S:.0f}s")
                time.sleep(0.01)
            drain = time.monotonic() - stopped
        _app_gone(conn)
        after = before | _sessions(conn)
        cpu1, src1, lsn1 = process_ticks(capturer or 0), server_ticks(postmaster), _lsn(conn)
        sessions1 = _session_ticks(after)  # a session born meanwhile counts from its birth
    per_txn = 1e6 / TICKS_PER_S / max(txns, 1)
    used = {k: (sessions1[k] - sessions0[k]) * per_txn for k in sessions1}
    return Way(
        way=way, transactions=txns, tps=round(tps, 1),
        capturer_cpu_us_per_txn=None if capturer is None else round((cpu1 - cpu0) * per_txn, 1),
        source_cpu_us_per_txn=(None if src0 is None or src1 is None
                               else round((src1 - src0) * per_txn, 1)),
        walsender_cpu_us_per_txn=round(used["walsender"], 1),
        smile_sessions_cpu_us_per_txn=round(used["smile"], 1),
        wal_bytes_per_txn=round((lsn1 - lsn0) / max(txns, 1), 1),
        drain_s=None if drain is None else round(drain, 3),
    )


# -- the three ways ------------------------------------------------------------------------------

def _none(t: _Target, tables: dict[str, str]) -> Way:
    return _measure(t, "none", tables["plain"], None, None)


def _slot_confirmed(dsn: str, slot: str) -> Callable[[int], bool]:
    def drained(lsn: int) -> bool:
        with connect(dsn, autocommit=True) as conn:
            row = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                               "WHERE slot_name = %s", (slot,)).fetchone()
        return row is not None and row[0] is not None and parse_lsn(row[0]) >= lsn
    return drained


def _recvlogical(t: _Target, tables: dict[str, str]) -> Way:
    slot = f"smile_bench_oltp_{secrets.token_hex(3)}"
    info = conninfo_to_dict(t.dsn)
    env = os.environ | {"PGPASSWORD": str(info.get("password", ""))}
    with connect(t.dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    try:
        with tempfile.NamedTemporaryFile(prefix="smile-oltp-recv-") as out:
            proc = subprocess.Popen(
                [str(t.bindir / "pg_recvlogical"), "-h", str(info.get("host", "127.0.0.1")),
                 "-p", str(info.get("port", 5432)), "-U", str(info.get("user", "")),
                 "-d", str(info.get("dbname", "")), "--slot", slot, "--start",
                 "-o", "proto_version=2", "-o", f"publication_names={tables['publication']}",
                 "-s", "1", "-F", "1", "-f", out.name],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            try:
                return _measure(t, "pg_recvlogical", tables["plain"], proc.pid,
                                _slot_confirmed(t.dsn, slot))
            finally:
                proc.terminate()
                proc.wait(10)
    finally:
        with connect(t.dsn, autocommit=True) as conn:
            _drop_slot(conn, slot)


def _progress_past(dsn: str) -> Callable[[int], bool]:
    def drained(lsn: int) -> bool:
        with connect(dsn, autocommit=True) as conn:
            row = conn.execute("SELECT max(end_lsn)::text FROM _smile.capture_progress"
                               ).fetchone()
        return row is not None and row[0] is not None and parse_lsn(row[0]) >= lsn
    return drained


def _run_capturer(dsn: str) -> None:
    """A capture process as `smile capture run` composes it, until SIGTERM."""
    from smile.delta_capture.capturer import Capturer
    from smile.housekeeping.capture import Housekeeping, run_beside

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    run_beside(Capturer(dsn), stop, Housekeeping())


@contextlib.contextmanager
def _capture_process(dsn: str) -> Iterator[int]:
    proc = multiprocessing.get_context("spawn").Process(target=_run_capturer, args=(dsn,),
                                                        daemon=True)
    proc.start()
    try:
        assert proc.pid is not None
        yield proc.pid
    finally:
        proc.terminate()
        proc.join(15)
        if proc.is_alive():
            proc.kill()
            proc.join(5)


def _smile(t: _Target, tables: dict[str, str]) -> Way:
    drained = _progress_past(t.dsn)
    with _capture_process(t.dsn) as pid:
        with connect(t.dsn, autocommit=True) as conn:
            start = _lsn(conn)
        deadline = time.monotonic() + DRAIN_LIMIT_S
        while not drained(start):  # what the other ways wrote, skipped by the slot first
            if time.monotonic() > deadline:
                raise SmileError("SMILE's capturer did not catch up before its load")
            time.sleep(0.05)
        return _measure(t, "smile", tables["captured"], pid, drained)


RUNS: dict[str, Callable[[_Target, dict[str, str]], Way]] = {
    "none": _none, "pg_recvlogical": _recvlogical, "smile": _smile}


# -- setting up and reporting --------------------------------------------------------------------

def _drop_slot(conn: psycopg.Connection[Any], slot: str) -> None:
    conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                 "WHERE slot_name = %s", (slot,))


@contextlib.contextmanager
def _tables(dsn: str) -> Iterator[dict[str, str]]:
    tag = secrets.token_hex(3)
    names = {"plain": f"smile_bench_oltp_plain_{tag}", "captured": f"smile_bench_oltp_{tag}",
             "publication": f"smile_bench_oltp_pub_{tag}"}
    with connect(dsn, autocommit=True) as conn:
        for key in ("plain", "captured"):
            conn.execute(sql.SQL(
                "CREATE TABLE {} (k bigint, v text, x double precision, t timestamptz)"
            ).format(sql.Identifier(names[key])))
        conn.execute(sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL").format(
            sql.Identifier(names["plain"])))
        conn.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
            sql.Identifier(names["publication"]), sql.Identifier(names["plain"])))
    try:
        publish_relation(dsn, f"public.{names['captured']}")
        yield names
    finally:
        unpublish_relation(dsn, f"public.{names['captured']}")
        with connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(
                sql.Identifier(names["publication"])))
            for key in ("plain", "captured"):
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(
                    sql.Identifier(names[key])))


def bench_capture_oltp(dsn: str, bindir: Path, seconds: float = 20.0, clients: int = 2,
                       repeat: int = 2) -> dict[str, Any]:
    """The three ways, `repeat` rounds each, in one run; medians and every round."""
    if seconds < 1 or clients < 1 or repeat < 1:
        raise SmileError("--seconds, --clients and --repeat must be positive")
    target = _Target(dsn, bindir, seconds, clients)
    rounds: list[dict[str, Way]] = []
    with _tables(dsn) as tables:
        for _ in range(repeat):
            rounds.append({way: RUNS[way](target, tables) for way in WAYS})
    return _report(target, rounds)


def _median(rounds: list[dict[str, Way]], way: str, field: str) -> float | None:
    values = [getattr(r[way], field) for r in rounds]
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 1) if known else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 3)


def _report(t: _Target, rounds: list[dict[str, Way]]) -> dict[str, Any]:
    fields = ("tps", "capturer_cpu_us_per_txn", "source_cpu_us_per_txn",
              "walsender_cpu_us_per_txn", "smile_sessions_cpu_us_per_txn", "wal_bytes_per_txn",
              "drain_s")
    ways = {way: {f: _median(rounds, way, f) for f in fields} for way in WAYS}
    smile, recv = ways["smile"], ways["pg_recvlogical"]
    return {
        "seconds": t.seconds, "clients": t.clients, "rounds": len(rounds),
        **ways,
        "smile_cpu_vs_recvlogical": _ratio(smile["capturer_cpu_us_per_txn"],
                                           recv["capturer_cpu_us_per_txn"]),
        "smile_tps_vs_recvlogical": _ratio(smile["tps"], recv["tps"]),
        "smile_tps_vs_none": _ratio(smile["tps"], ways["none"]["tps"]),
        "goals": {"cpu_vs_recvlogical_at_most": 2.0, "tps_vs_recvlogical_at_least": 0.9,
                  "drain_s_at_most": 5.0},
        "limits": (
            "the capturer's CPU: Python per message and the sink's statements per target commit "
            "(ten a second), against pg_recvlogical's C; the app's tps: the cores its backends "
            "share with the walsender, the capturer and SMILE's sessions (deltas, shadows, "
            "retention); pg_recvlogical's drain: its 1-s status interval "
            "(docs/design/capture.md)"
        ),
        "per_round": [{way: asdict(r[way]) for way in WAYS} for r in rounds],
    }
