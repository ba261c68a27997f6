"""`smile bench push --fractions F1,F2,…`: for each fraction of the bases changed, both ways of
pushing the same plan forced — incremental (every vertex runs its edge) and recompute (each
relation vertex recomputed at `t`, the deltas skipped; `optimizer.recompute`) — then the path
the time model chooses (some relations perhaps left stale, recomputed untimed before the next
forced round), each timed against `REFRESH MATERIALIZED VIEW` of the same query, in
one run on one installed plan (the setup, rounds and checks of `bench.push`).

Each fraction runs three rounds, one per path, each changing `F` of every base afresh (the same
keys, so each round's delta has the same size); the chosen path is decided from the pending
delta rows (counted in the bases' ΔR), the relations' sizes (`pg_class.reltuples` after the
round's VACUUM ANALYZE) and the time model's lines — the calibrated one in the state directory
when there is one — exactly as the executor decides, and that decision is untimed. `speedup`
is REFRESH ÷ the chosen path's time; `us_per_delta_row_vertex` is the incremental path's
seconds per delta row per vertex pushed, in µs. `cpu_s` is each path's CPU seconds on the
box (`bench.cpu`), `refresh_cpu_s` REFRESH's (the median of the three), and `cpu_speedup`
REFRESH's ÷ the chosen path's: the work it saves, where `speedup` is the wall time.
`cpu_by_kind` splits each path's CPU by kind of process (`CpuMeter.by_kind`: backends, WAL
senders decoding for capture, …), `refresh_cpu_by_kind` that of the REFRESH timed beside the
chosen path.

Must not: leave its tables, publications or slots behind (`bench.push` drops them).
"""

from __future__ import annotations

import secrets
import statistics
import threading
import time
from typing import TYPE_CHECKING, Any

from psycopg import sql

from smile.bench.push import (
    QUERIES,
    _baseline,
    _bases,
    _capturers,
    _dropped,
    _planned,
    _round,
    _wait_captured,
    bench_catalog,
    cpu_figures,
    pushing,
    significant,
)
from smile.costmodel.time_model import TimeModel
from smile.db import connect
from smile.deploy.advance import advance_vertex
from smile.deploy.install import MV_SCHEMA, install_plan, uninstall_plan
from smile.deploy.physical import physical_plan
from smile.errors import SmileError
from smile.operators import vertex_ts
from smile.optimizer.global_plan import GlobalPlan
from smile.optimizer.recompute import push_paths, seconds_of_updates, update_rates

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from datetime import datetime

    from smile.deploy.physical import PhysicalPlan
    from smile.optimizer.plan import Vertex
    from smile.optimizer.recompute import Forced, Mode, PushPaths
    from smile.topology import Topology


def relation_rows(conns: dict[str, Any], phys: PhysicalPlan) -> dict[Vertex, float]:
    """Rows of every relation vertex of the plan (`reltuples`; a base's also under its
    relation on machine '')."""
    out: dict[Vertex, float] = {}
    for v, pv in phys.vertices.items():
        if v.is_delta:
            continue
        row = conns[v.machine].execute("SELECT greatest(reltuples, 0) FROM pg_class "
                                       "WHERE oid = to_regclass(%s)",
                                       (f'"{pv.table[0]}"."{pv.table[1]}"',)).fetchone()
        out[v] = float(row[0]) if row and row[0] is not None else 0.0
        if v.base:
            out[v.at("")] = out[v]
    return out


def _restore(conns: dict[str, Any], phys: PhysicalPlan) -> None:
    """Recompute, untimed, each relation a chosen round left stale, at its TS: a forced round
    starts from the plan whole, as the first round did."""
    for v, pv in phys.vertices.items():
        if not v.is_delta and vertex_ts.is_stale(conns[v.machine], pv.ts_key):
            advance_vertex(conns, phys, v, vertex_ts.read(conns[v.machine], pv.ts_key),
                           mode="recompute")


def _pending(conns: dict[str, Any], phys: PhysicalPlan, mv: Vertex, t: datetime
             ) -> dict[Vertex, int]:
    """Rows of each base delta that prices the push of `mv` (`update_rates`), stamped after
    TS(mv) up to `t`."""
    since = vertex_ts.read(conns[mv.machine], phys.vertices[mv].ts_key)
    return {s: vertex_ts.slice_rows(conns[s.machine], phys.vertices[s].table, since, t)
            for s in update_rates(phys.plan, [mv])}


def bench_push_paths(topology: Topology, rows: int, fractions: Sequence[float],
                     query: str = "join", model: TimeModel | None = None,
                     dataflow: bool = True) -> dict[str, Any]:
    if query not in QUERIES:
        raise SmileError(f"no query {query!r}; the queries are {', '.join(QUERIES)}")
    if len(topology.machines) < 3:
        raise SmileError("the push benchmark needs 3 machines")
    if not fractions or any(not 0 < f <= 1 for f in fractions):
        raise SmileError("fractions must be in (0, 1]")
    model = model or TimeModel()
    tag = secrets.token_hex(3)
    ms = topology.machines[:3]
    names = [f"bp{tag}_{x}" for x in "abc"]
    conns = {m.name: connect(m.dsn, autocommit=True, what=m.name) for m in topology.machines}
    stop = threading.Event()
    threads: list[threading.Thread] = []
    phys: PhysicalPlan | None = None
    try:
        _bases(conns, ms, names, rows, query == "outer")
        threads = _capturers(conns, ms, stop)
        text = QUERIES[query].format(a=names[0], b=names[1], c=names[2])
        catalog = bench_catalog(topology, ms, names, rows, fractions[0])
        decision, plan = _planned(catalog, text, tag, "optimizer", names)
        phys = physical_plan(GlobalPlan().add(plan.plan, decision.entry(plan)),
                             catalog.schemas())
        keys = [(s.machine, phys.vertices[s].ts_key) for s in plan.plan.sources]
        _wait_captured(conns, keys, 120)
        install_plan(conns, phys)
        home = conns[plan.plan.mv.machine]
        mv_name = f"bench_mv_{tag}"
        _baseline(conns, ms, names, home, text, mv_name)
        view = sql.Identifier(MV_SCHEMA, decision.sharing.name)
        order = phys.order()
        pushed = sum(1 for v in order if not phys.vertices[v].base)
        rounds = []
        with pushing(topology, dataflow) as pusher:
            for fraction in fractions:
                step = max(1, round(1 / fraction))
                runs: dict[str, dict[str, Any]] = {}
                decided: list[PushPaths] = []
                for path in ("incremental", "recompute", "chosen"):
                    def modes(t: datetime, path: str = path,
                              decided: list[PushPaths] = decided) -> Mapping[Vertex, Mode]:
                        assert phys is not None
                        if path != "chosen":
                            _restore(conns, phys)
                        mv = plan.plan.mv
                        x = seconds_of_updates(phys.plan, [mv], _pending(conns, phys, mv, t))
                        sizes = relation_rows(conns, phys)
                        force: Forced | None = None if path == "chosen" else path  # type: ignore[assignment]
                        paths = push_paths(phys.plan, [mv], model, x, lambda v: sizes.get(v, 0.0),
                                           force)
                        decided.append(paths)
                        return paths.modes
                    runs[path] = _round(conns, ms, names, home, phys, keys, order, step, False,
                                        mv_name, view, modes, pusher)
                rounds.append(_fraction_report(fraction, runs, decided, rows, step, pushed))
        return {"rows": rows, "query": query, "vertices_pushed": pushed,
                "push": "dataflow" if dataflow else "in order",
                "plan": decision.reason, "time_model": {
                    k: model.to_json()[k] for k in ("recompute", "delta_to_rel", "join_pg")},
                "rounds": rounds}
    finally:
        if phys is not None:
            uninstall_plan(conns, phys)
        stop.set()
        for th in threads:
            th.join(10)
        _dropped(conns, ms, names, tag)


def _fraction_report(fraction: float, runs: dict[str, dict[str, Any]],
                     decided: list[PushPaths], rows: int, step: int, pushed: int
                     ) -> dict[str, Any]:
    """One fraction's figures (see the module)."""
    chosen = decided[-1]
    refresh = statistics.median(r["full_refresh_s"] for r in runs.values())
    cpu = cpu_figures([runs["chosen"]["push_cpu_s"]], [r["refresh_cpu_s"] for r in runs.values()])
    delta_rows = 2 * 3 * (rows // step)
    inc = runs["incremental"]["incremental_s"]
    return {
        "fraction": fraction,
        "incremental_s": significant(inc),
        "recompute_s": significant(runs["recompute"]["incremental_s"]),
        "chosen": chosen.chosen,
        "chosen_s": significant(runs["chosen"]["incremental_s"]),
        "refresh_s": significant(refresh),
        "speedup": significant(refresh / runs["chosen"]["incremental_s"]),
        "cpu_s": {p: significant(r["push_cpu_s"]) if r["push_cpu_s"] is not None else None
                  for p, r in runs.items()},
        "cpu_by_kind": {p: r["push_cpu_by_kind"] for p, r in runs.items()},
        "refresh_cpu_s": cpu["refresh_cpu_s"],
        "refresh_cpu_by_kind": runs["chosen"]["refresh_cpu_by_kind"],
        "cpu_speedup": cpu["cpu_speedup"],
        "mv_equal": all(r["mv_equals_refresh"] for r in runs.values()),
        "chosen_over_best": significant(runs["chosen"]["incremental_s"] / min(
            inc, runs["recompute"]["incremental_s"])),
        "predicted": chosen.to_json(),
        "delta_rows": delta_rows,
        "us_per_delta_row_vertex": significant(inc * 1e6 / (delta_rows * pushed)),
        "operators": {p: r["operators"] for p, r in runs.items()},
        "vertices": {p: r["vertices"] for p, r in runs.items()},
        "refresh_each_s": {p: significant(r["full_refresh_s"]) for p, r in runs.items()},
        "started_at": time.strftime("%H:%M:%S"),
    }
