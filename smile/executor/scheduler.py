"""The executor (paper §8): runs the active version of the global plan D — knows every sharing's
staleness, pushes each one independently of the others through the agents, and deploys new
versions of D with idempotent, versioned commands.

- Timestamps: the agents' heartbeats (every second and after each push) carry every vertex's
  TS; the machines are read directly only once, at start, to reconcile.
- When and how far: `lazy.push_target` (l = 0.8) with the sharing's CP(x) in D under the
  current time model; `mode="eager"` pushes every second instead (the baseline of `smile
  bench lazy`).
- A push is a dataflow: each vertex the sharing reads is pushed as soon as every vertex it
  reads is at the target (not level by level behind a barrier), so a push takes the critical
  path the optimizer promised. Pushes are idempotent, so a vertex advances to the largest
  target and the rest find nothing to do.
- Shared pushes: when a sharing falls due, the sharings that share most of the vertices its
  push advances (`formulas.SHARE_OVERLAP`) and are already past `formulas.SHARE_FROM` of their SLA
  are pushed with it, in one dataflow to its target, so those vertices do their fixed work
  once for the group (`share_pushes`, on by default; off, each is pushed on its own).
  A timeout or an AGENT_ERROR resends the vertex's PUSH (bounded retries).
- Every PUSH_DONE goes to the push log, into the measured busy time of its machine (predicted
  load is checked against it), and into the time model, re-fitted online — a push beside a
  deploy or in the settle after it (`steady.during_deploy`) only until the steady ones are
  enough to go by.
- A new version: leases on the base deltas, t0, the agents fill the new vertices at t0, each
  re-routed vertex is pushed along its old route until it is past the birth of what it will
  read (NOTES §8), the version becomes active, its new sharings are pushed while due (their
  MVs are as old as t0: `bring_in`) before they are admitted, pushes of the old one drain, and
  the agents drop what the new one no longer has.
- Restart, or another process changing D: the active version is followed from the catalog;
  the vertex timestamps say where every sharing is. Nothing else is needed.

Must not: plan or admit sharings (`sharings.py`), or run operators (agents do).
"""

from __future__ import annotations

import itertools
import logging
import statistics
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from smile.agent.protocol import (
    AgentFailure,
    Command,
    Done,
    Heartbeat,
    Install,
    Message,
    Push,
    PushDone,
    Withdraw,
)
from smile.costmodel.formulas import SHARE_FROM
from smile.costmodel.time_model import TimeModel, fit_linear
from smile.db import connect, connect_all
from smile.deploy import plan_store
from smile.errors import AgentError
from smile.executor.auditor import Staleness
from smile.executor.lazy import LAZINESS, learn_delay, push_target
from smile.executor.observed import ObservedRates
from smile.executor.skew import SKEWS_OPTION, Reading, merge_skews
from smile.executor.steady import WINDOW_S, during_deploy, steady_load
from smile.executor.store import CatalogStore
from smile.messaging.transport import EXECUTOR, HEARTBEATS, Transport, agent_queue
from smile.operators import retention
from smile.optimizer.admission import PlannerOptions
from smile.optimizer.load import companions
from smile.optimizer.plan import charged_tuples, edge_kind, route

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from contextlib import AbstractContextManager

    import psycopg

    from smile.deploy.physical import PhysicalPlan
    from smile.optimizer.plan import Edge, Vertex
    from smile.topology import Topology

log = logging.getLogger("smile.executor")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
BUSY_WINDOW_S = WINDOW_S
SUSTAINED_S = 300.0
"""The window over which a machine's measured load is held against its admission bound: a
machine over it for this long is one whose promises are at risk (`GET /machines`)."""
_ids = itertools.count()


def seconds(ts: datetime) -> float:
    return (ts - EPOCH).total_seconds()


@dataclass
class Tracked:
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
    """The same, learnt only from the pushes outside deploys (`steady.during_deploy`): what
    admission charges the sharing's push period with (`delays`). A burst of submissions
    slows every push while it lasts; charged as if it lasted, it refused S15 in the main
    command (m2 at 0.406 against 0.396) at 100 tweets/s."""


MODEL_MEMORY_S = 300.0
"""The online re-fit of an edge's line uses the measurements of the last this many seconds
only: operator times measured under an earlier, heavier load (a round at a higher rate, a
burst of deploys) would otherwise keep predicting that load for the 300 points the fit holds,
which at a low push rate is many minutes."""
REFIT_EVERY = 20
"""Measurements of a kind between two re-fits of its line."""
SCALE_POINTS = 5
"""Measurements of one vertex's edge within `MODEL_MEMORY_S` before its own scale is used
(`TimeModel.scales`); re-computed at every `SCALE_POINTS`-th, and at every re-fit of its
kind's line (`Executor._learn`)."""
SCALE_RANGE = (0.25, 4.0)
"""The bounds of a vertex's scale: a few pushes caught behind a deploy's fill must not make an
edge look free or ruinous."""

FILL_S = 2.0
"""Seconds a deploy's fill is first expected to keep the agents busy."""
FILL_MARGIN = 2.0
"""Before a fill, the sharings due within this many times the expected fill are pushed."""
BRING_IN_ROUNDS = 3
"""After a deploy, the new sharings are pushed while due at most this many times before they
are admitted (`Executor.bring_in`): a catch-up from t0, then the push it left due."""

UNREACHABLE_S = 5.0
"""A machine whose agent has not sent a heartbeat for this long (they come every second) is
unreachable: the sharings that need it are not pushed and say so, the others go on."""
FAIL_AFTER = 3
"""Pushes in a row refused by the database (each after its own retries) before a sharing is
marked `failed`: its work will fail every time, and retrying it forever would only load its
machines."""
PERMANENT = ("22", "23", "42")
"""SQLSTATE classes a retry does not cure: data exceptions (a division by zero in a
predicate), integrity violations, undefined objects. Lost connections (08), deadlocks (40),
timeouts (57) and resources (53) may pass."""


BUSY_KEEP_S = max(SUSTAINED_S, BUSY_WINDOW_S)
"""How long a push's operator seconds are kept: the longest window any measure reads."""
ANSWER_KEEP_S = 600.0
"""How long an answer nobody has claimed is kept: one that came after its push timed out, or
twice (an agent that redelivered it), is never claimed."""


@dataclass
class MachineState:
    last_beat: float = 0.0
    load: float = 0.0
    busy: deque[tuple[float, float, str]] = field(
        default_factory=lambda: deque(maxlen=100_000))
    """(when, operator seconds, vertex label) of each PUSH_DONE of its vertices in the last
    `BUSY_KEEP_S`, oldest first."""

    def note(self, at: float, seconds: float, label: str) -> None:
        """A push of `label` done at `at` (monotonic) that took `seconds`; what is older than
        `BUSY_KEEP_S` goes. Kept only by `maxlen` before, every push of the last 100,000 was
        kept, none of them read once older than 5 minutes, and copied and summed at every
        admission: `serve` grew by 8 MB over an hour at 800 tweets/s (the long run)."""
        self.busy.append((at, seconds, label))
        while self.busy and self.busy[0][0] < at - BUSY_KEEP_S:
            self.busy.popleft()


@dataclass
class _Answers:
    cond: threading.Condition = field(default_factory=threading.Condition)
    got: dict[str, Message] = field(default_factory=dict)
    received: dict[str, float] = field(default_factory=dict)

    def put(self, m: PushDone | AgentFailure | Done, now: float) -> None:
        """Keep answer `m` for its waiter (the caller holds `cond`), and let go of those no
        one claimed within `ANSWER_KEEP_S` of their coming (a waiter claims its own within
        a tick of it)."""
        self.received.pop(m.id, None)  # one that came twice goes last: oldest first
        self.got[m.id], self.received[m.id] = m, now
        oldest = next(iter(self.received.values()))
        if oldest < now - ANSWER_KEEP_S:
            for gone in [i for i, at in self.received.items() if at < now - ANSWER_KEEP_S]:
                self.got.pop(gone, None)
                del self.received[gone]

    def take(self, mid: str) -> tuple[Message, float] | None:
        """The answer to `mid` and when it came, if it has (the caller holds `cond`)."""
        if mid not in self.got:
            return None
        return self.got.pop(mid), self.received.pop(mid)


Point = tuple[float, float, float, bool]
"""A measurement: (monotonic time, tuples, seconds, steady — not beside a deploy)."""


def _due(points: deque[Point], counts: dict[str, int], key: str, every: int,
         point: Point) -> list[tuple[float, float]] | None:
    """Keep `point` of `key`; at every `every`-th of them, the (tuples, seconds) to fit on,
    else None: those of the last `MODEL_MEMORY_S`, and of them only the steady ones after
    the last push beside a deploy once there are `every` of those — a push beside a deploy's
    fill takes longer for it, and counts until the pushes after the deploy are enough to go
    by; steady pushes from before a burst do not stand for the pushes in it.

    >>> pts, n = deque(), {"k": 0}
    >>> def due(t, s, steady):
    ...     return _due(pts, n, "k", 2, (t, 10.0, s, steady))
    >>> due(0.0, 9.0, False), due(1.0, 8.0, True)  # one steady of two: all count
    (None, [(10.0, 9.0), (10.0, 8.0)])
    >>> due(2.0, 1.0, True), due(3.0, 1.0, True)  # three steady since: only they count
    (None, [(10.0, 8.0), (10.0, 1.0), (10.0, 1.0)])
    >>> due(4.0, 7.0, False), due(5.0, 1.0, True)  # a burst again: all count
    (None, [(10.0, 9.0), (10.0, 8.0), (10.0, 1.0), (10.0, 1.0), (10.0, 7.0), (10.0, 1.0)])
    """
    points.append(point)
    counts[key] += 1
    if counts[key] % every:
        return None
    return _selected(points, every, point[0])


def _bounded(scale: float) -> float:
    """A vertex's scale within `SCALE_RANGE`, to a thousandth."""
    lo, hi = SCALE_RANGE
    return round(min(hi, max(lo, scale)), 3)


def _selected(points: deque[Point], every: int, now: float) -> list[tuple[float, float]]:
    """The (tuples, seconds) of `points` to fit on at `now` (`_due`): those of the last
    `MODEL_MEMORY_S`, only the steady ones after the last push beside a deploy once there
    are `every` of those."""
    recent = [p for p in points if p[0] >= now - MODEL_MEMORY_S]
    burst = max((p[0] for p in recent if not p[3]), default=float("-inf"))
    steady = [p for p in recent if p[3] and p[0] > burst]
    return [(n, s) for _, n, s, _ in (steady if len(steady) >= every else recent)]


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


def _route(phys: PhysicalPlan, v: Vertex) -> Edge | None:
    edge = phys.incoming(v)
    return None if edge is None else route(edge)


class Executor:
    def __init__(self, topology: Topology, model: TimeModel | None = None, *,
                 mode: Literal["lazy", "eager"] = "lazy", tick_s: float = 0.1,
                 push_timeout_s: float = 30.0, retries: int = 3,
                 laziness: float = LAZINESS, pusher: str = "main",
                 command_timeout_s: float = 900.0, share_pushes: bool | None = None) -> None:
        self.topology = topology
        self.model = model or TimeModel()
        self.calibrated = self.model
        """The model this executor started with (calibrated): a kind's line goes back to it
        when nothing of the kind is left to measure (`_unlearn`)."""
        self.mode = mode
        self.tick_s = tick_s
        self.push_timeout_s = push_timeout_s
        self.retries = retries
        self.laziness = laziness
        self.share_pushes = share_pushes
        """Push sharings that share vertices together (module docstring); None: as the
        planner options in the catalog say when started (`PUT /plan/options`)."""
        self.pusher = pusher
        """Which sharings this executor pushes: those submitted for it (`smile serve`'s is
        'main'; a benchmark's executor keeps to its own beside it)."""
        self.command_timeout_s = command_timeout_s
        self.tracked: dict[str, Tracked] = {}
        self.started_at = time.time()
        self.refusals: dict[str, str] = {}
        """The last permanent refusal of each sharing's push under way."""
        self.machines: dict[str, MachineState] = {m.name: MachineState()
                                                  for m in topology.machines}
        self.last_steady: dict[str, float] = {}
        """The operator load last measured outside deploys (`steady_load`)."""
        self.ts: dict[tuple[str, str], datetime] = {}
        self.read_at: dict[str, datetime] = {}
        """When each machine's timestamps in `ts` were read (its clock)."""
        self.learnt_at: dict[str, float] = {}
        """When they reached this executor (its monotonic clock)."""
        self.pushed: dict[tuple[str, str], tuple[datetime, datetime]] = {}
        """Vertices a PUSH_DONE took further than the last heartbeat said: (their TS, when
        the answer came, on this host's clock), until a heartbeat read after it
        (`_learn_timestamps`)."""
        self.lock = threading.RLock()
        self.answers = _Answers()
        self.points: dict[str, deque[Point]] = defaultdict(
            lambda: deque(maxlen=300))
        """Per kind of edge: its last measurements (`Point`)."""
        self.measured: dict[str, int] = defaultdict(int)
        self.vertex_points: dict[str, deque[Point]] = defaultdict(
            lambda: deque(maxlen=60))
        """Per vertex label: its edge's last pushes (`Point`)."""
        self.vertex_measured: dict[str, int] = defaultdict(int)
        self.vertex_kind: dict[str, str] = {}
        """Per vertex label: the kind of its edge (whose line its scale is relative to)."""
        self.deploys: list[list[float]] = []
        """(start, end) of this executor's deploys of the last `MODEL_MEMORY_S` (monotonic;
        end = inf while one runs): a push that overlapped one, or its settle, is learnt as
        not steady (`_due`)."""
        self.refits = 0
        self.fill_s = FILL_S
        """How long deploys' fills have kept the agents busy (a moving average)."""
        self.observed = ObservedRates()
        """Tuples/s each running computation takes in, from the PUSH_DONEs."""
        self.skews: dict[str, Reading] = {}
        """Join skews measured at submissions, pooled (`skew.py`): every later estimate of those
        joins — re-rating D at each admission and withdrawal, the predicted loads — sees
        them. Written by `SharingService.submit` under its lock, kept in the catalog
        (`SKEWS_OPTION`) and taken up again by `start`, so a restarted API does not admit on
        uniform rates beside sharings that run on skewed ones."""
        self.dispatch: deque[float] = deque(maxlen=200)
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.transport: Transport | None = None
        self.replies = EXECUTOR
        self.store: CatalogStore | None = None
        self.version: int | None = None
        self.plan: PhysicalPlan | None = None
        self.inflight: dict[int, int] = defaultdict(int)
        self.taken_along = 0
        """Pushes of sharings taken along with a due one (shared pushes) since start."""
        self._advances: dict[str, frozenset[Vertex]] = {}
        """The vertices a push of each sharing of the active version advances."""
        self._riders: dict[str, tuple[str, ...]] = {}
        """Per sharing of the active version, the sharings a push of which can take it
        along (`load.companions`: the rule the load model charges)."""
        self._cps: dict[str, tuple[float, float]] = {}
        self._cps_key: tuple[int | None, int] = (None, -1)
        self._model_gen = 0

    # -- life ------------------------------------------------------------------------------
    def start(self) -> None:
        """Connect, take up the active version of D, and run."""
        self.store = CatalogStore(self.topology.catalog_dsn)
        self.skews = merge_skews(self.skews, {key: Reading.from_json(doc) for key, doc in (
            self.store.option(SKEWS_OPTION) or {}).items()})
        if self.share_pushes is None:
            self.share_pushes = PlannerOptions.from_json(
                self.store.option("planner") or {}).share_pushes
        client = f"executor-{time.time_ns()}"
        self.replies = f"{EXECUTOR}.{client}"
        self.transport = Transport(self.topology.broker_url, client)
        self.transport.subscribe(self.replies, self._on_message)
        self.transport.subscribe(HEARTBEATS, self._on_message)
        self.follow()
        self.reconcile()
        for target in (self._schedule, self._follow_loop):
            t = threading.Thread(target=target, daemon=True, name=target.__name__)
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

    # -- the active version ------------------------------------------------------------------
    def follow(self) -> None:
        """Take up the catalog's active version of D if it is not the one running."""
        version = plan_store.active_version(self.topology.catalog_dsn)
        if version is not None and version != self.version:
            self.use(version, plan_store.load_version(self.topology.catalog_dsn, version))

    def _follow_loop(self) -> None:
        while not self.stop.wait(0.5):
            try:
                self.follow()
            except Exception as exc:
                log.warning("cannot follow the active plan: %s", exc)

    def use(self, version: int, phys: PhysicalPlan) -> None:
        """Run `phys` as the active version: push the sharings of this executor in it."""
        owned = self._owned()
        with self.lock:
            self.version, self.plan = version, phys
            self._advances = dict(phys.plan.advances)
            self._riders = companions(phys.plan)
            self.observed.forget({v.computation for v in phys.plan.vertices})
            self._forget({v.label for v in phys.plan.vertices})
            keep = {}
            for entry in phys.plan.sharings:
                if entry.name in owned:
                    tr = self.tracked.get(entry.name) or Tracked(entry.name, entry.sla_s)
                    keep[entry.name] = (replace(tr, sla_s=entry.sla_s,
                                                penalty=entry.penalty_per_tuple)
                                        if not tr.pushing else tr)
            self.tracked = keep

    def _forget(self, labels: set[str]) -> None:
        """What was learnt of vertices no longer among `labels` (withdrawn): their scales
        and the measurements behind them; a vertex of the same label admitted later starts
        from its kind's line, and a long-running executor does not keep every vertex it ever
        ran."""
        with self.lock:
            scales = {v: f for v, f in self.model.scales.items() if v in labels}
            if scales != self.model.scales:
                self.model = replace(self.model, scales=scales)
                self._model_gen += 1
            for gone in set(self.vertex_points) - labels:
                del self.vertex_points[gone]
            for gone in set(self.vertex_measured) - labels:
                del self.vertex_measured[gone]
            for gone in set(self.vertex_kind) - labels:
                del self.vertex_kind[gone]
            self._unlearn(set(self.points) - set(self.vertex_kind.values()))

    def _unlearn(self, kinds: set[str]) -> None:
        """Back to the calibrated line for `kinds`, their measurements and their vertices'
        scales dropped: kinds no running vertex has pushed (the sharings that ran them
        withdrawn), or none has within `MODEL_MEMORY_S` (`expire`). A line re-fitted under a
        load that has gone (readers saturating the box, a heavier round) would otherwise stay
        as it was with nothing to re-fit it, and refuse every later sharing on its times —
        as it did after Fig. 14's readers: 0.64 s + 0.9 ms per tuple for a CopyDelta, 260×
        its calibrated line, and longrun's ten sharings all refused 90 s later."""
        with self.lock:
            changed = False
            for kind in sorted(kinds):
                self.points.pop(kind, None)
                self.measured.pop(kind, None)
                base = self.calibrated.line(kind)  # type: ignore[arg-type]
                if self.model.line(kind) != base:  # type: ignore[arg-type]
                    self.model = self.model.with_line(kind, base)  # type: ignore[arg-type]
                    changed = True
            if kinds and not self.points and self.dispatch:  # nothing measured is left:
                self.dispatch.clear()  # the dispatch overhead goes back too
                if self.model.dispatch_s != self.calibrated.dispatch_s:
                    self.model = replace(self.model, dispatch_s=self.calibrated.dispatch_s)
                    changed = True
            scaled = {v: f for v, f in self.model.scales.items()
                      if self.vertex_kind.get(v) not in kinds}
            if scaled != self.model.scales:
                self.model = replace(self.model, scales=scaled)
                changed = True
            if changed:
                self._model_gen += 1
                log.info("time model: the calibrated line again for %s (nothing of the kind "
                         "measured to re-fit it)", ", ".join(sorted(kinds)))

    def expire(self, now: float | None = None) -> None:
        """`_unlearn` the kinds whose newest measurement is older than `MODEL_MEMORY_S`: a
        re-fit would find none of their points (`_selected`), so the line learnt from them
        no longer stands for anything running. Called by the scheduler's tick."""
        at = time.monotonic() if now is None else now
        with self.lock:
            stale = {k for k, pts in self.points.items()
                     if not pts or pts[-1][0] < at - MODEL_MEMORY_S}
            if stale:
                self._unlearn(stale)

    def _owned(self) -> set[str]:
        assert self.store is not None
        return {r.name for r in self.store.sharings() if r.pusher == self.pusher
                and r.status in ("admitted", "installing")}

    # -- what the machines say -------------------------------------------------------------
    def _on_message(self, m: Message) -> None:
        if isinstance(m, Heartbeat):
            with self.lock:
                state = self.machines.setdefault(m.machine, MachineState())
                state.last_beat, state.load = time.time(), m.load
            self._learn_timestamps(m.machine, m.vertex_ts, m.sent_at)
            return
        if isinstance(m, (PushDone, AgentFailure, Done)):
            with self.answers.cond:
                self.answers.put(m, time.monotonic())
                self.answers.cond.notify_all()

    def reconcile(self) -> None:
        """Every machine's vertex timestamps read straight from it: once at start (after a
        restart nothing is known until the first heartbeats) — heartbeats keep them after."""
        for m in self.topology.machines:
            at = datetime.now(UTC)
            try:
                with connect(m.dsn, autocommit=True, what=m.name,
                             application_name="smile-executor") as conn:
                    if conn.execute("SELECT to_regclass('_smile.vertex_ts')").fetchone() == (
                            None,):
                        continue
                    rows = conn.execute("SELECT vertex, ts FROM _smile.vertex_ts").fetchall()
            except Exception as exc:  # a machine down: its heartbeats will tell
                log.warning("cannot read the timestamps of %s: %s", m.name, exc)
                continue
            self._learn_timestamps(m.name, dict(rows), at)

    def _learn_timestamps(self, machine: str, stamps: dict[str, datetime],
                          read_at: datetime) -> None:
        """A machine's timestamps as read at `read_at`, unless newer ones are known (its
        heartbeats and the reconciling read may cross). They replace what was known: a vertex
        dropped and made again starts over at its new t0."""
        with self.lock:
            if read_at < self.read_at.get(machine, read_at):
                return
            self.read_at[machine] = read_at
            self.learnt_at[machine] = time.monotonic()
            for key in [k for k in self.ts if k[0] == machine and k[1] not in stamps]:
                del self.ts[key]
                self.pushed.pop(key, None)
            for vertex, ts in stamps.items():
                key = (machine, vertex)
                pushed = self.pushed.get(key)
                if pushed is not None and pushed[1] > read_at and pushed[0] > ts:
                    continue  # read before the push's answer came: its TS is older news
                self.pushed.pop(key, None)
                self.ts[key] = ts

    def _learn_pushed(self, key: tuple[str, str], ts: datetime) -> None:
        """A PUSH_DONE's TS of the vertex at `key`, at once (under `lock`). The agent's
        heartbeat after the push comes a moment later: until then a sharing whose MV was
        just pushed looked as stale as before it, and the next tick pushed it again — one
        push in ten of the 10-s sharings of the main command, a second or less after the
        one before (measured on its push log)."""
        known = self.ts.get(key)
        if known is not None and ts > known:
            self.ts[key] = ts
            self.pushed[key] = (ts, datetime.now(UTC))

    def timestamps(self, sharing: str) -> Staleness | None:
        """TS(MV), MINTS(SRC) and MAXTS(SRC) of a sharing as last read, or None if unknown."""
        with self.lock:
            phys = self.plan
            if phys is None or sharing not in phys.plan.names():
                return None
            entry = phys.plan.sharing(sharing)
            mv = self.ts.get((entry.mv.machine, phys.vertices[entry.mv].ts_key))
            srcs = [self.ts.get((s.machine, phys.vertices[s].ts_key)) for s in entry.sources]
        if mv is None or any(s is None for s in srcs):
            return None
        known = [s for s in srcs if s is not None]
        return Staleness(mv, min(known), max(known))

    def measured_load(self, window_s: float = BUSY_WINDOW_S) -> dict[str, float]:
        """Each machine's operator seconds per second over the last `window_s` (PUSH_DONEs)."""
        return {m: sum(edges.values()) for m, edges in self.measured_edges(window_s).items()}

    def steady_load(self, deploys: Sequence[tuple[float, float]],
                    window_s: float = BUSY_WINDOW_S) -> dict[str, float]:
        """Each machine's operator seconds per second outside `deploys` (`steady.py`); the
        last such value while deploys fill the window; empty before there is one."""
        with self.lock:
            busy = {m: list(st.busy) for m, st in self.machines.items()}
        load = steady_load(busy, deploys, time.monotonic(), window_s)
        if load is not None:
            self.last_steady = load
        return dict(self.last_steady)

    def measured_edges(self, window_s: float = BUSY_WINDOW_S) -> dict[str, dict[str, float]]:
        """Per machine, each vertex's operator seconds per second over the last `window_s`
        (its incoming edge's work; PUSH_DONEs)."""
        since = time.monotonic() - window_s
        out: dict[str, dict[str, float]] = {}
        with self.lock:
            for m, st in self.machines.items():
                mine = out.setdefault(m, {})
                for at, s, label in st.busy:
                    if at >= since:
                        mine[label] = mine.get(label, 0.0) + s / window_s
        return out

    # -- deciding ----------------------------------------------------------------------------
    def unreachable(self, sharing: str) -> dict[str, datetime]:
        """The machines `sharing` needs whose agents have gone quiet, with their last
        heartbeat (wall clock); empty while the executor is young enough to not know. Cheap
        while every agent beats (the scheduler asks for every sharing at every tick): the
        sharing's vertices are looked at only when some machine is quiet."""
        now = time.time()
        with self.lock:
            phys = self.plan
            quiet = {m: max(st.last_beat, self.started_at) for m, st in self.machines.items()
                     if now - max(st.last_beat, self.started_at) > UNREACHABLE_S}
            if not quiet or phys is None or sharing not in phys.plan.names():
                return {}
            machines = {v.machine for v in phys.plan.of_sharing(sharing)}
        return {m: datetime.fromtimestamp(quiet[m], UTC) for m in sorted(machines & quiet.keys())}

    def _schedule(self) -> None:
        while not self.stop.wait(self.tick_s):
            try:
                self.expire()
                self._start_due()
            except Exception as exc:  # one bad tick must not stop the pushing
                log.error("scheduling pushes failed: %s", exc)

    def _start_due(self, ahead_s: float = 0.0,
                   only: set[str] | None = None) -> list[threading.Thread]:
        """Start a push of every sharing due now (or within `ahead_s`; of `only` those, if
        given); their threads."""
        with self.lock:  # after an outage, the dearest late tuples catch up first
            candidates = sorted((tr for tr in self.tracked.values() if not tr.pushing
                                 and (only is None or tr.name in only)),
                                key=lambda tr: -tr.penalty)
        started = []
        for tr in candidates:
            if self.unreachable(tr.name):
                continue  # degraded: waits for its machines, the others go on
            target = self.target(tr, ahead_s)
            if target is None:
                continue
            with self.lock:
                if tr.pushing or self.tracked.get(tr.name) is not tr:
                    continue
                tr.pushing = True
            group: list[Tracked] = []
            try:
                group = self._companions(tr, target)
                thread = threading.Thread(target=self._push, args=(tr, target, tuple(group)),
                                          daemon=True, name=f"push-{tr.name}")
                thread.start()
            except Exception:
                with self.lock:  # not pushed: free to be pushed at the next tick
                    for member in (tr, *group):
                        member.pushing = False
                raise
            started.append(thread)
        return started

    def _companions(self, due: Tracked, t: datetime) -> list[Tracked]:
        """The sharings pushed along with `due` to `t` (shared pushes, module docstring),
        marked pushing: each shares at least `formulas.SHARE_OVERLAP` of the vertices its
        push advances with `due`'s (`load.companions`), is past `SHARE_FROM` of its SLA,
        and may go to `t` within it (`t` is at most the target it could take now)."""
        if not self.share_pushes or self.mode != "lazy" or due.refused:
            return []
        with self.lock:  # one whose pushes the database refuses goes alone (`_give_up`)
            others = [o for o in self.tracked.values() if o is not due and not o.pushing
                      and not o.refused and due.name in self._riders.get(o.name, ())]
        group: list[Tracked] = []
        try:
            for o in others:
                marks = self.timestamps(o.name)
                if marks is None or marks.mv_ts >= t or self.unreachable(o.name):
                    continue
                could = self.target(o, laziness=SHARE_FROM)
                if could is None or could < t:
                    continue
                with self.lock:
                    if o.pushing or self.tracked.get(o.name) is not o:
                        continue
                    o.pushing = True
                    self.taken_along += 1
                group.append(o)
        except Exception:
            with self.lock:
                for o in group:
                    o.pushing = False
            raise
        return group

    def freshen(self, ahead_s: float) -> int:
        """Push now, and wait for, every sharing that would fall due within `ahead_s`: a
        deploy's fill is about to take the machines' CPU and locks for that long, and a push
        slowed by it would miss its SLA. How many were pushed."""
        threads = self._start_due(ahead_s)
        deadline = time.monotonic() + self.command_timeout_s
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return len(threads)

    def delays(self) -> dict[str, float]:
        """Each sharing this executor pushes: how much longer than its critical path its
        pushes outside deploys have taken (`Tracked.steady_delay_s`), the wait its push
        period is shortened by once the submissions have settled."""
        with self.lock:
            return {name: tr.steady_delay_s for name, tr in self.tracked.items()
                    if tr.steady_delay_s > 0}

    def bring_in(self, names: set[str], rounds: int = BRING_IN_ROUNDS) -> int:
        """Push the sharings a deploy just made active (`names`, those this executor pushes)
        while they are due, up to `rounds` times, and wait: their MVs were filled at the
        deploy's t0 and are as stale as the deploy was long — 26 s for a 4-way join at 3000
        tweets/s — so a sharing is admitted (and audited) once its MV is back within its
        SLA, not before. How many pushes it took."""
        pushed, done = 0, 0
        deadline = time.monotonic() + min(self.command_timeout_s, rounds * self.push_timeout_s)
        while done < rounds and time.monotonic() < deadline:
            with self.lock:
                mine = [tr for n in names if (tr := self.tracked.get(n)) is not None]
                busy = any(tr.pushing for tr in mine)
            unknown = [tr.name for tr in mine if self.timestamps(tr.name) is None]
            threads = self._start_due(only={tr.name for tr in mine})
            if not threads and not busy and not unknown:
                break  # none is due: each is within its SLA with room for its next push
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))
            if threads:
                pushed, done = pushed + len(threads), done + 1
            else:  # the scheduler's push of it is under way, or its TS not heard yet
                time.sleep(0.1)
        return pushed

    def cp_line(self, sharing: str) -> tuple[float, float]:
        """(CP(0), slope) of a sharing's critical path in D under the current model."""
        with self.lock:
            key = (self.version, self._model_gen)
            if key != self._cps_key and self.plan is not None:
                fixed = self.plan.plan.arrivals(self.model, 0.0)
                one = self.plan.plan.arrivals(self.model, 1.0)
                self._cps = {s.name: (fixed.get(s.mv, 0.0),
                                      max(0.0, one.get(s.mv, 0.0) - fixed.get(s.mv, 0.0)))
                             for s in self.plan.plan.sharings}
                self._cps_key = key
            return self._cps.get(sharing, (0.0, 0.0))

    def cp(self, sharing: str) -> Callable[[float], float]:
        """Seconds to push x seconds of updates through a sharing's critical path in D."""
        cp0, slope = self.cp_line(sharing)
        return lambda x: cp0 + slope * max(x, 0.0)

    def target(self, tr: Tracked, ahead_s: float = 0.0,
               laziness: float | None = None) -> datetime | None:
        """Where to push `tr` now, or None to wait; with `ahead_s`, as if that many seconds
        had passed (the push would be due by then); `laziness` instead of the executor's."""
        marks = self.timestamps(tr.name)
        if marks is None:
            return None
        mv, lo, hi = marks.mv_ts, marks.min_src, marks.max_src
        with self.lock:  # the sources went on since their last heartbeat: staleness grows
            if self.plan is None or tr.name not in self.plan.plan.names():
                return None  # withdrawn meanwhile
            entry = self.plan.plan.sharing(tr.name)
            machines = {s.machine for s in (entry.sources if entry is not None else ())}
            ages = {m: time.monotonic() - self.learnt_at.get(m, time.monotonic())
                    for m in machines}
            # the sources' own clock when their agents read the watermarks, aged: what the
            # auditor holds TS(MV) against, so capture lag counts here too
            clocks = [self.read_at[m] + timedelta(seconds=ages[m]) for m in machines
                      if m in self.read_at]
        hi += timedelta(seconds=max(ages.values(), default=0.0) + ahead_s)
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

    # -- pushing -----------------------------------------------------------------------------
    def _push(self, tr: Tracked, t: datetime, group: tuple[Tracked, ...] = ()) -> None:
        """Push `tr` to `t`, and with it the sharings of `group` (shared pushes). Each is
        done — free to be pushed again, its delay learnt — as soon as its own MV is at `t`:
        a 10-s sharing taken along with a 60-s one whose join is slow does not wait for it."""
        started = time.monotonic()
        members = (tr, *group)
        waiting: dict[Vertex, list[Tracked]] = defaultdict(list)
        predicted: dict[str, float] = {}
        settled: set[str] = set()
        failed: list[tuple[Tracked, str]] = []

        def settle(member: Tracked, ok: bool) -> None:
            settled.add(member.name)
            gave_up = self._settle(member, started, ok, predicted.get(member.name))
            if gave_up is not None:
                failed.append(gave_up)

        def reached(v: Vertex) -> None:
            for member in waiting.pop(v, []):
                settle(member, True)

        try:
            with self.lock:
                version, phys, advances = self.version, self.plan, self._advances
            if version is None or phys is None or tr.name not in phys.plan.names():
                return
            dues: list[datetime] = []
            owners: dict[Vertex, list[str]] = defaultdict(list)
            for member in members:
                if member.name not in phys.plan.names():
                    continue
                mv = phys.plan.sharing(member.name).mv
                waiting[mv].append(member)
                marks = self.timestamps(member.name)
                if marks is not None:
                    dues.append(marks.mv_ts + timedelta(seconds=member.sla_s))
                    predicted[member.name] = self.cp(member.name)(
                        (t - marks.mv_ts).total_seconds())
                for v in advances.get(member.name, frozenset()):
                    owners[v].append(member.name)  # logged as the due one's if it has v
            self.push_vertices(version, phys, set(waiting), t, tr.name,
                               min(dues, default=None), owners, reached)
        except Exception as exc:
            if not self.stop.is_set():  # a push cut short by close() is not an error
                log.error("push of %s to %s failed: %s", tr.name, t, exc)
        finally:
            for member in members:  # those whose MV did not get there
                if member.name not in settled:
                    settle(member, False)
            for member, refusal in failed:
                self._give_up(member, refusal)

    def _settle(self, member: Tracked, started: float, ok: bool,
                predicted: float | None) -> tuple[Tracked, str] | None:
        """A sharing's push is over (`ok`: its MV got there): free it, count it, learn its
        delay; (it, the database's reason) when its pushes were refused too often."""
        with self.lock:
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
                if not during_deploy(started + took, took, [(a, b) for a, b in self.deploys]):
                    member.steady_delay_s = min(member.sla_s / 2, learn_delay(
                        member.steady_delay_s, took, predicted))
            if refusal is not None and member.refused >= FAIL_AFTER:
                return member, refusal
        return None

    def _give_up(self, tr: Tracked, reason: str) -> None:
        """Mark a sharing whose pushes the database refuses every time `failed`, with the
        database's reason, and stop pushing it; the other sharings go on. Its consumer sees
        why in `GET /sharings/{id}`, withdraws it and may submit it again."""
        log.error("sharing %s failed: %s", tr.name, reason)
        if self.store is not None:
            try:  # recorded first: a sharing is never dropped without its reason
                for row in self.store.sharings("admitted"):
                    if row.name == tr.name:
                        self.store.set_status(row.id, "failed", f"its push failed "
                                              f"{tr.refused} times in a row: {reason}")
            except Exception as exc:  # the catalog is away: tried again after the next push
                log.warning("cannot mark %s failed: %s", tr.name, exc)
                return
        with self.lock:
            self.tracked.pop(tr.name, None)

    def push_vertices(self, version: int, phys: PhysicalPlan, targets: set[Vertex],
                      t: datetime, sharing: str = "", deadline: datetime | None = None,
                      owners: Mapping[Vertex, Sequence[str]] | None = None,
                      reached: Callable[[Vertex], None] | None = None) -> bool:
        """Advance `targets` and everything they read in version `version` to `t`, each vertex
        as soon as all it reads is there (agents take the pushes they hold by `deadline`),
        for `sharing`, calling `reached(v)` as each vertex gets there. True when all got
        there. In a shared push `owners` gives the members that need each vertex, the one
        it is logged as first (by default `sharing` alone)."""
        plan = phys.plan
        owners = owners or {}

        def owner(v: Vertex) -> str:
            got = owners.get(v)
            return got[0] if got else sharing

        todo = plan.advanced_by(targets)
        waits = {v: {s for s in plan.incoming[v].sources if s in todo} for v in todo}
        readers: dict[Vertex, list[Vertex]] = defaultdict(list)
        for v, srcs in waits.items():
            for s in srcs:
                readers[s].append(v)
        attempts: dict[Vertex, int] = defaultdict(int)
        # a statement or lock held longer than this fails the push instead of its vertex
        timeout = (max(self.push_timeout_s, 2 * plan.sharing(sharing).sla_s)
                   if sharing and sharing in plan.names() else 0.0)
        sent: dict[str, tuple[Vertex, float]] = {}
        retry_at: dict[Vertex, float] = {}
        with self.lock:
            self.inflight[version] += 1
        try:
            def send(v: Vertex) -> None:
                pid = f"{sharing or 'push'}/{next(_ids)}/{attempts[v]}"
                sent[pid] = (v, time.monotonic())
                assert self.transport is not None
                self.transport.send(agent_queue(v.machine),
                                    Push(pid, version, v.label, t, self.replies,
                                         owner(v), timeout, deadline))

            for v in sorted(v for v, w in waits.items() if not w):
                send(v)
            done: set[Vertex] = set()
            while len(done) < len(todo):
                if self.stop.is_set():
                    return False
                now = time.monotonic()
                for v, at in list(retry_at.items()):
                    if at <= now:
                        del retry_at[v]
                        send(v)
                with self.answers.cond:
                    self.answers.cond.wait_for(
                        lambda: any(p in self.answers.got for p in sent) or self.stop.is_set(),
                        0.2)
                    taken = {p: a for p in list(sent) if (a := self.answers.take(p))}
                answers = {p: a for p, (a, _) in taken.items()}
                when = {p: at for p, (_, at) in taken.items()}
                now = time.monotonic()
                for pid, (v, at) in list(sent.items()):
                    answer = answers.get(pid)
                    if answer is None and now - at < self.push_timeout_s:
                        continue
                    del sent[pid]
                    if isinstance(answer, PushDone):
                        self._record(owner(v), phys, v, t, answer, owners.get(v, ()))
                        self._learn_dispatch(when[pid] - at - answer.elapsed_s)
                        done.add(v)
                        if reached is not None:
                            reached(v)
                        for r in readers[v]:
                            waits[r].discard(v)
                            if not waits[r] and r not in done:
                                send(r)
                        continue
                    attempts[v] += 1
                    reason = answer.reason if isinstance(answer, AgentFailure) else "no answer"
                    refused = owner(v)
                    if (isinstance(answer, AgentFailure) and answer.sqlstate and refused
                            and answer.sqlstate[:2] in PERMANENT):
                        with self.lock:
                            self.refusals[refused] = f"{v.label}: {reason}"
                    log.warning("push %s of %s to %s: %s (attempt %d)", pid, v.label, t,
                                reason, attempts[v])
                    if attempts[v] > self.retries:
                        return False
                    retry_at[v] = now + 0.2 * attempts[v]
            return True
        finally:
            with self.lock:
                self.inflight[version] -= 1

    def _record(self, sharing: str, phys: PhysicalPlan, v: Vertex, t: datetime,
                done: PushDone, shared_by: Sequence[str] = ()) -> None:
        edge = phys.incoming(v)
        assert edge is not None
        kind = edge_kind(edge)
        with self.lock:
            self.machines.setdefault(v.machine, MachineState()).note(
                time.monotonic(), done.elapsed_s, v.label)
            self._learn_pushed((v.machine, phys.vertices[v].ts_key), done.ts)
        if self.store is not None and sharing:
            try:
                self.store.log_push(sharing, v.label, kind, t, done.elapsed_s, done.rows_out,
                                    v.machine, done.rows_in, done.bytes_moved, done.cpu_s,
                                    shared_by)
            except Exception as exc:
                log.warning("cannot log a push: %s", exc)
        # an edge's tuples are what it writes, but a DeltaToRel's are the delta rows it reads
        tuples = done.rows_in if kind == "delta_to_rel" else done.rows_out
        if done.advanced_from is not None and done.advanced_to is not None:
            self.observed.add(v.computation, done.advanced_from, done.advanced_to, tuples)
        charged = charged_tuples(kind, done.rows_out, done.rows_in)  # a join's reads too
        now = time.monotonic()
        with self.lock:
            deploys = [(a, b) for a, b in self.deploys]
        # one beside a deploy's fill and the first catch-ups measures the fill's contention
        # too: what admissions in a burst must go by, but not once the burst has settled
        steady = not during_deploy(now, done.elapsed_s, deploys)
        if charged > 0:  # the vertex's own first, so that a re-fit its push brings about
            # re-scales it with this push too
            self._learn_vertex(v.label, kind, charged, done.elapsed_s, now, steady)
            self._learn(kind, charged, done.elapsed_s, now, steady)
        elif done.advanced_from is not None and done.advanced_to is not None \
                and done.advanced_to > done.advanced_from:
            # advanced over a span without a change: its fixed work, which the load model
            # charges each push, the vertex's scale is an average over (a vertex of a
            # relation that seldom changes was charged its pushes with rows: users@m1 15 ms
            # a push where its pushes took 8.9); not its kind's line, fitted to sizes. One
            # that found the vertex there already (another push took it) did nothing.
            self._learn_vertex(v.label, kind, 0.0, done.elapsed_s, now, steady)

    def _learn_dispatch(self, overhead: float) -> None:
        """Online re-fit of the per-edge dispatch overhead: the median of the last 200."""
        with self.lock:
            self.dispatch.append(max(0.0, overhead))
            if len(self.dispatch) % 20 == 0:
                self.model = replace(self.model,
                                     dispatch_s=statistics.median(self.dispatch))
                self._model_gen += 1

    def _learn(self, kind: str, tuples: float, elapsed: float,
               now: float | None = None, steady: bool = True) -> None:
        """Online re-fit: every `REFIT_EVERY` measurements of a kind, its line is fitted to
        those of the last `MODEL_MEMORY_S` (at most 300; the steady ones once there are
        enough, `_due`), as long as there are `REFIT_EVERY` of them spanning three sizes;
        otherwise the line stays as it is. A new line re-scales every scaled vertex of the
        kind: a scale is relative to the line it was measured against, and one line fits
        edges whose seconds per tuple differ tenfold (an index probe and a scan), so it
        swings with the mix of its last measurements — a scale left as it was would carry
        the swing into the vertex's prediction. One with its `SCALE_POINTS` recent pushes
        is scaled to them anew (`_scale`, within `SCALE_RANGE`); one with fewer keeps its
        prediction at the tuples of those it has (its scale × old line ÷ new line there),
        or its scale when it has none left."""
        at = time.monotonic() if now is None else now
        with self.lock:
            recent = _due(self.points[kind], self.measured, kind, REFIT_EVERY,
                          (at, tuples, elapsed, steady))
            if recent is None or len(recent) < REFIT_EVERY or len({n for n, _ in recent}) < 3:
                return
            old = self.model.line(kind)  # type: ignore[arg-type]
            self.model = self.model.with_line(kind, fit_linear(recent))  # type: ignore[arg-type]
            new, scales = self.model.line(kind), dict(self.model.scales)  # type: ignore[arg-type]
            for label, k in self.vertex_kind.items():
                if k != kind or label not in scales:
                    continue
                mine = _selected(self.vertex_points.get(label, deque()), SCALE_POINTS, at)
                if len(mine) >= SCALE_POINTS:
                    scale = self._scale(kind, mine)
                elif mine and new.seconds(n := sum(x for x, _ in mine) / len(mine)) > 0:
                    scale = _bounded(scales[label] * old.seconds(n) / new.seconds(n))
                else:
                    scale = None
                if scale is not None:
                    scales[label] = scale
            self.model = replace(self.model, scales=scales)
            self.refits += 1
            self._model_gen += 1

    def _scale(self, kind: str, recent: list[tuple[float, float]]) -> float | None:
        """What `recent` pushes of an edge took ÷ what its kind's line gives for their
        tuples, within `SCALE_RANGE`; None when the line gives nothing."""
        line = self.model.line(kind)  # type: ignore[arg-type]
        expected = sum(line.seconds(n) for n, _ in recent)
        if expected <= 0:
            return None
        return _bounded(sum(s for _, s in recent) / expected)

    def _learn_vertex(self, label: str, kind: str, tuples: float, elapsed: float,
                      now: float | None = None, steady: bool = True) -> None:
        """The edge into `label`, measured against its kind's line: every `SCALE_POINTS`-th
        measurement (and at each re-fit of the line, `_learn`), its scale becomes what its
        pushes of the last `MODEL_MEMORY_S` (the steady ones once there are enough, `_due`)
        took ÷ what the line gives for their tuples (within `SCALE_RANGE`). While it has
        fewer pushes than that within the memory, at each of them, from those it has: a
        sharing at SLA 45 s pushes every 30 s, and `loc⋈tweets`' joins, left on their kind's
        line until their fifth push, were charged 0.025–0.074 core-s/s from one re-fit of the
        line to the next (its slope 4e-6 to 1.2e-5 s a tuple, a mix of edges tenfold apart)
        where their own three pushes of a round took 5.3–6.2e-6 and 2.9–3.8e-6 s a tuple.
        A label whose edge changed kind (a re-routed vertex) starts again."""
        at = time.monotonic() if now is None else now
        with self.lock:
            if self.vertex_kind.get(label, kind) != kind:
                self.vertex_points.pop(label, None)
                self.vertex_measured.pop(label, None)
                scales = {v: f for v, f in self.model.scales.items() if v != label}
                self.model = replace(self.model, scales=scales)
                self._model_gen += 1
            points = self.vertex_points[label]
            recent = _due(points, self.vertex_measured, label, SCALE_POINTS,
                          (at, tuples, elapsed, steady))
            self.vertex_kind[label] = kind
            if recent is None:  # between two SCALE_POINTS-th: only while it has fewer than that
                recent = _selected(points, SCALE_POINTS, at)
                if len(recent) >= SCALE_POINTS:
                    return
            scale = self._scale(kind, recent)
            # CP(x) is recomputed on a change only
            if scale is not None and self.model.scales.get(label) != scale:
                self.model = replace(self.model, scales={**self.model.scales, label: scale})
                self._model_gen += 1

    # -- deploying a new version of D ---------------------------------------------------------
    def command_all(self, commands: dict[str, Command]) -> dict[str, Done]:
        """Send one command per machine and wait for every DONE; an AGENT_ERROR or silence
        raises AgentError naming the machine."""
        assert self.transport is not None
        for machine, cmd in commands.items():
            self.transport.send(agent_queue(machine), cmd)
        ids = {cmd.id: machine for machine, cmd in commands.items()}
        deadline = time.monotonic() + self.command_timeout_s
        with self.answers.cond:
            self.answers.cond.wait_for(
                lambda: all(i in self.answers.got for i in ids) or self.stop.is_set()
                or time.monotonic() > deadline, self.command_timeout_s)
            got = {i: a[0] if (a := self.answers.take(i)) else None for i in ids}
        out: dict[str, Done] = {}
        for i, answer in got.items():
            if isinstance(answer, Done):
                out[ids[i]] = answer
            elif isinstance(answer, AgentFailure):
                raise AgentError(f"{ids[i]}: {answer.reason}")
            else:
                raise AgentError(f"{ids[i]} did not answer {i} within "
                                 f"{self.command_timeout_s:g} s")
        return out

    def deploy(self, version: int, new: PhysicalPlan) -> dict[str, Any]:
        """Make `new` (stored as `version`) the running plan, exactly (see the module doc).
        On failure what the new version created is dropped again and AgentError raised.
        Its span is kept (`deploys`): the pushes beside it are not steady measurements."""
        span = [time.monotonic(), float("inf")]
        with self.lock:
            self.deploys = [d for d in self.deploys if d[1] > span[0] - MODEL_MEMORY_S]
            self.deploys.append(span)
        try:
            return self._deploy(version, new)
        finally:
            with self.lock:
                span[1] = time.monotonic()

    def _deploy(self, version: int, new: PhysicalPlan) -> dict[str, Any]:
        with self.lock:
            old, old_version = self.plan, self.version
        dsn = self.topology.catalog_dsn
        have = set(old.vertices) if old is not None else set()
        fresh = sorted(v for v in new.vertices if not v.base and v not in have)
        rerouted = sorted(v for v in new.vertices if not v.base and v in have and old
                          and _route(old, v) != _route(new, v))
        names_before = set(old.plan.names()) if old is not None else set()
        views = [s.name for s in new.views if s.name not in names_before or (
            old is not None and old.plan.sharing(s.name).mv != s.mv)]
        gone = sorted(v for v in have if not v.base and v not in new.vertices)
        dropped_views = sorted(names_before - set(new.plan.names()))
        machines = [m.name for m in self.topology.machines]
        tag = f"v{version}.{time.time_ns()}"
        report: dict[str, Any] = {"version": version, "new_vertices": len(fresh),
                                  "rerouted": [v.label for v in rerouted],
                                  "dropped_vertices": len(gone)}
        started = time.monotonic()
        if fresh or rerouted:
            report["freshened"] = self.freshen(FILL_MARGIN * self.fill_s)
        self.command_all({m: Install(f"{tag}.lease.{m}", version, "lease",
                                     reply_to=self.replies) for m in machines})
        t0: datetime | None = None
        try:
            if fresh or rerouted or views:
                # only new views (a sharing all of whose vertices exist): no fill needs a t0
                t0 = self._start_point(new, fresh, rerouted) if fresh or rerouted else \
                    datetime.now(UTC)
                filling = time.monotonic()
                self.command_all({m: Install(
                    f"{tag}.fill.{m}", version, "fill", t0, tuple(v.label for v in fresh),
                    tuple(v.label for v in rerouted), tuple(views), self.replies)
                    for m in machines})
                if fresh or rerouted:
                    self.fill_s = 0.5 * self.fill_s + 0.5 * (time.monotonic() - filling)
                plan_store.set_born(dsn, [v.label for v in fresh], t0)
            if rerouted and old is not None and old_version is not None:
                report["caught_up"] = self._catch_up(old_version, old, new, rerouted)
        except Exception:
            # the version still active (if any) says which readers the failed one added
            try:
                self._drop(old_version if old_version is not None else version, new, version,
                           fresh, views, tag + ".undo", lease=version)
            except AgentError as undo:  # the next install releases the lease left behind
                log.warning("undoing version %s: %s", version, undo)
            raise
        plan_store.activate(dsn, version)
        self.use(version, new)
        report["t0"] = t0.isoformat() if t0 else None
        if views:
            if t0 is not None:
                report["born_s"] = round((datetime.now(UTC) - t0).total_seconds(), 3)
            report["brought_in"] = self.bring_in(set(views))
        deadline = time.monotonic() + self.command_timeout_s
        while old_version is not None and self.inflight.get(old_version, 0) > 0:
            if time.monotonic() > deadline:
                log.warning("pushes of version %s still running; dropping anyway", old_version)
                break
            time.sleep(0.05)
        self._drop(version, old, old_version, gone, dropped_views, tag + ".drop", lease=version)
        plan_store.forget_born(dsn, [v.label for v in gone])
        report["seconds"] = round(time.monotonic() - started, 3)
        return report

    def _drop(self, version: int, previous: PhysicalPlan | None, previous_version: int | None,
              vertices: list[Vertex], views: list[str], tag: str,
              lease: int | None = None) -> None:
        machines = [m.name for m in self.topology.machines]
        self.command_all({m: Withdraw(f"{tag}.{m}", version, previous_version,
                                      tuple(v.label for v in vertices), tuple(views),
                                      lease if lease is not None else version, self.replies)
                          for m in machines})

    def _start_point(self, phys: PhysicalPlan, fresh: list[Vertex],
                     rerouted: list[Vertex]) -> datetime:
        """t0 of a fill: the oldest watermark among the base deltas the new (and re-routed)
        vertices read, once it is past how far retention pruned every delta they read — the
        base deltas a fill rolls back with and the existing deltas new vertices go on
        reading from t0. The lease froze those points; watermarks move every second."""
        plan, born = phys.plan, set(fresh)
        bases = {s for v in fresh + rerouted for s in plan.ancestors(v) | {v}
                 if s.base and s.is_delta}
        read = set(bases)
        for v in fresh:
            edge = plan.incoming.get(v)
            read |= {s for s in (edge.sources if edge else ()) if s.is_delta and s not in born}
        return self._await_watermarks(phys, bases, max(self._pruned(phys, read).values(),
                                                       default=None))

    def _pruned(self, phys: PhysicalPlan, deltas: set[Vertex]) -> dict[Vertex, datetime]:
        """How far retention pruned each of these deltas (absent: never); for the view a
        Union makes, the furthest of the stored deltas behind it."""
        stored = {d: phys.stored(d) for d in deltas}
        held = {s for parts in stored.values() for s in parts}
        found: dict[Vertex, datetime] = {}
        with self._machines_of(held) as conns:
            for m, conn in conns.items():
                mine = {phys.vertices[d].ts_key: d for d in held if d.machine == m}
                found |= {mine[k]: t for k, t in retention.pruned(conn, mine).items()}
        return {d: max(found[s] for s in parts if s in found)
                for d, parts in stored.items() if any(s in found for s in parts)}

    def _machines_of(self, vertices: set[Vertex]) -> AbstractContextManager[
            dict[str, psycopg.Connection[Any]]]:
        """Connections to the machines these vertices are on, by name."""
        return connect_all([self.topology.machine(m) for m in sorted({v.machine
                                                                      for v in vertices})],
                           application_name="smile-executor")

    def _await_watermarks(self, phys: PhysicalPlan, bases: set[Vertex],
                          floor: datetime | None) -> datetime:
        """The oldest watermark of these base deltas, waiting (up to the command timeout)
        until it is at or past `floor`."""
        if not bases:
            raise AgentError("the new vertices read no base delta")
        deadline = time.monotonic() + self.command_timeout_s
        with self._machines_of(bases) as conns:
            while True:
                marks: dict[Vertex, datetime] = {}
                for m, conn in conns.items():
                    keys = {phys.vertices[s].ts_key: s for s in bases if s.machine == m}
                    rows = conn.execute("SELECT vertex, ts FROM _smile.vertex_ts "
                                        "WHERE vertex = ANY(%s)", (list(keys),)).fetchall()
                    marks |= {keys[k]: t for k, t in rows}
                missing = sorted(s.label for s in bases if s not in marks)
                if missing:
                    raise AgentError(f"{', '.join(missing)} have no watermark")
                low = min(marks, key=lambda s: marks[s])
                if floor is None or marks[low] >= floor:
                    return marks[low]
                if time.monotonic() > deadline or self.stop.is_set():
                    raise AgentError(f"deltas the new vertices read are pruned up to "
                                     f"{floor.isoformat()}, but {low.label} is complete only "
                                     f"up to {marks[low].isoformat()}")
                time.sleep(0.2)

    def _catch_up(self, old_version: int, old: PhysicalPlan, new: PhysicalPlan,
                  rerouted: list[Vertex]) -> dict[str, str]:
        """Push each re-routed vertex along its old route until it is past the birth of every
        vertex its new incoming edge reads and past what retention pruned of them, so
        switching loses and doubles nothing; returns where each one that was behind was
        brought."""
        caught: dict[str, str] = {}
        born = plan_store.born(self.topology.catalog_dsn)
        for v in rerouted:
            edge = new.incoming(v)
            assert edge is not None
            need = switch_point(edge, born,
                                self._pruned(new, {s for s in edge.sources if s.is_delta}))
            key = old.vertices[v].ts_key
            with connect(self.topology.machine(v.machine).dsn, autocommit=True) as conn:
                row = conn.execute("SELECT ts FROM _smile.vertex_ts WHERE vertex = %s",
                                   (key,)).fetchone()
            if row is None or row[0] >= need:
                continue
            caught[v.label] = need.isoformat()
            self._await_watermarks(old, {s for s in old.plan.ancestors(v)
                                         if s.base and s.is_delta}, need)
            if not self.push_vertices(old_version, old, {v}, need, "re-route"):
                raise AgentError(f"could not bring {v.label} to {need} along its old route "
                                 "before re-routing it")
        for m in sorted({v.machine for v in rerouted}):
            # operators commit asynchronously: make the catch-up durable before the old route
            # goes, so a crash cannot take a re-routed vertex back below the births it now
            # needs (a transaction with an xid, committed synchronously, flushes all before it)
            with connect(self.topology.machine(m).dsn, autocommit=True) as conn, \
                    conn.transaction():
                conn.execute("SELECT txid_current()")
        return caught


def switch_point(edge: Edge, born: dict[str, datetime], pruned: dict[Vertex, datetime]
                 ) -> datetime:
    """Where a re-routed vertex must be before it reads through its new incoming `edge`: past
    the birth of every source (a vertex made at t0 holds nothing before it, NOTES §8) and past
    what retention pruned of each (frozen by the deploy's lease).

    >>> from smile.optimizer.plan import CopyDelta, Expr, Vertex
    >>> a, b = (Vertex("delta", Expr.base("t"), m) for m in ("m1", "m2"))
    >>> t = [datetime(2026, 1, 1, s, tzinfo=UTC) for s in range(3)]
    >>> e = CopyDelta(a, b, 1.0, 1.0)
    >>> switch_point(e, {a.label: t[1]}, {}) == t[1], switch_point(e, {}, {a: t[2]}) == t[2]
    (True, True)
    >>> switch_point(e, {}, {}) == EPOCH
    True
    """
    marks = [born[s.label] for s in edge.sources if s.label in born]
    return max(marks + [pruned[s] for s in edge.sources if s in pruned], default=EPOCH)
