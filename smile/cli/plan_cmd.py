"""`smile plan`: admission decision for one sharing against a catalog snapshot (offline) or,
with `--live`, the running SMILE's dry run of it (`POST /sharings?dry_run=true`); and
`smile catalog snapshot`: a catalog snapshot of the live cloud.

Must not: plan, sample or calibrate itself (`smile.optimizer`, `smile.executor.catalog_live`
and `smile.bench.calibrate` do); the offline `plan` opens no connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from smile.cli.arg_types import count, not_negative, positive

if TYPE_CHECKING:
    import argparse

    from smile.optimizer.admission import Decision
    from smile.optimizer.plan import Plan
    from smile.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    plan = sub.add_parser("plan", help="plan a sharing with DPT and DPD and decide admission")
    where = plan.add_mutually_exclusive_group(required=True)
    where.add_argument("--catalog", help="catalog snapshot JSON (docs/catalog.md): offline")
    where.add_argument("--live", action="store_true",
                       help="ask the running SMILE (POST /sharings?dry_run=true): what a "
                            "submission would decide against D as it runs; nothing changes")
    plan.add_argument("--api", help="with --live: API base URL (default: from the settings)")
    plan.add_argument("--token", help="with --live: a consumer's token "
                                      "(default: <state_dir>/admin.token)")
    plan.add_argument("--sql", required=True, help="the sharing's SPJ query")
    plan.add_argument("--staleness", type=float, required=True, help="SLA in seconds")
    plan.add_argument("--penalty", type=not_negative, default=0.0,
                      help="$ per late tuple (default 0)")
    plan.add_argument("--name", default="sharing", help="the sharing's name")
    plan.add_argument("--mv-machine", help="machine the MV must live on (default: best)")
    plan.add_argument("--json", action="store_true", help="print the decision as JSON")
    plan.add_argument("--explain", action="store_true",
                      help="print the plan as a tree and write a picture of the DAG")
    plan.add_argument("--picture", help="SVG file for --explain (default: plan-NAME.svg)")
    plan.set_defaults(run=_plan)
    cat = sub.add_parser("catalog", help="catalog snapshots")
    csub = cat.add_subparsers(dest="catalog_command", required=True, metavar="ACTION")
    snap = csub.add_parser("snapshot", help="write a catalog snapshot of the live cloud")
    snap.add_argument("--out", required=True, help="JSON file to write")
    snap.add_argument("--sample-s", type=positive, default=2.0,
                      help="seconds to sample update rates over (default 2)")
    snap.set_defaults(run=_snapshot)
    cal = sub.add_parser("calibrate", help="measure the operators' time lines (paper Fig. 5)")
    cal.add_argument("--out", help="time model JSON (default: STATE_DIR/time_model.json)")
    cal.add_argument("--png", help="picture of the fit (default: next to --out, .png)")
    cal.add_argument("--catalog", help="also embed the model into this catalog snapshot")
    cal.add_argument("--repeat", type=count, default=3)
    cal.add_argument("--no-spark", action="store_true",
                     help="keep the Spark join's default line instead of measuring it")
    cal.set_defaults(run=_calibrate)


def _plan(args: argparse.Namespace, settings: Settings) -> int:
    import json
    from pathlib import Path

    from smile.cli.out_paths import writable_file
    from smile.optimizer.admission import plan_sharing
    from smile.optimizer.catalog import CatalogSnapshot
    from smile.optimizer.sharing import Sharing

    if args.live:
        return _plan_live(args, settings)
    catalog = CatalogSnapshot.load(Path(args.catalog))
    picture = Path(args.picture or f"plan-{args.name}.svg")
    if args.explain:
        writable_file(picture, "--picture")
    sharing = Sharing(args.name, args.sql, args.staleness, args.penalty, args.mv_machine)
    decision = plan_sharing(catalog, sharing)
    if args.json:
        print(json.dumps(decision.to_json(), indent=2))
    else:
        _print_decision(decision)
    if args.explain and decision.plan is not None:
        print(explain(decision.plan))
        from smile.optimizer.plan_svg import plan_svg

        picture.write_text(plan_svg(decision.global_plan()))
        print(f"picture of the DAG: {picture}")
    return 0 if decision.admitted else 1


def _plan_live(args: argparse.Namespace, settings: Settings) -> int:
    """The running SMILE's dry run of the sharing, printed; 0 admitted, 1 rejected, 2 refused
    (bad input, no API)."""
    import json
    import sys

    from smile.api.client import Client
    from smile.executor.consumers import admin_token

    url = args.api or f"http://{settings.api_host}:{settings.api_port}"
    body = {"name": args.name, "sql": args.sql, "staleness_s": args.staleness,
            "penalty_per_tuple": args.penalty}
    if args.mv_machine:
        body["mv_machine"] = args.mv_machine
    try:
        status, out = Client(url, args.token or admin_token(settings.state_dir)).call(
            "POST", "/sharings?dry_run=true", body)
    except OSError as exc:
        print(f"cannot reach the API at {url}: {exc}; is `smile up` running?", file=sys.stderr)
        return 2
    if status != 200:
        print(f"refused ({status}): {out.get('detail') if isinstance(out, dict) else out}",
              file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        _print_explanation(out)
    return 0 if out["status"] == "admitted" else 1


def _print_explanation(out: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    status = "[green]would be admitted[/]" if out["status"] == "admitted" \
        else "[red]would be rejected[/]"
    console.print(f"{out['name']}: {status} — {out['reason']}")
    if out["status"] == "admitted":
        console.print(f"critical path {out['cp_s']:.3f} s, pushed every {out['period_s']:.1f} s,"
                      f" ${out['cost_per_s'] * 3600:.4f}/hour on its own, the global plan "
                      f"${out['added_cost_per_s'] * 3600:+.4f}/hour")
        for v in out["vertices"]:
            shared = ", ".join(v["shared_with"])
            console.print(f"  {v['vertex']}  " + (f"(shared with {shared})" if shared
                                                   else "(new)"))
    table = Table()
    for col in ("machine", "load now", "with it", "added", "bound"):
        table.add_column(col)
    for m, load in out["machines"].items():
        table.add_row(m, *(f"{load[k]:.4f}" for k in ("load_now", "load_with", "added",
                                                       "bound")))
    console.print(table)


def _print_decision(decision: Decision) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    status = "[green]admitted[/]" if decision.admitted else "[red]rejected[/]"
    console.print(f"{decision.sharing.name}: {status} — {decision.reason}")
    table = Table()
    for col in ("plan", "critical path s", "cost $/hour", "MV on"):
        table.add_column(col)
    for s in (decision.dpt, decision.dpd):
        if s is not None:
            table.add_row(s.algorithm, f"{s.cp_s:.4f}", f"{s.cost_per_s * 3600:.5f}",
                          s.mv_machine)
    console.print(table)


def explain(plan: Plan) -> str:
    """The plan as an indented tree from the MV back to the sources."""
    incoming = {e.dst: e for e in plan.edges}
    lines: list[str] = []
    seen: set[object] = set()

    def walk(v: object, depth: int) -> None:
        from smile.optimizer.plan import Join, Vertex

        assert isinstance(v, Vertex)
        edge = incoming.get(v)
        pad = "  " * depth
        if edge is None:
            lines.append(f"{pad}{v.label}  (source)")
            return
        detail = ""
        if isinstance(edge, Join):
            on = ", ".join(" = ".join(p) for p in edge.predicates)
            detail = f" [{edge.engine}, Δ {edge.delta_side}, on {on}]"
        again = " (see above)" if v in seen else ""
        lines.append(f"{pad}{v.label}  ← {edge.kind}{detail} {edge.tuples_per_s:,.1f} t/s{again}")
        if v in seen:
            return
        seen.add(v)
        for src in edge.sources:
            walk(src, depth + 1)

    walk(plan.mv, 0)
    return "\n".join(lines)


def _snapshot(args: argparse.Namespace, settings: Settings) -> int:
    from pathlib import Path

    from smile.cli.out_paths import writable_file
    from smile.executor.catalog_live import snapshot_live
    from smile.topology import resolve_topology

    writable_file(Path(args.out))  # before the sampling, not after it
    catalog = snapshot_live(resolve_topology(settings), sample_s=args.sample_s)
    catalog.save(Path(args.out))
    print(f"wrote {args.out}: {len(catalog.machines)} machines, "
          f"{len(catalog.relations)} relations")
    return 0


def _calibrate(args: argparse.Namespace, settings: Settings) -> int:
    import json
    from dataclasses import replace
    from pathlib import Path

    from smile.bench.calibrate import calibrate, draw_png
    from smile.cli.out_paths import writable_file
    from smile.optimizer.catalog import CatalogSnapshot
    from smile.topology import resolve_topology

    # every path checked (and the catalog read) before minutes of calibration, not after
    out = Path(args.out) if args.out else settings.state_dir / "time_model.json"
    png = Path(args.png) if args.png else out.with_suffix(".png")
    writable_file(out)
    writable_file(png, "--png")
    if args.catalog:
        CatalogSnapshot.load(Path(args.catalog))
        writable_file(Path(args.catalog), "--catalog")

    spark = None
    if not args.no_spark:
        from smile.spark import spark_session

        spark = spark_session(settings)
    report = calibrate(resolve_topology(settings), repeat=args.repeat, spark=spark)
    out.write_text(json.dumps(report, indent=2))
    draw_png(report, png)
    if args.catalog:
        path = Path(args.catalog)
        catalog = CatalogSnapshot.load(path)
        replace(catalog, time_model=report["time_model"]).save(path)
    for kind, line in report["time_model"].items():
        if isinstance(line, dict):
            print(f"{kind:13s} a = {line['a'] * 1e3:8.3f} ms   b = {line['b'] * 1e6:8.3f} µs/tuple")
    print("(plus a per-edge dispatch overhead the executor measures online: "
          f"{report['time_model'].get('_dispatch_s', 0) * 1e3:.1f} ms)")
    print(f"wrote {out} and {png}")
    return 0
