/* The machines: health, predicted and measured load against the bound, the largest edges,
   warnings for machines over their bound or lost for good (GET /machines). */
"use strict";
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
        m.healthy ? "healthy" : "unhealthy"), " ", el("span", {className: "kv"},
        (m.origin || "local") + " · " + num(m.cores || 0, 2) + " cores · $" +
        num(m.price_per_hour || 0, 2) + "/h")),
      track, text);
  });
  $("machines").replaceChildren(...(rows.length ? rows : ["no machines"]));
  $("machines-warn").replaceChildren(
    ...ms.filter(m => m.warning).map(m => el("div", {}, "⚠ " + m.warning)),
    ...ms.filter(m => m.lost).map(m => el("div", {}, "⚠ " + m.name + " lost: " + m.lost)));
}
