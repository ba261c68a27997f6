"""`smile calibrate`: measure the time model on the live cloud (paper Fig. 5).

For 1 … 10 000 tuples, each operator is run for real on the machines' PostgreSQL: DeltaToRel
(a delta into a 10 000-row relation), CopyDelta (a delta from machine 1 to machine 2), Union
(two partial deltas into one as plans run it: into the view over both, so it moves a TS and no
tuples; beside it, as a baseline, `union_copy`, the paper's Union copying them into a table)
and the PostgreSQL Join (a delta into a 10 000-row relation, one output tuple per delta tuple:
its points are at `join_tuples(n, n)`, as the time model counts a join's), the Aggregate (a delta
grouped into 1 000 groups with a count, a sum and a max) and the Pad (a LEFT JOIN's delta whose
rows' keys meet a 10 000-row relation half the time), and the Recompute (`recompute_points`:
a relation of 1 000 … 100 000 rows moved from machine 1 into its copy on machine 2, and two
of them joined into a third on machine 1, each point at the tuples the time model charges it:
rows read, moved and written), and the Skip (a delta's TS moved past n rows its one reader
is past, none written: a flat line). Each size is
measured `repeat` times (median), lines a + b·tuples are fitted
(`smile.costmodel.time_model.fit_linear`), saved as JSON, and drawn as a PNG. Given a Spark
session, the Spark join (the same join, read and written over JDBC) is measured too, at
1 000 … 100 000 tuples since its fixed cost dwarfs small inputs.

Must not: leave its scratch tables behind.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from psycopg import sql

from smile.costmodel.time_model import TimeModel, fit_linear
from smile.db import connect
from smile.delta_capture.registry import ensure_capture_schema
from smile.deploy.install import drop
from smile.errors import ConfigError
from smile.harness.output import save_png
from smile.operators import vertex_ts
from smile.operators.aggregate import AggregateSpec, Call, aggregate_delta, create_aggregate
from smile.operators.copy_delta import copy_delta
from smile.operators.delta_to_rel import delta_to_rel
from smile.operators.join import JoinSpec, Side, join_delta
from smile.operators.join_spark import join_delta_spark
from smile.operators.pad import PadSide, PadSpec, pad_delta
from smile.operators.recompute import Input, RecomputeSpec, recompute, skip
from smile.operators.union import union
from smile.optimizer.plan import join_tuples

if TYPE_CHECKING:
    from pathlib import Path

    import psycopg
    from matplotlib.figure import Figure

    from smile.topology import Topology

SIZES = (1, 10, 100, 1000, 3000, 10_000)
RECOMPUTE_SIZES = (1000, 10_000, 100_000)
SPARK_SIZES = (1000, 10_000, 100_000)
BASE_ROWS = 10_000
T0 = datetime(2000, 1, 1, tzinfo=UTC)
_TABLES = ("cal_u", "cal_rel", "cal_other", "cal_d", "cal_p1", "cal_p2", "cal_uc", "cal_j",
           "cal_js", "cal_cd", "cal_agg", "cal_rr", "cal_rd", "cal_pad", "cal_rsrc", "cal_rsrc2",
           "cal_rdst", "cal_rjoin")
"""Scratch relations, the view `cal_u` first (it reads `cal_p1` and `cal_p2`)."""


def _ts(i: int) -> datetime:
    return T0 + timedelta(seconds=i)


def _prepare(conn: psycopg.Connection[Any]) -> None:
    ensure_capture_schema(conn)
    _drop(conn)
    for t in ("cal_rel", "cal_other"):
        conn.execute(sql.SQL("CREATE TABLE {} (k int, v text)").format(sql.Identifier("_smile", t)))
        conn.execute(sql.SQL("INSERT INTO {} SELECT g, md5(g::text) FROM generate_series(1, %s) g")
                     .format(sql.Identifier("_smile", t)), (BASE_ROWS,))
    conn.execute("CREATE INDEX ON _smile.cal_other (k)")
    for t in ("cal_d", "cal_p1", "cal_p2", "cal_uc", "cal_cd"):
        conn.execute(sql.SQL("CREATE TABLE {} (k int, v text, __sign smallint, __ts timestamptz)")
                     .format(sql.Identifier("_smile", t)))
    conn.execute("CREATE VIEW _smile.cal_u AS SELECT k, v, __sign, __ts FROM _smile.cal_p1 "
                 "UNION ALL SELECT k, v, __sign, __ts FROM _smile.cal_p2")
    # the Pad's other side: every other key of the relations, and its (empty) delta
    conn.execute("CREATE TABLE _smile.cal_rr AS SELECT k AS rk, v AS rv FROM _smile.cal_other "
                 "WHERE k % 2 = 0")
    conn.execute("CREATE INDEX ON _smile.cal_rr (rk)")
    conn.execute("CREATE TABLE _smile.cal_rd (rk int, rv text, __sign smallint, "
                 "__ts timestamptz)")
    conn.execute("CREATE TABLE _smile.cal_pad (k int, v text, rk int, rv text, "
                 "__sign smallint, __ts timestamptz)")
    for t in ("cal_j", "cal_js"):
        conn.execute(sql.SQL("CREATE TABLE {} (k int, v text, w text, __sign smallint, "
                             "__ts timestamptz)").format(sql.Identifier("_smile", t)))
    conn.execute("ANALYZE")
    vertex_ts.put(conn, {f"cal:{t}": _ts(0) for t in _TABLES})
    create_aggregate(conn, AGGREGATE)


def _drop(conn: psycopg.Connection[Any]) -> None:
    for t in _TABLES:
        drop(conn, ("_smile", t))
    vertex_ts.delete_like(conn, "cal:%")


def _fill(conn: psycopg.Connection[Any], table: str, n: int, lo: int, hi: int) -> None:
    """n delta rows stamped in (lo, hi], keyed into the 10 000-row relations."""
    conn.execute(sql.SQL(
        "INSERT INTO {} SELECT 1 + (g * 7919) %% %s, md5(g::text), 1, %s "
        "FROM generate_series(1, %s) g"
    ).format(sql.Identifier("_smile", table)), (BASE_ROWS, _ts(hi), n))
    vertex_ts.advance(conn, f"cal:{table}", _ts(hi))


class _Stopwatch:
    """`with watch(runs, "kind"):` appends the block's seconds to runs["kind"]."""

    def __init__(self, runs: dict[str, list[float]], kind: str) -> None:
        self.runs, self.kind = runs, kind

    def __enter__(self) -> None:
        self.started = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.runs[self.kind].append(time.perf_counter() - self.started)


def _join_spec(dst: str) -> JoinSpec:
    """A delta of `cal_d` into the 10 000-row `cal_other`: one output tuple per delta tuple."""
    d = Side(("_smile", "cal_d"), "cal:cal_d", {("d", "k"): "k", ("d", "v"): "v"})
    x = Side(("_smile", "cal_other"), "cal:cal_other", {("x", "k"): "k", ("x", "v"): "v"})
    xd = Side(("_smile", "cal_u"), "cal:cal_u", {("x", "k"): "k", ("x", "v"): "v"})
    return JoinSpec(d, x, xd, ("_smile", dst), f"cal:{dst}", ((("d", "k"), ("x", "k")),),
                    ((("d", "k"), "k"), (("d", "v"), "v"), (("x", "v"), "w")), "left")


AGGREGATE = AggregateSpec(("_smile", "cal_d"), "cal:cal_d", ("_smile", "cal_agg"), "cal:cal_agg",
                          ("(k % 1000)",), (Call("count", None), Call("sum", "k"),
                                             Call("max", "v")),
                          ("_smile", "cal_rel"), "cal:cal_rel")
"""A delta grouped into 1 000 groups (its max never recomputed: the calibration only inserts)."""
PAD = PadSpec(PadSide(("_smile", "cal_rel"), "cal:cal_rel", ("_smile", "cal_d"), "cal:cal_d",
                      ("k", "v"), ("k",)),
              PadSide(("_smile", "cal_rr"), "cal:cal_rr", ("_smile", "cal_rd"), "cal:cal_rd",
                      ("rk", "rv"), ("rk",)), "left", ("_smile", "cal_pad"), "cal:cal_pad")
"""A LEFT JOIN's padded rows: each delta row's key probed in a relation holding half the
keys."""


def calibrate(topology: Topology, repeat: int = 3, spark: Any = None) -> dict[str, Any]:
    if len(topology.machines) < 2:
        raise ConfigError("calibration copies between two machines: the cloud needs at least 2")
    m1, m2 = topology.machines[0], topology.machines[1]
    measured: dict[str, list[tuple[float, float]]] = {
        k: [] for k in ("delta_to_rel", "copy_delta", "union", "union_copy", "join_pg",
                        "aggregate", "pad", "skip")}
    with connect(m1.dsn, autocommit=True, what=m1.name) as a, \
            connect(m2.dsn, autocommit=True, what=m2.name) as b:
        _prepare(a)
        _prepare(b)
        step = 0
        vertex_ts.put(a, {"cal:cal_skip": _ts(0)})
        try:
            for n in SIZES:
                runs: dict[str, list[float]] = {k: [] for k in measured}
                for _ in range(repeat):
                    lo, hi = step, step + 1
                    step += 1
                    _fill(a, "cal_d", n, lo, hi)
                    with _Stopwatch(runs, "delta_to_rel"):
                        delta_to_rel(a, delta=("_smile", "cal_d"), rel=("_smile", "cal_rel"),
                                     columns=["k", "v"], rel_vertex="cal:cal_rel",
                                     delta_vertex="cal:cal_d", to_ts=_ts(hi))
                    with _Stopwatch(runs, "copy_delta"):
                        copy_delta(a, b, src_table=("_smile", "cal_d"), src_vertex="cal:cal_d",
                                   dst_table=("_smile", "cal_cd"), dst_vertex="cal:cal_cd",
                                   columns=["k", "v"], to_ts=_ts(hi))
                    _fill(a, "cal_p1", n // 2 or 1, lo, hi)
                    _fill(a, "cal_p2", n - n // 2, lo, hi)
                    parts = [(("_smile", "cal_p1"), "cal:cal_p1"),
                             (("_smile", "cal_p2"), "cal:cal_p2")]
                    with _Stopwatch(runs, "union"):
                        union(a, inputs=parts, dst_table=("_smile", "cal_u"),
                              dst_vertex="cal:cal_u", columns=["k", "v"], to_ts=_ts(hi))
                    with _Stopwatch(runs, "union_copy"):
                        union(a, inputs=parts, dst_table=("_smile", "cal_uc"),
                              dst_vertex="cal:cal_uc", columns=["k", "v"], to_ts=_ts(hi))
                    vertex_ts.advance(a, "cal:cal_other", _ts(hi))
                    with _Stopwatch(runs, "join_pg"):
                        join_delta(a, _join_spec("cal_j"), _ts(hi))
                    with _Stopwatch(runs, "aggregate"):
                        aggregate_delta(a, AGGREGATE, _ts(hi))
                    vertex_ts.advance(a, "cal:cal_rd", _ts(hi))
                    with _Stopwatch(runs, "pad"):
                        pad_delta(a, PAD, _ts(hi))
                    with _Stopwatch(runs, "skip"):  # past `cal_d`'s n rows, none written
                        skip(a, "cal:cal_skip", _ts(hi), [(a, "cal:cal_rel")])
                for kind, values in runs.items():  # a join reads n rows and writes n
                    tuples = join_tuples(n, n) if kind == "join_pg" else float(n)
                    measured[kind].append((tuples, statistics.median(values)))
            measured["recompute"] = recompute_points(m1.name, a, m2.name, b, repeat)
            if spark is not None:
                measured["join_spark"] = []
                for n in (100, *SPARK_SIZES):  # the first is a warm-up, not recorded
                    spark_runs: dict[str, list[float]] = {"join_spark": []}
                    for _ in range(repeat):
                        lo, hi = step, step + 1
                        step += 1
                        _fill(a, "cal_d", n, lo, hi)
                        for v in ("cal_other", "cal_u"):
                            vertex_ts.advance(a, f"cal:{v}", _ts(hi))
                        with _Stopwatch(spark_runs, "join_spark"):
                            join_delta_spark(a, m1.dsn, spark, _join_spec("cal_js"), _ts(hi))
                    if n != 100:
                        measured["join_spark"].append(
                            (join_tuples(n, n), statistics.median(spark_runs["join_spark"])))
        finally:
            _drop(a)
            _drop(b)
    model = TimeModel()
    baselines = {}
    for kind, points in measured.items():
        if kind in BASELINES:
            baselines[kind] = asdict(fit_linear(points))
        else:
            model = model.with_line(kind, fit_linear(points))  # type: ignore[arg-type]
    return {"time_model": model.to_json(), "measured": measured, "baselines": baselines,
            "calibrated": sorted(set(measured) - set(BASELINES)),
            "defaults_kept": sorted(set(model.lines) - set(measured))}


def _relation(conn: psycopg.Connection[Any], table: str, n: int) -> None:
    """`table` anew with `n` rows (k, v), at TS 0."""
    ident = sql.Identifier("_smile", table)
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident))
    conn.execute(sql.SQL("CREATE TABLE {} (k int, v text)").format(ident))
    conn.execute(sql.SQL("INSERT INTO {} SELECT g, md5(g::text) FROM generate_series(1, %s) g")
                 .format(ident), (n,))
    conn.execute(sql.SQL("CREATE INDEX ON {} (k)").format(ident))
    conn.execute(sql.SQL("ANALYZE {}").format(ident))
    vertex_ts.put(conn, {f"cal:{table}": _ts(0)})


def _input(machine: str, table: str, names: tuple[str, str]) -> Input:
    """A relation read as it is at TS t (its delta, `cal_d`, is never read)."""
    return Input(machine, ("_smile", table), f"cal:{table}", ("_smile", "cal_d"), "cal:cal_d",
                 ("k", "v"), names, ("int", "text"))


def recompute_points(ma: str, a: psycopg.Connection[Any], mb: str, b: psycopg.Connection[Any],
                     repeat: int) -> list[tuple[float, float]]:
    """(tuples, median seconds) of Recomputes: a copy of an n-row relation of machine `ma`
    on `mb` (n read, n moved, n written), and on `ma` the join of two n-row relations on
    their key (2n read, n written)."""
    conns = {ma: a, mb: b}
    copy = RecomputeSpec(mb, ("_smile", "cal_rdst"), "cal:cal_rdst", ("k", "v"),
                         (_input(ma, "cal_rsrc", ("k", "v")),))
    join = RecomputeSpec(ma, ("_smile", "cal_rjoin"), "cal:cal_rjoin", ("k", "v", "w"),
                         (_input(ma, "cal_rsrc", ("k", "v")), _input(ma, "cal_rsrc2", ("k2", "w"))),
                         (("k", "k2"),))
    points = []
    for n in RECOMPUTE_SIZES:
        _relation(a, "cal_rsrc", n)
        _relation(a, "cal_rsrc2", n)
        _relation(b, "cal_rdst", 0)
        _relation(a, "cal_rjoin", 0)
        a.execute("ALTER TABLE _smile.cal_rjoin ADD COLUMN w text")
        runs: dict[str, list[float]] = {"copy": [], "join": []}
        for i in range(1, repeat + 1):
            for table in ("cal_rsrc", "cal_rsrc2"):
                vertex_ts.advance(a, f"cal:{table}", _ts(i))
            a.execute("CHECKPOINT")  # as a push after a while pays first-touch page images
            with _Stopwatch(runs, "copy"):
                recompute(conns, copy, _ts(i))
            with _Stopwatch(runs, "join"):
                recompute(conns, join, _ts(i))
        points += [(3.0 * n, statistics.median(runs["copy"])),
                   (3.0 * n, statistics.median(runs["join"]))]
    return points


LABELS = {"delta_to_rel": "DeltaToRel", "copy_delta": "CopyDelta", "union": "Union (a view)",
          "union_copy": "Union into a table", "join_pg": "Join (PostgreSQL)",
          "join_spark": "Join (Spark)", "aggregate": "Aggregate", "pad": "Pad (outer join)",
          "recompute": "Recompute", "skip": "Skip (a TS moved)"}
BASELINES = ("union_copy",)
"""Measured and drawn beside the edge types, not part of the time model: no plan runs them."""


def fitted(report: dict[str, Any], kind: str) -> dict[str, float]:
    """The line `calibrate` fitted to `kind`'s points: the time model's, or a baseline's."""
    line: dict[str, float] = (report["time_model"] | report.get("baselines", {}))[kind]
    return line


def figure(report: dict[str, Any], r2: dict[str, float] | None = None,
           title: str | None = None) -> Figure:
    """Fig. 5's analogue: one panel per edge type, measurements and the fitted line (with its
    R², when given)."""
    from matplotlib.figure import Figure

    kinds = [k for k in LABELS if k in report["measured"]]
    fig = Figure(figsize=(3.6 * len(kinds), 3.6), layout="constrained")
    for i, kind in enumerate(kinds):
        ax = fig.add_subplot(1, len(kinds), i + 1)
        pts = report["measured"][kind]
        line = fitted(report, kind)
        xs = [p[0] for p in pts]
        label = f"{line['a'] * 1e3:.2f} ms + {line['b'] * 1e6:.2f} µs/tuple"
        if r2 is not None:
            label += f"\nR² = {r2[kind]:.3f}"
        ax.plot(xs, [p[1] for p in pts], "o", label="measured (median)")
        ax.plot(xs, [line["a"] + line["b"] * x for x in xs], "-", label=label)
        ax.set_title(LABELS[kind], fontsize=10)
        ax.set_xlabel("tuples")
        ax.set_ylabel("seconds")
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    return fig


def draw_png(report: dict[str, Any], path: Path) -> None:
    """`figure` as a PNG."""
    save_png(figure(report), path, dpi=100)
