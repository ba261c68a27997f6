"""The operator load of each machine outside deploys: what admission compares with a bound.

A submission deploys its new vertices (their first contents) and then pushes them a first time
from `t0`, a catch-up of everything since; in a burst of submissions these one-off costs and
the contention they cause make the measured load two to four times the settled one (0.37
core-s/s against 0.10 on a machine of Table 1), and the last sharings would be refused on a
load that is gone a minute later. So the pushes that overlap a deploy or
the `settle_s` after it are left out, and what remains is divided by the time the window spent
outside them. With too little such time there is nothing steady to measure: None, and the
caller keeps its last value (the model's predicted load is checked against the bound anyway).

On the local cloud the bound itself is measured: the box's idle cores plus the operators' load,
shared among the machines. `idle_cores` measures the first over the same window and the same
quiet seconds as `steady_load` the second, so that their sum is what the rest of the box
(traffic, capture, PostgreSQL's own work) leaves. Over windows of different lengths, a burst
of lazy pushes (every ~45 s at SLA 60 s) falls in one and not the other, and the bound swings
by half within minutes at a steady rate; and a window of only a few quiet seconds, all of them
saturated, would give a bound near 0 (`MIN_QUIET_S`).

Must not: read clocks or hold locks (the caller passes `now` and copies).
"""

from __future__ import annotations

from itertools import pairwise
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

SETTLE_S = 5.0
"""After a deploy, how long its new vertices' first pushes (catching up from t0) may take."""
MIN_QUIET_S = 20.0
"""The least time outside deploys a window needs for its load to count."""
WINDOW_S = 60.0
"""The window of both measures that make the bound (longer than the push period of SLA 60 s)."""


def steady_load(busy: Mapping[str, Iterable[tuple[float, float, str]]],
                deploys: Sequence[tuple[float, float]], now: float, window_s: float,
                settle_s: float = SETTLE_S, min_quiet_s: float = MIN_QUIET_S
                ) -> dict[str, float] | None:
    """Per machine, operator seconds per second over the last `window_s` outside deploys;
    `busy` holds (when done, operator seconds, vertex) per push, `deploys` (start, end) spans
    (end = inf while one runs). None when the window had under `min_quiet_s` outside them.

    >>> load = steady_load({"m1": [(50.0, 1.0, "v"), (95.0, 2.0, "v")]}, [(90.0, 92.0)],
    ...                    now=100.0, window_s=60.0)  # the push at 95 s is the deploy's
    >>> round(load["m1"] * 53, 6)  # 1 s over the 53 s outside [90, 97]
    1.0
    """
    since = now - window_s
    spans = sorted((max(s, since), min(e + settle_s, now)) for s, e in deploys
                   if e + settle_s > since and s < now)
    covered, reach = 0.0, since
    for s, e in spans:
        if e > reach:
            covered += e - max(s, reach)
            reach = e
    quiet = window_s - covered
    if quiet < min_quiet_s:
        return None
    out = {}
    for machine, pushes in busy.items():
        seconds = sum(sec for at, sec, _ in pushes  # spans carry their settle already
                      if at >= since and not during_deploy(at, sec, spans, settle_s=0.0))
        out[machine] = seconds / quiet
    return out


def during_deploy(at: float, seconds: float, deploys: Iterable[tuple[float, float]],
                  settle_s: float = SETTLE_S) -> bool:
    """Whether a push done at `at` that took `seconds` overlapped one of the `deploys`
    (start, end; end = inf while it runs) or the `settle_s` after it: the steady load does
    not count such a push, and the executor's time model goes by it only until it has
    enough steady ones.

    >>> during_deploy(95.0, 2.0, [(90.0, 92.0)])  # done in the 5 s after the deploy
    True
    >>> during_deploy(99.0, 1.0, [(90.0, 92.0)]), during_deploy(80.0, 1.0, [(90.0, float("inf"))])
    (False, False)
    """
    return any(at - seconds < e + settle_s and at > s for s, e in deploys)


def idle_cores(cpu: Sequence[tuple[float, float, float]], deploys: Sequence[tuple[float, float]],
               now: float, cores: int, window_s: float = WINDOW_S, settle_s: float = SETTLE_S,
               min_quiet_s: float = MIN_QUIET_S) -> float | None:
    """The box's idle cores over the last `window_s` outside deploys and their settle: `cpu`
    holds (when, busy jiffies, all jiffies) samples in time order. None when fewer than
    `min_quiet_s` seconds between samples were quiet (the caller keeps its last value).

    >>> samples = [(40.0, 0.0, 0.0), (70.0, 30.0, 120.0), (100.0, 90.0, 240.0)]
    >>> idle_cores(samples, [], now=100.0, cores=2)  # 90 of 240 jiffies busy
    1.25
    >>> idle_cores(samples, [(80.0, 85.0)], now=100.0, cores=2)  # only [40, 70] counts
    1.5
    >>> idle_cores(samples, [(60.0, 66.0)], now=100.0, cores=2) is None  # no quiet second
    True
    """
    since = now - window_s
    busy = total = quiet = 0.0
    for (t0, b0, a0), (t1, b1, a1) in pairwise(cpu):
        if t0 < since or any(s < t1 and e + settle_s > t0 for s, e in deploys):
            continue
        busy, total, quiet = busy + (b1 - b0), total + (a1 - a0), quiet + (t1 - t0)
    if quiet < min_quiet_s or total <= 0:
        return None
    return max(0.0, 1.0 - busy / total) * cores
