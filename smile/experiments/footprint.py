"""What a running cloud holds, sampled for the long run: the memory of every process of the
cloud (by daemon, children included: a PostgreSQL cluster with its backends, an agent with its
Spark), the rows every delta table on each machine retains, and the WAL each replication slot
holds back.

Memory is PSS (`/proc/PID/smaps_rollup`: pages shared between a cluster's backends counted
once, split among them) where readable, else RSS. A process belongs to the cloud when its
command line names the cloud's state directory, or an ancestor's does.

Must not: change anything it samples.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from smile.db import connect

if TYPE_CHECKING:
    from collections.abc import Callable

    import psycopg

    from smile.topology import Topology

PROC = Path("/proc")


def _cmdline(pid: int) -> list[str]:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def _ppid(pid: int) -> int:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])


def memory_kb(pid: int) -> int:
    """PSS of a process in kB (RSS when smaps_rollup cannot be read; 0 when it is gone)."""
    for name, key in (("smaps_rollup", "Pss:"), ("status", "VmRSS:")):
        try:
            text = (PROC / str(pid) / name).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    return 0


def daemon_name(argv: list[str], state_dir: str) -> str | None:
    """What a process of the cloud is, from its command line (None: not one of the cloud's).

    >>> daemon_name(["python", "-m", "smile.cli.main", "--state-dir", "/s", "agent", "run",
    ...              "--machine", "m2"], "/s")
    'agent m2'
    >>> daemon_name(["/usr/lib/postgresql/15/bin/postgres", "-D", "/s/pg/catalog"], "/s")
    'postgres catalog'
    >>> daemon_name(["python", "-m", "smile.cli.main", "--state-dir", "/s", "serve"], "/s")
    'serve'
    >>> daemon_name(["postgres: smile smile 127.0.0.1(5) idle"], "/s") is None
    True
    """
    line = " ".join(argv)
    if state_dir not in line:
        return None
    if "supervisord" in line:
        return "supervisord"
    if "activemq" in line:
        return "broker"
    found = re.search(r"-D \S*/pg/(\S+)", line)
    if found:
        return f"postgres {found.group(1).rstrip('/')}"
    if "smile.cli.main" in line or "/smile " in line:
        rest = line.split(state_dir, 1)[1].split()
        words = [w for w in rest if not w.startswith("-")]
        machine = next((w for w in rest if re.fullmatch(r"m\d+", w)), None)
        head = words[0] if words else "smile"
        return f"{head} {machine}" if head in ("agent", "capture") and machine else head
    return None


def memory_by_daemon(state_dir: str) -> dict[str, float]:
    """MB of memory of each daemon of the cloud, its descendants included."""
    pids = [int(p.name) for p in PROC.iterdir() if p.name.isdigit()]
    parent = {pid: _ppid(pid) for pid in pids}
    names = {pid: daemon_name(_cmdline(pid), state_dir) for pid in pids}
    out: dict[str, float] = {}
    for pid in pids:
        owner, seen = pid, 0
        while owner and names.get(owner) is None and seen < 64:
            owner, seen = parent.get(owner, 0), seen + 1
        name = names.get(owner) if owner else None
        if name is not None:
            out[name] = out.get(name, 0.0) + memory_kb(pid) / 1024.0
    return {k: round(v, 1) for k, v in sorted(out.items())}


def _per_machine(topology: Topology, read: Callable[[psycopg.Connection[Any]], int]
                 ) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in topology.machines:
        with connect(m.dsn, autocommit=True, what=m.name) as conn:
            out[m.name] = read(conn)
    return out


def _delta_rows_here(conn: psycopg.Connection[Any]) -> int:
    tables = conn.execute(
        "SELECT format('%I.%I', table_schema, table_name) FROM information_schema.columns "
        "WHERE table_schema = '_smile' AND column_name = '__ts'").fetchall()
    total = 0
    for (t,) in tables:
        row = conn.execute(f"SELECT count(*) FROM {t}").fetchone()
        total += int(row[0]) if row else 0
    return total


def _slot_wal_here(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT coalesce(sum(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)), 0) "
        "FROM pg_replication_slots").fetchone()
    return int(row[0]) if row else 0


def delta_rows(topology: Topology) -> dict[str, int]:
    """Rows in every delta table (capture's ΔR and the plan's intermediate ones) per machine."""
    return _per_machine(topology, _delta_rows_here)


def slot_wal_bytes(topology: Topology) -> dict[str, int]:
    """WAL each machine's replication slots hold back (bytes from their restart LSN)."""
    return _per_machine(topology, _slot_wal_here)
