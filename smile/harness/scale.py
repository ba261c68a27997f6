"""How large a live run is (`Scale`), written once per scale an experiment has and picked by
the scale's name (`pick`): "tiny" (the slow tests: outputs exist and are sane, the figures mean
little), "small" (the default: ≤ 10 minutes on 2 cores), "full" (the paper's: 7M tweets, 6
machines) and "hour" (the long run only: an hour on this box).

Must not: run anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from smile.dataset.sharings import table1
from smile.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

SCALES = ("tiny", "small", "full", "hour")
TABLE1 = tuple(s.name for s in table1())
"""The names of Table 1's 25 sharings, in order: what the full scales submit."""

T = TypeVar("T")


@dataclass(frozen=True)
class Scale:
    """One live run: `tweets` loaded on the cloud's first `machines`, traffic at each of
    `rates` in turn (one for most runs; a ladder, or phases), Table 1's `sharings` submitted
    at `sla_s` seconds, and `window_s` seconds of traffic measured per window. What an
    experiment varies besides the rate (Table 2's SLAs, Fig. 14's readers, Fig. 11's
    machines) is its own, written beside its scales."""

    tweets: int
    machines: int
    rates: tuple[float, ...]
    window_s: float
    sharings: tuple[str, ...]
    sla_s: float | None = None
    """None: the experiment gives each sharing its SLA (Table 2's settings, Fig. 14's)."""

    @property
    def rate(self) -> float:
        """The first (for most runs the only) rate."""
        return self.rates[0]

    @property
    def sla(self) -> str:
        """`sla_s` as a submission takes it ("45")."""
        assert self.sla_s is not None, "this run gives each sharing its own SLA"
        return f"{self.sla_s:g}"


def pick(table: Mapping[str, T], scale: str) -> T:
    """What `table` holds for `scale`.

    >>> pick({"tiny": 1, "small": 2}, "small")
    2
    >>> pick({"tiny": 1, "small": 2}, "hour")
    Traceback (most recent call last):
    ...
    smile.errors.ConfigError: no hour scale here: one of tiny, small
    """
    if scale not in table:
        raise ConfigError(f"no {scale} scale here: one of {', '.join(table)}")
    return table[scale]
