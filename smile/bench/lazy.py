"""`smile bench lazy`: the same sharings kept twice over the same workload — by the lazy
executor (paper §8.2) and by one that pushes every second — comparing the work done (the summed
operator seconds the agents reported, from the push log) and the auditor's violations.

Needs a running cloud with capturers and agents (`smile up` or `smile cloud up`), the dataset
loaded and its relations published (the benchmark publishes what its sharings read). Each run
admits its own copies of the sharings, runs its own executor and auditor in this process, and
withdraws them at the end.

Must not: leave sharings admitted.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Literal

from smile.executor.auditor import Auditor
from smile.executor.runtime import Executor
from smile.executor.sharings import SharingService
from smile.executor.store import CatalogStore
from smile.workload.driver import WorkloadDriver, locate_relations

if TYPE_CHECKING:
    from smile.topology import Topology

# Table 1's S1, S2 and S3 (2- and 3-way joins over users, socnet, tweets, curloc and urls)
SHARINGS = {
    "s1": ("SELECT u.uid, u.screen_name, s.uid2 FROM users u, socnet s WHERE s.uid = u.uid"),
    "s2": ("SELECT u.uid, t.tid, c.lat, c.lng FROM users u, tweets t, curloc c "
           "WHERE u.uid = t.uid AND c.tid = t.tid"),
    "s3": ("SELECT u.uid, t.tid, r.url FROM users u, tweets t, urls r "
           "WHERE u.uid = t.uid AND r.tid = t.tid"),
}


def _run(topology: Topology, mode: Literal["lazy", "eager"], sla_s: float, rate: float,
         duration_s: float, audit_s: float) -> dict[str, Any]:
    tag = f"bl{int(time.time()) % 100000}_{mode}"
    store = CatalogStore(topology.catalog_dsn)
    executor = Executor(topology, mode=mode, pusher=tag, share_pushes=False)  # as §8.2
    executor.start()  # pushes only its own sharings, even beside a running `smile serve`
    auditor = Auditor(topology, audit_s)
    service = SharingService(topology, store, executor)
    ids: list[int] = []
    try:
        where = locate_relations(topology)
        for rel in ("users", "socnet", "tweets", "curloc", "urls"):
            service.publish(where[rel], f"public.{rel}")
        for name, query in SHARINGS.items():
            done = service.submit(f"{tag}_{name}", query, sla_s, 0.001)
            if done.row.status != "admitted":
                raise RuntimeError(f"{name} was rejected: {done.row.reason}")
            ids.append(done.row.id)
        auditor.start()
        started = time.time()
        WorkloadDriver(topology).run(rate, duration_s)
        time.sleep(audit_s + 0.5)  # one more snapshot
        names = [f"{tag}_{n}" for n in SHARINGS]
        row = store.conn.execute(
            "SELECT coalesce(sum(seconds), 0), count(*), coalesce(sum(rows), 0) FROM "
            "smile_catalog.push_log WHERE sharing = ANY(%s) AND at >= to_timestamp(%s)",
            (names, started)).fetchone()
        viol = store.conn.execute(
            "SELECT coalesce(sum(v), 0), coalesce(max(s), 0) FROM (SELECT max(violations) v, "
            "max(staleness_s) s FROM smile_catalog.audit WHERE sharing = ANY(%s) "
            "GROUP BY sharing) x", (names,)).fetchone()
        assert row is not None and viol is not None
        return {"work_s": round(float(row[0]), 4), "pushed_vertices": int(row[1]),
                "tuples_moved": int(row[2]), "violations": int(viol[0]),
                "max_staleness_s": round(float(viol[1]), 3)}
    finally:
        auditor.close()
        for sid in ids:
            service.withdraw(sid)
        executor.close()
        store.close()


def bench_lazy(topology: Topology, *, sla_s: float = 10.0, rate: float = 100.0,
               duration_s: float = 60.0, audit_s: float = 5.0) -> dict[str, Any]:
    lazy = _run(topology, "lazy", sla_s, rate, duration_s, audit_s)
    eager = _run(topology, "eager", sla_s, rate, duration_s, audit_s)
    return {
        "sharings": sorted(SHARINGS), "sla_s": sla_s, "rate": rate, "duration_s": duration_s,
        "lazy_work_s": lazy["work_s"], "eager_work_s": eager["work_s"],
        "ratio": round(lazy["work_s"] / eager["work_s"], 3) if eager["work_s"] else None,
        "lazy_violations": lazy["violations"], "eager_violations": eager["violations"],
        "lazy": lazy, "eager": eager,
    }


