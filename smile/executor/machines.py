"""Attaching an app's own database to a running SMILE, and detaching it: the domain behind
`POST /machines` and `DELETE /machines/{name}` (`docs/design/machines.md`).

Attach: the database's prerequisites are checked first (`deploy.prerequisites`: every unmet
one at once, with its fix); then SMILE's schemas, publication and slot are made on it, the
machine is recorded in the catalog, every component of this process sees it (the shared
`Topology`), and its capturer and agent start under the supervisor of the state directory.
Nothing of the app's is published: an admin publishes its tables. Detach: refused while
sharings read from the machine or keep an MV on it (or, asked to, they are withdrawn first);
then its relations are unpublished, its daemons stop and SMILE's objects on it are dropped
(`deploy.machines.clear`); the app's tables and rows stay.

A machine lost for good — its database dropped, its password changed — takes no connection:
`Probes` says why (for `GET /machines`), and its sharings are held as for any unreachable
machine. Detaching it forgets it first (so that the withdrawals' deploys no longer wait for its
agent), then withdraws its sharings; what SMILE made on it stays there, unreachable
(`Detached.unreachable` says why).

Must not: speak HTTP, open a machine's database itself (`deploy` does), or change a plan
(withdrawals go through the sharing service).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from smile.cloud.daemons import KINDS, Daemon
from smile.deploy import machines as attached
from smile.deploy import plan_store
from smile.deploy.prerequisites import Unreachable, check_database, probe
from smile.errors import ConfigError, SmileError
from smile.executor.sharings import Conflict, NotFound
from smile.topology import MachineEndpoint

if TYPE_CHECKING:
    from pathlib import Path

    from smile.deploy.machines import Leftovers
    from smile.deploy.prereq_rules import Problem
    from smile.executor.runtime import Executor
    from smile.executor.sharings import SharingService
    from smile.executor.store import CatalogStore, SharingRow
    from smile.topology import Topology

NAME = re.compile(r"^[a-z][a-z0-9_]{0,30}$")
"""Machine names (as `Settings.machines` takes them)."""
FIRST_BEAT_S = 30.0
"""How long an attach waits for the new machine's agent to send its first heartbeat."""


class Unmet(SmileError):
    """The database misses prerequisites; `problems` lists every one."""

    def __init__(self, name: str, problems: list[Problem]) -> None:
        super().__init__(f"{name} cannot be attached: " + "; ".join(str(p) for p in problems))
        self.problems = problems


@dataclass(frozen=True)
class Detached:
    name: str
    withdrawn: tuple[str, ...]
    """The sharings withdrawn first (`withdraw=True`)."""
    leftovers: Leftovers | None
    """What SMILE could not drop from it (None: it could not be reached)."""
    unreachable: str | None = None
    """Why it could not be reached: SMILE's slot, publication and schemas stay on it."""


PROBE_TTL_S = 10.0
"""How long what a probe found is answered again."""


class Probes:
    """Why each unreachable machine's database refuses SMILE's connection, probed at most
    every `PROBE_TTL_S` (a probe waits up to seconds for an unreachable host)."""

    def __init__(self) -> None:
        self._found: dict[str, tuple[float, Unreachable | None]] = {}

    def why(self, machine: MachineEndpoint) -> Unreachable | None:
        """None when it takes a connection."""
        now = time.monotonic()
        got = self._found.get(machine.dsn)
        if got is None or now - got[0] > PROBE_TTL_S:
            got = (now, probe(machine.dsn))
            self._found[machine.dsn] = got
        return got[1]


class MachineService:
    """One per request; changes hold the sharing service's lock and the catalog's deploy
    lock, so they never cross a submission or a withdrawal."""

    def __init__(self, topology: Topology, sharings: SharingService, executor: Executor,
                 state_dir: Path | None) -> None:
        self.topology = topology
        self.sharings = sharings
        self.executor = executor
        self.state_dir = state_dir

    def attach(self, name: str, dsn: str, cores: float | None = None,
               price_per_hour: float | None = None) -> MachineEndpoint:
        """Attach the database at `dsn` as machine `name`; `Unmet` lists what it misses."""
        if not NAME.match(name):
            raise ConfigError(f"machine name {name!r}: lower-case letters, digits and _, "
                              "starting with a letter, at most 31 characters")
        daemons = self._daemons(name)  # no supervisor: refused before anything is made
        self._refuse_taken(name, dsn)
        problems = check_database(dsn, what=name)
        if problems:
            raise Unmet(name, problems)
        endpoint = MachineEndpoint(name, dsn, "attached",
                                   attached.DEFAULT_CORES if cores is None else cores,
                                   attached.DEFAULT_PRICE if price_per_hour is None
                                   else price_per_hour)
        with self.sharings.lock, plan_store.deploy_lock(self.topology.catalog_dsn):
            self._refuse_taken(name, dsn)
            attached.prepare(dsn)
            attached.add(self.topology.catalog_dsn, endpoint)
            self.topology.set_machines((*self.topology.machines, endpoint))
        for daemon in daemons:
            daemon.start()
        self._wait_first_beat(name)
        return endpoint

    def _refuse_taken(self, name: str, dsn: str) -> None:
        if any(m.name == name for m in self.topology.machines):
            raise Conflict(f"a machine named {name!r} is already attached")
        where = attached.place(dsn)
        same = [m.name for m in self.topology.machines if attached.place(m.dsn) == where]
        if same:
            raise Conflict(f"that database is machine {same[0]!r} already")

    def _daemons(self, name: str) -> list[Daemon]:
        if self.state_dir is None:
            raise ConfigError("no state directory: the machine's capturer and agent cannot be "
                              "supervised")
        return [Daemon(kind, name, self.state_dir) for kind in KINDS]

    def _wait_first_beat(self, name: str) -> None:
        deadline = time.monotonic() + FIRST_BEAT_S
        while time.monotonic() < deadline:
            beat = self.executor.machines.get(name)
            if beat is not None and beat.last_beat > 0:
                return
            time.sleep(0.2)

    def users(self, name: str) -> list[SharingRow]:
        """The live sharings that read from machine `name` or keep their MV on it."""
        _, plan = self.sharings.current()
        on = {s for s in plan.names() if any(v.machine == name for v in plan.of_sharing(s))}
        return [r for r in self.store.sharings() if r.status in ("admitted", "failed")
                and (r.name in on or r.mv_machine == name)]

    @property
    def store(self) -> CatalogStore:
        return self.sharings.store

    def detach(self, name: str, withdraw: bool = False) -> Detached:
        """Detach machine `name`; with `withdraw`, withdraw the sharings on it first."""
        endpoint = next((m for m in self.topology.machines if m.name == name), None)
        if endpoint is None:
            raise NotFound(f"no machine {name!r}")
        if name not in {m.name for m in attached.attached(self.topology.catalog_dsn)}:
            raise Conflict(f"{name} is not an attached machine ({endpoint.origin}: it comes "
                           "with SMILE's settings or its local cloud and goes with them)")
        users = self.users(name)
        if users and not withdraw:
            raise Conflict(f"{name} cannot be detached: the sharings "
                           f"{sorted({r.name for r in users})} read from it or keep their MV "
                           "on it; withdraw them first (or detach with withdraw=true)")
        withdrawn = tuple(sorted(r.name for r in users))
        gone = probe(endpoint.dsn)
        if gone is not None:  # lost: forgotten first, so no withdrawal waits for its agent
            self._forget(name, users)
            for row in users:  # not hill-climbed: D still has the others' vertices on it
                self.sharings.withdraw(row.id, climb=False)
            self._unpublish(name)
            return Detached(name, withdrawn, None, gone.reason)
        for row in users:
            self.sharings.withdraw(row.id)
        self._forget(name, [])
        self._unpublish(name)
        return Detached(name, withdrawn, attached.clear(endpoint.dsn))

    def _forget(self, name: str, leaving: list[SharingRow]) -> None:
        """Machine `name` out of the topology, the catalog's machines and the supervisor;
        refused when sharings other than those `leaving` were admitted on it meanwhile."""
        with self.sharings.lock, plan_store.deploy_lock(self.topology.catalog_dsn):
            late = {r.name for r in self.users(name)} - {r.name for r in leaving}
            if late:
                raise Conflict(f"{name} cannot be detached: {sorted(late)} "
                               "were admitted on it meanwhile")
            self.topology.set_machines(tuple(m for m in self.topology.machines
                                             if m.name != name))
            attached.remove(self.topology.catalog_dsn, name)
        for daemon in self._daemons(name):
            daemon.stop()
        self.executor.clock.forget(name)

    def _unpublish(self, name: str) -> None:
        """The relations published on machine `name` out of the catalog."""
        with self.sharings.lock:
            for machine, table in self.store.relations():
                if machine == name:
                    self.store.remove_relation(machine, table)



def supervise_static(machines: tuple[MachineEndpoint, ...], state_dir: Path) -> None:
    """The machines named in the settings (`SMILE_MACHINES`) get what an attach gives:
    checked (every unmet prerequisite raises, listed), prepared, and their capturer and agent
    supervised (`smile up`)."""
    for m in machines:
        problems = check_database(m.dsn, what=m.name)
        if problems:
            raise Unmet(m.name, problems)
        attached.prepare(m.dsn)
    for m in machines:
        for kind in KINDS:
            Daemon(kind, m.name, state_dir).start()
