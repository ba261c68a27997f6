"""`smile bench optimizer`: admission latency, and DPD's gap to the exhaustive optimum.

Latency: the paper's nine relations on 6 machines at 7M tweets and 1000 tweets/s, with the 25
sharings of Table 1 admitted first (each taking capacity), then a new 5-way join (S20's query)
decided `rounds` times; p50 and p99 in milliseconds, beside the reference DP's in the same run
(`dp.optimize(..., fast=False)`), and whether both decided alike. Gap: on random small
instances (≤ 3 relations, ≤ 3 machines, ample capacity), DPD's COST against the minimum COST
over the whole plan space (exhaustive enumeration): COST is not decomposable, so DPD is a
heuristic.

Must not: touch a database.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from typing import TYPE_CHECKING, Any

from smile.costmodel.time_model import TimeModel
from smile.dataset.catalog_model import paper_catalog
from smile.dataset.sharings import table1
from smile.optimizer.admission import admit_all, plan_sharing
from smile.optimizer.catalog import CatalogSnapshot, ColumnStats, Machine, RelationStats
from smile.optimizer.dp import optimize
from smile.optimizer.exhaustive import best
from smile.optimizer.parse_spj import parse_sharing_sql
from smile.optimizer.sharing import Sharing

if TYPE_CHECKING:
    from collections.abc import Callable

    from smile.optimizer.admission import Decision


def admission_latency(rounds: int = 50) -> dict[str, Any]:
    """The probe's decision `rounds` times, with the bounded DP on cached spaces (the default)
    and, in the same run, with the reference (`plan_sharing(..., fast=False)`); the first
    round of the first (`first_ms`) builds the probe's space, the rest reuse it."""
    catalog = paper_catalog(machines=6)
    specs = table1()
    sharings = [Sharing(s.name, s.sql, 45, 0.001, f"m{i % 6 + 1}") for i, s in enumerate(specs)]
    catalog, decisions = admit_all(catalog, sharings)
    probe = Sharing("S20-again", specs[19].sql, 45, 0.001)
    fast, decision = _timed(lambda: plan_sharing(catalog, probe), rounds)
    ref, reference = _timed(lambda: plan_sharing(catalog, probe, fast=False), rounds)
    return {
        "admit_p50_ms": _p(fast, 0.5),
        "admit_p99_ms": _p(fast, 0.99),
        "first_ms": round(fast[0], 2),
        "reference_p50_ms": _p(ref, 0.5),
        "reference_p99_ms": _p(ref, 0.99),
        "same_decision": decision == reference,
        "rounds": rounds,
        "machines": 6,
        "join_width": len(specs[19].relations),
        "already_admitted": sum(d.admitted for d in decisions),
        "probe_decision": decision.reason,
    }


def _timed(decide: Callable[[], Decision], rounds: int) -> tuple[list[float], Decision]:
    """Milliseconds of each of `rounds` calls (in order), and the last decision."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        decision = decide()
        times.append((time.perf_counter() - started) * 1000)
    return times, decision


def _p(times: list[float], q: float) -> float:
    ordered = sorted(times)
    if q == 0.5:
        return round(statistics.median(ordered), 2)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def _random_instance(rng: random.Random) -> tuple[CatalogSnapshot, Sharing]:
    machines = rng.randint(2, 3)
    nrel = rng.randint(2, 3)
    rels = []
    for i in range(nrel):
        rows = rng.choice([1e3, 1e5, 1e6])
        rels.append(RelationStats(
            f"r{i}", f"m{rng.randint(1, machines)}", rows, rng.choice([1.0, 50.0, 2000.0]),
            (ColumnStats("k", "bigint", rng.choice([10.0, 1e3, rows]), 0, 8),
             ColumnStats("v", "text", 100, 0.1, rng.randint(4, 40)))))
    cat = CatalogSnapshot(
        tuple(Machine(f"m{i + 1}", cpu_cores=1e6, disk_gb=1e9, network_mb_s=1e9,
                      price_per_hour=rng.choice([0.34, 0.68])) for i in range(machines)),
        tuple(rels))
    sql = (f"SELECT {', '.join(f't{i}.v AS v{i}' for i in range(nrel))} FROM "
           f"{', '.join(f'r{i} t{i}' for i in range(nrel))} WHERE "
           f"{' AND '.join(f't{i}.k = t{i + 1}.k' for i in range(nrel - 1))}")
    return cat, Sharing("G", sql, rng.choice([0.5, 5.0, 60.0]), rng.choice([0.0, 0.001, 0.1]))


def dpd_gap(instances_count: int = 40, seed: int = 1) -> dict[str, Any]:
    rng = random.Random(seed)
    model = TimeModel()
    gaps: list[float] = []
    hopeless = 0
    while len(gaps) < instances_count:
        cat, sharing = _random_instance(rng)
        query = parse_sharing_sql(sharing.sql, cat)
        dpd = optimize(cat, query, sharing, model, "dollar")
        _, min_cost = best(cat, query, sharing, model)
        assert dpd is not None
        if not math.isfinite(min_cost):
            hopeless += 1  # no plan keeps up (λ ≥ µ): nothing to compare
            continue
        gaps.append(dpd.metrics.cost / min_cost - 1 if min_cost > 0 else 0.0)
    return {
        "instances": len(gaps),
        "skipped_cannot_keep_up": hopeless,
        "mean_gap": round(statistics.fmean(gaps), 6),
        "max_gap": round(max(gaps), 6),
        "optimal_share": round(sum(g < 1e-9 for g in gaps) / len(gaps), 3),
    }


def bench_optimizer(rounds: int = 50, gap_instances: int = 40) -> dict[str, Any]:
    return admission_latency(rounds) | {"dpd_gap": dpd_gap(gap_instances)}
