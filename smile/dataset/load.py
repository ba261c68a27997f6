"""Load the dataset: generate raw events, unpack them on Spark, write each relation over JDBC to
the machine its placement names, then ANALYZE and count.

Relations that already hold rows are left alone and the load refused, unless `replace` empties
them first: a load never silently mixes two datasets. Nor does it empty a relation that admitted
sharings read: their MVs would silently stop matching their queries.

Must not: decide placement (that is `placement.py`) or the shape of events (`generate.py`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from smile.dataset.generate import write_raw_events
from smile.dataset.relations import RELATIONS, ddl
from smile.dataset.unpack import read_raw_events, unpack
from smile.db import connect, jdbc_target
from smile.errors import DatasetError
from smile.spark import spark_session

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from smile.settings import Settings
    from smile.topology import Topology

    Forget = Callable[[str, str], object]
    """Told (machine, table) of each published relation a replacing load dropped."""


@dataclass(frozen=True)
class RelationCount:
    relation: str
    machine: str
    rows: int


@dataclass(frozen=True)
class LoadReport:
    tweets: int
    seconds: float
    relations: tuple[RelationCount, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "tweets": self.tweets,
            "seconds": round(self.seconds, 3),
            "relations": [
                {"relation": r.relation, "machine": r.machine, "rows": r.rows}
                for r in self.relations
            ],
        }


def readers(catalog_dsn: str) -> dict[str, list[str]]:
    """Relation → the admitted sharings that read it (nothing before the first sharing)."""
    from smile.deploy.plan_store import load_active

    active = load_active(catalog_dsn)
    out: dict[str, set[str]] = {}
    if active is not None:
        for v, names in active[1].plan.shr.items():
            for part in v.expr.parts:
                out.setdefault(part.relation, set()).update(names)
    return {rel: sorted(names) for rel, names in out.items()}


def create_relations(topology: Topology, placement: Mapping[str, str], *, replace: bool,
                     forget: Forget | None = None) -> None:
    """Create each relation on its machine; refuse (or, with `replace`, empty) non-empty ones.
    With `replace`, a relation found on another machine is dropped there (and `forget` told
    of it, to take it out of the catalog's published relations)."""
    if replace:
        read = {rel: names for rel, names in readers(topology.catalog_dsn).items()
                if rel in RELATIONS}
        if read:
            raise DatasetError(
                "cannot replace relations that admitted sharings read: "
                + "; ".join(f"{rel} by {', '.join(names)}" for rel, names in sorted(read.items()))
                + "; withdraw them first (or start over with `smile down --purge`)")
        _drop_elsewhere(topology, placement, forget)
    full: list[str] = []
    for rel in RELATIONS:
        machine = topology.machine(placement[rel])
        with connect(machine.dsn, what=machine.name) as conn:
            try:
                conn.execute(ddl(rel))
                table = sql.Identifier("public", rel)
                has_rows = conn.execute(
                    sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(table)
                ).fetchone()
                if has_rows and has_rows[0]:
                    if replace:
                        conn.execute(sql.SQL("TRUNCATE {}").format(table))
                    else:
                        full.append(f"{rel}@{machine.name}")
            except psycopg.Error as exc:
                raise DatasetError(f"cannot prepare {rel} on {machine.name}: {exc}",
                                   sqlstate=exc.sqlstate) from exc
    if full:
        raise DatasetError(
            f"relations already hold rows: {', '.join(full)}; pass --replace to empty them first"
        )


def count_rows(topology: Topology, placement: Mapping[str, str]) -> tuple[RelationCount, ...]:
    counts = []
    for rel in RELATIONS:
        machine = topology.machine(placement[rel])
        with connect(machine.dsn, autocommit=True, what=machine.name) as conn:
            table = sql.Identifier("public", rel)
            conn.execute(sql.SQL("ANALYZE {}").format(table))
            row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()
            counts.append(RelationCount(rel, machine.name, int(row[0]) if row else 0))
    return tuple(counts)


def _drop_elsewhere(topology: Topology, placement: Mapping[str, str],
                    forget: Forget | None) -> None:
    """Drop each relation from the machines other than its placement (a replaced dataset
    placed anew: a relation on two machines would be ambiguous), its capture with it, and
    tell `forget` (machine, table) of each."""
    from smile.delta_capture.publish import unpublish_relation

    for machine in topology.machines:
        elsewhere = [rel for rel in RELATIONS if placement[rel] != machine.name]
        with connect(machine.dsn, autocommit=True, what=machine.name) as conn:
            here = [rel for rel in elsewhere if conn.execute(
                "SELECT to_regclass(%s)", (f"public.{rel}",)).fetchone() != (None,)]
            for rel in here:
                unpublish_relation(machine.dsn, f"public.{rel}")
                if forget is not None:
                    forget(machine.name, f"public.{rel}")
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(
                    sql.Identifier("public", rel)))


def load_dataset(
    settings: Settings,
    topology: Topology,
    placement: Mapping[str, str],
    *,
    tweets: int,
    seed: int = 7,
    replace: bool = False,
    forget: Forget | None = None,
) -> LoadReport:
    if tweets < 1:
        raise DatasetError("--tweets must be at least 1")
    started = time.monotonic()
    create_relations(topology, placement, replace=replace, forget=forget)
    spark = spark_session(settings)
    raw_dir = settings.state_dir / "dataset" / f"raw-{tweets}-{seed}"
    if not (raw_dir / "_SUCCESS").exists():
        raw_dir.parent.mkdir(parents=True, exist_ok=True)
        write_raw_events(spark, tweets, seed, str(raw_dir))
    frames = unpack(read_raw_events(spark, str(raw_dir)))
    for rel in RELATIONS:
        machine = topology.machine(placement[rel])
        url, props = jdbc_target(machine.dsn)
        try:
            frames[rel].write.jdbc(
                url, f"public.{rel}", mode="append", properties=props | {"batchsize": "10000"}
            )
        except Exception as exc:  # Py4J wraps the JDBC error; keep its first line
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise DatasetError(
                f"writing {rel} to {machine.name} failed: {first}; "
                "the load is partial, rerun with --replace"
            ) from exc
    return LoadReport(tweets, time.monotonic() - started, count_rows(topology, placement))
