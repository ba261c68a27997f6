"""Where the running services are: machines, catalog and broker, as one resolved value.

`resolve_topology` prefers what `Settings` names explicitly (external hosts) and falls back to the
local cloud's `cloud.json`. Everything that needs a DSN or the broker URL asks here. Machines
attached to a running SMILE are kept in the catalog and added by `deploy.machines`
(`live_topology`); a running process follows attaches and detaches through `set_machines`, which
every component holding the same `Topology` sees.

Must not: start or stop services (that is `smile.cloud`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from smile.errors import ConfigError

if TYPE_CHECKING:
    from smile.settings import Settings


@dataclass(frozen=True)
class MachineEndpoint:
    name: str
    dsn: str
    origin: Literal["local", "attached"] = "local"
    """`local`: a cluster of SMILE's local cloud; `attached`: an app's own database (attached
    live, or named in `Settings.machines`)."""
    cores: float | None = None
    """Its cores; None: a local machine's share of this box (`catalog_live.core_share`)."""
    price_per_hour: float | None = None
    """Its price in $ per hour; None: the optimizer's default machine's."""


@dataclass
class Topology:
    machines: tuple[MachineEndpoint, ...]
    catalog_dsn: str
    broker_url: str
    source: Literal["local", "external"]
    fixed: tuple[MachineEndpoint, ...] | None = None
    """The machines of the settings or the local cloud, when the attached ones were added
    to them (`deploy.machines.live_topology`): what `refresh` keeps."""

    def set_machines(self, machines: tuple[MachineEndpoint, ...]) -> None:
        """The machines from now on (a machine attached or detached): one assignment, so a
        reader sees the old tuple or the new one, never a mix."""
        self.machines = machines

    def machine(self, name: str) -> MachineEndpoint:
        for m in self.machines:
            if m.name == name:
                return m
        known = ", ".join(m.name for m in self.machines)
        raise ConfigError(f"unknown machine {name!r}; the machines are: {known}")


def resolve_topology(settings: Settings) -> Topology:
    """The topology `settings` names, completed from the local cloud where settings are silent."""
    local = _local_endpoints(settings)
    if settings.machines:
        machines = tuple(MachineEndpoint(m.name, m.dsn, "attached", m.cores, m.price_per_hour)
                         for m in settings.machines)
        source: Literal["local", "external"] = "external"
    elif local is not None:
        machines = local.machines
        source = "local"
    else:
        raise ConfigError(
            "no machines: start the local cloud with `smile cloud up --machines N`, "
            "or name machines with SMILE_MACHINES / a config file (see docs/configuration.md)"
        )
    catalog = settings.catalog_dsn or (local.catalog_dsn if local else None)
    broker = settings.broker_url or (local.broker_url if local else None)
    if catalog is None or broker is None:
        raise ConfigError(
            "external machines are set but the catalog DSN or broker URL is not: "
            "set SMILE_CATALOG_DSN and SMILE_BROKER_URL, or start the local cloud"
        )
    names = [m.name for m in machines]
    if len(set(names)) != len(names):
        raise ConfigError(f"machine names must be unique, got {names}")
    return Topology(machines, catalog, broker, source)


def _local_endpoints(settings: Settings) -> Topology | None:
    path = settings.state_dir / "cloud.json"
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text())
        machines = tuple(MachineEndpoint(m["name"], m["dsn"]) for m in doc["machines"])
        return Topology(machines, doc["catalog"]["dsn"], doc["broker"]["stomp_url"], "local")
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path} is unreadable ({exc}); run `smile cloud down --purge`") from exc
