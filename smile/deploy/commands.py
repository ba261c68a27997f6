"""What one agent does, on its own machine, for the executor's Install and Withdraw commands
(the plan versions come from the catalog; see `protocol.py`). Every step is idempotent: a
command repeated after a crash or a lost answer does the same again harmlessly.

- lease: a reader `lease:<version>` at the epoch on every delta of the machine (capture's and
  the plan's), so retention keeps every delta row while new vertices are filled as of t0 and
  re-routed ones start reading where they are (released by the Withdraw that ends the
  install);
- fill: create and fill the machine's new vertices at t0 (`install.install_vertices`),
  register the delta readers of new (at t0) and re-routed (at the epoch, until their first
  copy) vertices on the deltas this machine holds, index what joins probe here, create the
  views of new sharings whose MV is here;
- withdraw: drop the machine's vertices and views the version no longer has, their TS, mirrors
  and readers here, and release the install's leases;
- retention of the plan's deltas here (`prune_intermediates`, from the agent's own loop), and
  re-registering the running plan's readers when an agent starts (`reconcile_readers`).

Must not: decide what to install (the executor's commands say) or touch other machines'
tables (readers of this machine's deltas are this agent's to write).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from smile.delta_capture.registry import ensure_capture_schema, load_relations
from smile.deploy.install import (
    HOLD_ALL,
    create_view,
    drop_view,
    index_join_keys,
    install_vertices,
    materialize,
    reader_pairs,
    register_readers,
    uninstall_plan,
    unregister_readers,
)
from smile.deploy.physical import physical_name
from smile.deploy.recompute import recompute_stale
from smile.deploy.unlogged import relog_deltas
from smile.operators import retention, vertex_ts

if TYPE_CHECKING:
    import psycopg

    from smile.deploy.physical import PhysicalPlan
    from smile.deploy.spark_jobs import SparkJoins
    from smile.messaging.protocol import Install, Withdraw


def lease_key(version: int) -> str:
    return f"lease:{version}"


def lease(conn: psycopg.Connection[Any], version: int) -> int:
    """Hold back retention of every delta on this machine (capture's and the plan's), releasing
    any lease an earlier install left; returns how many deltas it holds. Serialised with
    retention: once this commits, nothing more is pruned here until the lease is released,
    and `retention.pruned` is final."""
    ensure_capture_schema(conn)
    # installs are one at a time (the deploy lock): an older lease is one whose deploy
    # failed before it could release it, and would hold every delta here for good
    release(conn, versions_below=version)
    key = lease_key(version)
    with conn.transaction():
        retention.serialise(conn)
        deltas = {r.delta_vertex for r in load_relations(conn).values()}
        deltas |= {d for (d,) in conn.execute(
            "SELECT DISTINCT delta_vertex FROM _smile.delta_readers").fetchall()}
        vertex_ts.put(conn, {key: HOLD_ALL})
        for d in sorted(deltas):
            conn.execute("INSERT INTO _smile.delta_readers VALUES (%s, %s) ON CONFLICT "
                         "DO NOTHING", (d, key))
    return len(deltas)


def prune_intermediates(conn: psycopg.Connection[Any]) -> int:
    """Retention of the plan's deltas on this machine (capture prunes its own ΔR); returns the
    rows deleted. A delta is known by its readers: one with none keeps every row."""
    base = {r.delta_vertex for r in load_relations(conn).values()}
    return retention.prune_due(conn, {
        delta: ("_smile", physical_name(delta)) for (delta,) in conn.execute(
            "SELECT DISTINCT delta_vertex FROM _smile.delta_readers").fetchall()
        if delta not in base})


def reconcile_readers(conns: dict[str, psycopg.Connection[Any]], machine: str,
                      phys: PhysicalPlan) -> None:
    """Register again every reader the running plan has of this machine's deltas (idempotent;
    existing mirrors keep their TS): a delta pruned by its registered readers alone must
    know them all, whatever an earlier SMILE registered."""
    register_readers(conns, phys, phys.edges, None, machine, keep_mirrors=True)


def release(conn: psycopg.Connection[Any], versions_below: int | None = None,
            version: int | None = None) -> None:
    """Release one install's leases, or every lease older than `versions_below` (what a
    crashed deploy left)."""
    ensure_capture_schema(conn)
    if version is not None:
        keys = [lease_key(version)]
    else:
        keys = [k for k in vertex_ts.keys_like(conn, "lease:%")
                if versions_below is None or int(k.split(":", 1)[1]) < versions_below]
    with conn.transaction():
        conn.execute("DELETE FROM _smile.delta_readers WHERE reader_vertex = ANY(%s)", (keys,))
        vertex_ts.delete(conn, keys)


def fill(conns: dict[str, psycopg.Connection[Any]], machine: str, phys: PhysicalPlan,
         cmd: Install, spark: SparkJoins | None = None) -> str:
    """Install this machine's part of version `cmd.version`; says what it did."""
    assert cmd.t0 is not None, "a fill needs its t0"
    new, rerouted = set(cmd.vertices), set(cmd.rerouted)
    mine = [v for v in phys.vertices if v.label in new and v.machine == machine]
    relog_deltas(conns[machine], phys, machine)  # before a new reader's rows go in
    install_vertices(conns, phys, mine, cmd.t0, spark)
    register_readers(conns, phys, [e for e in phys.edges if e.dst.label in new], cmd.t0,
                     machine)
    register_readers(conns, phys, [e for e in phys.edges if e.dst.label in rerouted], None,
                     machine)
    # a Union's view re-routed to another edge becomes a table of its own: its readers, which
    # retention knew through the view's inputs, now read it
    turned = set()
    for v in phys.vertices:
        if v.label in rerouted and v.machine == machine and not phys.vertices[v].virtual \
                and materialize(conns[machine], phys.vertices[v]):
            turned.add(v)
    register_readers(conns, phys, [e for e in phys.edges if set(e.sources) & turned], None,
                     machine, keep_mirrors=True)
    index_join_keys(conns, phys, [machine])
    views = [s for s in phys.views if s.name in cmd.views and s.mv.machine == machine]
    for entry in views:
        recompute_stale(conns, phys, [entry.mv])  # an existing relation a push left stale
        create_view(conns[machine], phys, entry)
    return f"{len(mine)} vertices, {len(views)} views"


def withdraw(conns: dict[str, psycopg.Connection[Any]], machine: str,
             previous: PhysicalPlan | None, cmd: Withdraw,
             current: PhysicalPlan | None = None) -> str:
    """Drop what the active version (`current`) no longer has on this machine — vertices,
    views, and the readers of this machine's deltas that only `previous` had (a re-routed
    vertex's old source) — and release leases."""
    dropped = 0
    if previous is not None:
        gone = [v for v in previous.vertices if v.label in set(cmd.vertices)]
        for name in cmd.views:
            entry = next((s for s in previous.views if s.name == name), None)
            if entry is not None and entry.mv.machine == machine:
                drop_view(conns[machine], name)
        uninstall_plan({machine: conns[machine]}, previous, gone)
        dropped = sum(v.machine == machine for v in gone)
        if current is not None and current is not previous:
            unregister_readers(conns[machine], reader_pairs(previous, machine)
                               - reader_pairs(current, machine))
    if cmd.lease is not None:
        release(conns[machine], version=cmd.lease)
    return f"{dropped} vertices dropped"
