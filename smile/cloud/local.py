"""`smile cloud up|status|down`: the local cloud as one idempotent unit.

Layout of `state_dir`: `cloud.json` (names, ports, DSNs; mode 600 since DSNs carry passwords),
`pg/` (owned by the service user: one data directory and log per cluster, sockets in `pg/run`),
`broker/` (ActiveMQ's generated configuration, log and pid file).

The catalog is a cluster of its own (`catalog`), not a database on machine m1: SMILE's metadata
must not share fate, load or restarts with a data machine (fault tests kill machines), and real
deployments keep it apart too; the price here is ~27 MB and ~1 s at start.

Must not: know about SMILE's schema, capture or agents; it only runs services.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from smile.cloud.broker import LocalBroker
from smile.cloud.daemons import KINDS, Daemon
from smile.cloud.postgres import LocalCluster, new_password
from smile.cloud.procs import free_port
from smile.cloud.supervisor import Supervisor
from smile.errors import CloudError, ConfigError

if TYPE_CHECKING:
    from pathlib import Path

    from smile.settings import Settings


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    url: str
    pid: int | None
    healthy: bool
    restarts: int = 0
    """A supervised daemon's restarts after it died (0 for the servers)."""
    last_exit: str = ""
    """How a supervised daemon last ended, as supervisord saw it."""


@dataclass(frozen=True)
class CloudStatus:
    state_dir: str
    machines: tuple[ServiceStatus, ...]
    catalog: ServiceStatus | None
    broker: ServiceStatus | None
    daemons: tuple[ServiceStatus, ...] = ()
    """SMILE's capturers and agents (absent when the cloud was started without them)."""

    @property
    def healthy(self) -> bool:
        services = [*self.machines, self.catalog, self.broker, *self.daemons]
        return self.catalog is not None and all(s is not None and s.healthy
                                                for s in services)

    def to_json(self) -> dict[str, Any]:
        def pg(s: ServiceStatus) -> dict[str, Any]:
            return {"name": s.name, "dsn": s.url, "pid": s.pid, "healthy": s.healthy}

        return {
            "state_dir": self.state_dir,
            "healthy": self.healthy,
            "machines": [pg(m) for m in self.machines],
            "catalog": pg(self.catalog) if self.catalog else None,
            "broker": (
                {"stomp_url": self.broker.url, "pid": self.broker.pid,
                 "healthy": self.broker.healthy}
                if self.broker else None
            ),
            "daemons": [{"name": d.name, "pid": d.pid, "healthy": d.healthy,
                         "restarts": d.restarts, "last_exit": d.last_exit}
                        for d in self.daemons],
        }


def _check_traversable(path: Path) -> None:
    """The service user must be able to walk down to `path` (its parents need the x bit)."""
    if os.geteuid() != 0:
        return
    for parent in path.resolve().parents:
        if parent.exists() and not parent.stat().st_mode & 0o001:
            raise ConfigError(
                f"{parent} is not traversable by the postgres user, so clusters under "
                f"{path} cannot start; choose another --state-dir (e.g. under /var/tmp)"
            )


class LocalCloud:
    """The services of one `state_dir`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.state_dir: Path = settings.state_dir
        self.pg_root = self.state_dir / "pg"
        self.state_file = self.state_dir / "cloud.json"

    # -- state ---------------------------------------------------------------------------------
    def _load(self) -> dict[str, Any] | None:
        if not self.state_file.exists():
            return None
        try:
            doc: dict[str, Any] = json.loads(self.state_file.read_text())
        except ValueError as exc:
            raise ConfigError(f"{self.state_file} is corrupt; `smile cloud down --purge`") from exc
        return doc

    def _cluster(self, entry: dict[str, Any]) -> LocalCluster:
        return LocalCluster(
            name=entry["name"], root=self.pg_root, port=int(entry["port"]),
            password=entry["password"], bindir=self.settings.pg_bindir,
            durable=bool(entry.get("durable", True)),
        )

    def _broker(self, doc: dict[str, Any]) -> LocalBroker:
        return LocalBroker(
            self.state_dir / "broker", int(doc["broker"]["port"]), self.settings.activemq_home
        )

    def _save(self, doc: dict[str, Any]) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir.chmod(0o755)  # the service user must traverse it to reach pg/
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=2))
        tmp.chmod(0o600)
        os.replace(tmp, self.state_file)

    # -- commands ------------------------------------------------------------------------------
    def up(self, machines: int, daemons: bool = True) -> CloudStatus:
        """Start whatever of catalog, `machines` clusters, broker and (with `daemons`) the
        capturers and agents of the machines is not running."""
        if machines < 0:
            raise ConfigError("--machines must be at least 0 (0: the catalog and the broker "
                              "only, for attached databases)")
        if not (self.settings.pg_bindir / "initdb").exists():
            raise CloudError(
                f"{self.settings.pg_bindir}/initdb not found: install postgresql-15 (Debian)"
            )
        _check_traversable(self.state_dir)
        doc = self._load() or {"clusters": [], "broker": None}
        have = [c["name"] for c in doc["clusters"] if c["name"] != "catalog"]
        if len(have) > machines:
            raise ConfigError(
                f"this cloud already has {len(have)} machines ({', '.join(have)}); "
                f"run `smile cloud down --purge` to start over with {machines}"
            )
        durable = self.settings.durable
        taken = {int(c["port"]) for c in doc["clusters"]}
        wanted = ["catalog"] + [f"m{i}" for i in range(1, machines + 1)]
        names = {c["name"] for c in doc["clusters"]}
        for offset, name in enumerate(wanted):
            if name not in names:
                port = free_port(self.settings.base_port + offset, taken)
                taken.add(port)
                doc["clusters"].append({"name": name, "port": port, "password": new_password(),
                                        "durable": durable})
        if doc["broker"] is None:
            doc["broker"] = {"port": free_port(self.settings.stomp_port)}
        doc["machines"] = []  # filled below, for topology readers
        self._save(self._with_endpoints(doc))

        clusters = [self._cluster(c) for c in doc["clusters"]]
        broker = self._broker(doc)
        with ThreadPoolExecutor(max_workers=len(clusters) + 1) as pool:
            futures = [pool.submit(self._init_and_start, c) for c in clusters]
            futures.append(pool.submit(broker.start))
            errors = [f.exception() for f in futures]
        failed = [e for e in errors if e is not None]
        if failed:
            raise failed[0]
        doc = self._load() or doc
        doc["daemons"] = daemons
        self._save(doc)
        if daemons:
            for d in self._daemons(doc):
                d.start()
            time.sleep(0.5)  # a daemon that dies at once (bad settings) shows as unhealthy
        return self.status()

    def _daemons(self, doc: dict[str, Any]) -> list[Daemon]:
        if not doc.get("daemons"):
            return []
        names = [c["name"] for c in doc["clusters"] if c["name"] != "catalog"]
        return [Daemon(kind, m, self.state_dir) for m in names for kind in KINDS]

    @staticmethod
    def _init_and_start(cluster: LocalCluster) -> None:
        cluster.initialize()
        cluster.start()

    def _with_endpoints(self, doc: dict[str, Any]) -> dict[str, Any]:
        clusters = [self._cluster(c) for c in doc["clusters"]]
        doc["machines"] = [{"name": c.name, "dsn": c.dsn} for c in clusters if c.name != "catalog"]
        doc["catalog"] = next(({"dsn": c.dsn} for c in clusters if c.name == "catalog"), None)
        doc["broker"]["stomp_url"] = self._broker(doc).stomp_url
        return doc

    def status(self) -> CloudStatus:
        doc = self._load()
        if doc is None:
            return CloudStatus(str(self.state_dir), (), None, None)
        clusters = [self._cluster(c) for c in doc["clusters"]]
        broker = self._broker(doc)
        with ThreadPoolExecutor(max_workers=len(clusters) + 1) as pool:
            broker_future = pool.submit(broker.healthy)
            health = list(pool.map(lambda c: c.healthy(), clusters))
            broker_ok = broker_future.result()
        stats = [ServiceStatus(c.name, c.dsn, c.pid(), ok) for c, ok in zip(clusters, health,
                                                                            strict=True)]
        return CloudStatus(
            str(self.state_dir),
            tuple(s for s in stats if s.name != "catalog"),
            next((s for s in stats if s.name == "catalog"), None),
            ServiceStatus("broker", broker.stomp_url, broker.pid(), broker_ok),
            tuple(ServiceStatus(d.name, st.state, st.pid, st.pid is not None, st.restarts,
                                st.last_exit)
                  for d, st in ((d, d.state()) for d in self._supervised(doc))),
        )

    def _supervised(self, doc: dict[str, Any]) -> list[Daemon]:
        """The capturers and agents (the local machines' and those of machines attached
        since), and `smile serve` when it runs under the supervisor."""
        programs = Supervisor(self.state_dir).programs
        serve = Daemon("serve", "", self.state_dir)
        daemons = self._daemons(doc)
        names = {d.name for d in daemons}
        for conf in sorted(programs.glob("*.conf")):
            kind, _, machine = conf.stem.partition("-")
            if kind in KINDS and machine and conf.stem not in names:
                daemons.append(Daemon(kind, machine, self.state_dir))
        known = (programs / f"{serve.name}.conf").exists()
        return [*daemons, *([serve] if known else [])]

    def down(self, purge: bool = False) -> None:
        """Stop everything this state_dir started; with `purge`, delete its data too."""
        doc = self._load()
        if doc is not None:
            for d in self._daemons(doc):  # first, so they do not see their databases go
                d.stop()
            Supervisor(self.state_dir).shutdown()  # and whatever else it still runs
            clusters = [self._cluster(c) for c in doc["clusters"]]
            with ThreadPoolExecutor(max_workers=len(clusters) + 1) as pool:
                futures = [pool.submit(c.stop) for c in clusters]
                futures.append(pool.submit(self._broker(doc).stop))
                for f in futures:
                    f.result()
        if purge and self.state_dir.exists():
            shutil.rmtree(self.state_dir)

    def broker(self) -> LocalBroker:
        """The cloud's broker (to stop or restart it, as fault tests do)."""
        doc = self._load()
        if doc is None or not doc.get("broker"):
            raise CloudError(f"no cloud in {self.state_dir}: `smile up` first")
        return self._broker(doc)

    def cluster(self, name: str) -> LocalCluster:
        """The cluster of machine `name` (or `catalog`), to restart it in fault tests."""
        doc = self._load()
        for entry in (doc or {}).get("clusters", []):
            if entry["name"] == name:
                return self._cluster(entry)
        raise ConfigError(f"no cluster {name!r} in {self.state_dir}")

    def pids(self) -> list[int]:
        """Pids of every service process this cloud runs now (for tests and `down` checks)."""
        st = self.status()
        services = [*st.machines, st.catalog, st.broker, *st.daemons]
        return [s.pid for s in services if s is not None and s.pid is not None]
