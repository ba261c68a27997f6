"""Drive tweet-rate traffic into the live base relations and report the achieved rate.

Every tick (0.1 s) the driver generates the tweets the target rate owes for that
tick, groups their changes
by machine and applies each machine's share in one transaction (psycopg 3 `executemany`, which
pipelines). It never runs ahead of the target; if it falls behind it catches up by at most one
second's worth per tick, and at the end it says whether it reached 95% of the target.

Must not: decide what a tweet does (that is `model.py`).
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from smile.dataset.relations import RELATIONS
from smile.db import connect
from smile.errors import WorkloadError
from smile.workload.model import Change, TweetModel

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable, Mapping

    from smile.topology import Topology

TICK_S = 0.1
ENOUGH = 0.95


def _statement(change_relation: str, op: str, arity: int) -> sql.Composed:
    table = sql.Identifier("public", change_relation)
    if op == "insert":
        marks = sql.SQL(", ").join(sql.Placeholder() * arity)
        return sql.SQL("INSERT INTO {} VALUES ({})").format(table, marks)
    if (change_relation, op) == ("users", "update"):
        return sql.SQL("UPDATE {} SET followers = followers + 1 WHERE uid = %s").format(table)
    if (change_relation, op) == ("tweets", "update"):
        return sql.SQL("UPDATE {} SET text = %s WHERE tid = %s").format(table)
    if (change_relation, op) == ("tweets", "delete"):
        return sql.SQL("DELETE FROM {} WHERE tid = %s").format(table)
    raise WorkloadError(f"no statement for {op} on {change_relation}")


def _params(change: Change) -> tuple[object, ...]:
    if (change.relation, change.op) == ("tweets", "update"):
        return (change.values[1], change.values[0])
    return change.values


@dataclass(frozen=True)
class WorkloadReport:
    target_rate: float
    duration_s: float
    tweets: int
    elapsed_s: float
    changes: Mapping[str, int] = field(default_factory=dict)

    @property
    def achieved_rate(self) -> float:
        return self.tweets / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def reached(self) -> bool:
        return self.achieved_rate >= ENOUGH * self.target_rate

    def to_json(self) -> dict[str, Any]:
        return {
            "target_rate": self.target_rate,
            "duration_s": self.duration_s,
            "tweets": self.tweets,
            "elapsed_s": round(self.elapsed_s, 3),
            "achieved_rate": round(self.achieved_rate, 1),
            "reached": self.reached,
            "changes": dict(self.changes),
        }


def locate_relations(topology: Topology) -> dict[str, str]:
    """relation -> machine, found by looking for `public.<relation>` on every machine."""
    found: dict[str, list[str]] = defaultdict(list)
    for machine in topology.machines:
        with connect(machine.dsn, autocommit=True, what=machine.name) as conn:
            for rel in RELATIONS:
                row = conn.execute("SELECT to_regclass(%s)", (f"public.{rel}",)).fetchone()
                if row and row[0] is not None:
                    found[rel].append(machine.name)
    missing = [r for r in RELATIONS if r not in found]
    if missing:
        raise WorkloadError(
            f"relations {missing} exist on no machine: run `smile data load` first"
        )
    twice = {r: ms for r, ms in found.items() if len(ms) > 1}
    if twice:
        raise WorkloadError(f"relations on more than one machine: {twice}")
    return {r: ms[0] for r, ms in found.items()}


def _start_counters(topology: Topology, where: Mapping[str, str]) -> tuple[int, int]:
    def max_of(rel: str, col: str) -> int:
        with connect(topology.machine(where[rel]).dsn, autocommit=True) as conn:
            row = conn.execute(
                sql.SQL("SELECT coalesce(max({}), 0) FROM {}").format(
                    sql.Identifier(col), sql.Identifier("public", rel))
            ).fetchone()
            return int(row[0]) if row else 0

    return max_of("tweets", "tid") + 1, max_of("users", "uid")


class WorkloadDriver:
    def __init__(self, topology: Topology, *, seed: int = 11) -> None:
        self.topology = topology
        self.where = locate_relations(topology)
        next_tid, users = _start_counters(topology, self.where)
        self.model = TweetModel(next_tid=next_tid, users=users, seed=seed)
        self.conns: dict[str, psycopg.Connection[Any]] = {}

    def _apply(self, changes: list[Change]) -> None:
        by_machine: dict[str, dict[tuple[str, str, int], list[tuple[object, ...]]]] = defaultdict(
            lambda: defaultdict(list))
        for ch in changes:
            key = (ch.relation, ch.op, len(ch.values))
            by_machine[self.where[ch.relation]][key].append(_params(ch))
        for machine, groups in by_machine.items():
            conn = self.conns.get(machine)
            if conn is None:
                conn = connect(self.topology.machine(machine).dsn, what=machine)
                self.conns[machine] = conn
            try:
                with conn.transaction(), conn.cursor() as cur:
                    for (rel, op, arity), rows in groups.items():
                        cur.executemany(_statement(rel, op, arity), rows)
            except psycopg.Error as exc:
                raise WorkloadError(f"writing to {machine} failed: {exc}",
                                    sqlstate=exc.sqlstate) from exc

    def run(
        self,
        rate: float,
        duration_s: float,
        progress: Callable[[int, float], None] | None = None,
        stop: threading.Event | None = None,
    ) -> WorkloadReport:
        """Write `rate` tweets per second for `duration_s` (or until `stop` is set)."""
        if not (0 < rate < math.inf and 0 < duration_s < math.inf):
            raise WorkloadError("--rate and --duration must be positive")
        counts: Counter[str] = Counter()
        total = int(rate * duration_s)
        done = 0
        start = time.monotonic()
        try:
            # keep going until the target is written, giving up one tick past the duration
            while (done < total and time.monotonic() - start < duration_s + TICK_S
                   and not (stop is not None and stop.is_set())):
                elapsed = time.monotonic() - start
                # each tick writes the tweets of the interval it opens: [elapsed, elapsed + tick)
                owed = min(int(rate * (elapsed + TICK_S)), total) - done
                owed = min(owed, max(1, int(rate)))  # catch up by at most a second per tick
                if owed > 0:
                    changes = [c for _ in range(owed) for c in self.model.tweet()]
                    self._apply(changes)
                    counts.update(f"{c.relation}.{c.op}" for c in changes)
                    done += owed
                    if progress:
                        progress(done, time.monotonic() - start)
                next_tick = start + (int(elapsed / TICK_S) + 1) * TICK_S
                time.sleep(max(0.0, next_tick - time.monotonic()))
            # the traffic window is the whole duration, even when the last tick ended early
            if stop is not None:
                stop.wait(max(0.0, start + duration_s - time.monotonic()))
            else:
                time.sleep(max(0.0, start + duration_s - time.monotonic()))
        finally:
            for conn in self.conns.values():
                conn.close()
            self.conns.clear()
        elapsed = time.monotonic() - start
        if stop is None or not stop.is_set():  # the whole window counts, however it ended
            elapsed = max(duration_s, elapsed)
        return WorkloadReport(rate, duration_s, done, elapsed, dict(counts))
