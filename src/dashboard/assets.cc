#include "dashboard/assets.h"

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"

namespace shoal::dashboard {

// One page: 2 s after its last refresh ended, it fetches
// /api/cluster_status, /api/jobs/, the picked job's new output (from the
// offset it has), /api/tasks?summary and /api/gangs, and draws the nodes
// (with a usage bar for every resource, custom ones included; slice and TPU
// worker id), jobs (with a live log of the one picked and, while it runs,
// a button that stops it), tasks by function
// and state, actors, placement groups, launch gangs (their ranks, hosts,
// restarts, and the log of the rank picked), leases and demands.
// Large clusters stay usable: the node table shows at most 200 rows,
// filtered by what is typed above it.
const char kDashboardPage[] = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Shoal dashboard</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 0; color: #1d2733;
         background: #f5f7fa; }
  header { background: #163a5f; color: #fff; padding: 10px 20px;
           display: flex; gap: 24px; align-items: baseline; }
  header h1 { font-size: 20px; margin: 0; }
  header span { opacity: .85; font-size: 14px; }
  nav a { color: #cfe3ff; margin-right: 14px; text-decoration: none; }
  main { padding: 12px 20px; }
  section { background: #fff; border-radius: 6px; padding: 10px 14px;
            margin-bottom: 14px; box-shadow: 0 1px 2px rgba(0,0,0,.08); }
  h2 { font-size: 16px; margin: 4px 0 8px; }
  table { border-collapse: collapse; width: 100%; font-size: 13px; }
  th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #e6e9ee;
           vertical-align: top; }
  th { background: #f0f3f7; font-weight: 600; }
  .usage div { white-space: nowrap; }
  .bar { background: #e3e8ef; border-radius: 3px; width: 110px; height: 9px;
         display: inline-block; vertical-align: middle; margin-right: 4px; }
  .bar > div { background: #2f80ed; height: 9px; border-radius: 3px; }
  .state-ALIVE, .state-RUNNING, .state-CREATED, .state-SUCCEEDED
    { color: #137333; font-weight: 600; }
  .state-DEAD, .state-FAILED { color: #b3261e; font-weight: 600; }
  .state-PENDING, .state-RESTARTING, .state-STOPPED
    { color: #a15c00; font-weight: 600; }
  pre.log { background: #0f1720; color: #d7e2ee; padding: 10px; max-height: 360px;
            overflow: auto; font-size: 12px; white-space: pre-wrap; }
  .muted { color: #6b7785; }
  input { padding: 3px 6px; margin-bottom: 6px; }
  tr.pick { cursor: pointer; }
  tr.pick:hover { background: #eef4ff; }
</style>
</head>
<body>
<header><h1>Shoal</h1><span id="summary">loading...</span>
<nav><a href="#cluster">Cluster</a><a href="#jobs">Jobs</a>
<a href="#tasks">Tasks</a><a href="#actors">Actors</a>
<a href="#groups">Placement groups</a><a href="#gangs">Launch gangs</a>
<a href="#demands">Demands</a></nav></header>
<main>
<section id="cluster"><h2>Cluster</h2>
<input id="filter" placeholder="filter nodes (id, address, label)">
<span class="muted" id="shown"></span>
<table><thead><tr><th>Node</th><th>Address</th><th>State</th><th>Slice</th>
<th>TPU worker</th><th>Usage</th><th>Labels</th></tr></thead>
<tbody id="nodes"></tbody></table></section>
<section id="jobs"><h2>Jobs</h2>
<table><thead><tr><th>Submission id</th><th>Status</th><th>Node</th>
<th>Duration</th><th>Entrypoint</th><th>Message</th></tr></thead>
<tbody id="jobrows"></tbody></table>
<h2 id="logtitle" class="muted">Pick a job to follow its log</h2>
<button id="stopjob" hidden>Stop this job</button>
<pre id="log" class="log"></pre></section>
<section id="tasks"><h2>Tasks</h2>
<p class="muted" id="taskcounts"></p>
<table><thead><tr><th>Function</th><th>Type</th><th>States</th></tr></thead>
<tbody id="taskrows"></tbody></table></section>
<section id="actors"><h2>Actors</h2>
<table><thead><tr><th>Actor</th><th>Class</th><th>Name</th><th>State</th>
<th>Node</th><th>Job</th><th>Restarts</th></tr></thead>
<tbody id="actorrows"></tbody></table></section>
<section id="groups"><h2>Placement groups</h2>
<table><thead><tr><th>Group</th><th>Name</th><th>State</th><th>Strategy</th>
<th>Bundles (node)</th><th>Job</th></tr></thead>
<tbody id="grouprows"></tbody></table></section>
<section id="gangs"><h2>Launch gangs</h2>
<table><thead><tr><th>Gang</th><th>State</th><th>Mode</th><th>Ranks</th>
<th>Hosts</th><th>Restarts</th><th>Job</th><th>Duration</th><th>Command</th>
<th>Message</th></tr></thead>
<tbody id="gangrows"></tbody></table>
<h2 id="ranktitle" class="muted">Pick a gang to see its ranks</h2>
<table><thead><tr><th>Rank</th><th>Host</th><th>Node</th><th>Address</th>
<th>Exit</th><th>Log</th></tr></thead>
<tbody id="rankrows"></tbody></table>
<h2 id="ranklogtitle" class="muted"></h2>
<pre id="ranklog" class="log"></pre></section>
<section id="demands"><h2>Pending demands and leases</h2>
<table><thead><tr><th>Shape</th><th>Count</th><th>Feasible</th></tr></thead>
<tbody id="demandrows"></tbody></table>
<p class="muted" id="leases"></p></section>
</main>
<script>
"use strict";
const MAX_NODES = 200;
let picked = null, logOffset = null, lastStatus = null;
let pickedGang = null, pickedRank = null, lastGangs = [];
function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;",
    ">": "&gt;", '"': "&quot;", "'": "&#39;"})[c]);
}
function amount(name, v) {
  if (name === "memory" || name === "object_store_memory") {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return v.toFixed(i ? 1 : 0) + units[i];
  }
  return (Math.round(v * 100) / 100).toString();
}
// Every resource of the node (custom ones such as accel_x too), the usual
// ones first; a placement group's bundle resources are the group's.
const FIRST = ["CPU", "GPU", "TPU", "memory", "object_store_memory"];
function usage(n) {
  const names = Object.keys(n.total || {}).filter(k => !k.includes("_group_"))
    .sort((a, b) => {
      const ia = FIRST.indexOf(a), ib = FIRST.indexOf(b);
      if (ia !== ib) return (ia < 0 ? FIRST.length : ia) - (ib < 0 ? FIRST.length : ib);
      return a < b ? -1 : a > b ? 1 : 0;
    });
  return names.map(k => {
    const total = n.total[k], used = total - (n.available[k] ?? 0);
    const pct = total > 0 ? Math.min(100, 100 * used / total) : 0;
    return `<div><span class="bar"><div style="width:${pct}%"></div></span>` +
      `${esc(k)} ${amount(k, used)}/${amount(k, total)}</div>`;
  }).join("");
}
function shape(s) {
  return Object.entries(s || {}).map(([k, v]) => `${esc(k)}: ${v}`).join(", ");
}
// Every call the page makes: the cookie signs it in, and X-Shoal-Request
// (which a page of another site cannot send) lets it change things too.
function call(path, options = {}) {
  return fetch(path, {...options, credentials: "same-origin",
    headers: {...(options.headers || {}), "X-Shoal-Request": "1"}});
}
async function getJson(path, options) {
  const r = await call(path, options);
  if (r.status === 401) { location.reload(); throw new Error("token"); }
  if (!r.ok) {
    let why = String(r.status);
    try { why = (await r.json()).error || why; } catch (e) {}
    throw new Error(path + ": " + why);
  }
  return r.json();
}
function drawNodes(status) {
  const want = document.getElementById("filter").value.toLowerCase();
  const match = status.nodes.filter(n => !want || JSON.stringify(
    [n.node_id, n.address, n.labels]).toLowerCase().includes(want));
  const rows = match.slice(0, MAX_NODES).map(n => {
    const l = n.labels || {};
    const state = n.state + (n.is_head_node ? " (head)" : "");
    return `<tr><td>${esc(n.node_id)}</td><td>${esc(n.address)}</td>` +
      `<td class="state-${esc(n.state)}">${esc(state)}</td>` +
      `<td>${esc(l["shoal.io/tpu-slice-name"] || "")}</td>` +
      `<td>${esc(l["shoal.io/tpu-worker-id"] || "")}</td>` +
      `<td class="usage">${usage(n)}</td><td class="muted">${esc(Object.entries(l).map(
        ([k, v]) => k + "=" + v).join(" "))}</td></tr>`;
  });
  document.getElementById("nodes").innerHTML = rows.join("");
  document.getElementById("shown").textContent =
    `${Math.min(match.length, MAX_NODES)} of ${status.nodes.length} nodes shown`;
}
function drawStatus(status) {
  lastStatus = status;
  const alive = status.nodes.filter(n => n.state === "ALIVE").length;
  const u = status.usage || {};
  const parts = Object.entries(u).filter(([k]) => ["CPU", "GPU", "TPU"]
    .includes(k)).map(([k, v]) => `${amount(k, v.used)}/${amount(k, v.total)} ${k}`);
  document.getElementById("summary").textContent =
    `${alive} alive node(s) of ${status.nodes.length}; ${parts.join(", ")}; ` +
    `head ${status.head_address}`;
  drawNodes(status);
  document.getElementById("actorrows").innerHTML = (status.actors || []).map(a =>
    `<tr><td>${esc(a.id)}</td><td>${esc(a.class)}</td><td>${esc(a.name)}</td>` +
    `<td class="state-${esc(a.state)}">${esc(a.state)}</td>` +
    `<td>${esc(a.node_id)}</td><td>${esc(a.job_id)}</td>` +
    `<td>${esc(a.num_restarts ?? "")}</td></tr>`).join("") ||
    `<tr><td colspan="7" class="muted">no actors</td></tr>`;
  document.getElementById("grouprows").innerHTML =
    (status.placement_groups || []).map(g =>
    `<tr><td>${esc(g.id)}</td><td>${esc(g.name)}</td>` +
    `<td class="state-${esc(g.state)}">${esc(g.state)}</td>` +
    `<td>${esc(g.strategy)}</td><td>${(g.bundles || []).map((b, i) =>
      `${i}: ${shape(b)} (${esc((g.bundle_nodes || [])[i] || "-")})`).join("<br>")}` +
    `</td><td>${esc(g.job_id)}</td></tr>`).join("") ||
    `<tr><td colspan="6" class="muted">no placement groups</td></tr>`;
  document.getElementById("demandrows").innerHTML = (status.demands || []).map(d =>
    `<tr><td>${shape(d.shape)}</td><td>${esc(d.count)}</td>` +
    `<td>${d.infeasible ? "no node can hold it" : "yes"}</td></tr>`).join("") ||
    `<tr><td colspan="3" class="muted">no pending demands</td></tr>`;
  document.getElementById("leases").textContent =
    `${(status.leases || []).length} worker lease(s) held`;
}
function duration(j) {
  const end = j.end_time || Date.now();
  return ((end - j.start_time) / 1000).toFixed(1) + " s";
}
function drawJobs(jobs) {
  document.getElementById("jobrows").innerHTML = jobs.map(j =>
    `<tr class="pick" data-id="${esc(j.submission_id)}">` +
    `<td>${esc(j.submission_id)}</td>` +
    `<td class="state-${esc(j.status)}">${esc(j.status)}</td>` +
    `<td>${esc(j.driver_node_id)}</td><td>${duration(j)}</td>` +
    `<td><code>${esc(j.entrypoint)}</code></td><td>${esc(j.message)}</td></tr>`)
    .join("") || `<tr><td colspan="6" class="muted">no jobs yet: ` +
    `shoal job submit -- CMD</td></tr>`;
  for (const row of document.querySelectorAll("#jobrows tr.pick")) {
    row.onclick = () => pick(row.dataset.id);
  }
  if (!picked && jobs.length) pick(jobs[jobs.length - 1].submission_id);
  const job = jobs.find(j => j.submission_id === picked);
  document.getElementById("stopjob").hidden =
    !job || !["PENDING", "RUNNING"].includes(job.status);
}
// POST /api/jobs/{id}/stop, as any change: call() adds X-Shoal-Request.
document.getElementById("stopjob").onclick = async () => {
  const id = picked;
  if (!id || !confirm(`Stop job ${id}?`)) return;
  try {
    await getJson(`/api/jobs/${encodeURIComponent(id)}/stop`, {method: "POST"});
  } catch (e) {
    document.getElementById("logtitle").textContent = `Log of job ${id}: ${e.message}`;
  }
};
function pick(id) {
  if (picked === id) return;
  picked = id; logOffset = null;
  document.getElementById("log").textContent = "";
  document.getElementById("logtitle").textContent = "Log of job " + id;
  refreshLog();
}
// The picked job's log: first its last MiB, then only the bytes past what
// the page has (next_offset), one request at a time; the page keeps the
// last MAX_LOG characters.
const MAX_LOG = 2 * 1024 * 1024;
let logBusy = false;
async function refreshLog() {
  if (!picked || logBusy) return;
  logBusy = true;
  const id = picked;
  try {
    const from = logOffset === null ? "" : `?offset=${logOffset}`;
    const body = await getJson(`/api/jobs/${encodeURIComponent(id)}/logs${from}`);
    if (id !== picked) return;  // another job was picked meanwhile
    const log = document.getElementById("log");
    const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    let text = (logOffset === null && body.offset > 0 ?
      `(the first ${body.offset} bytes are left out)\n` : "");
    text = log.textContent + text + body.logs;
    if (text.length > MAX_LOG) text = text.slice(text.length - MAX_LOG);
    if (body.logs || logOffset === null) log.textContent = text;
    logOffset = body.next_offset;
    if (atEnd) log.scrollTop = log.scrollHeight;
    document.getElementById("logtitle").textContent = "Log of job " + id;
  } catch (e) {
    if (id === picked) {
      document.getElementById("logtitle").textContent =
        `Log of job ${id}: ${e.message}`;
    }
  } finally {
    logBusy = false;
  }
}
function counts(c) {
  return Object.entries(c || {}).filter(([, n]) => Number(n) > 0)
    .map(([k, n]) => `<span class="state-${esc(k)}">${esc(k)}</span>: ${esc(n)}`)
    .join(", ");
}
function drawTasks(t) {
  document.getElementById("taskcounts").innerHTML =
    "Now and since the head started: " + (counts(t.state_counts) || "none");
  document.getElementById("taskrows").innerHTML = (t.summary || []).map(s =>
    `<tr><td>${esc(s.name)}</td><td>${esc(s.type)}</td>` +
    `<td>${counts(s.state_counts)}</td></tr>`).join("") ||
    `<tr><td colspan="3" class="muted">no tasks reported</td></tr>`;
}
function gangDuration(g) {
  const start = Number(g.start_time_ms), end = Number(g.end_time_ms) || Date.now();
  return start ? ((end - start) / 1000).toFixed(1) + " s" : "";
}
function drawGangs(list) {
  lastGangs = list.gangs || [];
  document.getElementById("gangrows").innerHTML = lastGangs.map(g => {
    const hosts = new Set((g.ranks || []).map(r => r.node_id)).size;
    return `<tr class="pick" data-id="${esc(g.gang_id)}">` +
      `<td>${esc(g.gang_id)}</td><td class="state-${esc(g.state)}">` +
      `${esc(g.state)}</td><td>${g.per_host ? "per host" : "per device"}</td>` +
      `<td>${(g.ranks || []).length}</td><td>${hosts}</td>` +
      `<td>${esc(g.restarts)}/${esc(g.max_restarts)}</td><td>${esc(g.job_id)}</td>` +
      `<td>${gangDuration(g)}</td><td><code>${esc((g.argv || []).join(" "))}` +
      `</code></td><td>${esc(g.message)}</td></tr>`;
  }).join("") || `<tr><td colspan="10" class="muted">no gangs yet: ` +
    `shoal launch --per-device -- CMD</td></tr>`;
  for (const row of document.querySelectorAll("#gangrows tr.pick")) {
    row.onclick = () => { pickedGang = row.dataset.id; pickedRank = null; drawRanks(); };
  }
  if (!lastGangs.some(g => g.gang_id === pickedGang)) {
    pickedGang = lastGangs.length ? lastGangs[0].gang_id : null;
    pickedRank = null;
  }
  drawRanks();
}
function drawRanks() {
  const g = lastGangs.find(g => g.gang_id === pickedGang);
  document.getElementById("ranktitle").textContent = g ?
    `Ranks of gang ${g.gang_id} (restart ${g.restarts})` : "Pick a gang to see its ranks";
  const ranks = g ? g.ranks || [] : [];
  document.getElementById("rankrows").innerHTML = ranks.map(r =>
    `<tr class="pick" data-rank="${esc(r.rank)}"><td>${esc(r.rank)}</td>` +
    `<td>${esc(r.host_index)}</td><td>${esc(r.node_id)}</td>` +
    `<td>${esc(r.address)}</td><td>${r.exited ? esc(r.description) : "running"}` +
    `</td><td><code>${esc(r.log_name)}</code></td></tr>`).join("");
  for (const row of document.querySelectorAll("#rankrows tr.pick")) {
    row.onclick = () => { pickedRank = Number(row.dataset.rank); refreshRankLog(); };
  }
  if (pickedRank === null && ranks.length) pickedRank = ranks[0].rank;
}
async function refreshRankLog() {
  const g = lastGangs.find(g => g.gang_id === pickedGang);
  const r = g && (g.ranks || []).find(r => r.rank === pickedRank);
  const title = document.getElementById("ranklogtitle");
  const log = document.getElementById("ranklog");
  if (!r) { title.textContent = ""; log.textContent = ""; return; }
  title.textContent = `Log of rank ${r.rank} (node ${r.node_id}, ${r.log_name})`;
  try {
    const body = await getJson(`/api/logs?node_id=${encodeURIComponent(r.node_id)}` +
      `&name=${encodeURIComponent(r.log_name)}&offset=-65536`);
    log.textContent = body.data;
  } catch (e) {
    log.textContent = "(no log yet: " + e.message + ")";
  }
}
async function refresh() {
  try {
    drawStatus(await getJson("/api/cluster_status"));
    drawJobs(await getJson("/api/jobs/"));
    await refreshLog();
    drawTasks(await getJson("/api/tasks?summary=1"));
    drawGangs(await getJson("/api/gangs"));
    await refreshRankLog();
  } catch (e) {
    document.getElementById("summary").textContent = "cannot reach the head: " + e;
  }
}
document.getElementById("filter").oninput = () => lastStatus && drawNodes(lastStatus);
// The next refresh starts 2 s after the last one ends: never two at once.
async function poll() {
  await refresh();
  setTimeout(poll, 2000);
}
poll();
</script>
</body>
</html>
)html";

namespace {

constexpr char kLoginHead[] = R"html(<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Shoal dashboard: token</title>
<style>
  body { font-family: system-ui, sans-serif; background: #f5f7fa;
         display: flex; justify-content: center; margin-top: 12vh; }
  form { background: #fff; padding: 24px 28px; border-radius: 6px;
         box-shadow: 0 1px 3px rgba(0,0,0,.12); max-width: 460px; }
  input { width: 100%; padding: 6px; margin: 10px 0; font-family: monospace; }
  p { color: #44505c; font-size: 14px; }
  p.wrong { color: #b3261e; font-weight: 600; }
</style></head>
<body><form method="get" action="/">
<h2>Shoal dashboard</h2>
)html";

constexpr char kWrongToken[] = R"html(<p class="wrong" role="alert">That
token is not this cluster's. The right one is in the head's session folder
(the <code>token</code> file) or printed by <code>shoal start --head</code>.
</p>
)html";

constexpr char kLoginTail[] =
    R"html(<p>This cluster needs its token. `shoal start --head` printed it, and it is
in the head's session folder (<code>token</code>, mode 0600).</p>
<input name="token" type="password" placeholder="cluster token" autofocus>
<button type="submit">Open</button>
</form></body></html>
)html";

}  // namespace

namespace {

// 'sha256-<base64>' of the text between the page's <script> and
// </script>, as a Content-Security-Policy source.
std::string ScriptHashSource(const std::string& page) {
  size_t start = page.find("<script>") + 8;
  size_t end = page.find("</script>", start);
  std::string hex = Sha256Hex(page.substr(start, end - start));
  std::string digest;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    digest.push_back(
        static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return absl::StrCat("'sha256-", absl::Base64Escape(digest), "'");
}

}  // namespace

const std::string& DashboardPagePolicy() {
  static const std::string* policy = new std::string(absl::StrCat(
      "default-src 'none'; script-src ", ScriptHashSource(kDashboardPage),
      "; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'; "
      "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"));
  return *policy;
}

const std::string& LoginPagePolicy() {
  static const std::string* policy = new std::string(
      "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; "
      "form-action 'self'; frame-ancestors 'none'");
  return *policy;
}

std::string LoginPage(bool wrong_token) {
  std::string page = kLoginHead;
  if (wrong_token) page += kWrongToken;
  page += kLoginTail;
  return page;
}

}  // namespace shoal::dashboard
