"""`smile cloud up|status|down`: start, inspect and stop the local cloud.

Must not: start or stop a service itself (`smile.cloud` does).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from smile.cloud.local import CloudStatus, LocalCloud

if TYPE_CHECKING:
    from smile.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cloud = sub.add_parser("cloud", help="the local cloud: PostgreSQL machines, catalog, broker")
    csub = cloud.add_subparsers(dest="cloud_command", required=True, metavar="ACTION")
    up = csub.add_parser("up", help="start (or report) the local cloud; idempotent")
    up.add_argument("--machines", type=int, default=3, help="number of machines (default 3)")
    up.add_argument("--state-dir", default=argparse.SUPPRESS, help="where data and logs live")
    up.add_argument("--json", action="store_true", help="print the status as JSON")
    up.add_argument("--no-daemons", action="store_true",
                    help="do not start a capturer and an agent per machine")
    up.set_defaults(run=_up)
    st = csub.add_parser("status", help="report every service of the local cloud")
    st.add_argument("--state-dir", default=argparse.SUPPRESS, help="where data and logs live")
    st.add_argument("--json", action="store_true", help="print JSON")
    st.set_defaults(run=_status)
    down = csub.add_parser("down", help="stop everything the local cloud started")
    down.add_argument("--state-dir", default=argparse.SUPPRESS, help="where data and logs live")
    down.add_argument("--purge", action="store_true", help="also delete all data and logs")
    down.set_defaults(run=_down)


def print_status(status: CloudStatus, as_json: bool) -> None:
    if as_json:
        print(json.dumps(status.to_json(), indent=2))
        return
    table = Table(title=f"SMILE local cloud ({status.state_dir})")
    for col in ("service", "endpoint or state", "pid", "healthy", "restarts", "last exit"):
        table.add_column(col)
    services = [status.catalog, *status.machines, status.broker, *status.daemons]
    daemons = {d.name for d in status.daemons}
    for s in services:
        if s is not None:
            endpoint = s.url.split("@", 1)[-1] if s.url.startswith("postgresql") else s.url
            mark = "[green]yes[/]" if s.healthy else "[red]no[/]"
            supervised = s.name in daemons
            table.add_row(s.name, endpoint, str(s.pid or "-"), mark,
                          str(s.restarts) if supervised else "-",
                          (s.last_exit or "-") if supervised else "-")
    Console().print(table)


def _up(args: argparse.Namespace, settings: Settings) -> int:
    cloud = LocalCloud(settings)
    before = cloud.status()
    started = time.monotonic()
    status = cloud.up(args.machines, daemons=not args.no_daemons)
    elapsed = time.monotonic() - started
    if not args.json:
        running = "already running" if before.healthy and before.machines else "started"
        Console().print(f"local cloud {running} in {elapsed:.1f}s")
    print_status(status, args.json)
    return 0 if status.healthy else 1


def _status(args: argparse.Namespace, settings: Settings) -> int:
    status = LocalCloud(settings).status()
    print_status(status, args.json)
    return 0 if status.healthy else 1


def _down(args: argparse.Namespace, settings: Settings) -> int:
    LocalCloud(settings).down(purge=args.purge)
    Console().print("local cloud stopped" + (" and purged" if args.purge else ""))
    return 0
