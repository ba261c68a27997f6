"""Agents as real processes over the real broker: PUSH → PUSH_DONE with the command's id,
duplicates harmless, heartbeats with vertex timestamps, a SIGKILL in the middle of a push
followed by a restart losing or doubling nothing (the MV still equals the oracle), and restarts
of the broker and of a machine's database ridden out."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from psycopg import sql

from smile.agent.process import Agent
from smile.cloud.procs import parent_pid
from smile.delta_capture.publish import publish_relation, unpublish_relation
from smile.deploy.advance import mv_ts
from smile.deploy.install import install_plan
from smile.deploy.physical import physical_plan
from smile.deploy.plan_store import load_version, store_version
from smile.errors import ConfigError, SmileError
from smile.executor.auditor import Auditor
from smile.executor.store import CatalogStore
from smile.messaging.protocol import AgentFailure, Heartbeat, Message, Push, PushDone
from smile.messaging.transport import EXECUTOR, HEARTBEATS, Transport, agent_queue
from smile.operators import vertex_ts
from smile.optimizer.admission import plan_sharing
from smile.optimizer.catalog import CatalogSnapshot, ColumnStats, Machine, RelationStats
from smile.optimizer.expr import Expr
from smile.optimizer.plan import Vertex
from smile.optimizer.sharing import Sharing
from tests.capture_helpers import CapturerThread, connect_retry, wait_caught_up
from tests.test_cpu_priority import consumer_connection
from tests.test_plans_oracle import COLS, HOME, Installed, _apply, _mv, _oracle, _watermark

if TYPE_CHECKING:
    from collections.abc import Iterator

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

    def push(self, version: int, vertex: Any, t: Any, wait: bool = True, mode: str = "") -> str:
        pid = f"push-{next(_ids)}"
        self.transport.send(agent_queue(vertex.machine),
                            Push(pid, version, vertex.label, t, mode=mode))
        if wait:
            with self.cond:
                assert self.cond.wait_for(lambda: pid in self.got, 30), f"no answer to {pid}"
            answer = self.got[pid]
            assert isinstance(answer, PushDone), answer
            assert answer.ts >= t and answer.vertex == vertex.label
            # the CPU it took on its machine, measured: its thread and its backend, each no
            # longer than the push
            assert answer.cpu_s is not None and answer.cpu_s <= 2 * answer.elapsed_s + 0.02, answer
            # the span its operator took the vertex across: up to t, or none if it was there
            lo, hi = answer.advanced_from, answer.advanced_to
            assert lo is not None and hi is not None and lo <= hi <= answer.ts, answer
            assert hi in (t, lo), answer
        return pid

    def push_all(self, inst: Installed, version: int, t: Any, twice: bool = True) -> None:
        for v in inst.phys.order():  # level by level, sources first
            for i in range(2 if twice else 1):
                answer = self.got[self.push(version, v, t)]
                if i:  # the second found it there: no span of data of its own
                    assert isinstance(answer, PushDone)
                    assert answer.advanced_from == answer.advanced_to, answer


def _wait_for(check: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def _start_agent(handle: CloudHandle, machine: str, args: tuple[str, ...] = ()
                 ) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "smile.cli.main", "agent", "run", "--machine", machine, *args],
        env=os.environ | {"SMILE_STATE_DIR": str(handle.settings.state_dir)},
        stdout=subprocess.DEVNULL,
        stderr=(handle.settings.state_dir / f"agent-{machine}.log").open("ab"))


@dataclass
class Running:
    """A 2-way join's plan installed on the cloud, capture running, an agent process per
    machine and a test executor over the broker."""

    inst: Installed
    phys: Any
    version: int
    mv: Vertex
    agents: dict[str, subprocess.Popen[bytes]]
    executor: Executor

    def restart_agent(self, machine: str, sig: int = signal.SIGKILL) -> None:
        self.agents[machine].send_signal(sig)
        self.agents[machine].wait()
        self.agents[machine] = _start_agent(self.inst.handle, machine)

    def change_and_wait(self, ops: list[tuple[Any, ...]]) -> Any:
        """Apply `ops` to the bases; the timestamp every base is captured to."""
        for op in ops:
            _apply(self.inst, op)
        return _captured(self.inst)



def _captured(inst: Installed, timeout: float = 30) -> datetime:
    """The time every base is captured to, once it is past the changes just applied.

    A machine's watermark is its last commit's time until its next tick: waiting only for each
    machine's capture to reach its WAL could return the time of one machine's change, before
    another machine's later one, and a push to it would carry no change at all."""
    applied = datetime.now(UTC)  # the clusters run on this box's clock
    for m in inst.handle.topology.machines:
        wait_caught_up(m.dsn)
    deadline = time.monotonic() + timeout
    while (t := _watermark(inst)) < applied:
        assert time.monotonic() < deadline, f"the watermark stayed at {t}, before {applied}"
        time.sleep(0.05)
    return t


@contextmanager
def running_agents(cloud: CloudHandle, agent_args: tuple[str, ...] = ()) -> Iterator[Running]:
    """`agent_args`: more arguments of `smile agent run`."""
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
        agents = {m.name: _start_agent(cloud, m.name, agent_args) for m in machines}
        executor = Executor(cloud.topology.broker_url)
        yield Running(inst, phys, version, phys.plan.sharings[0].mv, agents, executor)
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


def test_agents_push_heartbeat_and_survive_sigkill(cloud: CloudHandle) -> None:
    machines = cloud.topology.machines
    with running_agents(cloud) as run:
        inst, phys, version, mv, agents, executor = (
            run.inst, run.phys, run.version, run.mv, run.agents, run.executor)
        conns = inst.conns
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
            t = _captured(inst)
            executor.push_all(inst, version, t)
            assert _mv(inst) == _oracle(inst, t)
        # a push to an unknown vertex is answered with an error, not silence
        bogus = executor.push(version, Vertex("relation", Expr.base("nope"), mv.machine), t,
                              wait=False)
        # SIGKILL the MV machine's agent right after handing it work, restart it, push again
        for op in [("ins", "ra", 2, "k"), ("ins", "ra", 2, "k"), ("upd_key", "ra", 3, 2)]:
            _apply(inst, op)
        t = _captured(inst)
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
        t = _captured(inst)
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


def test_an_agent_answers_a_refused_skip_as_left_for_a_later_push(cloud: CloudHandle) -> None:
    """A skip of the MV's delta while the MV, its reader, is behind is refused: the agent
    answers AGENT_ERROR marked `deferred` (the executor leaves the delta for its next push
    instead of sending it again), the delta stays where it was, and the next pushes bring
    everything to the oracle."""
    with running_agents(cloud) as run:
        inst, executor = run.inst, run.executor
        _apply(inst, ("ins", "ra", 3, "c"))
        t = _captured(inst)
        delta = run.phys.plan.incoming[run.mv].sources[0]
        key = run.phys.vertices[delta].ts_key
        before = vertex_ts.read(inst.conns[delta.machine], key)
        pid = executor.push(run.version, delta, t, wait=False, mode="skip")
        with executor.cond:
            assert executor.cond.wait_for(lambda: pid in executor.got, 30)
        answer = executor.got[pid]
        assert isinstance(answer, AgentFailure) and answer.deferred, answer
        assert "cannot skip" in answer.reason and answer.vertex == delta.label
        assert vertex_ts.read(inst.conns[delta.machine], key) == before < t
        executor.push_all(inst, run.version, t, twice=False)
        assert _mv(inst) == _oracle(inst, t)


def test_an_agent_opens_its_sessions_again_every_few_commands(cloud: CloudHandle) -> None:
    """`db.SESSION_USES`: a backend keeps something of every temporary table DeltaToRel made
    in it, so an agent's worker closes its connections and opens them again every so many
    commands. With `--session-uses 2` and one push worker, the MV machine's worker comes to
    other backends as pushes go on; the old ones are closed (one connection to its cluster at
    a time), and every push still leaves the MV equal to the oracle."""
    with running_agents(cloud, ("--push-workers", "1", "--session-uses", "2")) as run:
        home = run.inst.conns[run.mv.machine]
        app = f"smile-agent-{run.mv.machine}"

        def backends() -> list[int]:
            return [r[0] for r in home.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app,))]

        seen: set[int] = set()
        for ops in ([("ins", "ra", 3, "c"), ("ins", "rb", 3, "z")],
                    [("upd_key", "rb", 2, 1), ("del", "ra", 1)],
                    [("upd_val", "rb", 3, None), ("ins", "rb", None, "n")],
                    [("ins", "ra", 2, "k"), ("upd_key", "ra", 3, 2)]):
            t = run.change_and_wait(ops)
            run.executor.push_all(run.inst, run.version, t)
            assert _mv(run.inst) == _oracle(run.inst, t)
            assert _wait_for(lambda: len(backends()) == 1, 10), backends()
            seen.update(backends())
        assert len(seen) >= 2, seen
    with pytest.raises(ConfigError, match="session_uses"):
        Agent(run.mv.machine, cloud.topology, session_uses=0)


def test_an_agent_lowers_consumers_reads_below_its_pushes(
        cloud: CloudHandle, monkeypatch: pytest.MonkeyPatch) -> None:
    """`Settings.reader_nice` (here 7): within seconds of a consumer's connection, the agent
    of its machine has its backend at that nice value, and the agent's own backends keep the
    default: reads that keep every core busy leave one to the pushes."""
    monkeypatch.setenv("SMILE_READER_NICE", "7")  # the agents' environment is the test's
    with running_agents(cloud) as run:
        home = run.inst.conns[run.mv.machine]
        with consumer_connection(cloud.topology.machine(run.mv.machine).dsn) as reader:
            pid = reader.info.backend_pid
            assert _wait_for(lambda: os.getpriority(os.PRIO_PROCESS, pid) == 7, 15)
            own = [r[0] for r in home.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s",
                (f"smile-agent-{run.mv.machine}%",))]
            base = os.getpriority(os.PRIO_PROCESS, parent_pid(pid))  # the postmaster's
            assert own and all(os.getpriority(os.PRIO_PROCESS, p) == base for p in own)


def _push_until_done(run: Running, t: Any, timeout: float = 60) -> int:
    """Push every vertex to `t` in an order a push allows, each until an agent answers
    PUSH_DONE (after a broker restart the first answers may be missing); returns how many
    answers were not.
    What a crash emptied (unlogged relations and deltas) is recovered as the executor does:
    a relation recomputed, a delta skipped below relations recomputed (`push_paths`)."""
    from graphlib import TopologicalSorter

    from smile.costmodel.time_model import TimeModel
    from smile.optimizer.recompute import push_paths, push_waits

    failed = 0
    stale = {v for v, pv in run.phys.vertices.items() if not v.base
             and vertex_ts.is_stale(run.inst.conns[v.machine], pv.ts_key)}
    modes = push_paths(run.phys.plan, [run.mv], TimeModel(), 1.0, lambda v: 1.0,
                       "incremental", stale).modes
    waits = push_waits(run.phys.plan, set(modes), lambda u: modes[u])  # a skip after its readers
    for v in TopologicalSorter(waits).static_order():
        deadline = time.monotonic() + timeout
        mode = modes.get(v, "incremental")
        while True:
            pid = run.executor.push(run.version, v, t, wait=False,
                                    mode="" if mode == "incremental" else mode)
            with run.executor.cond:
                run.executor.cond.wait_for(lambda p=pid: p in run.executor.got, 10)
            if isinstance(run.executor.got.get(pid), PushDone):
                break
            failed += 1
            assert time.monotonic() < deadline, f"{v.label} never got to {t}"
            time.sleep(0.2)
    return failed


def _beat_after(run: Running, machine: str, since: Any, timeout: float = 30) -> bool:
    with run.executor.cond:
        return run.executor.cond.wait_for(lambda: any(
            b.machine == machine and b.sent_at > since for b in run.executor.beats), timeout)


def test_agents_ride_out_broker_and_database_restarts(cloud: CloudHandle) -> None:
    """A restarted broker and a restarted machine database are found again by the
    agents and the executor on their own — pushes go on and the MV stays equal to the oracle,
    heartbeats resume; and a command an agent dies with before answering it is answered by
    its successor without being sent again (commands are acknowledged after their work)."""
    if cloud.local is None:
        pytest.skip("restarts need the test's own local cloud")
    with running_agents(cloud) as run:
        t = run.change_and_wait([("ins", "ra", 5, "e"), ("ins", "rb", 5, "f")])
        _push_until_done(run, t)
        assert _mv(run.inst) == _oracle(run.inst, t)

        broker = cloud.local.broker()
        broker.stop()
        broker.start()
        since = datetime.now(UTC)
        t = run.change_and_wait([("upd_val", "rb", 5, "g"), ("ins", "ra", 6, "h")])
        _push_until_done(run, t)
        assert _mv(run.inst) == _oracle(run.inst, t)
        for m in cloud.topology.machines:
            assert _beat_after(run, m.name, since), f"no heartbeat from {m.name} after"
        assert run.executor.transport.reconnects >= 1

        home = run.mv.machine
        for mode in ("fast", "immediate"):
            cloud.local.cluster(home).restart(mode)
            since = datetime.now(UTC)
            run.inst.conns[home].close()  # the test's own connection died with the server
            run.inst.conns[home] = connect_retry(cloud.topology.machine(home).dsn)
            t = run.change_and_wait([("ins", "ra", 7, mode), ("del", "rb", 5)])
            # an agent finding its connection dead opens it again and carries the push out
            # on it: no push fails for the restart
            assert _push_until_done(run, t) == 0, mode
            assert _mv(run.inst) == _oracle(run.inst, t), mode
            assert _beat_after(run, home, since), f"no heartbeat from {home} after a {mode} restart"

        # every vertex but the MV pushed; the MV's agent stopped, handed the MV's PUSH, killed
        t = run.change_and_wait([("ins", "rb", 7, "i"), ("upd_key", "ra", 6, 8)])
        for v in run.phys.order():
            if v != run.mv:
                run.executor.push(run.version, v, t)
        run.agents[home].send_signal(signal.SIGSTOP)
        pid = run.executor.push(run.version, run.mv, t, wait=False)
        time.sleep(1)  # delivered to the stopped agent, never answered nor acknowledged
        run.restart_agent(home)
        with run.executor.cond:
            assert run.executor.cond.wait_for(lambda: pid in run.executor.got, 30), \
                "the PUSH the agent died with was lost"
        assert isinstance(run.executor.got[pid], PushDone)
        assert _mv(run.inst) == _oracle(run.inst, t)


def test_the_auditor_and_the_catalog_store_ride_out_a_catalog_restart(cloud: CloudHandle
                                                                       ) -> None:
    """A catalog outage skips audit snapshots instead of ending the auditor, and a
    catalog connection the restart dropped is opened again at its next use."""
    if cloud.local is None:
        pytest.skip("restarts need the test's own local cloud")
    store = CatalogStore(cloud.topology.catalog_dsn)
    auditor = Auditor(cloud.topology, period_s=0.1)
    auditor.start()
    try:
        assert _wait_for(lambda: auditor.rounds >= 2, 20)
        before = store.relations()
        cloud.local.cluster("catalog").restart("fast")
        rounds = auditor.rounds
        with contextlib.suppress(psycopg.Error, SmileError):
            store.relations()  # may be the call that finds the connection dead
        assert store.relations() == before
        assert _wait_for(lambda: auditor.rounds >= rounds + 3, 30), "the auditor stopped"
        assert auditor.thread is not None and auditor.thread.is_alive()
    finally:
        auditor.close()
        store.close()


def test_a_push_stuck_on_a_lock_fails_within_its_timeout(cloud: CloudHandle) -> None:
    """A PUSH carries its timeout (the executor derives it from the sharing's SLA);
    a push stuck behind a lock fails with the database's reason instead of holding its vertex
    for good, and once the lock is gone the next push brings the MV to the oracle."""
    with running_agents(cloud) as run:
        t = run.change_and_wait([("ins", "ra", 4, "d"), ("ins", "rb", 4, "e")])
        for v in run.phys.order():
            if v != run.mv:
                run.executor.push(run.version, v, t)
        dsn = cloud.topology.machine(run.mv.machine).dsn
        with psycopg.connect(dsn) as blocker:
            blocker.execute(sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(
                sql.Identifier(*run.phys.vertices[run.mv].table)))
            started = time.monotonic()
            pid = "stuck-push"
            run.executor.transport.send(agent_queue(run.mv.machine), Push(
                pid, run.version, run.mv.label, t, EXECUTOR, "timeouts", timeout_s=2.0))
            with run.executor.cond:
                assert run.executor.cond.wait_for(lambda: pid in run.executor.got, 20)
            took = time.monotonic() - started
            blocker.rollback()
        failure = run.executor.got[pid]
        assert isinstance(failure, AgentFailure), failure
        assert "lock timeout" in failure.reason, failure.reason
        assert took < 10
        run.executor.push(run.version, run.mv, t)
        assert _mv(run.inst) == _oracle(run.inst, t)


def test_a_push_held_by_a_lock_holds_no_other_push_of_its_machine(cloud: CloudHandle) -> None:
    """An agent carries out several pushes at once (`PUSH_WORKERS`): while the MV's push waits
    on a lock — as behind a long operator of another sharing — the pushes of the other vertices
    of its machine are carried out and answered; once the lock is gone the MV's push ends and
    the MV equals the oracle. With one worker, they all waited for the MV's."""
    with running_agents(cloud) as run:
        home = run.mv.machine
        t = run.change_and_wait([("ins", "ra", 4, "d"), ("ins", "rb", 4, "e")])
        others = [v for v in run.phys.order() if v != run.mv]
        assert any(v.machine == home for v in others), "the plan has nothing else on the MV's"
        for v in others:
            run.executor.push(run.version, v, t)
        conn = run.inst.conns[home]
        with psycopg.connect(cloud.topology.machine(home).dsn) as blocker:
            blocker.execute(sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(
                sql.Identifier(*run.phys.vertices[run.mv].table)))
            held = run.executor.push(run.version, run.mv, t, wait=False)
            assert _wait_for(lambda: conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND "
                "wait_event_type = 'Lock' AND backend_xid IS NOT NULL",
                (f"smile-agent-{home}",)).fetchone() == (1,), 20), "the MV's push never began"
            later = run.change_and_wait([("ins", "ra", 9, "x"), ("upd_val", "rb", 4, "y")])
            for v in others:  # each answered within the executor's 30 s, the MV's still held
                run.executor.push(run.version, v, later)
            assert held not in run.executor.got
            blocker.rollback()
        with run.executor.cond:
            assert run.executor.cond.wait_for(lambda: held in run.executor.got, 30)
        assert isinstance(run.executor.got[held], PushDone)
        assert _mv(run.inst) == _oracle(run.inst, t)
        run.executor.push(run.version, run.mv, later)
        assert _mv(run.inst) == _oracle(run.inst, later)
