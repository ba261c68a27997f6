"""The executor's load meter: the operator seconds each machine's vertices took, from the
PUSH_DONEs, over the windows the load checks read — the last minute, the last
`SUSTAINED_S`, and the steady load outside deploys that admission holds against a bound
(`steady.steady_load`) — and the spans of the deploys those measures leave out.

Must not: decide anything, or read a database (the executor hands it each PUSH_DONE).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from contextlib import contextmanager
from typing import TYPE_CHECKING

from smile.executor.machine_load import SUSTAINED_S
from smile.executor.steady import WINDOW_S, steady_load

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

KEEP_S = max(SUSTAINED_S, WINDOW_S)
"""How long a push's operator seconds are kept: the longest window any measure reads."""

Busy = tuple[float, float, str]
"""(when done, monotonic; operator seconds; vertex label) of one PUSH_DONE."""


class BusyMeter:
    def __init__(self, machines: Iterable[str] = ()) -> None:
        self.lock = threading.Lock()
        self._busy: dict[str, deque[Busy]] = {m: deque(maxlen=100_000) for m in machines}
        self._last_steady: dict[str, float] = {}
        """The steady load last measured (`steady`): kept while deploys fill the window."""

    def note(self, machine: str, at: float, seconds: float, label: str) -> None:
        """A push of `label` on `machine`, done at `at` (monotonic), took `seconds`; what is
        older than `KEEP_S` goes (every admission reads these)."""
        with self.lock:
            q = self._busy.setdefault(machine, deque(maxlen=100_000))
            q.append((at, seconds, label))
            while q and q[0][0] < at - KEEP_S:
                q.popleft()

    def pushes(self) -> dict[str, list[Busy]]:
        """Each machine's pushes kept now, oldest first."""
        with self.lock:
            return {m: list(q) for m, q in self._busy.items()}

    def edges(self, window_s: float = WINDOW_S,
              now: float | None = None) -> dict[str, dict[str, float]]:
        """Per machine, each vertex's operator seconds per second over the last `window_s`
        (its incoming edge's work)."""
        since = (time.monotonic() if now is None else now) - window_s
        out: dict[str, dict[str, float]] = {}
        for m, pushes in self.pushes().items():
            mine = out.setdefault(m, {})
            for at, s, label in pushes:
                if at >= since:
                    mine[label] = mine.get(label, 0.0) + s / window_s
        return out

    def load(self, window_s: float = WINDOW_S) -> dict[str, float]:
        """Each machine's operator seconds per second over the last `window_s`."""
        return {m: sum(edges.values()) for m, edges in self.edges(window_s).items()}

    def steady(self, deploys: Sequence[tuple[float, float]],
               window_s: float = WINDOW_S, now: float | None = None) -> dict[str, float]:
        """Each machine's operator seconds per second outside `deploys` (`steady.py`); the
        last such value while deploys fill the window; empty before there is one."""
        at = time.monotonic() if now is None else now
        load = steady_load(self.pushes(), deploys, at, window_s)
        with self.lock:
            if load is not None:
                self._last_steady = load
            return dict(self._last_steady)


class DeploySpans:
    """The (start, end) of recent deploys on the monotonic clock (end = inf while one runs):
    what the steady measures and the time model's steady pushes leave out."""

    def __init__(self, kept_s: float = KEEP_S) -> None:
        self.kept_s = kept_s
        self._spans: list[list[float]] = []
        self._lock = threading.Lock()

    @contextmanager
    def running(self) -> Iterator[None]:
        """Mark a deploy for as long as the block runs."""
        span = self.begin()
        try:
            yield
        finally:
            self.end(span)

    def begin(self, now: float | None = None) -> list[float]:
        """A deploy starts: its span, to `end`; those older than `kept_s` go."""
        at = time.monotonic() if now is None else now
        span = [at, float("inf")]
        with self._lock:
            self._spans = [d for d in self._spans if d[1] > at - self.kept_s]
            self._spans.append(span)
        return span

    def end(self, span: list[float], now: float | None = None) -> None:
        with self._lock:
            span[1] = time.monotonic() if now is None else now

    def add(self, start: float, end: float) -> None:
        """A deploy that ran from `start` to `end` (inf: still running)."""
        with self._lock:
            self._spans.append([start, end])

    def clear(self) -> None:
        with self._lock:
            self._spans.clear()

    def running_now(self) -> bool:
        """Whether a deploy is under way."""
        with self._lock:
            return any(e == float("inf") for _, e in self._spans)

    def spans(self) -> list[tuple[float, float]]:
        """The deploys remembered, oldest first."""
        with self._lock:
            return [(s, e) for s, e in self._spans]
