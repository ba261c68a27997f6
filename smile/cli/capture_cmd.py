"""`smile capture publish|unpublish|run|status`: delta capture from the command line.

`run` composes the capture process: per machine a capturer (`smile.delta_capture`) with its
housekeeping beside it (`smile.housekeeping.capture`: retention of ΔR, advance of R̂).

Must not: decode or apply changes itself (`smile.delta_capture` does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from smile.cli.arg_types import not_negative

if TYPE_CHECKING:
    import argparse

    from smile.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cap = sub.add_parser("capture", help="delta capture: publish relations, run capturers")
    csub = cap.add_subparsers(dest="capture_command", required=True, metavar="ACTION")
    pub = csub.add_parser("publish", help="publish a base relation for capture")
    pub.add_argument("--machine", required=True)
    pub.add_argument("--table", required=True, help="schema.table")
    pub.set_defaults(run=_publish)
    unpub = csub.add_parser("unpublish", help="withdraw a relation from capture")
    unpub.add_argument("--machine", required=True)
    unpub.add_argument("--table", required=True, help="schema.table")
    unpub.set_defaults(run=_unpublish)
    run = csub.add_parser("run", help="run the capturers (foreground; Ctrl-C stops)")
    run.add_argument("--machine", action="append", help="machine name (repeat; default all)")
    run.add_argument("--shadow-every", type=not_negative, default=10.0,
                     help="seconds between advancing shadow copies (0: never; default 10)")
    run.set_defaults(run=_run)
    st = csub.add_parser("status", help="watermark, lag (seconds, transactions, WAL bytes), "
                         "rows and errors per relation")
    st.add_argument("--json", action="store_true")
    st.set_defaults(run=_status)


def _publish(args: argparse.Namespace, settings: Settings) -> int:
    from rich.console import Console

    from smile.delta_capture.publish import publish_relation
    from smile.deploy.machines import live_topology

    machine = live_topology(settings).machine(args.machine)
    rel = publish_relation(machine.dsn, args.table)
    Console().print(f"{rel.qualified} on {machine.name}: {rel.state} from "
                    f"{rel.start_ts.isoformat() if rel.start_ts else '?'}")
    return 0


def _unpublish(args: argparse.Namespace, settings: Settings) -> int:
    from rich.console import Console

    from smile.delta_capture.publish import unpublish_relation
    from smile.deploy.machines import live_topology

    machine = live_topology(settings).machine(args.machine)
    done = unpublish_relation(machine.dsn, args.table)
    outcome = "withdrawn" if done else "not published"
    Console().print(f"{args.table} on {machine.name}: {outcome}")
    return 0 if done else 1


def _run(args: argparse.Namespace, settings: Settings) -> int:
    import logging
    import signal
    import threading

    from smile.delta_capture.capturer import Capturer
    from smile.deploy.machines import live_topology
    from smile.housekeeping.capture import Housekeeping, run_beside

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    topology = live_topology(settings)
    names = args.machine or [m.name for m in topology.machines]
    keep = Housekeeping(shadow_s=args.shadow_every)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threads = [
        threading.Thread(target=run_beside, args=(Capturer(topology.machine(n).dsn), stop, keep),
                         name=f"capture-{n}", daemon=True)
        for n in names
    ]
    for t in threads:
        t.start()
    try:
        while any(t.is_alive() for t in threads) and not stop.is_set():
            stop.wait(0.5)
    except KeyboardInterrupt:
        pass
    stop.set()
    for t in threads:
        t.join(timeout=10)
    return 0


def _status(args: argparse.Namespace, settings: Settings) -> int:
    import json

    from rich.console import Console
    from rich.table import Table

    from smile.delta_capture.status import RelationStatus, SlotStatus, capture_status
    from smile.deploy.machines import live_topology

    rels: list[RelationStatus] = []
    slots: list[SlotStatus] = []
    for m in live_topology(settings).machines:
        found, slot = capture_status(m.name, m.dsn)
        rels.extend(found)
        if slot:
            slots.append(slot)
    if args.json:
        print(json.dumps({
            "relations": [r.to_json() for r in rels],
            "slots": [s.__dict__ for s in slots],
        }, indent=2))
        return 0
    table = Table(title="delta capture")
    for col in ("machine", "relation", "state", "watermark", "lag s", "lag txns", "lag bytes",
                "rows", "error or last re-sync"):
        table.add_column(col)
    for r in rels:
        table.add_row(
            r.machine, r.relation, r.state,
            r.watermark.strftime("%H:%M:%S.%f")[:-3] if r.watermark else "-",
            f"{r.lag_s:.2f}" if r.lag_s is not None else "-",
            f"{r.lag_txns:,}" if r.lag_txns is not None else "-",
            f"{r.lag_bytes:,}" if r.lag_bytes is not None else "-",
            f"{r.rows_captured:,}", r.error or (
                f"re-synchronised at {r.resynced_at:%H:%M:%S}" if r.resynced_at else ""),
        )
    Console().print(table)
    for s in slots:
        Console().print(f"{s.machine}: slot {s.slot} active={s.active} wal={s.wal_status} "
                        f"retains {s.retained_wal_bytes:,} bytes of WAL")
    return 0
