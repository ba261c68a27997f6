"""The CPU seconds a benchmark's timed part takes on this box: every process of the clusters it
talks to — their backends, WAL writer, checkpointer and the WAL senders decoding for capture,
listed by each cluster's `pg_stat_activity` and read from /proc, and the processes that began
and ended within the part (a statement's parallel workers), which their postmaster has reaped —
and the benchmark's own process (its push workers, and capture where it runs in-process).

Wall time shows a push's critical path; this shows its work, to /proc's resolution: each
process is counted in clock ticks (10 ms), so a push of tens of milliseconds is measured
roughly. A process that exits within the part after running before it is counted whole.

Must not: count a process of another host (a cluster not on this host's loopback or socket is
not measured: None), or query a cluster inside the timed part (the processes are listed
before it).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
"""Hosts whose clusters' processes are this host's."""


def _local(conn: Any) -> bool:
    host = str(conn.info.host)
    return host.startswith("/") or host in LOCAL_HOSTS


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/`pid`/stat after the command's name (the state first) for a
    PostgreSQL process; None once it has exited or the pid is no longer PostgreSQL's."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            name, rest = f.read().rsplit(")", 1)
    except OSError:
        return None
    if not name.split("(", 1)[-1].startswith("postgres"):
        return None
    return rest.split()


def _ticks(pid: int) -> int | None:
    """User and system clock ticks of PostgreSQL process `pid` (stat's fields 14 and 15)."""
    fields = _stat(pid)
    return int(fields[11]) + int(fields[12]) if fields else None


def _reaped(pid: int) -> int | None:
    """Clock ticks of the children postmaster `pid` has waited for (fields 16 and 17)."""
    fields = _stat(pid)
    return int(fields[13]) + int(fields[14]) if fields else None


@dataclass(frozen=True)
class Sample:
    live: dict[int, int]
    """Each listed process's clock ticks."""
    reaped: dict[int, int]
    """Each postmaster's reaped children's clock ticks."""
    own_s: float
    """This process's CPU seconds."""


class CpuMeter:
    """The processes of the clusters behind `conns`, listed once; `take()` before and after
    a timed part gives its CPU seconds (`by_kind`, `total`)."""

    def __init__(self, conns: Iterable[Any]) -> None:
        conns = list(conns)
        self.kinds: dict[int, str] = {}
        """Each listed process's `backend_type` (`client backend`, `walsender`, …)."""
        self.postmasters: set[int] = set()
        self.local = bool(conns) and all(_local(c) for c in conns)
        if self.local:
            self.kinds = {int(r[0]): str(r[1]) for c in conns for r in c.execute(
                "SELECT pid, backend_type FROM pg_stat_activity").fetchall()}
            for c in conns:
                row = c.execute("SELECT pg_backend_pid()").fetchone()
                fields = _stat(int(row[0])) if row else None
                if fields:  # a backend's parent is its postmaster
                    self.postmasters.add(int(fields[1]))
        self._hz = os.sysconf("SC_CLK_TCK")

    def take(self) -> Sample | None:
        """The counters now; None for clusters not on this host."""
        if not self.local:
            return None
        return Sample({p: t for p in sorted(self.kinds) if (t := _ticks(p)) is not None},
                      {p: t for p in self.postmasters if (t := _reaped(p)) is not None},
                      time.process_time())

    def by_kind(self, before: Sample | None, after: Sample | None) -> dict[str, float] | None:
        """CPU seconds between two `take`s — the processes there at both, the children reaped
        in between, and this process — by kind of process: each `backend_type` (its listed
        processes), `reaped` and `benchmark` (this process). `total` sums them."""
        if before is None or after is None:
            return None
        ticks: dict[str, int] = {}
        for p, t in before.live.items():
            if p in after.live:
                kind = self.kinds[p]
                ticks[kind] = ticks.get(kind, 0) + after.live[p] - t
        ticks["reaped"] = sum(after.reaped[p] - t for p, t in before.reaped.items()
                              if p in after.reaped)
        return {**{k: n / self._hz for k, n in sorted(ticks.items())},
                "benchmark": after.own_s - before.own_s}


def total(kinds: dict[str, float] | None) -> float | None:
    """The CPU seconds of a `CpuMeter.by_kind` split (None for clusters not measured)."""
    return None if kinds is None else sum(kinds.values())
