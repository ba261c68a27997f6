"""Figs. 12–13: the cost of Table 1's 25 sharings planned by DPT and DPD, separately and as
one global plan hill-climbed by plumbing, and the vertices and edges of that plan as plumbings
apply — on Table 1's catalog model (6 machines, 1000 tweets/s, SLA 45 s, network free inside a
zone, as in the paper's Fig. 12), through `smile bench plumbing`.

These two figures are the optimizer's own: costs are COST(D) of the model, not dollars the
machines spent (the JSON says `"measured": false`); `fig12live` runs the same ways of planning
on the cloud and measures them. "DPD" here is every sharing's plan separate, each with its own
upkeep of R̂; capture keeps one R̂ per relation, so the JSON also gives separate plans with R̂
once, and the merged D before plumbing.

Must not: touch a database.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from smile.bench.plumbing import PAPER, bench_plumbing, fig12, fig13

if TYPE_CHECKING:
    from smile.experiments.context import Context

PAPER_REMOVED = 80
"""Fig. 13: more than 80 vertices and edges removed by plumbing."""
ILP_LIMIT_S = {"tiny": 5.0, "small": 20.0, "full": 60.0}
"""Seconds CBC may take per ILP."""
SHARINGS = {"tiny": 10, "small": 25, "full": 25}
"""The first of Table 1's sharings planned."""


def run(ctx: Context) -> dict[str, Any]:
    doc = bench_plumbing(machines=6, rate=1000.0, sla_s=45.0,
                         ilp_limit_s=ctx.pick(ILP_LIMIT_S), sharings=ctx.pick(SHARINGS))
    f12, f13 = ctx.outputs("fig12"), ctx.outputs("fig13")
    f12.png(fig12(doc))
    f13.png(fig13(doc))
    costs = {"DPT": doc["dpt_cost"], "DPD": doc["dpd_cost"], "DPT+HC": doc["dpt_hc_cost"],
             "DPD+HC": doc["dpd_hc_cost"]}
    f12.csv([{"plan": k, "cost_per_sharing_second": v, "paper": PAPER[k]}
             for k, v in costs.items()])
    saving = 1.0 - doc["dpd_hc_cost"] / doc["dpd_cost"]
    paper_saving = 1.0 - PAPER["DPD+HC"] / PAPER["DPD"]
    f12.json({"experiment": "fig12", "measured": False, "sharings": doc["sharings"],
              "costs": costs, "dpd_hc_over_dpd": round(1.0 - saving, 4),
              "saving": round(saving, 4),
              "paper": {"costs": dict(PAPER), "dpd_hc_over_dpd": round(1 - paper_saving, 4),
                        "saving": round(paper_saving, 4)},
              "ilp": {k: doc[k] for k in ("ilp_cost", "ilp_sharings", "hc_ilp_gap")},
              # what separate plans cost with each R̂ kept once (as capture keeps it), and the
              # merged D without plumbing (the paper's D before §7.2): plumbing's own saving
              "dpd_separate_bases_once": doc["dpd_separate_bases_once_cost"],
              "dpd_merged": doc["dpd_merged_cost"],
              "dpd_hc_over_separate_bases_once": doc["hc_over_separate_bases_once"],
              "dpd_hc_over_merged": doc["hc_over_merged"],
              # each plan made on the D of those before it, as admission makes them
              "dpd_on_d": doc["dpd_on_d_cost"], "dpd_on_d_hc": doc["dpd_on_d_hc_cost"],
              "dpd_on_d_hc_over_separate_bases_once": doc["on_d_hc_over_separate_bases_once"],
              "hc_seconds": doc["hc_seconds"]})
    rows = [{"plan": algo, "step": i, "vertices": v, "edges": e}
            for algo, steps in doc["trace"].items() for i, (v, e) in enumerate(steps)]
    f13.csv(rows)
    before = doc["vertices_before"] + doc["edges_before"]
    merged = doc["vertices_merged"] + doc["edges_merged"]
    after = doc["vertices_after"] + doc["edges_after"]
    f13.json({"experiment": "fig13", "measured": False,
              "vertices": [doc["vertices_before"], doc["vertices_merged"],
                           doc["vertices_after"]],
              "edges": [doc["edges_before"], doc["edges_merged"], doc["edges_after"]],
              "removed": before - after, "removed_by_merging": before - merged,
              "removed_by_plumbing": merged - after,
              "plumbings_applied": doc["plumbings_applied"],
              "on_d": {"vertices": [doc["vertices_on_d"], doc["vertices_on_d_hc"]],
                       "edges": [doc["edges_on_d"], doc["edges_on_d_hc"]]},
              "paper": {"removed": f"more than {PAPER_REMOVED}"}})
    return {"fig12": saving, "fig13": before - after}
