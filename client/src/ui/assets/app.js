// The status page: reads /api/status every two seconds and places what it
// says as text; every call carries this tab's session token (from the
// one-time login link, kept in sessionStorage), never a cookie.
"use strict";

const DAYS = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
const DAY_NAMES = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];
const POLL_MS = 2000;
const session = sessionStorage.getItem("beebot-session");
const SIGNED_OUT = "Open BeeBot from your applications menu (or run `beebot open`): this page needs the link it opens.";
const $ = (id) => document.getElementById(id);
// Settings inputs the person is editing are not overwritten by a poll.
const edited = new Set();
let left = false;

function text(id, value) { $(id).textContent = value; }
function show(id, on) { $(id).hidden = !on; }
function num(n) { return Number(n || 0).toLocaleString(); }

function say(id, message, error) {
  const el = $(id);
  el.textContent = message;
  el.classList.toggle("error", !!error);
}

async function post(path, body) {
  const r = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", "Authorization": "Session " + session },
    body: JSON.stringify(body || {}),
  });
  let v = {};
  try { v = await r.json(); } catch (e) { v = { error: "the client answered " + r.status }; }
  if (!r.ok) { throw new Error(v.error || ("the client answered " + r.status)); }
  return v;
}

function hhmm(min) {
  const h = Math.floor(min / 60), m = min % 60;
  return String(h).padStart(2, "0") + ":" + String(m).padStart(2, "0");
}

function buildDays() {
  const box = document.querySelector("#window-editor .days");
  DAYS.forEach((d, i) => {
    const label = document.createElement("label");
    label.htmlFor = "win-" + d;
    label.textContent = DAY_NAMES[i];
    const input = document.createElement("input");
    input.type = "text";
    input.id = "win-" + d;
    input.placeholder = "e.g. 19:00-07:00";
    input.addEventListener("input", () => edited.add("window"));
    box.append(label, input);
  });
  for (const id of ["window-always", "window-days"]) {
    $(id).addEventListener("change", () => { edited.add("window"); windowMode(); });
  }
}

function windowMode() {
  $("window-editor").hidden = !$("window-days").checked;
}

function windowText() {
  if ($("window-always").checked) { return "always"; }
  const rules = [];
  DAYS.forEach((d) => {
    for (const range of $("win-" + d).value.trim().split(/[\s,]+/)) {
      if (range) { rules.push(d + " " + range); }
    }
  });
  if (!rules.length) { throw new Error("give the hours of at least one day, or choose Any time"); }
  return rules.join(", ");
}

function fillSettings(s) {
  const by = {};
  for (const x of s.settings) { by[x.key] = x; }
  for (const key of ["window", "bandwidth_kbps", "cpu_percent", "slots", "run_on_battery"]) {
    const x = by[key];
    if (!x) { continue; }
    text("src-" + key, "From: " + x.source_text + (x.overridden ? " (the settings file has another value)" : ""));
    if (edited.has(key)) { continue; }
    if (key === "window") {
      const days = s.window_days;
      $("window-always").checked = !days;
      $("window-days").checked = !!days;
      DAYS.forEach((d, i) => {
        $("win-" + d).value = days ? days[i].map((r) => hhmm(r[0]) + "-" + hhmm(r[1])).join(" ") : "";
      });
      windowMode();
    } else if (key === "bandwidth_kbps") {
      $("bandwidth").value = x.value;
    } else if (key === "cpu_percent") {
      $("cpu").value = x.value;
    } else if (key === "slots") {
      $("slots").value = x.value;
    } else if (key === "run_on_battery") {
      $("battery").checked = x.value === "true";
    }
  }
  show("settings-error", !!s.settings_error);
  text("settings-error", s.settings_error || "");
}

function fillScans(scans) {
  const body = document.querySelector("#scans tbody");
  body.replaceChildren();
  for (const sc of scans) {
    const tr = document.createElement("tr");
    tr.className = "scan";
    const site = document.createElement("td");
    site.textContent = sc.site;
    const prog = document.createElement("td");
    const bar = document.createElement("progress");
    bar.max = 100;
    if (sc.progress_pct !== null) { bar.value = sc.progress_pct; }
    const words = document.createElement("span");
    words.className = "pages";
    words.textContent = " " + sc.progress_text;
    prog.append(bar, words);
    const links = document.createElement("td");
    links.className = "num";
    links.textContent = num(sc.links);
    const rate = document.createElement("td");
    rate.className = "num";
    rate.textContent = sc.pages_per_s.toFixed(1);
    tr.append(site, prog, links, rate);
    body.append(tr);
  }
  show("no-scans", scans.length === 0);
  show("scans", scans.length > 0);
}

function fillProblems(problems) {
  const ul = $("problems");
  ul.replaceChildren();
  for (const p of problems) {
    const li = document.createElement("li");
    const when = document.createElement("b");
    when.textContent = p.at_text + (p.times > 1 ? " (" + p.times + " times)" : "") + ": ";
    const what = document.createElement("span");
    what.className = "plain";
    what.textContent = p.plain;
    const more = document.createElement("details");
    const sum = document.createElement("summary");
    sum.textContent = "Details";
    const detail = document.createElement("span");
    detail.textContent = p.detail;
    more.append(sum, detail);
    li.append(when, what, more);
    ul.append(li);
  }
  show("problems-card", problems.length > 0);
}

function render(s) {
  if (left) { return; }
  text("project", s.enrolled
    ? "Joined " + s.project + " as " + s.name + " (host " + s.host_id + ")"
    : "Not joined to a project yet");
  const badge = $("state");
  badge.className = "badge " + s.state;
  badge.textContent = s.state.replace(/-/g, " ");
  text("state-text", s.state_text);
  text("concurrency", s.concurrency ? "Sites at once: " + s.concurrency + " (at most " + s.slots_ceiling + ")" : "");
  show("join-card", !s.enrolled);
  if (!s.enrolled && s.join_problem && !$("join-msg").textContent) { say("join-msg", s.join_problem, true); }
  for (const id of ["controls", "scans-card", "totals-card", "settings-card", "leave-card"]) {
    show(id, s.enrolled);
  }
  if (!s.enrolled) { show("settings-card", true); }
  fillScans(s.scans);
  for (const period of ["today", "week"]) {
    for (const k of ["results", "pages", "links"]) { text(period + "-" + k, num(s[period][k])); }
  }
  text("pending", num(s.pending_uploads));
  fillProblems(s.problems);
  fillSettings(s);
}

async function poll() {
  try {
    const r = await fetch("/api/status", {
      headers: { "Accept": "application/json", "Authorization": "Session " + session },
    });
    if (r.status === 401) {
      signedOut();
      return;
    }
    if (r.ok) { render(await r.json()); }
  } catch (e) {
    if (!left) { text("state-text", "BeeBot is not running on this computer."); }
  } finally {
    if (!left) { setTimeout(poll, POLL_MS); }
  }
}

async function act(msgId, f) {
  try {
    const v = await f();
    say(msgId, v.message || "done", false);
    return true;
  } catch (e) {
    say(msgId, e.message, true);
    return false;
  }
}

async function saveSetting(key, value) {
  if (await act("settings-msg", () => post("/api/settings", { key: key, value: String(value) }))) {
    edited.delete(key);
  }
}

function wire() {
  $("pause-hour").addEventListener("click", () => act("control-msg", () => post("/api/pause", { seconds: 3600 })));
  $("pause-tomorrow").addEventListener("click", () => act("control-msg", () => post("/api/pause", { until: "tomorrow" })));
  $("resume").addEventListener("click", () => act("control-msg", () => post("/api/resume")));
  $("join-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    say("join-msg", "Joining…", false);
    $("join-btn").disabled = true;
    act("join-msg", () => post("/api/join", { code: $("invite").value, name: $("host-name").value }))
      .then((ok) => { if (ok) { $("invite").value = ""; } })
      .finally(() => { $("join-btn").disabled = false; });
  });
  $("window-save").addEventListener("click", () => {
    let w;
    try { w = windowText(); } catch (e) { say("settings-msg", e.message, true); return; }
    saveSetting("window", w);
  });
  $("bandwidth").addEventListener("input", () => edited.add("bandwidth_kbps"));
  $("slots").addEventListener("input", () => edited.add("slots"));
  $("cpu").addEventListener("input", () => edited.add("cpu_percent"));
  $("bandwidth-save").addEventListener("click", () => saveSetting("bandwidth_kbps", $("bandwidth").value));
  $("slots-save").addEventListener("click", () => saveSetting("slots", $("slots").value.trim()));
  $("cpu-save").addEventListener("click", () => saveSetting("cpu_percent", $("cpu").value));
  $("battery").addEventListener("change", () => saveSetting("run_on_battery", $("battery").checked));
  $("leave-btn").addEventListener("click", async () => {
    if (!window.confirm("Leave the project? This computer stops crawling and BeeBot's files here are removed.")) {
      return;
    }
    say("leave-msg", "Leaving… (this takes a few seconds)", false);
    try {
      const v = await post("/api/leave", { confirm: true });
      left = true;
      for (const id of ["state-card", "join-card", "scans-card", "totals-card", "problems-card", "settings-card"]) {
        show(id, false);
      }
      $("leave-btn").hidden = true;
      text("project", "Left the project");
      say("leave-msg", v.message, false);
    } catch (e) {
      say("leave-msg", e.message, true);
    }
  });
}

function signedOut() {
  left = true;
  for (const id of ["controls", "join-card", "scans-card", "totals-card", "problems-card", "settings-card", "leave-card"]) {
    show(id, false);
  }
  text("project", "Not signed in");
  text("state", "signed out");
  text("state-text", SIGNED_OUT);
}

buildDays();
wire();
if (session) { poll(); } else { signedOut(); }
