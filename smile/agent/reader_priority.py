"""Consumers' reads yield the CPU to SMILE's own work on a machine. Every second the agent
lowers the CPU priority (raises the nice value, `setpriority(2)`) of the backends its cluster
runs for consumers' roles (`smile_c_*`, `deploy/roles.py`) to `nice`, so that when closed
loops of reads keep every core busy a push's operators still get a core first: the staleness
SLA is SMILE's promise, a read's speed is not. Under Linux's scheduler a nice-10 process gets
about a tenth of a core's share that a nice-0 one gets while both want it, and all of it when
nothing else does: reads are not throttled on an idle machine.

It works where the agent runs beside its cluster, as root or as the cluster's own user; the
cluster is recognised by its data directory (a backend's working directory), so an agent on
another host than its cluster does nothing. Parallel workers a read starts live for one query
and mostly end before a round sees them.

Must not: touch a process that is not a backend of its own machine's cluster, or raise any
process's priority (a backend already nicer is left alone); keep state beyond whether it has
said once why it cannot work (a round reads everything it needs again).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from smile.cloud.procs import parent_pid
from smile.deploy.roles import ROLE_PREFIX
from smile.errors import ConfigError
from smile.settings import READER_NICE

if TYPE_CHECKING:
    from collections.abc import Iterable

log = logging.getLogger("smile.agent")

_ROUND = ("SELECT pg_backend_pid(), current_setting('data_directory'), "
          "array(SELECT pid FROM pg_stat_activity WHERE usename LIKE %s)")


def serves_here(backend: int, data_dir: str) -> bool:
    """Whether process `backend` on this host works in `data_dir`, as a backend of the
    cluster whose data directory it is does (the postmaster changes into it)."""
    try:
        return os.readlink(f"/proc/{backend}/cwd") == os.path.realpath(data_dir)
    except OSError:  # no such process here, or not ours to read
        return False


def lower(pids: Iterable[int], postmaster: int, nice: int) -> int:
    """Set each of `pids` whose parent is `postmaster` to `nice`, unless it is at least that
    nice already; returns how many were changed. A process gone meanwhile is skipped; a
    `PermissionError` (not root, nor the processes' user) is raised."""
    changed = 0
    for pid in pids:
        if parent_pid(pid) != postmaster:  # gone, or not one of this cluster's backends
            continue
        try:
            if os.getpriority(os.PRIO_PROCESS, pid) >= nice:
                continue
            os.setpriority(os.PRIO_PROCESS, pid, nice)
        except ProcessLookupError:
            continue
        changed += 1
    return changed


class ReaderPriority:
    """One round per call, on a superuser's connection to the agent's own cluster
    (`Agent._every`)."""

    def __init__(self, nice: int = READER_NICE) -> None:
        if not 0 <= nice <= 19:
            raise ConfigError(f"reader nice: 0 … 19, not {nice}")
        self.nice = nice
        self.why_not: str | None = None
        """Why the last round could not lower anything (said once in the log), or None."""

    def __call__(self, conn: Any) -> int:
        """Lower the consumers' backends the cluster runs now; returns how many changed."""
        if self.nice == 0:
            return 0
        own, data_dir, pids = conn.execute(_ROUND, (ROLE_PREFIX.replace("_", r"\_") + "%",)
                                           ).fetchone()
        if not serves_here(own, data_dir):
            return self._cannot("its cluster is not on this host (or not readable here)")
        try:
            changed = lower(pids, parent_pid(own), self.nice)
        except PermissionError:
            return self._cannot("the agent runs neither as root nor as the cluster's user")
        self.why_not = None
        return changed

    def _cannot(self, why: str) -> int:
        if self.why_not != why:
            log.warning("consumers' reads keep their CPU priority: %s", why)
        self.why_not = why
        return 0
