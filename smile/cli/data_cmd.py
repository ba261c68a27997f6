"""`smile data load`: generate raw tweet events, unpack them on Spark, load the nine relations.

Must not: generate or load data itself (`smile.dataset` does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

    from smile.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    data = sub.add_parser("data", help="the evaluation dataset (paper §9.1)")
    dsub = data.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    load = dsub.add_parser("load", help="generate, unpack on Spark and load the nine relations")
    load.add_argument("--tweets", type=int, required=True, help="number of tweets to generate")
    load.add_argument("--placement", help="JSON file {relation: machine}; default round-robin")
    load.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    load.add_argument(
        "--replace", action="store_true", help="empty the relations first if they hold rows"
    )
    load.add_argument("--json", action="store_true", help="print the counts as JSON")
    load.set_defaults(run=_load)


def _load(args: argparse.Namespace, settings: Settings) -> int:
    import json

    from rich.console import Console
    from rich.table import Table

    from smile.dataset.load import load_dataset
    from smile.dataset.placement import read_placement
    from smile.executor.store import CatalogStore
    from smile.topology import resolve_topology

    topology = resolve_topology(settings)
    placement = read_placement(args.placement, topology)

    def forget(machine: str, table: str) -> None:  # a relation a --replace dropped
        store = CatalogStore(topology.catalog_dsn)
        try:
            store.remove_relation(machine, table)
        finally:
            store.close()

    report = load_dataset(settings, topology, placement, tweets=args.tweets, seed=args.seed,
                          replace=args.replace, forget=forget)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
        return 0
    table = Table(title=f"loaded {args.tweets} tweets in {report.seconds:.1f}s")
    for col in ("relation", "machine", "rows", "rows/tweet"):
        table.add_column(col, justify="right" if col != "relation" else "left")
    for rel in report.relations:
        table.add_row(rel.relation, rel.machine, f"{rel.rows:,}", f"{rel.rows / args.tweets:.3f}")
    Console().print(table)
    return 0
