"""Time per operator: seconds = a + b · tuples, one line per edge type (paper Fig. 5), with
separate lines for the PostgreSQL and the Spark join. A join's tuples are the rows it writes plus a
fifth of the driving rows it reads (`optimizer.plan.join_tuples`); the other edges', what they
write (a DeltaToRel's: the delta rows it applies).

`fit_linear` fits a line to measured (tuples, seconds) points by least squares; calibration and
the executor's online re-fit both use it. The defaults are this project's own measurements on
the 2-core development box (docs/design/optimizer.md); `smile calibrate` replaces them.

Must not: measure anything (the calibration command does, outside this package).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from smile.errors import ConfigError

EdgeKind = Literal["copy_delta", "delta_to_rel", "union", "join_pg", "join_spark", "aggregate",
                   "pad", "recompute", "skip"]
EDGE_KINDS: tuple[EdgeKind, ...] = ("copy_delta", "delta_to_rel", "union", "join_pg",
                                    "join_spark", "aggregate", "pad", "recompute", "skip")


@dataclass(frozen=True)
class Line:
    a: float
    """Fixed seconds per push."""
    b: float
    """Seconds per tuple."""

    def seconds(self, tuples: float) -> float:
        """Seconds to push `tuples` tuples through the edge.

        >>> Line(0.01, 1e-5).seconds(1000)
        0.02
        """
        return self.a + self.b * max(0.0, tuples)


def fit_linear(points: list[tuple[float, float]]) -> Line:
    """Least-squares line through (tuples, seconds); a and b are kept non-negative.

    >>> fit_linear([(0, 1.0), (10, 2.0), (20, 3.0)])
    Line(a=1.0, b=0.1)
    """
    if len(points) < 2:
        raise ConfigError("fitting a time line needs at least two measurements")
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return Line(max(0.0, my), 0.0)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    b = max(0.0, b)
    a = max(0.0, my - b * mx)
    return Line(round(a, 12), round(b, 15))


DISPATCH_S = 0.012
"""Per edge, on top of its operator: the executor's PUSH to the agent over the broker, the
agent's bookkeeping and the PUSH_DONE back — measured online by the executor (round trip minus
the agent's own time) and re-fitted; this default is what it measured on the development box."""


@dataclass(frozen=True)
class TimeModel:
    lines: dict[str, Line] = field(default_factory=lambda: dict(DEFAULT_LINES))
    dispatch_s: float = DISPATCH_S
    scales: dict[str, float] = field(default_factory=dict)
    """Per vertex (its label): the time its edge was measured to take ÷ its kind's line, where
    the executor has measured it; 1 elsewhere. One line per kind is fitted over every edge of
    that kind, but a DeltaToRel into a wide table with an index to maintain, or fed updates it
    applies in place, takes 0.5–2× what the line says for its tuples."""

    def line(self, kind: EdgeKind) -> Line:
        return self.lines[kind]

    def logged_line(self, kind: str) -> Line:
        """The line a push log's `kind` is priced by: an edge's own; a relation left stale,
        the skip's (a TS moved, as the executor prices it)."""
        return self.lines["skip" if kind == "stale" else kind]

    def edge_line(self, kind: EdgeKind, vertex: str | None = None) -> Line:
        """The line of the edge that writes `vertex`: its kind's, scaled as measured.

        >>> TimeModel(scales={"v@m1": 2.0}).edge_line("union", "v@m1") == Line(
        ...     2 * DEFAULT_LINES["union"].a, 2 * DEFAULT_LINES["union"].b)
        True
        """
        line = self.lines[kind]
        f = self.scales.get(vertex, 1.0) if vertex is not None else 1.0
        return line if f == 1.0 else Line(line.a * f, line.b * f)

    def seconds(self, kind: EdgeKind, tuples: float, vertex: str | None = None) -> float:
        """An edge's time in a push: its operator's line plus the dispatch overhead."""
        return self.edge_line(kind, vertex).seconds(tuples) + self.dispatch_s

    def join(self, output_tuples: float) -> tuple[float, str]:
        """The faster join path for this many output tuples: (seconds, 'postgres'|'spark')."""
        pg = self.seconds("join_pg", output_tuples)
        spark = self.seconds("join_spark", output_tuples)
        return (pg, "postgres") if pg <= spark else (spark, "spark")

    def with_line(self, kind: EdgeKind, line: Line) -> TimeModel:
        return replace(self, lines={**self.lines, kind: line})

    def to_json(self) -> dict[str, Any]:
        doc = {k: asdict(v) for k, v in self.lines.items()} | {"_dispatch_s": self.dispatch_s}
        if self.scales:
            doc["_scales"] = dict(self.scales)
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any] | None) -> TimeModel:
        """
        >>> m = TimeModel(scales={"v@m1": 0.5})
        >>> TimeModel.from_json(m.to_json()) == m
        True
        """
        if not doc:
            return cls()
        doc = dict(doc)
        dispatch = float(doc.pop("_dispatch_s", DISPATCH_S))
        try:
            scales = {str(k): float(v) for k, v in dict(doc.pop("_scales", {})).items()}
            lines = dict(DEFAULT_LINES) | {k: Line(float(v["a"]), float(v["b"]))
                                          for k, v in doc.items()}
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"time model is malformed: {exc!r}") from exc
        unknown = set(lines) - set(EDGE_KINDS)
        if unknown:
            raise ConfigError(f"unknown edge kinds in the time model: {sorted(unknown)}")
        return cls(lines, dispatch, scales)


DEFAULT_LINES: dict[str, Line] = {
    # `smile calibrate` on the 2-core development box, 3 local machines, with index probes
    # into X̂, asynchronous commit and larger buffer caches: the median of three runs
    # (docs/design/optimizer.md)
    "copy_delta": Line(0.0025, 2.45e-6),
    "delta_to_rel": Line(0.0031, 2.8e-6),
    # a plan's Union moves the TS of the view over its inputs and no tuples (`smile calibrate
    # --repeat 5`: 0.73 ms, flat from 1 to 10 000 tuples; copying them into a
    # table, as the paper's Union did, 1.1 ms + 0.68 µs/tuple)
    "union": Line(0.0007, 0.0),
    # a join's tuples are the rows it writes plus 0.2 × the driving rows it reads (one each in
    # the calibration, `optimizer.plan.join_tuples`): 6.7e-6 per output row measured
    "join_pg": Line(0.0036, 5.6e-6),
    # `smile calibrate` with Spark (local[*], warm session, JDBC in and out, 1k…100k tuples):
    # a fixed ~0.57 s per job and a steeper slope than PostgreSQL's on one box
    # (docs/design/semantics.md §8), so here the model keeps joins on PostgreSQL; on a Spark
    # cluster, calibrate again
    "join_spark": Line(0.57, 5.75e-6),
    # an aggregate reads its input's delta slice once, grouped, and upserts a row per group
    # touched; a pad reads both sides' slices and probes the other side per changed key
    # (docs/design/beyond_spj.md): `smile calibrate` measures both
    "aggregate": Line(0.004, 4e-6),
    "pad": Line(0.004, 1.2e-5),
    # a relation vertex recomputed at t (`optimizer.recompute`): its tuples are the rows it
    # reads, those it moves between machines once more, and those it writes
    # (`recompute_tuples`); `smile calibrate` measures it
    "recompute": Line(0.01, 1.0e-6),
    # a delta skipped past what no reader will read moves its TS and writes nothing, as a
    # Union does (`optimizer.recompute`): the Union's line, until the executor re-fits it
    "skip": Line(0.0007, 0.0),
}
