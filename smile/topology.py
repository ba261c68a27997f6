"""Where the running services are: machines, catalog and broker, as one resolved value.

`resolve_topology` prefers what `Settings` names explicitly (external hosts) and falls back to the
local cloud's `cloud.json`. Everything that needs a DSN or the broker URL asks here.

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


@dataclass(frozen=True)
class Topology:
    machines: tuple[MachineEndpoint, ...]
    catalog_dsn: str
    broker_url: str
    source: Literal["local", "external"]

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
        machines = tuple(MachineEndpoint(m.name, m.dsn) for m in settings.machines)
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
