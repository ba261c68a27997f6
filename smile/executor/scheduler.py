"""The lazy decision (paper §8.2): at every tick, which sharings to push now and how far.

- When and how far: `lazy.push_target` (l = 0.8) with the sharing's CP(x) in D under the
  current time model, plus the delay its pushes have shown beyond it; `mode="eager"` pushes
  every second instead (the baseline of `smile bench lazy`).
- After an outage, the dearest late tuples catch up first (highest penalty first); a sharing
  that needs an unreachable machine waits for it, the others go on.
- Shared pushes: when a sharing falls due, the sharings that share most of the vertices its
  push advances (`formulas.SHARE_OVERLAP`, `load.companions`: the rule the load model
  charges) and are already past `formulas.SHARE_FROM` of their SLA are pushed with it, in one
  dataflow to its target, so those vertices do their fixed work once for the group.
- Consistent groups: their members are pushed as wholes, each push bringing every MV of a
  group to one timestamp (`groups.py`); they are never taken along, nor take others.
- Around a deploy: the sharings due while its fill will keep the machines busy are pushed
  first (`freshen`), and its new sharings are pushed while due before they are admitted
  (`bring_in`: their MVs are as old as the deploy's t0).

Must not: plan or admit sharings (`sharings.py`), run a push (`pushes.py`, `dataflow.py`), or
touch a database or the broker.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Literal

from smile.costmodel.formulas import SHARE_FROM
from smile.executor.lazy import LAZINESS, push_target

if TYPE_CHECKING:
    from collections.abc import Callable

    from smile.executor.pushes import Tracked
    from smile.executor.runtime import Executor
    from smile.optimizer.plan import Vertex

log = logging.getLogger("smile.executor")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
BRING_IN_ROUNDS = 3
"""After a deploy, the new sharings are pushed while due at most this many times before they
are admitted (`bring_in`): a catch-up from t0, then the push it left due."""


def seconds(ts: datetime) -> float:
    return (ts - EPOCH).total_seconds()


class Scheduler:
    def __init__(self, ex: Executor, *, mode: Literal["lazy", "eager"] = "lazy",
                 laziness: float = LAZINESS) -> None:
        self.ex = ex
        self.mode = mode
        self.laziness = laziness
        self.tracked: dict[str, Tracked] = {}
        """The sharings this executor pushes (under `ex.lock`)."""
        self.advances: dict[str, frozenset[Vertex]] = {}
        """The vertices a push of each sharing of the active version advances."""
        self.riders: dict[str, tuple[str, ...]] = {}
        """Per sharing of the active version, the sharings a push of which can take it
        along (`load.companions`)."""
        self.taken_along = 0
        """Pushes of sharings taken along with a due one (shared pushes) since start."""
        self._cps: dict[str, tuple[float, float]] = {}
        self._cps_key: tuple[int | None, int] = (None, -1)

    # -- the tick ------------------------------------------------------------------------------
    def tick(self) -> None:
        self.ex.learner.expire()
        self.start_due()

    def start_due(self, ahead_s: float = 0.0,
                  only: set[str] | None = None) -> list[threading.Thread]:
        """Start a push of every sharing due now (or within `ahead_s`; of `only` those, if
        given); their threads."""
        ex = self.ex
        with ex.lock:  # after an outage, the dearest late tuples catch up first
            candidates = sorted((tr for tr in self.tracked.values() if not tr.pushing
                                 and (only is None or tr.name in only)
                                 and tr.name not in ex.groups.member_of),
                                key=lambda tr: -tr.penalty)
        started = ex.groups.start_due(ahead_s, only)  # pushed as wholes (`groups.py`)
        for tr in candidates:
            if ex.unreachable(tr.name):
                continue  # degraded: waits for its machines, the others go on
            target = self.target(tr, ahead_s)
            if target is None:
                continue
            with ex.lock:
                if tr.pushing or self.tracked.get(tr.name) is not tr:
                    continue
                tr.pushing = True
            group: list[Tracked] = []
            try:
                group = self.companions(tr, target)
                thread = threading.Thread(target=ex.pushes.push, args=(tr, target, tuple(group)),
                                          daemon=True, name=f"push-{tr.name}")
                thread.start()
            except Exception:
                with ex.lock:  # not pushed: free to be pushed at the next tick
                    for member in (tr, *group):
                        member.pushing = False
                raise
            started.append(thread)
        return started

    def companions(self, due: Tracked, t: datetime) -> list[Tracked]:
        """The sharings pushed along with `due` to `t` (shared pushes, module docstring),
        marked pushing: each shares at least `formulas.SHARE_OVERLAP` of the vertices its
        push advances with `due`'s, is past `SHARE_FROM` of its SLA, and may go to `t` within
        it (`t` is at most the target it could take now)."""
        ex = self.ex
        if not ex.share_pushes or self.mode != "lazy" or due.refused:
            return []
        with ex.lock:  # one whose pushes the database refuses goes alone (`give_up`)
            others = [o for o in self.tracked.values() if o is not due and not o.pushing
                      and not o.refused and due.name in self.riders.get(o.name, ())
                      and o.name not in ex.groups.member_of]  # a group goes as a whole
        group: list[Tracked] = []
        try:
            for o in others:
                marks = ex.timestamps(o.name)
                if marks is None or marks.mv_ts >= t or ex.unreachable(o.name):
                    continue
                could = self.target(o, laziness=SHARE_FROM)
                if could is None or could < t:
                    continue
                with ex.lock:
                    if o.pushing or self.tracked.get(o.name) is not o:
                        continue
                    o.pushing = True
                    self.taken_along += 1
                group.append(o)
        except Exception:
            with ex.lock:
                for o in group:
                    o.pushing = False
            raise
        return group

    # -- how far ---------------------------------------------------------------------------------
    def cp_line(self, sharing: str) -> tuple[float, float]:
        """(CP(0), slope) of a sharing's critical path in D under the current model."""
        ex = self.ex
        model, generation = ex.learner.current()
        with ex.lock:
            key = (ex.version, generation)
            if key != self._cps_key and ex.plan is not None:
                fixed = ex.plan.plan.arrivals(model, 0.0)
                one = ex.plan.plan.arrivals(model, 1.0)
                self._cps = {s.name: (fixed.get(s.mv, 0.0),
                                      max(0.0, one.get(s.mv, 0.0) - fixed.get(s.mv, 0.0)))
                             for s in ex.plan.plan.sharings}
                self._cps_key = key
            return self._cps.get(sharing, (0.0, 0.0))

    def cp(self, sharing: str) -> Callable[[float], float]:
        """Seconds to push x seconds of updates through a sharing's critical path in D."""
        cp0, slope = self.cp_line(sharing)
        return lambda x: cp0 + slope * max(x, 0.0)

    def target(self, tr: Tracked, ahead_s: float = 0.0,
               laziness: float | None = None) -> datetime | None:
        """Where to push `tr` now, or None to wait; with `ahead_s`, as if that many seconds
        had passed (the push would be due by then); `laziness` instead of the scheduler's."""
        ex = self.ex
        marks = ex.timestamps(tr.name)
        if marks is None:
            return None
        mv, lo, hi = marks.mv_ts, marks.min_src, marks.max_src
        with ex.lock:
            if ex.plan is None or tr.name not in ex.plan.plan.names():
                return None  # withdrawn meanwhile
            entry = ex.plan.plan.sharing(tr.name)
            machines = {s.machine for s in entry.sources}
        # the sources went on since their last heartbeat: staleness grows. Their own clock
        # when their agents read the watermarks, aged, is what the auditor holds TS(MV)
        # against, so capture lag counts here too
        age, clocks = ex.clock.source_clocks(machines)
        hi += timedelta(seconds=age + ahead_s)
        hi = max([hi, *(c + timedelta(seconds=ahead_s) for c in clocks)])
        if self.mode == "eager":
            due = time.monotonic() - tr.last_push >= 1.0
            return lo if due and lo > mv else None
        cp = self.cp(tr.name)
        t = push_target(mv=seconds(mv), min_src=seconds(lo), max_src=seconds(hi),
                        sla_s=tr.sla_s,
                        laziness=self.laziness if laziness is None else laziness,
                        cp=lambda x: cp(x) + tr.delay_s)
        if t is None:
            return None
        at = EPOCH + timedelta(seconds=t)
        return min(max(at, mv), lo)  # float round trip must not step past the watermark

    # -- around deploys ------------------------------------------------------------------------
    def freshen(self, ahead_s: float) -> int:
        """Push now, and wait for, every sharing that would fall due within `ahead_s`: a
        deploy's fill is about to take the machines' CPU and locks for that long, and a push
        slowed by it would miss its SLA. How many were pushed."""
        threads = self.start_due(ahead_s)
        deadline = time.monotonic() + self.ex.command_timeout_s
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return len(threads)

    def bring_in(self, names: set[str], rounds: int = BRING_IN_ROUNDS) -> int:
        """Push the sharings a deploy just made active (`names`, those this executor pushes)
        while they are due, up to `rounds` times, and wait: their MVs were filled at the
        deploy's t0 and are as stale as the deploy was long, so a sharing is admitted (and
        audited) once its MV is back within its SLA, not before — and, in a consistent group,
        at its group's TS (`groups.py`). How many pushes it took."""
        ex = self.ex
        pushed, done = 0, 0
        deadline = time.monotonic() + min(ex.command_timeout_s,
                                          rounds * ex.dataflow.push_timeout_s)
        while done < rounds and time.monotonic() < deadline:
            with ex.lock:
                mine = [tr for n in names if (tr := self.tracked.get(n)) is not None]
                busy = any(tr.pushing for tr in mine)
            unknown = [tr.name for tr in mine if ex.timestamps(tr.name) is None]
            threads = self.start_due(only={tr.name for tr in mine})
            if not threads and not busy and not unknown and not ex.groups.unaligned(names):
                break  # none is due: each is within its SLA with room for its next push
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))
            if threads:
                pushed, done = pushed + len(threads), done + 1
            else:  # the scheduler's push of it is under way, or its TS not heard yet
                time.sleep(0.1)
        return pushed

    def delays(self) -> dict[str, float]:
        """Each sharing this executor pushes: how much longer than its critical path its
        pushes outside deploys have taken (`Tracked.steady_delay_s`), the wait its push
        period is shortened by once the submissions have settled."""
        with self.ex.lock:
            return {name: tr.steady_delay_s for name, tr in self.tracked.items()
                    if tr.steady_delay_s > 0}
