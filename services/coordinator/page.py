"""The coordinator's live HTML status page: a static page that polls ``/status`` once a second.

Kept as one self-contained string (no templates, no assets) so the coordinator serves it from
any working directory and the image needs nothing extra.
"""

STATUS_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>hastream coordinator: {{title}}</title>
<style>
 body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
 h1 { font-size: 1.3em; } h2 { font-size: 1.05em; margin-top: 1.5em; }
 table { border-collapse: collapse; min-width: 40em; }
 th, td { padding: .25em .8em; border-bottom: 1px solid #ddd; text-align: left; }
 th { background: #f4f4f4; }
 .STABLE { color: #127a12; font-weight: 600; } .UPSTREAM_FAILURE { color: #b36b00; font-weight: 600; }
 .STABILIZATION { color: #1f5fbf; font-weight: 600; } .RECOVERING { color: #8a2be2; font-weight: 600; } .FAILED { color: #c01818; font-weight: 600; }
 .STARTING { color: #888; font-weight: 600; }
 .muted { color: #888; } #err { color: #c01818; }
</style></head>
<body>
<h1>hastream coordinator &mdash; <span id="spec">{{title}}</span></h1>
<div class="muted" id="meta">loading&hellip;</div><div id="err"></div>
<div id="counts"></div>
<h2>Node replicas</h2>
<table><thead><tr><th>node</th><th>partition</th><th>replica</th><th>scheme</th><th>role</th><th>state</th><th>last heartbeat</th>
<th>state since</th><th>stable out</th><th>input lag</th><th>pid</th><th>reconciliation</th></tr></thead><tbody id="replicas"></tbody></table>
<h2>Waiting requests</h2>
<table><thead><tr><th>replica</th><th>waiting</th><th>stagger</th></tr></thead><tbody id="pending"></tbody></table>
<h2>Grants held</h2>
<table><thead><tr><th>replica</th><th>held</th><th>lease left</th><th>stagger</th></tr></thead><tbody id="grants"></tbody></table>
<script>
function secs(ms) { return ms === null || ms === undefined ? "never" : (ms / 1000).toFixed(1) + " s"; }
function cell(text, cls) { const td = document.createElement("td"); td.textContent = text; if (cls) td.className = cls; return td; }
function fill(id, rows, cols) {
  const body = document.getElementById(id); body.replaceChildren();
  if (!rows.length) { const tr = document.createElement("tr"); const td = cell("none", "muted"); td.colSpan = 12; tr.append(td); body.append(tr); return; }
  for (const r of rows) { const tr = document.createElement("tr"); for (const c of cols) tr.append(c(r)); body.append(tr); }
}
async function refresh() {
  try {
    const s = await (await fetch("status", {cache: "no-store"})).json();
    document.getElementById("err").textContent = "";
    document.getElementById("meta").textContent = (s.ready ? "ready" : "recovering") + " \\u00b7 pid " + s.pid +
      " \\u00b7 failure timeout " + secs(s.failure_timeout_ms) + " \\u00b7 grant lease " + secs(s.lease_ms) +
      " \\u00b7 " + new Date(s.now_ms).toLocaleTimeString();
    document.getElementById("counts").textContent = "grants sent " + s.grants_sent +
      " \\u00b7 takeover orders " + (s.orders_sent || 0) + " \\u00b7 log trims " + (s.trims || 0) + " \\u00b7 replicas: " +
      Object.entries(s.replicas_by_state).filter(([, n]) => n).map(([k, n]) => k + " " + n).join(", ") +
      " \\u00b7 Prometheus: /metrics";
    fill("replicas", s.replicas, [r => cell(r.node), r => cell(r.partition), r => cell(r.replica),
      r => cell((s.schemes || {})[r.node] || ""),
      r => cell(r.role ? r.role + " (epoch " + r.epoch + ")" : "-", r.role ? "" : "muted"),
      r => cell(r.state + (r.state === "FAILED" && r.reported ? " (last: " + r.reported + ")" : ""), r.state),
      r => cell(r.seen ? secs(r.age_ms) + " ago" : "never"),
      r => cell(r.since_ms ? secs(s.now_ms - r.since_ms) + " ago" : "", "muted"),
      r => cell(r.seen ? r.stable : ""), r => cell(r.seen ? r.lag : ""),
      r => cell(r.pid || ""), r => cell(r.reconciliation, r.reconciliation === "IDLE" ? "muted" : "")]);
    fill("pending", s.pending, [r => cell(r.key), r => cell(secs(r.waiting_ms)), r => cell(r.stagger)]);
    fill("grants", s.grants, [r => cell(r.key), r => cell(secs(r.held_ms)), r => cell(secs(r.lease_left_ms)), r => cell(r.stagger)]);
  } catch (e) { document.getElementById("err").textContent = "coordinator unreachable: " + e; }
}
refresh(); setInterval(refresh, 1000);
</script>
</body></html>
"""
