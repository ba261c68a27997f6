/* The dashboard's shared parts, loaded first: the bearer token, GET requests to this API (one
   at a time, the cards' first), building elements, one refresh per panel at a time. The other
   files use these globals; main.js, loaded last, starts the polling. */
"use strict";
const $ = id => document.getElementById(id);
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

/* One request at a time, the cards' first: an open page asks the API one thing at a time
   (each request holds a catalog connection while it is answered), and the staleness charts are
   drawn before the slower machines and plan are asked for. The API answers concurrent requests
   (tests/test_security.py polls it from many clients at once); this is about load and order.
   A request that hangs is aborted after 15 s. */
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
