"""The agent of one machine: takes commands from its queue — PUSH (advance a vertex, pulling
from other machines where a CopyDelta needs to), INSTALL and WITHDRAW (its machine's part of a
new version of the global plan, `commands.py`) — and answers each with its id; sends a
heartbeat with the TS of its vertices every second. It keeps nothing that is not in a
database: every command names a version of the global plan, read from the catalog (and cached,
being immutable); timestamps are on its machine; so a restarted agent simply carries on (a
repeated command is harmless). On start it releases leases an interrupted install left and
registers again the running plan's readers of its deltas. Off the pushes' path, every few
seconds, it deletes the rows of its intermediate deltas that all their readers are past.
Heartbeats — every second and after each push — carry every vertex's TS: the executor knows
staleness from them. Pushes are carried out by `PUSH_WORKERS` workers at once, earliest
deadline first, so that a long operator does not hold the machine's other pushes behind it;
Install and Withdraw by a worker of their own. A worker opens its connections again every
`db.SESSION_USES` commands: a backend keeps something of every push's temporary table.
Every second it lowers the CPU priority of its cluster's backends serving consumers' reads
(`reader_priority.py`), so that reads that keep every core busy do not hold pushes back.

Must not: decide what to push or install (the executor does).
"""

from __future__ import annotations

import itertools
import logging
import math
import queue
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from smile.agent.cpu_time import CpuMeter
from smile.agent.reader_priority import ReaderPriority
from smile.costmodel.formulas import HEARTBEAT_S
from smile.db import SESSION_USES, connect, connect_all, every, heal, renew, session_timeouts
from smile.delta_capture.registry import ensure_capture_schema
from smile.deploy import commands
from smile.deploy.advance import advance_vertex
from smile.deploy.advance_group import advance_together
from smile.deploy.install import index_join_keys
from smile.deploy.machines import refresh
from smile.deploy.plan_store import active_version, load_version
from smile.errors import AgentError, ConfigError, SkipRefused, StaleRelation
from smile.messaging.protocol import (
    AgentFailure,
    Command,
    Done,
    Heartbeat,
    Install,
    Message,
    Push,
    PushDone,
    Withdraw,
)
from smile.messaging.transport import HEARTBEATS, Transport, agent_queue
from smile.operators import vertex_ts
from smile.operators.join_spark import drop_stale_stages
from smile.settings import READER_NICE

if TYPE_CHECKING:
    from collections.abc import Callable

    from smile.deploy.physical import PhysicalPlan
    from smile.deploy.spark_jobs import SparkJoins
    from smile.optimizer.plan import Vertex
    from smile.optimizer.recompute import Mode
    from smile.topology import Topology

log = logging.getLogger("smile.agent")

Queued = tuple[int, float, int, Command, "Callable[[], None]"]
"""An inbox entry: (class, deadline as epoch seconds, arrival, command, its acknowledgement)."""

PREFETCH = 50
"""Commands the broker hands this agent before it has answered them: a backlog beyond that
waits in the broker, not in the agent's memory."""
PUSH_WORKERS = 3
"""Pushes carried out at once, each worker on connections of its own, all taking from the
one inbox earliest deadline first. With a single worker a long operator held every push of
the machine behind it: at 1000 tweets/s S14's 690k-row DeltaToRel of `loc⋈tweets` (SLA 60 s)
took 5.8 s on m1, S4's pushes (SLA 10 s, a few ms each) waited for it, and S4 went to 1.8×
its SLA. Two pushes of one vertex cannot clash: each operator locks its destination's TS row
and returns at once if it finds the vertex at its target."""
LEASE_ROUNDS = 12
"""Retention rounds between two releases of stale leases (a minute at the default 5 s)."""
READS_S = 1.0
"""Seconds between two rounds of lowering consumers' backends (`reader_priority.py`): a new
reader's connection runs at the default priority for at most this long."""


class Agent:
    def __init__(self, machine: str, topology: Topology, heartbeat_s: float = HEARTBEAT_S,
                 spark: SparkJoins | None = None, retention_s: float = 5.0,
                 push_workers: int = PUSH_WORKERS, session_uses: int = SESSION_USES,
                 reader_nice: int = READER_NICE) -> None:
        if push_workers < 1:
            raise ConfigError(f"push_workers: at least 1, not {push_workers}")
        if session_uses < 1:
            raise ConfigError(f"session_uses: at least 1, not {session_uses}")
        self.session_uses = session_uses
        self.reads = ReaderPriority(reader_nice)
        self.machine = machine
        self.push_workers = push_workers
        self.retention_s = retention_s
        self.spark = spark
        self.topology = topology
        self.heartbeat_s = heartbeat_s
        topology.machine(machine)  # unknown machine: a clear error now
        self.plans: dict[int, PhysicalPlan] = {}
        self._topology_at = 0
        """The newest version of D the machines were read from the catalog for."""
        self._plans_lock = threading.Lock()
        self.inbox: queue.PriorityQueue[Queued] = \
            queue.PriorityQueue()
        """Pushes, earliest deadline first (`Push.deadline`: when its sharing would go over
        its SLA), then by arrival: several pushes that arrive together (sharings of one
        machine due at once) are taken in the order their SLAs need."""
        self.plan_inbox: queue.PriorityQueue[Queued] = \
            queue.PriorityQueue()
        """A new version's Install and Withdraw, by arrival, on a worker (and connections) of
        their own: a fill of a large new vertex takes seconds, and pushes queued behind it
        missed 10-s SLAs (a fill of `loc⋈tweets` took 11 s on the main job). The fill reads
        the vertices pushes write through `as_of` in one statement and under the TS locks,
        as it always did beside other agents' pushes."""
        self._arrivals = itertools.count()
        self._holding: Counter[str] = Counter()
        """The PUSH ids taken and not yet answered (a redelivered one counted twice)."""
        self._holding_lock = threading.Lock()
        self._busy_lock = threading.Lock()
        self.busy_s = 0.0
        self._pruner: threading.Thread | None = None
        self._lowerer: threading.Thread | None = None

    def run(self, stop: threading.Event) -> None:
        with connect_all(self.topology.machines, application_name=self._name("")) as conns:
            self._serve(conns, stop)

    def _serve(self, conns: dict[str, Any], stop: threading.Event) -> None:
        ensure_capture_schema(conns[self.machine])
        dropped = drop_stale_stages(conns[self.machine])  # a Spark join killed mid-way
        if dropped:
            log.info("dropped %d stage tables left by an interrupted Spark join", dropped)
        current = active_version(self.topology.catalog_dsn)
        if current is not None:  # leases of installs older than the active plan are stale
            commands.release(conns[self.machine], versions_below=current)
            # indexes a newer SMILE expects (every MV has one) on vertices installed before it,
            # and the readers of this machine's deltas, which retention goes by
            index_join_keys(conns, self._plan(current), [self.machine])
            commands.reconcile_readers(conns, self.machine, self._plan(current))
        transport = Transport(self.topology.broker_url, f"agent-{self.machine}")
        # acknowledged once answered: a command this agent dies with goes to its successor
        transport.subscribe(agent_queue(self.machine), self._receive, acked=True,
                            prefetch=PREFETCH)
        beat = threading.Thread(target=self._heartbeats, args=(transport, stop), daemon=True)
        beat.start()
        if self._pruner is None:  # one for the agent's life: `run` may start over
            self._pruner = threading.Thread(target=self._retention, args=(stop,), daemon=True,
                                            name="retention")
            self._pruner.start()
        if self._lowerer is None and self.reads.nice:
            self._lowerer = threading.Thread(
                target=self._every, args=(READS_S, stop, self.reads, "reads"),
                daemon=True, name="reads")
            self._lowerer.start()
        done = threading.Event()  # this run is over: its other workers end with it
        workers = [threading.Thread(target=self._serve_inbox, daemon=True, name=name,
                                    args=(inbox, suffix, transport, stop, done))
                   for inbox, suffix, name in (
                       [(self.plan_inbox, "-plans", "plans")]
                       + [(self.inbox, "", f"push-{i}")
                          for i in range(1, self.push_workers)])]
        for worker in workers:
            worker.start()
        try:
            self._work(self.inbox, conns, "", transport, stop, done)
        finally:
            done.set()
            for worker in workers:
                worker.join(timeout=30)
            transport.close()

    def _serve_inbox(self, inbox: queue.PriorityQueue[Queued], suffix: str,
                     transport: Transport, stop: threading.Event, done: threading.Event
                     ) -> None:
        """A worker beside the first push worker, on connections of its own: Install and
        Withdraw (a fill of a large new vertex takes seconds), or more pushes
        (`PUSH_WORKERS`)."""
        while not (stop.is_set() or done.is_set()):
            try:
                with connect_all(self.topology.machines,
                                 application_name=self._name(suffix)) as conns:
                    self._work(inbox, conns, suffix, transport, stop, done)
            except Exception as exc:  # a database away at start: try again
                log.warning("worker of %s: %s", self.machine, exc)
                stop.wait(1.0)

    def _name(self, suffix: str) -> str:
        """The `application_name` of a worker's connections (`suffix`: which worker)."""
        return f"smile-agent-{self.machine}{suffix}"

    def _work(self, inbox: queue.PriorityQueue[Queued], conns: dict[str, Any], suffix: str,
              transport: Transport, stop: threading.Event, done: threading.Event) -> None:
        """Take commands from `inbox` and answer each; between commands, every
        `self.session_uses` of them, the worker's connections are renewed (`db.SESSION_USES`:
        a backend's caches keep something of every push's temporary table)."""
        served = 0
        while not (stop.is_set() or done.is_set()):
            try:
                *_, command, ack = inbox.get(timeout=0.2)
            except queue.Empty:
                continue
            try:  # held until answered (or left for the broker to hand out again)
                if served >= self.session_uses:
                    renew(conns, self._dsns(), application_name=self._name(suffix))
                    served = 0
                served += 1
                answer = self.handle(conns, command, suffix)
                try:
                    transport.send(command.reply_to, answer)
                except AgentError as exc:  # the broker is away: the command stays
                    # unacknowledged, and the broker hands it out again (it is idempotent)
                    log.warning("cannot answer %s: %s", command.id, exc)
                    continue
            finally:
                self._held(command, -1)
            ack()
            if isinstance(answer, PushDone):  # the new TS, at once: a push's dataflow and
                # the lazy rule downstream need not wait for the next heartbeat
                try:
                    transport.send(HEARTBEATS, self.heartbeat(conns[self.machine]))
                except Exception as exc:
                    log.info("no heartbeat after %s: %s", command.id, exc)

    def _receive(self, message: Message, ack: Callable[[], None]) -> None:
        if isinstance(message, Push):
            due = message.deadline.timestamp() if message.deadline is not None else math.inf
            self._held(message, +1)
            self.inbox.put((1, due, next(self._arrivals), message, ack))
        elif isinstance(message, (Install, Withdraw)):
            self.plan_inbox.put((0, 0.0, next(self._arrivals), message, ack))
        else:
            ack()

    def _plan(self, version: int) -> PhysicalPlan:
        with self._plans_lock:  # the push and the plan workers both ask
            if version not in self.plans:
                if len(self.plans) >= 8:  # versions are immutable: keep the newest few
                    del self.plans[min(self.plans)]
                self.plans[version] = load_version(self.topology.catalog_dsn, version)
            return self.plans[version]

    def _dsns(self) -> dict[str, str]:
        return {m.name: m.dsn for m in self.topology.machines}

    def handle(self, conns: dict[str, Any], command: Command, suffix: str = "") -> Message:
        """Carry out one command; any failure is the executor's to retry: say why (a skip
        refused, `SkipRefused`, is answered as left for a later push, `deferred`; a stale
        vertex, `StaleRelation`, as `stale`). A command
        that failed on a connection its server had dropped (a restart since it was last used)
        is carried out once more on the connection opened again (commands are idempotent).
        `suffix` names the worker whose connections `conns` are."""
        started = time.perf_counter()
        detail: str | Message = ""
        for attempt in (1, 2):
            try:
                self._reach(conns, command, suffix)
                detail = self._carry_out(conns, command, started)
            except SkipRefused as exc:  # not a failure: the vertex waits for its next push
                log.info("%s %s left for a later push: %s", command.type, command.id, exc)
                return AgentFailure(command.id, self.machine, str(exc),
                                    command.vertex if isinstance(command, Push) else None,
                                    deferred=True)
            except StaleRelation as exc:  # no retry helps: the executor must know first
                log.info("%s %s refused: %s", command.type, command.id, exc)
                return AgentFailure(command.id, self.machine, str(exc),
                                    command.vertex if isinstance(command, Push) else None,
                                    stale=True)
            except Exception as exc:
                log.warning("%s %s failed: %s", command.type, command.id, exc)
                healed = heal(conns, self._dsns(), application_name=self._name(suffix))
                if healed:  # a database restarted under us: its next command finds it again
                    log.warning("reconnected to %s", ", ".join(healed))
                    if attempt == 1:
                        continue
                vertex = command.vertex if isinstance(command, Push) else None
                return AgentFailure(command.id, self.machine, str(exc), vertex,
                                    getattr(exc, "sqlstate", None))
            if not isinstance(detail, str):  # a push's own answer
                return detail
            break
        assert isinstance(detail, str)
        elapsed = time.perf_counter() - started
        self._add_busy(elapsed)
        return Done(command.id, self.machine, elapsed, detail)

    def _reach(self, conns: dict[str, Any], command: Command, suffix: str) -> None:
        """Connections to every machine the command's versions of D place vertices on, and
        to no machine detached since: a machine attached while this agent runs is learnt
        from the catalog the first time a version names it (`deploy.machines.refresh`)."""
        versions = {n for n in (command.version, getattr(command, "previous", None))
                    if isinstance(n, int)}
        need = {v.machine for n in versions for v in self._plan(n).vertices}
        with self._plans_lock:
            if max(versions) > self._topology_at or not need <= conns.keys():
                if refresh(self.topology) and self.spark is not None \
                        and isinstance(self.spark.dsns, dict):
                    self.spark.dsns.update(self._dsns())
                self._topology_at = max(versions)
        dsns = self._dsns()
        for name in [n for n in conns if n not in dsns]:  # detached
            conns.pop(name).close()
        for name in sorted(need & dsns.keys() - conns.keys()):
            conns[name] = connect(dsns[name], autocommit=True, what=name,
                                  application_name=self._name(suffix))

    def _add_busy(self, seconds: float) -> None:
        with self._busy_lock:  # several workers add to it
            self.busy_s += seconds

    def _carry_out(self, conns: dict[str, Any], command: Command, started: float
                   ) -> str | Message:
        if isinstance(command, Push):
            return self._push(conns, command, started)
        if isinstance(command, Install):
            if command.phase == "lease":
                return f"{commands.lease(conns[self.machine], command.version)} leases"
            return commands.fill(conns, self.machine, self._plan(command.version), command,
                                 self.spark)
        previous = self._plan(command.previous) if command.previous else None
        return commands.withdraw(conns, self.machine, previous, command,
                                 self._plan(command.version))

    def _push(self, conns: dict[str, Any], push: Push, started: float) -> Message:
        phys = self._plan(push.version)
        vertex = next((v for v in phys.vertices if v.label == push.vertex), None)
        if vertex is None:
            return AgentFailure(push.id, self.machine, f"version {push.version} of the plan "
                                f"has no vertex {push.vertex}", push.vertex)
        if vertex.machine != self.machine:
            return AgentFailure(push.id, self.machine, f"{push.vertex} is not on "
                                f"{self.machine}", push.vertex)
        if push.together:
            return self._push_group(conns, push, phys, vertex, started)
        edge = phys.incoming(vertex)
        used = {vertex.machine, *(s.machine for s in (edge.sources if edge else ()))}
        metered = (self.machine, *sorted(used - {self.machine}))  # its own backend first
        meter = CpuMeter(*(conns[m] for m in metered))
        with session_timeouts([conns[m] for m in sorted(used)], push.timeout_s):
            moved = advance_vertex(conns, phys, vertex, push.to_ts, self.spark,
                                   _mode(push.mode))
        ts = vertex_ts.read(conns[self.machine], phys.vertices[vertex].ts_key)
        cpu = None if moved.spark else meter.seconds(*(conns[m] for m in metered))
        elapsed = time.perf_counter() - started
        self._add_busy(elapsed)
        return PushDone(push.id, push.vertex, ts, elapsed, moved.rows_in, moved.rows_out,
                        moved.bytes, None if cpu is None else round(cpu, 6),
                        *(moved.span or (None, None)))

    def _push_group(self, conns: dict[str, Any], push: Push, phys: PhysicalPlan,
                    first: Vertex, started: float) -> Message:
        """A consistent group's push: `first` and the vertices `push.together` names, all MVs
        of this machine, advanced to `push.to_ts` in one transaction (`advance_group.py`)."""
        by_label = {v.label: v for v in phys.vertices}
        missing = [x for x in push.together if x not in by_label]
        if missing:
            return AgentFailure(push.id, self.machine, f"version {push.version} of the plan "
                                f"has no vertex {missing[0]}", push.vertex)
        vertices = [first, *(by_label[x] for x in push.together)]
        meter = CpuMeter(conns[self.machine])
        with session_timeouts([conns[self.machine]], push.timeout_s):
            done = advance_together(conns, phys, self.machine, vertices, push.to_ts)
        ts = vertex_ts.read(conns[self.machine], phys.vertices[first].ts_key)
        cpu = meter.seconds(conns[self.machine])
        elapsed = time.perf_counter() - started
        self._add_busy(elapsed)
        span = done.span or (None, None)
        return PushDone(push.id, push.vertex, ts, elapsed, sum(p[2] for p in done.parts),
                        sum(p[3] for p in done.parts), 0,
                        None if cpu is None else round(cpu, 6), advanced_from=span[0],
                        advanced_to=span[1], parts=done.parts)

    def _heartbeats(self, transport: Transport, stop: threading.Event) -> None:
        """Every `heartbeat_s`, for as long as the agent runs: a heartbeat that cannot be read
        or sent (the machine's database or the broker restarting) is skipped, and the
        connection opened again."""
        last, busy = time.monotonic(), 0.0

        def beat(conn: Any) -> None:
            nonlocal last, busy
            now = time.monotonic()
            load = (self.busy_s - busy) / max(now - last, 1e-6)
            last, busy = now, self.busy_s
            transport.send(HEARTBEATS, self.heartbeat(conn, load), wait_s=self.heartbeat_s)

        self._every(self.heartbeat_s, stop, beat, "heartbeat")

    def _retention(self, stop: threading.Event) -> None:
        """Every `retention_s`, off the pushes' path: delete the rows of this machine's
        intermediate deltas that all their readers are past (`commands.prune_intermediates`);
        every `LEASE_ROUNDS` rounds, release the leases of installs older than the active
        version (a deploy that failed while this machine was away left its lease here, and
        a deploy that does not involve this machine sends no lease that would release it)."""
        rounds = 0

        def body(conn: Any) -> int:
            nonlocal rounds
            rounds += 1
            if rounds % LEASE_ROUNDS == 0:
                current = active_version(self.topology.catalog_dsn)
                if current is not None:
                    commands.release(conn, versions_below=current)
            return commands.prune_intermediates(conn)

        self._every(self.retention_s, stop, body, "retention")

    def _every(self, period_s: float, stop: threading.Event, body: Callable[[Any], object],
               what: str) -> None:
        """`body(conn)` every `period_s` until `stop`, on a connection of its own to this
        machine (`db.every`)."""
        every(self.topology.machine(self.machine).dsn, period_s, stop, body,
              what=f"{what} on {self.machine}",
              application_name=self._name(f"-{what}"), uses=self.session_uses)

    def _held(self, command: Command, change: int) -> None:
        """Count a PUSH in (taken) or out (answered, or given up for the broker to hand out
        again) of what the heartbeats say the agent holds."""
        if not isinstance(command, Push):
            return
        with self._holding_lock:
            self._holding[command.id] += change
            if self._holding[command.id] <= 0:
                del self._holding[command.id]

    def heartbeat(self, conn: Any, load: float = 0.0) -> Heartbeat:
        """The TS of every vertex on this machine (capture's watermarks included), read now,
        and the pushes the agent holds: what the executor knows every sharing's staleness by
        (paper §8.1), and which of its pushes are not lost but waiting or running."""
        at = datetime.now(UTC)  # before reading: a later heartbeat never holds older news
        with self._holding_lock:
            holding = tuple(sorted(self._holding))
        return Heartbeat(self.machine, at, vertex_ts.read_all(conn), round(load, 4), holding)


def _mode(text: str) -> Mode:
    """A PUSH's mode ('' is incremental); anything else is refused."""
    if text in ("", "incremental"):
        return "incremental"
    if text in ("recompute", "skip", "stale"):
        return text  # type: ignore[return-value]
    raise AgentError(f"no push mode {text!r}")
