"""Fig. 14, from a live run on the cloud `smile up` started (paper §9.5): the staleness of S4
(SLA 50 s) across the auditor's snapshots while, in phases, the tweet rate rises and more and
more simulated users read every MV — the machines get loaded under the executor's feet.

Each user is a closed loop of one query template on one MV (`SELECT count(*)` over it, read
with the consumer's own DSN as any PostgreSQL client would), run in a thread of this process;
the users share a pool of connections per machine, as an application's users do: a consumer's
role may open only `roles.CONNECTION_LIMIT` connections on a machine.
S1–S4 of Table 1 are admitted with SLAs of 20, 40, 70 and 50 s (the paper: S4 at 50 s, the
others between 20 and 70 s).

The small default: 3 machines, phases of 60 s at 2, 4, 8 and 16 users per MV and 50, 75, 100
and 150 tweets/s. `--full`: 4 machines (the paper's), 2, 8, 16, 32 and 50 users per MV at
50 … 150 tweets/s, 5 minutes a phase.

Must not: count anything the auditor did not record.
"""

from __future__ import annotations

import queue
import statistics
import threading
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from smile.dataset.sharings import table1
from smile.deploy.roles import CONNECTION_LIMIT
from smile.errors import CloudError
from smile.experiments.live import LiveRun
from smile.harness.footprint import TICKS_PER_S, cpu_between, cpu_by_daemon, waits_by_daemon
from smile.harness.output import one_plot, progress
from smile.harness.scale import Scale

if TYPE_CHECKING:
    from smile.experiments.context import Context
    from smile.experiments.live import Audited

SLAS = {"S1": 20.0, "S2": 40.0, "S3": 70.0, "S4": 50.0}
WATCHED = "S4"
POOL = CONNECTION_LIMIT - 1
"""Connections the readers of one machine's MVs share (one left to the consumer)."""
PAPER_FIG14 = {"sla_s": 50, "max_staleness_s": 40, "machines": 4,
               "users_per_mv": [8, 50], "rate": [50, 150],
               "claim": "S4's staleness never exceeds 40 s as users and rate grow"}


SCALES = {"tiny": Scale(5_000, 3, (50.0, 100.0), 25.0, tuple(SLAS)),
          "small": Scale(20_000, 3, (50.0, 75.0, 100.0, 150.0), 60.0, tuple(SLAS)),
          "full": Scale(7_000_000, 4, (50.0, 75.0, 100.0, 125.0, 150.0), 300.0, tuple(SLAS))}
"""A phase at each rate; each window (`window_s`) is a phase."""
USERS = {"tiny": (1, 3), "small": (2, 4, 8, 16), "full": (2, 8, 16, 32, 50)}
"""Readers per MV in each phase."""


class Readers:
    """Simulated users: closed loops of one query on one MV each, as many as asked. Like the
    users of an application, they share its connections: a consumer's role may open
    `CONNECTION_LIMIT` per machine (roles.py), so each DSN gets a pool of one fewer, and a
    user waits for a free connection before each query."""

    def __init__(self, mvs: dict[str, tuple[str, str]]) -> None:
        self.mvs = mvs
        """Sharing → (the consumer's DSN, the MV's table)."""
        self.loops: list[tuple[threading.Thread, threading.Event]] = []
        self.queries = 0
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._idle: dict[str, queue.Queue[psycopg.Connection[Any]]] = {}
        self._opened: dict[str, int] = {}

    def set_users(self, per_mv: int) -> None:
        want = per_mv * len(self.mvs)
        while len(self.loops) > want:
            thread, stop = self.loops.pop()
            stop.set()
            thread.join(30)
        names = sorted(self.mvs)
        while len(self.loops) < want:
            stop = threading.Event()
            name = names[len(self.loops) % len(names)]
            thread = threading.Thread(target=self._loop, args=(*self.mvs[name], stop),
                                      daemon=True, name=f"reader-{name}")
            thread.start()
            self.loops.append((thread, stop))

    def _take(self, dsn: str) -> psycopg.Connection[Any] | None:
        """A connection of `dsn`'s pool: an idle one, a new one while the pool is not full,
        else the next one given back (None if none within a second)."""
        with self._lock:
            idle = self._idle.setdefault(dsn, queue.Queue())
            grow = idle.empty() and self._opened.get(dsn, 0) < POOL
            if grow:
                self._opened[dsn] = self._opened.get(dsn, 0) + 1
        if grow:
            try:
                return psycopg.connect(dsn, autocommit=True, connect_timeout=10)
            except psycopg.Error:
                with self._lock:
                    self._opened[dsn] -= 1
                raise
        try:
            return idle.get(timeout=1.0)
        except queue.Empty:
            return None

    def _loop(self, dsn: str, table: str, stop: threading.Event) -> None:
        query = sql.SQL("SELECT count(*) FROM {}").format(sql.SQL(table))
        while not stop.is_set():
            conn = None
            try:
                conn = self._take(dsn)
                if conn is None:
                    continue
                conn.execute(query).fetchone()
                with self._lock:
                    self.queries += 1
                self._idle[dsn].put(conn)
            except psycopg.Error as exc:  # the MV's database busy or restarting: again
                with self._lock:
                    self.errors.append(str(exc).strip()[:200])
                    if conn is not None:
                        self._opened[dsn] -= 1
                if conn is not None:
                    conn.close()
                stop.wait(1.0)

    def close(self) -> None:
        self.set_users(0)
        for idle in self._idle.values():
            while not idle.empty():
                idle.get().close()


def phase_summary(a: Audited, bounds: list[tuple[datetime, datetime]]
                  ) -> list[dict[str, Any]]:
    """Per phase (start, end): the watched sharing's snapshots in it, their mean and peak
    staleness and violations.

    >>> from datetime import timedelta
    >>> from smile.experiments.live import Audited, Snapshot
    >>> t = datetime(2026, 1, 1, tzinfo=UTC)
    >>> at = lambda s: t + timedelta(seconds=s)
    >>> snaps = tuple(Snapshot(at(s), st, st <= 50, 0, 0, 0, 0.0, None)
    ...               for s, st in ((5, 10.0), (10, 30.0), (65, 55.0)))
    >>> [p["mean_staleness_s"] for p in phase_summary(Audited("S4", 50.0, snaps),
    ...                                              [(at(0), at(60)), (at(60), at(120))])]
    [20.0, 55.0]
    """
    out = []
    for start, end in bounds:
        mine = [s for s in a.snapshots if start <= s.at < end]
        stale = [s.staleness_s for s in mine]
        out.append({"snapshots": len(mine),
                    "mean_staleness_s": round(statistics.fmean(stale), 2) if stale else None,
                    "max_staleness_s": round(max(stale), 2) if stale else None,
                    "violations": sum(not s.sla_ok for s in mine)})
    return out


def smile_daemons(cpu: dict[str, float], waits: dict[str, float]
                  ) -> dict[str, dict[str, float]]:
    """Per kind of SMILE daemon (agents and capturers summed over the machines, `serve`): the
    cores it took and the seconds its threads waited for a core, per second of the phase
    (`footprint.cpu_between` of `cpu_by_daemon` and of `waits_by_daemon`). Waits far above
    the CPU say the daemons were kept from the cores (`supervisor.DAEMONS_NICE`).

    >>> smile_daemons({"agent m1": 0.01, "agent m2": 0.02, "postgres m1": 1.2, "serve": 0.02},
    ...               {"agent m1": 2.0, "agent m2": 1.5, "serve": 0.5})
    {'agent': {'cores': 0.03, 'core_wait_s': 3.5}, 'capture': {'cores': 0.0, \
'core_wait_s': 0.0}, 'serve': {'cores': 0.02, 'core_wait_s': 0.5}}
    """
    out = {kind: {"cores": 0.0, "core_wait_s": 0.0} for kind in ("agent", "capture", "serve")}
    for figures, key in ((cpu, "cores"), (waits, "core_wait_s")):
        for name, value in figures.items():
            kind = name.split()[0]
            if kind in out:
                out[kind][key] = round(out[kind][key] + value, 3)
    return out


def run(ctx: Context) -> dict[str, Any]:
    sc, users = ctx.pick(SCALES), ctx.pick(USERS)
    suffix = "_f14"
    with LiveRun(ctx, sc) as run_:
        mvs, decided = _submitted(run_, suffix)
        readers = Readers(mvs)
        try:
            bounds, reads, daemons = _phases(run_, readers, sc, users,
                                             str(ctx.settings.state_dir))
        finally:
            readers.close()
        time.sleep(1.0)
        audited = {a.name.split("_")[0]: a for a in run_.audited(suffix)}
        run_.stop_traffic()
    watched = audited[WATCHED]
    summary = phase_summary(watched, bounds)
    phases = [{"phase": i + 1, "users_per_mv": u, "rate": rate,
               "reads_per_s": round(n / sc.window_s, 1), **s, "smile_daemons": d}
              for i, (u, rate, n, s, d) in enumerate(zip(users, sc.rates, reads, summary,
                                                         daemons, strict=True))]
    start = bounds[0][0]
    rows = [{"sharing": name, "at_s": round((s.at - start).total_seconds(), 1),
             "staleness_s": s.staleness_s, "sla_s": a.sla_s, "sla_ok": s.sla_ok}
            for name, a in sorted(audited.items()) for s in a.snapshots if s.at >= start]
    peak = max((p["max_staleness_s"] for p in phases if p["max_staleness_s"] is not None),
               default=None)
    # the phases' figures leave out what came after the last one ended; the auditor's
    # snapshots of the watched sharing until the run was read say it all
    whole = [s for s in watched.snapshots if s.at >= start]
    out = ctx.outputs("fig14")
    out.csv(rows)
    doc = {"experiment": "fig14", "measured": True, "machines": sc.machines,
           "sharings": decided, "watched": WATCHED, "sla_s": SLAS[WATCHED],
           "phase_s": sc.window_s, "phases": phases, "max_staleness_s": peak,
           "violations": sum(p["violations"] for p in phases),
           "whole_run": {"snapshots": len(whole),
                         "violations": sum(not s.sla_ok for s in whole),
                         "max_staleness_s": max((s.staleness_s for s in whole), default=None)},
           "pool_per_machine": POOL, "read_errors": len(readers.errors),
           "read_error_sample": sorted(set(readers.errors))[:3], "paper": PAPER_FIG14}
    out.json(doc)
    out.png(_draw(rows, phases, sc))
    return doc


def _submitted(run_: LiveRun, suffix: str
               ) -> tuple[dict[str, tuple[str, str]], list[dict[str, Any]]]:
    """S1–S4 submitted at their SLAs (`SLAS`): each admitted one's (consumer DSN, MV table),
    and every decision; raises unless the watched one was admitted."""
    specs = {s.name: s for s in table1()}
    mvs, decided = {}, []
    for name, sla_s in SLAS.items():
        body = run_.submit(name + suffix, specs[name].sql, sla_s, suffix=suffix)
        decided.append({"name": name, "sla_s": sla_s, "status": body["status"],
                        "reason": body["reason"]})
        if body["status"] == "admitted":
            if not body["mv"]["dsn"]:
                raise CloudError(f"{name}'s MV has no consumer DSN to read it with")
            mvs[name] = (body["mv"]["dsn"], body["mv"]["table"])
    if WATCHED not in mvs:
        raise CloudError(f"{WATCHED} was not admitted: " + "; ".join(
            f"{d['name']}: {d['reason']}" for d in decided))
    return mvs, decided


def _phases(run_: LiveRun, readers: Readers, sc: Scale, users: tuple[int, ...],
            state_dir: str) -> tuple[list[tuple[datetime, datetime]], list[int],
                                     list[dict[str, dict[str, float]]]]:
    """Each phase in turn, at its rate with its readers: when it began and ended, the reads
    made in it, and what SMILE's daemons took (`smile_daemons`)."""
    bounds: list[tuple[datetime, datetime]] = []
    reads: list[int] = []
    daemons: list[dict[str, dict[str, float]]] = []
    total = sc.window_s * len(sc.rates)
    with progress(f"{len(sc.rates)} phases of {sc.window_s:.0f} s", total) as adv:
        for i, (per_mv, rate) in enumerate(zip(users, sc.rates, strict=True)):
            if i:
                run_.start_traffic(rate, warmup_s=0.0)
            readers.set_users(per_mv)
            before, start = readers.queries, datetime.now(UTC)
            cpu0, wait0 = cpu_by_daemon(state_dir), waits_by_daemon(state_dir)
            run_.wait(sc.window_s, advance=adv)
            bounds.append((start, datetime.now(UTC)))
            reads.append(readers.queries - before)
            seconds = (bounds[-1][1] - start).total_seconds()
            daemons.append(smile_daemons(
                cpu_between(cpu0, cpu_by_daemon(state_dir), seconds, TICKS_PER_S),
                cpu_between(wait0, waits_by_daemon(state_dir), seconds, 1e9)))
    return bounds, reads, daemons


def _draw(rows: list[dict[str, Any]], phases: list[dict[str, Any]], sc: Scale) -> Any:
    fig, ax = one_plot(8, 4)
    mine = [r for r in rows if r["sharing"] == WATCHED]
    ax.plot([r["at_s"] / 5.0 for r in mine], [r["staleness_s"] for r in mine], marker=".",
            label=f"{WATCHED} (measured)")
    ax.axhline(SLAS[WATCHED], color="red", linestyle="--", label=f"SLA {SLAS[WATCHED]:g} s")
    for i, p in enumerate(phases):
        lo, hi = i * sc.window_s / 5.0, (i + 1) * sc.window_s / 5.0
        if i:
            ax.axvline(lo, color="grey", linewidth=0.8)
        if p["mean_staleness_s"] is not None:
            ax.hlines(p["mean_staleness_s"], lo, hi, colors="green", linewidth=2)
        ax.text((lo + hi) / 2, SLAS[WATCHED] * 1.05, f"{p['users_per_mv']} users\n"
                f"{p['rate']:g} t/s", ha="center", fontsize=8)
    ax.set_xlabel("snapshot (5 s)")
    ax.set_ylabel("staleness (s)")
    ax.set_ylim(0, SLAS[WATCHED] * 1.3)
    ax.set_title("Fig. 14: staleness of S4 as the rate and the readers grow "
                 "(green: each phase's mean)")
    ax.legend(loc="lower right")
    return fig
