"""The plan-level formulas: critical path, M/M/1 late probability, COST (paper §5,
docs/design/semantics.md §5).

Small typed functions; what happens at the edges is said in each docstring.

Must not: build plans.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable


def critical_path(edges: Iterable[tuple[str, str, float]]) -> float:
    """Longest path in seconds of a DAG given as (source, destination, seconds) edges.

    >>> critical_path([("a", "b", 1.0), ("b", "c", 2.0), ("a", "c", 2.5)])
    3.0
    >>> critical_path([])
    0.0

    A cycle raises ValueError: plans are DAGs.
    """
    out: dict[str, list[tuple[str, float]]] = {}
    indeg: dict[str, int] = {}
    for s, d, w in edges:
        out.setdefault(s, []).append((d, w))
        indeg[d] = indeg.get(d, 0) + 1
        indeg.setdefault(s, 0)
    ready = [v for v, k in indeg.items() if k == 0]
    dist = dict.fromkeys(indeg, 0.0)
    seen = 0
    while ready:
        v = ready.pop()
        seen += 1
        for d, w in out.get(v, ()):
            dist[d] = max(dist[d], dist[v] + w)
            indeg[d] -= 1
            if indeg[d] == 0:
                ready.append(d)
    if seen != len(indeg):
        raise ValueError("the plan has a cycle")
    return max(dist.values(), default=0.0)


def mm1_late_probability(arrival: float, service: float, staleness_s: float) -> float:
    """P(sojourn > s) = e^{(λ−µ)s} for an M/M/1 queue with λ < µ.

    >>> round(mm1_late_probability(1.0, 2.0, 1.0), 4)
    0.3679

    At λ ≥ µ the queue grows without bound: every tuple is eventually late, probability 1.
    With no arrivals nothing is late: 0.
    """
    if arrival <= 0:
        return 0.0
    if arrival >= service:
        return 1.0
    return math.exp((arrival - service) * staleness_s)


def late_penalty_per_s(arrival: float, utilization: float, staleness_s: float,
                       penalty_per_tuple: float) -> float:
    """Expected penalty per second: λ · P(late) · pen, with µ = λ / ρ for the slowest
    operator's utilization ρ (its seconds of work per second of updates).

    >>> late_penalty_per_s(0.0, 0.5, 10, 1.0)
    0.0

    ρ ≥ 1 means the plan cannot keep up (λ ≥ µ): infinite cost.
    """
    if arrival <= 0:
        return 0.0
    if utilization >= 1.0:
        return math.inf
    service = arrival / max(utilization, 1e-12)
    return arrival * mm1_late_probability(arrival, service, staleness_s) * penalty_per_tuple


def plan_cost(resource_cost: float, cp_s: float, staleness_s: float, late_penalty: float) -> float:
    """COST = resCost · (1 + CP/s) + λ·P_late·pen, in $/s (paper Eq. 1,
    docs/design/semantics.md §5).

    >>> plan_cost(2.0, 1.0, 4.0, 0.5)
    3.0
    """
    return resource_cost * (1.0 + cp_s / staleness_s) + late_penalty


CAPTURE_LAG_S = 0.25
"""How far a source's watermark trails its commits when it is busy (capture ticks every
0.25 s): a push can only go as far as the watermark."""
HEARTBEAT_S = 1.0
"""Agents send the executor their vertices' timestamps — the watermarks too — this often."""
WATERMARK_LAG_S = CAPTURE_LAG_S + HEARTBEAT_S / 2
"""How far behind the sources' clock the watermark a push goes to is, on average: capture
lag, and the age of the heartbeat that told the executor, half a beat (the lazy rule ages
the sources' clock, not the watermark). Measured on the main command's push log: pushes
started 0.79 s after the watermark they went to (mean of 473)."""
MIN_PERIOD_S = 1.0
"""The executor decides every 0.1 s but never pushes one sharing more than once a second."""
LAZINESS = 0.8
"""The lazy executor starts a push when the staleness plus the push's own critical path reaches
this fraction of the SLA (paper §8.2): the rest is its margin for a push that takes longer than
predicted."""
SHARE_FROM = 0.5
"""A sharing is pushed along with one that is due (the executor's shared pushes) once its
peak staleness for the freshest target reaches this fraction of its SLA: early enough to
catch most pushes of the sharings it shares vertices with, late enough not to push it much
more often than it would go alone. (Here because the load model predicts what it does.)"""
SHARE_OVERLAP = 0.5
"""...and only when at least this fraction of the vertices its push advances are advanced by
the due one's too: what it shares must outweigh the fixed work of its own vertices pushed
early."""


def push_period(sla_s: float, cp0: float, cp_slope: float, laziness: float = LAZINESS,
                lag_s: float = WATERMARK_LAG_S, min_period_s: float = MIN_PERIOD_S) -> float:
    """Seconds between two pushes of a sharing by the lazy executor (paper §8.2,
    docs/design/semantics.md §6).

    A push starts when the staleness plus the push's own critical path reaches l·s, and
    leaves the MV at the watermark as it was then; so the period P solves P = l·s − lag −
    CP(P), with CP(x) = cp0 + cp_slope·x for x seconds of updates:
    P = (l·s − lag − cp0) / (1 + cp_slope), but never below a second or the push itself.

    >>> round(push_period(10.0, 0.1, 0.01), 3)
    7.079
    >>> push_period(0.5, 0.1, 0.01)
    1.0
    """
    period = (laziness * sla_s - lag_s - cp0) / (1.0 + cp_slope)
    return max(period, min_period_s, cp0 + cp_slope * min_period_s)


def edge_load(fixed_s: float, per_tuple_s: float, tuples_per_s: float,
              pushes_per_s: float) -> float:
    """An edge's work on its machine, in core-seconds per second: its fixed cost once per push
    of any sharing it serves, its per-tuple cost once per tuple (docs/design/semantics.md §6).

    >>> round(edge_load(0.004, 3e-6, 1000.0, 0.1), 6)
    0.0034
    """
    return fixed_s * pushes_per_s + per_tuple_s * tuples_per_s
