"""`smile bench admission-scale`: how long admitting one more sharing takes as the global plan D
grows, and what D costs, beside the reference algorithm in the same run.

The setting of Fig. 11c without a cloud: the paper's nine relations on `machines` machines at
7M tweets and `rate` tweets/s, Table 1's sharings at SLA `sla_s` and $0.001 per late tuple,
S_i's MV on machine ((i − 1) mod N) + 1, then copied until there are as many as the largest
size asked for — copy j of S_i named S_i_cj, its MV on the j-th machine after the original's,
round robin over the 25 as `LiveRun.submit_copies` places them. Each is admitted into the D
the ones before it left (`admission.admit`, merging and hill-climbing), and timed.

At each size: how many were admitted, p50, p99 and the largest of the admissions up to it (and
of those since the size before), in wall-clock and CPU milliseconds, and COST(D) in $/s; the
same with the reference (`PlannerOptions(fast=False)`: every candidate of the DP scored, every
plumbing priced and re-assessed in full, as admission did before its bounds and caches);
their ratio, the sharings decided otherwise, and whether D came out the same.

Must not: touch a database, a broker or Spark: everything is computed from the catalog model.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from smile.costmodel.prices import Prices
from smile.costmodel.time_model import TimeModel
from smile.dataset.catalog_model import paper_catalog
from smile.dataset.sharings import table1
from smile.optimizer.admission import PlannerOptions, admit
from smile.optimizer.global_plan import GlobalPlan
from smile.optimizer.sharing import Sharing

if TYPE_CHECKING:
    from smile.optimizer.catalog import CatalogSnapshot

PENALTY = 0.001


def copies(n: int, machines: int, sla_s: float) -> list[Sharing]:
    """Table 1 and its copies, `n` sharings in all, in the order they are admitted.

    >>> [(s.name, s.mv_machine) for s in copies(27, 12, 45.0)][23:]
    [('S24', 'm12'), ('S25', 'm1'), ('S1_c1', 'm2'), ('S2_c1', 'm3')]
    """
    specs = table1()
    out = []
    for i in range(n):
        k, nth = i % len(specs), i // len(specs)
        name = specs[k].name + (f"_c{nth}" if nth else "")
        out.append(Sharing(name, specs[k].sql, sla_s, PENALTY,
                           f"m{(k % machines + nth) % machines + 1}"))
    return out


@dataclass(frozen=True)
class Admitted:
    """One admission of a run: its decision, its times and what D costs after it."""

    name: str
    admitted: bool
    wall_ms: float
    cpu_ms: float
    cost_per_s: float
    plan: GlobalPlan


def run(catalog: CatalogSnapshot, sharings: list[Sharing], options: PlannerOptions,
        sizes: set[int]) -> list[Admitted]:
    """Admit `sharings` one after the other into a growing D; D is kept at the `sizes`."""
    model, prices = TimeModel(), Prices()
    d = GlobalPlan()
    out = []
    for n, s in enumerate(sharings, 1):
        wall, cpu = time.perf_counter(), time.process_time()
        adm = admit(d, catalog, s, model, prices, options)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        d = adm.plan
        out.append(Admitted(s.name, adm.admitted, wall * 1e3, cpu * 1e3,
                            adm.assessment.total, d if n in sizes else GlobalPlan()))
    return out


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 2)


def summary(runs: list[Admitted]) -> dict[str, Any]:
    """p50, p99 and the largest time (wall and CPU, ms), how many were admitted, COST(D)."""
    wall, cpu = [r.wall_ms for r in runs], [r.cpu_ms for r in runs]
    return {"admissions": len(runs), "admitted": sum(r.admitted for r in runs),
            "p50_ms": round(statistics.median(wall), 2), "p99_ms": _pct(wall, 0.99),
            "max_ms": round(max(wall), 2), "cpu_p50_ms": round(statistics.median(cpu), 2),
            "cpu_p99_ms": _pct(cpu, 0.99)}


def at_size(fast: list[Admitted], ref: list[Admitted] | None, lo: int, n: int) -> dict[str, Any]:
    """The figures of the first `n` admissions (and of those after the first `lo`)."""
    def of(runs: list[Admitted]) -> dict[str, Any]:
        since = {"since_previous": summary(runs[lo:n])} if lo else {}
        return summary(runs[:n]) | since | {"cost_per_s": runs[n - 1].cost_per_s}

    doc: dict[str, Any] = {"sharings": n, "fast": of(fast)}
    if ref is not None:
        doc["reference"] = of(ref)
        doc["cost_ratio"] = round(fast[n - 1].cost_per_s / ref[n - 1].cost_per_s, 9)
        doc["p50_speedup"] = round(doc["reference"]["p50_ms"] / doc["fast"]["p50_ms"], 1)
        doc["decided_otherwise"] = [f.name for f, r in zip(fast[:n], ref[:n], strict=True)
                                    if f.admitted != r.admitted]
        doc["same_plan"] = fast[n - 1].plan.edges == ref[n - 1].plan.edges
    return doc


def bench_admission_scale(machines: int = 12, sizes: tuple[int, ...] = (25, 100, 400),
                          sla_s: float = 45.0, rate: float = 1000.0,
                          reference: bool = True) -> dict[str, Any]:
    """Both algorithms over the same sharings (the reference unless `reference` is off)."""
    catalog = paper_catalog(machines=machines, tweet_rate=rate)
    want = sorted(set(sizes))
    sharings = copies(want[-1], machines, sla_s)
    fast = run(catalog, sharings, PlannerOptions(), set(want))
    ref = run(catalog, sharings, PlannerOptions(fast=False), set(want)) if reference else None
    out = []
    lo = 0
    for n in want:
        out.append(at_size(fast, ref, lo, n))
        lo = n
    return {"machines": machines, "sla_s": sla_s, "tweet_rate": rate, "tweets": 7e6,
            "penalty_per_tuple": PENALTY, "sizes": out}
