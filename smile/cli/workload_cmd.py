"""`smile workload run`: tweet-rate-driven INSERT/UPDATE/DELETE traffic with a progress bar.

Must not: write changes itself (`smile.workload.driver` does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from smile.cli.arg_types import positive

if TYPE_CHECKING:
    import argparse

    from smile.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    wl = sub.add_parser("workload", help="live traffic into the base relations")
    wsub = wl.add_subparsers(dest="workload_command", required=True, metavar="ACTION")
    run = wsub.add_parser("run", help="write tweets at a rate for a duration")
    run.add_argument("--rate", type=positive, required=True, help="tweets per second")
    run.add_argument("--duration", type=positive, required=True, help="seconds")
    run.add_argument("--seed", type=int, default=11, help="random seed (default 11)")
    run.add_argument("--json", action="store_true", help="print the report as JSON")
    run.set_defaults(run=_run)


def _run(args: argparse.Namespace, settings: Settings) -> int:
    import json

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from smile.topology import resolve_topology
    from smile.workload.driver import WorkloadDriver

    driver = WorkloadDriver(resolve_topology(settings), seed=args.seed)
    total = int(args.rate * args.duration)
    console = Console(stderr=True)
    with Progress(
        TextColumn("tweets"), BarColumn(), TextColumn("{task.completed:,.0f}/{task.total:,.0f}"),
        TextColumn("{task.fields[rate]:,.0f}/s"), TimeElapsedColumn(),
        console=console, transient=args.json,
    ) as bar:
        task = bar.add_task("tweets", total=total, rate=0.0)

        def update(done: int, elapsed: float) -> None:
            bar.update(task, completed=done, rate=done / elapsed if elapsed > 0 else 0.0)

        report = driver.run(args.rate, args.duration, progress=update)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        out = Console()
        out.print(f"wrote {report.tweets:,} tweets in {report.elapsed_s:.1f}s: "
                  f"achieved {report.achieved_rate:,.0f} tweets/s (target {args.rate:,.0f}/s)")
        out.print("changes: " + ", ".join(f"{k} {v:,}" for k, v in sorted(report.changes.items())))
        if not report.reached:
            out.print(f"[red]could not reach 95% of the target rate[/] "
                      f"({report.achieved_rate / args.rate:.0%}); the machines are the limit")
    return 0 if report.reached else 1
