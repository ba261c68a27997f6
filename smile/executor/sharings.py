"""Submitting, inspecting and withdrawing sharings, and publishing base relations: the domain
behind the REST API.

Submit = parse and plan against a live catalog snapshot of the *published* relations, with the
rates measured while traffic runs, the executor's current time model and — on the local cloud,
whose machines share this box with capture and the traffic — each machine's share of the cores
actually left for operators (idle now, plus what operators use now), *into the global plan
D* (`optimizer.admission.admit`: merged, hill-climbed, every machine's load and every sharing's
critical path checked). A rejected sharing is recorded with its reason. An admitted one is a new
version of D, stored in the catalog and deployed by the executor through the agents (its MV
holds the query's result at one exact timestamp before `submit` returns). Withdraw = D without
it, hill-climbed again, deployed the same way; its record stays. Changes to D are serialised
across processes (`plan_store.deploy_lock`).

Who may do what: admins publish and see everything; a consumer sees and withdraws only its own
sharings (others' are `NotFound`, as if they did not exist). An admitted sharing's consumer gets
SELECT on its MV through its own PostgreSQL role (`deploy.roles`), and the DSN handed out is that
role's, never SMILE's.

Must not: speak HTTP (the API maps these results and errors), push, or write plan tables on the
machines (the agents install and drop; this reads their statistics and grants consumers' roles).
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from smile.delta_capture.publish import publish_relation, unpublish_relation
from smile.deploy import freshness, plan_store, roles
from smile.deploy.install import MV_SCHEMA
from smile.deploy.physical import physical_plan
from smile.errors import CaptureError, ConfigError, PlanError, SmileError
from smile.executor.catalog_live import LastStats, snapshot_live
from smile.executor.consumers import Consumer, lookup
from smile.executor.explain import Explanation, explanation
from smile.executor.skew import SKEWS_OPTION, measure_skews, merge_skews, skews_of
from smile.optimizer import groups
from smile.optimizer.admission import Admission, PlannerOptions, admit, withdraw
from smile.optimizer.global_plan import GlobalPlan
from smile.optimizer.load import Assessment, assess
from smile.optimizer.parse_spj import parse_query
from smile.optimizer.rates import rerate
from smile.optimizer.sharing import Sharing, SpjQuery
from smile.settings import GROWTH_HORIZON_S

if TYPE_CHECKING:
    from collections.abc import Callable

    from smile.executor.rates import RateMonitor
    from smile.executor.runtime import Executor
    from smile.executor.store import CatalogStore, SharingRow
    from smile.optimizer.catalog import CatalogSnapshot
    from smile.topology import Topology

log = logging.getLogger("smile.sharings")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
"""Sharing names (the API's models use the same pattern)."""
INTERRUPTED = ("installation interrupted: the API stopped during its deploy, and its version "
               "of the global plan never became active; submit it again")
"""The reason of a sharing `settle_interrupted` rejects."""
UNPUBLISH_TRIES = 3
"""Un-publishing drops ΔR, which the capturer may be writing: a deadlock is tried again."""
TABLE = re.compile(r"^(?:(public)\.)?([A-Za-z_][A-Za-z0-9_$]{0,62})$")


class NotFound(SmileError):
    """No such sharing or machine."""


class Conflict(SmileError):
    """The name is taken by a live sharing, or live sharings read what is to change."""


@dataclass(frozen=True)
class Submitted:
    row: SharingRow
    admission: Admission


def _past_deadlocks(step: Callable[[], object]) -> None:
    """Run `step`, again when it deadlocked: a relation's ΔR may be in the capturer's open
    transaction while it is un-published."""
    for attempt in range(UNPUBLISH_TRIES):
        try:
            step()
            return
        except CaptureError as exc:
            if exc.sqlstate != "40P01" or attempt == UNPUBLISH_TRIES - 1:
                raise
            time.sleep(0.2)


class SharingService:
    """One per request or benchmark; `lock` serialises changes within a process (and the
    catalog's deploy lock across processes)."""

    def __init__(self, topology: Topology, store: CatalogStore, executor: Executor,
                 rates: RateMonitor | None = None, sample_s: float = 0.5,
                 lock: threading.Lock | None = None, max_load: float | None = None,
                 growth_horizon_s: float = GROWTH_HORIZON_S,
                 last_stats: LastStats | None = None) -> None:
        self.topology = topology
        self.growth_horizon_s = growth_horizon_s
        """Admission charges the tables as they will be this far ahead (`catalog.ahead`)."""
        self.store = store
        self.executor = executor
        self.rates = rates
        self.sample_s = sample_s
        self.max_load = max_load
        self.lock = lock or threading.Lock()
        """Held while the set of sharings changes; share one among services of a process."""
        self.last_stats = last_stats or LastStats()
        """The last live catalog: a machine that cannot be read keeps its statistics there."""

    # -- relations -------------------------------------------------------------------------
    def publish(self, machine: str, table: str) -> tuple[str, str]:
        m = TABLE.match(table.strip())
        if m is None:
            raise ConfigError(f"{table!r} is not a table name of schema public "
                              "(e.g. public.users)")
        endpoint = next((x for x in self.topology.machines if x.name == machine), None)
        if endpoint is None:
            raise NotFound(f"no machine {machine!r}; the machines are "
                           f"{[x.name for x in self.topology.machines]}")
        qualified = f"public.{m.group(2)}"
        with self.lock, plan_store.deploy_lock(self.topology.catalog_dsn):
            if (machine, qualified) in self.store.relations():
                self._refuse_if_read(machine, qualified, "re-published")
            publish_relation(endpoint.dsn, qualified)
            self.store.add_relation(machine, qualified)
        return machine, qualified

    def unpublish(self, machine: str, table: str) -> None:
        """Withdraw a published relation from capture: out of the catalog and the machine's
        publication, its ΔR and R̂ dropped (nothing of SMILE's stays in the way of the app's
        own DDL); refused while admitted sharings read it."""
        qualified = table if "." in table else f"public.{table}"
        with self.lock, plan_store.deploy_lock(self.topology.catalog_dsn):
            if (machine, qualified) not in self.store.relations():
                raise NotFound(f"{qualified} is not published on {machine}")
            self._refuse_if_read(machine, qualified, "un-published")
            endpoint = next((m for m in self.topology.machines if m.name == machine), None)
            if endpoint is not None:
                _past_deadlocks(lambda: unpublish_relation(endpoint.dsn, qualified))
            self.store.remove_relation(machine, qualified)

    def _refuse_if_read(self, machine: str, qualified: str, what: str) -> None:
        """Conflict naming the admitted sharings that read this published relation."""
        _, plan = self.current()
        readers = sorted(plan.readers(qualified.split(".", 1)[1]))
        if readers:
            raise Conflict(f"{qualified} on {machine} cannot be {what}: the admitted sharings "
                           f"{readers} read it; withdraw them first")

    # -- the global plan --------------------------------------------------------------------
    def catalog(self, analyze: bool = True) -> CatalogSnapshot:
        """Live statistics of the published relations with their measured rates; a machine
        whose agent is away takes no new work (its bound 0)."""
        published = {(m, t.split(".", 1)[1]) for m, t in self.store.relations()}
        measured = self.rates.rates() if self.rates is not None else None
        growth = self.rates.growth() if self.rates is not None else None
        live = snapshot_live(self.topology, self.sample_s, measured, self.max_load, analyze,
                             growth, fallback=self.last_stats.catalog)
        self.last_stats.catalog = live
        idle = self.rates.idle_cores() if self.rates is not None else None
        # outside deploys, as idle is: a burst of submissions is not what the sharings cost
        busy = self.executor.measured_load() if self.rates is None \
            else self.executor.steady_load(self.rates.deploy_spans())
        local = {m.name for m in self.topology.machines if m.origin == "local"}
        if idle is not None and local:  # the local cloud: its machines share what this box
            # has left; attached machines have cores of their own
            share = (idle + sum(v for k, v in busy.items() if k in local)) / len(local)
            live = replace(live, machines=tuple(  # the bound shrinks, the price stays
                replace(m, max_load=m.max_load * min(1.0, share / m.cpu_cores))
                if m.name in local else m
                for m in live.machines), one_box=len(local) == len(live.machines))
        away = self.executor.clock.quiet()
        if away:  # no new work where an agent is away: a plan change placing some there
            # would wait for it (`Deployer.reachable`); what runs there stays charged
            live = replace(live, machines=tuple(replace(m, max_load=0.0) if m.name in away
                                                else m for m in live.machines))
        return replace(live, relations=tuple(r for r in live.relations
                                            if (r.machine, r.name) in published),
                       time_model=self.executor.model.to_json(),
                       observed=tuple(sorted(self.executor.observed.rates().items())),
                       skews=tuple(sorted(skews_of(self.executor.skews).items())),
                       busy=tuple(sorted(busy.items())),
                       delays=tuple(sorted(self.executor.delays().items())),
                       shared_pushes=bool(self.executor.share_pushes)
                       and self.executor.mode == "lazy",
                       chooses_paths=self.executor.paths.force is None)

    def learn_skews(self, catalog: CatalogSnapshot, query: SpjQuery,
                    keep: bool = True) -> CatalogSnapshot:
        """Measure the skews of `query`'s joins (`skew.py`), pool them with the earlier readings,
        and return `catalog` carrying them all. They are kept by the executor, not by this
        service (one per request): a service's own dict forgot every earlier sharing's
        skews, and each admission re-rated the running `loc⋈tweets` at uniform rates, 30×
        below what it carries. Call under `lock`. Without `keep` (a dry run), the pooled
        readings are only in the catalog returned."""
        skews = merge_skews(self.executor.skews, measure_skews(self.topology, catalog, query))
        if not keep:
            return replace(catalog, skews=tuple(sorted(skews_of(skews).items())))
        self.executor.skews.update(skews)
        self.store.set_option(SKEWS_OPTION, {  # a restarted API keeps them
            key: r.to_json() for key, r in self.executor.skews.items()})
        return replace(catalog, skews=tuple(sorted(skews_of(skews).items())))

    def current(self) -> tuple[int | None, GlobalPlan]:
        """The active version of D (empty before the first sharing)."""
        active = plan_store.load_active(self.topology.catalog_dsn)
        return (None, GlobalPlan()) if active is None else (active[0], active[1].plan)

    def assessment(self, catalog: CatalogSnapshot | None = None) -> Assessment:
        """D's predicted loads, periods, CPs and dollars under the current rates."""
        catalog = catalog or self.catalog(analyze=False)
        _, plan = self.current()
        return assess(rerate(plan, catalog), catalog, self.executor.model)

    def options(self) -> PlannerOptions:
        """How admissions and withdrawals plan (an admin's setting, kept in the catalog)."""
        return PlannerOptions.from_json(self.store.option("planner") or {})

    def _planning_options(self) -> PlannerOptions:
        """`options` as this change plans with them: while a machine's agent is away, D is
        merged but not hill-climbed, since re-routing the running sharings could need that
        machine (`Deployer.reachable`) and a change that does not should not wait for it."""
        options = self.options()
        return replace(options, plumbing=False) if self.executor.clock.quiet() else options

    def set_options(self, options: PlannerOptions) -> PlannerOptions:
        """Keep `options` for the admissions and withdrawals to come; the running D stays as
        it is (the next change plans the whole of it under the new options)."""
        with self.lock, plan_store.deploy_lock(self.topology.catalog_dsn):
            self.store.set_option("planner", options.to_json())
            self.executor.share_pushes = options.share_pushes
        return options

    # -- sharings --------------------------------------------------------------------------
    def submit(self, name: str, sql: str, staleness_s: float, penalty: float,
               consumer: Consumer | None = None, mv_machine: str | None = None,
               group: str | None = None) -> Submitted:
        """Admit or reject `name` for `consumer` (None: SMILE's own tools, no role granted),
        its MV on `mv_machine` (None: where the plan is cheapest), in the consistent `group`
        of `consumer`'s if given (its MV where the group's are: `optimizer.groups`)."""
        who = consumer.name if consumer is not None else None
        query, team = self._checked(name, sql, staleness_s, penalty, mv_machine, who, group)
        with self.lock, plan_store.deploy_lock(self.topology.catalog_dsn):
            self._refuse_taken(name)
            catalog, _, _, admission = self._decide(
                Sharing(name, sql, staleness_s, penalty, mv_machine, team), query, keep=True)
            doc = admission.to_json() | ({"group": group} if group else {})
            if not admission.admitted or admission.chosen is None:
                sid = self.store.add_sharing(name, sql, staleness_s, penalty, "rejected",
                                             admission.reason, doc, pusher=self.executor.pusher,
                                             consumer=who)
                return Submitted(self.get(sid), admission)
            chosen = admission.chosen
            entry = admission.plan.sharing(name)
            sid = self.store.add_sharing(
                name, sql, staleness_s, penalty, "installing", admission.reason, doc,
                admission.assessment.cps[name], chosen.cost_per_s, chosen.resource_cost_per_s,
                entry.mv.machine, self.executor.pusher, who)
            try:
                report = self._install(admission, catalog, name, consumer, staleness_s, group,
                                       f"admit {name}")
            except Exception as exc:
                self.store.set_status(sid, "rejected", f"installation failed: {exc}")
                raise
            self.store.set_status(sid, "admitted")
            self.store.update_decision(sid, doc | {"deploy": report})
            return Submitted(self.get(sid), admission)

    def _install(self, admission: Admission, catalog: CatalogSnapshot, name: str,
                 consumer: Consumer | None, staleness_s: float, group: str | None,
                 reason: str) -> dict[str, Any]:
        """Deploy an admitted sharing's D, grant its consumer its view and show its
        freshness; the deploy's report."""
        mv_machine = admission.plan.sharing(name).mv.machine
        report = self._deploy(admission.plan, catalog, reason)
        if consumer is not None:
            self._grant(consumer, mv_machine, name)
        self._show_freshness(name, mv_machine, staleness_s,
                             consumer.name if consumer is not None else None, group)
        return report

    def replan(self, machine: str, qualified: str, why: str) -> list[SharingRow]:
        """Capture `qualified` on `machine` again as its table is now and plan again every
        admitted sharing that reads it, each keeping its id, name, SLA, consumer and MV
        machine: they leave D together, the table is published again (a snapshot of it, ΔR
        and R̂ anew: what a schema change left NULL is captured again), and each is admitted
        again as `submit` admits it — or `failed` with why when it no longer fits or its new
        plan cannot be installed. For a published column retyped (`capture_watch`), whose
        table still answers the sharings' queries. Returns them as they are now."""
        bare = qualified.split(".", 1)[1]
        with self.lock, plan_store.deploy_lock(self.topology.catalog_dsn):
            _, plan = self.current()
            names = plan.readers(bare)
            rows = [r for r in self.store.sharings("admitted") if r.name in names]
            if not rows:
                return []
            for r in rows:
                self.store.set_status(r.id, "installing", f"being planned again: {why}")
                self.executor.untrack(r.name)
            catalog = self.catalog()
            left = rerate(plan, catalog)
            for r in rows:
                left, _ = withdraw(left, catalog, r.name, self.executor.model, climb=False)
            try:
                self._deploy(left, catalog, f"re-plan over {qualified}: out of D")
                endpoint = self.topology.machine(machine)
                _past_deadlocks(lambda: publish_relation(endpoint.dsn, qualified))
            except Exception as exc:
                for r in rows:
                    self.store.set_status(r.id, "failed", f"{why}; planning it again failed: "
                                          f"{exc}; withdraw it and submit it again")
                raise
            for r in rows:
                self._readmit(r, why)
            return [self.get(r.id) for r in rows]

    def _readmit(self, row: SharingRow, why: str) -> None:
        """Admit `row` again under its id (`replan`): admitted, or failed with why."""
        consumer = lookup(self.store, row.consumer) if row.consumer else None
        group = row.decision.get("group")
        team = groups.key(row.consumer, group) if group and row.consumer else ""
        try:
            query = parse_query(row.sql, self.catalog(analyze=False)).core
            catalog, _, _, admission = self._decide(
                Sharing(row.name, row.sql, row.staleness_s, row.penalty_per_tuple,
                        row.mv_machine, team), query, keep=True)
            if not admission.admitted or admission.chosen is None:
                raise PlanError(admission.reason)
            report = self._install(admission, catalog, row.name, consumer, row.staleness_s,
                                   group, f"re-plan {row.name}")
        except Exception as exc:
            log.warning("sharing %s could not be planned again: %s", row.name, exc)
            self.store.set_status(row.id, "failed", f"{why}; planned again, it was refused: "
                                  f"{exc}; withdraw it (DELETE /sharings/{row.id})")
            return
        chosen = admission.chosen
        self.store.set_figures(row.id, admission.assessment.cps[row.name], chosen.cost_per_s,
                               chosen.resource_cost_per_s,
                               admission.plan.sharing(row.name).mv.machine)
        self.store.set_status(row.id, "admitted", f"planned again after {why}")
        self.store.update_decision(row.id, admission.to_json() | (
            {"group": group} if group else {}) | {"deploy": report, "replanned": why})

    def explain(self, name: str, sql: str, staleness_s: float, penalty: float,
                mv_machine: str | None = None, consumer: Consumer | None = None,
                group: str | None = None) -> Explanation:
        """What `submit` would decide now, decided the same way (`_decide`), and nothing
        changed: no sharing row, plan version, vertex, grant or kept skew."""
        who = consumer.name if consumer is not None else None
        query, team = self._checked(name, sql, staleness_s, penalty, mv_machine, who, group)
        with self.lock, plan_store.deploy_lock(self.topology.catalog_dsn):
            self._refuse_taken(name)
            _, soon, before, admission = self._decide(
                Sharing(name, sql, staleness_s, penalty, mv_machine, team), query, keep=False)
        return explanation(before, admission, soon, self.executor.model)

    def _checked(self, name: str, sql: str, staleness_s: float, penalty: float,
                 mv_machine: str | None, consumer: str | None,
                 group: str | None) -> tuple[SpjQuery, str]:
        """The sharing's query parsed and its group's key ('' for none), once its name,
        numbers, machine and group are valid: bad SQL is refused before the machines are
        analysed (seconds) or anything is locked."""
        if not NAME.match(name):
            raise ConfigError(f"sharing name {name!r}: letters, digits and _ only, not starting "
                              "with a digit, at most 63 characters")
        if not 0 < staleness_s < math.inf:
            raise ConfigError("staleness_s must be a positive number of seconds")
        if not 0 <= penalty < math.inf:
            raise ConfigError("penalty_per_tuple must be a number of $ of at least 0")
        if mv_machine is not None:
            self.topology.machine(mv_machine)  # an unknown one: a ConfigError naming them
        if group is not None and not NAME.match(group):
            raise ConfigError(f"group name {group!r}: letters, digits and _ only, not starting "
                              "with a digit, at most 63 characters")
        team = groups.key(consumer, group) if group else ""
        self._refuse_taken(name)
        if team:  # a member naming another machine than its group's: refused before a lock
            groups.placement(self.current()[1], team, mv_machine)
        return parse_query(sql, self.catalog(analyze=False)).core, team

    def _decide(self, sharing: Sharing, query: SpjQuery, keep: bool
                ) -> tuple[CatalogSnapshot, CatalogSnapshot, GlobalPlan, Admission]:
        """(the live catalog, the catalog as admission charges it — the tables
        `growth_horizon_s` ahead —, D re-rated by it, the admission of `sharing` into D): the
        one decision `submit` and `explain` share. `keep`: the query's skews are pooled into
        the executor's and kept in the catalog (a dry run pools them into its own copy).
        Call under `lock` and the deploy lock."""
        catalog = self.learn_skews(self.catalog(), query, keep)
        _, plan = self.current()
        if sharing.group:  # its MV where its group's are
            sharing = replace(sharing, mv_machine=groups.placement(plan, sharing.group,
                                                                   sharing.mv_machine))
        soon = catalog.ahead(self.growth_horizon_s)
        before = rerate(plan, soon)
        admission = admit(before, soon, sharing, self.executor.model,
                          options=self._planning_options())
        if not admission.admitted and (grew := soon.growth_note(self.growth_horizon_s)):
            admission = replace(admission, reason=f"{admission.reason} ({grew})")
        return catalog, soon, before, admission

    def settle_interrupted(self) -> list[SharingRow]:
        """The sharings an API that stopped during their deploy left `installing` — which
        then could be neither used nor withdrawn — settled: admitted where the active version
        of D has them (the deploy was done, only its last status write was lost), rejected
        elsewhere (their version never became active). Every install holds the deploy lock,
        which ends with the process holding it, so once it is held here none is under way.
        Returns them as they are now. Call at start."""
        with self.lock, plan_store.deploy_lock(self.topology.catalog_dsn):
            _, plan = self.current()
            running = plan.names()
            left = self.store.sharings("installing")
            for row in left:
                if row.name in running:
                    self.store.set_status(row.id, "admitted")
                else:
                    self.store.set_status(row.id, "rejected", INTERRUPTED)
            return [self.get(row.id) for row in left]

    def _refuse_taken(self, name: str) -> None:
        if any(r.name == name for r in self.store.sharings("admitted")):
            raise Conflict(f"a sharing named {name!r} is already admitted")
        failed = [r.id for r in self.store.sharings("failed") if r.name == name]
        if failed:  # still in the global plan, holding its name and view
            raise Conflict(f"sharing {failed[0]} named {name!r} failed; withdraw it first "
                           f"(DELETE /sharings/{failed[0]})")

    def _deploy(self, plan: GlobalPlan, catalog: CatalogSnapshot,
                reason: str) -> dict[str, Any]:
        """Store `plan` as the next version of D and have the executor deploy it."""
        schemas = catalog.schemas()
        missing = sorted({p.relation for v in plan.vertices for p in v.expr.parts} - set(schemas))
        running = self.executor.plan
        if missing and running is not None:  # published on a machine being detached, lost
            here = {m.name for m in self.topology.machines}
            away = {t.split(".", 1)[1] for m, t in self.store.relations() if m not in here}
            schemas = schemas | {r: running.schemas[r] for r in missing
                                 if r in away and r in running.schemas}
            missing = [r for r in missing if r not in schemas]
        if missing:
            raise ConfigError(f"{missing} are read by admitted sharings but no longer published")
        phys = physical_plan(plan, schemas)
        version = plan_store.store_version(self.topology.catalog_dsn, phys, reason)
        try:
            with self.rates.deploying() if self.rates is not None else nullcontext():
                return self.executor.deploy(version, phys)
        except Exception as exc:
            plan_store.fail(self.topology.catalog_dsn, version, str(exc))
            raise

    def withdraw(self, sharing_id: int, consumer: Consumer | None = None, *,
                 climb: bool | None = None) -> SharingRow:
        """Withdraw a sharing `consumer` may see (None: any); what is left is hill-climbed
        again when plumbing is on, unless `climb` is False (a machine being detached as lost
        is out of the catalog while vertices of the sharings still to go are on it)."""
        with self.lock, plan_store.deploy_lock(self.topology.catalog_dsn):
            row = self.get(sharing_id, consumer)
            if row.status not in ("admitted", "failed"):
                return row
            catalog = self.catalog()
            _, plan = self.current()
            if row.name in plan.names():
                left, plumbed = withdraw(rerate(plan, catalog), catalog, row.name,
                                         self.executor.model,
                                         climb=self._planning_options().plumbing
                                         and climb is not False)
                report = self._deploy(left, catalog, f"withdraw {row.name}")
                self.store.update_decision(sharing_id, row.decision | {
                    "withdrawal": report | {"plumbings": list(plumbed)}})
            self.store.set_status(sharing_id, "withdrawn")
            # an MV on a machine being detached as lost: nothing of it can be reached there
            reachable = any(m.name == row.mv_machine for m in self.topology.machines)
            if row.mv_machine and reachable:
                freshness.unregister(self.topology.machine(row.mv_machine).dsn, row.name)
            owner = lookup(self.store, row.consumer) if row.consumer else None
            if owner is not None and row.mv_machine and reachable:
                last = not any(r.consumer == row.consumer and r.mv_machine == row.mv_machine
                               and r.id != row.id for r in self.store.sharings()
                               if r.status in ("admitted", "failed"))
                roles.revoke_on(self.topology.machine(row.mv_machine).dsn, owner.name,
                                row.name, last)
            return self.get(sharing_id)

    def get(self, sharing_id: int, consumer: Consumer | None = None) -> SharingRow:
        """The sharing, if `consumer` may see it (admins and SMILE's tools see all)."""
        row = self.store.sharing(sharing_id)
        if row is None or not visible(row, consumer):
            raise NotFound(f"no sharing with id {sharing_id}")
        return row

    def _grant(self, consumer: Consumer, machine: str, view: str) -> None:
        m = self.topology.machine(machine)  # an app's database keeps its PUBLIC rights
        roles.grant_on(m.dsn, consumer.name, consumer.pg_password, view,
                       cluster_wide=m.origin == "local")

    def _show_freshness(self, name: str, machine: str, sla_s: float,
                        consumer: str | None, group: str | None = None) -> None:
        """Its row in `smile_mv.freshness` on its MV's machine (`deploy.freshness`)."""
        phys = self.executor.plan
        if phys is not None and name in phys.plan.names():
            freshness.register(self.topology.machine(machine).dsn, name,
                               phys.vertices[phys.plan.sharing(name).mv].ts_key, sla_s,
                               consumer, group)

    def mv_location(self, row: SharingRow) -> dict[str, Any]:
        """Where the MV is, with a DSN of its consumer's own role (no DSN for a sharing that
        has no consumer: SMILE's superuser DSN is never handed out)."""
        machine = row.mv_machine or ""
        endpoint = next((m for m in self.topology.machines if m.name == machine), None)
        owner = lookup(self.store, row.consumer) if row.consumer else None
        dsn = ""
        if endpoint is not None and owner is not None:
            dsn = roles.reader_dsn(endpoint.dsn, owner.name, owner.pg_password)
        return {"machine": machine, "dsn": dsn, "table": f'{MV_SCHEMA}."{row.name}"'}


def visible(row: SharingRow, consumer: Consumer | None) -> bool:
    return consumer is None or consumer.admin or row.consumer == consumer.name


def wait_pushed(executor: Executor, names: list[str], timeout_s: float = 60.0) -> None:
    """Until each of `names` has been pushed once by `executor` (tests and benchmarks)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with executor.lock:
            if all(executor.tracked.get(n) is not None and executor.tracked[n].pushes > 0
                   for n in names):
                return
        time.sleep(0.1)
    raise SmileError(f"{names} were not all pushed within {timeout_s:g} s")
