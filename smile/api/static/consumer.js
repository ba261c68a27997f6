/* What a consumer relies on: the breach alerts raised now and the last changes (GET /alerts),
   and the SLA report of one sharing by hour (GET /sharings/{id}/report), picked in the
   report panel's menu among the admitted sharings the sharings panel last read (the report
   reads every snapshot of the sharing's life: it is asked for every 30 s, not every 2). */
"use strict";
async function refreshAlerts() {
  let a;
  try { a = await get("alerts", false, true); } catch (e) {
    $("alerts-err").textContent = msg(e); return;
  }
  $("alerts-err").textContent = "";
  const row = x => el("tr", {className: x.state === "raised" ? "bad" : ""},
    el("td", {}, x.sharing), el("td", {}, x.state),
    el("td", {}, new Date(x.at).toLocaleTimeString()),
    el("td", {}, x.breach_at ? new Date(x.breach_at).toLocaleTimeString() : "—"),
    el("td", {}, num(x.staleness_s, 1) + " / " + x.sla_s + " s"),
    el("td", {className: "reason"}, x.reason));
  const head = el("thead", {}, el("tr", {}, ...["sharing", "state", "at", "breach predicted",
    "staleness / SLA", "why"].map(h => el("th", {}, h))));
  const recent = a.recent.slice(-10).reverse();
  $("alerts").replaceChildren(
    el("div", {className: a.active.length ? "kv bad" : "kv"}, a.active.length ?
      a.active.length + " sharing(s) predicted to breach their SLA: " +
      a.active.map(x => x.sharing).join(", ") : "No breach predicted."),
    ...(recent.length ? [el("table", {className: "rej"}, head,
      el("tbody", {}, ...recent.map(row)))] : []));
}
let reportPick = "", reportAt = 0, reportOf = "";
async function refreshReport() {  /* every 30 s, or at once when another sharing is picked */
  const pick = $("report-select"), live = sharings.filter(s => s.status === "admitted");
  const want = live.map(s => String(s.id)).join(",");
  if (pick.dataset.ids !== want) {
    pick.replaceChildren(el("option", {value: ""}, "— pick a sharing —"),
      ...live.map(s => el("option", {value: String(s.id)}, s.name)));
    pick.dataset.ids = want;
    pick.value = live.some(s => String(s.id) === reportPick) ? reportPick : "";
  }
  reportPick = pick.value;
  if (!reportPick) { $("report").replaceChildren(); return; }
  if (reportPick === reportOf && Date.now() - reportAt < 30000) return;
  reportOf = reportPick; reportAt = Date.now();
  let r;
  try { r = await get("sharings/" + reportPick + "/report", false, true); } catch (e) {
    $("report-err").textContent = msg(e); return;
  }
  $("report-err").textContent = "";
  const cells = f => [num(100 * (f.within_sla ?? NaN), 2) + " %", num(f.staleness_s.p50, 2),
    num(f.staleness_s.p95, 2), num(f.staleness_s.p99, 2), num(f.staleness_s.max, 2),
    String(f.violations), String(f.late_tuples), "$" + num(f.resource_cost, 5),
    "$" + num(f.penalty_cost, 5), String(f.snapshots)].map(v => el("td", {}, v));
  const head = el("thead", {}, el("tr", {}, ...["hour", "within SLA", "p50 s", "p95 s",
    "p99 s", "max s", "violations", "late tuples", "resources", "penalties",
    "snapshots"].map(h => el("th", {}, h))));
  const body = el("tbody", {},
    el("tr", {className: "sub"}, el("td", {}, "all"), ...cells(r)),
    ...r.hours.map(h => el("tr", {}, el("td", {}, new Date(h.from).toLocaleString() +
      (h.rolled_up ? " (rolled up)" : "")), ...cells(h))));
  $("report").replaceChildren(el("div", {className: "kv"}, r.name + ": SLA " + r.sla_s +
    " s, from the auditor's snapshots since " + new Date(r.from).toLocaleString()),
    el("table", {className: "rej"}, head, body));
}
$("report-select").addEventListener("change", () => {
  reportPick = $("report-select").value; task("report", refreshReport);
});
