"""`smile experiment NAME [--full | --hour | --minutes M | --rate R] [--out DIR]`: regenerate
one of the paper's figures or tables (`smile.experiments.registry`), writing
NAME.{csv,png,json} into DIR (experiments/results by default), and print its headline JSON.
The one way to run an experiment.

Must not: do the experiment's work itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

    from smile.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from smile.experiments.registry import EXPERIMENTS

    exp = sub.add_parser("experiment", help="regenerate a figure or table of the paper (§9)")
    exp.add_argument("name", metavar="NAME", help=", ".join(EXPERIMENTS))
    exp.add_argument("--full", action="store_true",
                     help="the paper's scale (7M tweets, 6 machines, long runs) instead of "
                          "the small default (≤ 10 minutes on 2 cores)")
    exp.add_argument("--hour", action="store_true",
                     help="longrun only: an hour on this box's 3 machines, all 25 sharings at "
                          "SLA 45 s, at 80%% of the capacity `smile experiment throughput` "
                          "measured (experiments/results/throughput.json)")
    exp.add_argument("--minutes", type=float, default=None, metavar="M",
                     help="longrun only: its default (S1-S10 at SLA 10 s, at 80%% of the "
                          "measured capacity) for M minutes instead of 6, written as "
                          "longrun_Mmin.*")
    exp.add_argument("--rate", type=float, default=None, metavar="R",
                     help="longrun only: R tweets/s instead of 80%% of the measured capacity "
                          "(with or without --hour), written as longrun[_hour|_Mmin]_Rtps.*")
    exp.add_argument("--out", default="experiments/results",
                     help="directory for NAME.{csv,png,json} (default: experiments/results)")
    exp.set_defaults(run=_experiment)


def _experiment(args: argparse.Namespace, settings: Settings) -> int:
    from pathlib import Path

    from smile.cli.out_paths import writable_dir
    from smile.errors import CloudError, ConfigError
    from smile.experiments.context import HOUR_ONLY, Context
    from smile.experiments.registry import experiment
    from smile.harness.output import finite, print_json

    e = experiment(args.name)
    if args.hour and args.full:
        raise ConfigError("--hour and --full are two scales: give one")
    if args.hour and e.name not in HOUR_ONLY:
        raise ConfigError(f"--hour is a scale of {', '.join(HOUR_ONLY)} only, not {e.name}")
    if args.minutes is not None and e.name not in HOUR_ONLY:
        raise ConfigError(f"--minutes is a length of {', '.join(HOUR_ONLY)} only, not {e.name}")
    if args.rate is not None and e.name not in HOUR_ONLY:
        raise ConfigError(f"--rate is a rate of {', '.join(HOUR_ONLY)} only, not {e.name}")
    scale = "full" if args.full else "hour" if args.hour else "small"
    writable_dir(Path(args.out))  # before the run, not after its minutes of traffic
    ctx = Context(settings, scale, Path(args.out), args.minutes, args.rate)
    try:
        doc = e.run(ctx)
    except OSError as exc:
        if exc.filename is not None:  # a file of ours, not the API or a machine
            raise ConfigError(f"{args.name}: cannot write {exc.filename}: "
                              f"{exc.strerror or exc}") from exc
        raise CloudError(f"{args.name}: the cloud stopped answering ({exc}); is `smile up` "
                         "still running?") from exc
    print_json(finite(doc), ascii_only=False)
    names = [ctx.run_name(n) for n in e.writes]
    written = [str(Path(args.out) / f"{n}.{s}") for n in names for s in ("csv", "png", "json")]
    print("wrote " + ", ".join(written))
    return 0
