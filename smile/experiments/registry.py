"""The experiments by name: what each regenerates, and the run that produces it (some runs
write several figures: fig06 and fig07 come from one live run, fig12 and fig13 from one
optimizer run). A run is named as "module:function" of `smile.experiments` and imported when
it runs, so that listing the experiments loads none of them.

Must not: run anything on import.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from smile.errors import ConfigError

if TYPE_CHECKING:
    from smile.experiments.context import Context


@dataclass(frozen=True)
class Experiment:
    name: str
    what: str
    writes: tuple[str, ...]
    """The names whose NAME.{csv,png,json} the run writes."""
    runs: str
    """The function that runs it, "module:function" of `smile.experiments`."""

    def run(self, ctx: Context) -> dict[str, Any]:
        module, function = self.runs.split(":")
        done: dict[str, Any] = getattr(
            importlib.import_module(f"smile.experiments.{module}"), function)(ctx)
        return done


EXPERIMENTS: dict[str, Experiment] = {e.name: e for e in (
    Experiment("fig05", "each operator's time against tuples, fitted lines and R²",
               ("fig05",), "fig05:run"),
    Experiment("fig06", "staleness of the sharings across snapshots at SLA 45 s, tuples "
               "moved per snapshot (with fig07)", ("fig06", "fig07"), "staleness:run_fig06"),
    Experiment("fig07", "S1's staleness around each push and how far each advanced it "
               "(with fig06)", ("fig06", "fig07"), "staleness:run_fig06"),
    Experiment("fig08", "cost and violations against the tweet rate (with throughput)",
               ("throughput", "fig08"), "throughput:run"),
    Experiment("fig09", "tuples each sharing moves beside the others against alone",
               ("fig09",), "sharing_gain:run"),
    Experiment("fig10", "each sharing's cost in the SLA mix against uniform SLAs (with "
               "table2)", ("table2", "fig10"), "staleness:run_table2"),
    Experiment("fig11", "capacity (tweets/s held with no violation) against the number of "
               "machines", ("fig11",), "capacity:run"),
    Experiment("fig12", "cost of DPT, DPD, DPT+HC, DPD+HC (with fig13; the optimizer's model)",
               ("fig12", "fig13"), "plumbing_figs:run"),
    Experiment("fig13", "vertices and edges as plumbings apply (with fig12)",
               ("fig12", "fig13"), "plumbing_figs:run"),
    Experiment("fig12live", "Figs. 12–13 live: the dollars the machines spent and the running "
               "plan's vertices and edges under DPT, DPD (separate), DPD merged, DPT+HC and "
               "DPD+HC", ("fig12live",), "plumbing_live:run"),
    Experiment("fig12pairs", "Fig. 12 live's DPD+HC with shared pushes ÷ DPD in alternating "
               "runs, each against DPD at its moment: each pair's ratio, median and range",
               ("fig12pairs",), "plumbing_pairs:run"),
    Experiment("fig14", "staleness of S4 as the tweet rate and the readers of every MV grow",
               ("fig14",), "robustness:run"),
    Experiment("longrun", "memory of every process, delta rows and slot WAL over a long run at "
               "SLA 10 s, and its violations per sharing-hour", ("longrun",), "long_run:run"),
    Experiment("table2", "violations per sharing-hour by SLA (10 … 60 s and the mix; with "
               "fig10)", ("table2", "fig10"), "staleness:run_table2"),
    Experiment("throughput", "tweets/s per core held with 25 sharings at SLA 45 s and 0 "
               "violations (with fig08)", ("throughput", "fig08"), "throughput:run"),
)}


def experiment(name: str) -> Experiment:
    if name not in EXPERIMENTS:
        raise ConfigError(f"no experiment {name!r}; there are: {', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[name]
