// adksession ops dashboard: polls /api/overview every 2 s, lists sessions
// (recent ones, or a search by app and user) and shows one session's state
// and events. No dependencies, no build step.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { token: sessionStorage.getItem("adksession-token") || "", search: null, nextToken: "", selected: null };

async function api(path) {
  const headers = state.token ? { Authorization: "Bearer " + state.token } : {};
  const resp = await fetch(path, { headers });
  if (resp.status === 401) {
    $("token-form").hidden = false;
    throw new Error("unauthorized: enter the bearer token");
  }
  const body = await resp.json();
  if (!resp.ok) throw new Error(body.error || resp.statusText);
  return body;
}

function text(el, s) { el.textContent = s; return el; }
function el(tag, cls, s) { const e = document.createElement(tag); if (cls) e.className = cls; if (s !== undefined) e.textContent = s; return e; }
function when(sec) { return sec ? new Date(sec * 1000).toLocaleString() : "–"; }
function duration(sec) { return sec < 1 ? (sec * 1000).toFixed(0) + " ms" : sec < 120 ? sec.toFixed(1) + " s" : (sec / 60).toFixed(1) + " min"; }

function setStatus(msg, bad) { const s = $("status"); s.textContent = msg; s.classList.toggle("bad", !!bad); }

async function refreshOverview() {
  try {
    const o = await api("/api/overview");
    setStatus("live · " + new Date(o.time * 1000).toLocaleTimeString());
    const lag = $("flush-lag"), backlog = $("flush-backlog"), dead = $("flush-dead");
    if (o.flush && !o.flush.error) {
      text(lag, duration(o.flush.lagSeconds)).className = "value" + (o.flush.lagSeconds > 5 ? " bad" : o.flush.lagSeconds > 1 ? " warn" : "");
      text(backlog, o.flush.backlog.toLocaleString());
      text(dead, o.flush.deadLetters.toLocaleString()).className = "value" + (o.flush.deadLetters > 0 ? " bad" : "");
    } else {
      const why = o.flush ? "error" : "no database";
      [lag, backlog, dead].forEach((e) => { text(e, "–").title = o.flush ? o.flush.error : why; });
      text(lag, why);
    }
    text($("appends-rate"), o.appendsPerSecond.toFixed(1));
    text($("cached-sessions"), o.cachedSessions == null ? "–" : o.cachedSessions.toLocaleString());
    const mem = $("redis-memory");
    text(mem, o.redis.error ? "n/a" : o.redis.usedMemoryHuman).title = o.redis.error || (o.redis.usedMemory + " bytes");
    if (!state.search) renderSessions(o.recent, false);
  } catch (e) {
    setStatus(e.message, true);
  }
}

function renderSessions(rows, append) {
  const tbody = $("sessions");
  if (!append) tbody.replaceChildren();
  tbody.dataset.view = state.search ? "search" : "recent";
  for (const s of rows) {
    const tr = el("tr");
    tr.dataset.app = s.appName; tr.dataset.user = s.userId; tr.dataset.id = s.id;
    if (state.selected && state.selected.app === s.appName && state.selected.user === s.userId && state.selected.id === s.id) tr.classList.add("selected");
    for (const v of [s.id, s.appName, s.userId, when(s.lastUpdateTime)]) { const td = el("td", "", v); td.title = v; tr.append(td); }
    tr.addEventListener("click", () => openSession(s.appName, s.userId, s.id));
    tbody.append(tr);
  }
  if (!append && rows.length === 0) {
    const tr = el("tr"); const td = el("td", "hint", state.search ? "no sessions" : "no recent sessions; search an app"); td.colSpan = 4; tr.append(td); tbody.append(tr);
  }
}

async function search(append) {
  const q = new URLSearchParams({ app: state.search.app });
  if (state.search.user) q.set("user", state.search.user);
  if (append && state.nextToken) q.set("pageToken", state.nextToken);
  try {
    const r = await api("/api/sessions?" + q);
    state.nextToken = r.nextPageToken;
    $("more").hidden = !r.nextPageToken;
    renderSessions(r.sessions, append);
  } catch (e) { setStatus(e.message, true); }
}

function scopeOf(key) {
  for (const p of ["app:", "user:", "temp:"]) if (key.startsWith(p)) return p.slice(0, -1);
  return "session";
}

function summary(ev) {
  const parts = (ev.content && ev.content.parts) || [];
  const out = [];
  for (const p of parts) {
    if (p.text) out.push(p.text);
    else if (p.functionCall) out.push("→ " + p.functionCall.name + "(" + JSON.stringify(p.functionCall.args || {}) + ")");
    else if (p.functionResponse) out.push("← " + p.functionResponse.name + ": " + JSON.stringify(p.functionResponse.response || {}));
    else out.push(JSON.stringify(p));
  }
  const delta = ev.actions && ev.actions.stateDelta;
  if (delta && Object.keys(delta).length) out.push("stateDelta " + JSON.stringify(delta));
  if (ev.actions && ev.actions.rewindBeforeInvocationId) out.push("rewind before " + ev.actions.rewindBeforeInvocationId);
  return out.join("\n");
}

async function openSession(app, user, id) {
  state.selected = { app, user, id };
  document.querySelectorAll("#sessions tr").forEach((tr) => tr.classList.toggle("selected", tr.dataset.app === app && tr.dataset.user === user && tr.dataset.id === id));
  await renderSession();
}

async function renderSession() {
  const sel = state.selected;
  if (!sel) return;
  let r;
  try {
    r = await api("/api/session?" + new URLSearchParams({ app: sel.app, user: sel.user, id: sel.id }));
  } catch (e) {
    text($("detail-title"), e.message); $("detail-body").hidden = true; return;
  }
  const s = r.session;
  text($("detail-title"), s.id);
  text($("detail-meta"), s.appName + " / " + s.userId + " · last update " + when(s.lastUpdateTime) + " · " + s.events.length + " events");
  const st = $("state"); st.replaceChildren();
  for (const k of Object.keys(s.state).sort()) {
    const tr = el("tr");
    tr.append(el("td", "", scopeOf(k)), el("td", "", k), el("td", "value-cell", JSON.stringify(s.state[k])));
    tr.children[1].title = k;
    st.append(tr);
  }
  const rewound = new Set(r.rewound);
  text($("events-count"), rewound.size ? "(" + rewound.size + " rewound)" : "");
  const list = $("events"); list.replaceChildren();
  for (const ev of s.events) {
    const li = el("li", rewound.has(ev.id) ? "rewound" : "");
    li.dataset.id = ev.id;
    const head = el("div", "head");
    head.append(el("span", "author", ev.author || "?"), document.createTextNode(" · " + when(ev.timestamp) + " · " + ev.invocationId));
    if (rewound.has(ev.id)) head.append(el("span", "badge", "rewound"));
    li.append(head, el("pre", "", summary(ev)));
    list.append(li);
  }
  $("detail-body").hidden = false;
}

$("search").addEventListener("submit", (e) => {
  e.preventDefault();
  const app = $("search-app").value.trim();
  if (!app) { state.search = null; refreshOverview(); return; }
  state.search = { app, user: $("search-user").value.trim() };
  text($("list-title"), "Sessions of " + app + (state.search.user ? " / " + state.search.user : ""));
  search(false);
});
$("search-clear").addEventListener("click", () => {
  state.search = null; $("more").hidden = true;
  text($("list-title"), "Recently active through this server");
  refreshOverview();
});
$("more").addEventListener("click", () => search(true));
$("token-form").addEventListener("submit", (e) => {
  e.preventDefault();
  state.token = $("token").value;
  sessionStorage.setItem("adksession-token", state.token);
  $("token-form").hidden = true;
  refreshOverview();
});

refreshOverview();
setInterval(() => { refreshOverview(); if (state.selected) renderSession(); }, 2000);
