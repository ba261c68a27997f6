"""The dashboard: one self-contained HTML page served at `/dashboard` that polls this API every
2 s and shows, top to bottom:

- a status line: how many sharings are admitted, failed, rejected, withdrawn and installing;
- machines (`GET /machines`): healthy or not, and per machine bars of predicted and measured
  load against its admission bound (a marker line), with the numbers and predicted ÷ measured,
  a table of its largest edges (predicted beside measured, and the sharings each serves) to
  open, and above them a warning for each machine whose load over the last five minutes is
  over its bound, naming the sharings at risk;
- rejected sharings (`GET /sharings`): name, SLA and why they were rejected, with withdrawn
  ones greyed below;
- per admitted sharing a card (inside the element with id `cards`) charting staleness over time
  (`GET /sharings/{id}/history`) against its SLA line on a canvas, with violations, cost so far
  and tuples moved;
- under the heading "Global plan": a one-line summary of D (`GET /plan`: version, sharings,
  vertices, edges) and D drawn as SVG (`GET /plan?format=svg`), inlined into the page in a
  scrollable box with zoom buttons and a sharing selector (also set by a URL hash such as
  `#S5`) that highlights that sharing's vertices and edges, found through the JSON's SHR, and
  dims the others. The SVG is re-fetched only when the plan's version changes.

Every request carries the consumer's bearer token: typed into the token box at the top (kept in
the browser's localStorage) or given once as `?token=…` in the address, which the page stores and
removes from the address bar. An admin's token shows everything; a consumer's shows its own
sharings, the machines, and instead of the global plan a line saying it is shown to admins.
The page itself holds no data and is served without a token.

A route that fails shows its error text in its own panel; the other panels and the polling go
on. Requests go one at a time, the cards' first (concurrent requests can make the API answer
500, and a slow /machines must not hold up the charts); one with no answer in 15 s is aborted.

Each chart's canvas carries `data-points` (how many snapshots it drew), so a headless browser
test can tell a drawn chart from an empty one; between `id="cards"` and the "Global plan"
heading there is nothing but the admitted sharings' cards.

Must not: fetch anything but this API (no external network, fonts, scripts or libraries), or
change anything through it (GET requests only).
"""

from __future__ import annotations

PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>SMILE — staleness</title>
<style>
body{font:14px system-ui,sans-serif;margin:16px;background:#fafafa;color:#222}
h1{font-size:20px;margin:0 0 8px}
h2.sec{font-size:15px;margin:0 0 6px}
.grid{display:flex;flex-wrap:wrap;gap:12px}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px;width:380px}
.card.stale{border-color:#e57373}
.card h2{font-size:15px;margin:0 0 4px}
.card h2 a{font-size:11px;font-weight:normal;margin-left:6px;color:#1565c0}
.ok{color:#1a7f37}.bad{color:#c62828}.warn{color:#b26a00}
.kv{font-size:12px;color:#555}
.err{color:#c62828;font-size:12px;white-space:pre-wrap;overflow-wrap:anywhere}
.err:empty{display:none}
canvas{width:360px;height:140px;border:1px solid #eee}
.panel{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px 10px;margin:10px 0}
.panel.old>div:not(.err){opacity:.5}
.mrow{display:grid;grid-template-columns:120px 380px 1fr;gap:12px;align-items:center;
  padding:5px 0;border-top:1px solid #f0f0f0}
.mname{font-weight:600}
.track{position:relative;height:26px;background:#f3f3f3;border-radius:3px}
.bar{position:absolute;left:0;height:10px;border-radius:2px;min-width:1px}
.bar.pred{top:3px;background:#4e79a7}.bar.meas{top:14px;background:#f28e2b}
.bar.over{background:#c62828}
.bound{position:absolute;top:-3px;bottom:-3px;width:0;border-left:2px solid #222}
.mtext{font-size:12px;font-variant-numeric:tabular-nums}
.mtext details{margin-top:2px}.mtext summary{cursor:pointer;color:#555}
table.edges{border-collapse:collapse;margin-top:2px}
.edges td,.edges th{padding:1px 6px;text-align:left;font-size:12px}
.edges td.n{text-align:right}
#machines-warn div{margin:3px 0;font-weight:600}
.mrow.overrow{background:#fff3f3}
.legend{font-size:12px;color:#555;margin:2px 0 4px}
.sw{display:inline-block;width:12px;height:8px;border-radius:2px;margin:0 3px 0 8px}
table.rej{border-collapse:collapse;width:100%;table-layout:fixed}
.rej th,.rej td{border-bottom:1px solid #eee;padding:4px 6px;text-align:left;vertical-align:top}
.rej th{font-size:12px;color:#555}
.rej td{white-space:normal;overflow-wrap:anywhere}
.rej tr.wd td{color:#9e9e9e}
.rej tr.sub td{font-size:12px;color:#777;font-weight:600;padding-top:10px}
.toolbar{display:flex;flex-wrap:wrap;gap:6px;align-items:center;margin:6px 0}
.toolbar button{min-width:30px}
#planbox{max-height:70vh;overflow:auto;background:#fff;border:1px solid #ddd}
#planbox svg{display:block}
#planbox svg.sel g{opacity:.18}
#planbox svg.sel g.hl{opacity:1}
#planbox svg.sel g.hl rect{stroke:#d81b60;stroke-width:2px}
#planbox svg.sel g.mvsel rect{fill:#fde3ee;stroke-width:3px}
#planbox svg.sel path{stroke-opacity:.05}
#planbox svg.sel path.hl{stroke-opacity:.95;stroke-width:2px}
#planbox g{cursor:pointer}
</style></head>
<body>
<h1>SMILE — sharings and their staleness</h1>
<div class="kv" id="auth">token <input id="token" type="password" size="48"
 autocomplete="off"> <button id="token-use">use</button> <span id="auth-msg"></span></div>
<div class="kv" id="status">loading…</div>
<section class="panel" id="machines-panel"><h2 class="sec">Machines</h2>
<div class="legend">load in core-seconds per second:<span class="sw" style="background:#4e79a7">
</span>predicted (the global plan at the current rates)<span class="sw" style="background:#f28e2b">
</span>measured (its operators, last minute)<span class="sw" style="background:#222;width:2px">
</span> bound (what admission holds it to; on one box its share, which it may pass
while the machines together keep within theirs); bars share one scale</div>
<div class="err" id="machines-err"></div><div class="err" id="machines-warn"></div>
<div id="machines">loading…</div></section>
<section class="panel" id="rejected-panel"><h2 class="sec">Rejected and withdrawn sharings</h2>
<div class="err" id="rejected-err"></div><div id="rejected">loading…</div></section>
<h2 class="sec" style="margin-top:12px">Admitted sharings</h2>
<div class="grid" id="cards"></div>
<h1 id="planhead" style="margin-top:16px">Global plan</h1>
<div class="kv" id="plan-summary">loading…</div>
<div class="toolbar">
<button id="zoom-out" title="zoom out">−</button><button id="zoom-in" title="zoom in">+</button>
<button id="zoom-fit">fit width</button><button id="zoom-100">100%</button>
<span class="kv" id="zoom-label"></span>
<label style="margin-left:12px">sharing <select id="shr-select">
<option value="">— none —</option></select></label>
<span class="kv" id="sel-info"></span></div>
<div class="err" id="plan-err"></div>
<div id="planbox"><div class="kv" style="padding:8px">loading…</div></div>
<script>
"use strict";
const $ = id => document.getElementById(id);
const cards = $("cards");
const num = (v, d) => (typeof v === "number" && isFinite(v)) ? v.toFixed(d) : "—";
const msg = e => (e && e.message) ? e.message : String(e);
/* The bearer token: ?token=… once (then dropped from the address), else localStorage. */
const KEY = "smile.token";
{
  const q = new URLSearchParams(location.search);
  if (q.get("token")) {
    localStorage.setItem(KEY, q.get("token"));
    q.delete("token");
    history.replaceState(null, "", location.pathname + (q.toString() ? "?" + q : "") +
      location.hash);
  }
}
$("token").value = localStorage.getItem(KEY) || "";
$("token-use").addEventListener("click", () => {
  localStorage.setItem(KEY, $("token").value.trim());
  tick();
});

/* One request at a time, the cards' first: the API is not safe under concurrent requests
   (they can deadlock on the catalog and answer 500), and a slow /machines must not hold up
   the staleness charts. A request that hangs is aborted after 15 s. */
const queue = [[], []];
let pumping = false;
function get(path, asText, low) {
  return new Promise((resolve, reject) => {
    queue[low ? 1 : 0].push({path, asText, resolve, reject});
    pump();
  });
}
async function pump() {
  if (pumping) return;
  pumping = true;
  try {
    for (;;) {
      const job = queue[0].shift() || queue[1].shift();
      if (!job) break;
      try { job.resolve(await fetchOne(job.path, job.asText)); } catch (e) { job.reject(e); }
      await new Promise(r => setTimeout(r, 0));  // let the answer queue its follow-ups first
    }
  } finally { pumping = false; }
}
async function fetchOne(path, asText) {
  const ctl = new AbortController(), timer = setTimeout(() => ctl.abort(), 15000);
  try {
    let r;
    try {
      const token = localStorage.getItem(KEY) || "";
      r = await fetch(path, {cache: "no-store", signal: ctl.signal,
                             headers: token ? {"Authorization": "Bearer " + token} : {}});
    } catch (e) {
      throw new Error("GET /" + path + " failed: " + (ctl.signal.aborted ?
        "no answer within 15 s" : msg(e)));
    }
    if (r.status === 401) {
      $("auth-msg").textContent = "enter a valid token (smile consumer create NAME, or the " +
        "admin's in <state_dir>/admin.token)";
    } else $("auth-msg").textContent = "";
    if (!r.ok) {
      let body = "";
      try { body = (await r.text()).slice(0, 400); } catch (e) { body = ""; }
      throw new Error("GET /" + path + " failed: HTTP " + r.status + (body ? ": " + body : ""));
    }
    return await (asText ? r.text() : r.json());
  } finally { clearTimeout(timer); }
}
function el(tag, props, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "style") e.style.cssText = v; else if (k in e) e[k] = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
}
const busy = {};
async function task(name, fn) {  // one request chain per panel at a time, never stacked
  if (busy[name]) return;
  busy[name] = true;
  try { await fn(); } catch (e) { console.error(name, e); } finally { busy[name] = false; }
}

/* ---- sharings: status line, rejected and withdrawn table, cards ---------------------------- */
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
    num(s.work_s, 1) + " s",
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

/* ---- machines ------------------------------------------------------------------------------ */
const openEdges = new Set();  // machines whose edge table is open (kept across refreshes)
async function refreshMachines() {
  let ms;
  try {
    ms = await get("machines", false, true);
    if (!Array.isArray(ms)) throw new Error("GET /machines did not return a list");
  } catch (e) {
    $("machines-err").textContent = msg(e) + " — retrying every 2 s";
    $("machines-panel").classList.add("old");
    if ($("machines").textContent === "loading…") $("machines").textContent = "";
    return;
  }
  $("machines-err").textContent = "";
  $("machines-panel").classList.remove("old");
  const vals = ms.flatMap(m => [m.bound, m.predicted_load, m.measured_load])
    .filter(v => typeof v === "number" && isFinite(v));
  const top = Math.max(...vals, 1e-6) * 1.1;
  const pct = v => (typeof v === "number" ? Math.max(0, Math.min(100, 100 * v / top)) : 0) + "%";
  const rows = ms.map(m => {
    const b = m.bound, p = m.predicted_load, q = m.measured_load;
    const over = v => typeof v === "number" && typeof b === "number" && v > b ? " over" : "";
    const track = el("div", {className: "track", title: "scale 0 … " + num(top, 3) +
      " core-s/s"},
      el("div", {className: "bar pred" + over(p), style: "width:" + pct(p)}),
      el("div", {className: "bar meas" + over(q), style: "width:" + pct(q)}));
    if (typeof b === "number") track.append(el("div", {className: "bound", style: "left:" +
      pct(b)}));
    let ratio = "—", rcls = "";
    if (typeof p === "number" && typeof q === "number" && q > 0) {
      const r = p / q;
      ratio = r.toFixed(2);
      rcls = (r > 2 || r < 0.5) ? "warn" : "";
    }
    const ago = m.last_heartbeat_s_ago;
    const beat = typeof ago === "number" ? " · heartbeat load " + num(m.load, 3) + ", " +
      ago.toFixed(1) + " s ago" + (ago < -0.5 ? " (clock skew?)" : "") : " · no heartbeat yet";
    const text = el("div", {className: "mtext"}, m.name + " predicted " + num(p, 3) +
      " · measured " + num(q, 3) + " · last 5 min " + num(m.sustained_load, 3) + " · bound " +
      num(b, 3) + " core-s/s · predicted ÷ measured ",
      el("span", {className: rcls}, ratio), el("span", {className: "kv"}, beat));
    const edges = Array.isArray(m.edges) ? m.edges : [];
    if (edges.length) {  // the edges with the largest loads: where a mismatch comes from
      const det = el("details", {open: openEdges.has(m.name)},
        el("summary", {}, "its " + edges.length + " largest edges"),
        el("table", {className: "edges"}, el("tr", {}, el("th", {}, "vertex written"),
          el("th", {}, "edge"), el("th", {}, "predicted"), el("th", {}, "measured"),
          el("th", {}, "sharings")),
          ...edges.map(e => el("tr", {}, el("td", {}, e.vertex),
            el("td", {}, e.kind || "(gone from the plan)"), el("td", {className: "n"},
            num(e.predicted, 4)), el("td", {className: "n"}, num(e.measured, 4)),
            el("td", {}, (e.sharings || []).join(", "))))));
      det.addEventListener("toggle", () => det.open ? openEdges.add(m.name)
        : openEdges.delete(m.name));
      text.append(det);
    }
    return el("div", {className: "mrow" + (m.over_bound ? " overrow" : "")},
      el("div", {className: "mname"}, el("span", {className: m.healthy ? "ok" : "bad"},
        "● "), m.name, " ", el("span", {className: "kv " + (m.healthy ? "ok" : "bad")},
        m.healthy ? "healthy" : "unhealthy")),
      track, text);
  });
  $("machines").replaceChildren(...(rows.length ? rows : ["no machines"]));
  $("machines-warn").replaceChildren(...ms.filter(m => m.warning).map(m =>
    el("div", {}, "⚠ " + m.warning)));
}

/* ---- the global plan ----------------------------------------------------------------------- */
let plan = null, svgVersion = null, natW = 0, natH = 0, zoom = 1, fitMode = false;
let boxes = new Map(), paths = [];
let selected = decodeURIComponent(location.hash.slice(1));
const key = (x, y) => Math.round(x) + "," + Math.round(y);
function currentZoom() {
  const box = $("planbox");
  return fitMode && natW ? Math.max(0.05, (box.clientWidth - 2) / natW) : zoom;
}
function applyZoom() {
  const svg = $("planbox").querySelector("svg");
  if (!svg || !natW) return;
  const box = $("planbox"), z = currentZoom();
  const oldW = svg.getBoundingClientRect().width || natW * z;
  const oldH = svg.getBoundingClientRect().height || natH * z;
  const cx = (box.scrollLeft + box.clientWidth / 2) / oldW;
  const cy = (box.scrollTop + box.clientHeight / 2) / oldH;
  svg.style.width = (natW * z) + "px"; svg.style.height = (natH * z) + "px";
  box.scrollLeft = cx * natW * z - box.clientWidth / 2;
  box.scrollTop = cy * natH * z - box.clientHeight / 2;
  $("zoom-label").textContent = Math.round(z * 100) + "%" + (fitMode ? " (fit width)" : "");
}
function setZoom(z) { zoom = Math.max(0.1, Math.min(8, z)); fitMode = false; applyZoom(); }
$("zoom-in").onclick = () => setZoom(currentZoom() * 1.25);
$("zoom-out").onclick = () => setZoom(currentZoom() / 1.25);
$("zoom-100").onclick = () => setZoom(1);
$("zoom-fit").onclick = () => { fitMode = true; applyZoom(); };
window.addEventListener("resize", () => { if (fitMode) applyZoom(); });

function insertSvg(text) {
  const doc = new DOMParser().parseFromString(text, "image/svg+xml");
  const root = doc.documentElement;
  if (root.nodeName !== "svg" || doc.getElementsByTagName("parsererror").length) {
    throw new Error("GET /plan?format=svg did not return SVG that parses");
  }
  const svg = document.importNode(root, true);
  const vb = svg.viewBox && svg.viewBox.baseVal;
  natW = parseFloat(svg.getAttribute("width")) || (vb ? vb.width : 0) || 1000;
  natH = parseFloat(svg.getAttribute("height")) || (vb ? vb.height : 0) || 1000;
  const box = $("planbox"), old = box.querySelector("svg");
  const sx = box.scrollLeft, sy = box.scrollTop;
  boxes = new Map(); paths = [];
  const left = new Map(), right = new Map();
  for (const g of svg.querySelectorAll("g")) {  // one group per vertex: <title>, <rect>, texts
    const t = g.querySelector("title"), r = g.querySelector("rect");
    if (!t || !r) continue;
    const lines = t.textContent.split("\n");
    const name = lines[0].trim();
    const texts = g.querySelectorAll("text");
    const sub = texts.length > 1 ? texts[1].textContent : "";
    g.dataset.v = name;
    g.dataset.mv = sub.startsWith("MV ") ? sub.slice(3).split(" · ")[0] : "";
    boxes.set(name, g);
    const x = +r.getAttribute("x"), y = +r.getAttribute("y");
    const w = +r.getAttribute("width"), h = +r.getAttribute("height");
    left.set(key(x, y + h / 2), name); right.set(key(x + w, y + h / 2), name);
    g.addEventListener("click", () => {
      const shr = (lines[1] || "").replace(/^SHR:\s*/, "");
      $("sel-info").textContent = name + " — serves " + (shr || "no sharing") +
        (g.dataset.mv ? " · MV of " + g.dataset.mv : "");
    });
  }
  for (const p of svg.querySelectorAll("path")) {  // edges: from a box's side to a box's left
    const n = (p.getAttribute("d") || "").match(/-?\d+(?:\.\d+)?/g);
    if (!n || n.length < 4) continue;
    const a = key(+n[0], +n[1]), b = key(+n[n.length - 2], +n[n.length - 1]);
    p.dataset.to = left.get(b) || "";
    p.dataset.from = right.get(a) || left.get(a) || "";
    paths.push(p);
  }
  if (old) old.replaceWith(svg); else box.replaceChildren(svg);
  applyZoom();
  box.scrollLeft = sx; box.scrollTop = sy;
}
function selInfo() {
  const info = $("sel-info");
  if (!selected) { info.textContent = "pick a sharing to highlight its part of the plan"; return; }
  if (!plan) { info.textContent = ""; return; }
  if (!plan.sharings.includes(selected)) {
    info.textContent = selected + " is not in the current plan"; return;
  }
  const vs = plan.vertices.filter(v => v.shr.includes(selected));
  const es = plan.edges.filter(e => e.shr.includes(selected));
  const per = {};
  vs.forEach(v => { per[v.machine] = (per[v.machine] || 0) + 1; });
  const drawn = vs.filter(v => boxes.has(v.vertex)).length;
  const s = sharings.find(x => x.name === selected);
  let mv = "";
  for (const [name, g] of boxes) {
    if (g.dataset.mv.split(", ").includes(selected)) mv = " · MV " + name;
  }
  info.textContent = selected + ": " + vs.length + " of " + plan.vertices.length +
    " vertices (" + Object.entries(per).map(([m, c]) => m + " " + c).join(", ") + "), " +
    es.length + " of " + plan.edges.length + " edges" + mv +
    (boxes.size && drawn < vs.length ? " · " + (vs.length - drawn) + " not in the drawing" : "") +
    (s ? " · SLA " + s.sla_s + " s" : "");
  info.title = s ? s.sql : "";
}
function highlight(scroll) {
  const svg = $("planbox").querySelector("svg");
  selInfo();
  if (!svg) return;
  const on = new Set(), edgeOn = new Set();
  const sel = selected && plan && plan.sharings.includes(selected) ? selected : "";
  if (sel) {
    plan.vertices.forEach(v => { if (v.shr.includes(sel)) on.add(v.vertex); });
    plan.edges.forEach(e => {
      if (e.shr.includes(sel)) e.from.forEach(f => edgeOn.add(f + "\u0000" + e.to));
    });
  }
  svg.classList.toggle("sel", !!sel);
  let first = null, mvBox = null;
  for (const [name, g] of boxes) {
    const hl = on.has(name);
    g.classList.toggle("hl", hl);
    const isMv = !!sel && g.dataset.mv.split(", ").includes(sel);
    g.classList.toggle("mvsel", isMv);
    if (hl && !first) first = g;
    if (isMv) mvBox = g;
  }
  for (const p of paths) {
    const to = p.dataset.to, from = p.dataset.from;
    p.classList.toggle("hl", !!sel && !!to &&
      (from ? edgeOn.has(from + "\u0000" + to) : on.has(to)));
  }
  const target = mvBox || first;
  if (scroll && target) {
    const box = $("planbox"), br = box.getBoundingClientRect();
    const tr = target.getBoundingClientRect();
    box.scrollTop += tr.top - br.top - box.clientHeight / 3;
    box.scrollLeft += tr.left - br.left - 40;
  }
}
function choose(name, scroll) {
  selected = name;
  $("shr-select").value = plan && plan.sharings.includes(name) ? name : "";
  highlight(scroll);
}
$("shr-select").onchange = e => {
  const v = e.target.value;
  history.replaceState(null, "", v ? "#" + encodeURIComponent(v) :
    location.pathname + location.search);
  choose(v, true);
};
window.addEventListener("hashchange", () => {
  choose(decodeURIComponent(location.hash.slice(1)), true);
  if (selected) $("planhead").scrollIntoView();
});
let optionsKey = null, firstPlan = true;
async function refreshPlan() {
  let p;
  try {
    p = await get("plan", false, true);
    if (!p || !Array.isArray(p.vertices) || !Array.isArray(p.edges)) {
      throw new Error("GET /plan did not return a plan");
    }
  } catch (e) {
    if (msg(e).includes("HTTP 403")) {  // a consumer's token: D is shown to admins only
      $("plan-err").textContent = "";
      $("plan-summary").textContent = "the global plan is shown to admins";
      $("planbox").replaceChildren();
      return;
    }
    $("plan-err").textContent = msg(e) + " — retrying every 2 s";
    if ($("plan-summary").textContent === "loading…") $("plan-summary").textContent = "";
    return;
  }
  plan = p;
  const ok = JSON.stringify(p.sharings);
  if (ok !== optionsKey) {
    optionsKey = ok;
    const counts = {};
    p.vertices.forEach(v => v.shr.forEach(s => { counts[s] = (counts[s] || 0) + 1; }));
    $("shr-select").replaceChildren(el("option", {value: ""}, "— none —"),
      ...p.sharings.map(s => el("option", {value: s}, s + " (" + (counts[s] || 0) +
        " vertices)")));
    $("shr-select").value = p.sharings.includes(selected) ? selected : "";
  }
  let err = "";
  if (p.version !== svgVersion) {  // the big SVG only when D changed
    try {
      insertSvg(await get("plan?format=svg", true, true));
      svgVersion = p.version;
    } catch (e) {
      err = msg(e) + " — retrying every 2 s";
      if (!$("planbox").querySelector("svg")) $("planbox").replaceChildren();
    }
  }
  $("plan-err").textContent = err;
  const per = {};
  p.vertices.forEach(v => { per[v.machine] = (per[v.machine] || 0) + 1; });
  $("plan-summary").textContent = "version " + p.version + " · " + p.sharings.length +
    " sharings · " + p.vertices.length + " vertices · " + p.edges.length + " edges · " +
    "vertices per machine: " + Object.entries(per).sort().map(([m, c]) => m + " " + c)
    .join(", ") + (svgVersion !== null && svgVersion !== p.version ?
      " · the drawing below is still of version " + svgVersion : "");
  if (firstPlan && svgVersion !== null) {  // first drawing: honour a #S5 in the URL
    firstPlan = false;
    highlight(!!selected);
    if (selected) $("planhead").scrollIntoView();
  } else highlight(false);
}

function tick() {
  task("sharings", refreshSharings);
  task("machines", refreshMachines);
  task("plan", refreshPlan);
}
tick();
setInterval(tick, 2000);
</script>
</body></html>
"""
