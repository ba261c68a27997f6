"""Fig. 5: each operator's time against the tuples it takes, measured on the running cloud's
PostgreSQL (DeltaToRel, CopyDelta between two machines, Union, the PostgreSQL join) and through
Spark (the join over JDBC), with the least-squares line the time model uses and its R².

The paper states that all four edge types are linear in tuples (measured for 1 … 10k tuples);
its figure gives no coefficients, so the headline is how well a line fits here (R²). Our Union
is a view over its inputs and moves no tuples (docs/design/agents.md): its panel is flat, and
the paper's copying Union is drawn beside it (`union_copy`).

Must not: change the time model the executor runs with (`smile calibrate` does that).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from smile.bench.calibrate import calibrate, figure, fitted

if TYPE_CHECKING:
    from smile.experiments.context import Context

FLAT = ("union",)
"""Edge types whose time does not grow with tuples here (left out of `min_r2`)."""
PAPER = {"claim": "every edge type's time is linear in its tuples (1 … 10k tuples)"}
REPEAT = {"tiny": 1, "small": 3, "full": 5}
"""Times each size is measured (the median is kept)."""


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
    report = calibrate(ctx.topology(), repeat=ctx.pick(REPEAT), spark=spark_session(ctx.settings))
    rows: list[dict[str, Any]] = []
    lines: dict[str, dict[str, Any]] = {}
    for kind, points in report["measured"].items():
        line = fitted(report, kind)
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
           "min_r2": min(v["r2"] for k, v in lines.items() if k not in FLAT),
           "flat": {k: "moves no tuples (the plan's Union makes a view): its time is a "
                       "constant, and R² of a line through it says nothing" for k in FLAT},
           "paper": PAPER}
    out.json(doc)
    return doc
