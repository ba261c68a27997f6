"""Fig. 9, from live runs on the cloud `smile up` started (paper §9.2): the tuples each sharing
moves when it runs beside the others in one global plan, as a percent reduction from what it
moves when it runs alone.

A sharing's tuples are those its own pushes moved (the auditor's running `tuples_moved`, from
the push log: a vertex several sharings share is charged to the one whose push advanced it,
split k ways when one push advanced it for k of them, `store.share_of`).
Runs of different lengths and push cadences are compared per second of data the sharing's MV
advanced over: tuples moved ÷ the advance of TS(MV) between its first and last snapshot. The
shared run admits all the sharings together; then each is admitted alone, in turn, at the
same tweet rate.

The small default: six sharings of Table 1 that share joins of users and tweets (S1, S2, S4,
S5, S6, S15), SLA 10 s so that a minute sees several pushes of each, 100 tweets/s on 3
machines, 90 s together and 40 s alone each. `--full`: all 25 at SLA 45 s (the paper's
Fig. 6 setup) and 1000 tweets/s on 6 machines, 20 minutes together and 5 alone each.

Must not: count anything the auditor did not record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from smile.errors import CloudError
from smile.experiments.live import Audited, LiveRun
from smile.harness.output import bar_chart, progress
from smile.harness.scale import TABLE1, Scale

if TYPE_CHECKING:
    from smile.experiments.context import Context

PAPER_FIG9 = {"claim": "sharings near their SLA gain little from the others (S1, S3, S4, S20); "
                       "those far below it gain much (S7–S10, S23)",
              "sla_s": 45, "sharings": 25, "rate": 6000}
SCALES = {"tiny": Scale(5_000, 3, (100.0,), 30.0, ("S2", "S5"), 10.0),
          "small": Scale(20_000, 3, (100.0,), 90.0, ("S1", "S2", "S4", "S5", "S6", "S15"), 10.0),
          "full": Scale(7_000_000, 6, (1000.0,), 1200.0, TABLE1, 45.0)}
"""Each window (`window_s`) is the run together."""
ALONE_S = {"tiny": 25.0, "small": 40.0, "full": 300.0}
"""How long each sharing then runs alone."""


def per_data_second(a: Audited) -> float | None:
    """Tuples the sharing's pushes moved per second its MV advanced over (None: it did not
    advance between its first and last snapshot).

    >>> from datetime import UTC, datetime, timedelta
    >>> from smile.experiments.live import Snapshot
    >>> t = datetime(2026, 1, 1, tzinfo=UTC)
    >>> snap = lambda s, moved, mv: Snapshot(t + timedelta(seconds=s), 1.0, True, 0, 0, moved,
    ...                                      0.0, t + timedelta(seconds=mv))
    >>> per_data_second(Audited("S1", 10.0, (snap(5, 100, 0), snap(30, 700, 20))))
    30.0
    >>> per_data_second(Audited("S1", 10.0, (snap(5, 100, 0), snap(30, 700, 0)))) is None
    True
    """
    stamped = [s for s in a.snapshots if s.mv_ts is not None]
    if len(stamped) < 2:
        return None
    first, last = stamped[0], stamped[-1]
    assert first.mv_ts is not None and last.mv_ts is not None
    span = (last.mv_ts - first.mv_ts).total_seconds()
    return (last.tuples_moved - first.tuples_moved) / span if span > 0 else None


def reduction(together: float | None, alone: float | None) -> float | None:
    """Percent fewer tuples moved together than alone (negative: more).

    >>> reduction(25.0, 100.0), reduction(100.0, 100.0), reduction(5.0, 0.0)
    (75.0, 0.0, None)
    """
    if together is None or not alone:
        return None
    return round(100.0 * (1.0 - together / alone), 1)


def run(ctx: Context) -> dict[str, Any]:
    sc, alone_s = ctx.pick(SCALES), ctx.pick(ALONE_S)
    together: dict[str, float | None] = {}
    alone: dict[str, float | None] = {}
    with LiveRun(ctx, sc) as run_:
        decided = run_.submit_table1(sc.sharings, "_f9s", sc.sla)
        with progress(f"together: {sc.window_s:.0f} s of traffic", sc.window_s) as adv:
            run_.wait(sc.window_s, advance=adv)
        for a in run_.audited("_f9s"):
            together[a.name.split("_")[0]] = per_data_second(a)
        run_.withdraw("_f9s")
        admitted = [d["name"] for d in decided if d["status"] == "admitted"]
        if not admitted:
            raise CloudError("no sharing was admitted together; the reasons: " + "; ".join(
                f"{d['name']}: {d['reason']}" for d in decided))
        with progress(f"alone: {len(admitted)} × {alone_s:.0f} s",
                      len(admitted) * alone_s) as adv:
            for name in admitted:
                body = run_.submit_table1((name,), "_f9a", sc.sla)[0]
                if body["status"] == "admitted":
                    run_.wait(alone_s, advance=adv)
                    got = run_.audited("_f9a")
                    alone[name] = per_data_second(got[0]) if got else None
                    run_.withdraw("_f9a")
        run_.stop_traffic()
        achieved = run_.achieved_rate()
    rows = [{"sharing": n, "together_per_s": _round(together.get(n)),
             "alone_per_s": _round(alone.get(n)),
             "reduction_pct": reduction(together.get(n), alone.get(n))} for n in admitted]
    cut = [r["reduction_pct"] for r in rows if r["reduction_pct"] is not None]
    out = ctx.outputs("fig09")
    out.csv(rows)
    doc = {"experiment": "fig09", "measured": True, "rate": sc.rate, "achieved_rate": achieved,
           "machines": sc.machines, "sla_s": sc.sla_s, "together_s": sc.window_s,
           "alone_s": alone_s, "sharings": rows,
           "rejected": [d["name"] for d in decided if d["status"] != "admitted"],
           "mean_reduction_pct": round(sum(cut) / len(cut), 1) if cut else None,
           "unit": "tuples moved by the sharing's own pushes per second of data its MV "
                   "advanced over", "paper": PAPER_FIG9}
    out.json(doc)
    out.png(_draw(rows, sc))
    return doc


def _round(x: float | None) -> float | None:
    return round(x, 2) if x is not None else None


def _draw(rows: list[dict[str, Any]], sc: Scale) -> Any:
    return bar_chart([r["sharing"] for r in rows], [r["reduction_pct"] for r in rows],
                     "sharing", "% fewer tuples moved than alone",
                     f"Fig. 9: tuples moved together vs alone (SLA {sc.sla_s:g} s, "
                     f"{sc.rate:g} tweets/s)")
