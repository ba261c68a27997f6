"""Request and response bodies of the REST API (pydantic), separate from the domain dataclasses.

Must not: hold logic beyond validation.
"""

from __future__ import annotations

from datetime import datetime  # noqa: TC003 (pydantic needs it at runtime)
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from smile.executor.consumers import NAME as CONSUMER_NAME
from smile.executor.sharings import NAME as SHARING_NAME
from smile.executor.sharings import TABLE
from smile.optimizer.parse_spj import MAX_SQL

YEAR_S = 365 * 24 * 3600.0


class RelationIn(BaseModel):
    machine: str = Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9_-]+$",
                         examples=["m1"])
    table: str = Field(min_length=1, max_length=70, pattern=TABLE.pattern,
                       examples=["public.users"])


class RelationOut(BaseModel):
    machine: str
    table: str
    status: str = "published"


class SharingIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    """A field SMILE does not know (`groop` for `group`) is a 422, not silently dropped."""

    name: str = Field(min_length=1, max_length=63, pattern=SHARING_NAME.pattern,
                      examples=["S1"])
    sql: str = Field(min_length=1, max_length=MAX_SQL,
                     examples=["SELECT u.uid, s.fid FROM users u, socnet s WHERE u.uid = s.uid"])
    staleness_s: float = Field(ge=0.001, le=YEAR_S, allow_inf_nan=False, examples=[5.0])
    """Within [1 ms, one year]."""
    penalty_per_tuple: float = Field(default=0.0, ge=0, le=1e6, allow_inf_nan=False,
                                     examples=[0.01])
    mv_machine: str | None = Field(default=None, min_length=1, max_length=63,
                                   examples=["m2"])
    """The machine the consumer wants its MV on (one of `GET /machines`); by default the
    optimizer places it where the plan is cheapest."""
    group: str | None = Field(default=None, min_length=1, max_length=63,
                              pattern=SHARING_NAME.pattern, examples=["feed"])
    """A consistent group of the consumer's own (docs/design/groups.md): every MV of it on one
    machine, all advanced to one common timestamp in one transaction, so that one
    transaction reading them sees them at the same TS. Its SLA is its tightest member's."""


class PlannerOptionsIO(BaseModel):
    """How admissions and withdrawals plan (`optimizer.admission.PlannerOptions`)."""

    plumbing: bool = True
    """Hill-climb the global plan with plumbings at each admission and withdrawal."""
    merge: bool = True
    """Share the vertices equal plans have (off: each sharing runs its own, but for the base
    relations' deltas and shadows; for measuring what sharing saves)."""
    algorithm: Literal["cheapest", "DPD", "DPT"] = "cheapest"
    """Whose plan a sharing gets: the cheaper admissible one, or DPD's / DPT's whenever its
    critical path is within the SLA."""
    share_pushes: bool = True
    """Push sharings that share most of their vertices together when one is due and the
    others are half-way to their SLA (off: each on its own)."""


class ConsumerIn(BaseModel):
    name: str = Field(min_length=1, max_length=40, pattern=CONSUMER_NAME.pattern,
                      examples=["app1"])
    admin: bool = False


class ConsumerOut(BaseModel):
    name: str
    admin: bool
    token: str | None = None
    """Shown once, when the consumer is created."""


class MvOut(BaseModel):
    machine: str
    dsn: str
    table: str


class AdmittedOut(BaseModel):
    id: int
    name: str
    status: str
    reason: str
    plan: dict[str, Any]
    """The sharing's part of the global plan (vertices it shares included)."""
    cp_s: float
    period_s: float
    """How often the lazy executor is expected to push it."""
    cost_per_s: float
    algorithm: str = ""
    """Whose plan it got: DPD or DPT."""
    plumbings: list[str] = []
    """Plumbings hill-climbing applied to the global plan as it was admitted."""
    charged_by_recompute: bool = False
    """Admission charged it what recomputing its MV costs, that being cheaper than applying
    its deltas at its rates (docs/design/recompute.md)."""
    mv: MvOut


class RejectedOut(BaseModel):
    id: int
    name: str
    status: str = "rejected"
    reason: str


class SharingOut(BaseModel):
    id: int
    name: str
    sql: str
    status: str
    reason: str
    sla_s: float
    penalty_per_tuple: float
    staleness_s: float | None = None
    mv_ts: datetime | None = None
    sla_ok: bool | None = None
    violations: int = 0
    cost_so_far: float = 0.0
    resource_cost: float = 0.0
    penalty_cost: float = 0.0
    tuples_moved: int = 0
    work_s: float = 0.0
    cp_s: float | None = None
    cost_per_s: float | None = None
    mv: MvOut | None = None
    created_at: datetime
    withdrawn_at: datetime | None = None
    group: str | None = None
    """The consistent group it is in, if any."""
    degraded: str | None = None
    """Why it is not pushed now, e.g. "machine m2 unreachable since 2026-…": it catches up
    when the machine is back."""
    pushes_by_path: dict[str, int] = {}
    """Its MV's pushes by the path they took: `incremental` (its delta applied) and
    `recompute` (computed afresh, docs/design/recompute.md)."""


class EdgeLoadOut(BaseModel):
    vertex: str
    """The vertex the edge writes (`computation@machine`)."""
    kind: str | None
    """`copy_delta`, `join_pg`, `join_spark`, `union`, `delta_to_rel`; None for a vertex no
    longer in the plan whose last pushes are still in the window."""
    sharings: list[str]
    predicted: float | None
    measured: float
    """Core-seconds per second over the last minute."""
    pushes_per_s: float | None = None
    """Pushes per second the plan expects of it (Σ 1/P over the sharings it serves)."""
    tuples_per_s: float | None = None
    """Tuples per second the time model charges it at the current rates."""
    fixed_s: float | None = None
    """Seconds the time model charges each push of it."""
    per_tuple_s: float | None = None
    """Seconds the time model charges each of its tuples: `predicted` is `fixed_s ×
    pushes_per_s + per_tuple_s × tuples_per_s`."""
    scale: float | None = None
    """Its vertex's measured scale over its kind's line, where it has one."""


LEFT_ON_A_LOST_MACHINE = (
    "SMILE's replication slot smile_capture (which keeps WAL until it goes), its publication "
    "smile_pub, the schemas _smile and smile_mv and the consumers' roles smile_c_* stay on "
    "it: once it answers again, drop them by hand (docs/configuration.md)")


class LostOut(BaseModel):
    """A machine detached while it could not be reached."""

    name: str
    withdrawn: list[str]
    """The sharings withdrawn with it."""
    unreachable: str
    """Why it could not be reached."""
    left: str
    """What of SMILE's stays on it, and how to take it off."""


class MachineOut(BaseModel):
    name: str
    dsn_host: str
    healthy: bool
    last_heartbeat_s_ago: float | None
    load: float
    """Operator seconds per second its agent reported in its last heartbeat."""
    predicted_load: float | None = None
    """Core-seconds per second the global plan should take on it at the current rates."""
    measured_load: float | None = None
    """Core-seconds per second its operators took over the last minute (PUSH_DONEs)."""
    bound: float | None = None
    """The load admission holds it to (cores × max_load); on one box (the local cloud) its
    share of what the box leaves operators, which it may pass while the machines together
    stay within theirs."""
    sustained_load: float | None = None
    """Core-seconds per second its operators took over the last five minutes."""
    over_bound: bool = False
    """`sustained_load` is above `bound` (on one box: while the machines together are above
    theirs): the promises on it are at risk."""
    at_risk: list[str] = []
    """When over its bound: the sharings with a vertex on it."""
    warning: str | None = None
    edges: list[EdgeLoadOut] = []
    """Its edges with the largest loads, predicted beside measured."""
    origin: Literal["local", "attached"] = "local"
    """`local`: a cluster of SMILE's local cloud; `attached`: an app's own database."""
    cores: float | None = None
    """Its cores (a local machine: its share of the box)."""
    price_per_hour: float | None = None
    """Its price in $ per hour."""
    unreachable: str | None = None
    """While it is not healthy: why its database does not take SMILE's connection (None: it
    does, and its agent is what is silent)."""
    lost: str | None = None
    """What `unreachable` says of a machine lost for good (its password changed, its database
    dropped) and what to do; None when it may come back by itself."""


class MachineIn(BaseModel):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,30}$", examples=["app1"])
    dsn: str = Field(min_length=1, max_length=1000,
                     examples=["postgresql://smile:secret@db.internal:5432/app"])
    cores: float | None = Field(default=None, gt=0, le=10_000, allow_inf_nan=False)
    """Its cores (default 2)."""
    price_per_hour: float | None = Field(default=None, ge=0, le=1_000_000, allow_inf_nan=False)
    """$ per hour (default 0.34)."""


class ProblemOut(BaseModel):
    item: str
    found: str
    fix: str
    restart: bool


class UnmetOut(BaseModel):
    detail: str
    problems: list[ProblemOut]

