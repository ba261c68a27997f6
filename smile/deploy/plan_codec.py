"""Physical plans to JSON and back: the global plan (`optimizer.codec`) and the schemas of the
base relations it reads, from which every agent rebuilds the same physical plan.

Must not: choose or install plans.
"""

from __future__ import annotations

from typing import Any

from smile.deploy.physical import PhysicalPlan, physical_plan
from smile.errors import AgentError, PlanError
from smile.optimizer.codec import plan_from_json, plan_to_json


def encode_physical(phys: PhysicalPlan) -> dict[str, Any]:
    return {"plan": plan_to_json(phys.plan),
            "schemas": {rel: [list(c) for c in cols] for rel, cols in phys.schemas.items()}}


def decode_physical(doc: dict[str, Any]) -> PhysicalPlan:
    try:
        schemas = {rel: tuple((c, t) for c, t in cols) for rel, cols in doc["schemas"].items()}
        return physical_plan(plan_from_json(doc["plan"]), schemas)
    except (KeyError, TypeError, ValueError, PlanError) as exc:
        raise AgentError(f"stored plan is malformed: {exc!r}") from exc
