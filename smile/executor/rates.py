"""Change rates of the published relations, measured while traffic runs: admission must use the
rates a sharing will see, not a sample taken before the traffic starts.

Every `every_s` the monitor reads each machine's `pg_stat_user_tables` counters (inserts +
deletes + 2 × updates: an UPDATE is two delta rows) and keeps the samples of the last
`window_s`; a relation's rate is the counters' growth over that window. On the local cloud,
whose machines share this box, it also measures how many of the box's cores were idle —
leaving out the seconds in which a deploy ran (`deploying()`) and the few after it in which its
new vertices' first pushes catch up (`steady.SETTLE_S`, as the operator load admission reads
leaves them out: the two make the bound together): the first contents of a new
sharing's vertices are a one-off burst, and counting it made the next submission, seconds
later, see a box with half its idle cores gone. Admission, the predicted loads and the
dashboard read it; it never blocks them (the last value is kept while a machine is
unreachable).

Must not: decide anything; it measures.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

from smile.deploy import table_stats
from smile.deploy.machine_state import Sessions
from smile.executor.busy import DeploySpans
from smile.executor.steady import WINDOW_S, idle_cores
from smile.executor.worker import Worker

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from smile.topology import Topology

log = logging.getLogger("smile.rates")

DEPLOYS_KEPT_S = 120.0
"""How long a deploy's span is remembered (the operator load's window is 60 s)."""


class RateMonitor(Worker):
    name = "rates"

    def __init__(self, topology: Topology, window_s: float = 30.0, every_s: float = 2.0) -> None:
        super().__init__()
        self.topology = topology
        self.window_s = window_s
        self.every_s = every_s
        self.samples: dict[tuple[str, str], deque[tuple[float, float, float]]] = {}
        """(machine, table) → (when, delta rows so far, net rows inserted so far)."""
        self.cpu: deque[tuple[float, float, float]] = deque()
        """(when, busy jiffies, all jiffies) of this box, when the machines are on it."""
        self.spans = DeploySpans(kept_s=DEPLOYS_KEPT_S)
        """The deploys of the window: the box's CPU while one runs is not what the sharings
        will cost."""
        self.last_idle: float | None = None
        """The idle cores last measured outside deploys (kept while deploys follow closely)."""
        self.lock = threading.Lock()

    def run(self) -> None:
        with Sessions(self.topology, "smile-rates") as sessions:
            while True:
                self.sample(sessions)
                if self.stop.wait(self.every_s):
                    return

    def sample(self, sessions: Sessions) -> None:
        if self.topology.source == "local":
            self._sample_cpu()
        for m in self.topology.machines:
            try:
                rows = table_stats.change_counters(sessions.get(m.name))
            except Exception as exc:  # a machine down keeps its last rates
                log.debug("cannot sample %s: %s", m.name, exc)
                sessions.drop(m.name)
                continue
            now = time.monotonic()
            with self.lock:
                for name, count, net in rows:
                    q = self.samples.setdefault((m.name, name), deque())
                    q.append((now, count, net))
                    while len(q) > 2 and now - q[0][0] > self.window_s:
                        q.popleft()

    def rates(self) -> dict[tuple[str, str], float]:
        """(machine, table) → delta rows per second over the window (tables seen twice)."""
        return self._per_second(1)

    def growth(self) -> dict[tuple[str, str], float]:
        """(machine, table) → rows per second the table grew by over the window (inserts −
        deletes; never below 0)."""
        return self._per_second(2)

    def _per_second(self, counter: int) -> dict[tuple[str, str], float]:
        with self.lock:
            out = {}
            for key, q in self.samples.items():
                if len(q) >= 2 and q[-1][0] > q[0][0]:
                    out[key] = max(0.0, (q[-1][counter] - q[0][counter])
                                   / (q[-1][0] - q[0][0]))
            return out

    def _sample_cpu(self) -> None:
        try:
            fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        except OSError:
            return
        ticks = [float(x) for x in fields]
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0.0)  # idle + iowait
        now = time.monotonic()
        with self.lock:
            self.cpu.append((now, sum(ticks) - idle, sum(ticks)))
            while len(self.cpu) > 2 and now - self.cpu[0][0] > WINDOW_S:
                self.cpu.popleft()

    def deploying(self) -> AbstractContextManager[None]:
        """Mark a deploy for as long as the block runs."""
        return self.spans.running()

    def deploy_spans(self) -> list[tuple[float, float]]:
        """(start, end) of the deploys of the last `DEPLOYS_KEPT_S` (end = inf while one runs;
        time.monotonic)."""
        return self.spans.spans()

    def idle_cores(self) -> float | None:
        """How many of this box's cores were idle over the last `steady.WINDOW_S` (the local
        cloud's machines share them with capture, the traffic and everything else) outside
        deploys (`steady.idle_cores`); the last such value while deploys fill the window;
        None when unknown."""
        with self.lock:
            idle = idle_cores(list(self.cpu), self.spans.spans(),
                              time.monotonic(), os.cpu_count() or 1)
            if idle is not None:
                self.last_idle = idle
            return self.last_idle

    def span_s(self) -> float:
        """How many seconds of samples the rates cover now."""
        with self.lock:
            spans = [q[-1][0] - q[0][0] for q in self.samples.values() if len(q) >= 2]
        return min(spans, default=0.0)
