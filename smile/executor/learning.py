"""The online time model (paper §8.2's feedback loop): every PUSH_DONE's operator seconds,
learnt into the line of its edge's kind, into its vertex's own scale against that line, and
into the per-edge dispatch overhead.

- A kind's line is re-fitted every `REFIT_EVERY` measurements to those of the last
  `MODEL_MEMORY_S` (at most 300), once there are `REFIT_EVERY` of them spanning three sizes.
- A vertex's scale is what its own recent pushes took ÷ what its kind's line gives for their
  tuples, within `SCALE_RANGE`: one line fits edges whose seconds per tuple differ tenfold
  (an index probe and a scan), so each edge carries its own factor.
- Pushes beside a deploy's fill (not `steady`) take longer for it: they count only until the
  steady ones since are enough to go by.
- A kind nothing running has measured within the memory goes back to its calibrated line: a
  line learnt under a load that has gone would otherwise refuse every later sharing.

`generation` changes whenever the model does, so a reader may cache what it computes from it.

Pure: measurements in, a model out. Must not: read clocks it is not handed (tests pass
`now`), touch a database, the broker or the executor.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from collections import defaultdict, deque
from dataclasses import replace
from typing import TYPE_CHECKING

from smile.costmodel.time_model import TimeModel, fit_linear

if TYPE_CHECKING:
    from collections.abc import Collection

    from smile.costmodel.time_model import EdgeKind

log = logging.getLogger("smile.executor")
MODEL_MEMORY_S = 300.0
"""A re-fit uses the measurements of the last this many seconds only: operator times measured
under an earlier, heavier load (a round at a higher rate, a burst of deploys) would otherwise
keep predicting that load for the 300 points a line holds, many minutes at a low push rate."""
REFIT_EVERY = 20
"""Measurements of a kind between two re-fits of its line."""
SCALE_POINTS = 5
"""Measurements of one vertex's edge within `MODEL_MEMORY_S` before its own scale is used;
re-computed at every `SCALE_POINTS`-th, and at every re-fit of its kind's line."""
SCALE_RANGE = (0.25, 4.0)
"""The bounds of a vertex's scale: a few pushes caught behind a deploy's fill must not make an
edge look free or ruinous."""
DISPATCH_POINTS = 200
"""The dispatch overhead is the median of this many last measurements, re-taken every 20."""

Point = tuple[float, float, float, bool]
"""A measurement: (monotonic time, tuples, seconds, steady — not beside a deploy)."""


def due(points: deque[Point], counts: dict[str, int], key: str, every: int,
        point: Point) -> list[tuple[float, float]] | None:
    """Keep `point` of `key`; at every `every`-th of them, the (tuples, seconds) to fit on,
    else None (`selected`).

    >>> pts, n = deque(), {"k": 0}
    >>> def add(t, s, steady):
    ...     return due(pts, n, "k", 2, (t, 10.0, s, steady))
    >>> add(0.0, 9.0, False), add(1.0, 8.0, True)  # one steady of two: all count
    (None, [(10.0, 9.0), (10.0, 8.0)])
    >>> add(2.0, 1.0, True), add(3.0, 1.0, True)  # three steady since: only they count
    (None, [(10.0, 8.0), (10.0, 1.0), (10.0, 1.0)])
    >>> add(4.0, 7.0, False), add(5.0, 1.0, True)  # a burst again: all count
    (None, [(10.0, 9.0), (10.0, 8.0), (10.0, 1.0), (10.0, 1.0), (10.0, 7.0), (10.0, 1.0)])
    """
    points.append(point)
    counts[key] = counts.get(key, 0) + 1
    if counts[key] % every:
        return None
    return selected(points, every, point[0])


def selected(points: deque[Point], every: int, now: float) -> list[tuple[float, float]]:
    """The (tuples, seconds) of `points` to fit on at `now`: those of the last
    `MODEL_MEMORY_S`, only the steady ones after the last push beside a deploy once there
    are `every` of those."""
    recent = [p for p in points if p[0] >= now - MODEL_MEMORY_S]
    burst = max((p[0] for p in recent if not p[3]), default=float("-inf"))
    steady = [p for p in recent if p[3] and p[0] > burst]
    return [(n, s) for _, n, s, _ in (steady if len(steady) >= every else recent)]


def bounded(scale: float) -> float:
    """A vertex's scale within `SCALE_RANGE`, to a thousandth.

    >>> bounded(9.0), bounded(0.1234)
    (4.0, 0.25)
    """
    lo, hi = SCALE_RANGE
    return round(min(hi, max(lo, scale)), 3)


class ModelLearner:
    def __init__(self, model: TimeModel | None = None) -> None:
        self.calibrated = model or TimeModel()
        """The model it started with: a kind's line goes back to it when nothing of the kind
        is left to measure (`unlearn`)."""
        self._model = self.calibrated
        self.generation = 0
        self.refits = 0
        self.lock = threading.RLock()
        self.points: dict[EdgeKind, deque[Point]] = defaultdict(lambda: deque(maxlen=300))
        """Per kind of edge: its last measurements."""
        self._measured: dict[str, int] = {}
        self.vertex_points: dict[str, deque[Point]] = defaultdict(lambda: deque(maxlen=60))
        """Per vertex label: its edge's last pushes."""
        self.vertex_measured: dict[str, int] = {}
        self.vertex_kind: dict[str, EdgeKind] = {}
        """Per vertex label: the kind of its edge (whose line its scale is relative to)."""
        self.dispatch: deque[float] = deque(maxlen=DISPATCH_POINTS)

    @property
    def model(self) -> TimeModel:
        return self._model

    def current(self) -> tuple[TimeModel, int]:
        """The model and its generation, read together."""
        with self.lock:
            return self._model, self.generation

    def _set(self, model: TimeModel) -> None:
        self._model = model
        self.generation += 1

    # -- what a push measured -------------------------------------------------------------
    def learn_push(self, label: str, kind: EdgeKind, charged: float, elapsed: float, *,
                   advanced: bool, steady: bool = True, now: float | None = None) -> None:
        """A PUSH_DONE of the edge into `label`: `charged` tuples in `elapsed` seconds. One
        with tuples teaches the vertex's scale first (so that the re-fit it brings about
        re-scales it with this push too), then its kind's line. One that `advanced` its
        vertex over a span without a change measured the edge's fixed work, which the load
        model charges each push: its vertex's scale, not its kind's line (fitted to sizes).
        One that found the vertex there already did nothing and teaches nothing."""
        if charged > 0:
            self.learn_vertex(label, kind, charged, elapsed, now, steady)
            self.learn_line(kind, charged, elapsed, now, steady)
        elif advanced:
            self.learn_vertex(label, kind, 0.0, elapsed, now, steady)

    def learn_dispatch(self, overhead: float) -> None:
        """The per-edge dispatch overhead: the median of the last `DISPATCH_POINTS`."""
        with self.lock:
            self.dispatch.append(max(0.0, overhead))
            if len(self.dispatch) % 20 == 0:
                self._set(replace(self._model, dispatch_s=statistics.median(self.dispatch)))

    def learn_line(self, kind: EdgeKind, tuples: float, elapsed: float,
                   now: float | None = None, steady: bool = True) -> None:
        """Every `REFIT_EVERY` measurements of a kind, its line is fitted to those `due`
        gives, if there are `REFIT_EVERY` of them spanning three sizes. A new line re-scales
        every scaled vertex of the kind: a scale is relative to the line it was measured
        against. One with its `SCALE_POINTS` recent pushes is scaled to them anew; one with
        fewer keeps its prediction at the tuples of those it has (its scale × old line ÷ new
        line there), or its scale when it has none left."""
        at = time.monotonic() if now is None else now
        with self.lock:
            recent = due(self.points[kind], self._measured, kind, REFIT_EVERY,
                         (at, tuples, elapsed, steady))
            if recent is None or len(recent) < REFIT_EVERY or len({n for n, _ in recent}) < 3:
                return
            old = self._model.line(kind)
            model = self._model.with_line(kind, fit_linear(recent))
            new, scales = model.line(kind), dict(model.scales)
            for label, k in self.vertex_kind.items():
                if k != kind or label not in scales:
                    continue
                mine = selected(self.vertex_points.get(label, deque()), SCALE_POINTS, at)
                if len(mine) >= SCALE_POINTS:
                    scale = self._scale(model, kind, mine)
                elif mine and new.seconds(n := sum(x for x, _ in mine) / len(mine)) > 0:
                    scale = bounded(scales[label] * old.seconds(n) / new.seconds(n))
                else:
                    scale = None
                if scale is not None:
                    scales[label] = scale
            self._set(replace(model, scales=scales))
            self.refits += 1

    def learn_vertex(self, label: str, kind: EdgeKind, tuples: float, elapsed: float,
                     now: float | None = None, steady: bool = True) -> None:
        """The edge into `label`, measured against its kind's line: every `SCALE_POINTS`-th
        measurement its scale becomes what its pushes `due` gives took ÷ what the line gives
        for their tuples; while it has fewer than that within the memory, at each of them,
        from those it has (a sharing at SLA 45 s pushes every 30 s: left on its kind's line
        until its fifth push, an edge would be charged a mix of edges tenfold apart). A label
        whose edge changed kind (a re-routed vertex) starts again."""
        at = time.monotonic() if now is None else now
        with self.lock:
            if self.vertex_kind.get(label, kind) != kind:
                self.vertex_points.pop(label, None)
                self.vertex_measured.pop(label, None)
                self._set(replace(self._model, scales={
                    v: f for v, f in self._model.scales.items() if v != label}))
            points = self.vertex_points[label]
            recent = due(points, self.vertex_measured, label, SCALE_POINTS,
                         (at, tuples, elapsed, steady))
            self.vertex_kind[label] = kind
            if recent is None:  # between two SCALE_POINTS-th: only while it has fewer
                recent = selected(points, SCALE_POINTS, at)
                if len(recent) >= SCALE_POINTS:
                    return
            scale = self._scale(self._model, kind, recent)
            if scale is not None and self._model.scales.get(label) != scale:
                self._set(replace(self._model, scales={**self._model.scales, label: scale}))

    @staticmethod
    def _scale(model: TimeModel, kind: EdgeKind,
               recent: list[tuple[float, float]]) -> float | None:
        """What `recent` pushes of an edge took ÷ what its kind's line gives for their tuples,
        within `SCALE_RANGE`; None when the line gives nothing."""
        line = model.line(kind)
        expected = sum(line.seconds(n) for n, _ in recent)
        if expected <= 0:
            return None
        return bounded(sum(s for _, s in recent) / expected)

    # -- forgetting ---------------------------------------------------------------------------
    def forget(self, labels: Collection[str]) -> None:
        """What was learnt of vertices no longer among `labels` (withdrawn): their scales and
        the measurements behind them; a vertex of the same label admitted later starts from
        its kind's line. Kinds no running vertex has pushed go back to their calibrated line."""
        keep = set(labels)
        with self.lock:
            scales = {v: f for v, f in self._model.scales.items() if v in keep}
            if scales != self._model.scales:
                self._set(replace(self._model, scales=scales))
            for gone in set(self.vertex_points) - keep:
                del self.vertex_points[gone]
            for gone in set(self.vertex_measured) - keep:
                del self.vertex_measured[gone]
            for gone in set(self.vertex_kind) - keep:
                del self.vertex_kind[gone]
            self.unlearn(set(self.points) - set(self.vertex_kind.values()))

    def unlearn(self, kinds: Collection[EdgeKind]) -> None:
        """Back to the calibrated line for `kinds`, their measurements and their vertices'
        scales dropped; with nothing measured left at all, the calibrated dispatch overhead
        too. A line re-fitted under a load that has gone would otherwise stay as it was with
        nothing to re-fit it, and refuse every later sharing on its times."""
        gone = set(kinds)
        with self.lock:
            model = self._model
            for kind in sorted(gone):
                self.points.pop(kind, None)
                self._measured.pop(kind, None)
                base = self.calibrated.line(kind)
                if model.line(kind) != base:
                    model = model.with_line(kind, base)
            if gone and not self.points and self.dispatch:
                self.dispatch.clear()
                if model.dispatch_s != self.calibrated.dispatch_s:
                    model = replace(model, dispatch_s=self.calibrated.dispatch_s)
            scaled = {v: f for v, f in model.scales.items()
                      if self.vertex_kind.get(v) not in gone}
            if scaled != model.scales:
                model = replace(model, scales=scaled)
            if model != self._model:
                self._set(model)
                log.info("time model: the calibrated line again for %s (nothing of the kind "
                         "measured to re-fit it)", ", ".join(sorted(gone)))

    def expire(self, now: float | None = None) -> None:
        """`unlearn` the kinds whose newest measurement is older than `MODEL_MEMORY_S`: a
        re-fit would find none of their points, so the line learnt from them no longer stands
        for anything running."""
        at = time.monotonic() if now is None else now
        with self.lock:
            stale = {k for k, pts in self.points.items()
                     if not pts or pts[-1][0] < at - MODEL_MEMORY_S}
            if stale:
                self.unlearn(stale)
