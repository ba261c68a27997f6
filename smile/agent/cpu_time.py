"""CPU seconds a push costs its machine: the agent thread's own plus those of its machine's
PostgreSQL backend, measured around the push and reported beside its wall time
(`PushDone.cpu_s`, the push log's `cpu_seconds`, `smile bench admission`'s `measured_cpu`).

A push's wall time is not what it takes from a core: on this box two thirds of it is waiting
for a core, a row lock or a round trip. The load model still charges wall time: charged in CPU
it left out the work a push causes outside its operator (the executor, messaging, retention,
capture) and over-admitted (docs/design/executor.md, "Wall seconds, and the CPU beside them").
This is the measurement that a CPU model would be built and checked on.

The backend's CPU is read from `/proc/<pid>/schedstat` (nanoseconds on a CPU), so only where
the backend runs on this host: the agent runs beside its machine's database. Where it cannot be
read (another host, no /proc, a Spark job whose CPU is the JVM's) there is no measurement and
the push log counts its wall time instead. A backend's parallel workers are not counted.

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
    seconds plus the backend's, or None when the backend's cannot be read."""

    def __init__(self, conn: Any) -> None:
        self.pid = backend_pid(conn)
        self.thread0 = time.thread_time()
        self.backend0 = process_cpu_s(self.pid) if self.pid is not None else None

    def seconds(self, conn: Any) -> float | None:
        """CPU seconds since the start; None when the backend changed (a reconnect) or is
        not readable."""
        if self.pid is None or self.backend0 is None or backend_pid(conn) != self.pid:
            return None
        backend = process_cpu_s(self.pid)
        if backend is None:
            return None
        return max(0.0, backend - self.backend0) + max(0.0, time.thread_time() - self.thread0)
