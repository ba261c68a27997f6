"""The CPU seconds a benchmark's timed part takes on this box: every process of the clusters it
talks to — their backends, WAL writer, checkpointer and the WAL senders decoding for capture,
listed by each cluster's `pg_stat_activity` and read from /proc — and the benchmark's own
process (its push workers, and capture where it runs in-process).

Wall time shows a push's critical path; this shows its work, to /proc's resolution: each
process is counted in clock ticks (10 ms), so a push of tens of milliseconds is measured
roughly. A push spreads over an agent's
workers and every core, REFRESH runs on one backend, so the two ratios differ: on a box with
few cores the work is what bounds the push.

Must not: count a process of another host (a cluster not on this host's loopback or socket is
not measured: None), or query a cluster inside the timed part (the processes are listed
before it).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
"""Hosts whose clusters' processes are this host's."""


def _local(conn: Any) -> bool:
    host = str(conn.info.host)
    return host.startswith("/") or host in LOCAL_HOSTS


def _ticks(pid: int) -> int | None:
    """User and system clock ticks of PostgreSQL process `pid`; None once it has exited (or
    the pid is no longer a PostgreSQL process)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            name, rest = f.read().rsplit(")", 1)
    except OSError:
        return None
    if not name.split("(", 1)[-1].startswith("postgres"):
        return None
    fields = rest.split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)


class CpuMeter:
    """The processes of the clusters behind `conns`, listed once; `take()` before and after
    a timed part gives its CPU seconds (`seconds`)."""

    def __init__(self, conns: Iterable[Any]) -> None:
        conns = list(conns)
        self.pids: list[int] | None = None
        if conns and all(_local(c) for c in conns):
            self.pids = sorted({int(r[0]) for c in conns for r in c.execute(
                "SELECT pid FROM pg_stat_activity").fetchall()})
        self._hz = os.sysconf("SC_CLK_TCK")

    def take(self) -> tuple[dict[int, int], float] | None:
        """Each listed process's clock ticks, and this process's CPU seconds."""
        if self.pids is None:
            return None
        return ({p: t for p in self.pids if (t := _ticks(p)) is not None},
                time.process_time())

    def seconds(self, before: tuple[dict[int, int], float] | None,
                after: tuple[dict[int, int], float] | None) -> float | None:
        """CPU seconds between two `take`s: the processes there at both, and this one."""
        if before is None or after is None:
            return None
        ticks = sum(after[0][p] - t for p, t in before[0].items() if p in after[0])
        return ticks / self._hz + (after[1] - before[1])
