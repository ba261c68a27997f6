"""What a running cloud holds and takes, sampled for the long run and the benchmarks: the
memory of every process of the cloud (by daemon, children included: a PostgreSQL cluster with
its backends, an agent with its Spark), the CPU each daemon and the whole box spent, the rows
every delta table on each machine retains, and the WAL each replication slot holds back.

Memory is PSS (`/proc/PID/smaps_rollup`: pages shared between a cluster's backends counted
once, split among them) where readable, else RSS, in two parts: a process's own memory (PSS
without shared memory) and the shared memory it has touched (`Pss_Shmem`). A PostgreSQL
cluster's shared memory is its buffer cache and friends, allocated whole at start
(`shared_memory_size`); its touched part grows as the cache fills with the pages of growing
tables, up to that size, so it is bounded, not leaking, and is sampled apart from the rest.
Its dynamic shared memory (POSIX segments under /dev/shm that a parallel query maps for its
duration) is not part of that size: it counts as the backends' own (counted as shared, it
took a full cache a few MB past `shared_memory_size`).
A daemon's shared memory is not the sum of its processes' `Pss_Shmem` where it can be read
exactly (`allocated_shared_kb`: the blocks the kernel allocated to each fixed segment, read
once per segment through /proc/PID/map_files, which needs root): the processes are read one
after another, and while a parallel query's workers come and go a page's share moves between
them, so the sum of a changing set of processes is not the segment's (on a full buffer cache
of 1068.5 MB the sum read 948 – 1115 MB under parallel scans; the allocated blocks 1068.5
every time).
A process belongs to the cloud when its command line names the cloud's state directory, or an
ancestor's does.

Must not: change anything it samples.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from psycopg import sql

from smile.cloud.procs import parent_pid, stat_fields
from smile.db import connect

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    import psycopg

    from smile.topology import Topology

PROC = Path("/proc")


def _cmdline(pid: int) -> list[str]:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


DYNAMIC_SHM = "/dev/shm/"
"""Where POSIX shared memory segments are mapped from: PostgreSQL's dynamic shared memory."""


def dynamic_shm_kb(smaps: str) -> int:
    """kB of PSS in the mappings of `smaps` (a /proc/PID/smaps) that are POSIX shared memory
    segments (`DYNAMIC_SHM`).

    >>> dynamic_shm_kb("7f0-7f9 rw-s 0 00:01 4 /dev/zero (deleted)\\nPss: 900 kB\\n"
    ...                "7fa-7fb rw-s 0 00:1b 7 /dev/shm/PostgreSQL.21\\nRss: 40 kB\\nPss: 36 kB\\n"
    ...                "7fc-7fd r--p 0 08:01 9 /usr/lib/x.so\\nPss: 8 kB")
    36
    """
    return shared_mapping_kb(smaps, DYNAMIC_SHM, "Pss")


def shared_mapping_kb(smaps: str, path: str, field: str) -> int:
    """kB of `field` ("Rss", "Pss") in the shared mappings of `smaps` (a /proc/PID/smaps)
    whose path starts with `path`.

    >>> shared_mapping_kb("7f0-7f9 rw-s 0 00:01 4 /dev/zero (deleted)\\nRss: 960 kB\\n"
    ...                   "Pss: 900 kB\\n7fc-7fd rw-p 0 00:01 5 /dev/zero (deleted)\\n"
    ...                   "Rss: 8 kB", "/dev/zero", "Rss")
    960
    """
    total, inside = 0, False
    for line in smaps.splitlines():
        head = line.split(maxsplit=5)
        if head and "-" in head[0] and not head[0].endswith(":"):  # a mapping's first line
            inside = len(head) == 6 and head[1].endswith("s") and head[5].startswith(path)
        elif inside and head and head[0] == f"{field}:":
            total += int(head[1])
    return total


def memory_kb(pid: int, proc: Path = PROC) -> tuple[int, int]:
    """(own, shared) memory of a process in kB: PSS without and with only `Pss_Shmem` (RSS
    and 0 when smaps_rollup cannot be read; 0s when it is gone). Dynamic shared memory
    (`dynamic_shm_kb`) is own, not shared: it comes and goes with a parallel query. `proc` is
    where the processes' files are (/proc; a directory laid out like it in tests)."""
    where = proc / str(pid)
    try:
        text = (where / "smaps_rollup").read_text()
    except OSError:
        text = ""
    fields = {line.split(":", 1)[0]: int(line.split()[1]) for line in text.splitlines()
              if line.startswith(("Pss:", "Pss_Shmem:"))}
    if "Pss" in fields:
        shared = fields.get("Pss_Shmem", 0)
        if shared:  # only a process with shared memory can have any of it dynamic
            with contextlib.suppress(OSError):
                shared -= min(shared, dynamic_shm_kb((where / "smaps").read_text()))
        return fields["Pss"] - shared, shared
    try:
        status = (where / "status").read_text()
    except OSError:
        return 0, 0
    rss = next((int(line.split()[1]) for line in status.splitlines()
                if line.startswith("VmRSS:")), 0)
    return rss, 0


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


def daemon_pids(state_dir: str) -> dict[int, str]:
    """Every running process of the cloud, with the daemon it belongs to (itself or its
    nearest ancestor that is one): one scan of /proc, which `memory_by_daemon` and
    `connection_memory` then read from alike."""
    pids = [int(p.name) for p in PROC.iterdir() if p.name.isdigit()]
    parent = {pid: parent_pid(pid) for pid in pids}
    names = {pid: daemon_name(_cmdline(pid), state_dir) for pid in pids}
    out: dict[int, str] = {}
    for pid in pids:
        owner, seen = pid, 0
        while owner and names.get(owner) is None and seen < 64:
            owner, seen = parent.get(owner, 0), seen + 1
        name = names.get(owner) if owner else None
        if name is not None:
            out[pid] = name
    return out


FIXED_SHM = ("/dev/zero", "/SYSV")
"""How a PostgreSQL cluster's fixed shared memory is named in /proc/PID/maps: the main segment
(an anonymous shared mapping, "/dev/zero (deleted)") and its small System V interlock segment.
"""


def fixed_segments(maps: str) -> dict[tuple[str, str], str]:
    """The fixed shared memory segments a process maps (`FIXED_SHM`), from its /proc/PID/maps:
    (device, inode) → the address range of one mapping of it (its name under map_files).
    A /dev/shm segment (dynamic) and a private mapping are not fixed segments.

    >>> fixed_segments("7f1-7f2 rw-s 00000000 00:1b 8582   /dev/shm/PostgreSQL.40\\n"
    ...                "7f2-7f9 rw-s 00000000 00:01 46692  /dev/zero (deleted)\\n"
    ...                "7fa-7fb rw-s 00000000 00:01 23593  /SYSV00338010 (deleted)\\n"
    ...                "7fc-7fd rw-p 00000000 00:01 46693  /dev/zero (deleted)\\n"
    ...                "7fd-7fe r--p 00000000 08:01 9  /usr/lib/x.so")
    {('00:01', '46692'): '7f2-7f9', ('00:01', '23593'): '7fa-7fb'}
    """
    out: dict[tuple[str, str], str] = {}
    for line in maps.splitlines():
        head = line.split(maxsplit=5)
        if (len(head) == 6 and head[1].endswith("s") and head[5].startswith(FIXED_SHM)
                and head[4] != "0"):
            out.setdefault((head[3], head[4]), head[0])
    return out


def allocated_shared_kb(pids: Iterable[int], proc: Path = PROC) -> int | None:
    """kB the kernel has allocated to the fixed shared memory segments `pids` map, each
    segment once, whichever process maps it (`fixed_segments`; the blocks of its map_files
    entry): what its pages take, however many processes map them. None when no segment's
    map_files entry could be read (not root, or the processes gone)."""
    where: dict[tuple[str, str], list[Path]] = {}
    for pid in pids:
        try:
            maps = (proc / str(pid) / "maps").read_text()
        except OSError:
            continue
        for segment, addresses in fixed_segments(maps).items():
            where.setdefault(segment, []).append(proc / str(pid) / "map_files" / addresses)
    total, seen = 0, False
    for paths in where.values():
        for path in paths:  # the first process still mapping it
            try:
                total += path.stat().st_blocks * 512 // 1024
            except OSError:
                continue
            seen = True
            break
    return total if seen else None


def memory_by_daemon(pids: dict[int, str]) -> tuple[dict[str, float], dict[str, float]]:
    """MB of own memory and MB of touched shared memory of each daemon of the cloud, its
    descendants included (`pids`: `daemon_pids`; daemons with no shared memory are left out
    of the second). The shared memory is the blocks allocated to the daemon's fixed segments
    (`allocated_shared_kb`) where they can be read, else the sum of its processes'."""
    own: dict[str, float] = {}
    shared: dict[str, float] = {}
    for pid, name in pids.items():
        mine, shm = memory_kb(pid)
        own[name] = own.get(name, 0.0) + mine / 1024.0
        if shm:
            shared[name] = shared.get(name, 0.0) + shm / 1024.0
    for name in shared:
        exact = allocated_shared_kb(pid for pid, owner in pids.items() if owner == name)
        if exact is not None:
            shared[name] = exact / 1024.0
    return ({k: round(v, 1) for k, v in sorted(own.items())},
            {k: round(v, 1) for k, v in sorted(shared.items())})


TICKS_PER_S = float(os.sysconf("SC_CLK_TCK"))
"""Clock ticks per second of /proc's CPU times."""


def cpu_ticks(pid: int) -> int:
    """Clock ticks a process has spent on a CPU, user and system (0 once it is gone)."""
    fields = stat_fields(pid)  # utime and stime, proc(5)'s 14th and 15th
    return int(fields[11]) + int(fields[12]) if fields else 0


def cpu_by_daemon(state_dir: str) -> dict[int, tuple[str, int]]:
    """Per running process of the cloud, its daemon and its CPU clock ticks so far: two of
    these, `cpu_between`, say which daemon took the cores (a process that came and went
    between them is not seen)."""
    return {pid: (name, cpu_ticks(pid)) for pid, name in daemon_pids(state_dir).items()}


def core_wait_ns(pid: int, proc: Path = PROC) -> int:
    """Nanoseconds a process's threads have waited for a core while they could run (the
    second field of each `/proc/PID/task/TID/schedstat`), 0 once it is gone; a thread that
    ended is no longer counted.

    >>> import os
    >>> core_wait_ns(os.getpid()) >= 0 and core_wait_ns(0, Path("/nonexistent")) == 0
    True
    """
    total = 0
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:
        return 0
    for task in tasks:
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return total


def waits_by_daemon(state_dir: str) -> dict[int, tuple[str, int]]:
    """As `cpu_by_daemon`, the nanoseconds each process waited for a core: two of these,
    `cpu_between(…, ticks_per_s=1e9)`, say how long each daemon's threads were kept from a
    core per second."""
    return {pid: (name, core_wait_ns(pid)) for pid, name in daemon_pids(state_dir).items()}


def box_ticks() -> dict[str, int]:
    """The whole box's CPU clock ticks so far (`/proc/stat`): on a CPU for anyone (`busy`),
    waiting for a disk with nothing to run (`iowait`), and taken by the hypervisor for
    another guest (`steal`); {} where there is no /proc."""
    try:
        fields = [int(x) for x in (PROC / "stat").read_text().split("\n", 1)[0].split()[1:]]
    except OSError:
        return {}
    fields += [0] * (8 - len(fields))
    user, nice, system, _idle, iowait, irq, softirq, steal = fields[:8]
    return {"busy": user + nice + system + irq + softirq, "iowait": iowait, "steal": steal}


def cpu_between(before: dict[int, tuple[str, int]], after: dict[int, tuple[str, int]],
                seconds: float, ticks_per_s: float) -> dict[str, float]:
    """Cores each daemon took between two `cpu_by_daemon`s `seconds` apart (a process born
    between them counts from its birth).

    >>> cpu_between({1: ("agent m1", 100)}, {1: ("agent m1", 300), 2: ("serve", 50)},
    ...             10.0, 100.0)
    {'agent m1': 0.2, 'serve': 0.05}
    """
    out: dict[str, float] = {}
    for pid, (name, ticks) in after.items():
        was = before.get(pid)
        used = ticks - (was[1] if was is not None and was[0] == name else 0)
        out[name] = out.get(name, 0.0) + max(0, used) / ticks_per_s / seconds
    return {k: round(v, 3) for k, v in sorted(out.items())}


def _clusters(topology: Topology) -> list[tuple[str, str]]:
    """(name, DSN) of the catalog's cluster and each machine's."""
    return [("catalog", topology.catalog_dsn), *((m.name, m.dsn) for m in topology.machines)]


def setting_mb(topology: Topology, setting: str) -> dict[str, float]:
    """A size setting of each PostgreSQL cluster in MB, by daemon name ("postgres m1"):
    `shared_memory_size` (its shared memory, allocated whole at start: the bound of its
    touched part), `temp_buffers` (what each of its backends may keep for temporary tables)."""
    out: dict[str, float] = {}
    for name, dsn in _clusters(topology):
        with connect(dsn, autocommit=True, what=name) as conn:
            row = conn.execute("SELECT pg_size_bytes(current_setting(%s)) / 1048576.0",
                               (setting,)).fetchone()
        if row is not None:
            out[f"postgres {name}"] = round(float(row[0]), 1)
    return out


def connection_memory(topology: Topology, pids: dict[int, str]) -> dict[str, float]:
    """MB of own memory of each cluster's backends, summed by who holds them: "m1
    smile-agent-m1" (the connections' `application_name`, else their backend type, as
    "m1 checkpointer"). `memory_by_daemon` has each cluster's total; this says which of
    its connections it is in. Only backends of the clusters this box runs (`pids`:
    `daemon_pids` of the cloud's state directory) are counted: a remote machine's pids are
    not this box's."""
    out: dict[str, float] = {}
    for name, dsn in _clusters(topology):
        with connect(dsn, autocommit=True, what=name) as conn:
            rows = conn.execute(
                "SELECT pid, coalesce(nullif(application_name, ''), backend_type) "
                "FROM pg_stat_activity WHERE pid <> pg_backend_pid()").fetchall()
        for pid, who in rows:
            if pids.get(int(pid)) != f"postgres {name}":
                continue
            key = f"{name} {who}"
            out[key] = out.get(key, 0.0) + memory_kb(int(pid))[0] / 1024.0
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
        "SELECT format('%I.%I', c.table_schema, c.table_name) FROM information_schema.columns c"
        " JOIN information_schema.tables t USING (table_schema, table_name)"
        " WHERE c.table_schema = '_smile' AND c.column_name = '__ts'"
        " AND t.table_type = 'BASE TABLE'").fetchall()  # a Union's view holds no rows of its own
    total = 0
    for (t,) in tables:  # already quoted by format('%I.%I')
        row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.SQL(t))).fetchone()
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
