"""What each machine carries: the global plan's predicted load beside the measured one, edge by
edge, and whether it has carried more than its admission bound for `SUSTAINED_S` — then the
sharings with a vertex on it are at risk of missing their SLAs, and the report names them.

Admission promises an SLA on the loads it predicts; a machine measured over its bound for
minutes is where that promise has stopped holding (a join whose work grows with its tables, a
rate above the one admission measured). The executor does not withdraw or re-plan anything on
its own: it says so (`GET /machines`, the dashboard, `/metrics`), and the operator or the
consumers decide.

Pure: numbers and the plan in, a report out. Must not: read the executor's state, a database
or the broker (the route gathers those and hands them in).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from smile.optimizer.global_plan import by_number
from smile.optimizer.plan import edge_kind, edge_tuples

if TYPE_CHECKING:
    from collections.abc import Mapping

    from smile.optimizer.global_plan import GlobalPlan
    from smile.optimizer.load import Assessment

SUSTAINED_S = 300.0
"""The window over which a machine's measured load is held against its admission bound: a
machine over it for this long is one whose promises are at risk (`GET /machines`)."""
TOP_EDGES = 8
"""Edges listed per machine: those with the largest predicted or measured load."""


@dataclass(frozen=True)
class EdgeLoad:
    """One edge of D on its machine (named by the vertex it writes)."""

    vertex: str
    kind: str | None
    """`copy_delta`, `join_pg`, …; None for a vertex no longer in D (withdrawn, its last
    pushes still in the window)."""
    sharings: tuple[str, ...]
    predicted: float | None
    """Core-seconds per second the plan charges it at the current rates."""
    measured: float
    """Core-seconds per second its PUSH_DONEs took over the last minute."""
    pushes_per_s: float | None = None
    """How often the plan expects it pushed: Σ 1/P over the sharings it serves."""
    tuples_per_s: float | None = None
    """The tuples per second the time model charges it at the current rates (`edge_tuples`).
    With these two, a predicted load off the measured one says whether the pushes, the
    tuples or the seconds per push are what differs (`smile bench admission`)."""
    fixed_s: float | None = None
    """Seconds the plan charges each push of it (its line's intercept, scaled)."""
    per_tuple_s: float | None = None
    """Seconds the plan charges each of its tuples (its line's slope, scaled): `predicted` is
    `fixed_s × pushes_per_s + per_tuple_s × tuples_per_s`."""
    scale: float | None = None
    """Its vertex's scale (`TimeModel.scales`): what its last pushes took ÷ what its kind's
    line gives for their tuples; None where it has none (1)."""


@dataclass(frozen=True)
class MachineLoad:
    machine: str
    predicted: float | None
    measured: float | None
    sustained: float | None
    """Measured core-seconds per second over the last `SUSTAINED_S`, of the edges D has now
    (the work of a sharing withdrawn meanwhile puts no promise at risk)."""
    bound: float | None
    edges: tuple[EdgeLoad, ...]
    at_risk: tuple[str, ...]
    """The sharings with a vertex on it, when it is over its bound; else empty."""
    box: tuple[float, float] | None = None
    """On one box (`Assessment.box`): what all its machines carried over `SUSTAINED_S`, and
    what they may carry together. `bound` is then this machine's share, which it may pass
    while the box has cores to spare."""

    @property
    def over_bound(self) -> bool:
        """Over its bound for `SUSTAINED_S`; on one box, over its share while the machines
        together are over theirs (one machine over its share is not, on a box with cores the
        others leave idle).

        >>> MachineLoad("m2", 0.5, 0.6, 0.6, 0.4, (), (), box=(0.9, 1.2)).over_bound
        False
        >>> MachineLoad("m2", 0.5, 0.6, 0.6, 0.4, (), (), box=(1.3, 1.2)).over_bound
        True
        """
        over = self.sustained is not None and self.bound is not None and \
            self.sustained > self.bound
        return over and (self.box is None or self.box[0] > self.box[1])

    def warning(self, window_s: float) -> str | None:
        """A sentence for people, or None while it keeps within its bound.

        >>> MachineLoad("m2", 0.3, 0.9, 0.72, 0.4, (), ("S14", "S15")).warning(300)
        'm2 has carried 0.720 core-s/s over the last 300 s, above its bound 0.400: S14, S15 \
may miss their SLAs (withdraw some, relax their SLAs, or add a machine)'
        >>> MachineLoad("m1", 0.3, 0.3, 0.3, 0.4, (), ()).warning(300) is None
        True
        """
        if not self.over_bound:
            return None
        who = ", ".join(self.at_risk) or "no admitted sharing"
        above = f"above its bound {self.bound:.3f}" if self.box is None else (
            f"above its share {self.bound:.3f} while the box's machines carried "
            f"{self.box[0]:.3f} of their {self.box[1]:.3f}")
        return (f"{self.machine} has carried {self.sustained:.3f} core-s/s over the last "
                f"{window_s:g} s, {above}: {who} may miss their SLAs "
                "(withdraw some, relax their SLAs, or add a machine)")


def machine_loads(plan: GlobalPlan, assessment: Assessment | None,
                  measured: Mapping[str, Mapping[str, float]],
                  sustained: Mapping[str, Mapping[str, float]], machines: tuple[str, ...],
                  top: int = TOP_EDGES) -> dict[str, MachineLoad]:
    """Each of `machines`' report. `measured` and `sustained`: machine → vertex label → load
    over the last minute and over `SUSTAINED_S`; `assessment`: D's prediction (None before
    there is one), with the time model it was made with.

    >>> from smile.optimizer.global_plan import GlobalPlan
    >>> r = machine_loads(GlobalPlan(), None, {"m1": {"x@m1": 0.5}}, {"m1": {"x@m1": 0.5}},
    ...                   ("m1",))
    >>> r["m1"].edges, r["m1"].sustained, r["m1"].over_bound
    ((EdgeLoad(vertex='x@m1', kind=None, sharings=(), predicted=None, measured=0.5, \
pushes_per_s=None, tuples_per_s=None, fixed_s=None, per_tuple_s=None, scale=None),), 0.0, False)
    """
    shr = plan.shr
    running: dict[str, set[str]] = {}
    for v in plan.vertices:
        running.setdefault(v.machine, set()).add(v.label)
    # its edges are D's re-rated: the same vertices
    rerated = {e.dst: (e, load) for e, load in assessment.edge_load.items()} \
        if assessment is not None else {}
    edges: dict[str, dict[str, EdgeLoad]] = {m: {} for m in machines}
    for e in plan.edges:
        v = e.dst
        got = rerated.get(v)
        serves = shr.get(v, frozenset())
        pushes = assessment.pushes(s for s in serves if s in assessment.periods) \
            if assessment is not None else None
        model = assessment.model if assessment is not None and got is not None else None
        line = model.edge_line(edge_kind(got[0]), v.label) \
            if model is not None and got is not None else None
        edges.setdefault(v.machine, {})[v.label] = EdgeLoad(
            v.label, edge_kind(e), tuple(by_number(serves)),
            got[1] if got is not None else None,
            measured.get(v.machine, {}).get(v.label, 0.0),
            pushes if got is not None else None,
            edge_tuples(got[0]) if got is not None else None,
            line.a if line is not None else None, line.b if line is not None else None,
            model.scales.get(v.label) if model is not None else None)
    for m, by_vertex in measured.items():
        mine = edges.setdefault(m, {})
        for label, load in by_vertex.items():
            if label not in mine:
                mine[label] = EdgeLoad(label, None, (), None, load)
    held = {m: sum((load for label, load in sustained[m].items()
                    if label in running.get(m, ())), 0.0) for m in machines if m in sustained}
    box = (sum(held.values()), assessment.box) \
        if assessment is not None and assessment.box is not None else None
    out = {}
    for m in machines:
        ranked = sorted(edges.get(m, {}).values(),
                        key=lambda x: (-max(x.predicted or 0.0, x.measured), x.vertex))
        bound = None if assessment is None else assessment.shares.get(
            m, assessment.bounds.get(m, (None,))[0])
        report = MachineLoad(
            m, assessment.machine_load.get(m) if assessment is not None else None,
            sum(measured.get(m, {}).values()) if m in measured else None,
            held.get(m), bound, tuple(x for x in ranked[:top] if
                                      (x.predicted or 0.0) > 0 or x.measured > 0), (), box)
        if report.over_bound:
            on_it = {n for v, names in shr.items() if v.machine == m for n in names}
            report = replace(report, at_risk=tuple(by_number(on_it)))
        out[m] = report
    return out
