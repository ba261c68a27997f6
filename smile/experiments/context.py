"""What every experiment is handed: the settings, the scale (`full`), where its results go,
and the running cloud it measures (started by `smile up`).

Must not: start or stop the cloud; an experiment measures the one the user runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from smile.errors import ConfigError
from smile.experiments.output import Outputs

if TYPE_CHECKING:
    from pathlib import Path

    from smile.settings import Settings
    from smile.topology import Topology


SCALES = ("tiny", "small", "full", "hour")
HOUR_ONLY = ("longrun",)
"""The experiments that have an "hour" scale (`--hour`: the issue's 1-hour run at 80% of the
capacity measured on this box) and a length of their own (`--minutes`)."""


def minutes_name(name: str, minutes: float | None) -> str:
    """What a run of `name` `minutes` long is written as (`name` itself at its own length).

    >>> minutes_name("longrun", 60.0), minutes_name("longrun", None)
    ('longrun_60min', 'longrun')
    """
    return name if minutes is None else f"{name}_{minutes:g}min"


@dataclass(frozen=True)
class Context:
    settings: Settings
    scale: str
    """"small" (the default: ≤ 10 minutes on 2 cores), "full" (the paper's scale), "tiny"
    (the slow tests: outputs exist and are sane, the figures mean little) or "hour" (the long
    run only: an hour on this box at 80% of the capacity it measured)."""
    out_dir: Path
    minutes: float | None = None
    """The long run only: its small default (S1–S10 at SLA 10 s, at 80% of the measured
    capacity) run this long instead of 6 minutes (`--minutes`)."""

    def __post_init__(self) -> None:
        if self.scale not in SCALES:
            raise ConfigError(f"scale {self.scale!r}: one of {', '.join(SCALES)}")
        if self.minutes is not None and (self.scale != "small" or not 0 < self.minutes <= 1440):
            raise ConfigError(f"--minutes {self.minutes:g}: a length of the small default run "
                              "only (not with --hour or --full), above 0 and at most 1440")

    @property
    def full(self) -> bool:
        return self.scale == "full"

    @property
    def hour(self) -> bool:
        return self.scale == "hour"

    @property
    def tiny(self) -> bool:
        return self.scale == "tiny"

    def outputs(self, name: str) -> Outputs:
        return Outputs(name, self.out_dir)

    def topology(self) -> Topology:
        from smile.topology import resolve_topology

        return resolve_topology(self.settings)
