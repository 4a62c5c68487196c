// BeeBot grid dashboard: polls the JSON endpoints and fills the page.
// Every value from the server is set as text (textContent), never as HTML:
// host names, site names and reasons come from hosts and may be hostile.
"use strict";

const page = document.body.dataset.page;
const pollMs = Number(document.body.dataset.pollMs) || 2000;
// The session the login page got (this origin's localStorage: no other
// port's page reads it); sent with every call, never as a cookie.
const SESSION_KEY = "beebot-admin-session";
const session = localStorage.getItem(SESSION_KEY);
if (!session) window.location.replace("/login");
const auth = { "Authorization": "Session " + session };
function loggedOut() {
  localStorage.removeItem(SESSION_KEY);
  window.location.replace("/login");
}

function $(id) { return document.getElementById(id); }
function setText(id, v) { const e = $(id); if (e) e.textContent = v; }
function fmt(n, digits) {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  return Number(n).toLocaleString("en-US", { maximumFractionDigits: digits || 0 });
}
function duration(s) {
  if (s === null || s === undefined) return "–";
  s = Math.round(s);
  if (s < 90) return s + " s";
  if (s < 5400) return Math.round(s / 60) + " min";
  if (s < 172800) return (s / 3600).toFixed(1) + " h";
  return (s / 86400).toFixed(1) + " d";
}
function utc(ms) {
  if (!ms) return "–";
  return new Date(ms).toISOString().replace("T", " ").slice(0, 16);
}
function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}
function replaceRows(tbody, rows) {
  tbody.replaceChildren(...rows);
}

async function getJson(url) {
  const r = await fetch(url, { cache: "no-store", headers: auth });
  if (r.status === 401) { loggedOut(); throw new Error("logged out"); }
  if (!r.ok) throw new Error(url + ": " + r.status);
  return r.json();
}

// ---- overview ----
function renderOverview(d) {
  const ul = $("components");
  ul.replaceChildren(...d.components.map((c) => {
    const li = document.createElement("li");
    const s = document.createElement("span");
    s.className = "state state-" + c.state;
    s.textContent = c.state;
    const name = document.createElement("strong");
    name.textContent = c.name;
    const detail = document.createElement("div");
    detail.className = "muted";
    detail.textContent = c.detail;
    li.dataset.component = c.name;
    li.dataset.state = c.state;
    li.append(s, name, detail);
    return li;
  }));
  const j = d.jobs;
  setText("jobs-rounds", d.jobs_rounds.length ? "round " + d.jobs_rounds.join(", ") : "no round yet");
  setText("jobs-queued", fmt(j.queued));
  setText("jobs-running", fmt(j.running));
  setText("jobs-done", fmt(j.done));
  setText("jobs-failed", fmt(j.failed));
  setText("jobs-cancelled", fmt(j.cancelled));
  setText("jobs-awaiting", fmt(j.awaiting_validation));
  setText("oldest-running", d.oldest_running_s === null ? "none running" : duration(d.oldest_running_s));
  setText("pages-now", fmt(d.rates.pages_per_s_now, 1));
  setText("kb-now", fmt(d.rates.kb_per_s_now, 1));
  setText("pages-avg", fmt(d.rates.pages_per_s_avg, 1));
  setText("kb-avg", fmt(d.rates.kb_per_s_avg, 1));
  setText("hosts-enrolled", fmt(d.hosts_enrolled));
  setText("hosts-hour", fmt(d.hosts_active_hour));
  setText("hosts-day", fmt(d.hosts_active_day));
  replaceRows($("rounds").tBodies[0], d.rounds.map((r) => {
    const tr = document.createElement("tr");
    tr.dataset.round = r.id;
    const a = document.createElement("a");
    a.href = "/rounds/" + encodeURIComponent(r.id);
    a.textContent = "round " + r.id;
    const td = document.createElement("td");
    td.appendChild(a);
    tr.appendChild(td);
    cell(tr, r.state);
    cell(tr, r.policy);
    cell(tr, Math.round(r.progress * 100) + " %", "num");
    for (const k of ["jobs", "queued", "running", "done", "failed", "pages", "links"]) cell(tr, fmt(r[k]), "num");
    cell(tr, utc(r.started_ms));
    return tr;
  }));
}

// ---- a round ----
const sort = { key: "site", dir: 1, type: "text" };
let lastRound = null;

function renderRound(d) {
  lastRound = d;
  setText("round-state", d.round.state);
  const p = $("progress");
  p.value = d.progress;
  const toCheck = d.counts.scanned_to_check;
  setText("progress-text", Math.round(d.progress * 100) + " % of " + fmt(d.round.jobs) + " sites over" +
    (toCheck > 0 ? "; " + fmt(toCheck) + " scanned, waiting for a check" : ""));
  const waiting = $("waiting");
  waiting.hidden = !d.waiting;
  waiting.textContent = d.waiting || "";
  const eta = $("eta");
  eta.title = d.eta.how;
  eta.textContent = d.eta.seconds === null ? "ETA – (" + d.eta.note + ")" : "ETA " + duration(d.eta.seconds);
  setText("round-params", "policy " + d.round.policy + " · delay " + fmt(d.delay_ms) + " ms · at most " +
    fmt(d.max_pages) + " pages a site · validation " + d.validate + " · started " + utc(d.round.started_ms) + " UTC");
  const dmg = $("damaged");
  dmg.hidden = d.damaged.length === 0;
  setText("damaged-text", d.damaged.length + " done site(s) damaged: their kept link files do not read whole, " +
    "so no export holds them; a new round scans them again.");
  $("damaged-sites").replaceChildren(...d.damaged.map((x) => {
    const li = document.createElement("li");
    li.textContent = x.site + ": " + x.why;
    return li;
  }));
  const c = d.counts;
  setText("c-queued", fmt(c.queued));
  setText("c-running", fmt(c.running));
  setText("c-done", fmt(c.done));
  setText("c-failed", fmt(c.failed));
  setText("c-complete", fmt(c.complete));
  setText("c-pages", fmt(c.pages) + " / " + fmt(c.links));
  setText("r-pages-now", fmt(d.rates.pages_per_s_now, 1));
  setText("r-kb-now", fmt(d.rates.kb_per_s_now, 1));
  setText("r-pages-avg", fmt(d.rates.pages_per_s_avg, 1));
  setText("r-kb-avg", fmt(d.rates.kb_per_s_avg, 1));
  const f = $("failures");
  if (d.failures.length === 0) {
    const li = document.createElement("li");
    li.textContent = "none";
    f.replaceChildren(li);
  } else {
    f.replaceChildren(...d.failures.map((r) => {
      const li = document.createElement("li");
      li.textContent = r.count + " × " + r.reason;
      return li;
    }));
  }
  drawChart(d.chart, d.max_points);
  renderSites();
}

function siteValue(s, key) {
  if (key === "reasons") return s.reasons.join("; ");
  return s[key];
}

function renderSites() {
  const d = lastRound;
  if (!d) return;
  const text = $("filter").value.trim().toLowerCase();
  const state = $("state-filter").value;
  const rows = d.sites.filter((s) => (!state || s.state === state) &&
    (!text || [s.site, s.host, s.reasons.join(" "), s.why_not || ""].some((v) => v.toLowerCase().includes(text))));
  rows.sort((a, b) => {
    const x = siteValue(a, sort.key), y = siteValue(b, sort.key);
    const c = sort.type === "num" ? x - y : String(x).localeCompare(String(y));
    return sort.dir * (c || a.site.localeCompare(b.site));
  });
  setText("shown", rows.length + " of " + d.sites.length + " sites");
  replaceRows($("sites").tBodies[0], rows.map((s) => {
    const tr = document.createElement("tr");
    tr.dataset.site = s.site;
    cell(tr, s.site);
    cell(tr, s.waits || s.state);
    cell(tr, s.host);
    cell(tr, fmt(s.pages), "num");
    cell(tr, fmt(s.links), "num");
    cell(tr, fmt(s.attempts), "num");
    cell(tr, s.reasons.join("; "), "reasons");
    const td = cell(tr, s.completeness);
    if (s.why_not) td.title = s.why_not;
    return tr;
  }));
  for (const th of $("sites").tHead.rows[0].cells) {
    th.setAttribute("aria-sort", th.dataset.key === sort.key ? (sort.dir > 0 ? "ascending" : "descending") : "none");
  }
}

function drawChart(points, maxPoints) {
  const svg = $("chart");
  const ns = "http://www.w3.org/2000/svg";
  const W = 600, H = 160, pad = 4;
  const parts = [];
  const axis = document.createElementNS(ns, "line");
  axis.setAttribute("class", "axis");
  axis.setAttribute("x1", 0); axis.setAttribute("y1", H - pad);
  axis.setAttribute("x2", W); axis.setAttribute("y2", H - pad);
  parts.push(axis);
  if (points.length >= 2) {
    const t0 = points[0][0], t1 = points[points.length - 1][0];
    const top = Math.max(1, ...points.map((p) => p[1]));
    const xy = points.map(([t, v]) => {
      const x = (t1 > t0 ? (t - t0) / (t1 - t0) : 0) * W;
      const y = H - pad - (v / top) * (H - 2 * pad);
      return x.toFixed(1) + "," + y.toFixed(1);
    });
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("class", "line");
    line.setAttribute("points", xy.join(" "));
    parts.push(line);
    setText("chart-note", "peak " + fmt(top, 1) + " pages/s; " + points.length + " samples over " +
      duration((t1 - t0) / 1000) + " (at most " + maxPoints + " kept; thinned as the round goes on)");
  } else {
    setText("chart-note", "no samples yet: the server samples each running round every second");
  }
  svg.replaceChildren(...parts);
}

// ---- hosts ----
function renderHosts(d) {
  replaceRows($("hosts").tBodies[0], d.hosts.map((h) => {
    const tr = document.createElement("tr");
    tr.dataset.host = h.id;
    tr.dataset.state = h.state;
    cell(tr, h.id, "num");
    cell(tr, h.name, "name");
    cell(tr, h.state + (h.trusted ? " · trusted" : ""), "host-state");
    cell(tr, h.slots, "num");
    cell(tr, fmt(h.speed_pages_per_s, 2), "num");
    cell(tr, h.benchmark_pages_per_s === null ? "–" :
      fmt(h.benchmark_pages_per_s, 1) + ", " + fmt(h.benchmark_kb_per_s, 0), "num");
    cell(tr, duration(h.last_seen_s_ago) + " ago");
    cell(tr, fmt(h.jobs_done), "num");
    cell(tr, fmt(h.jobs_failed), "num");
    cell(tr, fmt(h.deadlines_missed), "num");
    cell(tr, h.windows, "wrap");
    cell(tr, h.version + (h.os ? " (" + h.os + ")" : ""));
    const td = document.createElement("td");
    if (h.state === "active") {
      const b = document.createElement("button");
      b.className = "danger revoke";
      b.type = "button";
      b.textContent = "Revoke";
      b.addEventListener("click", () => revoke(h, b));
      td.appendChild(b);
    }
    tr.appendChild(td);
    return tr;
  }));
}

async function revoke(h, button) {
  if (!window.confirm("Revoke host " + h.name + " (#" + h.id + ")? It is refused from now on and its units go to other hosts.")) return;
  button.disabled = true;
  const msg = $("message");
  try {
    const r = await fetch("/api/hosts/" + encodeURIComponent(h.id) + "/revoke", {
      method: "POST", cache: "no-store", headers: auth,
    });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(body.error || String(r.status));
    msg.className = "message";
    msg.textContent = "Host " + body.name + " (#" + body.id + ") revoked.";
  } catch (e) {
    msg.className = "message error";
    msg.textContent = "Revoke failed: " + e.message;
    button.disabled = false;
  }
  refresh();
}

// ---- polling ----
const sources = {
  overview: ["/api/dashboard/overview", renderOverview],
  round: ["/api/dashboard/rounds/" + encodeURIComponent(document.body.dataset.round || ""), renderRound],
  hosts: ["/api/dashboard/hosts", renderHosts],
};

async function refresh() {
  const src = sources[page];
  if (!src) return;
  try {
    const d = await src[1](await getJson(src[0]));
    setText("updated", "updated " + new Date().toISOString().slice(11, 19) + " UTC");
    return d;
  } catch (e) {
    setText("updated", "update failed: " + e.message);
  }
}

function setUp() {
  const nav = $("nav-" + page);
  if (nav) nav.classList.add("current");
  if (page === "round") {
    $("filter").addEventListener("input", renderSites);
    $("state-filter").addEventListener("change", renderSites);
    for (const th of $("sites").tHead.rows[0].cells) {
      th.addEventListener("click", () => {
        if (sort.key === th.dataset.key) sort.dir = -sort.dir;
        else { sort.key = th.dataset.key; sort.type = th.dataset.type; sort.dir = th.dataset.type === "num" ? -1 : 1; }
        renderSites();
      });
    }
  }
  // The next poll is asked for once this one is answered: a slow server
  // never gets a queue of them.
  const loop = async () => {
    await refresh();
    window.setTimeout(loop, pollMs);
  };
  loop();
}

setUp();

// ---- log out: the session ends on the server, then here ----
$("logout").addEventListener("click", async () => {
  try {
    await fetch("/logout", { method: "POST", cache: "no-store", headers: auth });
  } finally {
    loggedOut();
  }
});
