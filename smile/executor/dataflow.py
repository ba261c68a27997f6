"""A push as a dataflow (paper §8.1, docs/design/semantics.md §6): advance some vertices of one
version of D, and everything they read, to a timestamp `t`, each vertex as soon as every
vertex it waits for is there (`optimizer.recompute.push_waits`: what it reads, but a join not
the relation it rolls forward) — not level by level behind a barrier — so a push takes at most
the critical path the optimizer promised.

Each vertex gets a PUSH command with an id of its own; its agent answers PUSH_DONE or
AGENT_ERROR. A vertex whose answer does not come within `push_timeout_s`, or is an error, is
sent again (a new id) after a short pause, up to `retries` times: pushes are idempotent, so a
duplicate finds the vertex there and does nothing. One whose agent's heartbeat says it holds it
(queued behind other pushes, or running) is late, not lost: it is waited for (`HOLD_LIMIT`).
A delta's skip its agent refuses (`AgentFailure.deferred`: a reader of its interval, a deploy's
lease, is below `t`) is not sent again: the delta stays where it is and its next push brings it
along (docs/design/recompute.md, *Skip*). A command still unanswered when the connection to the
broker has been re-established since it was sent (`epoch` moved) is sent again at once, without
counting as a retry: a broker that restarted has lost the non-persistent commands and answers
it held, and waiting out `push_timeout_s` for them would cost every sharing of the push its
SLA.

Must not: decide when or how far to push (the scheduler does), or learn from the answers
itself (it hands each PUSH_DONE to `on_done`).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from smile.messaging.protocol import AgentFailure, Push, PushDone
from smile.messaging.transport import agent_queue
from smile.optimizer.recompute import push_readers, push_waits

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence
    from datetime import datetime

    from smile.deploy.physical import PhysicalPlan
    from smile.executor.inbox import Inbox
    from smile.messaging.protocol import Message
    from smile.optimizer.plan import Vertex
    from smile.optimizer.recompute import Mode

log = logging.getLogger("smile.executor")
PERMANENT = ("22", "23", "42")
"""SQLSTATE classes a retry does not cure: data exceptions (a division by zero in a
predicate), integrity violations, undefined objects. Lost connections (08), deadlocks (40),
timeouts (57) and resources (53) may pass."""
_ids = itertools.count()
HOLD_LIMIT = 2
"""An unanswered push its agent's heartbeats say it holds is waited for up to `push_timeout_s`
plus this many times its statement timeout before it is sent again (its agent may be stuck).
Sent again sooner, under overload, the copy queues behind the first, waits for its lock and
fails: work added where there is too much."""


@dataclass(frozen=True)
class PushSpec:
    """What one dataflow advances, and for whom."""

    version: int
    phys: PhysicalPlan
    targets: frozenset[Vertex]
    t: datetime
    sharing: str = ""
    """The sharing the push is logged as by default ('' for none)."""
    deadline: datetime | None = None
    """When the earliest of its sharings goes over its SLA: agents run what they hold
    earliest deadline first."""
    owners: Mapping[Vertex, Sequence[str]] = field(default_factory=dict)
    """In a shared push, the members that need each vertex; the first is the one it is
    logged as."""
    modes: Mapping[Vertex, Mode] = field(default_factory=dict)
    """How each vertex is advanced (`optimizer.recompute`; absent: incremental). A
    recomputed vertex waits for the relations it reads, a skipped delta for its readers."""

    def mode(self, v: Vertex) -> Mode:
        return self.modes.get(v, "incremental")

    def owner(self, v: Vertex) -> str:
        got = self.owners.get(v)
        return got[0] if got else self.sharing


class Dataflow:
    def __init__(self, send: Callable[[str, Push], None], inbox: Inbox, stop: threading.Event,
                 *, push_timeout_s: float = 30.0, retries: int = 3,
                 on_done: Callable[[PushSpec, Vertex, PushDone, float], None] | None = None,
                 on_refused: Callable[[str, str], None] | None = None,
                 on_left: Callable[[Vertex, datetime], None] | None = None,
                 epoch: Callable[[], int] = lambda: 0,
                 holding: Callable[[str, str], bool] = lambda machine, pid: False) -> None:
        self.send = send
        """Sends a command to a queue (the transport's)."""
        self.epoch = epoch
        """How many times the connection to the broker has been re-established."""
        self.holding = holding
        """Whether a machine's agent says it holds a push (by id), queued or running."""
        self.inbox = inbox
        self.stop = stop
        self.push_timeout_s = push_timeout_s
        self.retries = retries
        self.on_done = on_done
        """Called with each PUSH_DONE and the round trip's overhead beyond the agent's work."""
        self.on_refused = on_refused
        """Called with (sharing, reason) when the database refused a vertex's push in a way a
        retry does not cure (`PERMANENT`)."""
        self.on_left = on_left
        """Called with each delta a refused skip leaves behind (`_Run._left`) and the `t` of
        the push it is left below."""
        self.replies = ""
        """The queue the agents answer on (set when the executor connects)."""
        self._inflight: dict[int, int] = defaultdict(int)
        self._lock = threading.Lock()

    def inflight(self, version: int) -> int:
        """How many dataflows of `version` are running."""
        with self._lock:
            return self._inflight.get(version, 0)

    def run(self, spec: PushSpec,
            reached: Callable[[Vertex], None] | None = None) -> bool:
        """Advance `spec.targets` and everything they read to `spec.t`, calling `reached(v)`
        as each vertex gets there. True when all got there, but the skips left for a later
        push (`_Run._left`)."""
        with self.running(spec.version):
            return _Run(self, spec, reached).go()

    @contextmanager
    def running(self, version: int) -> Iterator[None]:
        """Count a push of `version` in flight while it runs (`inflight`: a deploy drains
        them before it drops what they write), a dataflow or a step of a group's push."""
        with self._lock:
            self._inflight[version] += 1
        try:
            yield
        finally:
            with self._lock:
                self._inflight[version] -= 1


class _Run:
    """One dataflow's state: what each vertex waits for, what is sent, what is done."""

    def __init__(self, flow: Dataflow, spec: PushSpec,
                 reached: Callable[[Vertex], None] | None) -> None:
        self.flow, self.spec, self.reached = flow, spec, reached
        plan = spec.phys.plan
        self.todo = plan.advanced_by(set(spec.targets))
        self.waits = push_waits(plan, self.todo, spec.mode)
        self.readers = push_readers(self.waits)
        self.attempts: dict[Vertex, int] = defaultdict(int)
        # a statement or lock held longer than this fails the push instead of its vertex
        self.timeout = (max(flow.push_timeout_s, 2 * plan.sharing(spec.sharing).sla_s)
                        if spec.sharing and spec.sharing in plan.names() else 0.0)
        # an unanswered push its agent says it holds is waited for this long, not sent again:
        # the copy would queue behind it, wait for its lock and fail (`HOLD_LIMIT`)
        self.hold_limit = flow.push_timeout_s + HOLD_LIMIT * max(self.timeout,
                                                                 flow.push_timeout_s)
        self.sent: dict[str, tuple[Vertex, float]] = {}
        self.epochs: dict[str, int] = {}
        """The broker connection's epoch when each command in `sent` went out."""
        self.retry_at: dict[Vertex, float] = {}
        self.done: set[Vertex] = set()

    def go(self) -> bool:
        for v in sorted(v for v, w in self.waits.items() if not w):
            self._send(v)
        while len(self.done) < len(self.todo):
            if self.flow.stop.is_set():
                return False
            self._resend_due(time.monotonic())
            # asked before the answers are taken: an agent holds a push until it has sent
            # its answer, so one it held now is answered by the time it no longer holds it
            held = self._held(time.monotonic())
            taken = self.flow.inbox.wait_any(list(self.sent), 0.2, self.flow.stop)
            now, epoch = time.monotonic(), self.flow.epoch()
            for pid, (v, at) in list(self.sent.items()):
                answer = taken.get(pid)
                if answer is None and now - at < self.flow.push_timeout_s:
                    if self.epochs.get(pid, epoch) != epoch:  # the broker may have lost it
                        del self.sent[pid], self.epochs[pid]
                        self._send(v)
                    continue
                if answer is None and pid in held:
                    continue  # late, not lost: queued behind other pushes, or running
                del self.sent[pid]
                self.epochs.pop(pid, None)
                if answer is not None and isinstance(answer[0], PushDone):
                    self._done(v, at, answer[0], answer[1])
                elif answer is not None and isinstance(answer[0], AgentFailure) \
                        and answer[0].deferred and self.spec.mode(v) == "skip":
                    self._left(v, answer[0].reason)
                elif not self._retry(v, pid, answer[0] if answer else None, now):
                    return False
        return True

    def _held(self, now: float) -> set[str]:
        """The commands sent less than `hold_limit` ago whose agents hold them."""
        return {pid for pid, (v, at) in self.sent.items()
                if now - at < self.hold_limit and self.flow.holding(v.machine, pid)}

    def _send(self, v: Vertex) -> None:
        spec = self.spec
        pid = f"{spec.sharing or 'push'}/{next(_ids)}/{self.attempts[v]}"
        self.sent[pid] = (v, time.monotonic())
        self.epochs[pid] = self.flow.epoch()
        mode = spec.mode(v)
        self.flow.send(agent_queue(v.machine),
                       Push(pid, spec.version, v.label, spec.t, self.flow.replies,
                            spec.owner(v), self.timeout, spec.deadline,
                            mode="" if mode == "incremental" else mode))

    def _resend_due(self, now: float) -> None:
        for v, at in list(self.retry_at.items()):
            if at <= now:
                del self.retry_at[v]
                self._send(v)

    def _done(self, v: Vertex, sent_at: float, answer: PushDone, came_at: float) -> None:
        if self.flow.on_done is not None:
            self.flow.on_done(self.spec, v, answer, came_at - sent_at - answer.elapsed_s)
        self.done.add(v)
        if self.reached is not None:
            self.reached(v)
        self._release(v)

    def _release(self, v: Vertex) -> None:
        """`v` is done with: send the vertices that waited for it and nothing else."""
        for r in self.readers.get(v, ()):
            self.waits[r].discard(v)
            if not self.waits[r] and r not in self.done:
                self._send(r)

    def _left(self, v: Vertex, reason: str) -> None:
        """A skip its agent refused (`AgentFailure.deferred`): `v` stays where it is, as if
        its push had not come, and its next push brings it along. Its readers in this push
        have answered (at `t`, or left behind themselves); the skips that wait for it go on,
        and each is refused in turn while `v`, one of its readers, is behind."""
        log.info("push of %s to %s: skip left for a later push (%s)", v.label, self.spec.t,
                 reason)
        if self.flow.on_left is not None:
            self.flow.on_left(v, self.spec.t)
        self.done.add(v)
        self._release(v)

    def _retry(self, v: Vertex, pid: str, answer: Message | None, now: float) -> bool:
        """Send `v` again after a pause; False when it has had its retries."""
        self.attempts[v] += 1
        reason = answer.reason if isinstance(answer, AgentFailure) else "no answer"
        refused = self.spec.owner(v)
        if (isinstance(answer, AgentFailure) and answer.sqlstate and refused
                and answer.sqlstate[:2] in PERMANENT and self.flow.on_refused is not None):
            self.flow.on_refused(refused, f"{v.label}: {reason}")
        log.warning("push %s of %s to %s: %s (attempt %d)", pid, v.label, self.spec.t,
                    reason, self.attempts[v])
        if self.attempts[v] > self.flow.retries or (
                isinstance(answer, AgentFailure) and answer.stale):
            return False  # a stale vertex: refused again until the push is priced anew
        self.retry_at[v] = now + 0.2 * self.attempts[v]
        return True


def push_levels(phys: PhysicalPlan, sharing: str | None = None) -> list[list[Vertex]]:
    """Vertices with an incoming edge (of one sharing, or all) grouped by depth: each after
    every vertex it reads (for people and tests; pushes themselves are dataflows)."""
    mine = phys.plan.of_sharing(sharing) if sharing is not None else None
    depth: dict[Vertex, int] = {}
    for v in phys.order():
        if mine is not None and v not in mine:
            continue
        e = phys.incoming(v)
        assert e is not None
        depth[v] = 1 + max((depth.get(s, 0) for s in e.sources), default=0)
    out: dict[int, list[Vertex]] = defaultdict(list)
    for v, d in depth.items():
        out[d].append(v)
    return [sorted(out[d], key=lambda v: v.label) for d in sorted(out)]
