"""Tuple rates of the running vertices as the agents measured them (their PUSH_DONEs), so that
the load model charges what the data really does.

The optimizer estimates a join's delta rate from uniform statistics: |ΔL| · |X| / distinct
keys. The evaluation data is skewed the way the paper's is: the users whose rows change most
are those who tweet most, so a change of `loc` meets ~470 of its user's tweets, not the 3 the
statistics promise, and `loc⋈tweets` grows 40× faster than estimated. What a vertex's edge took
in per second of *data time* — the tuples of its pushes over the span of timestamps they
covered — is the truth for that computation wherever it runs, so it is keyed by the vertex's
computation (its label without the machine) and handed to the optimizer in the catalog
snapshot (`CatalogSnapshot.observed`), which uses it instead of the estimate.

Must not: decide anything, or block the executor (a lock held for an insert into a short list).
"""

from __future__ import annotations

import bisect
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datetime import datetime

RATE_WINDOW_S = 180.0
"""Seconds of data time a rate covers: a few pushes of the laziest sharings (SLA 60 s). Data
time, not the wall-clock window of the operator load (`steady.WINDOW_S`)."""
MIN_SPAN_S = 60.0
"""Below this much data time a rate says more about a few pushes than about the traffic, and
the estimate (with the skew measured at submission) stands. A skewed join's rate is a sum of
rare large bursts (a change of the most active user's `loc` meets 27k tweets): over a few
seconds, the first pushes of `loc⋈tweets` measure a fraction of its mean, and a low rate
taken for the truth would let admission fill the machine past its bound."""


class ObservedRates:
    def __init__(self, window_s: float = RATE_WINDOW_S, min_span_s: float = MIN_SPAN_S) -> None:
        self.window_s = window_s
        self.min_span_s = min_span_s
        self.spans: dict[str, list[tuple[float, float, int]]] = {}
        """computation → (TS a push took its vertex from, and to, epoch seconds; tuples it
        took in), in the order of their end."""
        self.lock = threading.Lock()

    def add(self, computation: str, start: datetime, end: datetime, tuples: int) -> None:
        """A push of `computation` that took its vertex from `start` to `end` (the TS its
        operator found and left, under the vertex's lock) and took in `tuples`. A push that
        found the vertex there already (start = end) adds nothing. The rate is the tuples of
        the spans over their lengths: each push's own, whatever order the answers of the pushes
        of several sharings come in, and none that no push answered for — a deploy's fill
        advances the shared vertices to its t0 without a push. (The rows over the span from the
        first push's TS, read after it, to the last's took in data no push had counted:
        `tweets`, 2000 rows/s, read 1200–1470.)"""
        a, b = start.timestamp(), end.timestamp()
        if b <= a:
            return
        with self.lock:
            q = self.spans.setdefault(computation, [])
            bisect.insort(q, (b, a, tuples))
            while q and q[-1][0] - q[0][0] >= self.window_s:
                q.pop(0)

    def rates(self) -> dict[str, float]:
        """computation → tuples per second of data time, over the spans of its pushes within
        the window, once they cover `min_span_s`."""
        out: dict[str, float] = {}
        with self.lock:
            for key, q in self.spans.items():
                covered = sum(b - a for b, a, _ in q)
                if covered >= self.min_span_s:
                    out[key] = sum(n for _, _, n in q) / covered
        return out

    def forget(self, keep: set[str]) -> None:
        """Drop the computations no longer in D."""
        with self.lock:
            for key in set(self.spans) - keep:
                del self.spans[key]
