"""The executor (paper §8): knows every admitted sharing's staleness and pushes each one,
independently of the others, through the agents over the broker.

- Timestamps: every machine's `_smile.vertex_ts` is read every `tick_s` (the ground truth the
  agents also report in heartbeats, which tell liveness and load).
- When and how far: `lazy.push_target` (l = 0.8) with the plan's CP(x) under the current time
  model; `mode="eager"` pushes every second instead (the baseline of `smile bench lazy`).
- A push: PUSH commands level by level in topological order, each with a fresh id; the level's
  PUSH_DONEs are awaited; a timeout or an AGENT_ERROR resends (pushes are idempotent).
- Every PUSH_DONE goes to the push log (work and tuples moved) and into the time model, whose
  lines are re-fitted online from the measured (tuples, seconds).
- Restart: admitted sharings and their plans come back from the catalog; the vertex timestamps
  say where each one is. Nothing else is needed.

Must not: plan or install sharings (`sharings.py`), or run operators (agents do).
"""

from __future__ import annotations

import itertools
import logging
import statistics
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from smile.agent.plan_store import load_plan
from smile.agent.protocol import AgentFailure, Heartbeat, Message, Push, PushDone
from smile.agent.transport import EXECUTOR, HEARTBEATS, Transport, agent_queue
from smile.costmodel.time_model import TimeModel, fit_linear
from smile.db import connect
from smile.executor.auditor import Staleness
from smile.executor.lazy import LAZINESS, push_target
from smile.executor.store import CatalogStore
from smile.optimizer.plan import edge_kind

if TYPE_CHECKING:
    from smile.agent.physical import PhysicalPlan
    from smile.optimizer.plan import Vertex
    from smile.topology import Topology

log = logging.getLogger("smile.executor")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ids = itertools.count()


def seconds(ts: datetime) -> float:
    return (ts - EPOCH).total_seconds()


@dataclass
class Tracked:
    name: str
    phys: PhysicalPlan
    sla_s: float
    levels: list[list[Vertex]]
    pushing: bool = False
    last_push: float = 0.0
    pushes: int = 0
    failures: int = 0


@dataclass
class MachineState:
    last_beat: float = 0.0
    load: float = 0.0


@dataclass
class _Answers:
    cond: threading.Condition = field(default_factory=threading.Condition)
    got: dict[str, Message] = field(default_factory=dict)
    received: dict[str, float] = field(default_factory=dict)


def push_levels(phys: PhysicalPlan) -> list[list[Vertex]]:
    """Non-source vertices grouped by depth: every vertex after all the ones it reads."""
    depth: dict[Vertex, int] = {}
    for v in phys.order():
        e = phys.incoming(v)
        assert e is not None
        depth[v] = 1 + max((depth.get(s, 0) for s in e.sources), default=0)
    out: dict[int, list[Vertex]] = defaultdict(list)
    for v, d in depth.items():
        out[d].append(v)
    return [sorted(out[d], key=lambda v: v.label) for d in sorted(out)]


class Executor:
    def __init__(self, topology: Topology, model: TimeModel | None = None, *,
                 mode: Literal["lazy", "eager"] = "lazy", tick_s: float = 0.1,
                 push_timeout_s: float = 30.0, retries: int = 3,
                 laziness: float = LAZINESS) -> None:
        self.topology = topology
        self.model = model or TimeModel()
        self.mode = mode
        self.tick_s = tick_s
        self.push_timeout_s = push_timeout_s
        self.retries = retries
        self.laziness = laziness
        self.tracked: dict[str, Tracked] = {}
        self.machines: dict[str, MachineState] = {m.name: MachineState()
                                                  for m in topology.machines}
        self.ts: dict[tuple[str, str], datetime] = {}
        self.lock = threading.RLock()
        self.answers = _Answers()
        self.points: dict[str, deque[tuple[float, float]]] = defaultdict(lambda: deque(maxlen=300))
        self.refits = 0
        self.dispatch: deque[float] = deque(maxlen=200)
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.transport: Transport | None = None
        self.replies = EXECUTOR
        self.store: CatalogStore | None = None

    # -- life ------------------------------------------------------------------------------
    def start(self, adopt: bool = True) -> None:
        """Connect and run; with `adopt`, take over every admitted sharing in the catalog (the
        executor of `smile serve`); without, only those it is handed (a benchmark's)."""
        self.store = CatalogStore(self.topology.catalog_dsn)
        client = f"executor-{time.time_ns()}"
        self.replies = f"{EXECUTOR}.{client}"
        self.transport = Transport(self.topology.broker_url, client)
        self.transport.subscribe(self.replies, self._on_message)
        self.transport.subscribe(HEARTBEATS, self._on_message)
        if adopt:
            self.reconcile()
        for target in (self._poll_timestamps, self._schedule):
            t = threading.Thread(target=target, daemon=True, name=target.__name__)
            t.start()
            self.threads.append(t)

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(5)
        if self.transport is not None:
            self.transport.close()
        if self.store is not None:
            self.store.close()

    def reconcile(self) -> None:
        """Track every admitted sharing the catalog holds (after a restart, all of them)."""
        assert self.store is not None
        for row in self.store.sharings("admitted"):
            if row.name not in self.tracked:
                try:
                    self.track(row.name, load_plan(self.topology.catalog_dsn, row.name),
                               row.staleness_s)
                except Exception as exc:
                    log.error("cannot resume sharing %s: %s", row.name, exc)

    def track(self, name: str, phys: PhysicalPlan, sla_s: float) -> None:
        with self.lock:
            self.tracked[name] = Tracked(name, phys, sla_s, push_levels(phys))

    def untrack(self, name: str, wait_s: float = 60.0) -> PhysicalPlan | None:
        """Stop pushing `name` (waiting for a push under way to end); returns its plan."""
        deadline = time.monotonic() + wait_s
        while True:
            with self.lock:
                tr = self.tracked.get(name)
                if tr is None:
                    return None
                if not tr.pushing or time.monotonic() > deadline:
                    del self.tracked[name]
                    return tr.phys
            time.sleep(0.05)

    # -- what the machines say -------------------------------------------------------------
    def _on_message(self, m: Message) -> None:
        if isinstance(m, Heartbeat):
            with self.lock:
                state = self.machines.setdefault(m.machine, MachineState())
                state.last_beat, state.load = time.time(), m.load
            return
        if isinstance(m, (PushDone, AgentFailure)):
            with self.answers.cond:
                self.answers.got[m.id] = m
                self.answers.received[m.id] = time.monotonic()
                self.answers.cond.notify_all()

    def _poll_timestamps(self) -> None:
        conns: dict[str, Any] = {}
        while not self.stop.wait(self.tick_s):
            for m in self.topology.machines:
                try:
                    if m.name not in conns:
                        conns[m.name] = connect(m.dsn, autocommit=True, what=m.name,
                                                application_name="smile-executor")
                    rows = conns[m.name].execute(
                        "SELECT vertex, ts FROM _smile.vertex_ts").fetchall()
                except Exception as exc:  # a machine down: its timestamps stand still
                    log.debug("cannot read timestamps of %s: %s", m.name, exc)
                    conns.pop(m.name, None)
                    continue
                with self.lock:
                    for vertex, ts in rows:
                        self.ts[(m.name, vertex)] = ts
        for c in conns.values():
            c.close()

    def timestamps(self, phys: PhysicalPlan) -> Staleness | None:
        """TS(MV), MINTS(SRC) and MAXTS(SRC) as last read, or None if not known yet."""
        with self.lock:
            mv = self.ts.get((phys.plan.mv.machine, phys.vertices[phys.plan.mv].ts_key))
            srcs = [self.ts.get((s.machine, phys.vertices[s].ts_key)) for s in phys.plan.sources]
        if mv is None or any(s is None for s in srcs):
            return None
        known = [s for s in srcs if s is not None]
        return Staleness(mv, min(known), max(known))

    # -- deciding ----------------------------------------------------------------------------
    def _schedule(self) -> None:
        while not self.stop.wait(self.tick_s):
            with self.lock:
                candidates = [tr for tr in self.tracked.values() if not tr.pushing]
            for tr in candidates:
                target = self.target(tr)
                if target is None:
                    continue
                with self.lock:
                    if tr.pushing or tr.name not in self.tracked:
                        continue
                    tr.pushing = True
                threading.Thread(target=self._push, args=(tr, target), daemon=True,
                                 name=f"push-{tr.name}").start()

    def target(self, tr: Tracked) -> datetime | None:
        marks = self.timestamps(tr.phys)
        if marks is None:
            return None
        mv, lo, hi = marks.mv_ts, marks.min_src, marks.max_src
        if self.mode == "eager":
            due = time.monotonic() - tr.last_push >= 1.0
            return lo if due and lo > mv else None
        t = push_target(mv=seconds(mv), min_src=seconds(lo), max_src=seconds(hi),
                        sla_s=tr.sla_s, laziness=self.laziness,
                        cp=lambda x: tr.phys.plan.critical_path(self.model, max(x, 0.0)))
        if t is None:
            return None
        at = EPOCH + timedelta(seconds=t)
        return min(max(at, mv), lo)  # float round trip must not step past the watermark

    # -- pushing -----------------------------------------------------------------------------
    def _push(self, tr: Tracked, t: datetime) -> None:
        assert self.transport is not None
        started = time.monotonic()
        ok = False
        try:
            for level in tr.levels:
                if not self._push_level(tr, level, t):
                    return
            ok = True
        except Exception as exc:
            if not self.stop.is_set():  # a push cut short by close() is not an error
                log.error("push of %s to %s failed: %s", tr.name, t, exc)
        finally:
            with self.lock:
                tr.pushing = False
                tr.last_push = started
                tr.pushes += ok
                tr.failures += not ok

    def _push_level(self, tr: Tracked, level: list[Vertex], t: datetime) -> bool:
        assert self.transport is not None
        pending = list(level)
        for attempt in range(self.retries + 1):
            sent: dict[str, Vertex] = {}
            sent_at = time.monotonic()
            for v in pending:
                pid = f"{tr.name}/{next(_ids)}/{attempt}"
                sent[pid] = v
                self.transport.send(agent_queue(v.machine),
                                    Push(pid, tr.name, v.label, t, self.replies))
            answers, when = self._await(sent, time.monotonic() + self.push_timeout_s)
            pending = []
            for pid, v in sent.items():
                answer = answers[pid]
                if isinstance(answer, PushDone):
                    self._record(tr, v, t, answer)
                    self._learn_dispatch(when[pid] - sent_at - answer.elapsed_s)
                    continue
                reason = answer.reason if isinstance(answer, AgentFailure) else "no answer"
                log.warning("push %s of %s to %s: %s (attempt %d)", pid, v.label, t, reason,
                            attempt + 1)
                pending.append(v)
            if not pending:
                return True
            if self.stop.is_set() or tr.name not in self.tracked:
                return False
            time.sleep(0.2 * (attempt + 1))
        return False

    def _await(self, ids: dict[str, Vertex], deadline: float
               ) -> tuple[dict[str, Message | None], dict[str, float]]:
        """The answers to `ids` (None: none came) and when each arrived."""
        with self.answers.cond:
            self.answers.cond.wait_for(
                lambda: all(p in self.answers.got for p in ids) or self.stop.is_set()
                or time.monotonic() > deadline, self.push_timeout_s)
            when = {p: self.answers.received.pop(p, time.monotonic()) for p in ids}
            return {p: self.answers.got.pop(p, None) for p in ids}, when

    def _record(self, tr: Tracked, v: Vertex, t: datetime, done: PushDone) -> None:
        edge = tr.phys.incoming(v)
        assert edge is not None
        kind = edge_kind(edge)
        if self.store is not None:
            try:
                self.store.log_push(tr.name, v.label, kind, t, done.elapsed_s, done.rows_out)
            except Exception as exc:
                log.warning("cannot log a push: %s", exc)
        if done.rows_out > 0:  # a no-op push measures nothing
            self._learn(kind, float(done.rows_out), done.elapsed_s)

    def _learn_dispatch(self, overhead: float) -> None:
        """Online re-fit of the per-edge dispatch overhead: the median of the last 200."""
        with self.lock:
            self.dispatch.append(max(0.0, overhead))
            if len(self.dispatch) % 20 == 0:
                self.model = replace(self.model,
                                     dispatch_s=statistics.median(self.dispatch))

    def _learn(self, kind: str, tuples: float, elapsed: float) -> None:
        """Online re-fit: every 20 measurements of a kind, its line is fitted to the last 300
        (as long as they span a range of sizes)."""
        with self.lock:
            pts = self.points[kind]
            pts.append((tuples, elapsed))
            if len(pts) % 20 or len({p[0] for p in pts}) < 3:
                return
            self.model = self.model.with_line(kind, fit_linear(list(pts)))  # type: ignore[arg-type]
            self.refits += 1
