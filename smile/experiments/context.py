"""What every experiment is handed: the settings, the scale (`harness.scale`), where its
results go, and the running cloud it measures (started by `smile up`).

Must not: start or stop the cloud; an experiment measures the one the user runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from smile.errors import ConfigError
from smile.harness.output import Outputs
from smile.harness.scale import SCALES, pick

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from smile.settings import Settings
    from smile.topology import Topology

T = TypeVar("T")

HOUR_ONLY = ("longrun",)
"""The experiments that have an "hour" scale (`--hour`: the issue's 1-hour run at 80% of the
capacity measured on this box), a length of their own (`--minutes`) and a rate given instead
of the measured capacity's (`--rate`)."""


MAX_RATE = 100_000.0
"""The highest tweet rate `--rate` takes (the driver's own limit is far below it)."""


def run_name(name: str, hour: bool = False, minutes: float | None = None,
             rate: float | None = None) -> str:
    """What a run of `name` is written as: `name` itself at its own length and rate, else
    with the hour's, the length's (`minutes`) and the rate's (`rate`, tweets/s) marks.

    >>> run_name("longrun"), run_name("longrun", minutes=60.0), run_name("longrun", True)
    ('longrun', 'longrun_60min', 'longrun_hour')
    >>> run_name("longrun", True, rate=320.0), run_name("longrun", minutes=6, rate=12.5)
    ('longrun_hour_320tps', 'longrun_6min_12.5tps')
    """
    out = f"{name}_hour" if hour else name if minutes is None else f"{name}_{minutes:g}min"
    return out if rate is None else f"{out}_{rate:g}tps"


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
    rate: float | None = None
    """The long run only: the tweets/s it runs at instead of 80% of the measured capacity
    (`--rate`), written under a name of its own (`run_name`)."""

    def __post_init__(self) -> None:
        if self.scale not in SCALES:
            raise ConfigError(f"scale {self.scale!r}: one of {', '.join(SCALES)}")
        if self.minutes is not None and (self.scale != "small" or not 0 < self.minutes <= 1440):
            raise ConfigError(f"--minutes {self.minutes:g}: a length of the small default run "
                              "only (not with --hour or --full), above 0 and at most 1440")
        if self.rate is not None and (self.scale not in ("small", "hour")
                                      or not 0 < self.rate <= MAX_RATE):
            raise ConfigError(f"--rate {self.rate:g}: tweets/s of the small default run or of "
                              f"--hour (not with --full), above 0 and at most {MAX_RATE:g}")

    @property
    def full(self) -> bool:
        return self.scale == "full"

    @property
    def hour(self) -> bool:
        return self.scale == "hour"

    @property
    def tiny(self) -> bool:
        return self.scale == "tiny"

    def pick(self, table: Mapping[str, T]) -> T:
        """What `table` (scale name → value) holds for this run's scale."""
        return pick(table, self.scale)

    def run_name(self, name: str) -> str:
        """What this run of `name` is written as (`run_name`)."""
        return run_name(name, self.hour, self.minutes, self.rate)

    def outputs(self, name: str) -> Outputs:
        return Outputs(name, self.out_dir)

    def topology(self) -> Topology:
        from smile.topology import resolve_topology

        return resolve_topology(self.settings)
