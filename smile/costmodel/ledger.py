"""What a plan, or a part of one, costs per second, charged one item at a time: the only place
the resource cost of paper §5 is summed. CPU: an edge's load at its machine's price per
core-second; network: the bytes a copy moves between two machines; storage: the bytes a
relation keeps. With them ρ, the busiest edge's seconds of work per second of updates, and,
when asked for, the capacity used per machine (three numbers a machine: cores, GB, MB/s).

Machines are numbered (the optimizer's index into the catalog's machines); what one join step
adds is handed in as `Charge`s and the figures they name, so this module knows nothing of
plans.

Must not: know about plans, vertices or the catalog; price anything but what it is handed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

Charge = tuple[int, str, int, bool]
"""(machine that does the work, edge key, machine the edge's input comes from, whether it
keeps a relation there): one item of what a join step costs (`join_step.Step.charges`)."""


def charge(charges: tuple[Charge, ...], t: Mapping[str, float], w: Mapping[str, float],
           nbytes: Mapping[str, float], cpu: list[float], net_price: float, store_price: float,
           res: float, rho: float, usage: list[float] | None) -> tuple[float, float]:
    """(resCost, ρ) after charging every item of `charges` — work where it runs (`w`, priced
    at `cpu[m]`), bytes it moves between machines and what it keeps (`nbytes`), its seconds
    (`t`) into ρ — and, with `usage`, the capacity it takes. The same three charges as
    `Ledger.work`, `move` and `store`, in one loop without objects: the DP's inner loop calls
    this for every candidate step it keeps.

    >>> charge(((1, "j", 0, True),), {"j": 0.5}, {"j": 2.0}, {"j": 1e6},
    ...        [1.0, 3.0], 1e-9, 1e-10, 0.0, 0.1, None)
    (6.0011, 0.5)
    """
    for m, key, src, keeps in charges:
        res += w[key] * cpu[m]
        if t[key] > rho:  # noqa: PLR1730 (max() would be a call in the DP's inner loop)
            rho = t[key]
        if src != m:  # a copy between machines: its delta's bytes cross
            res += nbytes[key] * net_price
            if usage is not None:
                usage[3 * src + 2] += nbytes[key] / 1e6
                usage[3 * m + 2] += nbytes[key] / 1e6
        if keeps:
            res += nbytes[key] * store_price
            if usage is not None:
                usage[3 * m + 1] += nbytes[key] / 1e9
        if usage is not None:
            usage[3 * m] += w[key]
    return res, rho


@dataclass
class Ledger:
    """A running account: resCost, ρ and (`with_usage`) the capacity used per machine."""

    cpu_price: list[float]
    """$ per core-second, per machine."""
    net_price: float
    """$ per byte moved between two machines."""
    store_price: float
    """$ per byte kept for a second."""
    with_usage: bool = True
    res: float = 0.0
    rho: float = 0.0
    usage: list[float] = field(default_factory=list)
    """3 per machine: cores, GB, MB/s (empty without `with_usage`)."""

    def __post_init__(self) -> None:
        if self.with_usage and not self.usage:
            self.usage = [0.0] * (3 * len(self.cpu_price))

    def work(self, m: int, seconds: float, load: float) -> None:
        """An edge on machine `m` taking `seconds` a push and `load` core-seconds a second.

        >>> book = Ledger([2.0], 0.0, 0.0)
        >>> book.work(0, 0.3, 0.25); (book.res, book.rho, book.usage)
        (0.5, 0.3, [0.25, 0.0, 0.0])
        """
        if self.with_usage:
            self.usage[3 * m] += load
        self.res += load * self.cpu_price[m]
        self.rho = max(self.rho, seconds)

    def move(self, src: int, dst: int, nbytes: float) -> None:
        """`nbytes` a second copied from machine `src` to `dst` (nothing on one machine)."""
        if src == dst:
            return
        if self.with_usage:
            self.usage[3 * src + 2] += nbytes / 1e6
            self.usage[3 * dst + 2] += nbytes / 1e6
        self.res += nbytes * self.net_price

    def store(self, m: int, nbytes: float) -> None:
        """`nbytes` kept on machine `m`."""
        if self.with_usage:
            self.usage[3 * m + 1] += nbytes / 1e9
        self.res += nbytes * self.store_price
