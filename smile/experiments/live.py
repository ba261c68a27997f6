"""A live run on the cloud `smile up` started: the dataset loaded (the nine relations replaced)
and published once, traffic at a steady tweet rate for as long as the run lasts, sharings
submitted and withdrawn over the REST API, and the auditor's snapshots read back.

Must not: start on a cloud where sharings are admitted (it would replace the data under them),
or leave its own sharings admitted or its traffic running, whatever happens inside.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from smile.costmodel.time_model import TimeModel
from smile.dataset.sharings import paper_sla, table1
from smile.errors import CloudError
from smile.executor.steady import WINDOW_S
from smile.experiments import dollars
from smile.harness.cloud import admin_client, expect_ok, prepared_cloud, withdraw_all
from smile.harness.output import progress
from smile.harness.traffic import Traffic

if TYPE_CHECKING:
    from types import TracebackType

    from smile.api.client import Client
    from smile.experiments.context import Context
    from smile.experiments.dollars import Dollars
    from smile.harness.scale import Scale

SNAPSHOT_S = 5.0
"""The auditor's period."""


@dataclass(frozen=True)
class Snapshot:
    """One row of the auditor (`smile_catalog.audit`) for one sharing."""

    at: datetime
    staleness_s: float
    sla_ok: bool
    violations: int
    late_tuples: int
    tuples_moved: int
    work_s: float
    mv_ts: datetime | None


@dataclass(frozen=True)
class Audited:
    name: str
    sla_s: float
    snapshots: tuple[Snapshot, ...] = ()
    recomputed: int = 0
    """Pushes that recomputed its MV (`GET /sharings`' `pushes_by_path`), read with the audit:
    before it is withdrawn, after which it has none."""

    @property
    def hours(self) -> float:
        """Sharing-hours the auditor watched it for (first to last snapshot, plus one
        period)."""
        if not self.snapshots:
            return 0.0
        span = (self.snapshots[-1].at - self.snapshots[0].at).total_seconds()
        return (span + 5.0) / 3600.0

    @property
    def violations(self) -> int:
        """Snapshots in which its staleness was over its SLA."""
        return sum(not s.sla_ok for s in self.snapshots)

    def pushed_span(self, since: datetime) -> tuple[datetime, datetime] | None:
        """The MV's timestamps at its first snapshot at or after `since` and at its last, when
        it advanced between them: the data its pushes kept fresh (`dollars.measure`'s span),
        the unit a cost is fairly taken per.

        >>> from datetime import timedelta
        >>> t = datetime(2026, 1, 1, tzinfo=UTC)
        >>> snap = lambda s, mv: Snapshot(t + timedelta(seconds=s), 1.0, True, 0, 0, 0, 0.0,
        ...                               t + timedelta(seconds=mv) if mv is not None else None)
        >>> a = Audited("S1", 20.0, (snap(0, 0), snap(5, 3), snap(30, 20), snap(35, None)))
        >>> [(x - t).total_seconds() for x in a.pushed_span(t + timedelta(seconds=5))]
        [3.0, 20.0]
        >>> a.advanced_s(t + timedelta(seconds=5))
        17.0
        >>> Audited("S1", 20.0, (snap(5, 3), snap(10, 3))).pushed_span(t) is None
        True
        """
        stamped = [s.mv_ts for s in self.snapshots if s.at >= since and s.mv_ts is not None]
        return (stamped[0], stamped[-1]) if len(stamped) > 1 and stamped[-1] > stamped[0] \
            else None

    def advanced_s(self, since: datetime) -> float:
        """Seconds of data the MV advanced over from its first snapshot at or after `since`
        to its last (`pushed_span`)."""
        span = self.pushed_span(since)
        return (span[1] - span[0]).total_seconds() if span is not None else 0.0


class LiveRun:
    """`with LiveRun(ctx, scale) as run:` — the dataset of `scale` loaded on its machines,
    traffic at its rate inside (none if `rate` is 0: a run that starts each round's itself),
    and sharings submitted there withdrawn on the way out."""

    def __init__(self, ctx: Context, scale: Scale, *, rate: float | None = None,
                 machines: int | None = None, warmup_s: float = WINDOW_S) -> None:
        self.settings, self.topology = ctx.settings, ctx.topology()
        self.machines = scale.machines if machines is None else machines
        if len(self.topology.machines) < self.machines:
            raise CloudError(f"the cloud has {len(self.topology.machines)} machines, not "
                             f"{self.machines}: start it with `smile up --machines "
                             f"{self.machines}`")
        self.rate = scale.rate if rate is None else rate
        self.tweets, self.warmup_s = scale.tweets, warmup_s
        self.api: Client | None = None
        self.traffic = Traffic(self.topology)
        self.suffixes: set[str] = set()
        """Those of the sharings submitted here (withdrawn on the way out)."""

    def __enter__(self) -> LiveRun:
        api = admin_client(self.settings)
        try:
            listed = expect_ok(*api.call("GET", "/sharings"), "listing sharings")
        except OSError as exc:
            raise CloudError(f"the API at {api.url} does not answer ({exc}): start the cloud "
                             "with `smile up`") from exc
        busy = sorted(s["name"] for s in listed if s["status"] == "admitted")
        if busy:
            raise CloudError(f"{len(busy)} sharings are admitted ({', '.join(busy[:5])}"
                             f"{', …' if len(busy) > 5 else ''}): an experiment loads its own "
                             "dataset and needs a cloud without sharings; withdraw them first")
        self._load()
        if self.rate > 0:
            self.start_traffic(self.rate)
        return self

    def reload(self) -> None:
        """The dataset loaded afresh and published (traffic stopped; the run's sharings must
        be withdrawn): runs one after another start from the same data, not from what the
        traffic of the earlier ones added (joins over grown relations move more rows)."""
        self.stop_traffic()
        self._load()

    def _load(self) -> None:
        """The dataset loaded on the run's machines and published, nothing admitted."""
        names = [m.name for m in self.topology.machines[:self.machines]]
        self.api, _ = prepared_cloud(self.settings, self.topology, names, self.tweets)

    def start_traffic(self, rate: float, warmup_s: float | None = None) -> None:
        """Traffic at `rate` tweets/s from now on, after `warmup_s` of it (so that the rate
        monitor measures this traffic, not the last; by default the run's)."""
        self.rate = rate
        self.traffic.start(rate)
        self.traffic.sleep(self.warmup_s if warmup_s is None else warmup_s)

    def stop_traffic(self) -> None:
        self.traffic.stop()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop_traffic()
        if self.api is not None:
            for suffix in sorted(self.suffixes):
                withdraw_all(self.api, suffix=suffix)

    @property
    def client(self) -> Client:
        assert self.api is not None, "use LiveRun inside `with`"
        return self.api

    def check(self) -> None:
        self.traffic.check()

    def submit(self, name: str, sql: str, sla_s: float, penalty: float = 0.0001,
               suffix: str = "", mv_machine: str | None = None) -> dict[str, Any]:
        """The decision (admitted or rejected, and why) on `name` (which ends in `suffix`),
        its MV on `mv_machine` (None: where the optimizer puts it)."""
        self.suffixes.add(suffix or name)
        body_in: dict[str, Any] = {"name": name, "sql": sql, "staleness_s": sla_s,
                                   "penalty_per_tuple": penalty}
        if mv_machine is not None:
            body_in["mv_machine"] = mv_machine
        status, body = self.client.call("POST", "/sharings", body_in, timeout=900)
        if status not in (201, 422):
            raise CloudError(f"submitting {name} failed ({status}): {body}")
        out: dict[str, Any] = body
        return out

    def submit_table1(self, names: tuple[str, ...], suffix: str,
                      sla: str) -> list[dict[str, Any]]:
        """Table 1's sharings `names`, each as NAME + `suffix`, with SLA `sla` seconds (or
        "mix": the paper's); their decisions."""
        specs = {s.name: s for s in table1()}
        decided = []
        with progress(f"submitting {len(names)} sharings (SLA {sla})", len(names)) as advance:
            for name in names:
                sla_s = paper_sla(name) if sla == "mix" else float(sla)
                body = self.submit(name + suffix, specs[name].sql, sla_s, suffix=suffix)
                decided.append(_decided(name, sla_s, body))
                advance(1)
        return decided

    def submit_copies(self, decided: list[dict[str, Any]], copies: int, suffix: str
                      ) -> list[dict[str, Any]]:
        """`copies` more sharings (paper §9.4: "placing the same sharing on more than one
        machine"): the i-th copies the i-th of `decided` (round robin), named NAME_cJ +
        `suffix`, its MV on the J-th machine after the original's, so that it is not merely
        a second view of the same MV; their decisions."""
        specs = {s.name: s for s in table1()}
        machines = [m.name for m in self.topology.machines[:self.machines]]
        placed = [d for d in decided if d["mv_machine"] in machines]
        out: list[dict[str, Any]] = []
        if copies <= 0:
            return out
        if len(machines) < 2:
            raise CloudError("copies of sharings on other machines need two machines")
        if not placed:  # nothing admitted to copy: the round is not held
            return [{"name": f"copy{i + 1}", "sla_s": None, "status": "rejected",
                     "reason": "no admitted original to copy", "algorithm": None,
                     "plumbings": [], "mv_machine": None} for i in range(copies)]
        with progress(f"submitting {copies} copies on other machines", copies) as advance:
            for i in range(copies):
                orig, nth = placed[i % len(placed)], i // len(placed) + 1
                home = machines.index(orig["mv_machine"])
                where = machines[(home + nth) % len(machines)]
                name = f"{orig['name']}_c{nth}"
                body = self.submit(name + suffix, specs[orig["name"]].sql, orig["sla_s"],
                                   suffix=suffix, mv_machine=where)
                out.append(_decided(name, orig["sla_s"], body, where))
                advance(1)
        return out

    def wait(self, seconds: float, tick: float = 5.0,
             advance: Any = None) -> None:
        """`seconds` of traffic, calling `advance(tick)` every tick (a progress bar)."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            if self.traffic.sleep(min(tick, left)):
                break
            self.check()
            if advance is not None:
                advance(min(tick, max(left, 0.0)))

    def audited(self, suffix: str) -> list[Audited]:
        """The auditor's snapshots of every admitted sharing whose name ends in `suffix`."""
        out = []
        for s in expect_ok(*self.client.call("GET", "/sharings"), "listing sharings"):
            if s["status"] != "admitted" or not s["name"].endswith(suffix):
                continue
            doc = expect_ok(*self.client.call(
                "GET", f"/sharings/{s['id']}/history?limit=10000"), "history")
            out.append(Audited(s["name"], float(s["sla_s"]),
                               tuple(_snapshot(p) for p in doc["points"]),
                               int(s.get("pushes_by_path", {}).get("recompute", 0))))
        return out

    def measured_window(self, suffix: str, seconds: float, what: str,
                        data_since: datetime | None = None
                        ) -> tuple[list[Audited], Dollars, float | None]:
        """`seconds` of traffic with the sharings ending in `suffix` admitted (a progress bar
        saying `what`), then: their audit, the dollars they cost meanwhile (beside the
        model's), the rate the traffic achieved; the traffic is stopped and they are
        withdrawn. With `data_since` the pushes priced are those over each sharing's span of
        data from then (`Audited.pushed_span`): for a cost per hour of data."""
        since = datetime.now(UTC)
        with progress(what, seconds) as advance:
            self.wait(seconds, advance=advance)
        audited = self.audited(suffix)
        spans = None if data_since is None else {
            a.name: span for a in audited if (span := a.pushed_span(data_since)) is not None}
        cost = dollars.measure(self.topology, [a.name for a in audited], since,
                               datetime.now(UTC), predicted_load=self.predicted_load(),
                               model=TimeModel(), spans=spans)
        self.stop_traffic()
        achieved = self.achieved_rate()
        self.withdraw(suffix)
        return audited, cost, achieved

    def predicted_load(self) -> dict[str, float]:
        """Each machine's operator load the global plan should take now (`GET /machines`)."""
        return {m["name"]: float(m["predicted_load"] or 0.0) for m in expect_ok(
            *self.client.call("GET", "/machines"), "reading the machines")}

    def withdraw(self, suffix: str) -> None:
        withdraw_all(self.client, suffix=suffix)

    def achieved_rate(self) -> float | None:
        """Tweets/s the traffic wrote, once stopped (None while it runs)."""
        return self.traffic.achieved_rate


def at_moment(points: list[tuple[float, float | None]], at: float) -> float | None:
    """A cost measured in runs before and after others, at the moment `at` (seconds into the
    experiment) of one between them, from those runs' (middle, cost): interpolated in time
    between the first and the last that measured it, the one if only one did. The tables
    grow and the box drifts all through an experiment, so a run compared with one measured
    earlier alone would differ for running later (Table 2's mix, Fig. 12 live's DPD).

    >>> at_moment([(10.0, 1.0), (90.0, 3.0)], 50.0)
    2.0
    >>> at_moment([(10.0, None), (90.0, 3.0)], 50.0), at_moment([(10.0, 1.0)], 50.0)
    (3.0, 1.0)
    >>> at_moment([], 50.0) is None
    True
    """
    got = [(t, c) for t, c in points if c is not None]
    if not got:
        return None
    (t0, c0), (t1, c1) = got[0], got[-1]
    return c0 if t1 == t0 else c0 + (c1 - c0) * (at - t0) / (t1 - t0)


def _decided(name: str, sla_s: float, body: dict[str, Any],
             mv_machine: str | None = None) -> dict[str, Any]:
    """What the experiments keep of a decision on Table 1's `name` (`POST /sharings`'s
    answer `body`); its MV's machine is `mv_machine` when the submission named one."""
    return {"name": name, "sla_s": sla_s, "status": body["status"], "reason": body["reason"],
            "algorithm": body.get("algorithm"), "plumbings": body.get("plumbings", []),
            "mv_machine": mv_machine or (body.get("mv") or {}).get("machine"),
            "charged_by_recompute": bool(body.get("charged_by_recompute", False))}


def moved_per_snapshot(audited: list[Audited]) -> dict[int, int]:
    """Tuples moved in each 5-s snapshot (numbered from the first), summed over sharings."""
    stamps = [s.at for a in audited for s in a.snapshots]
    if not stamps:
        return {}
    start = min(stamps)
    out: dict[int, int] = {}
    for a in audited:
        for prev, cur in itertools.pairwise(a.snapshots):
            k = int((cur.at - start).total_seconds() // SNAPSHOT_S)
            out[k] = out.get(k, 0) + cur.tuples_moved - prev.tuples_moved
    return out


def _snapshot(p: dict[str, Any]) -> Snapshot:
    def ts(v: Any) -> datetime | None:
        return datetime.fromisoformat(v) if isinstance(v, str) else None

    at = ts(p["at"])
    assert at is not None
    return Snapshot(at, float(p["staleness_s"]), bool(p["sla_ok"]), int(p["violations"]),
                    int(p.get("late_tuples") or 0), int(p.get("tuples_moved") or 0),
                    float(p.get("work_s") or 0.0), ts(p.get("mv_ts")))
