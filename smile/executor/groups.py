"""Pushes of consistent groups (docs/design/groups.md): every MV of a group brought to one
common timestamp, in one transaction on the group's machine.

A group is pushed as a whole, never one member alone: the scheduler leaves its members to
this module (`Scheduler.start_due`, `Scheduler.companions`). When and how far is the lazy
rule (`lazy.push_target`) played for the group: the stalest MV against the freshest source
of any member, the tightest SLA, the group's critical path (`optimizer.groups.group_cp`) plus
the largest delay its members' pushes have shown. Members whose MVs are at different
timestamps (a member just filled by a deploy) are pushed at once to a timestamp past all of
them, so `bring_in` leaves a joining member aligned with the others before its `201`.

A push is two steps: a dataflow (`dataflow.py`) to the target of every vertex the MVs' own
steps read (their deltas, and all those read), then one PUSH of the first MV with the others
`together`, which the MV machine's agent runs in one transaction (`deploy/advance_group.py`).
Only then is any member done: a consumer's snapshot, reading all the MVs in one transaction,
sees them all before the push or all after it.

Must not: touch a database or the broker but through the dataflow and its sender; decide for
sharings outside groups.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import defaultdict
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING

from smile.executor.dataflow import PERMANENT, PushSpec
from smile.executor.lazy import push_target
from smile.executor.scheduler import EPOCH, seconds
from smile.messaging.protocol import AgentFailure, Push, PushDone
from smile.messaging.transport import agent_queue
from smile.optimizer.groups import group_cp, groups

if TYPE_CHECKING:
    from datetime import datetime

    from smile.executor.pushes import Tracked
    from smile.executor.runtime import Executor
    from smile.optimizer.global_plan import GlobalPlan
    from smile.optimizer.plan import Vertex

log = logging.getLogger("smile.executor")
_ids = itertools.count()


class GroupPushes:
    def __init__(self, ex: Executor) -> None:
        self.ex = ex
        self.groups: dict[str, tuple[str, ...]] = {}
        """The groups of the active version: key → members (under `ex.lock`)."""
        self.member_of: dict[str, str] = {}
        self._cps: dict[str, tuple[float, float]] = {}
        self._cps_key: tuple[int | None, int] = (None, -1)

    def use(self, plan: GlobalPlan) -> None:
        """Take up the groups of a new active version (call under `ex.lock`)."""
        self.groups = groups(plan)
        self.member_of = {n: k for k, names in self.groups.items() for n in names}

    def grouped(self, name: str) -> bool:
        with self.ex.lock:
            return name in self.member_of

    def unaligned(self, names: set[str]) -> bool:
        """Whether a group with a member in `names` has its MVs at different TSs (or one not
        heard of yet): a member a deploy just filled, which the next push of its group
        aligns with the others."""
        with self.ex.lock:
            todo = [ns for ns in self.groups.values() if names & set(ns)]
        for ns in todo:
            marks = [self.ex.timestamps(n) for n in ns]
            if any(m is None for m in marks) or \
                    len({m.mv_ts for m in marks if m is not None}) > 1:
                return True
        return False

    # -- when ----------------------------------------------------------------------------------
    def start_due(self, ahead_s: float = 0.0,
                  only: set[str] | None = None) -> list[threading.Thread]:
        """Start a push of every group due now (or within `ahead_s`; of those with a member
        in `only`, if given); their threads."""
        ex = self.ex
        with ex.lock:
            todo = [(k, names) for k, names in self.groups.items()
                    if only is None or only & set(names)]
        started = []
        for key, names in todo:
            with ex.lock:
                members = [tr for n in names if (tr := ex.tracked.get(n)) is not None]
            if len(members) < len(names) or any(tr.pushing for tr in members) \
                    or any(ex.unreachable(n) for n in names):
                continue  # another executor's, being pushed, or waiting for a machine
            t = self.target(key, members, ahead_s)
            if t is None:
                continue
            with ex.lock:
                if any(tr.pushing or ex.tracked.get(tr.name) is not tr for tr in members):
                    continue
                for tr in members:
                    tr.pushing = True
            thread = threading.Thread(target=self.push, args=(members, t), daemon=True,
                                      name=f"push-group-{key}")
            thread.start()
            started.append(thread)
        return started

    def cp(self, names: tuple[str, ...]) -> tuple[float, float]:
        """(CP(0), slope) of the group's push under the current model."""
        ex = self.ex
        model, generation = ex.learner.current()
        with ex.lock:
            key = (ex.version, generation)
            if key != self._cps_key and ex.plan is not None:
                plan = ex.plan.plan
                at0, at1 = plan.arrivals(model, 0.0), plan.arrivals(model, 1.0)
                s0, s1 = plan.seconds(model, 0.0), plan.seconds(model, 1.0)
                self._cps = {}
                for k, ns in self.groups.items():
                    fixed = group_cp(plan, ns, at0, s0)
                    self._cps[k] = (fixed, max(0.0, group_cp(plan, ns, at1, s1) - fixed))
                self._cps_key = key
            return self._cps.get(self.member_of.get(names[0], ""), (0.0, 0.0))

    def target(self, key: str, members: list[Tracked], ahead_s: float = 0.0
               ) -> datetime | None:
        """Where to push the group now (every MV to the same TS), or None to wait."""
        ex = self.ex
        marks = [ex.timestamps(tr.name) for tr in members]
        if any(m is None for m in marks):
            return None
        mvs = [m.mv_ts for m in marks if m is not None]
        lo = min(m.min_src for m in marks if m is not None)
        hi = max(m.max_src for m in marks if m is not None)
        with ex.lock:
            if ex.plan is None:
                return None
            machines = {s.machine for tr in members
                        for s in ex.plan.plan.sharing(tr.name).sources}
        if min(mvs) < max(mvs):  # not aligned (a member just joined): align them at once
            return lo if lo > max(mvs) else None
        age, clocks = ex.clock.source_clocks(machines)
        hi += timedelta(seconds=age + ahead_s)
        hi = max([hi, *(c + timedelta(seconds=ahead_s) for c in clocks)])
        if ex.scheduler.mode == "eager":
            due = time.monotonic() - max(tr.last_push for tr in members) >= 1.0
            return lo if due and lo > mvs[0] else None
        cp0, slope = self.cp(tuple(tr.name for tr in members))
        delay = max(tr.delay_s for tr in members)
        t = push_target(mv=seconds(mvs[0]), min_src=seconds(lo), max_src=seconds(hi),
                        sla_s=min(tr.sla_s for tr in members), laziness=ex.scheduler.laziness,
                        cp=lambda x: cp0 + slope * max(x, 0.0) + delay)
        if t is None:
            return None
        at = min(max(EPOCH + timedelta(seconds=t), mvs[0]), lo)
        return at if at > mvs[0] else None

    # -- how -----------------------------------------------------------------------------------
    def push(self, members: list[Tracked], t: datetime) -> None:
        """Push the group of `members` to `t`: what their MVs read, then the MVs together."""
        ex = self.ex
        started = time.monotonic()
        ok = False
        predicted: float | None = None
        try:
            with ex.lock:
                version, phys = ex.version, ex.plan
            names = [tr.name for tr in members]
            if version is None or phys is None or \
                    any(n not in phys.plan.names() for n in names):
                return
            plan = phys.plan
            mvs = list(dict.fromkeys(plan.sharing(n).mv for n in names))
            inputs = {s for mv in mvs for s in plan.incoming[mv].sources}
            marks = [ex.timestamps(n) for n in names]
            dues = [m.mv_ts + timedelta(seconds=tr.sla_s)
                    for m, tr in zip(marks, members, strict=True) if m is not None]
            if marks[0] is not None:
                cp0, slope = self.cp(tuple(names))
                predicted = cp0 + slope * (t - marks[0].mv_ts).total_seconds()
            owners: dict[Vertex, list[str]] = defaultdict(list)
            for n in names:
                for v in plan.advances.get(n, frozenset()):
                    owners[v].append(n)
            stale = ex.paths.stale_relations(phys)  # recomputed, never advanced by deltas
            spec = PushSpec(version, phys, frozenset(inputs), t, names[0],
                            min(dues, default=None), dict(owners),
                            {v: "recompute" for v in plan.advanced_by(inputs) if v in stale})
            with ex.dataflow.running(version):  # a deploy drains it whole
                ok = ex.dataflow.run(spec) and self._together(spec, mvs)
        except Exception as exc:
            if not ex.stop.is_set():
                log.error("push of group %s to %s failed: %s", members[0].name, t, exc)
        finally:
            if not ok:
                ex.paths.failed(recomputing=False)
            gave_up = [g for tr in members
                       if (g := ex.pushes.settle(tr, started, ok, predicted)) is not None]
            if gave_up:  # the group's pushes are refused for good: all of it fails
                for tr in members:
                    ex.pushes.give_up(tr, gave_up[0][1])

    def _together(self, spec: PushSpec, mvs: list[Vertex]) -> bool:
        """The MVs to `spec.t` in one transaction on their machine, sent again like any PUSH
        (`dataflow.py`) when no answer comes or the agent fails; True when they got there."""
        ex, flow = self.ex, self.ex.dataflow
        timeout = max(flow.push_timeout_s, 2 * min(
            spec.phys.plan.sharing(n).sla_s for n in dict.fromkeys(
                n for ns in spec.owners.values() for n in ns)))
        for attempt in range(flow.retries + 1):
            if attempt:
                ex.stop.wait(0.2 * attempt)
            pid = f"{spec.sharing}/group/{next(_ids)}/{attempt}"
            sent = time.monotonic()
            flow.send(agent_queue(mvs[0].machine), Push(
                pid, spec.version, mvs[0].label, spec.t, flow.replies, spec.sharing, timeout,
                spec.deadline, tuple(v.label for v in mvs[1:])))
            got = ex.inbox.wait_all([pid], flow.push_timeout_s, ex.stop)[pid]
            if ex.stop.is_set():
                return False
            if isinstance(got, PushDone):
                self._record(spec, mvs, got, time.monotonic() - sent)
                return True
            reason = got.reason if isinstance(got, AgentFailure) else "no answer"
            if isinstance(got, AgentFailure) and got.sqlstate and \
                    got.sqlstate[:2] in PERMANENT:
                ex.pushes.refused(spec.sharing, f"{mvs[0].label}: {reason}")
            log.warning("group push %s to %s: %s (attempt %d)", pid, spec.t, reason,
                        attempt + 1)
        return False

    def _record(self, spec: PushSpec, mvs: list[Vertex], done: PushDone,
                round_trip: float) -> None:
        """Account for each MV the group's push advanced as for a push of it alone."""
        by_label = {v.label: v for v in mvs}
        for label, took, rows_in, rows_out in done.parts or (
                (done.vertex, done.elapsed_s, done.rows_in, done.rows_out),):
            v = by_label.get(label)
            if v is None:
                continue
            share = took / done.elapsed_s if done.elapsed_s > 0 else 0.0
            one = replace(done, vertex=label, elapsed_s=took, rows_in=rows_in,
                          rows_out=rows_out, parts=(),
                          cpu_s=None if done.cpu_s is None else round(done.cpu_s * share, 6))
            self.ex.pushes.record(spec, v, one)
        self.ex.learner.learn_dispatch(max(0.0, round_trip - done.elapsed_s))

