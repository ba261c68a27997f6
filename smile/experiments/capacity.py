"""Fig. 11a, from live runs on the cloud `smile up` started (paper §9.4): capacity — the highest
tweet rate at which every sharing is admitted and none violates its SLA — against the number
of machines the data and the sharings are spread over.

For k = 1 … K machines (the first k of the cloud) the dataset is loaded onto those k, then the
rates of a ladder are tried in turn (`throughput.rate_round`), stopping at the first one not
held. On the local cloud every machine shares this box's cores, so more machines add
parallelism (more PostgreSQL clusters, more agents) but not CPU: capacity is also given per
core of the box, and what the paper's machines added (2 vCPU each) is not what ours can.

The small default: Table 1's S1–S6 at SLA 20 s, k = 1, 2, 3, rates 800, 2000 and 4000 tweets/s,
45 s a round (all three k held 800 with a ladder of 200 and 800). `--full`: all 25 at SLA 45 s,
k = 2 … 6, rates 1000 … 8000, 5 minutes a round.

Must not: call a rate held that admission only partly took.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from smile.dataset.sharings import table1
from smile.experiments.live import LiveRun
from smile.experiments.output import one_plot
from smile.experiments.throughput import rate_round

if TYPE_CHECKING:
    from smile.experiments.context import Context

PAPER_FIG11A = {"6": 6000}
"""What the paper states in numbers (§9.2: 6k tweets/s on 6 machines); of the other points of
Fig. 11a only that the rate grows with the machines."""


@dataclass(frozen=True)
class Scale:
    machines: tuple[int, ...]
    rates: tuple[float, ...]
    tweets: int
    run_s: float
    sla_s: float
    sharings: tuple[str, ...]


def _scale(ctx: Context) -> Scale:
    if ctx.full:
        return Scale((2, 3, 4, 5, 6), (1000.0, 2000.0, 4000.0, 6000.0, 8000.0), 7_000_000,
                     300.0, 45.0, tuple(s.name for s in table1()))
    if ctx.tiny:
        return Scale((1, 2), (100.0,), 5_000, 25.0, 20.0, ("S1", "S5"))
    return Scale((1, 2, 3), (800.0, 2000.0, 4000.0), 20_000, 45.0, 20.0,
                 tuple(f"S{i}" for i in range(1, 7)))


def capacity(rounds: list[dict[str, Any]]) -> float:
    """The highest rate held before the first one that was not (0: none held).

    >>> capacity([{"rate": 100, "held": True}, {"rate": 400, "held": False}])
    100
    >>> capacity([{"rate": 100, "held": False}])
    0.0
    """
    best: float = 0.0
    for r in rounds:
        if not r["held"]:
            break
        best = r["rate"]
    return best


def run(ctx: Context) -> dict[str, Any]:
    sc = _scale(ctx)
    cores = os.cpu_count() or 1
    points: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    for k in sc.machines:
        rounds: list[dict[str, Any]] = []
        with LiveRun(ctx.settings, ctx.topology(), rate=0.0, tweets=sc.tweets,
                     machines=k) as live:
            for rate in sc.rates:
                r = rate_round(live, rate, sc.sharings, sc.sla_s, sc.run_s,
                               f"_c{k}_{int(rate)}")
                rounds.append(r)
                rows.append({"machines": k, "rate": rate, "admitted": r["admitted"],
                             "violations": r["violations"], "held": r["held"],
                             "achieved_rate": r["achieved_rate"]})
                if not r["held"]:
                    break
        held = capacity(rounds)
        points.append({"machines": k, "capacity": held,
                       "capacity_per_core": round(held / cores, 1),
                       "rounds": [{key: r[key] for key in ("rate", "admitted", "violations",
                                                           "held", "rejected")}
                                  for r in rounds]})
    out = ctx.outputs("fig11")
    out.csv(rows)
    doc = {"experiment": "fig11", "measured": True, "cores": cores, "sla_s": sc.sla_s,
           "sharings": list(sc.sharings), "run_s": sc.run_s, "rates": list(sc.rates),
           "points": points,
           "note": "the local cloud's machines share this box's cores: more machines add "
                   "clusters and agents, not CPU; capacity is the highest rate of the ladder "
                   "held (every sharing admitted, no violation) — a lower bound, the ladder "
                   "is coarse",
           "paper": {"fig11a_tweets_per_s_by_machines": PAPER_FIG11A}}
    out.json(doc)
    out.png(_draw(points))
    return doc


def _draw(points: list[dict[str, Any]]) -> Any:
    fig, ax = one_plot()
    ax.plot([p["machines"] for p in points], [p["capacity"] for p in points], "o-",
            label="here (measured; machines share the box's cores)")
    ax.plot([int(k) for k in PAPER_FIG11A], list(PAPER_FIG11A.values()), "s", label="paper (§9.2)")
    ax.set_xlabel("machines")
    ax.set_ylabel("tweets/s held (0 violations)")
    ax.set_title("Fig. 11a: capacity against the number of machines")
    ax.legend(fontsize=8)
    return fig
