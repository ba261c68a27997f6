"""Agents as real processes over the real broker: PUSH → PUSH_DONE with the command's id,
duplicates harmless, heartbeats with vertex timestamps, and a SIGKILL in the middle of a push
followed by a restart losing or doubling nothing (the MV still equals the oracle)."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from psycopg import sql

from smile.agent.protocol import AgentFailure, Heartbeat, Message, Push, PushDone
from smile.delta_capture.publish import publish_relation, unpublish_relation
from smile.deploy.advance import mv_ts
from smile.deploy.install import install_plan
from smile.deploy.physical import physical_plan
from smile.deploy.plan_store import load_version, store_version
from smile.messaging.transport import EXECUTOR, HEARTBEATS, Transport, agent_queue
from smile.optimizer.admission import plan_sharing
from smile.optimizer.catalog import CatalogSnapshot, ColumnStats, Machine, RelationStats
from smile.optimizer.plan import Expr, Vertex
from smile.optimizer.sharing import Sharing
from tests.capture_helpers import CapturerThread, connect_retry, wait_caught_up
from tests.test_plans_oracle import COLS, HOME, Installed, _apply, _mv, _oracle, _watermark

if TYPE_CHECKING:
    from tests.fix_cloud import CloudHandle

pytestmark = pytest.mark.services
_ids = itertools.count()


class Executor:
    """Just enough of an executor: send PUSHes, wait for the answers with their ids."""

    def __init__(self, url: str) -> None:
        self.got: dict[str, Message] = {}
        self.beats: list[Heartbeat] = []
        self.cond = threading.Condition()
        self.transport = Transport(url, "test-executor")
        self.transport.subscribe(EXECUTOR, self._on)
        self.transport.subscribe(HEARTBEATS, self._on)

    def _on(self, m: Message) -> None:
        with self.cond:
            if isinstance(m, Heartbeat):
                self.beats.append(m)
            elif isinstance(m, (PushDone, AgentFailure)):
                self.got[m.id] = m
            self.cond.notify_all()

    def push(self, version: int, vertex: Any, t: Any, wait: bool = True) -> str:
        pid = f"push-{next(_ids)}"
        self.transport.send(agent_queue(vertex.machine), Push(pid, version, vertex.label, t))
        if wait:
            with self.cond:
                assert self.cond.wait_for(lambda: pid in self.got, 30), f"no answer to {pid}"
            answer = self.got[pid]
            assert isinstance(answer, PushDone), answer
            assert answer.ts >= t and answer.vertex == vertex.label
        return pid

    def push_all(self, inst: Installed, version: int, t: Any, twice: bool = True) -> None:
        for v in inst.phys.order():  # level by level, sources first
            for _ in range(2 if twice else 1):
                self.push(version, v, t)


def _wait_for(check: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def _start_agent(handle: CloudHandle, machine: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "smile.cli.main", "agent", "run", "--machine", machine],
        env=os.environ | {"SMILE_STATE_DIR": str(handle.settings.state_dir)},
        stdout=subprocess.DEVNULL,
        stderr=(handle.settings.state_dir / f"agent-{machine}.log").open("ab"))


def test_agents_push_heartbeat_and_survive_sigkill(cloud: CloudHandle) -> None:
    machines = cloud.topology.machines
    n = next(_ids)
    names = {r: f"ag{n}_{r}" for r in ("ra", "rb", "rc")}
    for r in ("ra", "rb"):
        with connect_retry(machines[HOME[r]].dsn) as conn:
            conn.execute(sql.SQL(f"CREATE TABLE {{}} ({COLS[r][0]} int, {COLS[r][1]} text)")
                         .format(sql.Identifier(names[r])))
            conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 'a'), (2, 'b'), (2, 'b')").format(
                sql.Identifier(names[r])))
        publish_relation(machines[HOME[r]].dsn, f"public.{names[r]}")
    catalog = CatalogSnapshot(
        tuple(Machine(m.name) for m in machines),
        tuple(RelationStats(names[r], machines[HOME[r]].name, 100, 10,
                            (ColumnStats(COLS[r][0], "integer", 5, 0.1, 4),
                             ColumnStats(COLS[r][1], "text", 5, 0.1, 4))) for r in ("ra", "rb")))
    query = f"SELECT a.k, a.v, b.w FROM {names['ra']} a JOIN {names['rb']} b ON a.k = b.k"
    decision = plan_sharing(catalog, Sharing(f"agents_{n}", query, 60, 0.0, "m3"))
    assert decision.plan is not None
    phys = physical_plan(decision.global_plan(), catalog.schemas())
    mv = phys.plan.sharings[0].mv
    conns = {m.name: psycopg.connect(m.dsn, autocommit=True) for m in machines}
    capturers = [CapturerThread(m.dsn, shadow_s=0) for m in machines]
    agents: dict[str, subprocess.Popen[bytes]] = {}
    executor = None
    for c in capturers:
        c.__enter__()
    try:
        for m in machines:
            wait_caught_up(m.dsn)
        install_plan(conns, phys)
        version = store_version(cloud.topology.catalog_dsn, phys, "agent test")
        assert load_version(cloud.topology.catalog_dsn, version).plan == phys.plan
        inst = Installed(cloud, names, phys, conns, query)
        agents = {m.name: _start_agent(cloud, m.name) for m in machines}
        executor = Executor(cloud.topology.broker_url)
        # heartbeats carry each machine's vertex timestamps
        with executor.cond:
            assert executor.cond.wait_for(
                lambda: {b.machine for b in executor.beats} >= {m.name for m in machines}, 20)
        mv_key = phys.vertices[mv].ts_key
        assert any(mv_key in b.vertex_ts for b in executor.beats)
        # pushes through the agents keep the MV equal to the oracle
        for ops in ([("ins", "ra", 3, "c"), ("ins", "rb", 3, "z"), ("upd_key", "rb", 2, 1)],
                    [("del", "ra", 1), ("upd_val", "rb", 3, None), ("ins", "rb", None, "n")]):
            for op in ops:
                _apply(inst, op)
            for m in machines:
                wait_caught_up(m.dsn)
            t = _watermark(inst)
            executor.push_all(inst, version, t)
            assert _mv(inst) == _oracle(inst, t)
        # a push to an unknown vertex is answered with an error, not silence
        bogus = executor.push(version, Vertex("relation", Expr.base("nope"), mv.machine), t,
                              wait=False)
        # SIGKILL the MV machine's agent right after handing it work, restart it, push again
        for op in [("ins", "ra", 2, "k"), ("ins", "ra", 2, "k"), ("upd_key", "ra", 3, 2)]:
            _apply(inst, op)
        for m in machines:
            wait_caught_up(m.dsn)
        t = _watermark(inst)
        mv_machine = mv.machine
        for v in phys.order():
            if v.machine == mv_machine:
                executor.push(version, v, t, wait=False)
        agents[mv_machine].send_signal(signal.SIGKILL)
        agents[mv_machine].wait()
        agents[mv_machine] = _start_agent(cloud, mv_machine)
        executor.push_all(inst, version, t)
        assert _mv(inst) == _oracle(inst, t)
        # SIGKILL it again in the middle of the MV's transaction: the DeltaToRel has locked the
        # MV's TS row (it holds a transaction id) and waits on a lock this test holds on the MV
        for op in [("ins", "ra", 1, "m"), ("upd_val", "rb", 1, "q"), ("del", "ra", 2)]:
            _apply(inst, op)
        for m in machines:
            wait_caught_up(m.dsn)
        t = _watermark(inst)
        before_ts, before = mv_ts(conns, phys), _mv(inst)
        for v in phys.order():
            if v != mv:
                executor.push(version, v, t)
        home = conns[mv_machine]
        with psycopg.connect(cloud.topology.machine(mv_machine).dsn) as blocker:
            blocker.execute(sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(
                sql.Identifier(*phys.vertices[mv].table)))
            executor.push(version, mv, t, wait=False)
            app = f"smile-agent-{mv_machine}"
            assert _wait_for(lambda: home.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND "
                "wait_event_type = 'Lock' AND backend_xid IS NOT NULL", (app,)).fetchone()
                == (1,), 20), "the agent's push never got under way"
            agents[mv_machine].send_signal(signal.SIGKILL)
            agents[mv_machine].wait()
            blocker.rollback()
        assert _wait_for(lambda: home.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,)
        ).fetchone() == (0,), 20)
        assert mv_ts(conns, phys) == before_ts and _mv(inst) == before  # nothing half-done
        agents[mv_machine] = _start_agent(cloud, mv_machine)
        executor.push_all(inst, version, t)
        assert _mv(inst) == _oracle(inst, t)
        with executor.cond:
            assert executor.cond.wait_for(lambda: bogus in executor.got, 10)
        failure = executor.got[bogus]
        assert isinstance(failure, AgentFailure) and "has no vertex" in failure.reason
    finally:
        if executor is not None:
            executor.transport.close()
        for p in agents.values():
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        for c in capturers:
            c.__exit__()
        for conn in conns.values():
            conn.close()
        for r in ("ra", "rb"):
            unpublish_relation(machines[HOME[r]].dsn, f"public.{names[r]}")
