"""``GET /``: the status page, plain HTML with an inline script (no build step).

The script reads ``/v1/stats`` (the figures) and ``/v1/series`` (one point per
committed group: time, keys, latency) every two seconds and draws two inline SVG
plots, batch latency and keys over time. A token given to the page as ``?token=``
is passed on to those two requests.
"""

HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>seenstore serve</title>
<link rel="icon" href="data:,">
<style>
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse}td{padding:2px 12px 2px 0}td.v{font-family:monospace}
svg{border:1px solid #ccc;background:#fafafa;margin:0 1em 1em 0}
h1{font-size:20px}h2{font-size:15px;margin:1em 0 .3em}
</style></head><body>
<h1>seenstore serve</h1>
<table id="figures"><tbody></tbody></table>
<h2>Batch latency (ms per group commit)</h2>
<svg id="latency" width="640" height="180" data-points="0"></svg>
<h2>Keys over time</h2>
<svg id="keys" width="640" height="180" data-points="0"></svg>
<p id="error" style="color:#a00"></p>
<script>
"use strict";
const tok = new URLSearchParams(location.search).get("token");
const q = tok ? "?token=" + encodeURIComponent(tok) : "";
const ROWS = [["store", f => f.store], ["policy", f => f.policy],
  ["layout", f => f.layout], ["keys", f => f.keys],
  ["groups committed", f => f.groups], ["requests answered", f => f.requests_admitted],
  ["keys offered", f => f.keys_offered], ["keys new", f => f.keys_new],
  ["mean batch latency (ms)", f => (f.batch_latency_mean_s * 1000).toFixed(2)],
  ["queue depth", f => f.queue_depth], ["runs", f => f.store_stats.runs],
  ["bytes on disk", f => f.store_stats.bytes_on_disk_with_bloom],
  ["Bloom false-positive rate", f => f.store_stats.bloom ?
      f.store_stats.bloom.expected_fpr.toExponential(2) : "none"],
  ["pending compaction jobs", f => f.store_stats.pending_compaction.jobs],
  ["max delay (ms)", f => f.max_delay_ms], ["uptime (s)", f => f.uptime_s.toFixed(0)]];
function show(f) {
  const tb = document.querySelector("#figures tbody");
  tb.replaceChildren();
  for (const [name, get] of ROWS) {
    const tr = document.createElement("tr");
    const a = document.createElement("td"), b = document.createElement("td");
    a.textContent = name; b.textContent = String(get(f)); b.className = "v";
    b.id = "fig-" + name.replace(/[^a-z]+/gi, "-");
    tr.append(a, b); tb.append(tr);
  }
}
function plot(id, xs, ys, label) {
  const svg = document.getElementById(id), W = +svg.getAttribute("width"),
        H = +svg.getAttribute("height"), P = 40, NS = "http://www.w3.org/2000/svg";
  svg.replaceChildren();
  svg.setAttribute("data-points", String(ys.length));
  if (!ys.length) return;
  const x0 = Math.min(...xs), x1 = Math.max(...xs) || 1, y1 = Math.max(...ys) || 1;
  const sx = x => P + (W - P - 10) * (x1 > x0 ? (x - x0) / (x1 - x0) : 1);
  const sy = y => H - 20 - (H - 30) * y / y1;
  const line = document.createElementNS(NS, "polyline");
  line.setAttribute("points", xs.map((x, i) => sx(x) + "," + sy(ys[i])).join(" "));
  line.setAttribute("fill", "none"); line.setAttribute("stroke", "#1f77b4");
  svg.append(line);
  for (const [y, t] of [[0, "0"], [y1, y1.toPrecision(3) + " " + label]]) {
    const txt = document.createElementNS(NS, "text");
    txt.setAttribute("x", 2); txt.setAttribute("y", sy(y) + 4);
    txt.setAttribute("font-size", "10"); txt.textContent = t; svg.append(txt);
  }
}
async function tick() {
  try {
    const [f, s] = await Promise.all([fetch("/v1/stats" + q).then(r => r.json()),
                                      fetch("/v1/series" + q).then(r => r.json())]);
    if (f.error) throw new Error(f.error);
    show(f);
    plot("latency", s.t, s.latency_ms, "ms");
    plot("keys", s.t, s.keys, "keys");
    document.getElementById("error").textContent = "";
    document.body.setAttribute("data-loaded", "1");
  } catch (e) {
    document.getElementById("error").textContent = "could not load figures: " + e.message;
  }
}
tick(); setInterval(tick, 2000);
</script></body></html>
"""
