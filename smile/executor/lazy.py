"""When to push a sharing and how far (paper §8.2), as a pure function of timestamps in seconds.

While a push to t runs, the MV stays at TS(MV): the staleness peaks just before the push
completes, at `MAXTS(SRC) + CP(t − TS(MV)) − TS(MV)`. The executor waits while that peak, for
the freshest target `t = MINTS(SRC)`, stays below `l · SLA` (pushing now would be early); once it
reaches `l · SLA` it pushes, to the largest `t ∈ (TS(MV), MINTS(SRC)]` (binary search) whose peak
stays within the SLA — as much work bunched into one push as the SLA allows. A sharing already
too stale for any target is pushed as far as it can go, to catch up.

The paper writes the bound with `− t` (the staleness once the push is done); we bound the peak
instead, which is what a reader sees and what the auditor measures, so a push that finishes in
time cannot leave a violation behind it.

The executor hands in as `max_src` the sources' own clock (when their agents last read the
watermarks, aged since), not only the watermarks, so capture lag counts as the auditor counts
it. The critical path the plan promises is what the operators take; a push also waits its turn
on busy agents. `learn_delay` keeps, per sharing, how much longer its pushes took than the plan
said (rising at once, moving a fifth of the way down per push), and the executor adds it to
`cp`, up to half the SLA.

Must not: read clocks or databases; everything is handed in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

LAZINESS = 0.8
"""The paper's l."""


def push_target(*, mv: float, min_src: float, max_src: float, sla_s: float,
                cp: Callable[[float], float], laziness: float = LAZINESS,
                resolution_s: float = 0.001) -> float | None:
    """The timestamp to push the MV to now, or None to wait. `cp(x)`: seconds to push `x`
    seconds of updates through the plan's critical path.

    >>> cp = lambda x: 0.1 + 0.01 * x
    >>> push_target(mv=100.0, min_src=102.0, max_src=102.0, sla_s=5.0, cp=cp) is None
    True
    >>> push_target(mv=100.0, min_src=104.0, max_src=104.0, sla_s=5.0, cp=cp)
    104.0
    """
    if min_src <= mv:
        return None

    def peak(t: float) -> float:
        return max_src + cp(t - mv) - mv

    if peak(min_src) < laziness * sla_s:
        return None
    if peak(min_src) <= sla_s:
        return min_src
    lo, hi = mv, min_src  # peak(lo) may already exceed the SLA: then catch up as far as possible
    if peak(lo + resolution_s) > sla_s:
        return min_src
    while hi - lo > resolution_s:
        mid = (lo + hi) / 2
        if peak(mid) <= sla_s:
            lo = mid
        else:
            hi = mid
    return lo


DELAY_DECAY = 0.8
"""Per push, how much of the learnt delay stays when a push took less."""


def learn_delay(delay_s: float, took_s: float, predicted_s: float) -> float:
    """The delay a sharing's pushes take beyond their predicted critical path, after a push
    that took `took_s` where `predicted_s` was expected: a longer wait counts at once (the
    next push must not miss the SLA by it), a shorter one wears the delay down slowly.

    >>> learn_delay(0.0, 3.0, 1.0)
    2.0
    >>> round(learn_delay(2.0, 1.0, 1.0), 3)
    1.6
    >>> learn_delay(0.5, 0.2, 1.0)  # faster than predicted: no negative delay
    0.4
    """
    seen = max(0.0, took_s - predicted_s)
    return seen if seen > delay_s else DELAY_DECAY * delay_s + (1 - DELAY_DECAY) * seen
