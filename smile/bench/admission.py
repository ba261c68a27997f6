"""`smile bench admission`: Table 1 admitted into the global plan at several tweet rates on a
cloud started by `smile up`, over its REST API — what is admitted and rejected (and why), the
violations the auditor counts, and each machine's predicted load (the global plan at the rates
measured while traffic runs) beside its measured load (the operator seconds its agent reported
in PUSH_DONEs, from the push log, over the round after its first 30 s) and the CPU those
seconds took (`measured_cpu`, `PushDone.cpu_s`: the rest of the wall time is waiting), and per
machine its largest edges, predicted beside measured, where a ratio off 1 comes from; and what
the whole box's CPU did over the same seconds (`box`: busy, iowait and steal cores, each
daemon's and the bench's own), to tell a box our processes saturate from a neighbour's.

Per rate: traffic starts, admission waits `warmup_s` (the window over which the box's idle
cores and load are measured, `steady.WINDOW_S`, so that it measures this round's traffic
only), the 25 sharings are submitted with the paper's SLA mix (named `S<i>_<rate>`, so each
round's audit stands alone), traffic goes on for `duration_s`, the figures are read, and the
round's sharings are withdrawn. The dataset is loaded once at the start (after withdrawing whatever
was admitted: replacing a relation under a sharing is refused).

Must not: leave its sharings admitted.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from smile.dataset.sharings import paper_sla, table1
from smile.errors import CloudError
from smile.executor.steady import WINDOW_S
from smile.executor.store import CatalogStore
from smile.harness.cloud import expect_ok, prepared_cloud, withdraw_all
from smile.harness.footprint import TICKS_PER_S, box_ticks, cpu_between, cpu_by_daemon, cpu_ticks
from smile.harness.traffic import Traffic

if TYPE_CHECKING:
    from smile.api.client import Client
    from smile.settings import Settings
    from smile.topology import Topology


EDGES_SHOWN = 6
"""Edges per machine a round reports, the largest first."""
LATE_SHOWN = 5
"""Snapshots over its SLA a violating sharing reports: the worst, in time order."""


def bench_admission(settings: Settings, topology: Topology, *, machines: int = 3,
                    rates: tuple[float, ...] = (100.0, 1000.0, 3000.0),
                    duration_s: float = 180.0, tweets: int = 20_000, warmup_s: float = WINDOW_S,
                    penalty: float = 0.0001) -> dict[str, Any]:
    if len(topology.machines) < machines:
        raise CloudError(f"the cloud has {len(topology.machines)} machines, not {machines}: "
                         f"start it with `smile up --machines {machines}`")
    api, _ = prepared_cloud(settings, topology, [m.name for m in topology.machines[:machines]],
                            tweets)
    rounds = [_round(api, topology, rate, duration_s, warmup_s, penalty,
                     str(settings.state_dir))
              for rate in rates]
    return {"machines": machines, "tweets": tweets, "duration_s": duration_s,
            "warmup_s": warmup_s, "sla": "S1–S7 10 s, S8–S15 40 s, S16–S25 60 s",
            "rounds": rounds,
            "no_violations": all(r["violations"] == 0 for r in rounds),
            "load_ratios_within_0.7_1.3": all(
                m["ratio"] is None or 0.7 <= m["ratio"] <= 1.3
                for r in rounds for m in r["machines"] if m["measured"] >= 0.01)}


def _round(api: Client, topology: Topology, rate: float, duration_s: float, warmup_s: float,
           penalty: float, state_dir: str) -> dict[str, Any]:
    tag = f"_{int(rate)}"
    total = warmup_s + 5 * len(table1()) + duration_s
    traffic = Traffic(topology).start(rate, total)
    time.sleep(warmup_s)
    decided = _submitted(api, tag, penalty)
    admitted_at, admitted_wall = time.monotonic(), datetime.now(UTC)
    settle_s = min(30.0, duration_s / 3)  # first pushes after the fills, catch-up of the queue
    time.sleep(settle_s)
    steady_from = datetime.now(UTC)
    box_from = _box(state_dir)
    time.sleep(duration_s - settle_s)
    box = _box_between(box_from, _box(state_dir))
    pushed = _pushed(topology, steady_from)
    machines = expect_ok(*api.call("GET", "/machines?edges=100000"), "reading the machines")
    ours, worst, late = _staleness(api, tag, admitted_wall)
    traffic.join(total + 60)
    withdraw_all(api, suffix=tag)
    traffic.check()
    admitted = [d for d in decided if d["status"] == "admitted"]
    return {
        "rate": rate, "achieved_rate": round(traffic.achieved_rate or 0.0, 1),
        "admitted": len(admitted), "rejected": len(decided) - len(admitted),
        "rejections": [{"name": d["name"], "reason": d["reason"]} for d in decided
                       if d["status"] != "admitted"],
        "violations": sum(s["violations"] for s in ours),
        "max_staleness_over_sla": round(worst, 3) if ours else None,
        "violating": late,
        "seconds_after_admission": round(time.monotonic() - admitted_at, 1),
        "machines": [_machine(m, pushed) for m in machines],
        "pushes_by_served": pushes_by_served(
            [e for m in machines for e in m.get("edges", [])],
            {v: n for (_, v), (n, _) in pushed["pushes"].items()}, pushed["steady_s"]),
        "box": box,
    }


def _submitted(api: Client, tag: str, penalty: float) -> list[dict[str, Any]]:
    """Table 1 submitted with the paper's SLA mix, each as NAME + `tag`: the decisions."""
    decided = []
    for spec in table1():
        status, body = api.call("POST", "/sharings", {  # a deploy under load takes minutes
            "name": spec.name + tag, "sql": spec.sql, "staleness_s": paper_sla(spec.name),
            "penalty_per_tuple": penalty}, timeout=900)
        if status not in (201, 422):
            raise CloudError(f"submitting {spec.name} failed ({status}): {body}")
        decided.append({"name": spec.name, "status": body["status"], "reason": body["reason"],
                        "cp_s": body.get("cp_s"), "period_s": body.get("period_s")})
    return decided


def _pushed(topology: Topology, steady_from: datetime) -> dict[str, Any]:
    """The agents' own operator seconds (wall and CPU) by machine and by vertex, and the
    pushes by vertex, summed over the steady part of the round, and its seconds."""
    store = CatalogStore(topology.catalog_dsn)
    try:
        return {"busy": store.busy(steady_from), "cpu": store.busy(steady_from, cpu=True),
                "by_vertex": store.busy_by_vertex(steady_from),
                "pushes": store.pushes_by_vertex(steady_from),
                "steady_s": (datetime.now(UTC) - steady_from).total_seconds()}
    finally:
        store.close()


def _staleness(api: Client, tag: str, admitted: datetime
               ) -> tuple[list[dict[str, Any]], float, list[dict[str, Any]]]:
    """The round's admitted sharings, the worst staleness the auditor saw against the SLA,
    and those that violated it with their worst snapshots."""
    listed = expect_ok(*api.call("GET", "/sharings"), "listing sharings")
    ours = [s for s in listed if s["name"].endswith(tag) and s["status"] == "admitted"]
    worst, late = 0.0, []
    for s in ours:
        points = expect_ok(*api.call("GET", f"/sharings/{s['id']}/history"), "history")["points"]
        mine = max([0.0, *(p["staleness_s"] / s["sla_s"] for p in points)])
        worst = max(worst, mine)
        if s["violations"]:
            late.append({"name": s["name"], "sla_s": s["sla_s"], "violations": s["violations"],
                         "max_staleness_over_sla": round(mine, 3),
                         "late_points": _late_points(points, s["sla_s"], admitted)})
    return ours, worst, late


def _machine(m: dict[str, Any], pushed: dict[str, Any]) -> dict[str, Any]:
    """A machine's predicted load (`GET /machines`) beside its measured one (`_pushed`)."""
    steady_s = pushed["steady_s"]
    predicted = m["predicted_load"] or 0.0
    measured = pushed["busy"].get(m["name"], 0.0) / steady_s
    return {"name": m["name"], "predicted": round(predicted, 4),
            "measured": round(measured, 4), "bound": m["bound"],
            # what those operator seconds took from the cores (PushDone.cpu_s)
            "measured_cpu": round(pushed["cpu"].get(m["name"], 0.0) / steady_s, 4),
            "ratio": round(predicted / measured, 3) if measured > 0 else None,
            "edges": _edges(m, pushed["by_vertex"], pushed["pushes"], steady_s)}


def pushes_by_served(edges: list[dict[str, Any]], pushed: dict[str, int],
                     seconds: float) -> dict[str, list[float | None]]:
    """The edges' pushes per second, [predicted, measured], summed by how many sharings
    each serves (`GET /machines?edges=…`'s `sharings`; "all" over every edge with a
    prediction): the load model's count of a shared vertex's pushes (`load.ride_split`) held
    against the push log's (`pushed`: vertex → pushes over `seconds`).

    >>> e = [{"vertex": "a", "sharings": ["S1"], "pushes_per_s": 0.2},
    ...      {"vertex": "b", "sharings": ["S1", "S2"], "pushes_per_s": 0.3}]
    >>> pushes_by_served(e, {"a": 20, "b": 15}, 100.0)
    {'1': [0.2, 0.2], '2': [0.3, 0.15], 'all': [0.5, 0.35]}
    """
    sums: dict[str, list[float]] = {}
    for e in edges:
        if e.get("pushes_per_s") is None:
            continue
        for key in (str(len(e.get("sharings") or ())), "all"):
            acc = sums.setdefault(key, [0.0, 0.0])
            acc[0] += e["pushes_per_s"]
            acc[1] += pushed.get(e["vertex"], 0) / seconds
    order = sorted(sums, key=lambda k: (k == "all", int(k) if k.isdigit() else 0))
    return {k: [_r(sums[k][0]), _r(sums[k][1])] for k in order}


def _box(state_dir: str) -> dict[str, Any]:
    """What the box's CPU has done so far: its ticks, each daemon's process's and this
    process's (the traffic driver)."""
    return {"at": time.monotonic(), "box": box_ticks(), "daemons": cpu_by_daemon(state_dir),
            "bench": cpu_ticks(os.getpid())}


def _box_between(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Cores the box spent over the round's steady part, and on what: busy, waiting for a
    disk, taken by another guest (`steal`: a box whose operators all slow down at once with
    nothing of ours busier is a neighbour's doing); per daemon of the cloud, and the bench
    (its traffic driver). What the operators' load is measured beside."""
    seconds = max(after["at"] - before["at"], 1e-9)
    tick = TICKS_PER_S
    cores = {k: round((after["box"].get(k, 0) - v) / tick / seconds, 3)
             for k, v in before["box"].items()}
    return {**cores, "bench": round((after["bench"] - before["bench"]) / tick / seconds, 3),
            "daemons": cpu_between(before["daemons"], after["daemons"], seconds, tick)}


def _late_points(points: list[dict[str, Any]], sla_s: float, admitted: datetime,
                 top: int = LATE_SHOWN) -> list[dict[str, Any]]:
    """The auditor's snapshots of a sharing over its SLA, the worst `top`: when (seconds after
    the last submission; negative while the round's deploys ran) and how stale, with the
    capture lag in it — a late push and a capturer behind its source look different here.

    >>> t0 = datetime(2026, 1, 1, tzinfo=UTC)
    >>> _late_points([{"at": "2026-01-01T00:00:05+00:00", "staleness_s": 9.0},
    ...               {"at": "2026-01-01T00:00:10+00:00", "staleness_s": 10.123,
    ...                "capture_lag_s": 0.4}], 10.0, t0)
    [{'s_after_submissions': 10.0, 'staleness_s': 10.12, 'capture_lag_s': 0.4}]
    """
    over = sorted((p for p in points if p["staleness_s"] > sla_s),
                  key=lambda p: -p["staleness_s"])[:top]
    return [{"s_after_submissions": round(
                 (datetime.fromisoformat(p["at"]) - admitted).total_seconds(), 1),
             "staleness_s": round(p["staleness_s"], 2),
             "capture_lag_s": None if p.get("capture_lag_s") is None
             else round(p["capture_lag_s"], 2)} for p in sorted(over, key=lambda p: p["at"])]


def _edges(machine: dict[str, Any], by_vertex: dict[tuple[str, str], float],
           pushes: dict[tuple[str, str], tuple[int, float]], steady_s: float,
           top: int = EDGES_SHOWN) -> list[dict[str, Any]]:
    """The machine's `top` edges by predicted or measured load: where a ratio comes from.
    Measured over the round's steady part (the push log), predicted as `GET /machines` said
    at its end. Beside each load, as [predicted, measured]: its pushes per second, the tuples
    per second the time model charges it, and the seconds a push takes — a load off by the
    pushes is the push periods', by the tuples the rates', by the seconds per push the time
    model's.

    >>> m = {"name": "m1", "edges": [{"vertex": "a@m1", "kind": "union", "predicted": 0.02,
    ...                               "pushes_per_s": 0.5, "tuples_per_s": 100.0}]}
    >>> _edges(m, {("m1", "a@m1"): 1.0}, {("m1", "a@m1"): (25, 4000.0)}, 100.0)[0]
    {'vertex': 'a@m1', 'kind': 'union', 'predicted': 0.02, 'measured': 0.01, \
'pushes_per_s': [0.5, 0.25], 'tuples_per_s': [100.0, 40.0], 's_per_push': [0.04, 0.04]}
    """
    name = machine["name"]

    def row(vertex: str, kind: str | None, predicted: float, pushes_s: float | None,
            tuples_s: float | None) -> dict[str, Any]:
        n, tuples = pushes.get((name, vertex), (0, 0.0))
        measured = by_vertex.get((name, vertex), 0.0) / steady_s
        return {"vertex": vertex, "kind": kind, "predicted": round(predicted, 4),
                "measured": round(measured, 4),
                "pushes_per_s": [_r(pushes_s), _r(n / steady_s)],
                "tuples_per_s": [_r(tuples_s, 1), _r(tuples / steady_s, 1)],
                "s_per_push": [_r(predicted / pushes_s if pushes_s else None),
                               _r(measured * steady_s / n if n else None)]}

    rows = {e["vertex"]: row(e["vertex"], e["kind"], e["predicted"] or 0.0,
                             e.get("pushes_per_s"), e.get("tuples_per_s"))
            for e in machine.get("edges", [])}
    for m, vertex in by_vertex:
        if m == name and vertex not in rows:
            rows[vertex] = row(vertex, None, 0.0, None, None)
    ranked = sorted(rows.values(), key=lambda r: -max(r["predicted"], r["measured"]))
    return ranked[:top]


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)
