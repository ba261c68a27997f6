"""The staleness dashboard: one self-contained HTML page (no external network) that polls the
API every 2 s and draws, per sharing, staleness over time against its SLA line on a canvas,
with violations, cost so far and tuples moved, plus the global plan as SVG.

Each chart's canvas carries `data-points` (how many snapshots it drew), so a headless browser
test can tell a drawn chart from an empty one.

Must not: fetch anything but this API.
"""

from __future__ import annotations

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>SMILE — staleness</title>
<style>
body{font:14px system-ui,sans-serif;margin:16px;background:#fafafa;color:#222}
h1{font-size:20px;margin:0 0 8px}
.grid{display:flex;flex-wrap:wrap;gap:12px}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px;width:380px}
.card h2{font-size:15px;margin:0 0 4px}
.ok{color:#1a7f37}.bad{color:#c62828}
.kv{font-size:12px;color:#555}
canvas{width:360px;height:140px;border:1px solid #eee}
#plan img{max-width:100%;background:#fff;border:1px solid #ddd}
</style></head>
<body>
<h1>SMILE — sharings and their staleness</h1>
<div class="kv" id="status">loading…</div>
<div class="grid" id="cards"></div>
<h1 style="margin-top:16px">Global plan</h1>
<div id="plan"><img id="planimg" alt="global plan" src="plan?format=svg"></div>
<script>
"use strict";
const cards = document.getElementById("cards");
function card(s) {
  let el = document.getElementById("card-" + s.id);
  if (!el) {
    el = document.createElement("div");
    el.className = "card"; el.id = "card-" + s.id;
    el.innerHTML = '<h2></h2><div class="kv info"></div>' +
      '<canvas width="360" height="140" data-points="0"></canvas>';
    cards.appendChild(el);
  }
  return el;
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
async function refresh() {
  try {
    const sharings = await (await fetch("sharings")).json();
    const live = sharings.filter(s => s.status === "admitted");
    document.getElementById("status").textContent = live.length + " sharings admitted, " +
      (sharings.length - live.length) + " rejected or withdrawn — updated " +
      new Date().toLocaleTimeString();
    for (const s of live) {
      const el = card(s);
      el.querySelector("h2").textContent = s.name;
      const ok = s.sla_ok === false ? '<span class="bad">stale</span>' :
        '<span class="ok">fresh</span>';
      el.querySelector(".info").innerHTML = ok + " · staleness " +
        (s.staleness_s == null ? "?" : s.staleness_s.toFixed(2)) + " s / SLA " + s.sla_s +
        " s · violations " + s.violations + " · cost $" + s.cost_so_far.toFixed(5) +
        " · tuples moved " + s.tuples_moved;
      const h = await (await fetch("sharings/" + s.id + "/history")).json();
      draw(el.querySelector("canvas"), h.points, s.sla_s);
    }
    for (const el of [...cards.children]) {
      if (!live.some(s => "card-" + s.id === el.id)) el.remove();
    }
    document.getElementById("planimg").src = "plan?format=svg&t=" + Date.now();
  } catch (e) {
    document.getElementById("status").textContent = "cannot reach the API: " + e;
  }
}
refresh();
setInterval(refresh, 2000);
</script>
</body></html>
"""
