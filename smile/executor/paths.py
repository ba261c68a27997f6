"""Which path each push takes — apply the deltas, or recompute (`optimizer.recompute`) — and
how many pushes of each sharing took each.

Before a push the executor prices both paths with the time model it has learnt: the
incremental one at the pending updates (the rows its base deltas hold since the MV's TS,
counted, as seconds of the plan's rates; uncounted, the seconds since that TS, as the
critical path is), the recompute one at the sizes of what it reads and writes — each
relation vertex's rows as its machine's statistics have them (`pg_class.reltuples`, read at
most every `SIZES_EVERY_S`; a vertex not yet read is taken at what its last recomputation
wrote, else at the plan's estimate of its bytes ÷ `ROW_BYTES`). `force` ("incremental" or
"recompute", `smile serve --maintenance`, tests) takes one path whatever the prices.

Only the incremental path is taken while a deploy runs, and for `BACK_OFF_S` after a push
that took another failed: a skip marks the interval pruned, which a deploy's lease forbids
and a reader the new version adds at t0 cannot afford (`operators.recompute.skip` refuses
it); only a push through a delta a crash emptied skips then (it must: below), and a
deploy's lease may refuse that skip too. A skip refused that way (or in a push that chose
its path before the deploy began) is left for the delta's next push (`dataflow`), which does
not fail the push; until that delta has caught up, a push through it is priced from its TS
rather than the MV's (`behind_at`): the bases below it counted from there, as its
incremental path applies the rows since.

A relation a push leaves stale is recomputed by every later push that reaches it, whatever its
path (`stale_now`: as this executor's pushes left them, read from the machines after a start
or a failed push). A delta a crash emptied is stale too: every push through it, whatever its
path, recomputes the relations below it and skips it (`optimizer.recompute.lost_below`).

A recomputation's time teaches the model's `recompute` line (and its vertex's own scale,
under `optimizer.recompute.recompute_key`), as the other edges' do theirs.

Must not: push (`pushes.py`), or change a machine.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import defaultdict
from typing import TYPE_CHECKING

from smile.deploy import table_stats
from smile.deploy.machine_state import (
    Sessions,
    rows_between,
    stale_vertices,
    vertex_timestamp,
)
from smile.deploy.physical import physical_vertex
from smile.errors import AgentError
from smile.optimizer.plan import DeltaToRel, Vertex
from smile.optimizer.recompute import (
    push_paths,
    recompute_tuples,
    recomputes,
    seconds_of_updates,
    update_rates,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from datetime import datetime

    from smile.costmodel.time_model import TimeModel
    from smile.deploy.physical import PhysicalPlan
    from smile.optimizer.recompute import Forced, PushPaths
    from smile.topology import Topology

log = logging.getLogger("smile.executor")
SIZES_EVERY_S = 30.0
"""How old the relation sizes a choice is priced at may be."""
ROW_BYTES = 64.0
"""A vertex's rows by the plan's estimate of its bytes, until its machine has told."""
BACK_OFF_S = 30.0
"""How long pushes stay incremental after one that recomputed or skipped failed."""


class PathChooser:
    def __init__(self, topology: Topology, model: Callable[[], TimeModel],
                 force: Forced | None = None) -> None:
        self.topology = topology
        self.model = model
        """The time model as learnt so far."""
        self.force = force
        self.lock = threading.Lock()
        self.sizes: dict[tuple[str, str], float] = {}
        """(machine, table) → rows, as last read or recomputed."""
        self.read_at = -SIZES_EVERY_S
        self.incremental_until = -BACK_OFF_S
        """Before this (monotonic) time, pushes take the incremental path."""
        self._sessions: Sessions | None = None
        self.stale: set[Vertex] = set()
        """Relations left stale, as far as pushes told (a mark sent counts: at worst a
        relation is recomputed that need not be), and the stale vertices read from the
        machines: relations and deltas a crash emptied."""
        self._stale_known = False
        """Whether `stale` was read from the machines since this executor started, or since a
        push failed."""
        self.behind: dict[Vertex, tuple[int, datetime]] = {}
        """Deltas refused skips left behind (`left_behind`), each with when it was told and
        the `t` it was left below."""
        self._told = itertools.count()
        self._failures = 0
        """Pushes failed so far: a read that began before one does not count as known."""

    def choose(self, phys: PhysicalPlan, targets: Iterable[Vertex], x: float,
               deploying: bool = False, since: datetime | None = None,
               until: datetime | None = None) -> PushPaths:
        """Both paths of a push of `targets` carrying `x` seconds of updates, priced, and the
        modes of the one to take (the incremental one's while `deploying`, see the module;
        a relation left stale is recomputed on either). With `since` and `until` (the
        oldest MV's TS, the push's t), the updates are the rows the base deltas it reads
        hold in between — from further back below a delta a refused skip left behind
        (`behind_at`) — counted, where they can be. The relations the choice leaves stale
        are noted before the push runs."""
        targets = list(targets)
        stale = self.stale_now(phys)
        if deploying or time.monotonic() < self.incremental_until or \
                not any(t in recomputes(phys.plan) for t in targets):
            return push_paths(phys.plan, targets, self.model(), x, lambda v: 0.0,
                              "incremental", stale)
        self._refresh(phys)
        if since is not None and until is not None and self.force is None:
            behind = self.behind_at(phys, targets, since)
            if behind:  # uncounted, every edge is priced as far back as the oldest
                x = max(x, (until - min(behind.values())).total_seconds())
            counted = self.pending(phys, targets, since, until, behind)
            if counted is not None:
                x = seconds_of_updates(phys.plan, targets, counted)
        paths = push_paths(phys.plan, targets, self.model(), x,
                           lambda v: self.rows(phys, v), self.force, stale)
        with self.lock:
            self.stale.update(v for v, m in paths.modes.items() if m == "stale")
        return paths

    def stale_now(self, phys: PhysicalPlan) -> set[Vertex]:
        """The relations of `phys` left stale: as pushes told, read from the machines once
        after a start or a failed push."""
        with self.lock:
            known, failures = self._stale_known, self._failures
        if not known:
            sessions = self._pool()
            keys: set[tuple[str, str]] = set()
            known = True
            for machine in {v.machine for v in phys.vertices if not v.base}:
                try:
                    keys |= {(machine, k) for k in stale_vertices(sessions, machine)}
                except Exception as exc:  # read again at the next push
                    log.debug("cannot read the stale relations on %s: %s", machine, exc)
                    sessions.drop(machine)
                    known = False
            with self.lock:
                self.stale |= {v for v, pv in phys.vertices.items()
                               if (v.machine, pv.ts_key) in keys}
                self._stale_known = known and self._failures == failures
        with self.lock:
            return {v for v in self.stale if v in phys.vertices}

    def stale_relations(self, phys: PhysicalPlan) -> set[Vertex]:
        """The relations among `stale_now`: what a push that only applies deltas besides (a
        deploy's catch-up, a consistent group's) recomputes first; a stale delta it meets is
        refused, as only its sharing's push can skip it."""
        return {v for v in self.stale_now(phys) if not v.is_delta}

    def skipped(self, v: Vertex) -> None:
        """A push skipped delta `v`: one a crash emptied is whole again (nothing reads the
        interval it lost)."""
        with self.lock:
            self.stale.discard(v)

    def left_behind(self, v: Vertex, t: datetime) -> None:
        """A refused skip left delta `v` below `t`, where it was (`dataflow`): until it has
        reached `t`, the pushes through it are priced from its TS (`behind_at`)."""
        with self.lock:
            self.behind[v] = (next(self._told), t)

    def behind_at(self, phys: PhysicalPlan, targets: list[Vertex], since: datetime
                  ) -> dict[Vertex, datetime]:
        """The deltas a push of `targets` advances that refused skips left behind `since`
        (the oldest MV's TS), each with its TS, read from its machine. One that has reached
        the `t` of the push that left it, or is gone from the plan, is forgotten (unless
        left behind again meanwhile); one whose machine cannot be read is left out this
        time."""
        with self.lock:
            for v in [v for v in self.behind if v not in phys.vertices]:
                del self.behind[v]
            if not self.behind:  # as on nearly every push: no walk of the plan
                return {}
            todo = phys.plan.advanced_by(targets)
            told = {v: n for v, n in self.behind.items() if v in todo}
        if not told:
            return {}
        sessions = self._pool()
        found: dict[Vertex, datetime] = {}
        caught_up: list[Vertex] = []
        for v, (_, t) in sorted(told.items()):
            try:
                ts = vertex_timestamp(sessions, v.machine, phys.vertices[v].ts_key)
            except AgentError:  # no longer on its machine
                caught_up.append(v)
                continue
            except Exception as exc:  # its machine unreachable: read at the next push
                log.debug("cannot read TS(%s): %s", v.label, exc)
                sessions.drop(v.machine)
                continue
            if ts >= t:
                caught_up.append(v)
            if ts < since:
                found[v] = ts
        with self.lock:
            for v in caught_up:
                if self.behind.get(v) == told[v]:
                    del self.behind[v]
        return found

    def pending(self, phys: PhysicalPlan, targets: list[Vertex], since: datetime,
                until: datetime, behind: Mapping[Vertex, datetime] | None = None
                ) -> dict[Vertex, int] | None:
        """Rows of each base delta that prices a push of `targets` (`update_rates`), stamped
        in (since, until] — from further back for a base under a delta left `behind` (its
        TS); None when a machine cannot be read (the push is then priced at the plan's
        rates)."""
        sessions = self._pool()
        bases = update_rates(phys.plan, targets)
        lows = {s: since for s in bases}
        for v, ts in (behind or {}).items():
            for s in phys.plan.ancestors(v) & lows.keys():
                lows[s] = min(lows[s], ts)
        try:
            return {s: rows_between(sessions, s.machine, phys.vertices[s].table, lows[s],
                                    until) for s in bases}
        except Exception as exc:
            log.debug("cannot count the pending rows: %s", exc)
            for machine in {s.machine for s in bases}:
                sessions.drop(machine)
            return None

    def failed(self, recomputing: bool = True) -> None:
        """A push failed: the relations left stale are read again before the next; one that
        recomputed or skipped (`recomputing`) sends the next ones incremental awhile."""
        with self.lock:
            self._stale_known = False
            self._failures += 1
        if recomputing:
            self.incremental_until = time.monotonic() + BACK_OFF_S

    def rows(self, phys: PhysicalPlan, v: Vertex) -> float:
        """Rows of relation vertex `v` (a base's by its relation, on any machine)."""
        if v.base and not v.machine:  # R̂ where capture keeps the base's ΔR
            v = next((Vertex("relation", u.expr, u.machine) for u in phys.vertices
                      if u.base and u.expr == v.expr), v)
        pv = phys.vertices.get(v) or (physical_vertex(v, phys.schemas) if v.machine else None)
        with self.lock:
            got = self.sizes.get((v.machine, pv.table[1])) if pv is not None else None
        if got is not None:
            return got
        e = phys.incoming(v)
        return e.stored_bytes / ROW_BYTES if isinstance(e, DeltaToRel) else 0.0

    def _refresh(self, phys: PhysicalPlan) -> None:
        now = time.monotonic()
        with self.lock:
            if now - self.read_at < SIZES_EVERY_S:
                return
            self.read_at = now
        sessions = self._pool()
        wanted: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for v, pv in phys.vertices.items():
            if not v.is_delta:
                wanted[v.machine].append(pv.table)
            elif v.base:  # its R̂, which a recomputation from the bases reads
                shadow = physical_vertex(Vertex("relation", v.expr, v.machine), phys.schemas)
                wanted[v.machine].append(shadow.table)
        for machine, tables in wanted.items():
            try:
                got = table_stats.relation_rows(sessions.get(machine), tables)
            except Exception as exc:  # priced at what was known: never holds a push back
                log.debug("cannot read sizes on %s: %s", machine, exc)
                sessions.drop(machine)
                continue
            with self.lock:
                self.sizes.update({(machine, t): n for t, n in got.items()})

    def recomputed(self, phys: PhysicalPlan, v: Vertex, rows: int) -> float:
        """A recomputation of `v` wrote `rows`: its size now, and it is stale no more. The
        tuples the model charges it."""
        pv = phys.vertices[v]
        with self.lock:
            self.sizes[(v.machine, pv.table[1])] = float(rows)
            self.stale.discard(v)
        r = recomputes(phys.plan).get(v)
        return recompute_tuples(r, lambda u: self.rows(phys, u)) if r is not None else 0.0

    def _pool(self) -> Sessions:
        """The sessions to the machines this chooser reads, opened once."""
        with self.lock:
            if self._sessions is None:
                self._sessions = Sessions(self.topology, "smile-executor-sizes")
            return self._sessions

    def close(self) -> None:
        if self._sessions is not None:
            self._sessions.close()

