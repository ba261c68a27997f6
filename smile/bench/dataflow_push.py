"""A benchmark's push run as the executor runs one (`executor.dataflow`): each vertex as soon as
every vertex it waits for (`optimizer.recompute.push_waits`) is there, up to `PUSH_WORKERS` at
once per machine (as an agent's push workers), each worker on connections of its own — so the
figure is the push's critical path on the box, not the sum of its operators.

The vertices run in-process through `deploy.advance.advance_vertex`, as the agents run them;
no broker round trip is timed (the executor's own overhead is measured apart, `smile bench
lazy`).

Must not: change what a vertex does, or open its connections inside the timed part.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from smile.agent.process import PUSH_WORKERS
from smile.db import connect
from smile.deploy.advance import advance_vertex
from smile.errors import SmileError
from smile.optimizer.recompute import push_readers, push_waits

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from datetime import datetime

    from smile.deploy.physical import PhysicalPlan
    from smile.optimizer.plan import Vertex
    from smile.optimizer.recompute import Mode


@dataclass(frozen=True)
class Ran:
    """One vertex pushed: its seconds, its edge kind (or mode), rows written and read."""

    vertex: Vertex
    seconds: float
    kind: str
    rows: int
    rows_in: int
    started: float = 0.0
    """Seconds into the push it started."""


class DataflowPusher:
    """Worker connections to every machine, opened once (`dsns`: machine → DSN), and the
    pushes run on them. Use as a context manager."""

    def __init__(self, dsns: Mapping[str, str], workers: int = PUSH_WORKERS,
                 roll_forward: bool = True) -> None:
        if workers < 1:
            raise SmileError(f"workers: at least 1, not {workers}")
        self.dsns = dict(dsns)
        self.workers = workers
        self.roll_forward = roll_forward
        """False: every join waits for the relation it probes (`push_waits`' baseline)."""
        self._stack = ExitStack()
        self._conns: dict[str, list[dict[str, Any]]] = {}

    def __enter__(self) -> DataflowPusher:
        for home in self.dsns:
            self._conns[home] = [
                {m: self._stack.enter_context(connect(dsn, autocommit=True, what=m))
                 for m, dsn in self.dsns.items()} for _ in range(self.workers)]
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def push(self, phys: PhysicalPlan, vertices: Sequence[Vertex], t: datetime,
             modes: Mapping[Vertex, Mode]) -> tuple[float, list[Ran]]:
        """Advance `vertices` (none of them a base) to `t`, each in its mode (absent:
        incremental), as a dataflow: (seconds from the first start to the last end, each
        vertex's run)."""
        flow = _Flow(phys, set(vertices), t, modes, self.roll_forward)
        threads = [threading.Thread(target=flow.work, args=(m, c), daemon=True)
                   for m in sorted({v.machine for v in flow.todo}) for c in self._conns[m]]
        started = flow.began = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        elapsed = time.perf_counter() - started
        if flow.failed:
            raise flow.failed[0]
        if len(flow.done) < len(flow.todo):
            raise SmileError("the push's dataflow stalled: " + ", ".join(
                sorted(v.label for v in flow.todo - {r.vertex for r in flow.done})))
        return elapsed, flow.done


class _Flow:
    """One push's state, shared by its workers under `lock`."""

    def __init__(self, phys: PhysicalPlan, todo: set[Vertex], t: datetime,
                 modes: Mapping[Vertex, Mode], roll_forward: bool = True) -> None:
        self.phys, self.todo, self.t, self.modes = phys, todo, t, modes
        self.waits = push_waits(phys.plan, todo, self.mode, roll_forward)
        self.readers = push_readers(self.waits)
        self.ready: dict[str, list[Vertex]] = defaultdict(list)
        for v in sorted(v for v, w in self.waits.items() if not w):
            self.ready[v.machine].append(v)
        self.lock = threading.Condition()
        self.began = time.perf_counter()
        self.done: list[Ran] = []
        self.failed: list[BaseException] = []

    def mode(self, v: Vertex) -> Mode:
        return self.modes.get(v, "incremental")

    def _next(self, machine: str) -> Vertex | None:
        """The next vertex of `machine` to run, once one is ready (None: the push is over)."""
        with self.lock:
            while not self.ready[machine] and len(self.done) < len(self.todo) \
                    and not self.failed:
                self.lock.wait()
            if self.failed or len(self.done) == len(self.todo):
                return None
            return self.ready[machine].pop(0)

    def work(self, machine: str, conns: dict[str, Any]) -> None:
        """A worker of `machine`: run its vertices as they become ready."""
        while (v := self._next(machine)) is not None:
            edge = self.phys.incoming(v)
            assert edge is not None
            how = self.mode(v)
            started = time.perf_counter()
            try:
                moved = advance_vertex(conns, self.phys, v, self.t, mode=how)
            except BaseException as e:  # the push fails: every worker stops
                with self.lock:
                    self.failed.append(e)
                    self.lock.notify_all()
                return
            took = time.perf_counter() - started
            with self.lock:
                self.done.append(Ran(v, took, edge.kind if how == "incremental" else how,
                                     moved.rows_out, moved.rows_in, started - self.began))
                for r in self.readers.get(v, ()):
                    self.waits[r].discard(v)
                    if not self.waits[r]:
                        self.ready[r.machine].append(r)
                self.lock.notify_all()
