"""The one error tree of SMILE.

Every error a user can cause or meet is a `SmileError`; each layer has its own subclass, and the
message says what happened and what to do. The CLI prints `message` (never a traceback) and the API
maps the classes to HTTP answers in one handler. Errors raised from a PostgreSQL error keep its
SQLSTATE in `sqlstate`.

Must not: import anything from the rest of the package (every module may import this one).
"""

from __future__ import annotations


class SmileError(Exception):
    """Base of every error SMILE raises on purpose."""

    def __init__(self, message: str, *, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.sqlstate = sqlstate

    def __str__(self) -> str:
        if self.sqlstate:
            return f"{self.message} (SQLSTATE {self.sqlstate})"
        return self.message


class ConfigError(SmileError):
    """Settings, topology or input files are wrong or missing."""


class CloudError(SmileError):
    """Starting, stopping or probing a local service failed."""


class DatasetError(SmileError):
    """Generating, unpacking or loading the dataset failed."""


class WorkloadError(SmileError):
    """The workload driver could not run."""


class CaptureError(SmileError):
    """Delta capture failed or a relation cannot be captured."""


class PlanError(SmileError):
    """A sharing cannot be parsed or planned (bad SQL, unsupported construct, unknown name)."""


class AgentError(SmileError):
    """An agent failed to install a plan or run an operator."""


class SkipRefused(AgentError):
    """A delta's skip refused: a vertex that may read its interval (a reader of the plan, one a
    newer version registered, a deploy's lease) is below `t`. The delta is left where it is,
    as if its push had not come, and its next push writes the interval's rows by its edge
    (docs/design/recompute.md, *Skip*)."""


class StaleRelation(AgentError):
    """A vertex marked stale was to be read or advanced: a relation must be recomputed first
    (docs/design/recompute.md, *Stale relations*), a delta a crash emptied skipped by a
    push that recomputes what it feeds (docs/design/agents.md, *Unlogged deltas*)."""

    def __init__(self, vertex: str) -> None:
        super().__init__(f"{vertex} is stale: it must be recomputed (a delta: skipped) before "
                         "it is read or advanced")
        self.vertex = vertex
