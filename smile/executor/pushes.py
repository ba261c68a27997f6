"""One sharing's push, once the scheduler decided it: run the dataflow to its target (with
the sharings taken along), settle each member as soon as its own MV is there, and account
for every PUSH_DONE — the push log, the machine's busy time, the mirror of timestamps, the
observed rates and the online time model.

A sharing whose pushes the database refuses `FAIL_AFTER` times in a row with an error that
retrying does not cure is marked `failed` with the database's reason; the others go on.

Must not: decide when or how far to push (`scheduler.py`), or talk to agents other than
through the dataflow.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from smile.executor.dataflow import PushSpec
from smile.executor.lazy import learn_delay
from smile.executor.steady import during_deploy
from smile.optimizer.plan import charged_tuples, edge_kind
from smile.optimizer.recompute import recompute_key

if TYPE_CHECKING:
    from datetime import datetime

    from smile.executor.runtime import Executor
    from smile.messaging.protocol import PushDone
    from smile.optimizer.plan import Vertex
    from smile.optimizer.recompute import Mode

log = logging.getLogger("smile.executor")
FAIL_AFTER = 3
"""Pushes in a row refused by the database (each after its own retries) before a sharing is
marked `failed`: its work will fail every time, and retrying it forever would only load its
machines."""


@dataclass
class Tracked:
    """A sharing this executor pushes, and how its pushes have gone."""

    name: str
    sla_s: float
    pushing: bool = False
    last_push: float = 0.0
    pushes: int = 0
    failures: int = 0
    refused: int = 0
    """Pushes in a row the database refused with an error that retrying does not cure."""
    penalty: float = 0.0
    """$ per late tuple: who catches up first after an outage."""
    delay_s: float = 0.0
    """How much longer than their critical path its pushes take (`lazy.learn_delay`)."""
    steady_delay_s: float = 0.0
    """The same, learnt only from the pushes outside deploys: what admission charges the
    sharing's push period with. A burst of submissions slows every push while it lasts, and
    charged as if it lasted it would refuse sharings that fit once it is over."""


class Pushes:
    def __init__(self, ex: Executor) -> None:
        self.ex = ex
        self.refusals: dict[str, str] = {}
        """The last permanent refusal of each sharing's push under way (under `ex.lock`)."""

    def push(self, tr: Tracked, t: datetime, group: tuple[Tracked, ...] = ()) -> None:
        """Push `tr` to `t`, and with it the sharings of `group` (shared pushes). Each is
        done — free to be pushed again, its delay learnt — as soon as its own MV is at `t`:
        a 10-s sharing taken along with a 60-s one whose join is slow does not wait for it."""
        run = _SharingPush(self, tr, t, group)
        try:
            run.go()
        except Exception as exc:
            if not self.ex.stop.is_set():  # a push cut short by close() is not an error
                log.error("push of %s to %s failed: %s", tr.name, t, exc)
        finally:
            run.finish()

    def settle(self, member: Tracked, started: float, ok: bool,
               predicted: float | None) -> tuple[Tracked, str] | None:
        """A sharing's push is over (`ok`: its MV got there): free it, count it, learn its
        delay; (it, the database's reason) when its pushes were refused too often."""
        with self.ex.lock:
            refusal = self.refusals.pop(member.name, None)
            member.pushing = False
            member.last_push = started
            member.pushes += ok
            member.failures += not ok
            # a sharing whose own vertex the database refused counts it; the others of its
            # group do not (and it is not taken along again until it passes)
            member.refused = 0 if ok or refusal is None else member.refused + 1
            if ok and predicted is not None:  # at most half the SLA: one push stuck behind a
                # fill must not keep the sharing in catch-up for long
                took = time.monotonic() - started
                member.delay_s = min(member.sla_s / 2, learn_delay(
                    member.delay_s, took, predicted))
                if not during_deploy(started + took, took, self.ex.deployer.spans.spans()):
                    member.steady_delay_s = min(member.sla_s / 2, learn_delay(
                        member.steady_delay_s, took, predicted))
            if refusal is not None and member.refused >= FAIL_AFTER:
                return member, refusal
        return None

    def refused(self, sharing: str, reason: str) -> None:
        """The database refused a vertex `sharing`'s push needs, for good."""
        with self.ex.lock:
            self.refusals[sharing] = reason

    def give_up(self, tr: Tracked, reason: str) -> None:
        """Mark a sharing whose pushes the database refuses every time `failed`, with the
        database's reason, and stop pushing it; the other sharings go on. Its consumer sees
        why in `GET /sharings/{id}`, withdraws it and may submit it again."""
        log.error("sharing %s failed: %s", tr.name, reason)
        store = self.ex.store
        if store is not None:
            try:  # recorded first: a sharing is never dropped without its reason
                for row in store.sharings("admitted"):
                    if row.name == tr.name:
                        store.set_status(row.id, "failed", f"its push failed "
                                         f"{tr.refused} times in a row: {reason}")
            except Exception as exc:  # the catalog is away: tried again after the next push
                log.warning("cannot mark %s failed: %s", tr.name, exc)
                return
        self.ex.untrack(tr.name)

    def answered(self, spec: PushSpec, v: Vertex, done: PushDone, overhead: float) -> None:
        """A PUSH_DONE came in a dataflow (`record`); `overhead` is its round trip beyond the
        agent's work, which the time model learns as the dispatch overhead."""
        self.record(spec, v, done)
        self.ex.learner.learn_dispatch(overhead)

    def record(self, spec: PushSpec, v: Vertex, done: PushDone) -> None:
        """A PUSH_DONE of `v` in the dataflow of `spec`: into the push log, the machine's busy
        time, the mirror of timestamps, the observed rates and the time model."""
        ex, phys = self.ex, spec.phys
        edge = phys.incoming(v)
        assert edge is not None
        mode = spec.mode(v)
        kind = edge_kind(edge)
        now = time.monotonic()
        ex.busy.note(v.machine, now, done.elapsed_s, v.label)
        ex.clock.learn_pushed((v.machine, phys.vertices[v].ts_key), done.ts)
        sharing = spec.owner(v)
        if ex.store is not None and sharing:
            try:
                ex.store.log_push(sharing, v.label, kind if mode == "incremental" else mode,
                                  spec.t, done.elapsed_s, done.rows_out,
                                  v.machine, done.rows_in, done.bytes_moved, done.cpu_s,
                                  spec.owners.get(v, ()))
            except Exception as exc:
                log.warning("cannot log a push: %s", exc)
        if mode != "incremental":  # no delta rate to observe; a recomputation's line
            self._learn_path(spec, v, done, mode, now)
            return
        # an edge's tuples are what it writes, but a DeltaToRel's are the delta rows it reads
        tuples = done.rows_in if kind == "delta_to_rel" else done.rows_out
        span = (done.advanced_from, done.advanced_to)
        if span[0] is not None and span[1] is not None:
            ex.observed.add(v.computation, span[0], span[1], tuples)
        # one beside a deploy's fill and the first catch-ups measures the fill's contention
        # too: what admissions in a burst must go by, but not once the burst has settled
        steady = not during_deploy(now, done.elapsed_s, ex.deployer.spans.spans())
        ex.learner.learn_push(v.label, kind, charged_tuples(kind, done.rows_out, done.rows_in),
                              done.elapsed_s, now=now, steady=steady, advanced=done.advanced)


    def _learn_path(self, spec: PushSpec, v: Vertex, done: PushDone, mode: Mode,
                    now: float) -> None:
        """A recomputation teaches the `recompute` line and its vertex's scale (under
        `recompute_key`); a skip, nothing, but a delta a crash emptied is whole again."""
        ex = self.ex
        if mode == "skip" and done.advanced:  # one already there stays stale
            ex.paths.skipped(v)
        if mode != "recompute":
            return
        tuples = ex.paths.recomputed(spec.phys, v, done.rows_out)
        steady = not during_deploy(now, done.elapsed_s, ex.deployer.spans.spans())
        ex.learner.learn_push(recompute_key(v.label), "recompute", tuples, done.elapsed_s,
                              now=now, steady=steady, advanced=done.advanced)


class _SharingPush:
    """One push of a sharing (and those taken along) to `t`."""

    def __init__(self, pushes: Pushes, tr: Tracked, t: datetime,
                 group: tuple[Tracked, ...]) -> None:
        self.pushes, self.tr, self.t = pushes, tr, t
        self.started = time.monotonic()
        self.members = (tr, *group)
        self.waiting: dict[Vertex, list[Tracked]] = defaultdict(list)
        self.predicted: dict[str, float] = {}
        self.settled: set[str] = set()
        self.failed: list[tuple[Tracked, str]] = []

    def _settle(self, member: Tracked, ok: bool) -> None:
        self.settled.add(member.name)
        gave_up = self.pushes.settle(member, self.started, ok, self.predicted.get(member.name))
        if gave_up is not None:
            self.failed.append(gave_up)

    def _reached(self, v: Vertex) -> None:
        for member in self.waiting.pop(v, []):
            self._settle(member, True)

    def go(self) -> None:
        ex = self.pushes.ex
        with ex.lock:
            version, phys = ex.version, ex.plan
            advances = ex.scheduler.advances
        if version is None or phys is None or self.tr.name not in phys.plan.names():
            return
        dues: list[datetime] = []
        xs: list[float] = []  # the seconds of updates each member's MV is behind
        since: datetime | None = None  # the oldest member MV's TS
        owners: dict[Vertex, list[str]] = defaultdict(list)
        for member in self.members:
            if member.name not in phys.plan.names():
                continue
            self.waiting[phys.plan.sharing(member.name).mv].append(member)
            marks = ex.timestamps(member.name)
            if marks is not None:
                dues.append(marks.mv_ts + timedelta(seconds=member.sla_s))
                xs.append((self.t - marks.mv_ts).total_seconds())
                since = marks.mv_ts if since is None else min(since, marks.mv_ts)
                self.predicted[member.name] = ex.scheduler.cp(member.name)(
                    (self.t - marks.mv_ts).total_seconds())
            for v in advances.get(member.name, frozenset()):
                owners[v].append(member.name)  # logged as the due one's if it has v
        paths = ex.paths.choose(phys, self.waiting, max(xs, default=0.0),
                                deploying=ex.deployer.spans.running_now(),
                                since=since, until=self.t)
        ok = ex.dataflow.run(PushSpec(version, phys, frozenset(self.waiting), self.t,
                                      self.tr.name, min(dues, default=None), dict(owners),
                                      paths.modes), self._reached)
        if not ok:
            ex.paths.failed(recomputing=paths.chosen != "incremental")

    def finish(self) -> None:
        for member in self.members:  # those whose MV did not get there
            if member.name not in self.settled:
                self._settle(member, False)
        for member, refusal in self.failed:
            self.pushes.give_up(member, refusal)
