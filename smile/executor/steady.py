"""The operator load of each machine outside deploys: what admission compares with a bound.

A submission deploys its new vertices (their first contents) and then pushes them a first time
from `t0`, a catch-up of everything since; in a burst of submissions these one-off costs and
the contention they cause made the measured load two to four times the settled one (m1 0.37
core-s/s while 25 sharings were submitted, 0.10 once they had settled) and the last sharings
were refused on a load that had gone by a minute later. So the pushes that overlap a deploy or
the `settle_s` after it are left out, and what remains is divided by the time the window spent
outside them. With too little such time there is nothing steady to measure: None, and the
caller keeps its last value (the model's predicted load is checked against the bound anyway).

Must not: read clocks or hold locks (the caller passes `now` and copies).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

SETTLE_S = 5.0
"""After a deploy, how long its new vertices' first pushes (catching up from t0) may take."""
MIN_QUIET_S = 20.0
"""The least time outside deploys a window needs for its load to count."""


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
        seconds = sum(sec for at, sec, _ in pushes if at >= since and not any(
            at - sec < e and at > s for s, e in spans))
        out[machine] = seconds / quiet
    return out
