"""`GET /metrics`: SMILE's state in Prometheus' text format. `take` reads a `Snapshot` — the
catalog's sharings and each admitted one's last audit, every machine's loads, and, under the
executor's lock (its push threads add and drop the sharings it tracks), its pushes per
sharing, re-fits and time models; `render` formats a snapshot and reads nothing.

Must not: format while it reads, or hold the executor's lock longer than a copy takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from smile.costmodel.time_model import EDGE_KINDS

if TYPE_CHECKING:
    from collections.abc import Mapping

    from smile.api.services import Services
    from smile.costmodel.time_model import TimeModel
    from smile.executor.machine_load import MachineLoad
    from smile.executor.runtime import Executor
    from smile.executor.store import CatalogStore, SharingRow


@dataclass(frozen=True)
class ExecutorReading:
    pushes: tuple[tuple[str, int], ...]
    """(sharing, pushes completed) of each sharing the executor tracks."""
    refits: int
    models: tuple[tuple[str, TimeModel], ...]
    """("current", the time model it learnt online), ("calibrated", the one it started from)."""


@dataclass(frozen=True)
class Snapshot:
    sharings: tuple[SharingRow, ...]
    audits: Mapping[str, Mapping[str, Any] | None]
    """Each admitted sharing's last audit snapshot (None before the first)."""
    loads: tuple[tuple[str, MachineLoad], ...]
    """By machine name, sorted."""
    executor: ExecutorReading


def read_executor(ex: Executor) -> ExecutorReading:
    """What /metrics reports of the executor, copied under its lock."""
    with ex.lock:
        tracked = list(ex.tracked.items())
        pushes = tuple((t.name, t.pushes) for _, t in tracked)
        refits, model, calibrated = ex.refits, ex.model, ex.calibrated
    return ExecutorReading(pushes, refits, (("current", model), ("calibrated", calibrated)))


def take(services: Services, store: CatalogStore) -> Snapshot:
    everything = tuple(store.sharings())
    audits = {r.name: store.last_audit(r.name, r.created_at)
              for r in everything if r.status == "admitted"}
    return Snapshot(everything, audits, tuple(sorted(services.machine_loads(store).items())),
                    read_executor(services.executor))


GAUGES = (("staleness_seconds", "staleness_s"), ("sla_seconds", "sla_s"))
COUNTERS = (("violations_total", "violations"), ("tuples_moved_total", "tuples_moved"),
            ("late_tuples_total", "late_tuples"), ("work_seconds_total", "work_s"))


def render(snap: Snapshot) -> str:
    """The text of a scrape: per sharing, then the executor's pushes, the machines' loads,
    the time model, and the sharings by status."""
    return "\n".join([*_audited(snap.audits), *_pushes(snap.executor), *_loads(snap.loads),
                      *_model(snap.executor), *_statuses(snap.sharings)]) + "\n"


def _audited(audits: Mapping[str, Mapping[str, Any] | None]) -> list[str]:
    lines = ["# HELP smile_sharing_staleness_seconds Staleness at the last audit snapshot.",
             "# TYPE smile_sharing_staleness_seconds gauge"]
    for metric, key in GAUGES + COUNTERS:
        if metric != "staleness_seconds":
            kind = "counter" if (metric, key) in COUNTERS else "gauge"
            lines += [f"# HELP smile_sharing_{metric} {key} from the auditor.",
                      f"# TYPE smile_sharing_{metric} {kind}"]
        lines += [f'smile_sharing_{metric}{{sharing="{name}"}} {float(audit[key])}'
                  for name, audit in audits.items() if audit is not None]
    lines += ["# HELP smile_sharing_cost_dollars Resources and penalties so far.",
              "# TYPE smile_sharing_cost_dollars counter"]
    lines += [f'smile_sharing_cost_dollars{{sharing="{name}",part="{part}"}} '
              f"{float(audit[part])}" for name, audit in audits.items() if audit is not None
              for part in ("resource_cost", "penalty_cost")]
    return lines


def _pushes(ex: ExecutorReading) -> list[str]:
    return ["# HELP smile_executor_pushes_total Pushes completed.",
            "# TYPE smile_executor_pushes_total counter",
            *(f'smile_executor_pushes_total{{sharing="{name}"}} {n}' for name, n in ex.pushes)]


def _loads(reports: tuple[tuple[str, MachineLoad], ...]) -> list[str]:
    lines = ["# HELP smile_machine_load Operator core-seconds per second (predicted: the "
             "global plan at the current rates; measured: PUSH_DONEs of the last minute; "
             "sustained: of the last five; bound: what admission holds it to, on one box "
             "its share).",
             "# TYPE smile_machine_load gauge"]
    for kind in ("predicted", "measured", "sustained", "bound"):
        lines += [f'smile_machine_load{{machine="{m}",kind="{kind}"}} {v}'
                  for m, r in reports if (v := getattr(r, kind)) is not None]
    lines += ["# HELP smile_machine_over_bound 1 while the sustained load is over the bound "
              "(the sharings on the machine are at risk).", "# TYPE smile_machine_over_bound gauge"]
    lines += [f'smile_machine_over_bound{{machine="{m}"}} {int(r.over_bound)}' for m, r in reports]
    return lines


def _model(ex: ExecutorReading) -> list[str]:
    lines = ["# HELP smile_time_model_refits_total Online re-fits of the time model.",
             "# TYPE smile_time_model_refits_total counter",
             f"smile_time_model_refits_total {ex.refits}",
             "# HELP smile_time_model_seconds Each edge kind's current line, seconds = a + b "
             "* tuples (coef a: per push, b: per tuple), and the dispatch overhead per edge; "
             "the calibrated ones beside them (model=\"calibrated\").",
             "# TYPE smile_time_model_seconds gauge"]
    for which, model in ex.models:
        for kind in EDGE_KINDS:
            line = model.line(kind)
            lines += [f'smile_time_model_seconds{{model="{which}",kind="{kind}",coef="{c}"}} '
                      f"{v}" for c, v in (("a", line.a), ("b", line.b))]
        lines.append(f'smile_time_model_seconds{{model="{which}",kind="dispatch",coef="a"}} '
                     f"{model.dispatch_s}")
    return lines


def _statuses(sharings: tuple[SharingRow, ...]) -> list[str]:
    counts: dict[str, int] = {}
    for r in sharings:
        counts[r.status] = counts.get(r.status, 0) + 1
    return ["# HELP smile_sharings Sharings by status.", "# TYPE smile_sharings gauge",
            *(f'smile_sharings{{status="{k}"}} {v}' for k, v in sorted(counts.items()))]
