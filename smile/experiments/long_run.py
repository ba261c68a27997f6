"""The long run: Table 1's sharings at SLA 10 s under steady traffic,
with, sampled over time, the memory of every process of the cloud, the rows every delta table
retains and the WAL each replication slot holds back — all should stay flat — and the
violations per sharing-hour the auditor counted; beside them, the speed of the box's cores
(`SPEED`).

A series is *flat* when, after the first fifth (warm-up: first pushes, caches), its last
third comes back down at least once to the highest level of its first third, or its
least-squares trend moves it by less than 5% of its mean over the run (`drift`). Delta rows
and slot WAL swing with the pushes (rows pile up between two pushes, retention takes them
after); what must not happen is growth from one cycle to the next, which keeps the last third
above the first whatever the level (a lease left behind holding a delta grows it by the
rate). Memory creeps by a fraction of a MB as caches warm: the 5% lets that pass. Memory is
sampled in two parts (`footprint.memory_by_daemon`): each daemon's own, which must be flat,
and the shared memory PostgreSQL's clusters have touched — their buffer cache, allocated
whole at start and filling with the pages of tables that grow with the traffic — which must
stay within `shared_memory_size` (read as the blocks the kernel allocated to the segment, once:
the sum of the processes' shares can read more than the whole cache as parallel workers come
and go). Counted as one, a cluster's memory rises by 3–4× in an hour as its cache fills,
though its own memory stays level.

A cluster's own memory is also sampled by connection (`footprint.connection_memory`, the
`connection_mb` rows), and its entry in the JSON names the connections it rose in
(`grew_in`) beside `temp_buffers`. On a fresh cloud it rises for minutes, and not from a
leak: each backend that runs DeltaToRel (an agent's three, the capturer's shadow
advances) creates a temporary table per push, and PostgreSQL gives a backend's local buffers
memory as its clock sweep first reaches them, never taking it back, so each such backend
grows by `temp_buffers` (8 MB) over its first thousands of pushes, and its cached plans by
a MB or two, then stays. The 6-minute run is too short to see them level off on a fresh
cloud (m1 +39 MB, m2 +44); run again on the same cloud, every cluster is flat. What did not
stop — each backend's catalog caches keep ≈0.55 KB for every temporary table it made — ends
with its session: the agent renews its workers' every 1000 commands (`db.SESSION_USES`), so
over the hour m1's agent connections swing between 34 and 56 MB instead of creeping.

The small default: S1–S10 at SLA 10 s on 3 machines for 6 minutes, a sample every 20 s, at 80%
of the capacity `smile experiment throughput` measured here when its throughput.json is in the
same directory (the issue's "violations at 80% of measured capacity, SLA 10 s"), else at 200
tweets/s; the JSON says which (`rate_from`); `--minutes M` runs it M minutes, a sample every
M seconds (at least 20), as longrun_Mmin.*. `--hour` (written as longrun_hour.*): the issue's
1-hour run at 80% of capacity on this box — all 25 at SLA 45 s on 3 machines, at 80% of the
capacity `smile experiment throughput` measured here (its throughput.json in the same
directory: the highest rate held with all 25 at SLA 45 s and no violation), a sample every 30
s. `--rate R` runs either at R tweets/s instead, as longrun[_hour|_Mmin]_Rtps.* (the hour at a
rate that is not 80% of a capacity measured in 60-s rounds: the work of `loc ⋈ tweets` grows
with the run, so what holds a minute need not hold an hour). `--full`: all 25 at 800
tweets/s (80% of the 1000 the paper's scale aims at) on 6 machines with 7M tweets, for an
hour, a sample a minute.

Must not: count anything the auditor did not record, or change what it samples.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from smile.errors import CloudError, ConfigError
from smile.experiments.box_speed import BoxSpeed
from smile.experiments.live import LiveRun
from smile.experiments.throughput import SLA_S as HOUR_SLA_S
from smile.harness import footprint
from smile.harness.output import progress
from smile.harness.scale import TABLE1, Scale

if TYPE_CHECKING:
    from pathlib import Path

    from smile.experiments.context import Context

SLA_S = 10.0
"""The default run's (and the full one's); the hour's is the one the throughput experiment
measures capacity at (`HOUR_SLA_S`)."""
KINDS = ("memory_mb", "shared_mb", "delta_rows", "slot_wal_bytes")
"""What is sampled: own memory, touched shared memory (bounded by what the cluster allocated
at start), delta rows and slot WAL."""
SPEED = "box_ms"
"""Beside them, not judged flat: the speed of the box's cores (`box_speed.py`, a probe every
15 s), which the host moves by a sixth within 20 minutes — a load that rises through the
run while the probe does too is the host's, not the work's."""
HOUR_LOAD = 0.8
"""The fraction of that capacity the hour (and the default run, when it is known) runs at."""
SMALL_RATE = 200.0
"""The default run's rate when no capacity has been measured in its directory."""
OF_CAPACITY = f"{HOUR_LOAD:g} x the capacity in throughput.json"
"""`rate_from` of a run at 80% of the measured capacity."""
GIVEN = "given (--rate)"
"""`rate_from` of a run at the rate its command gave."""
PAPER = {"violations_per_sharing_hour": "≤ 4 at SLA 10 s (Table 2)",
         "goal": "0 violations per sharing-hour; memory, delta rows and slot WAL flat"}


@dataclass(frozen=True)
class LongRun:
    """One long run: its scale (`window_s`: how long it runs), how often it samples, what it
    is written as (`Context.run_name`) and where its rate came from."""

    scale: Scale
    every_s: float
    name: str = "longrun"
    rate_from: str = "fixed"


FIXED = {"tiny": LongRun(Scale(5_000, 3, (100.0,), 60.0, ("S1", "S5"), SLA_S), 10.0),
         "full": LongRun(Scale(7_000_000, 6, (800.0,), 3600.0, TABLE1, SLA_S), 60.0)}
"""The scales whose rate and length are their own; the small default and the hour run at a
rate found at run time (`plan`)."""


def plan(ctx: Context) -> LongRun:
    """The long run `ctx` asks for (see the module's docstring)."""
    if ctx.scale in FIXED:
        return FIXED[ctx.scale]
    known = ctx.out_dir / "throughput.json"
    if ctx.rate is not None:
        rate, source = ctx.rate, GIVEN
    elif ctx.hour or known.exists():
        rate, source = HOUR_LOAD * measured_capacity(known), OF_CAPACITY
    else:
        rate, source = SMALL_RATE, "fixed"
    name = ctx.run_name("longrun")
    if ctx.hour:
        return LongRun(Scale(20_000, 3, (rate,), 3600.0, TABLE1, HOUR_SLA_S), 30.0, name, source)
    run_s = 360.0 if ctx.minutes is None else 60.0 * ctx.minutes
    return LongRun(Scale(20_000, 3, (rate,), run_s, tuple(f"S{i}" for i in range(1, 11)),
                         SLA_S), max(20.0, run_s / 60.0), name, source)


def measured_capacity(path: Path) -> float:
    """The capacity (tweets/s) the throughput experiment wrote to `path`.

    >>> import json, tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "throughput.json"
    >>> _ = p.write_text(json.dumps({"capacity": 100.0, "sla_s": 45.0}))
    >>> measured_capacity(p)
    100.0
    >>> _ = p.write_text(json.dumps({"capacity": 0.0, "sla_s": 45.0}))
    >>> measured_capacity(p)
    Traceback (most recent call last):
    ...
    smile.errors.ConfigError: ...throughput.json holds no capacity above 0 ...
    """
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist: the hour runs at 80% of the capacity "
                          "`smile experiment throughput` measures; run it first (into the "
                          "same --out)") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} cannot be read ({exc})") from exc
    capacity = doc.get("capacity") if isinstance(doc, dict) else None
    if not isinstance(capacity, int | float) or not capacity > 0 or \
            doc.get("sla_s") != HOUR_SLA_S:
        raise ConfigError(f"{path} holds no capacity above 0 at SLA {HOUR_SLA_S:g} s (capacity "
                          f"{capacity!r}): nothing was held, so there is no 80% of it to run "
                          "at")
    return float(capacity)


def drift(points: list[tuple[float, float]]) -> float | None:
    """How far the least-squares trend moves a series over its span, as a fraction of its
    mean, after the first fifth of the points (None: too few points, or a mean of 0 with no
    trend to speak of).

    >>> drift([(t, 100.0) for t in range(10)])
    0.0
    >>> round(drift([(t, 100.0 + 10 * t) for t in range(10)]), 2)
    0.45
    >>> drift([(0, 1.0)]) is None
    True
    """
    kept = points[len(points) // 5:]
    if len(kept) < 3:
        return None
    xs, ys = [p[0] for p in kept], [p[1] for p in kept]
    mean_y = statistics.fmean(ys)
    if len(set(xs)) < 2:
        return None
    slope = statistics.linear_regression(xs, ys).slope
    move = slope * (xs[-1] - xs[0])
    if mean_y == 0:
        return 0.0 if move == 0 else None
    return abs(move) / abs(mean_y)


def flat(points: list[tuple[float, float]]) -> bool | None:
    """Whether a series stays level (see the module's docstring); None with too few points.

    >>> flat([(t, 100.0 + (t % 3) * 10) for t in range(15)])  # swings, no growth
    True
    >>> flat([(t, 100.0 + t) for t in range(15)])  # grows by the rate
    False
    >>> flat([(t, 45.0 + 0.02 * t) for t in range(15)])  # creeps by a fraction of a percent
    True
    >>> flat([(0, 1.0), (1, 2.0)]) is None
    True
    """
    kept = [v for _, v in points[len(points) // 5:]]
    third = len(kept) // 3
    if third < 1:
        return None
    moved = drift(points)
    return min(kept[-third:]) <= max(kept[:third]) or (moved is not None and moved < 0.05)


def run(ctx: Context) -> dict[str, Any]:
    lr = plan(ctx)
    sc, suffix = lr.scale, "_long"
    with LiveRun(ctx, sc) as run_:
        decided = run_.submit_table1(sc.sharings, suffix, sc.sla)
        if not any(d["status"] == "admitted" for d in decided):
            raise CloudError("no sharing was admitted; the reasons: " + "; ".join(
                f"{d['name']}: {d['reason']}" for d in decided))
        rows = _sampled(run_, lr, str(ctx.settings.state_dir))
        caps = footprint.setting_mb(run_.topology, "shared_memory_size")
        pools = footprint.setting_mb(run_.topology, "temp_buffers")
        audited = run_.audited(suffix)
        run_.stop_traffic()
        achieved = run_.achieved_rate()
    series = _series(rows, caps, pools)
    hours = sum(a.hours for a in audited)
    violations = sum(a.violations for a in audited)
    doc = {"experiment": lr.name, "measured": True, "rate": sc.rate,
           "rate_from": lr.rate_from,
           "achieved_rate": achieved, "machines": sc.machines, "run_s": sc.window_s,
           "sla_s": sc.sla_s, "admitted": len(audited),
           "rejected": [d["name"] for d in decided if d["status"] != "admitted"],
           "reasons": {d["name"]: d["reason"] for d in decided if d["status"] != "admitted"},
           "violations": violations, "sharing_hours": round(hours, 4),
           "violations_per_sharing_hour": round(violations / hours, 3) if hours else None,
           "all_flat": not (unsteady := _unsteady(series)), "not_flat": unsteady,
           "box_ms": box_ms([r["value"] for r in rows if r["kind"] == SPEED]),
           "series": series, "paper": PAPER}
    if lr.rate_from == OF_CAPACITY:
        doc["of_capacity"] = HOUR_LOAD
    out = ctx.outputs(lr.name)
    out.csv(rows)
    out.json(doc)
    out.png(_draw(rows))
    return doc


def _sampled(run_: LiveRun, lr: LongRun, state_dir: str) -> list[dict[str, Any]]:
    """The run's samples, one row per (time, kind, what), every `lr.every_s` for its length,
    and the box's probes beside them."""
    sc, rows = lr.scale, []
    start = time.monotonic()
    with BoxSpeed() as speed, progress(
            f"{sc.window_s:.0f} s at {sc.rate:g} tweets/s, sampling every {lr.every_s:g} s",
            sc.window_s) as adv:
        while (at := time.monotonic() - start) <= sc.window_s:
            rows += [{"t_s": round(at, 1), "kind": kind, "what": k, "value": v}
                     for kind, values in _sample(run_, state_dir) for k, v in values.items()]
            run_.wait(min(lr.every_s, sc.window_s - at + 0.1), advance=adv)
            if sc.window_s - at < 0.1:
                break
    return rows + [{"t_s": round(at - start, 1), "kind": SPEED, "what": "probe", "value": ms}
                   for at, ms in speed.samples]


def _sample(run_: LiveRun, state_dir: str) -> list[tuple[str, dict[str, Any]]]:
    """One sample of every kind: (kind, what → value)."""
    pids = footprint.daemon_pids(state_dir)
    own, shared = footprint.memory_by_daemon(pids)
    return [("memory_mb", own), ("shared_mb", shared),
            ("connection_mb", footprint.connection_memory(run_.topology, pids)),
            ("delta_rows", footprint.delta_rows(run_.topology)),
            ("slot_wal_bytes", footprint.slot_wal_bytes(run_.topology))]


def _series(rows: list[dict[str, Any]], caps: dict[str, float],
            pools: dict[str, float]) -> dict[str, dict[str, Any]]:
    """Each sampled series (`KINDS`) judged: first, last, greatest, drift and flat; a
    cluster's shared memory against its cap (`caps`), its own memory with the connections it
    rose in beside what each may keep for temporary tables (`pools`)."""
    series: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        for what in sorted({r["what"] for r in rows if r["kind"] == kind}):
            pts = [(float(r["t_s"]), float(r["value"])) for r in rows
                   if r["kind"] == kind and r["what"] == what]
            d = drift(pts)
            top = max(v for _, v in pts)
            entry: dict[str, Any] = {
                "first": pts[0][1], "last": pts[-1][1], "max": top,
                "drift": round(d, 3) if d is not None else None, "flat": flat(pts)}
            if kind == "shared_mb":  # allocated whole at start: filling it is no growth
                cap = caps.get(what)
                entry |= {"cap": cap, "within_cap": cap is not None and top <= cap}
            if kind == "memory_mb" and what in pools:  # a cluster: in which connections
                entry |= {"temp_buffers_mb": pools[what],
                          "grew_in": grew_in(rows, what.removeprefix("postgres "))}
            series[f"{kind}:{what}"] = entry
    return series


def box_ms(probes: list[float]) -> dict[str, float] | None:
    """The probe's first, last, least and greatest ms over the run (None without probes).

    >>> box_ms([14.0, 12.5, 16.0, 15.0])
    {'first': 14.0, 'last': 15.0, 'min': 12.5, 'max': 16.0}
    >>> box_ms([]) is None
    True
    """
    if not probes:
        return None
    return {"first": round(probes[0], 3), "last": round(probes[-1], 3),
            "min": round(min(probes), 3), "max": round(max(probes), 3)}


def grew_in(rows: list[dict[str, Any]], cluster: str, top: int = 5) -> dict[str, float]:
    """The `top` connections of `cluster` whose own memory rose most from their first sample
    to their last (MB; `connection_mb` rows), the diagnosis of a cluster's own memory that
    is not flat: a backend's local buffers for temporary tables fill up to `temp_buffers`
    and stay, and so do its cached plans, where a leak would go on.

    >>> rows = [{"kind": "connection_mb", "what": w, "t_s": t, "value": v} for w, t, v in (
    ...     ("m1 smile-agent-m1", 0, 2.0), ("m1 smile-agent-m1", 60, 10.0),
    ...     ("m1 smile-capture", 0, 5.0), ("m1 smile-capture", 60, 4.0),
    ...     ("m2 smile-agent-m2", 0, 1.0), ("m2 smile-agent-m2", 60, 9.0))]
    >>> grew_in(rows, "m1")
    {'smile-agent-m1': 8.0}
    """
    series: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        if r["kind"] == "connection_mb" and r["what"].startswith(f"{cluster} "):
            series.setdefault(r["what"].removeprefix(f"{cluster} "), []).append(
                (float(r["t_s"]), float(r["value"])))
    rose = {who: round(pts[-1][1] - pts[0][1], 1) for who, pts in series.items()}
    return dict(sorted(((w, v) for w, v in rose.items() if v > 0),
                       key=lambda x: -x[1])[:top])


def _unsteady(series: dict[str, dict[str, Any]]) -> list[str]:
    """The series that neither stay level nor, for shared memory, stay within what the
    cluster allocated at start.

    >>> _unsteady({"memory_mb:a": {"flat": True}, "memory_mb:b": {"flat": False},
    ...            "shared_mb:c": {"flat": False, "within_cap": True},
    ...            "shared_mb:d": {"flat": False, "within_cap": False}})
    ['memory_mb:b', 'shared_mb:d']
    """
    return sorted(k for k, s in series.items()
                  if s["flat"] is not True and not s.get("within_cap"))


def _draw(rows: list[dict[str, Any]]) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(20, 4), layout="constrained")
    titles = {"memory_mb": "own memory by daemon\n(MB, PSS without shared)",
              "shared_mb": "shared memory touched\n(MB: buffer cache, bounded)",
              "delta_rows": "delta rows retained",
              "slot_wal_bytes": "WAL held by slots (bytes)",
              SPEED: "the box's cores: probe\n(ms, lower is faster)"}
    for i, (kind, title) in enumerate(titles.items()):
        ax = fig.add_subplot(1, len(titles), i + 1)
        for what in sorted({r["what"] for r in rows if r["kind"] == kind}):
            pts = [(r["t_s"], r["value"]) for r in rows if r["kind"] == kind
                   and r["what"] == what]
            ax.plot([p[0] / 60 for p in pts], [p[1] for p in pts], label=what)
        ax.set_title(title)
        ax.set_xlabel("minutes")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=6)
    return fig
