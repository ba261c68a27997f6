"""Prices of resources (paper §9.1.2): EC2 'large' instances at $0.34/hour, $0.01/GB between
availability zones, EBS storage at $0.11/GB-month.

Must not: know about plans.
"""

from __future__ import annotations

from dataclasses import dataclass

SECONDS_PER_MONTH = 30 * 24 * 3600


@dataclass(frozen=True)
class Prices:
    network_per_gb: float = 0.01
    storage_per_gb_month: float = 0.11

    def cpu_per_core_second(self, price_per_hour: float, cores: float) -> float:
        """Price of one core-second on a machine of `cores` cores.

        >>> round(Prices().cpu_per_core_second(0.34, 2) * 3600, 2)
        0.17
        """
        return price_per_hour / 3600 / max(cores, 1e-9)

    def network_per_byte(self) -> float:
        return self.network_per_gb / 1e9

    def storage_per_byte_second(self) -> float:
        return self.storage_per_gb_month / 1e9 / SECONDS_PER_MONTH
