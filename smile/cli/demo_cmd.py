"""`smile demo`: over the REST API, publish the nine relations where they live and submit the
25 sharings of Table 1 with the paper's SLA mix (S1–S7 10 s, S8–S15 40 s, S16–S25 60 s) and
the eight beyond SPJ (counts, DISTINCT, HAVING, an outer join: `dataset.sharings.BEYOND`), then
print what was admitted or rejected and why. With `--rate`, live traffic starts first (for
`--warmup` seconds before the first submission), so admission sees the change rates the
sharings will see, and goes on for `--duration` seconds in all.

Must not: bypass the API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from smile.cli.arg_types import not_negative, positive
from smile.executor.steady import WINDOW_S

if TYPE_CHECKING:
    import argparse

    from rich.console import Console

    from smile.api.client import Client
    from smile.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser("demo", help="publish the nine relations, submit Table 1 over REST")
    demo.add_argument("--api", help="API base URL (default: from the settings)")
    demo.add_argument("--token", help="an admin's token (default: <state_dir>/admin.token)")
    demo.add_argument("--sla", type=positive, help="one SLA for all (default: the paper's mix)")
    demo.add_argument("--penalty", type=not_negative, default=0.0001, help="$ per late tuple")
    demo.add_argument("--rate", type=not_negative, default=0.0,
                      help="tweets/s of live traffic, started before submitting (default: none)")
    demo.add_argument("--duration", type=not_negative, default=0.0,
                      help="seconds of that traffic in all (default: until all are submitted)")
    demo.add_argument("--warmup", type=not_negative, default=WINDOW_S,
                      help="seconds of traffic before the first submission (default "
                           f"{WINDOW_S:g}: the window over which admission measures the box's "
                           "idle cores and load, which should hold traffic, not a data load)")
    demo.add_argument("--json", action="store_true",
                      help='print {"sharings": [{"name", "status", "reason", "cp_s"}…]} only')
    demo.set_defaults(run=_demo)


def _demo(args: argparse.Namespace, settings: Settings) -> int:
    import time

    from rich.console import Console

    from smile.api.client import Client
    from smile.dataset.sharings import beyond_spj, table1
    from smile.errors import CloudError
    from smile.executor.consumers import admin_token
    from smile.harness.traffic import Traffic
    from smile.topology import resolve_topology
    from smile.workload.driver import locate_relations

    url = args.api or f"http://{settings.api_host}:{settings.api_port}"
    api = Client(url, args.token or admin_token(settings.state_dir))
    topology = resolve_topology(settings)
    where = locate_relations(topology)
    console = Console(stderr=True)
    traffic: Traffic | None = None
    started = time.monotonic()
    try:
        _publish(api, where)
        if args.rate > 0:
            # long enough to cover the submissions (~4 s each), unless told otherwise
            seconds = args.duration or args.warmup + 4 * (len(table1()) + len(beyond_spj())) + 60
            traffic = Traffic(topology).start(args.rate, seconds)
            console.print(f"traffic at {args.rate:g} tweets/s; submitting in {args.warmup:g} s "
                          "(admission uses the rates it measures)")
            time.sleep(args.warmup)
        results = _submit(api, args, console)
    except OSError as exc:
        raise CloudError(f"cannot reach the API at {url}: {exc} (is `smile up` running?)") from exc
    _show(results, args, url, settings)
    if traffic is not None:
        left = max(0.0, (args.duration or 0) - (time.monotonic() - started))
        if left > 0:
            console.print(f"traffic goes on for {left:.0f} s more (the dashboard shows it)")
        traffic.join()
        traffic.check()
    return 0


def _publish(api: Client, where: dict[str, str]) -> None:
    """The nine relations published where they live."""
    from smile.dataset.relations import RELATIONS
    from smile.errors import CloudError

    for rel in RELATIONS:
        status, body = api.call("POST", "/relations",
                                {"machine": where[rel], "table": f"public.{rel}"})
        if status != 201:
            raise CloudError(f"publishing {rel} failed ({status}): {body}")


def _submit(api: Client, args: argparse.Namespace, console: Console) -> list[dict[str, Any]]:
    """Table 1, then the sharings beyond SPJ, submitted at the SLA asked for (else the
    paper's mix): what became of each."""
    from smile.dataset.sharings import beyond_spj, paper_sla, table1

    results: list[dict[str, Any]] = []
    for spec in (*table1(), *beyond_spj()):
        sla = args.sla or paper_sla(spec.name)
        status, body = api.call("POST", "/sharings", {
            "name": spec.name, "sql": spec.sql, "staleness_s": sla,
            "penalty_per_tuple": args.penalty})
        if status == 409:
            results.append({"name": spec.name, "sla_s": sla, "status": "already admitted",
                            "reason": body.get("detail", ""), "cp_s": None})
            continue
        results.append({"name": spec.name, "sla_s": sla,
                        "status": str(body.get("status", status)),
                        "reason": body.get("reason") or body.get("detail") or "",
                        "cp_s": body.get("cp_s") if status == 201 else None})
        if not args.json:
            console.print(f"{spec.name}: {results[-1]['status']}")
    return results


def _show(results: list[dict[str, Any]], args: argparse.Namespace, url: str,
          settings: Settings) -> None:
    """The decisions as JSON (`--json`) or as a table, and where the dashboard is."""
    from rich.console import Console
    from rich.table import Table

    from smile.harness.output import print_json

    admitted = sum(r["status"] == "admitted" for r in results)
    if args.json:
        print_json({"sharings": results, "admitted": admitted,
                    "rejected": len(results) - admitted, "rate": args.rate})
        return
    table = Table(title=f"Table 1 over REST: {admitted} of {len(results)} admitted")
    for col in ("sharing", "SLA s", "status", "CP s", "why"):
        table.add_column(col)
    for r in results:
        cp = f"{r['cp_s']:.3f}" if r["cp_s"] is not None else ""
        table.add_row(r["name"], f"{r['sla_s']:g}", r["status"], cp, r["reason"])
    Console().print(table)
    print(f"dashboard: {url}/dashboard (the admin's token: "
          f"{settings.state_dir / 'admin.token'})")
