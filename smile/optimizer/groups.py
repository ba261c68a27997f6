"""Consistent groups (docs/design/groups.md): the sharings a consumer reads together, whose
MVs live on one machine and advance together, each push of the group bringing every MV of it
to one common timestamp in one transaction.

What the optimizer does with a group, as pure functions of D:

- **Who is in it.** A group is named by its consumer (`key`: consumer and group name, so two
  consumers' groups of one name are two groups); D keeps the key with each member
  (`SharingEntry.group`).
- **Where.** Every MV of a group on the machine of the members already admitted
  (`placement`): a member naming another machine is refused with the reason.
- **Only the group advances its MVs.** A member's MV vertex is the group's own (`own_mv`:
  `Vertex.owner` is the group's key), so no other sharing's plan shares it, reads it or
  pushes it: the DP builds on D's unowned vertices only, `GlobalPlan.computing` skips owned
  ones, and plumbings leave grouped vertices alone (`grouped`). What feeds the MVs (their
  deltas, joins, copies) is shared as any other vertex.
- **What its pushes cost.** A group is pushed at the period of its tightest SLA, and a push
  reaches every MV after the slowest member's delta plus every member's MV step, done one
  after the other in one transaction (`group_cp`). Each member is charged as one push of the
  group: one member starts it, the others go along (`Rides`), so a vertex several members
  share runs once per group push (`rides`).

Must not: touch a database or a broker; plans in, values out.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import TYPE_CHECKING

from smile.errors import PlanError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from smile.optimizer.global_plan import GlobalPlan
    from smile.optimizer.plan import Edge, Plan, Vertex

MARK = "/"
"""In a vertex's owner, what tells a group's key from a sharing's name (`plan.owned`): the
key is `consumer/group`, and neither a consumer's nor a sharing's name has a `/`."""


def key(consumer: str | None, group: str) -> str:
    """The group's key in D: its consumer's name and its own ('' for SMILE's own tools).

    >>> key("app1", "feed"), key(None, "feed")
    ('app1/feed', '/feed')
    """
    return f"{consumer or ''}{MARK}{group}"


def name_of(group_key: str) -> str:
    """The group's name as its consumer gave it.

    >>> name_of("app1/feed")
    'feed'
    """
    return group_key.split(MARK, 1)[1] if MARK in group_key else group_key


def grouped(v: Vertex) -> bool:
    """Whether `v` is a group's own MV (only the group's pushes advance it)."""
    return MARK in v.owner


def groups(plan: GlobalPlan) -> dict[str, tuple[str, ...]]:
    """Each group of D: its key → its members' names, in D's order."""
    out: dict[str, list[str]] = defaultdict(list)
    for s in plan.sharings:
        if s.group:
            out[s.group].append(s.name)
    return {k: tuple(v) for k, v in out.items()}


def placement(plan: GlobalPlan, group_key: str, mv_machine: str | None) -> str | None:
    """The machine a new member of `group_key` must have its MV on: the one its members in
    D have theirs on (None for a group without members yet: `mv_machine`, or where the plan
    is cheapest). PlanError when the member names another one."""
    machines = sorted({s.mv.machine for s in plan.sharings if s.group == group_key})
    if not machines:
        return mv_machine
    if len(machines) > 1:  # never made by `admit`; say so rather than pick one
        raise PlanError(f"group {name_of(group_key)!r} has MVs on {machines}")
    if mv_machine is not None and mv_machine != machines[0]:
        members = [s.name for s in plan.sharings if s.group == group_key]
        raise PlanError(f"group {name_of(group_key)!r} has its MVs on {machines[0]} "
                        f"({', '.join(members)}): a member's MV must be there too, not on "
                        f"{mv_machine}; leave mv_machine out or name {machines[0]}")
    return machines[0]


def own_mv(plan: Plan, group_key: str) -> Plan:
    """`plan` with its MV made the group's own (the edge into it too): merged into D it is
    a vertex of its own, which no other sharing shares, reads or pushes."""
    mv = replace(plan.mv, owner=group_key)

    def edge(e: Edge) -> Edge:
        return replace(e, dst=mv) if e.dst == plan.mv else e

    return replace(plan, edges=tuple(edge(e) for e in plan.edges), mv=mv)


def group_cp(plan: GlobalPlan, names: Iterable[str], arrivals: Mapping[Vertex, float],
             seconds: Mapping[Edge, float]) -> float:
    """When a push of the group reaches its MVs: once every member's MV step can start (its
    inputs are there), the steps one after the other in one transaction."""
    ready, steps = 0.0, 0.0
    for mv in {plan.sharing(n).mv for n in names}:
        e = plan.incoming.get(mv)
        if e is None:
            continue
        ready = max(ready, *(arrivals.get(s, 0.0) for s in e.sources))
        steps += seconds[e]
    return ready + steps


def timing(plan: GlobalPlan, at1: Mapping[Vertex, float], at0: Mapping[Vertex, float],
           s1: Mapping[Edge, float], s0: Mapping[Edge, float],
           delays: Mapping[str, float]) -> dict[str, tuple[float, float, float, float]]:
    """Per member of a group of D: its group's (critical path for one second of updates, for
    none, tightest SLA, largest learnt delay) — what its pushes are timed and charged by."""
    out: dict[str, tuple[float, float, float, float]] = {}
    for names in groups(plan).values():
        sla = min(plan.sharing(n).sla_s for n in names)
        delay = max(delays.get(n, 0.0) for n in names)
        got = (group_cp(plan, names, at1, s1), group_cp(plan, names, at0, s0), sla, delay)
        out.update(dict.fromkeys(names, got))
    return out
