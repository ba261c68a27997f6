"""The catalog snapshot: everything the optimizer knows, as one immutable value.

Machines with capacities and prices, relations with their placement, size, update rate and
column statistics, and the capacity already used by admitted plans. It is saved to and loaded
from a JSON file (format in docs/catalog.md), so planning works offline; `smile catalog
snapshot` builds one from a live cloud (`pg_stats`, `pg_stat_user_tables`).

Must not: connect to anything.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from smile.errors import ConfigError, PlanError

if TYPE_CHECKING:
    from pathlib import Path


@dataclass(frozen=True)
class Machine:
    name: str
    cpu_cores: float = 2.0
    disk_gb: float = 100.0
    network_mb_s: float = 100.0
    price_per_hour: float = 0.34
    """The paper's EC2 'large' instance (§9.1.2)."""
    max_load: float = 0.7
    """The share of its cores that SMILE's operators may keep busy; the rest is left to
    capture, the executor and the consumers' own queries. Its capacity bound is
    `cpu_cores × max_load` core-seconds per second."""

    @property
    def cpu_bound(self) -> float:
        return self.cpu_cores * self.max_load


@dataclass(frozen=True)
class ColumnStats:
    name: str
    type: str = "text"
    n_distinct: float = 100.0
    """Distinct values (absolute, as pg_stats gives it once multiplied out)."""
    null_frac: float = 0.0
    width: int = 8


@dataclass(frozen=True)
class RelationStats:
    name: str
    machine: str
    rows: float
    update_rate: float
    """Delta rows per second (an UPDATE counts twice: -old, +new)."""
    columns: tuple[ColumnStats, ...]
    growth_rate: float = 0.0
    """Rows per second the table grows by (inserts − deletes), measured while traffic runs."""
    lost: tuple[str, ...] = ()
    """Published columns the table no longer has as published (dropped, renamed or retyped
    since): NULL in ΔR and R̂ from then on, so a new query may not read them."""

    @property
    def width(self) -> int:
        return sum(c.width for c in self.columns) or 8

    def column(self, name: str) -> ColumnStats:
        for c in self.columns:
            if c.name == name:
                return c
        raise PlanError(
            f"relation {self.name} has no column {name!r}; its columns are "
            f"{[c.name for c in self.columns]}"
        )


KEYLIKE = 0.9
"""A column with at least this many distinct values per row grows its distinct values with
the table (`CatalogSnapshot.ahead`)."""


@dataclass(frozen=True)
class Usage:
    """Capacity already taken on one machine by admitted plans."""

    cpu_cores: float = 0.0
    disk_gb: float = 0.0
    network_mb_s: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.cpu_cores + other.cpu_cores, self.disk_gb + other.disk_gb,
                     self.network_mb_s + other.network_mb_s)


@dataclass(frozen=True)
class CatalogSnapshot:
    machines: tuple[Machine, ...]
    relations: tuple[RelationStats, ...]
    usage: tuple[tuple[str, Usage], ...] = field(default_factory=tuple)
    time_model: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    """Calibrated coefficients (see smile.costmodel.time_model), if the file carries them."""
    skews: tuple[tuple[str, float], ...] = ()
    """(`estimate.skew_key`, K): how many more rows a changed row of one relation meets
    through a join column than uniform statistics say, measured on the live data."""
    observed: tuple[tuple[str, float], ...] = ()
    """(vertex computation, tuples/s its edge takes in) as measured on the running plan
    (`smile.executor.observed`); used instead of estimates from the statistics."""
    busy: tuple[tuple[str, float], ...] = ()
    """(machine, core-seconds per second) its operators were measured to take over the last
    minute; admission holds it, plus what a new sharing adds, against the machine's bound."""
    delays: tuple[tuple[str, float], ...] = ()
    """(sharing, seconds) each running sharing's pushes have taken beyond its critical path
    (the executor's `lazy.learn_delay`): the lazy executor starts its pushes that much
    earlier, so they come more often than the SLA and the critical path alone say."""
    one_box: bool = False
    """The machines are processes on one box (the local cloud): their clusters' backends run
    on any of its cores, so their operator work is pooled (`cpu_limit`, `box_bound`): each
    machine's bound is its share of what the box leaves operators, and admission holds the
    machines' total against the sum of those shares (`load.box_over`), not each machine
    against its own share — one machine may take the cores the others leave idle."""
    shared_pushes: bool = False
    """The executor pushes sharings that share most of their vertices together
    (`PlannerOptions.share_pushes`): the push periods and each edge's pushes are what that
    makes of them (`load.ride_split`). Off, each sharing is pushed on its own (§8)."""
    chooses_paths: bool = True
    """The executor chooses per push between applying the deltas and recomputing
    (`smile serve --maintenance auto`), so admission charges each sharing the cheaper
    (`recompute_load`). Off, every push applies its deltas, and that is what is charged."""

    def __post_init__(self) -> None:
        names = [m.name for m in self.machines]
        if not names:
            raise ConfigError("a catalog needs at least one machine")
        if len(set(names)) != len(names):
            raise ConfigError(f"machine names must be unique: {names}")
        for r in self.relations:
            if r.machine not in names:
                raise ConfigError(f"relation {r.name} is on unknown machine {r.machine!r}")

    def machine(self, name: str) -> Machine:
        for m in self.machines:
            if m.name == name:
                return m
        raise PlanError(f"unknown machine {name!r}; machines: {[m.name for m in self.machines]}")

    def relation(self, name: str) -> RelationStats:
        bare = name.rsplit(".", maxsplit=1)[-1] if name.startswith("public.") else name
        for r in self.relations:
            if r.name in (name, bare):
                return r
        raise PlanError(
            f"unknown relation {name!r}; relations: {sorted(r.name for r in self.relations)}"
        )

    def schemas(self) -> dict[str, tuple[tuple[str, str], ...]]:
        """relation → its (column, SQL type) in table order."""
        return {r.name: tuple((c.name, c.type) for c in r.columns) for r in self.relations}

    def ahead(self, horizon_s: float) -> CatalogSnapshot:
        """The relations as they will be `horizon_s` from now at their growth rates: more
        rows, and as many more distinct values in the columns whose values are (nearly) all
        distinct (keys, timestamps); the others keep theirs (a new tweet has an old user).
        A join whose cost grows with a table (`loc ⋈ tweets`: a user who moves meets all
        their tweets) is then charged what it will cost soon, not what it costs now.

        >>> r = RelationStats("t", "m1", 1000.0, 10.0, (ColumnStats("id", n_distinct=1000.0),
        ...     ColumnStats("uid", n_distinct=10.0)), growth_rate=5.0)
        >>> a = CatalogSnapshot((Machine("m1"),), (r,)).ahead(200.0).relations[0]
        >>> a.rows, a.column("id").n_distinct, a.column("uid").n_distinct
        (2000.0, 2000.0, 10.0)
        """
        if horizon_s <= 0:
            return self
        grown = []
        for r in self.relations:
            rows = r.rows + max(0.0, r.growth_rate) * horizon_s
            if rows <= r.rows:
                grown.append(r)
                continue
            cols = tuple(replace(c, n_distinct=c.n_distinct * rows / r.rows)
                         if r.rows > 0 and c.n_distinct >= KEYLIKE * r.rows else c
                         for c in r.columns)
            grown.append(replace(r, rows=rows, columns=cols))
        return replace(self, relations=tuple(grown))

    def growth_note(self, horizon_s: float) -> str:
        """What `ahead(horizon_s)` adds, for a reason: '' when nothing grows."""
        parts = [f"{r.name} +{r.growth_rate * horizon_s:,.0f} rows" for r in self.relations
                 if r.growth_rate * horizon_s >= 1.0]
        return (f"loads with the tables as they will be in {horizon_s:g} s at their measured "
                f"growth ({', '.join(parts)})") if parts else ""

    def used(self, machine: str) -> Usage:
        return dict(self.usage).get(machine, Usage())

    @property
    def box_bound(self) -> float | None:
        """On one box, the operator work all its machines together may carry (the sum of
        their shares); None for machines of their own.

        >>> two = (Machine("m1", cpu_cores=1.0), Machine("m2", cpu_cores=1.0, max_load=0.3))
        >>> CatalogSnapshot(two, ()).box_bound is None
        True
        >>> CatalogSnapshot(two, (), one_box=True).box_bound
        1.0
        """
        return sum(m.cpu_bound for m in self.machines) if self.one_box else None

    def cpu_limit(self, machine: str) -> float:
        """The operator work `machine` may carry: its own bound, or on one box all the box
        leaves operators (the total is held by `box_bound`).

        >>> two = (Machine("m1", cpu_cores=1.0), Machine("m2", cpu_cores=1.0, max_load=0.3))
        >>> CatalogSnapshot(two, ()).cpu_limit("m2")
        0.3
        >>> CatalogSnapshot(two, (), one_box=True).cpu_limit("m2")
        1.0
        """
        box = self.box_bound
        return box if box is not None else self.machine(machine).cpu_bound

    def with_usage(self, extra: dict[str, Usage]) -> CatalogSnapshot:
        """A new snapshot with `extra` added to the machines' used capacity."""
        total = dict(self.usage)
        for m, u in extra.items():
            total[m] = total.get(m, Usage()) + u
        return replace(self, usage=tuple(sorted(total.items())))

    # -- JSON ----------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "machines": [asdict(m) for m in self.machines],
            "relations": [
                {"name": r.name, "machine": r.machine, "rows": r.rows,
                 "update_rate": r.update_rate, "growth_rate": r.growth_rate,
                 "columns": [asdict(c) for c in r.columns]}
                | ({"lost": list(r.lost)} if r.lost else {})
                for r in self.relations
            ],
            "usage": {m: asdict(u) for m, u in self.usage},
        }
        if self.observed:
            doc["observed"] = dict(self.observed)
        if self.skews:
            doc["skews"] = dict(self.skews)
        if self.busy:
            doc["busy"] = dict(self.busy)
        if self.delays:
            doc["delays"] = dict(self.delays)
        if self.one_box:
            doc["one_box"] = True
        if self.shared_pushes:
            doc["shared_pushes"] = True
        if not self.chooses_paths:
            doc["chooses_paths"] = False
        if self.time_model:
            doc["time_model"] = self.time_model
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> CatalogSnapshot:
        try:
            return cls(
                machines=tuple(Machine(**m) for m in doc["machines"]),
                relations=tuple(
                    RelationStats(
                        name=r["name"], machine=r["machine"], rows=float(r["rows"]),
                        update_rate=float(r.get("update_rate", 0.0)),
                        columns=tuple(ColumnStats(**c) for c in r["columns"]),
                        growth_rate=float(r.get("growth_rate", 0.0)),
                        lost=tuple(str(c) for c in r.get("lost", ())),
                    )
                    for r in doc["relations"]
                ),
                usage=tuple(sorted((m, Usage(**u)) for m, u in doc.get("usage", {}).items())),
                time_model=doc.get("time_model"),
                observed=tuple(sorted((str(k), float(v))
                                      for k, v in doc.get("observed", {}).items())),
                skews=tuple(sorted((str(k), float(v)) for k, v in doc.get("skews", {}).items())),
                busy=tuple(sorted((str(k), float(v)) for k, v in doc.get("busy", {}).items())),
                delays=tuple(sorted((str(k), float(v))
                                    for k, v in doc.get("delays", {}).items())),
                one_box=bool(doc.get("one_box", False)),
                shared_pushes=bool(doc.get("shared_pushes", False)),
                chooses_paths=bool(doc.get("chooses_paths", True)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"catalog is malformed: {exc!r} (see docs/catalog.md)") from exc

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2))

    @classmethod
    def load(cls, path: Path) -> CatalogSnapshot:
        try:
            doc = json.loads(path.read_text())
        except OSError as exc:
            raise ConfigError(f"cannot read catalog {path}: {exc.strerror}") from exc
        except ValueError as exc:
            raise ConfigError(f"catalog {path} is not JSON: {exc}") from exc
        return cls.from_json(doc)
