"""Figs. 11a–c, from live runs on the cloud `smile up` started (paper §9.4): capacity — the
highest tweet rate at which every sharing is admitted and none violates its SLA — against the
number of machines the data and the sharings are spread over (11a), the tuples the pushes
processed per second at that rate (11b), and against the number of sharings (11c).

For k = 1 … K machines (the first k of the cloud) the dataset is loaded onto those k, then the
rates of a ladder are tried in turn (`throughput.rate_round`), stopping at the first one not
held. 11b is read from the same rounds: the tuples the held round at capacity moved per second
(the auditor's `tuples_moved`, from the push log), in all and per machine. For 11c the machines
are the largest k and the sharings grow past the base set as the paper grew Table 1 past 25,
"by placing the same sharing on more than one machine": copies with their MVs on another
machine than the original's (`LiveRun.submit_copies`). A count equal to the base set on the
largest k is 11a's last point, not run twice.

On the local cloud every machine shares this box's cores, so more machines add parallelism
(more PostgreSQL clusters, more agents) but not CPU: capacity is also given per core of the
box, and what the paper's machines added (2 vCPU each) is not what ours can.

The small default: Table 1's S1–S6 at SLA 20 s, k = 1, 2, 3, rates 800, 2000 and 4000
tweets/s, 45 s a round; 11c with 3, 6 and 12 sharings on 3 machines. `--full`: all 25 at SLA
45 s, k = 2 … 6, rates 1000 … 8000, 5 minutes a round; 11c with 20, 25, 30, 40 and 50 on 6.

Must not: call a rate held that admission only partly took.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from smile.experiments.live import LiveRun
from smile.experiments.throughput import rate_round
from smile.harness.scale import TABLE1, Scale

if TYPE_CHECKING:
    from smile.experiments.context import Context

PAPER_FIG11A = {"6": 6000}
"""What the paper states in numbers (§9.2: 6k tweets/s on 6 machines); of the other points of
Fig. 11a only that the rate grows with the machines."""
PAPER_FIG11B = "each extra machine adds at least 25–30k tuples/s of processing (§9.4)"
PAPER_FIG11C = "the rate held falls as the sharings grow from 20 to 50 on 6 machines (§9.4)"


SCALES = {"tiny": Scale(5_000, 2, (100.0,), 25.0, ("S1", "S5"), 20.0),
          "small": Scale(20_000, 3, (800.0, 2000.0, 4000.0), 45.0,
                         tuple(f"S{i}" for i in range(1, 7)), 20.0),
          "full": Scale(7_000_000, 6, (1000.0, 2000.0, 4000.0, 6000.0, 8000.0), 300.0, TABLE1,
                        45.0)}
"""The ladder of rates, a round (`window_s`) each; `machines` the most (Fig. 11c's)."""
MACHINES = {"tiny": (1, 2), "small": (1, 2, 3), "full": (2, 3, 4, 5, 6)}
"""Fig. 11a's numbers of machines."""
COUNTS = {"tiny": (2, 4), "small": (3, 6, 12), "full": (20, 25, 30, 40, 50)}
"""Fig. 11c's numbers of sharings, on the most machines."""


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


def _ladder(live: LiveRun, sc: Scale, names: tuple[str, ...], copies: int, tag: str
            ) -> list[dict[str, Any]]:
    """The rounds of the ladder, up to the first rate not held."""
    rounds: list[dict[str, Any]] = []
    for rate in sc.rates:
        r = rate_round(live, rate, sc, f"_{tag}_{int(rate)}", copies, names)
        rounds.append(r)
        if not r["held"]:
            break
    return rounds


def _point(rounds: list[dict[str, Any]], cores: int, **where: int) -> dict[str, Any]:
    """Capacity, per core, the tuples processed per second at it, and the rounds."""
    held = capacity(rounds)
    at = next((r for r in rounds if r["rate"] == held and r["held"]), None)
    return where | {"capacity": held, "capacity_per_core": round(held / cores, 1),
                    "tuples_per_s": at["tuples_per_s"] if at else 0.0,
                    "rounds": [{key: r[key] for key in ("rate", "admitted", "violations",
                                                        "held", "tuples_per_s", "rejected")}
                               for r in rounds]}


def run(ctx: Context) -> dict[str, Any]:
    sc, counts = ctx.pick(SCALES), ctx.pick(COUNTS)
    cores = os.cpu_count() or 1
    points: list[dict[str, Any]] = []
    by_count: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []

    def row(figure: str, k: int, n: int, rounds: list[dict[str, Any]]) -> None:
        rows.extend({"figure": figure, "machines": k, "sharings": n, "rate": r["rate"],
                     "admitted": r["admitted"], "violations": r["violations"],
                     "held": r["held"], "achieved_rate": r["achieved_rate"],
                     "tuples_per_s": r["tuples_per_s"]} for r in rounds)

    for k in ctx.pick(MACHINES):
        with LiveRun(ctx, sc, rate=0.0, machines=k) as live:
            rounds = _ladder(live, sc, sc.sharings, 0, f"c{k}")
            row("11a", k, len(sc.sharings), rounds)
            points.append(_point(rounds, cores, machines=k))
            if k != sc.machines:
                continue
            for n in counts:
                if n == len(sc.sharings):
                    by_count.append(points[-1] | {"sharings": n, "machines": k})
                    continue
                live.reload()  # from the data 11a's point started from
                names = sc.sharings[:min(n, len(sc.sharings))]
                rounds = _ladder(live, sc, names, n - len(names), f"n{n}")
                row("11c", k, n, rounds)
                by_count.append(_point(rounds, cores, sharings=n, machines=k))
    by_count.sort(key=lambda p: p["sharings"])
    for p in points:
        p["tuples_per_s_per_machine"] = round(p["tuples_per_s"] / p["machines"], 1)
    out = ctx.outputs("fig11")
    out.csv(rows)
    doc = {"experiment": "fig11", "measured": True, "cores": cores, "sla_s": sc.sla_s,
           "sharings": list(sc.sharings), "run_s": sc.window_s, "rates": list(sc.rates),
           "points": points, "by_sharings": by_count,
           "note": "the local cloud's machines share this box's cores: more machines add "
                   "clusters and agents, not CPU; capacity is the highest rate of the ladder "
                   "held (every sharing admitted, no violation) — a lower bound, the ladder "
                   "is coarse; tuples/s are those the pushes moved at that rate (Fig. 11b); "
                   "sharings past the base set are copies with their MVs on other machines "
                   "(Fig. 11c)",
           "paper": {"fig11a_tweets_per_s_by_machines": PAPER_FIG11A,
                     "fig11b": PAPER_FIG11B, "fig11c": PAPER_FIG11C}}
    out.json(doc)
    out.png(_draw(points, by_count))
    return doc


def _draw(points: list[dict[str, Any]], by_count: list[dict[str, Any]]) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4), layout="constrained")
    a, b, c = fig.subplots(1, 3)
    ks = [p["machines"] for p in points]
    a.plot(ks, [p["capacity"] for p in points], "o-",
           label="here (measured; machines share the box's cores)")
    a.plot([int(k) for k in PAPER_FIG11A], list(PAPER_FIG11A.values()), "s",
           label="paper (§9.2)")
    a.set_xlabel("machines")
    a.set_ylabel("tweets/s held (0 violations)")
    a.set_title("Fig. 11a: capacity against machines")
    a.legend(fontsize=8)
    b.plot(ks, [p["tuples_per_s"] for p in points], "o-", label="all machines")
    b.plot(ks, [p["tuples_per_s_per_machine"] for p in points], "x--", label="per machine")
    b.set_xlabel("machines")
    b.set_ylabel("tuples/s processed at capacity")
    b.set_title("Fig. 11b: tuples processed against machines")
    b.legend(fontsize=8)
    c.plot([p["sharings"] for p in by_count], [p["capacity"] for p in by_count], "o-")
    c.set_xlabel(f"sharings (on {by_count[0]['machines'] if by_count else '?'} machines)")
    c.set_ylabel("tweets/s held (0 violations)")
    c.set_title("Fig. 11c: capacity against sharings")
    return fig
