"""The plan-level formulas: critical path, M/M/1 late probability, COST (paper §5, NOTES §5).

Small typed functions; what happens at the edges is said in each docstring.

Must not: build plans.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping


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
    """COST = resCost · (1 + CP/s) + λ·P_late·pen, in $/s (paper Eq. 1, NOTES §5).

    >>> plan_cost(2.0, 1.0, 4.0, 0.5)
    3.0
    """
    return resource_cost * (1.0 + cp_s / staleness_s) + late_penalty


def total(values: Mapping[str, float]) -> float:
    return sum(values.values())
