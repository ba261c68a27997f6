"""A live run on the cloud `smile up` started: the dataset loaded and published once, traffic at
a steady tweet rate for as long as the run lasts, sharings submitted and withdrawn over the
REST API, and the auditor's snapshots read back.

Must not: leave its sharings admitted or its traffic running, whatever happens inside.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from smile.bench.admission import expect_ok, prepared_cloud, withdraw_all
from smile.errors import CloudError
from smile.workload.driver import WorkloadDriver, WorkloadReport

if TYPE_CHECKING:
    from types import TracebackType

    from smile.api.client import Client
    from smile.settings import Settings
    from smile.topology import Topology

LONGEST_S = 6 * 3600.0
"""Traffic is started for this long and stopped when the run ends."""


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


@dataclass
class Audited:
    name: str
    sla_s: float
    snapshots: list[Snapshot] = field(default_factory=list)

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


class LiveRun:
    """`with LiveRun(...) as run:` — traffic runs inside, sharings submitted there are
    withdrawn on the way out."""

    def __init__(self, settings: Settings, topology: Topology, *, rate: float, tweets: int,
                 machines: int = 3, warmup_s: float = 40.0) -> None:
        if len(topology.machines) < machines:
            raise CloudError(f"the cloud has {len(topology.machines)} machines, not "
                             f"{machines}: start it with `smile up --machines {machines}`")
        self.settings, self.topology, self.rate = settings, topology, rate
        self.tweets, self.machines, self.warmup_s = tweets, machines, warmup_s
        self.api: Client | None = None
        self.stop = threading.Event()
        self.report: list[WorkloadReport] = []
        self.failure: list[BaseException] = []
        self.traffic: threading.Thread | None = None

    def __enter__(self) -> LiveRun:
        names = [m.name for m in self.topology.machines[:self.machines]]
        self.api, _ = prepared_cloud(self.settings, self.topology, names, self.tweets)
        self.start_traffic(self.rate)
        return self

    def start_traffic(self, rate: float) -> None:
        """Traffic at `rate` tweets/s from now on, after `warmup_s` of it (so that the rate
        monitor measures this traffic, not the last)."""
        self.stop_traffic()
        self.rate, self.stop = rate, threading.Event()
        self.report, self.failure = [], []
        self.traffic = threading.Thread(target=self._drive, args=(rate, self.stop),
                                        daemon=True, name="traffic")
        self.traffic.start()
        self.stop.wait(self.warmup_s)

    def stop_traffic(self) -> None:
        self.stop.set()
        if self.traffic is not None:
            self.traffic.join(60)
            self.traffic = None

    def _drive(self, rate: float, stop: threading.Event) -> None:
        try:
            self.report.append(WorkloadDriver(self.topology, seed=int(rate))
                               .run(rate, LONGEST_S, stop=stop))
        except BaseException as exc:  # raised by `check`
            self.failure.append(exc)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop_traffic()
        if self.api is not None:
            withdraw_all(self.api)

    @property
    def client(self) -> Client:
        assert self.api is not None, "use LiveRun inside `with`"
        return self.api

    def check(self) -> None:
        if self.failure:
            raise CloudError(f"the traffic at {self.rate:g} tweets/s stopped: "
                             f"{self.failure[0]}")

    def submit(self, name: str, sql: str, sla_s: float, penalty: float = 0.0001) -> dict[str, Any]:
        """The decision (admitted or rejected, and why)."""
        status, body = self.client.call("POST", "/sharings", {
            "name": name, "sql": sql, "staleness_s": sla_s, "penalty_per_tuple": penalty},
            timeout=900)
        if status not in (201, 422):
            raise CloudError(f"submitting {name} failed ({status}): {body}")
        out: dict[str, Any] = body
        return out

    def wait(self, seconds: float, tick: float = 5.0,
             advance: Any = None) -> None:
        """`seconds` of traffic, calling `advance(tick)` every tick (a progress bar)."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            if self.stop.wait(min(tick, left)):
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
            out.append(Audited(s["name"], float(s["sla_s"]), [_snapshot(p) for p in
                                                              doc["points"]]))
        return out

    def predicted_load(self) -> dict[str, float]:
        """Each machine's operator load the global plan should take now (`GET /machines`)."""
        return {m["name"]: float(m["predicted_load"] or 0.0) for m in expect_ok(
            *self.client.call("GET", "/machines"), "reading the machines")}

    def withdraw(self, suffix: str) -> None:
        withdraw_all(self.client, suffix=suffix)

    def achieved_rate(self) -> float | None:
        """Tweets/s the traffic wrote, once stopped (None while it runs)."""
        return self.report[0].achieved_rate if self.report else None


def _snapshot(p: dict[str, Any]) -> Snapshot:
    def ts(v: Any) -> datetime | None:
        return datetime.fromisoformat(v) if isinstance(v, str) else None

    at = ts(p["at"])
    assert at is not None
    return Snapshot(at, float(p["staleness_s"]), bool(p["sla_ok"]), int(p["violations"]),
                    int(p.get("late_tuples") or 0), int(p.get("tuples_moved") or 0),
                    float(p.get("work_s") or 0.0), ts(p.get("mv_ts")))
