/* The global plan D: a summary (GET /plan), the SVG (GET /plan?format=svg, fetched again only
   when D's version changes) with zoom and a sharing selector that highlights its part. */
"use strict";
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
