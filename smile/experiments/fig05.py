"""Fig. 5: each operator's time against the tuples it takes, measured on the running cloud's
PostgreSQL (DeltaToRel, CopyDelta between two machines, Union, the PostgreSQL join) and through
Spark (the join over JDBC), with the least-squares line the time model uses and its R².

The paper states that all four edge types are linear in tuples (measured for 1 … 10k tuples);
its figure gives no coefficients, so the headline is how well a line fits here (R²).

Must not: change the time model the executor runs with (`smile calibrate` does that).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from smile.bench.calibrate import calibrate, figure

if TYPE_CHECKING:
    from smile.experiments.context import Context

PAPER = {"claim": "every edge type's time is linear in its tuples (1 … 10k tuples)"}


def r_squared(points: list[tuple[float, float]], a: float, b: float) -> float:
    """1 − SS_res / SS_tot of the line a + b·x through `points` (1.0 when y is constant and
    the line goes through it)."""
    ys = [y for _, y in points]
    mean = sum(ys) / len(ys)
    ss_tot = sum((y - mean) ** 2 for y in ys)
    ss_res = sum((y - (a + b * x)) ** 2 for x, y in points)
    if ss_tot == 0:
        return 1.0 if ss_res == 0 else 0.0
    return 1.0 - ss_res / ss_tot


def run(ctx: Context) -> dict[str, Any]:
    from smile.spark import spark_session

    out = ctx.outputs("fig05")
    report = calibrate(ctx.topology(), repeat=5 if ctx.full else 1 if ctx.tiny else 3,
                       spark=spark_session(ctx.settings))
    rows, lines = [], {}
    for kind, points in report["measured"].items():
        line = report["time_model"][kind]
        pts = [(float(x), float(y)) for x, y in points]
        lines[kind] = {"a_ms": round(line["a"] * 1e3, 3),
                       "b_us_per_tuple": round(line["b"] * 1e6, 4),
                       "r2": round(r_squared(pts, line["a"], line["b"]), 4),
                       "path": "spark" if kind == "join_spark" else "postgresql"}
        rows += [{"operator": kind, "path": lines[kind]["path"], "tuples": int(x),
                  "seconds": y, "fitted_seconds": line["a"] + line["b"] * x} for x, y in pts]
    out.csv(rows)
    out.png(figure(report, {k: v["r2"] for k, v in lines.items()},
                   "Fig. 5: time of each edge type against its tuples (measured here)"))
    doc = {"experiment": "fig05", "measured": True, "lines": lines,
           "min_r2": min(v["r2"] for v in lines.values()), "paper": PAPER}
    out.json(doc)
    return doc
