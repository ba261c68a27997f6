"""Consistent groups without a cloud (docs/design/groups.md): where admission puts a group's
MVs and what it charges its pushes; the API's refusals — a member naming another machine
than its group's, a bad group name, a field SMILE does not know — each a 422 with the reason,
through the real route, service and placement rule."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest

from smile.api.app import create_app
from smile.api.auth import current_consumer
from smile.api.services import get_sharings
from smile.costmodel.time_model import TimeModel
from smile.errors import PlanError
from smile.executor.consumers import Consumer
from smile.executor.sharings import SharingService
from smile.optimizer import groups
from smile.optimizer.admission import admit
from smile.optimizer.catalog import CatalogSnapshot, ColumnStats, Machine, RelationStats
from smile.optimizer.codec import plan_from_json, plan_to_json
from smile.optimizer.global_plan import GlobalPlan
from smile.optimizer.load import assess
from smile.optimizer.sharing import Sharing
from tests.fix_api import serve_app
from tests.fix_cloud import PORT_SHIFT

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

MODEL = TimeModel()
FEED = groups.key("app1", "feed")
QUERIES = {"g_a": ("SELECT a.k, a.x FROM a", 8.0),
           "g_b": ("SELECT b.k, b.y FROM b", 4.0),
           "g_ab": ("SELECT a.x, b.y FROM a JOIN b ON a.k = b.k", 6.0)}


def _catalog() -> CatalogSnapshot:
    return CatalogSnapshot(
        machines=tuple(Machine(f"m{i + 1}", cpu_cores=2.0) for i in range(3)),
        relations=(
            RelationStats("a", "m1", 1e5, 50, (ColumnStats("k", "bigint", 1000, 0, 8),
                                               ColumnStats("x", "text", 1000, 0, 12))),
            RelationStats("b", "m2", 2e5, 80, (ColumnStats("k", "bigint", 1000, 0, 8),
                                               ColumnStats("y", "text", 5, 0, 3))),
        ))


def _group_of_three(cat: CatalogSnapshot, first_machine: str | None = "m3") -> GlobalPlan:
    """The three sharings of QUERIES in FEED, with `AB` outside it sharing their work."""
    plan = admit(GlobalPlan(), cat, Sharing("outside", QUERIES["g_ab"][0], 6.0, 0.0)).plan
    for i, (name, (sql, sla)) in enumerate(QUERIES.items()):
        where = groups.placement(plan, FEED, first_machine if i == 0 else None)
        admission = admit(plan, cat, Sharing(name, sql, sla, 0.0, where, FEED))
        assert admission.admitted, admission.reason
        plan = admission.plan
    return plan


def test_a_groups_mvs_are_on_one_machine_and_its_own() -> None:
    cat = _catalog()
    plan = _group_of_three(cat)
    mvs = [plan.sharing(n).mv for n in QUERIES]
    assert {mv.machine for mv in mvs} == {"m3"}
    assert all(mv.owner == FEED and groups.grouped(mv) for mv in mvs)
    # the same join outside the group has an MV of its own: the group's is never shared
    assert plan.sharing("outside").mv != plan.sharing("g_ab").mv
    # nothing but the group's own step advances a grouped MV: no other edge reads it
    for mv in mvs:
        assert not plan.outgoing.get(mv), mv.label
    assert groups.groups(plan) == {FEED: tuple(QUERIES)}
    assert groups.groups(plan_from_json(json.loads(json.dumps(plan_to_json(plan))))) == \
        groups.groups(plan)


def test_a_member_naming_another_machine_is_refused_with_the_reason() -> None:
    plan = _group_of_three(_catalog())
    assert groups.placement(plan, FEED, None) == "m3"
    assert groups.placement(plan, FEED, "m3") == "m3"
    with pytest.raises(PlanError, match=r"group 'feed' has its MVs on m3 .*not on m1"):
        groups.placement(plan, FEED, "m1")
    # another consumer's group of the same name is another group
    assert groups.placement(plan, groups.key("app2", "feed"), "m1") == "m1"


def test_the_group_is_charged_its_tightest_sla_and_one_push_for_all() -> None:
    cat = _catalog()
    plan = _group_of_three(cat)
    for shared in (False, True):
        a = assess(plan, replace(cat, shared_pushes=shared), MODEL)
        periods = {a.periods[n] for n in QUERIES}
        assert len(periods) == 1, a.periods
        assert {a.slas[n] for n in QUERIES} == {4.0}
        assert len({a.cps[n] for n in QUERIES}) == 1
        # the group's CP covers each member's own path to its MV and the steps of all
        assert a.cps["g_ab"] >= max(plan.cp(n, MODEL) for n in QUERIES)
        # a vertex all three read (ΔMV's inputs) is pushed once per push of the group
        group_rate = 1.0 / periods.pop()
        assert a.pushes(frozenset(QUERIES)) == pytest.approx(group_rate)
        assert a.pushes(frozenset({"g_b"})) == pytest.approx(group_rate)
        # the tightest member alone would be pushed no more often than the group is
        alone = admit(GlobalPlan(), cat, Sharing("g_b", QUERIES["g_b"][0], 4.0, 0.0, "m3"))
        assert alone.assessment.periods["g_b"] >= 1.0 / group_rate - 1e-9


# -- the API's refusals ------------------------------------------------------------------------
class _Machines:
    def machine(self, name: str) -> Any:
        if name not in ("m1", "m2", "m3"):
            raise PlanError(f"no machine {name}")
        return name


class _Store:
    def sharings(self, status: str | None = None) -> list[Any]:
        return []


class _Service(SharingService):
    """The real `submit` over a fixed D holding the group (no catalog, no machines): what it
    refuses, it refuses before either is read."""

    def __init__(self, plan: GlobalPlan) -> None:
        super().__init__(_Machines(), _Store(), None)  # type: ignore[arg-type]
        self.plan = plan

    def current(self) -> tuple[int | None, GlobalPlan]:
        return 1, self.plan

    def catalog(self, analyze: bool = True) -> CatalogSnapshot:
        raise AssertionError("a refused submission must not read the machines")


def _api(plan: GlobalPlan) -> AbstractContextManager[str]:
    """The real app and routes, as consumer `app1`, over `_Service(plan)`."""
    app = create_app(None)  # type: ignore[arg-type]
    app.dependency_overrides[current_consumer] = lambda: Consumer("app1", False, "pw")
    app.dependency_overrides[get_sharings] = lambda: _Service(plan)
    return serve_app(app, 18970 + PORT_SHIFT)


def _post(base: str, body: dict[str, Any]) -> tuple[int, Any]:
    req = urllib.request.Request(base + "/sharings", data=json.dumps(body).encode(),
                                 method="POST", headers={"Content-Type": "application/json",
                                                         "Authorization": "Bearer x"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_apis_refusals_are_422s_with_the_reason() -> None:
    plan = _group_of_three(_catalog())
    ok = {"name": "g_c", "sql": QUERIES["g_a"][0], "staleness_s": 5.0, "group": "feed"}
    with _api(plan) as base:
        status, body = _post(base, ok | {"mv_machine": "m1"})
        assert status == 422 and "has its MVs on m3" in body["detail"] \
            and "not on m1" in body["detail"], body
        for bad in ({"group": ""}, {"group": "a b"}, {"group": "1st"}, {"group": "x" * 64},
                    {"group": 7}, {"group": {"name": "feed"}}, {"groop": "feed"},
                    {"group_sla": 3}):
            status, body = _post(base, ok | bad)
            assert status == 422 and body["detail"], (bad, status, body)
            assert "extra" in json.dumps(body) or "group" in json.dumps(body), (bad, body)


# -- the executor's decision ---------------------------------------------------------------------
def test_a_group_is_pushed_as_a_whole_at_its_tightest_sla_and_aligned_at_once() -> None:
    """The group of three on one machine (SLAs 8, 4 and 6 s; the executor started on nothing
    but D and the timestamps): the scheduler leaves its members to the group's push and never
    takes one along; at 3.5 s behind the group is due (its SLA is 4 s) where its 8-s member
    alone would wait; MVs at different TSs (a member just filled) are pushed at once to the
    sources' watermark, which aligns them, however fresh they are."""
    from datetime import UTC, datetime, timedelta

    from smile.deploy.physical import physical_plan
    from smile.executor.pushes import Tracked
    from smile.executor.runtime import Executor
    from smile.topology import MachineEndpoint, Topology

    cat = _catalog()
    plan = _group_of_three(cat)
    phys = physical_plan(plan, cat.schemas())
    topology = Topology(tuple(MachineEndpoint(f"m{i}", f"postgresql://x@127.0.0.1:1/m{i}")
                              for i in (1, 2, 3)), "postgresql://x@127.0.0.1:1/c",
                        "stomp://127.0.0.1:1", "external")
    now = datetime.now(UTC)

    def executor(behind: dict[str, float]) -> Executor:
        ex = Executor(topology, MODEL, share_pushes=True)
        ex.version, ex.plan = 1, phys
        ex.groups.use(phys.plan)
        stamps: dict[str, dict[str, datetime]] = {"m1": {}, "m2": {}, "m3": {}}
        for entry in phys.plan.sharings:
            for s in entry.sources:
                stamps[s.machine][phys.vertices[s].ts_key] = now
            stamps[entry.mv.machine][phys.vertices[entry.mv].ts_key] = \
                now - timedelta(seconds=behind.get(entry.name, 0.0))
            ex.tracked[entry.name] = Tracked(entry.name, entry.sla_s)
        for machine, got in stamps.items():
            ex.clock.learn(machine, got, now)
        return ex

    members = list(QUERIES)
    ex = executor(dict.fromkeys(members, 3.5))
    assert ex.groups.member_of == dict.fromkeys(members, FEED)
    team = [ex.tracked[n] for n in members]
    assert ex.groups.target(FEED, team) == now
    assert ex.scheduler.target(ex.tracked["g_a"]) is None  # 8-s SLA alone: not yet
    assert ex.scheduler.companions(ex.tracked["outside"], now) == []
    ex = executor(dict.fromkeys(members, 1.0))
    assert ex.groups.target(FEED, [ex.tracked[n] for n in members]) is None
    assert not ex.groups.unaligned({"g_ab"})  # `bring_in` is done with it
    ex = executor({"g_a": 1.0, "g_b": 1.0, "g_ab": 0.2})  # g_ab just filled at its t0
    assert ex.groups.target(FEED, [ex.tracked[n] for n in members]) == now
    assert ex.groups.unaligned({"g_ab"}) and not ex.groups.unaligned({"outside"})
