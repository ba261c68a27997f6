"""The messages between the executor and the agents (docs/design/semantics.md §7), as frozen
values with their JSON form. Commands carry a stable id, so a duplicated or retried one is
recognised; agents answer every command with its id: PUSH with PUSH_DONE, INSTALL and WITHDRAW
with DONE, any of them with AGENT_ERROR. Every command names the version of the global plan it
belongs to, which agents read from the catalog: an agent never runs a plan it was not told to.

- `Install(phase="lease")`: hold back retention of every delta on the machine (a reader at
  the epoch) while new vertices are filled; `phase="fill"`: create and fill the machine's new
  vertices at t0, register the delta readers of new and re-routed vertices on this machine,
  create the consumers' views of new sharings whose MV is here.
- `Withdraw`: drop the machine's vertices and views a new version no longer has, and release
  the leases of an install.

Must not: know how messages travel (that is `transport.py`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, Literal

from smile.errors import AgentError


@dataclass(frozen=True)
class Heartbeat:
    machine: str
    sent_at: datetime
    vertex_ts: dict[str, datetime] = field(default_factory=dict)
    """TS of every vertex on the machine."""
    load: float = 0.0
    """The machine's recent work: operator seconds per second."""
    holding: tuple[str, ...] = ()
    """The ids of the PUSH commands the agent has taken and not yet answered (queued or
    being carried out): an executor waits for those instead of sending them again."""
    type: Literal["heartbeat"] = "heartbeat"


@dataclass(frozen=True)
class Push:
    id: str
    version: int
    """The version of the global plan whose edge advances the vertex."""
    vertex: str
    """The vertex's label, e.g. `Δusers~1f3a2b@m2`."""
    to_ts: datetime
    reply_to: str = "/queue/smile.executor"
    """Where the PUSH_DONE or AGENT_ERROR goes: each executor listens on a queue of its own, so
    two executors (or a benchmark beside a running one) never take each other's answers."""
    sharing: str = ""
    """The sharing whose push this is (for the logs)."""
    timeout_s: float = 0.0
    """Longest the push may take, 0 for no limit: each of its statements gets it as
    `statement_timeout`, and a fifth of it (at least 1 s) as `lock_timeout`, so a stuck lock
    or statement fails the push instead of holding its vertex for good."""
    deadline: datetime | None = None
    """When its sharing's MV, left where it is, goes over the SLA (TS(MV) + SLA): an agent
    runs the pushes it holds earliest deadline first, those without one after them, by
    arrival."""
    together: tuple[str, ...] = ()
    """A consistent group's push (docs/design/groups.md): the labels of more vertices of
    the machine to advance to `to_ts` with `vertex`, all in one transaction."""
    mode: str = ""
    """How to advance the vertex: '' (or "incremental") by its incoming edge, "recompute"
    (its contents at `to_ts` computed afresh), "skip" (a delta's TS moved, no row) or
    "stale" (a relation's TS moved, its contents dropped until recomputed;
    `optimizer.recompute`)."""
    type: Literal["push"] = "push"


@dataclass(frozen=True)
class Install:
    id: str
    version: int
    phase: Literal["lease", "fill"]
    t0: datetime | None = None
    vertices: tuple[str, ...] = ()
    """Labels of the version's new vertices (on any machine: each agent installs its own)."""
    rerouted: tuple[str, ...] = ()
    """Labels of existing vertices whose incoming edge the version changes."""
    views: tuple[str, ...] = ()
    """Sharings new in the version: their MV's machine creates their view."""
    reply_to: str = "/queue/smile.executor"
    type: Literal["install"] = "install"


@dataclass(frozen=True)
class Withdraw:
    id: str
    version: int
    """The version now active."""
    previous: int | None
    """The version the dropped vertices and views belonged to."""
    vertices: tuple[str, ...] = ()
    views: tuple[str, ...] = ()
    lease: int | None = None
    """Release the leases of this install version."""
    reply_to: str = "/queue/smile.executor"
    type: Literal["withdraw"] = "withdraw"


@dataclass(frozen=True)
class Done:
    id: str
    machine: str
    elapsed_s: float
    detail: str = ""
    type: Literal["done"] = "done"


@dataclass(frozen=True)
class PushDone:
    id: str
    vertex: str
    ts: datetime
    """The vertex's TS after the push (≥ the asked-for one)."""
    elapsed_s: float
    rows_in: int
    rows_out: int
    bytes_moved: int = 0
    cpu_s: float | None = None
    """CPU seconds the push took (the agent's thread, its machine's database backend and
    those of its sources' machines on this host, `agent.cpu_time`); None where they could
    not be read (the push log's CPU figures then count `elapsed_s`, `store.BUSY_S`)."""
    advanced_from: datetime | None = None
    advanced_to: datetime | None = None
    """The TS this push itself took the vertex from and to, under its lock (the same twice
    where another push had taken it there already): the span of data its rows are, which
    `ts`, read after the push, is not where pushes of several sharings overlap. None from
    an agent that does not say."""
    parts: tuple[tuple[str, float, int, int], ...] = ()
    """A group's push: (label, seconds, rows in, rows out) of each vertex it advanced in its
    one transaction, `vertex` first; the fields above are their sums."""
    type: Literal["push_done"] = "push_done"

    @property
    def advanced(self) -> bool:
        """Whether this push itself moved the vertex's TS forward (`advanced_from` → `to`)."""
        return self.advanced_from is not None and self.advanced_to is not None \
            and self.advanced_to > self.advanced_from


@dataclass(frozen=True)
class AgentFailure:
    id: str
    machine: str
    reason: str
    vertex: str | None = None
    sqlstate: str | None = None
    """The database's error code when the database refused the work (e.g. 22012, a division
    by zero in a sharing's predicate): how the executor tells a push that will fail every time
    from one that may work when retried."""
    deferred: bool = False
    """The vertex was left where it is and need not get there in this push: a delta's skip
    refused (`errors.SkipRefused`: a reader of its interval is below the push's t). Its next
    push brings it along; the executor does not send it again."""
    stale: bool = False
    """A vertex the push advances or reads was stale (`errors.StaleRelation`: a relation to
    recompute, a delta a crash emptied): sent again with the same mode it would be refused
    again, so the push fails at once and the executor reads the stale vertices again."""
    type: Literal["agent_error"] = "agent_error"


Command = Push | Install | Withdraw
Message = Heartbeat | Push | PushDone | AgentFailure | Install | Withdraw | Done
_TYPES: dict[str, type[Any]] = {"heartbeat": Heartbeat, "push": Push, "push_done": PushDone,
                                "agent_error": AgentFailure, "install": Install,
                                "withdraw": Withdraw, "done": Done}
_TIMES = {"sent_at", "to_ts", "ts", "t0", "deadline", "advanced_from", "advanced_to"}
_TUPLES = {"vertices", "rerouted", "views", "together", "holding"}


def encode(message: Message) -> str:
    """JSON text; timestamps as ISO 8601 with their offset.

    >>> from datetime import UTC
    >>> json.loads(encode(Push("p1", 3, "Δs~12ab@m1", datetime(2026, 1, 1, tzinfo=UTC))))["to_ts"]
    '2026-01-01T00:00:00+00:00'
    """
    def conv(value: Any) -> Any:
        if isinstance(value, datetime):
            return value.isoformat()
        if isinstance(value, dict):
            return {k: conv(v) for k, v in value.items()}
        return value

    # the fields one level deep (messages are flat): `asdict` deep-copied every heartbeat's
    # timestamps, a fifth of an agent's CPU with Table 1 running
    return json.dumps({f.name: conv(getattr(message, f.name)) for f in fields(message)},
                      ensure_ascii=False)


def decode(text: str | bytes) -> Message:
    """The message in `text`; anything malformed raises AgentError saying what."""
    try:
        doc = json.loads(text)
        cls = _TYPES[doc.pop("type")]
        for key in _TIMES & doc.keys():
            doc[key] = None if doc[key] is None else datetime.fromisoformat(doc[key])
        for key in _TUPLES & doc.keys():
            doc[key] = tuple(doc[key])
        if "parts" in doc:
            doc["parts"] = tuple((str(v), float(s), int(i), int(o)) for v, s, i, o in
                                 doc["parts"])
        if "vertex_ts" in doc:
            doc["vertex_ts"] = {k: datetime.fromisoformat(v) for k, v in doc["vertex_ts"].items()}
        message: Message = cls(**doc)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise AgentError(f"malformed message: {exc!r}") from exc
    return message
