"""`smile bench …`: benchmarks that print one JSON object each.

Must not: measure anything itself (`smile.bench` does); it checks options and prints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from smile.cli.arg_types import count, not_negative, positive, share
from smile.executor.steady import WINDOW_S

PUSH_QUERIES = ("join", "aggregate", "join_aggregate", "extremes", "outer")
"""`smile bench push --query`: the names of `smile.bench.push.QUERIES` (not imported here, so
that the command line starts without the benchmarks)."""

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from smile.deploy.unlogged import Persistence
    from smile.settings import Settings


def _benchmark(bsub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, what: str,
               run: Callable[[argparse.Namespace, Settings], int]) -> argparse.ArgumentParser:
    """The subcommand `name`, run by `run`."""
    parser = bsub.add_parser(name, help=what)
    parser.set_defaults(run=run)
    return parser


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = sub.add_parser("bench", help="benchmarks (JSON figures against same-run baselines)")
    bsub = bench.add_subparsers(dest="bench_command", required=True, metavar="BENCHMARK")
    cap = _benchmark(bsub, "capture", "capture throughput vs pg_recvlogical and bulk insert",
                     _capture)
    cap.add_argument("--rows", type=count, default=200_000)
    cap.add_argument("--repeat", type=count, default=None,
                     help="rounds (default 3, with --oltp 2 of each way)")
    cap.add_argument("--machine", help="machine to run on (default: the first)")
    cap.add_argument("--oltp", action="store_true",
                     help="single-row transactions from pgbench: no capture, pg_recvlogical, "
                          "SMILE's capture (tps, CPU per transaction, drain)")
    cap.add_argument("--seconds", type=positive, default=20.0, help="with --oltp: load length")
    cap.add_argument("--clients", type=count, default=2, help="with --oltp: pgbench clients")
    opt = bsub.add_parser("optimizer", help="admission latency and DPD's gap to the optimum")
    opt.add_argument("--rounds", type=count, default=50)
    opt.add_argument("--gap-instances", type=count, default=40)
    opt.add_argument("--json", action="store_true", help="print JSON only (the default output)")
    opt.set_defaults(run=_optimizer)
    scale = _benchmark(bsub, "admission-scale", "admission time as the global plan grows "
                       "(Table 1 copied), beside the reference algorithm", _admission_scale)
    scale.add_argument("--machines", type=count, default=12)
    scale.add_argument("--sharings", type=_counts, default=(25, 100, 400),
                       help="sizes to report at, comma-separated (the largest is admitted)")
    scale.add_argument("--sla", type=positive, default=45.0, help="every sharing's, seconds")
    scale.add_argument("--rate", type=positive, default=1000.0, help="tweets/s")
    scale.add_argument("--no-reference", action="store_true",
                       help="skip the reference algorithm (no ratios; tens of minutes less)")
    scale.add_argument("--json", action="store_true", help="print JSON only (the default output)")
    push = _benchmark(bsub, "push", "incremental push vs REFRESH MATERIALIZED VIEW", _push)
    push.add_argument("--rows", type=count, default=1_000_000)
    push.add_argument("--fraction", type=share, default=0.01)
    push.add_argument("--fractions", type=_shares, default=None,
                      help="comma-separated fractions: per fraction, the incremental and the "
                           "recompute path forced and the path the time model chooses, each "
                           "against REFRESH (JSON `rounds`)")
    push.add_argument("--query", choices=PUSH_QUERIES, default="join",
                      help="the 3-way join; a count and sum GROUP BY over one relation, or "
                           "over a join; min and max over a join; or a LEFT JOIN")
    push.add_argument("--shape", choices=("optimizer", "in-place"), default="optimizer",
                      help="the optimizer's plan, or every join in place (no copies of bases)")
    push.add_argument("--repeat", type=count, default=1,
                      help="rounds of change, push and refresh on the same plan (medians)")
    push.add_argument("--one-transaction", action="store_true",
                      help="advance consecutive vertices of one machine in one transaction "
                           "(with --in-order)")
    push.add_argument("--in-order", action="store_true",
                      help="push one vertex after another in the plan's order, instead of as "
                           "the executor does: each vertex once its inputs are there, up to "
                           "the agents' push workers at once")
    push.add_argument("--roll-forward", choices=("yes", "no", "both"), default="yes",
                      help="each join starts once its deltas are there and rolls the relation "
                           "it probes forward, as the executor runs it (yes); waits for that "
                           "relation's DeltaToRel (no); or rounds alternating between the two, "
                           "with their ratio (both)")
    push.add_argument("--unions", choices=("view", "copy", "both"), default="view",
                      help="a Union's delta as a view over its inputs (as plans run), a table "
                           "it copies into (the paper's), or both in turn with their ratio")
    push.add_argument("--relations", choices=("unlogged", "logged", "both", "deltas"),
                      default="unlogged",
                      help="copies, join steps and intermediate deltas in UNLOGGED tables (as "
                           "plans install them), in logged ones, or both in turn with their "
                           "ratio; deltas: the deltas logged, then as installed, with their "
                           "ratio")
    skew = _benchmark(bsub, "skewed-mv", "DeltaToRel into a skewed MV: indexed on its join key "
                      "vs on its most distinct column", _skewed_mv)
    skew.add_argument("--users", type=count, default=3000)
    skew.add_argument("--inserts", type=count, default=5000, help="rows arriving besides an edit")
    skew.add_argument("--repeat", type=count, default=5, help="pushes on each MV (medians)")
    jp = _benchmark(bsub, "join-plan", "a Join push over stale delta statistics: hashed vs "
                    "planned freely, as before", _join_plan)
    jp.add_argument("--slice", type=count, default=2500, help="driving delta rows")
    jp.add_argument("--compensating", type=count, default=2500,
                    help="rows of the other side's delta over the same interval")
    jp.add_argument("--x-rows", type=count, default=20_000, help="rows of the other side")
    jp.add_argument("--repeat", type=count, default=5, help="pushes per plan (medians)")
    jp.add_argument("--fresh-statistics", action="store_true",
                    help="analyze the deltas after their rows arrive (the planner's best case)")
    bk = _benchmark(bsub, "busy-key-join", "a Join push where a busy key meets updates of a "
                    "column the join does not read: the other side's delta consolidated first "
                    "vs joined row by row, as before", _busy_key_join)
    bk.add_argument("--slice", type=int, default=20_000, help="driving delta rows")
    bk.add_argument("--busy-share", type=float, default=0.5,
                    help="the busy user's share of the driving rows (0-1)")
    bk.add_argument("--updates", type=int, default=100,
                    help="updates of the busy user's follower count over the push's interval")
    bk.add_argument("--users", type=int, default=5000, help="rows of the other side")
    bk.add_argument("--inserts", type=int, default=0,
                    help="new users in the other side's delta besides (nothing to cancel)")
    bk.add_argument("--repeat", type=int, default=5, help="pushes per rule (medians)")
    for parser in (cap, push, skew, jp, bk):  # last, as every benchmark's
        _json(parser)
    _register_live(bsub)


def _register_live(bsub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The benchmarks of a whole running cloud, and the optimizer's plumbing."""
    lazy = _benchmark(bsub, "lazy", "lazy pushes vs a push every second: work, violations",
                      _lazy)
    lazy.add_argument("--sla", type=positive, default=10.0, help="staleness SLA of each sharing")
    lazy.add_argument("--rate", type=positive, default=100.0, help="tweets per second")
    lazy.add_argument("--duration", type=positive, default=60.0, help="seconds per run")
    adm = _benchmark(bsub, "admission", "Table 1 admitted at several tweet rates on a running "
                     "cloud: admitted, rejected, violations, predicted vs measured load per "
                     "machine", _admission)
    adm.add_argument("--machines", type=count, default=3)
    adm.add_argument("--rates", default="100,1000,3000", help="tweets/s, comma-separated")
    adm.add_argument("--duration", type=positive, default=180.0, help="seconds per rate")
    adm.add_argument("--tweets", type=count, default=20_000, help="dataset loaded first")
    adm.add_argument("--warmup", type=not_negative, default=WINDOW_S,
                     help="seconds of traffic before submitting (rates, idle cores and load "
                          "are measured over that window)")
    flt = _benchmark(bsub, "faults", "faults injected one at a time into a running cloud "
                     "(`smile up`): recovery time, violations, MVs equal to their queries",
                     _faults)
    flt.add_argument("--rate", type=positive, default=200.0, help="tweets per second")
    flt.add_argument("--tweets", type=count, default=20_000, help="dataset loaded first")
    flt.add_argument("--only", default="", help="comma-separated fault names (default: all)")
    plumb = _benchmark(bsub, "plumbing", "global plan + hill-climbing vs separate plans, and "
                       "the greedy's gap to the ILP (paper Figs. 12-13)", _plumbing)
    plumb.add_argument("--machines", type=count, default=6)
    plumb.add_argument("--rate", type=positive, default=1000.0, help="tweets per second")
    plumb.add_argument("--sla", type=positive, default=45.0, help="staleness SLA of each sharing")
    plumb.add_argument("--ilp-limit", type=positive, default=60.0,
                       help="seconds CBC may take per ILP")
    plumb.add_argument("--out", default="artifacts/plumbing",
                       help="directory for fig12.png and fig13.png")
    for parser in (lazy, adm, flt, plumb):
        _json(parser)


def _json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON only (the default output)")


def _capture(args: argparse.Namespace, settings: Settings) -> int:
    from smile.bench.capture import bench_capture
    from smile.harness.output import print_json
    from smile.topology import resolve_topology

    topology = resolve_topology(settings)
    machine = topology.machine(args.machine) if args.machine else topology.machines[0]
    if args.oltp:
        from smile.bench.capture_oltp import bench_capture_oltp

        print_json(bench_capture_oltp(machine.dsn, settings.pg_bindir, args.seconds,
                                      args.clients, args.repeat or 2))
        return 0
    print_json(bench_capture(machine.dsn, args.rows, args.repeat or 3, settings.pg_bindir))
    return 0


def _optimizer(args: argparse.Namespace, settings: Settings) -> int:
    import json

    from smile.bench.optimizer import bench_optimizer

    print(json.dumps(bench_optimizer(args.rounds, args.gap_instances), indent=2))
    return 0


def _admission_scale(args: argparse.Namespace, settings: Settings) -> int:
    from smile.bench.admission_scale import bench_admission_scale
    from smile.harness.output import print_json

    print_json(bench_admission_scale(args.machines, args.sharings, args.sla, args.rate,
                                     reference=not args.no_reference))
    return 0


def _counts(text: str) -> tuple[int, ...]:
    """`25,100,400`: counts, comma-separated."""
    return tuple(count(part) for part in text.split(","))


def _shares(text: str) -> tuple[float, ...]:
    """`0.001,0.01`: fractions in (0, 1], comma-separated."""
    return tuple(share(part) for part in text.split(","))


def _time_model(settings: Settings) -> Any:
    """The calibrated time model in the state directory (`smile calibrate`), else the
    defaults."""
    import json

    from smile.costmodel.time_model import TimeModel

    path = settings.state_dir / "time_model.json"
    if not path.exists():
        return TimeModel()
    return TimeModel.from_json(json.loads(path.read_text())["time_model"])


def _push(args: argparse.Namespace, settings: Settings) -> int:
    from smile.bench.push import bench_push, significant
    from smile.harness.output import print_json
    from smile.topology import resolve_topology

    topology = resolve_topology(settings)
    if args.fractions is not None:
        from smile.bench.push_paths import bench_push_paths

        print_json(bench_push_paths(topology, args.rows, args.fractions, args.query,
                                    _time_model(settings), not args.in_order))
        return 0

    def run(views: bool, unlogged: Persistence = "logged" if args.relations == "logged"
            else "unlogged") -> dict[str, Any]:
        return bench_push(topology, args.rows, args.fraction, args.shape, args.one_transaction,
                          args.repeat, views, args.query, not args.in_order,
                          args.roll_forward, unlogged)

    if args.relations in ("both", "deltas"):
        base: Persistence = "logged" if args.relations == "both" else "relations"
        logged, light = run(args.unions != "copy", base), run(args.unions != "copy")
        print_json({"logged": logged, "unlogged": light,
                    "incremental_unlogged_over_logged" if base == "logged"
                    else "incremental_deltas_unlogged_over_logged": significant(
                        light["incremental_s"] / logged["incremental_s"])})
        return 0
    if args.unions != "both":
        print_json(run(args.unions == "view"))
        return 0
    copy, view = run(False), run(True)
    print_json({"copy": copy, "view": view, "incremental_view_over_copy": significant(
        view["incremental_s"] / copy["incremental_s"])})
    return 0


def _skewed_mv(args: argparse.Namespace, settings: Settings) -> int:
    from smile.bench.skewed_mv import bench_skewed_mv
    from smile.harness.output import print_json
    from smile.topology import resolve_topology

    print_json(bench_skewed_mv(resolve_topology(settings), args.users, args.inserts,
                               args.repeat))
    return 0


def _busy_key_join(args: argparse.Namespace, settings: Settings) -> int:
    from smile.bench.busy_key_join import bench_busy_key_join
    from smile.errors import ConfigError
    from smile.harness.output import print_json
    from smile.topology import resolve_topology

    if min(args.slice, args.repeat) < 1 or min(args.updates, args.inserts) < 0 or args.users < 2:
        raise ConfigError("--slice and --repeat must be at least 1, --updates and --inserts at "
                          "least 0, --users at least 2")
    if not 0 <= args.busy_share <= 1:
        raise ConfigError(f"--busy-share {args.busy_share:g}: a share, between 0 and 1")
    print_json(bench_busy_key_join(resolve_topology(settings), args.slice, args.busy_share,
                                   args.updates, args.users, args.repeat, args.inserts))
    return 0


def _join_plan(args: argparse.Namespace, settings: Settings) -> int:
    from smile.bench.join_plan import bench_join_plan
    from smile.harness.output import print_json
    from smile.topology import resolve_topology

    print_json(bench_join_plan(resolve_topology(settings), args.slice, args.compensating,
                               args.x_rows, repeat=args.repeat, fresh=args.fresh_statistics))
    return 0


def _lazy(args: argparse.Namespace, settings: Settings) -> int:
    from smile.bench.lazy import bench_lazy
    from smile.harness.output import print_json
    from smile.topology import resolve_topology

    print_json(bench_lazy(resolve_topology(settings), sla_s=args.sla, rate=args.rate,
                          duration_s=args.duration))
    return 0


def _plumbing(args: argparse.Namespace, settings: Settings) -> int:
    from pathlib import Path

    from smile.bench.plumbing import bench_plumbing
    from smile.cli.out_paths import writable_dir
    from smile.harness.output import print_json

    out = Path(args.out)
    writable_dir(out)
    print_json(bench_plumbing(args.machines, args.rate, args.sla, args.ilp_limit, out))
    return 0


def _faults(args: argparse.Namespace, settings: Settings) -> int:
    import sys

    from smile.bench.faults import FAULTS, bench_faults
    from smile.harness.output import print_json
    from smile.topology import resolve_topology

    only = tuple(f.strip() for f in args.only.split(",") if f.strip()) or FAULTS
    report = bench_faults(settings, resolve_topology(settings), rate=args.rate,
                          tweets=args.tweets, only=only,
                          progress=lambda f: print(f"injecting {f}", file=sys.stderr))
    print_json(report)
    return 0


def _admission(args: argparse.Namespace, settings: Settings) -> int:
    import math

    from smile.bench.admission import bench_admission
    from smile.errors import ConfigError
    from smile.harness.output import print_json
    from smile.topology import resolve_topology

    try:
        rates = tuple(float(r) for r in args.rates.split(",") if r.strip())
    except ValueError as exc:
        raise ConfigError(f"--rates must be numbers separated by commas: {args.rates!r}") from exc
    if not rates or not all(0 < r < math.inf for r in rates):
        raise ConfigError("--rates must be positive tweets/s")
    print_json(bench_admission(settings, resolve_topology(settings), machines=args.machines,
                               rates=rates, duration_s=args.duration, tweets=args.tweets,
                               warmup_s=args.warmup))
    return 0
