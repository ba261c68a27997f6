"""The executor (paper §8): runs the active version of the global plan D — knows every
sharing's staleness, pushes each one independently of the others through the agents, and
deploys new versions of D with idempotent, versioned commands. This module only puts its parts
together and follows the active version:

| part | job |
|---|---|
| `inbox.Inbox` | the agents' answers, kept until claimed |
| `clock.VertexClock` | the mirror of every vertex's TS, and which machines are quiet |
| `learning.ModelLearner` | the online time model |
| `busy.BusyMeter` | each machine's measured operator load |
| `scheduler.Scheduler` | the lazy decision: who is pushed now, how far |
| `groups.GroupPushes` | consistent groups: every MV of a group to one TS, in one transaction |
| `pushes.Pushes` | one sharing's push, and the accounting of every PUSH_DONE |
| `dataflow.Dataflow` | a push as a dataflow of PUSH commands |
| `deployer.Deployer` | a new version of D, exactly |

Restart, or another process changing D: the active version is followed from the catalog; the
vertex timestamps, read once from the machines and then from the heartbeats, say where every
sharing is. Nothing else is needed.

Must not: plan or admit sharings (`sharings.py`), run operators (agents do), or open a
machine itself (`deploy.machine_state`).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from smile.deploy import machine_state, plan_store
from smile.executor.auditor import Staleness
from smile.executor.busy import BusyMeter
from smile.executor.clock import VertexClock
from smile.executor.dataflow import Dataflow
from smile.executor.deployer import Deployer
from smile.executor.groups import GroupPushes
from smile.executor.inbox import Inbox
from smile.executor.lazy import LAZINESS
from smile.executor.learning import ModelLearner
from smile.executor.observed import ObservedRates
from smile.executor.paths import PathChooser
from smile.executor.pushes import Pushes, Tracked
from smile.executor.scheduler import Scheduler
from smile.executor.skew import SKEWS_OPTION, Reading, merge_skews
from smile.executor.steady import WINDOW_S
from smile.executor.store import CatalogStore
from smile.messaging.protocol import AgentFailure, Done, Heartbeat, PushDone
from smile.messaging.transport import EXECUTOR, HEARTBEATS, Transport
from smile.optimizer.admission import PlannerOptions
from smile.optimizer.load import companions

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from smile.costmodel.time_model import TimeModel
    from smile.deploy.physical import PhysicalPlan
    from smile.executor.clock import Beat
    from smile.messaging.protocol import Command, Message
    from smile.optimizer.recompute import Forced
    from smile.topology import Topology

log = logging.getLogger("smile.executor")


class Executor:
    def __init__(self, topology: Topology, model: TimeModel | None = None, *,
                 mode: Literal["lazy", "eager"] = "lazy", tick_s: float = 0.1,
                 push_timeout_s: float = 30.0, retries: int = 3,
                 laziness: float = LAZINESS, pusher: str = "main",
                 command_timeout_s: float = 900.0, share_pushes: bool | None = None,
                 maintenance: Forced | None = None) -> None:
        self.topology = topology
        self.mode = mode
        self.tick_s = tick_s
        self.command_timeout_s = command_timeout_s
        self.share_pushes = share_pushes
        """Push sharings that share vertices together (`scheduler.py`); None: as the planner
        options in the catalog say when started (`PUT /plan/options`)."""
        self.pusher = pusher
        """Which sharings this executor pushes: those submitted for it (`smile serve`'s is
        'main'; a benchmark's executor keeps to its own beside it)."""
        self.lock = threading.RLock()
        """Guards the active version, the tracked sharings and their push state."""
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.transport: Transport | None = None
        self.store: CatalogStore | None = None
        self.version: int | None = None
        self.plan: PhysicalPlan | None = None
        self.skews: dict[str, Reading] = {}
        """Join skews measured at submissions, pooled (`skew.py`): every later estimate of those
        joins sees them. Written by `SharingService.submit` under its lock, kept in the
        catalog (`SKEWS_OPTION`) and taken up again by `start`, so a restarted API does not
        admit on uniform rates beside sharings that run on skewed ones."""
        names = [m.name for m in topology.machines]
        self.inbox = Inbox()
        self.clock = VertexClock(names)
        self.learner = ModelLearner(model)
        self.busy = BusyMeter(names)
        self.observed = ObservedRates()
        """Tuples/s each running computation takes in, from the PUSH_DONEs."""
        self.pushes = Pushes(self)
        self.paths = PathChooser(topology, lambda: self.model, maintenance)
        """Which path each push takes (`maintenance`: always that one)."""
        self.dataflow = Dataflow(self._send, self.inbox, self.stop,
                                 push_timeout_s=push_timeout_s, retries=retries,
                                 on_done=self.pushes.answered, on_refused=self.pushes.refused,
                                 on_left=self.paths.left_behind,
                                 epoch=self._broker_epoch, holding=self.clock.holds)
        self.deployer = Deployer(topology, self.inbox, self.dataflow, self.stop,
                                 command_timeout_s=command_timeout_s, send=self._send,
                                 quiet=self.clock.quiet)
        self.deployer.stale = self.paths.stale_relations
        self.scheduler = Scheduler(self, mode=mode, laziness=laziness)
        self.groups = GroupPushes(self)

    # -- what the parts hold, as the rest of SMILE reads it ------------------------------------
    @property
    def model(self) -> TimeModel:
        """The time model as learnt so far."""
        return self.learner.model

    @property
    def calibrated(self) -> TimeModel:
        """The time model this executor started with."""
        return self.learner.calibrated

    @property
    def refits(self) -> int:
        return self.learner.refits

    @property
    def tracked(self) -> dict[str, Tracked]:
        """The sharings this executor pushes (read and change under `lock`)."""
        return self.scheduler.tracked

    @property
    def taken_along(self) -> int:
        return self.scheduler.taken_along

    @property
    def machines(self) -> dict[str, Beat]:
        """Each machine's last heartbeat."""
        return self.clock.beats

    def delays(self) -> dict[str, float]:
        return self.scheduler.delays()

    def measured_load(self, window_s: float = WINDOW_S) -> dict[str, float]:
        """Each machine's operator seconds per second over the last `window_s` (PUSH_DONEs)."""
        return self.busy.load(window_s)

    def measured_edges(self, window_s: float = WINDOW_S) -> dict[str, dict[str, float]]:
        """Per machine, each vertex's operator seconds per second over the last `window_s`."""
        return self.busy.edges(window_s)

    def steady_load(self, deploys: Sequence[tuple[float, float]],
                    window_s: float = WINDOW_S) -> dict[str, float]:
        """Each machine's operator seconds per second outside `deploys` (`busy.py`)."""
        return self.busy.steady(deploys, window_s)

    # -- life --------------------------------------------------------------------------------
    def start(self) -> None:
        """Connect, take up the active version of D, and run."""
        self.store = CatalogStore(self.topology.catalog_dsn)
        self.skews = merge_skews(self.skews, {key: Reading.from_json(doc) for key, doc in (
            self.store.option(SKEWS_OPTION) or {}).items()})
        if self.share_pushes is None:
            self.share_pushes = PlannerOptions.from_json(
                self.store.option("planner") or {}).share_pushes
        client = f"executor-{time.time_ns()}"
        replies = f"{EXECUTOR}.{client}"
        self.dataflow.replies = self.deployer.replies = replies
        self.transport = Transport(self.topology.broker_url, client)
        self.transport.subscribe(replies, self._on_message)
        self.transport.subscribe(HEARTBEATS, self._on_message)
        self.follow()
        self.reconcile()
        for name, loop in (("schedule", self._schedule_loop), ("follow", self._follow_loop)):
            t = threading.Thread(target=loop, daemon=True, name=name)
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
        self.paths.close()

    def _broker_epoch(self) -> int:
        return self.transport.reconnects if self.transport is not None else 0

    def _send(self, queue: str, command: Command) -> None:
        assert self.transport is not None, "the executor is not started"
        self.transport.send(queue, command)

    def _schedule_loop(self) -> None:
        while not self.stop.wait(self.tick_s):
            try:
                self.scheduler.tick()
            except Exception as exc:  # one bad tick must not stop the pushing
                log.error("scheduling pushes failed: %s", exc)

    def _follow_loop(self) -> None:
        while not self.stop.wait(0.5):
            try:
                self.follow()
            except Exception as exc:
                log.warning("cannot follow the active plan: %s", exc)

    # -- the active version ------------------------------------------------------------------
    def follow(self) -> None:
        """Take up the catalog's active version of D if it is not the one running."""
        version = plan_store.active_version(self.topology.catalog_dsn)
        if version is not None and version != self.version:
            self.use(version, plan_store.load_version(self.topology.catalog_dsn, version))

    def use(self, version: int, phys: PhysicalPlan) -> None:
        """Run `phys` as the active version: push the sharings of this executor in it."""
        owned = self._owned()
        with self.lock:
            self.version, self.plan = version, phys
            self.scheduler.advances = dict(phys.plan.advances)
            self.scheduler.riders = companions(phys.plan)
            self.groups.use(phys.plan)
            self.observed.forget({v.computation for v in phys.plan.vertices})
            self.learner.forget({v.label for v in phys.plan.vertices})
            keep = {}
            for entry in phys.plan.sharings:
                if entry.name in owned:
                    tr = self.tracked.get(entry.name) or Tracked(entry.name, entry.sla_s)
                    keep[entry.name] = (replace(tr, sla_s=entry.sla_s,
                                                penalty=entry.penalty_per_tuple)
                                        if not tr.pushing else tr)
            self.scheduler.tracked = keep

    def _owned(self) -> set[str]:
        assert self.store is not None
        return {r.name for r in self.store.sharings() if r.pusher == self.pusher
                and r.status in ("admitted", "installing")}

    def deploy(self, version: int, new: PhysicalPlan) -> dict[str, Any]:
        """Make `new` (stored as `version`) the running plan, exactly (`deployer.py`). On
        failure what the new version created is dropped again and AgentError raised."""
        with self.lock:
            old, old_version = self.plan, self.version
        return self.deployer.deploy(version, new, old, old_version, self)

    def freshen(self, ahead_s: float) -> int:
        return self.scheduler.freshen(ahead_s)

    def bring_in(self, names: set[str]) -> int:
        return self.scheduler.bring_in(names)

    # -- what the machines say -----------------------------------------------------------------
    def _on_message(self, m: Message) -> None:
        if isinstance(m, Heartbeat):
            self.clock.beat(m.machine, m.load, holding=m.holding)
            self.clock.learn(m.machine, m.vertex_ts, m.sent_at)
        elif isinstance(m, (PushDone, AgentFailure, Done)):
            self.inbox.put(m)

    def reconcile(self) -> None:
        """Every machine's vertex timestamps read straight from it: once at start (after a
        restart nothing is known until the first heartbeats) — heartbeats keep them after."""
        for m in self.topology.machines:
            got = machine_state.all_timestamps(m)
            if got is not None:
                self.clock.learn(m.name, *got)

    def untrack(self, sharing: str) -> None:
        """Push `sharing` no more (failed, or leaving D to be planned again)."""
        with self.lock:
            self.tracked.pop(sharing, None)

    def timestamps(self, sharing: str) -> Staleness | None:
        """TS(MV), MINTS(SRC) and MAXTS(SRC) of a sharing as last known, or None."""
        with self.lock:
            phys = self.plan
            if phys is None or sharing not in phys.plan.names():
                return None
            entry = phys.plan.sharing(sharing)
            keys = [(v.machine, phys.vertices[v].ts_key) for v in (entry.mv, *entry.sources)]
        mv, *srcs = self.clock.get_many(keys)
        known = [s for s in srcs if s is not None]
        if mv is None or len(known) < len(srcs):
            return None
        return Staleness(mv, min(known), max(known))

    def unreachable(self, sharing: str) -> dict[str, datetime]:
        """The machines `sharing` needs whose agents have gone quiet, with their last
        heartbeat; empty while the executor is young enough to not know. Cheap while every
        agent beats (the scheduler asks for every sharing at every tick)."""
        if not self.clock.quiet():
            return {}
        with self.lock:
            phys = self.plan
            if phys is None or sharing not in phys.plan.names():
                return {}
            machines = {v.machine for v in phys.plan.of_sharing(sharing)}
        return self.clock.unreachable(machines)
