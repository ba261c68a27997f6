"""Figs. 6–7 and Table 2, from live runs on the cloud `smile up` started (paper §9.2–§9.3).

- **Fig. 6**: the staleness of each sharing across the auditor's 5-s snapshots at one SLA
  (45 s), and the tuples moved in each snapshot.
- **Fig. 7**: S1's pushes: its staleness just before and just after each, and how far each
  advanced TS(S1) (lazy pushes advance it by most of the SLA).
- **Table 2**: violations per sharing-hour for SLAs of 10 … 60 s and the paper's mix.
- **Fig. 10** (from Table 2's runs): each sharing's own measured cost in the mix against its
  cost in the uniform run at the SLA the mix gives it.

A violation is a snapshot whose staleness is over the sharing's SLA, as the auditor counts it;
staleness is what a consumer sees: the sources' clock against TS(MV), capture lag included.
The small default runs a subset of Table 1 at 100 tweets/s on 3 machines (Fig. 6: S1–S10 for
150 s; Table 2: seven sharings, SLAs 10, 40, 60 s and the mix, 60 s each — every SLA the mix
uses, so Fig. 10 has a uniform run for each — the mix once before them and once after, so Fig.
10 compares each uniform run with the mix as it was then, the tables growing meanwhile);
`--full` all 25 at 1000 tweets/s on 6 machines with 7M tweets, 40-minute (Fig. 6) and
20-minute (each SLA) runs (`FIG06`, `TABLE2`).

Must not: count anything the auditor did not record.
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from smile.dataset.sharings import paper_sla
from smile.errors import CloudError
from smile.experiments import dollars
from smile.experiments.box_speed import BoxSpeed, at_speed
from smile.experiments.live import SNAPSHOT_S, Audited, LiveRun, at_moment, moved_per_snapshot
from smile.harness.output import bar_chart, one_plot, progress
from smile.harness.scale import TABLE1, Scale

if TYPE_CHECKING:
    from smile.experiments.context import Context

PAPER_TABLE2 = {"10": 4, "20": 1, "30": 2, "40": 1, "50": 0, "60": 0, "mix": 0}
"""Violations per sharing-hour (rounded up), 25 sharings, 6 machines, 1000 tweets/s."""
PAPER_FIG6 = {"violations": 31, "minutes": 40, "sharings": 25, "rate": 6000, "sla_s": 45,
              "tuples_per_snapshot": [600_000, 1_100_000], "dollars_per_sharing_hour": 25}
PAPER_FIG7 = {"advance_s": [25, 40], "after_s": "< 10", "sla_s": 45}
PAPER_FIG10 = {"claim": "S1–S7 (10 s) marginally dearer in the mix, S8–S25 (40 and 60 s) "
                        "significantly cheaper: the few tight SLAs subsidise the others"}
SMALL_FIG6 = tuple(f"S{i}" for i in range(1, 11))
SMALL_TABLE2 = ("S1", "S5", "S6", "S9", "S14", "S17", "S22")
"""S1, S5, S6 get 10 s in the mix, S9 and S14 40 s, S17 and S22 60 s."""


FIG06 = {"tiny": Scale(5_000, 3, (100.0,), 30.0, ("S1", "S5", "S17"), 10.0),
         "small": Scale(20_000, 3, (100.0,), 150.0, SMALL_FIG6, 45.0),
         "full": Scale(7_000_000, 6, (1000.0,), 2400.0, TABLE1, 45.0)}
"""Fig. 6's one SLA: 45 s as the paper's, 10 s at the tiny scale so that its 30 s see
pushes."""
TABLE2 = {"tiny": Scale(5_000, 3, (100.0,), 30.0, ("S1", "S5", "S17")),
          "small": Scale(20_000, 3, (100.0,), 60.0, SMALL_TABLE2),
          "full": Scale(7_000_000, 6, (1000.0,), 1200.0, TABLE1)}
"""Each window (`window_s`) is one SLA setting's run."""
TABLE2_SLAS = {"tiny": ("10", "60", "mix"), "small": ("10", "40", "60", "mix"),
               "full": tuple(PAPER_TABLE2)}
"""Table 2's settings, run in turn (the mix first and again last, `run_table2`)."""


# -- Figs. 6 and 7 ---------------------------------------------------------------------------

def run_fig06(ctx: Context) -> dict[str, Any]:
    """One run at one SLA (45 s): writes fig06 and fig07."""
    sc = ctx.pick(FIG06)
    suffix = "_f6"
    with LiveRun(ctx, sc) as run:
        decided = run.submit_table1(sc.sharings, suffix, sc.sla)
        audited, cost, achieved = run.measured_window(
            suffix, sc.window_s, f"{sc.window_s:.0f} s of traffic at {sc.rate:g} tweets/s")
    audited = [a for a in audited if a.snapshots]
    if not audited:
        raise CloudError("no sharing was admitted and audited: nothing to draw; the reasons: "
                         + "; ".join(f"{d['name']}: {d['reason']}" for d in decided))
    doc6 = _fig06(ctx, audited, decided, sc, achieved, cost)
    doc7 = _fig07(ctx, next((a for a in audited if a.name == "S1" + suffix), None))
    return {"fig06": doc6, "fig07": doc7}


def _aligned(audited: list[Audited]) -> list[dict[str, Any]]:
    """One row per sharing and snapshot: staleness, SLA, tuples moved since the last one."""
    start = min(s.at for a in audited for s in a.snapshots)
    rows = []
    for a in audited:
        moved_before = None
        for s in a.snapshots:
            moved = s.tuples_moved - moved_before if moved_before is not None else 0
            moved_before = s.tuples_moved
            rows.append({"sharing": a.name, "snapshot": int((s.at - start).total_seconds()
                                                            // SNAPSHOT_S),
                         "seconds": round((s.at - start).total_seconds(), 1),
                         "staleness_s": round(s.staleness_s, 3), "sla_s": a.sla_s,
                         "sla_ok": s.sla_ok, "tuples_moved": moved})
    return rows


def _fig06(ctx: Context, audited: list[Audited], decided: list[dict[str, Any]], sc: Scale,
           achieved: float | None, cost: dollars.Dollars) -> dict[str, Any]:
    out = ctx.outputs("fig06")
    rows = _aligned(audited)
    out.csv(rows)
    per_snapshot = moved_per_snapshot(audited)
    hours = sum(a.hours for a in audited)
    violations = sum(a.violations for a in audited)
    doc = {
        "experiment": "fig06", "measured": True, "rate": sc.rate, "achieved_rate": achieved,
        "machines": sc.machines, "sla_s": sc.sla_s, "sharings": len(audited),
        "rejected": [d for d in decided if d["status"] != "admitted"],
        "snapshots": len(rows), "violations": violations,
        "violations_per_sharing_hour": round(violations / hours, 3) if hours else None,
        "max_staleness_over_sla": round(max(r["staleness_s"] / r["sla_s"] for r in rows), 3),
        "tuples_per_snapshot": {"mean": round(statistics.fmean(per_snapshot.values()), 1)
                                if per_snapshot else 0.0,
                                "max": max(per_snapshot.values(), default=0)},
        "dollars": cost.to_json(),
        "paper": PAPER_FIG6,
    }
    out.json(doc)
    out.png(_draw_fig06(audited, per_snapshot, doc))
    return doc


def _draw_fig06(audited: list[Audited], per_snapshot: dict[int, int],
                doc: dict[str, Any]) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4.5), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=(2, 1))
    start = min(s.at for a in audited for s in a.snapshots)
    for a in sorted(audited, key=lambda a: int(a.name.split("_")[0][1:])):
        xs = [(s.at - start).total_seconds() / SNAPSHOT_S for s in a.snapshots]
        left.plot(xs, [s.staleness_s for s in a.snapshots], lw=1,
                  label=a.name.split("_")[0])
    left.axhline(doc["sla_s"], color="red", ls="--", lw=1, label="SLA")
    left.set_xlabel("snapshot (every 5 s)")
    left.set_ylabel("staleness (s)")
    left.set_title(f"Fig. 6 (left): staleness of {doc['sharings']} sharings, "
                   f"{doc['rate']:g} tweets/s, SLA {doc['sla_s']:g} s; "
                   f"{doc['violations']} violations")
    left.legend(fontsize=7, ncol=2, loc="upper right")
    keys = sorted(per_snapshot)
    right.bar(keys, [per_snapshot[k] for k in keys], width=1.0)
    right.set_xlabel("snapshot")
    right.set_ylabel("tuples moved")
    right.set_title("Fig. 6 (right): tuples moved per snapshot")
    return fig


def _fig07(ctx: Context, s1: Audited | None) -> dict[str, Any]:
    out = ctx.outputs("fig07")
    pushes: list[dict[str, Any]] = []
    fields = ["push", "staleness_before_s", "staleness_after_s", "advance_s"]
    if s1 is None:
        doc = {"experiment": "fig07", "measured": True, "pushes": 0,
               "note": "S1 was not admitted or not audited", "paper": PAPER_FIG7}
        out.csv(pushes, fields=fields)
        out.json(doc)
        out.png(_draw_fig07(pushes, 0.0))
        return doc
    for before, after in itertools.pairwise(s1.snapshots):
        if before.mv_ts is None or after.mv_ts is None or after.mv_ts <= before.mv_ts:
            continue
        pushes.append({"push": len(pushes) + 1, "staleness_before_s": before.staleness_s,
                       "staleness_after_s": after.staleness_s,
                       "advance_s": (after.mv_ts - before.mv_ts).total_seconds()})
    out.csv(pushes, fields=fields)
    adv = [p["advance_s"] for p in pushes[1:]]  # the first follows the fill: not lazy yet
    doc = {"experiment": "fig07", "measured": True, "sharing": s1.name, "sla_s": s1.sla_s,
           "pushes": len(pushes),
           "advance_s": {"median": round(statistics.median(adv), 2), "min": round(min(adv), 2),
                         "max": round(max(adv), 2)} if adv else None,
           "staleness_after_s_max": round(max(p["staleness_after_s"] for p in pushes), 2)
           if pushes else None,
           "paper": PAPER_FIG7,
           "note": "a push between two snapshots shows as TS(MV) advancing between them"}
    out.json(doc)
    out.png(_draw_fig07(pushes, s1.sla_s))
    return doc


def _draw_fig07(pushes: list[dict[str, Any]], sla_s: float) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4), layout="constrained")
    a, b = fig.subplots(1, 2)
    xs = [p["push"] for p in pushes]
    a.plot(xs, [p["staleness_before_s"] for p in pushes], "^-", label="before the push")
    a.plot(xs, [p["staleness_after_s"] for p in pushes], "v-", label="after the push")
    if sla_s:
        a.axhline(sla_s, color="red", ls="--", lw=1, label="SLA")
    a.set_xlabel("push")
    a.set_ylabel("staleness of S1 (s)")
    a.set_title("Fig. 7a: S1's staleness around each push")
    a.legend(fontsize=8)
    b.bar(xs, [p["advance_s"] for p in pushes])
    b.set_xlabel("push")
    b.set_ylabel("TS(S1) advanced by (s)")
    b.set_title("Fig. 7b: how far each push advanced S1")
    return fig


# -- Table 2 ---------------------------------------------------------------------------------

def run_table2(ctx: Context) -> dict[str, Any]:
    """Table 2, and Fig. 10 from the same runs. The mix runs first and again last, so that
    Fig. 10 can set each uniform run beside the mix as it was at that moment (`at_moment`): the
    tables grow all along (S14's `loc ⋈ tweets` as rate² × time), and a mix run after the
    uniform ones alone made it dearer by when it ran."""
    sc, slas = ctx.pick(TABLE2), ctx.pick(TABLE2_SLAS)
    uniform = [sla for sla in slas if sla != "mix"]
    order = ["mix", *uniform, "mix"] if uniform and "mix" in slas else list(slas)
    rows: list[dict[str, Any]] = []
    settings: dict[str, dict[str, Any]] = {}
    costs: list[tuple[str, float, dict[str, dict[str, float] | None]]] = []
    """Per run in order: its SLA setting, its middle (s since the first began), sharing →
    measured $ per hour of data, by wall and by CPU seconds (`own_cost`)."""
    began = time.monotonic()
    first_ms: float | None = None
    """The box's speed in the first run (`box_speed.py`): `own_cost`'s "steady" reference."""
    with LiveRun(ctx, sc) as run, BoxSpeed() as speed:
        for i, sla in enumerate(order, 1):
            suffix = f"_t2_{sla}" + (f"{i}" if sla in order[:i - 1] else "")  # the mix again
            decided = run.submit_table1(sc.sharings, suffix, sla)
            since, start = datetime.now(UTC), time.monotonic() - began
            with progress(f"SLA {sla}: {sc.window_s:.0f} s of traffic", sc.window_s) as adv:
                run.wait(sc.window_s, advance=adv)
            audited = run.audited(suffix)
            box_ms = speed.over(began + start, time.monotonic())
            first_ms = first_ms or box_ms
            own = {a.name.split("_")[0]: own_cost(run, a, since, at_ms=(box_ms, first_ms))
                   for a in audited}
            costs.append((sla, (start + time.monotonic() - began) / 2.0, own))
            run.withdraw(suffix)
            for a in audited:
                name = a.name.split("_")[0]
                got_own = own[name] or {}
                rows.append({"run": i, "sla": sla, "sharing": name, "sla_s": a.sla_s,
                             "snapshots": len(a.snapshots), "violations": a.violations,
                             "sharing_hours": round(a.hours, 5),
                             "dollars_per_data_hour": got_own.get("wall"),
                             "dollars_per_data_hour_cpu": got_own.get("cpu"),
                             "dollars_per_data_hour_steady": got_own.get("steady"),
                             "box_ms": None if box_ms is None else round(box_ms, 3)})
            got = settings.setdefault(sla, {"runs": 0, "admitted": len(audited), "rejected": [],
                                            "violations": 0, "sharing_hours": 0.0})
            got["runs"] += 1
            got["rejected"] = sorted({*got["rejected"], *(d["name"] for d in decided
                                                          if d["status"] != "admitted")})
            got["violations"] += sum(a.violations for a in audited)
            got["sharing_hours"] += sum(a.hours for a in audited)
        run.stop_traffic()
        achieved = run.achieved_rate()
    for sla, got in settings.items():
        hours = got["sharing_hours"]
        per_hour = got["violations"] / hours if hours else None
        got.update({"sharing_hours": round(hours, 4),
                    "per_sharing_hour": round(per_hour, 3) if per_hour is not None else None,
                    "per_sharing_hour_rounded_up": math.ceil(per_hour)
                    if per_hour is not None else None,
                    "paper": PAPER_TABLE2.get(sla)})
    out = ctx.outputs("table2")
    out.csv(rows)
    doc = {"experiment": "table2", "measured": True, "rate": sc.rate, "achieved_rate": achieved,
           "machines": sc.machines, "sharings": list(sc.sharings), "run_s": sc.window_s,
           "order": order, "settings": settings, "paper": PAPER_TABLE2,
           "note": "the mix: S1–S7 10 s, S8–S15 40 s, S16–S25 60 s; it runs first and last"}
    out.json(doc)
    out.png(_draw_table2(settings))
    return {"table2": doc, "fig10": _fig10(ctx, costs, sc)}


def own_cost(run: LiveRun, a: Audited, since: datetime,
             at_ms: tuple[float | None, float | None] = (None, None)
             ) -> dict[str, float] | None:
    """What a sharing's own pushes cost per hour of data its MV advanced over, measured:
    their operator seconds × the machines' price, the bytes they moved × the network price,
    and the auditor's late tuples × its penalty (storage is the plan's, shared: not in it);
    under "wall" priced by the operators' wall seconds, under "cpu" by their CPU seconds
    (`Dollars.cpu_busy`: without the waits for one of this box's two cores, which the other
    sharings' pushes make longer in the mix than in a uniform run of long SLAs), and under
    "steady" by those CPU seconds at another speed of the box: `at_ms` is (the probe's ms in
    this run, in the reference run), `box_speed.at_speed` (absent without both). Of a vertex
    pushed once for several sharings it pays its part (`dollars.measure`). The pushes priced
    are those that advanced its MV over the span the auditor saw from `since`
    (`Audited.pushed_span`), not those logged in the window: a 40-s sharing's push logged
    after the last snapshot would double its figure."""
    span = a.pushed_span(since)
    if span is None:
        return None
    d = dollars.measure(run.topology, [a.name], since, datetime.now(UTC),
                        spans={a.name: span})
    hours = (span[1] - span[0]).total_seconds() / 3600.0
    rest = d.network + d.penalty
    got = {"wall": round((d.cpu + rest) / hours, 8),
           "cpu": round(((d.cpu_busy or 0.0) + rest) / hours, 8)}
    steady = at_speed(d.cpu_busy or 0.0, *at_ms)
    if steady is not None:
        got["steady"] = round((steady + rest) / hours, 8)
    return got


def mix_change(costs: dict[str, dict[str, float | None]]) -> list[dict[str, Any]]:
    """Per sharing of the mix run: its cost there against its cost when every sharing had the
    SLA it has in the mix (percent change; None without both).

    >>> mix_change({"mix": {"S1": 1.2, "S9": 0.5, "S17": 0.1},
    ...             "10": {"S1": 1.0}, "40": {"S9": 1.0}})
    ... # doctest: +NORMALIZE_WHITESPACE
    [{'sharing': 'S1', 'sla_s': 10.0, 'mix': 1.2, 'uniform': 1.0, 'change_pct': 20.0},
     {'sharing': 'S9', 'sla_s': 40.0, 'mix': 0.5, 'uniform': 1.0, 'change_pct': -50.0},
     {'sharing': 'S17', 'sla_s': 60.0, 'mix': 0.1, 'uniform': None, 'change_pct': None}]
    """
    out = []
    for name, mixed in costs.get("mix", {}).items():
        sla_s = paper_sla(name)
        uniform = costs.get(f"{sla_s:g}", {}).get(name)
        change = round(100.0 * (mixed / uniform - 1.0), 1) \
            if mixed is not None and uniform else None
        out.append({"sharing": name, "sla_s": sla_s, "mix": mixed, "uniform": uniform,
                    "change_pct": change})
    return out


def _fig10(ctx: Context, runs: list[tuple[str, float, dict[str, dict[str, float] | None]]],
           sc: Scale) -> dict[str, Any]:
    """Each sharing of the mix against the uniform run at its mix SLA, the mix's cost taken
    at that run's moment (`at_moment`): priced by wall seconds, and beside it by CPU seconds
    (`_cpu`) and by those at the first run's speed of the box (`_steady`)."""
    when = {sla: at for sla, at, _ in runs if sla != "mix"}
    mixes = [(at, c) for sla, at, c in runs if sla == "mix"]
    names = sorted({n for _, c in mixes for n in c}, key=lambda n: int(n[1:]))
    rows: list[dict[str, Any]] = []
    means: dict[str, dict[str, float]] = {}
    for measure, tail in (("wall", ""), ("cpu", "_cpu"), ("steady", "_steady")):
        costs = {sla: {n: _of(c, n, measure) for n in c} for sla, _, c in runs if sla != "mix"}
        costs["mix"] = {n: at_moment([(at, _of(c, n, measure)) for at, c in mixes],
                                     when.get(f"{paper_sla(n):g}", 0.0)) for n in names}
        changed = mix_change(costs)
        for r in changed:
            r["mix_runs"] = [_of(c, r["sharing"], measure) for _, c in mixes]
        if not rows:
            rows = changed
        else:
            for row, r in zip(rows, changed, strict=True):
                row.update({f"{k}{tail}": r[k] for k in ("mix", "uniform", "change_pct",
                                                          "mix_runs")})
        by_sla: dict[float, list[float]] = {}
        for r in changed:
            if r["change_pct"] is not None:
                by_sla.setdefault(r["sla_s"], []).append(r["change_pct"])
        means[f"mean_change_pct_by_mix_sla{tail}"] = {
            f"{k:g}": round(statistics.fmean(v), 1) for k, v in sorted(by_sla.items())}
    out = ctx.outputs("fig10")
    out.csv(rows)
    doc = {"experiment": "fig10", "measured": True, "rate": sc.rate, "run_s": sc.window_s,
           "sharings": rows, **means,
           "unit": "a sharing's own pushes' CPU and network dollars plus its penalties (of a "
                   "vertex pushed once for several sharings, its part; the pushes that "
                   "advanced its MV over the span the auditor saw), per hour of that data, in "
                   "the mix (interpolated in time between the mix runs before and after the "
                   "uniform ones, to the uniform run's moment) against the uniform run at its "
                   "mix SLA; operators priced by their wall seconds, (`_cpu`) by their CPU "
                   "seconds, and (`_steady`) by those CPU seconds at the box's speed in the "
                   "first run (`box_speed.py`)",
           "paper": PAPER_FIG10}
    out.json(doc)
    out.png(_draw_fig10(rows))
    return doc


def _of(costs: dict[str, dict[str, float] | None], name: str, measure: str) -> float | None:
    """A sharing's cost in one run under one measure (`own_cost`), None if not measured."""
    return (costs.get(name) or {}).get(measure)


def _draw_fig10(rows: list[dict[str, Any]]) -> Any:
    return bar_chart([f"{r['sharing']}\n({r['sla_s']:g} s)" for r in rows],
                     [r["change_pct"] for r in rows], "sharing (its SLA in the mix)",
                     "% cost change, mix vs uniform SLA",
                     "Fig. 10: cost change for the SLA mix compared to uniform SLAs")


def _draw_table2(settings: dict[str, dict[str, Any]]) -> Any:
    fig, ax = one_plot()
    keys = list(settings)
    xs = list(range(len(keys)))
    ours = [settings[k]["per_sharing_hour"] or 0.0 for k in keys]
    paper = [PAPER_TABLE2.get(k, 0) for k in keys]
    ax.bar([x - 0.2 for x in xs], ours, 0.4, label="here (measured)")
    ax.bar([x + 0.2 for x in xs], paper, 0.4, label="paper (rounded up)")
    ax.set_xticks(xs, [k if k == "mix" else f"{k} s" for k in keys])
    ax.set_xlabel("staleness SLA")
    ax.set_ylabel("violations per sharing-hour")
    ax.set_title("Table 2: violations per sharing-hour by SLA")
    ax.legend()
    return fig
