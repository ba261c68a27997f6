"""CPU seconds a push costs: the agent thread's own plus those of the PostgreSQL backends it
uses (its machine's, and its sources' machines'), measured around the push and reported
beside its wall time (`PushDone.cpu_s`, the push log's `cpu_seconds`, `smile bench
admission`'s `measured_cpu`).

A push's wall time is not what it takes from a core: on this box two thirds of it is waiting
for a core, a row lock or a round trip. The load model still charges wall time: charged in CPU
it left out the work a push causes outside its operator (the executor, messaging, retention,
capture) and over-admitted (docs/design/executor.md, "Wall seconds, and the CPU beside them").
This is the measurement that a CPU model would be built and checked on.

A backend's CPU is read from `/proc/<pid>/schedstat` (nanoseconds on a CPU), so only where
the backend runs on this host: the agent runs beside its machine's database; a source's
backend on another host is left out. Where its own backend's cannot be read (another host,
no /proc, a Spark job whose CPU is the JVM's) there is no measurement and the push log counts
its wall time instead. A backend's parallel workers are not counted.

Must not: decide anything with what it reads, or fail a push (a failed read is no measurement).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

LOCAL_HOSTS = frozenset({"", "localhost", "127.0.0.1", "::1"})
PROC = Path("/proc")


def on_this_host(host: str | None) -> bool:
    """Whether a connection to `host` reaches a server on this host: a unix socket (a
    directory) or loopback.

    >>> [on_this_host(h) for h in ("127.0.0.1", "/var/run/postgresql", "db.example", None)]
    [True, True, False, True]
    """
    host = host or ""
    return host in LOCAL_HOSTS or host.startswith("/")


def backend_pid(conn: Any) -> int | None:
    """The pid of `conn`'s backend when it runs on this host, else None."""
    try:
        host, pid = conn.info.host, int(conn.info.backend_pid)
    except Exception:
        return None
    return pid if pid > 0 and on_this_host(host) else None


def process_cpu_s(pid: int, proc: Path = PROC) -> float | None:
    """Seconds `pid` has spent on a CPU, or None when it cannot be read.

    >>> import os
    >>> process_cpu_s(os.getpid()) is not None
    True
    >>> process_cpu_s(0, Path("/nonexistent")) is None
    True
    """
    try:
        return int((proc / str(pid) / "schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class CpuMeter:
    """Started before a push, read after it, on the thread that runs it: the thread's CPU
    seconds plus those of the backends of `conns` (its machine's first, then those of the
    machines its sources are on: a CopyDelta's COPY TO runs on its source's), or None when one
    of them on this host changed or cannot be read, or the first is not on this host. A
    backend on another host is not counted."""

    def __init__(self, *conns: Any) -> None:
        self.pids = [backend_pid(c) for c in conns]
        self.thread0 = time.thread_time()
        self.backend0 = [None if pid is None else process_cpu_s(pid) for pid in self.pids]

    def seconds(self, *conns: Any) -> float | None:
        """CPU seconds since the start, `conns` as given to the constructor; None when a
        backend changed (a reconnect) or is not readable."""
        if len(conns) != len(self.pids) or not self.pids or self.pids[0] is None:
            return None
        total = max(0.0, time.thread_time() - self.thread0)
        for conn, pid, before in zip(conns, self.pids, self.backend0, strict=True):
            if pid is None:
                continue  # on another host: not seen from here
            now = process_cpu_s(pid) if backend_pid(conn) == pid else None
            if before is None or now is None:
                return None
            total += max(0.0, now - before)
        return total
