/* The status line, the rejected and withdrawn sharings, and a card per admitted sharing
   charting its staleness against its SLA (GET /sharings, /sharings/{id}/history). */
"use strict";
const cards = $("cards");
let sharings = [];
function card(s) {
  let c = $("card-" + s.id);
  if (!c) {
    c = document.createElement("div");
    c.className = "card"; c.id = "card-" + s.id;
    c.innerHTML = '<h2><span class="nm"></span><a class="pl" title="show in the plan">in plan' +
      '</a></h2><div class="kv info"></div><div class="err"></div>' +
      '<canvas width="360" height="140" data-points="0"></canvas>';
    cards.appendChild(c);
  }
  return c;
}
function draw(canvas, points, sla) {
  const ctx = canvas.getContext("2d"), W = canvas.width, H = canvas.height, pad = 24;
  ctx.clearRect(0, 0, W, H);
  const ys = points.map(p => p.staleness_s);
  const top = Math.max(sla * 1.3, ...ys, 0.001);
  const t0 = points.length ? Date.parse(points[0].at) : 0;
  const t1 = points.length ? Math.max(Date.parse(points[points.length - 1].at), t0 + 1) : 1;
  const x = t => pad + (W - pad - 4) * (t - t0) / (t1 - t0);
  const y = v => H - pad - (H - pad - 6) * v / top;
  ctx.strokeStyle = "#bbb"; ctx.beginPath();
  ctx.moveTo(pad, 4); ctx.lineTo(pad, H - pad); ctx.lineTo(W - 4, H - pad); ctx.stroke();
  ctx.fillStyle = "#555"; ctx.font = "10px sans-serif";
  ctx.fillText(top.toFixed(1) + " s", 2, 12); ctx.fillText("0", 12, H - pad);
  ctx.fillText("time →", W - 44, H - 8);
  ctx.strokeStyle = "#c62828"; ctx.setLineDash([5, 3]); ctx.beginPath();
  ctx.moveTo(pad, y(sla)); ctx.lineTo(W - 4, y(sla)); ctx.stroke(); ctx.setLineDash([]);
  ctx.fillStyle = "#c62828"; ctx.fillText("SLA " + sla + " s", W - 70, y(sla) - 3);
  ctx.strokeStyle = "#1565c0"; ctx.lineWidth = 1.5; ctx.beginPath();
  points.forEach((p, i) => {
    const px = x(Date.parse(p.at)), py = y(p.staleness_s);
    if (i === 0) ctx.moveTo(px, py); else ctx.lineTo(px, py);
  });
  ctx.stroke(); ctx.lineWidth = 1;
  ctx.fillStyle = "#1565c0";
  points.forEach(p => { ctx.beginPath();
    ctx.arc(x(Date.parse(p.at)), y(p.staleness_s), 2, 0, 7); ctx.fill(); });
  canvas.dataset.points = String(points.length);
}
// its MV's pushes by path: deltas applied, or recomputed (the time model chose)
function pathsText(p) {
  if (!p || (p.incremental ?? 0) + (p.recompute ?? 0) === 0) return "";
  return " · pushes " + (p.incremental ?? 0) + " incremental / " + (p.recompute ?? 0) +
    " recomputed";
}
function fillCard(s) {
  const c = card(s);
  c.querySelector(".nm").textContent = s.name;
  c.querySelector(".pl").href = "#" + encodeURIComponent(s.name);
  c.classList.toggle("stale", s.sla_ok === false);
  const info = c.querySelector(".info");
  info.replaceChildren(
    s.sla_ok === false ? el("span", {className: "bad"}, "stale") :
      s.sla_ok === true ? el("span", {className: "ok"}, "fresh") : el("span", {}, "no reading"),
    " · staleness " + num(s.staleness_s, 2) + " s / SLA " + s.sla_s + " s · violations " +
    (s.violations ?? "—") + " · cost $" + num(s.cost_so_far, 5) + " · tuples moved " +
    (s.tuples_moved ?? "—") + " · critical path " + num(s.cp_s, 3) + " s · work " +
    num(s.work_s, 1) + " s" + pathsText(s.pushes_by_path),
    ...(s.degraded ? [" · ", el("span", {className: "bad"}, s.degraded)] : []));
  info.title = s.sql || "";
  return c;
}
let rejectedKey = null;
function renderRejected(all) {
  const rej = all.filter(s => s.status === "rejected");
  const wd = all.filter(s => s.status === "withdrawn");
  const inst = all.filter(s => s.status === "installing");
  const failed = all.filter(s => s.status === "failed");
  const key = JSON.stringify([rej, wd, inst, failed].map(l => l.map(s =>
    [s.id, s.name, s.sla_s, s.reason, s.withdrawn_at])));
  if (key === rejectedKey) return;
  rejectedKey = key;
  const box = $("rejected");
  const head = el("div", {className: failed.length ? "kv bad" : "kv"},
    (failed.length ? failed.length + " failed · " : "") + rej.length + " rejected · " +
    wd.length + " withdrawn" +
    (inst.length ? " · installing: " + inst.map(s => s.name).join(", ") : ""));
  if (!rej.length && !wd.length && !failed.length) {
    box.replaceChildren(head, el("div", {className: "kv"}, "No sharing has been rejected or " +
      "withdrawn."));
    return;
  }
  const row = (s, cls, extra) => el("tr", {className: cls},
    el("td", {title: s.sql || ""}, s.name), el("td", {}, s.sla_s + " s"),
    el("td", {className: "reason"}, (s.reason || "(no reason recorded)") + (extra || "")));
  const body = el("tbody");
  if (failed.length) {  // pushed no more: the database refused their work (withdraw, fix, resubmit)
    body.append(el("tr", {className: "sub"}, el("td", {colSpan: 3}, "failed")));
    failed.forEach(s => body.append(row(s, "bad")));
    body.append(el("tr", {className: "sub"}, el("td", {colSpan: 3}, "rejected")));
  }
  if (rej.length) rej.forEach(s => body.append(row(s, "")));
  else body.append(el("tr", {}, el("td", {colSpan: 3, className: "kv"}, "none rejected")));
  if (wd.length) {
    body.append(el("tr", {className: "sub"}, el("td", {colSpan: 3}, "withdrawn")));
    wd.forEach(s => body.append(row(s, "wd", s.withdrawn_at ?
      " — withdrawn " + new Date(s.withdrawn_at).toLocaleString() : " — withdrawn")));
  }
  box.replaceChildren(head, el("table", {className: "rej"},
    el("colgroup", {}, el("col", {style: "width:200px"}), el("col", {style: "width:70px"}),
      el("col")),
    el("thead", {}, el("tr", {}, el("th", {}, "name"), el("th", {}, "SLA"),
      el("th", {}, "reason"))), body));
}
async function refreshSharings() {
  let all;
  try {
    all = await get("sharings");
    if (!Array.isArray(all)) throw new Error("GET /sharings did not return a list");
  } catch (e) {
    $("status").className = "kv bad";
    $("status").textContent = "cannot read the sharings: " + msg(e) + " — retrying every 2 s";
    $("rejected-err").textContent = msg(e);
    $("rejected-panel").classList.add("old");
    return;
  }
  sharings = all;
  const live = all.filter(s => s.status === "admitted");
  const count = st => all.filter(s => s.status === st).length;
  $("status").className = "kv";
  $("status").textContent = live.length + " sharings admitted, " + count("rejected") +
    " rejected, " + count("withdrawn") + " withdrawn" +
    (count("installing") ? ", " + count("installing") + " installing" : "") +
    " — updated " + new Date().toLocaleTimeString();
  try {
    renderRejected(all);
    $("rejected-err").textContent = "";
    $("rejected-panel").classList.remove("old");
  } catch (e) { $("rejected-err").textContent = msg(e); }
  for (const s of live) fillCard(s);
  for (const c of [...cards.children]) {
    if (!live.some(s => "card-" + s.id === c.id)) c.remove();
  }
  selInfo();
  await Promise.all(live.map(async s => {
    const c = card(s), err = c.querySelector(".err");
    try {
      const h = await get("sharings/" + s.id + "/history");
      draw(c.querySelector("canvas"), h.points || [], s.sla_s);
      err.textContent = "";
    } catch (e) { err.textContent = msg(e); }
  }));
}
