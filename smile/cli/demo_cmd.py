"""`smile demo`: over the REST API, publish the nine relations where they live and submit the
25 sharings of Table 1 with the paper's SLA mix (S1–S7 10 s, S8–S15 40 s, S16–S25 60 s), then
print what was admitted or rejected and why.

Must not: bypass the API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

    from smile.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser("demo", help="publish the nine relations, submit Table 1 over REST")
    demo.add_argument("--api", help="API base URL (default: from the settings)")
    demo.add_argument("--sla", type=float, help="one SLA for all (default: the paper's mix)")
    demo.add_argument("--penalty", type=float, default=0.0001, help="$ per late tuple")
    demo.set_defaults(run=_demo)


def paper_sla(name: str) -> float:
    """§9.3's mix.

    >>> paper_sla("S7"), paper_sla("S8"), paper_sla("S25")
    (10.0, 40.0, 60.0)
    """
    n = int(name[1:])
    return 10.0 if n <= 7 else 40.0 if n <= 15 else 60.0


def _demo(args: argparse.Namespace, settings: Settings) -> int:
    from rich.console import Console
    from rich.table import Table

    from smile.api.client import call
    from smile.dataset.relations import RELATIONS
    from smile.dataset.sharings import table1
    from smile.errors import CloudError
    from smile.topology import resolve_topology
    from smile.workload.driver import locate_relations

    api = args.api or f"http://{settings.api_host}:{settings.api_port}"
    where = locate_relations(resolve_topology(settings))
    try:
        for rel in RELATIONS:
            status, body = call(api, "POST", "/relations",
                                {"machine": where[rel], "table": f"public.{rel}"})
            if status != 201:
                raise CloudError(f"publishing {rel} failed ({status}): {body}")
        table = Table(title="Table 1 over REST")
        for col in ("sharing", "SLA s", "status", "CP s", "why"):
            table.add_column(col)
        for spec in table1():
            sla = args.sla or paper_sla(spec.name)
            status, body = call(api, "POST", "/sharings", {
                "name": spec.name, "sql": spec.sql, "staleness_s": sla,
                "penalty_per_tuple": args.penalty})
            if status == 409:
                table.add_row(spec.name, f"{sla:g}", "already admitted", "", "")
                continue
            cp = f"{body['cp_s']:.3f}" if status == 201 else ""
            why = body.get("reason") or body.get("detail") or ""
            table.add_row(spec.name, f"{sla:g}", str(body.get("status", status)), cp, why)
    except OSError as exc:
        raise CloudError(f"cannot reach the API at {api}: {exc} (is `smile up` running?)") from exc
    Console().print(table)
    print(f"dashboard: {api}/dashboard")
    return 0
