"""The agent of one machine: takes PUSH commands from its queue, advances the vertex on its
machine (pulling from other machines where a CopyDelta needs to), answers PUSH_DONE or
AGENT_ERROR with the command's id, and sends a heartbeat with the TS of its vertices every
second. It keeps nothing that is not in a database: plans come from the catalog, timestamps
from its machine, so a restarted agent simply carries on (a repeated PUSH is a no-op).

Must not: decide what to push (the executor does).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from smile.agent.advance import advance_vertex
from smile.agent.plan_store import load_plan
from smile.agent.protocol import AgentFailure, Heartbeat, Message, Push, PushDone
from smile.agent.transport import HEARTBEATS, Transport, agent_queue
from smile.db import connect, connect_all
from smile.delta_capture.registry import ensure_capture_schema
from smile.operators import vertex_ts
from smile.operators.join_spark import drop_stale_stages

if TYPE_CHECKING:
    from smile.agent.physical import PhysicalPlan
    from smile.agent.spark_jobs import SparkJoins
    from smile.topology import Topology

log = logging.getLogger("smile.agent")


class Agent:
    def __init__(self, machine: str, topology: Topology, heartbeat_s: float = 1.0,
                 spark: SparkJoins | None = None) -> None:
        self.machine = machine
        self.spark = spark
        self.topology = topology
        self.heartbeat_s = heartbeat_s
        topology.machine(machine)  # unknown machine: a clear error now
        self.plans: dict[str, PhysicalPlan] = {}
        self.inbox: queue.Queue[Push] = queue.Queue()
        self.busy_s = 0.0

    def run(self, stop: threading.Event) -> None:
        with connect_all(self.topology.machines,
                         application_name=f"smile-agent-{self.machine}") as conns:
            self._serve(conns, stop)

    def _serve(self, conns: dict[str, Any], stop: threading.Event) -> None:
        ensure_capture_schema(conns[self.machine])
        dropped = drop_stale_stages(conns[self.machine])  # a Spark join killed mid-way
        if dropped:
            log.info("dropped %d stage tables left by an interrupted Spark join", dropped)
        transport = Transport(self.topology.broker_url, f"agent-{self.machine}")
        transport.subscribe(agent_queue(self.machine), self._receive)
        beat = threading.Thread(target=self._heartbeats, args=(transport, stop), daemon=True)
        beat.start()
        try:
            while not stop.is_set():
                try:
                    push = self.inbox.get(timeout=0.2)
                except queue.Empty:
                    continue
                transport.send(push.reply_to, self._push(conns, push))
        finally:
            transport.close()

    def _receive(self, message: Message) -> None:
        if isinstance(message, Push):
            self.inbox.put(message)

    def _plan(self, name: str) -> PhysicalPlan:
        if name not in self.plans:
            self.plans[name] = load_plan(self.topology.catalog_dsn, name)
        return self.plans[name]

    def _push(self, conns: dict[str, Any], push: Push) -> Message:
        started = time.perf_counter()
        try:
            phys = self._plan(push.plan)
            vertex = next((v for v in phys.vertices if v.label == push.vertex), None)
            if vertex is None:
                return AgentFailure(push.id, self.machine, f"plan {push.plan} has no vertex "
                                    f"{push.vertex}", push.vertex)
            if vertex.machine != self.machine:
                return AgentFailure(push.id, self.machine, f"{push.vertex} is not on "
                                    f"{self.machine}", push.vertex)
            rows = advance_vertex(conns, phys, vertex, push.to_ts, self.spark)
            ts = vertex_ts.read(conns[self.machine], phys.vertices[vertex].ts_key)
        except Exception as exc:  # any failure is the executor's to retry; say why
            log.warning("push %s of %s failed: %s", push.id, push.vertex, exc)
            return AgentFailure(push.id, self.machine, str(exc), push.vertex)
        elapsed = time.perf_counter() - started
        self.busy_s += elapsed
        return PushDone(push.id, push.vertex, ts, elapsed, rows_in=rows, rows_out=rows)

    def _heartbeats(self, transport: Transport, stop: threading.Event) -> None:
        conn = connect(self.topology.machine(self.machine).dsn, autocommit=True)
        last, busy = time.monotonic(), 0.0
        try:
            while not stop.wait(self.heartbeat_s):
                rows = conn.execute("SELECT vertex, ts FROM _smile.vertex_ts").fetchall() \
                    if conn.execute("SELECT to_regclass('_smile.vertex_ts')").fetchone() != (
                        None,) else []
                now = time.monotonic()
                load = (self.busy_s - busy) / max(now - last, 1e-6)
                last, busy = now, self.busy_s
                transport.send(HEARTBEATS, Heartbeat(self.machine, datetime.now(UTC),
                                                     {v: t for v, t in rows}, round(load, 4)))
        except Exception as exc:  # heartbeats stop; pushes go on
            log.warning("heartbeats of %s stopped: %s", self.machine, exc)
        finally:
            conn.close()
