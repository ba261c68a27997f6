"""Deploying a new version of the global plan D, exactly (docs/design/semantics.md §8):

1. the sharings due while the fill will keep the machines busy are pushed first (`freshen`);
2. INSTALL lease on every machine the change involves (`involved`): retention holds back
   every delta there; the other machines get no command, so one away (an app's database
   down) stops only the changes that need it, at once (`reachable`);
3. t0 = the oldest watermark among the base deltas the new (and re-routed) vertices read, once
   past how far retention pruned what they read;
4. INSTALL fill at t0: each agent creates and fills its machine's new vertices from the
   shadows rolled to t0, registers delta readers, creates consumers' views;
5. each re-routed vertex is pushed along its old route until it is past the birth of what
   its new edge reads (`switch_point`), and made durable;
6. the version becomes active; its new sharings are pushed while due (`bring_in`); pushes of
   the old version drain; WITHDRAW drops what the new one no longer has.

A failure drops what the new version created and raises AgentError. Every command carries a
stable id and the version; agents answer DONE or AGENT_ERROR.

Must not: decide what D is (the sharing service plans it), or run statements on the machines
other than through `deploy.machine_state` (reads, a flush) and commands to the agents.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from smile.deploy import machine_state, plan_store
from smile.errors import AgentError
from smile.executor.busy import DeploySpans
from smile.executor.clock import UNREACHABLE_S
from smile.executor.learning import MODEL_MEMORY_S
from smile.messaging.protocol import AgentFailure, Done, Install, Withdraw
from smile.messaging.transport import agent_queue
from smile.optimizer.plan import route
from smile.optimizer.recompute import recoverable

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable

    from smile.deploy.physical import PhysicalPlan
    from smile.executor.dataflow import Dataflow
    from smile.executor.inbox import Inbox
    from smile.messaging.protocol import Command
    from smile.optimizer.plan import Edge, Vertex
    from smile.topology import Topology

log = logging.getLogger("smile.executor")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
FILL_S = 2.0
"""Seconds a deploy's fill is first expected to keep the agents busy."""
FILL_MARGIN = 2.0
"""Before a fill, the sharings due within this many times the expected fill are pushed."""


def _route(phys: PhysicalPlan, v: Vertex) -> Edge | None:
    edge = phys.incoming(v)
    return None if edge is None else route(edge)


class Deployer:
    def __init__(self, topology: Topology, inbox: Inbox, dataflow: Dataflow,
                 stop: threading.Event, *, command_timeout_s: float = 900.0,
                 send: Callable[[str, Command], None] | None = None,
                 quiet: Callable[[], dict[str, float]] = dict) -> None:
        self.topology = topology
        self.quiet = quiet
        """The machines whose agents have gone quiet (`Clock.quiet`)."""
        self.inbox = inbox
        self.dataflow = dataflow
        self.stop = stop
        self.command_timeout_s = command_timeout_s
        self.send = send
        """Sends a command to a queue (set when the executor connects)."""
        self.replies = ""
        self.fill_s = FILL_S
        """How long deploys' fills have kept the agents busy (a moving average)."""
        self.spans = DeploySpans(kept_s=MODEL_MEMORY_S)
        """This executor's deploys of the last `MODEL_MEMORY_S`: a push that overlapped one,
        or its settle, is not a steady measurement."""
        self.stale: Callable[[PhysicalPlan], set[Vertex]] = lambda phys: set()
        """The relations of a plan stale (`PathChooser.stale_relations`): a catch-up
        recomputes them, as every push does; one through a delta a crash emptied is refused
        by its readers, and the deploy with it (its loss is made good by its sharing's push,
        which skips it: docs/design/agents.md, *Unlogged deltas*)."""

    def command_all(self, commands: dict[str, Command]) -> dict[str, Done]:
        """Send one command per machine and wait for every DONE; an AGENT_ERROR or silence
        raises AgentError naming the machine."""
        assert self.send is not None
        for machine, cmd in commands.items():
            self.send(agent_queue(machine), cmd)
        ids = {cmd.id: machine for machine, cmd in commands.items()}
        got = self.inbox.wait_all(list(ids), self.command_timeout_s, self.stop)
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

    def deploy(self, version: int, new: PhysicalPlan, old: PhysicalPlan | None,
               old_version: int | None, hooks: DeployHooks) -> dict[str, Any]:
        """Make `new` (stored as `version`) the running plan in place of `old`, exactly (see
        the module doc). Its span is kept (`spans`)."""
        with self.spans.running():
            return _Deploy(self, version, new, old, old_version, hooks).run()

    def drop(self, version: int, previous_version: int | None, vertices: list[Vertex],
             views: list[str], tag: str, machines: list[str], lease: int | None = None
             ) -> None:
        self.command_all({m: Withdraw(f"{tag}.{m}", version, previous_version,
                                      tuple(v.label for v in vertices), tuple(views),
                                      lease if lease is not None else version, self.replies)
                          for m in machines})

    def reachable(self, needed: dict[str, set[str]]) -> list[str]:
        """Those of `needed` (machine → what needs it) that are machines of the topology (one
        being detached is not), in its order; AgentError at once naming those whose agents
        have gone quiet, rather than after the command timeout."""
        machines = [m.name for m in self.topology.machines if m.name in needed]
        quiet = sorted(set(self.quiet()) & set(machines))
        if quiet:
            what = sorted(x for m in quiet for x in needed[m])
            raise AgentError(f"this plan change needs {quiet}, whose agents have not answered "
                             f"for over {UNREACHABLE_S:g} s (GET /machines says why), for "
                             f"{what[:5]}{' …' if len(what) > 5 else ''}: try again once "
                             "they are back, or detach them")
        return machines

    def start_point(self, phys: PhysicalPlan, fresh: list[Vertex],
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
        return self.await_watermarks(phys, bases, max(self.pruned(phys, read).values(),
                                                      default=None))

    def pruned(self, phys: PhysicalPlan, deltas: set[Vertex]) -> dict[Vertex, datetime]:
        """How far retention pruned each of these deltas (absent: never); for the view a
        Union makes, the furthest of the stored deltas behind it."""
        stored = {d: phys.stored(d) for d in deltas}
        held = {s for parts in stored.values() for s in parts}
        keys: dict[str, dict[str, Vertex]] = {}
        for s in held:
            keys.setdefault(s.machine, {})[phys.vertices[s].ts_key] = s
        by_key = machine_state.pruned(self.topology, {m: list(k) for m, k in keys.items()})
        found = {keys[m][k]: t for m in keys for k, t in by_key.items() if k in keys[m]}
        return {d: max(found[s] for s in parts if s in found)
                for d, parts in stored.items() if any(s in found for s in parts)}

    def await_watermarks(self, phys: PhysicalPlan, bases: set[Vertex],
                         floor: datetime | None) -> datetime:
        """The oldest watermark of these base deltas, waiting (up to the command timeout)
        until it is at or past `floor`."""
        keys: dict[str, dict[str, str]] = {}
        for s in bases:
            keys.setdefault(s.machine, {})[phys.vertices[s].ts_key] = s.label
        _, low = machine_state.await_watermarks(self.topology, keys, floor,
                                                self.command_timeout_s, self.stop)
        return low

    def catch_up(self, old_version: int, old: PhysicalPlan, new: PhysicalPlan,
                 rerouted: list[Vertex]) -> dict[str, str]:
        """Push each re-routed vertex along its old route until it is past the birth of every
        vertex its new incoming edge reads and past what retention pruned of them, so
        switching loses and doubles nothing; returns where each one that was behind was
        brought."""
        from smile.executor.dataflow import PushSpec

        caught: dict[str, str] = {}
        born = plan_store.born(self.topology.catalog_dsn)
        for v in rerouted:
            edge = new.incoming(v)
            assert edge is not None
            need = switch_point(edge, born,
                                self.pruned(new, {s for s in edge.sources if s.is_delta}))
            ts = machine_state.timestamp(self.topology, v.machine, old.vertices[v].ts_key)
            if ts is None or ts >= need:
                continue
            caught[v.label] = need.isoformat()
            self.await_watermarks(old, {s for s in old.plan.ancestors(v)
                                        if s.base and s.is_delta}, need)
            stale = self.stale(old)
            if not self.dataflow.run(PushSpec(
                    old_version, old, frozenset({v}), need, "re-route",
                    modes={u: "recompute" for u in old.plan.advanced_by([v]) if u in stale})):
                raise AgentError(f"could not bring {v.label} to {need} along its old route "
                                 "before re-routing it")
        # operators commit asynchronously: make the catch-up durable before the old route
        # goes, so a crash cannot take a re-routed vertex back below the births it now needs
        machine_state.flush(self.topology, {v.machine for v in rerouted})
        return caught


class DeployHooks(Protocol):
    """What a deploy asks of the executor that runs it."""

    def freshen(self, ahead_s: float) -> int:
        """Push now, and wait for, every sharing that would fall due within `ahead_s`."""

    def use(self, version: int, phys: PhysicalPlan) -> None:
        """Run `phys` as the active version."""

    def bring_in(self, names: set[str]) -> int:
        """Push the sharings a deploy just made active while they are due."""


class _Deploy:
    """One deploy's steps (the module doc's 1–6)."""

    def __init__(self, d: Deployer, version: int, new: PhysicalPlan, old: PhysicalPlan | None,
                 old_version: int | None, hooks: DeployHooks) -> None:
        self.d, self.version, self.new, self.old = d, version, new, old
        self.old_version, self.hooks = old_version, hooks
        have = set(old.vertices) if old is not None else set()
        self.fresh = sorted(v for v in new.vertices if not v.base and v not in have)
        self.rerouted = sorted(v for v in new.vertices if not v.base and v in have and old
                               and _route(old, v) != _route(new, v))
        names_before = set(old.plan.names()) if old is not None else set()
        self.views = [s.name for s in new.views if s.name not in names_before or (
            old is not None and old.plan.sharing(s.name).mv != s.mv)]
        self.gone = sorted(v for v in have if not v.base and v not in new.vertices)
        self.dropped_views = sorted(names_before - set(new.plan.names()))
        self.tag = f"v{version}.{time.time_ns()}"
        self.machines = d.reachable(involved(new, old, self.fresh, self.rerouted,
                                             self.views + self.dropped_views, self.gone))
        self.report: dict[str, Any] = {"version": version, "new_vertices": len(self.fresh),
                                       "rerouted": [v.label for v in self.rerouted],
                                       "dropped_vertices": len(self.gone)}

    def run(self) -> dict[str, Any]:
        d, dsn = self.d, self.d.topology.catalog_dsn
        started = time.monotonic()
        if self.fresh or self.rerouted:
            self.report["freshened"] = self.hooks.freshen(FILL_MARGIN * d.fill_s)
        machines = self.machines
        d.command_all({m: Install(f"{self.tag}.lease.{m}", self.version, "lease",
                                  reply_to=d.replies) for m in machines})
        t0 = self._fill_and_catch_up(machines)
        plan_store.activate(dsn, self.version)
        self.hooks.use(self.version, self.new)
        self.report["t0"] = t0.isoformat() if t0 else None
        if self.views:
            if t0 is not None:
                self.report["born_s"] = round((datetime.now(UTC) - t0).total_seconds(), 3)
            self.report["brought_in"] = self.hooks.bring_in(set(self.views))
        self._drain()
        d.drop(self.version, self.old_version, self.gone, self.dropped_views,
               self.tag + ".drop", machines, lease=self.version)
        plan_store.forget_born(dsn, [v.label for v in self.gone])
        self.report["seconds"] = round(time.monotonic() - started, 3)
        return self.report

    def _fill_and_catch_up(self, machines: list[str]) -> datetime | None:
        d, fresh, rerouted = self.d, self.fresh, self.rerouted
        t0: datetime | None = None
        try:
            if fresh or rerouted or self.views:
                # only new views (a sharing all of whose vertices exist): no fill needs a t0
                t0 = d.start_point(self.new, fresh, rerouted) if fresh or rerouted else \
                    datetime.now(UTC)
                filling = time.monotonic()
                d.command_all({m: Install(
                    f"{self.tag}.fill.{m}", self.version, "fill", t0,
                    tuple(v.label for v in fresh), tuple(v.label for v in rerouted),
                    tuple(self.views), d.replies) for m in machines})
                if fresh or rerouted:
                    d.fill_s = 0.5 * d.fill_s + 0.5 * (time.monotonic() - filling)
                plan_store.set_born(d.topology.catalog_dsn, [v.label for v in fresh], t0)
            if rerouted and self.old is not None and self.old_version is not None:
                self.report["caught_up"] = d.catch_up(self.old_version, self.old, self.new,
                                                      rerouted)
        except Exception:
            # the version still active (if any) says which readers the failed one added
            try:
                d.drop(self.old_version if self.old_version is not None else self.version,
                       self.version, fresh, self.views, self.tag + ".undo", machines,
                       lease=self.version)
            except AgentError as undo:  # the next install releases the lease left behind
                log.warning("undoing version %s: %s", self.version, undo)
            raise
        return t0

    def _drain(self) -> None:
        """Wait for the pushes of the old version to finish (up to the command timeout)."""
        deadline = time.monotonic() + self.d.command_timeout_s
        while self.old_version is not None and self.d.dataflow.inflight(self.old_version) > 0:
            if time.monotonic() > deadline:
                log.warning("pushes of version %s still running; dropping anyway",
                            self.old_version)
                break
            time.sleep(0.05)


def involved(new: PhysicalPlan, old: PhysicalPlan | None, fresh: list[Vertex],
             rerouted: list[Vertex], views: list[str], gone: list[Vertex]
             ) -> dict[str, set[str]]:
    """The machines a deploy's commands must reach, each with what needs it: those of its
    new, re-routed and dropped vertices and of everything they read in either version (the
    deltas leased, filled from, read, or no longer read there), and those of the views it
    makes, moves or drops; and those of the unlogged deltas the new version gives a second
    reader, which their fill makes logged (`deploy.unlogged.relog_deltas`). The others have
    nothing to do: their agents read the active version from the catalog when they push, and
    register its readers when they start (`deploy.commands`)."""
    machines: dict[str, set[str]] = {}
    if old is not None:
        for d in new.vertices.keys() & old.vertices.keys():
            if d.is_delta and recoverable(old.plan, d) and not recoverable(new.plan, d):
                machines.setdefault(d.machine, set()).add(f"{d.label} made logged")
    for phys, vertices in ((new, fresh + rerouted), (old, rerouted + gone)):
        if phys is None:
            continue
        for v in vertices:
            if v in phys.vertices:
                for a in phys.plan.ancestors(v) | {v}:
                    machines.setdefault(a.machine, set()).add(v.label)
        names = set(phys.plan.names())
        for n in views:
            if n in names:
                machines.setdefault(phys.plan.sharing(n).mv.machine, set()).add(f"view {n}")
    return machines


def switch_point(edge: Edge, born: dict[str, datetime], pruned: dict[Vertex, datetime]
                 ) -> datetime:
    """Where a re-routed vertex must be before it reads through its new incoming `edge`: past
    the birth of every source (a vertex made at t0 holds nothing before it,
    docs/design/semantics.md §8) and past what retention pruned of each (frozen by the
    deploy's lease).

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
