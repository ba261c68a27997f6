"""Fig. 5: each operator's time against the tuples it takes, measured on the running cloud's
PostgreSQL (DeltaToRel, CopyDelta between two machines, Union, the PostgreSQL join) and through
Spark (the join over JDBC), with the least-squares line the time model uses and its R².

The paper states that all four edge types are linear in tuples (measured for 1 … 10k tuples);
its figure gives no coefficients, so the headline is how well a line fits here (R²).

Must not: change the time model the executor runs with (`smile calibrate` does that).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from smile.bench.calibrate import calibrate

if TYPE_CHECKING:
    from smile.experiments.context import Context

PAPER = {"claim": "every edge type's time is linear in its tuples (1 … 10k tuples)"}
LABELS = {"delta_to_rel": "DeltaToRel", "copy_delta": "CopyDelta", "union": "Union",
          "join_pg": "Join (PostgreSQL)", "join_spark": "Join (Spark)"}


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
    out.png(_draw(report, lines))
    doc = {"experiment": "fig05", "measured": True, "lines": lines,
           "min_r2": min(v["r2"] for v in lines.values()), "paper": PAPER}
    out.json(doc)
    return doc


def _draw(report: dict[str, Any], lines: dict[str, dict[str, Any]]) -> Any:
    from matplotlib.figure import Figure

    kinds = [k for k in LABELS if k in report["measured"]]
    fig = Figure(figsize=(3.6 * len(kinds), 3.6), layout="constrained")
    for i, kind in enumerate(kinds):
        ax = fig.add_subplot(1, len(kinds), i + 1)
        pts = report["measured"][kind]
        line = report["time_model"][kind]
        xs = [p[0] for p in pts]
        ax.plot(xs, [p[1] for p in pts], "o", label="measured (median)")
        ax.plot(xs, [line["a"] + line["b"] * x for x in xs], "-",
                label=f"{line['a'] * 1e3:.1f} ms + {line['b'] * 1e6:.2f} µs·n\n"
                      f"R² = {lines[kind]['r2']:.3f}")
        ax.set_title(LABELS[kind], fontsize=10)
        ax.set_xlabel("tuples")
        ax.set_ylabel("seconds")
        ax.legend(fontsize=7)
    fig.suptitle("Fig. 5: time of each edge type against its tuples (measured here)")
    return fig
