"""`smile bench plumbing`: what merging plans into the global plan D and hill-climbing it with
plumbings saves (paper §7 and §9.5, Figs. 12–13), and how far the greedy lands from the exact
optimum over the same candidates.

The setting of Fig. 12: the paper's nine relations on `machines` machines at 7M tweets and
`rate` tweets/s, network free (one availability zone), the sharings of Table 1 with SLA `sla_s`
and a penalty of $0.001 per late tuple, the MV of S_i on machine ((i − 1) mod N) + 1. For DPT
and for DPD, every sharing is planned on its own, then

- **separate**: each sharing runs its own vertices (SMILE before a global plan): Σ COST of each
  plan as a global plan of its own;
- **merged**: all plans in one D, identical vertices (same contents, same machine) once;
- **+HC**: D hill-climbed until no plumbing applies;
- **on D** (`dpd_on_d_*`): DPD's plans made one after another, each on the D of those before
  it (`dp.Reuse`), as admission makes them, then hill-climbed.

Costs are COST(D) / sharings: $ per sharing-second. The ILP (PuLP + CBC) solves the candidates
found on the merged DPD plan; when CBC cannot prove optimality within the limit, it is re-run
on the largest prefix of the sharings (20, 15, 10, 5) where it can, and the gap is measured
against one round of hill-climbing over the same candidates on that prefix.

Must not: touch a database, a broker or Spark: everything is computed from the catalog model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from smile.costmodel.prices import Prices
from smile.costmodel.time_model import TimeModel
from smile.dataset.catalog_model import paper_catalog
from smile.dataset.sharings import table1
from smile.harness.output import save_png
from smile.optimizer.admission import plan_sharing
from smile.optimizer.dp_context import Reuse
from smile.optimizer.global_plan import GlobalPlan, SharingEntry
from smile.optimizer.hill_climb import Climb, hill_climb
from smile.optimizer.ilp import Exact, solve
from smile.optimizer.load import assess
from smile.optimizer.plan import Plan, Vertex
from smile.optimizer.plumbing import Context, candidates
from smile.optimizer.sharing import Sharing

if TYPE_CHECKING:
    from pathlib import Path

    from matplotlib.figure import Figure

    from smile.optimizer.catalog import CatalogSnapshot

PENALTY = 0.001
PAPER = {"DPT": 0.0042, "DPD": 0.0033, "DPT+HC": 0.0025, "DPD+HC": 0.0023}
"""Fig. 12's values ("dollars per sharing-second ... in sharing-hour": not our unit)."""
PREFIXES = (20, 15, 10, 5)

Planned = list[tuple[Plan, SharingEntry]]


@dataclass(frozen=True)
class _Run:
    """One algorithm's plans: separate, merged, hill-climbed."""

    sharings: int
    separate_total: float
    separate_vertices: int
    separate_edges: int
    merged: GlobalPlan
    merged_total: float
    climb: Climb
    separate_bases_once: float = 0.0
    """Separate plans, but each base relation's upkeep (ΔR → R̂, which capture keeps once per
    relation whoever reads it) charged once: what separate plans cost on SMILE's machines."""

    def per_sharing(self, total: float) -> float:
        return total / max(1, self.sharings)


def _merge(planned: Planned) -> GlobalPlan:
    d = GlobalPlan()
    for plan, entry in planned:
        d = d.add(plan, entry)
    return d


def _run(planned: Planned, ctx: Context) -> _Run:
    total, nv, ne = 0.0, 0, 0
    own_work = 0.0
    upkeep: dict[Vertex, float] = {}
    for plan, entry in planned:
        own = GlobalPlan().add(plan, entry)
        a = assess(own, ctx.catalog, ctx.model, ctx.prices)
        total += a.total
        nv += len(own.vertices)
        ne += len(own.edges)
        own_work += a.total
        for e, cost in a.edge_cost.items():
            if e.dst.base:  # one R̂ per relation, kept by capture: counted once below
                own_work -= cost
                upkeep[e.dst] = max(upkeep.get(e.dst, 0.0), cost)
    merged = _merge(planned)
    merged_total = assess(merged, ctx.catalog, ctx.model, ctx.prices).total
    return _Run(len(planned), total, nv, ne, merged, merged_total, hill_climb(merged, ctx),
                own_work + sum(upkeep.values()))


def _planned_on_d(catalog: CatalogSnapshot, model: TimeModel, prices: Prices, machines: int,
                  sla_s: float, sharings: int) -> GlobalPlan:
    """DPD's plans made one after another, each on the D of those before it (`dp.Reuse`), as
    admission makes them: D's intermediates cost a later sharing nothing."""
    d = GlobalPlan()
    for i, spec in enumerate(table1()[:sharings]):
        sharing = Sharing(spec.name, spec.sql, sla_s, PENALTY, f"m{i % machines + 1}")
        decision = plan_sharing(catalog, sharing, model, prices,
                                reuse=Reuse.of(d, model))
        chosen = decision.dpd if decision.dpd is not None and decision.dpd.cp_s <= sla_s \
            else decision.dpt
        if decision.admitted and chosen is not None:
            d = d.add(chosen.plan, decision.entry(chosen))
    return d


def _ilp(planned: Planned, ctx: Context, limit_s: float) -> dict[str, Any]:
    """The exact optimum on the largest prefix CBC solves to optimality, against one round of
    hill-climbing over the same candidates."""
    sizes = [len(planned)] + [k for k in PREFIXES if k < len(planned)]
    exact: Exact | None = None
    d = GlobalPlan()
    n = 0
    tried: list[dict[str, Any]] = []
    for n in sizes:
        d = _merge(planned[:n])
        exact = solve(d, ctx, candidates(d, ctx), limit_s)
        tried.append({"sharings": n, "status": exact.status, "optimal": exact.optimal,
                      "seconds": _r(exact.seconds)})
        if exact.optimal:
            break
    assert exact is not None
    one = hill_climb(d, ctx, rounds=1)
    ilp_cost = assess(exact.plan, ctx.catalog, ctx.model, ctx.prices).per_sharing_second()
    hc_cost = assess(one.plan, ctx.catalog, ctx.model, ctx.prices).per_sharing_second()
    greedy = sum(p.benefit for p in one.applied)
    return {
        "ilp_cost": _r(ilp_cost), "ilp_sharings": n,
        "hc_ilp_gap": _r((hc_cost - ilp_cost) / ilp_cost) if ilp_cost > 0 else math.nan,
        "hc_one_round_cost": _r(hc_cost),
        "ilp_objective": _r(exact.objective),
        "hc_objective": _r(greedy),
        "hc_ilp_objective_gap": _r((exact.objective - greedy) / exact.objective)
        if exact.objective > 0 else 0.0,
        "ilp_seconds": _r(exact.seconds), "ilp_status": exact.status,
        "ilp_optimal": exact.optimal, "ilp_chosen": len(exact.chosen),
        "hc_one_round_applied": len(one.applied), "ilp_tried": tried,
    }


def _r(x: float) -> float:
    """Six significant digits (the costs are ~1e-7 $/s: rounding to places would zero them)."""
    return float(f"{x:.6g}")


def bench_plumbing(machines: int = 6, rate: float = 1000.0, sla_s: float = 45.0,
                   ilp_limit_s: float = 60.0, out_dir: Path | None = None,
                   sharings: int = 25) -> dict[str, Any]:
    """Figs. 12–13 on the first `sharings` sharings of Table 1 (see the module's docstring)."""
    catalog = paper_catalog(machines=machines, tweet_rate=rate)
    model = TimeModel()
    prices = Prices(network_per_gb=0.0)
    ctx = Context(catalog, model, prices)
    by_algo: dict[str, Planned] = {"DPT": [], "DPD": []}
    rejected: list[str] = []
    dpd_fell_back: list[str] = []
    for i, spec in enumerate(table1()[:sharings]):
        sharing = Sharing(spec.name, spec.sql, sla_s, PENALTY, f"m{i % machines + 1}")
        decision = plan_sharing(catalog, sharing, model, prices)
        if not decision.admitted or decision.dpt is None:
            rejected.append(spec.name)
            continue
        dpd = decision.dpd
        if dpd is None or dpd.cp_s > sla_s:  # DPD's plan is not admissible: it runs DPT's
            dpd_fell_back.append(spec.name)
            dpd = decision.dpt
        for algo, summary in (("DPT", decision.dpt), ("DPD", dpd)):
            by_algo[algo].append((summary.plan, decision.entry(summary)))
    if not by_algo["DPD"]:
        raise ValueError("no sharing was admitted: nothing to merge")
    dpt, dpd_run = _run(by_algo["DPT"], ctx), _run(by_algo["DPD"], ctx)
    on_d = _planned_on_d(catalog, model, prices, machines, sla_s, sharings)
    on_d_cost = assess(on_d, catalog, model, prices).total
    on_d_climb = hill_climb(on_d, ctx)
    ilp = _ilp(by_algo["DPD"], ctx, ilp_limit_s)

    def cost(run: _Run, total: float) -> float:
        return _r(run.per_sharing(total))

    out: dict[str, Any] = {
        "sharings": dpd_run.sharings,
        "machines": machines, "rate": rate, "sla_s": sla_s, "penalty_per_tuple": PENALTY,
        "unit": "$ per sharing-second (COST(D) / sharings)",
        "dpt_cost": cost(dpt, dpt.separate_total),
        "dpd_cost": cost(dpd_run, dpd_run.separate_total),
        "dpt_merged_cost": cost(dpt, dpt.merged_total),
        "dpd_separate_bases_once_cost": cost(dpd_run, dpd_run.separate_bases_once),
        "dpd_merged_cost": cost(dpd_run, dpd_run.merged_total),
        "dpd_on_d_cost": cost(dpd_run, on_d_cost),
        "dpd_on_d_hc_cost": cost(dpd_run, on_d_climb.trace[-1][2]),
        "vertices_on_d": len(on_d.vertices), "edges_on_d": len(on_d.edges),
        "vertices_on_d_hc": len(on_d_climb.plan.vertices),
        "edges_on_d_hc": len(on_d_climb.plan.edges),
        "dpt_hc_cost": cost(dpt, dpt.climb.trace[-1][2]),
        "dpd_hc_cost": cost(dpd_run, dpd_run.climb.trace[-1][2]),
        "vertices_before": dpd_run.separate_vertices,
        "edges_before": dpd_run.separate_edges,
        "vertices_merged": len(dpd_run.merged.vertices),
        "edges_merged": len(dpd_run.merged.edges),
        "vertices_after": len(dpd_run.climb.plan.vertices),
        "edges_after": len(dpd_run.climb.plan.edges),
        "plumbings_applied": len(dpd_run.climb.applied),
        "hc_seconds": _r(dpd_run.climb.seconds),
        "dpt_vertices_before": dpt.separate_vertices, "dpt_edges_before": dpt.separate_edges,
        "dpt_vertices_merged": len(dpt.merged.vertices),
        "dpt_edges_merged": len(dpt.merged.edges),
        "dpt_vertices_after": len(dpt.climb.plan.vertices),
        "dpt_edges_after": len(dpt.climb.plan.edges),
        "dpt_plumbings_applied": len(dpt.climb.applied),
        "dpt_hc_seconds": _r(dpt.climb.seconds),
        **ilp,
        "rejected": rejected, "dpd_fell_back_to_dpt": dpd_fell_back,
        "paper": {**PAPER, "unit": "as printed in Fig. 12 (not comparable units)"},
    }
    # vertices and edges of D: separate plans, merged, then after each plumbing
    out["trace"] = {algo: [[run.separate_vertices, run.separate_edges]]
                    + [[t[0], t[1]] for t in run.climb.trace]
                    for algo, run in (("DPD", dpd_run), ("DPT", dpt))}
    out["hc_over_merged"] = _r(out["dpd_hc_cost"] / out["dpd_merged_cost"])
    out["hc_over_separate"] = _r(out["dpd_hc_cost"] / out["dpd_cost"])
    out["hc_over_separate_bases_once"] = _r(out["dpd_hc_cost"]
                                            / out["dpd_separate_bases_once_cost"])
    out["on_d_hc_over_separate_bases_once"] = _r(out["dpd_on_d_hc_cost"]
                                                 / out["dpd_separate_bases_once_cost"])
    out["goals"] = {
        "dpd_hc_cost <= 0.60 * dpd_cost": out["dpd_hc_cost"] <= 0.60 * out["dpd_cost"],
        "hc_ilp_gap <= 0.10": out["hc_ilp_gap"] <= 0.10,
        "hc_seconds <= 2": out["hc_seconds"] <= 2.0,
    }
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        out["figures"] = {"fig12": str(save_png(fig12(out), out_dir / "fig12.png")),
                          "fig13": str(save_png(fig13(out), out_dir / "fig13.png"))}
    return out


def fig12(doc: dict[str, Any]) -> Figure:
    """Fig. 12 from `bench_plumbing`'s answer: each way of planning's cost."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.add_subplot()
    labels = ["DPT", "DPD", "DPT+HC", "DPD+HC"]
    own = [doc["dpt_cost"], doc["dpd_cost"], doc["dpt_hc_cost"], doc["dpd_hc_cost"]]
    merged = [doc["dpt_merged_cost"], doc["dpd_merged_cost"]]
    xs = list(range(len(labels)))
    w = 0.38
    bars = ax.bar([x - w / 2 if x < 2 else x for x in xs], own, w, color="tab:blue",
                  label="DPT, DPD: separate plans\n+HC: merged, hill-climbed")
    lighter = ax.bar([x + w / 2 for x in xs[:2]], merged, w, color="tab:blue", alpha=0.4,
                     label="merged, before plumbing")
    for group in (bars, lighter):
        ax.bar_label(group, fmt="%.3g", fontsize=8)
    ax.set_xticks(xs, labels)
    ax.set_xlabel("plan")
    ax.set_ylabel("cost ($ per sharing-second)")
    ax.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(f"Fig. 12: cost of {doc['sharings']} sharings on {doc['machines']} machines, "
                 f"{doc['rate']:g} tweets/s, SLA {doc['sla_s']:g} s, network free")
    paper = "\n".join(f"  {k} {v}" for k, v in PAPER.items())
    ax.text(0.01, 0.98, f"paper, Fig. 12 (its own units):\n{paper}\n"
            f"here: DPD+HC / DPD = {doc['hc_over_separate']:.2f}\n"
            f"      DPD+HC / merged DPD = {doc['hc_over_merged']:.2f}",
            transform=ax.transAxes, va="top", fontsize=8,
            bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.9})
    ax.set_ylim(0, max(own + merged) * 1.45)
    return fig


def fig13(doc: dict[str, Any]) -> Figure:
    """Fig. 13 from `bench_plumbing`'s answer: vertices and edges of D, separate plans, merged,
    then after each plumbing (its `trace`)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.add_subplot()
    longest = 0
    for (algo, steps), color in zip(doc["trace"].items(), ("tab:blue", "tab:orange"),
                                    strict=True):
        vs, es = [v for v, _ in steps], [e for _, e in steps]
        xs = list(range(len(vs)))
        longest = max(longest, len(xs))
        ax.plot(xs, vs, "o-", color=color, markersize=3, label=f"{algo} vertices")
        ax.plot(xs, es, "s--", color=color, markersize=3, label=f"{algo} edges")
    step = max(2, math.ceil((longest - 2) / 10))  # plumbing numbers shown: step, 2·step, …
    ticks = [0, 1, *range(step + 1, longest, step)]
    # "merge" one line lower: it sits one step right of "separate"
    ax.set_xticks(ticks, ["separate" if t == 0 else "\nmerge" if t == 1 else str(t - 1)
                          for t in ticks])
    ax.set_xlabel("plumbing iterations (0 = separate plans, then merge, then one per plumbing)")
    ax.set_ylabel("number of vertices / edges in the global plan")
    ax.set_title("Fig. 13: vertices and edges as plans merge and plumbings apply")
    ax.grid(alpha=0.3)
    ax.legend()
    return fig
