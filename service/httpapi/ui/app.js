// adksession ops dashboard: polls /api/overview every 2 s, draws the last
// 15 minutes (/api/dashboard/history) as SVG charts, lists dead letters
// with retry and drop actions, lists sessions (recent ones, or a search by
// app and user) and shows one session's state and events. No dependencies,
// no build step.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { token: sessionStorage.getItem("adksession-token") || "", search: null, nextToken: "", selected: null };

async function api(path, post) {
  const headers = state.token ? { Authorization: "Bearer " + state.token } : {};
  const init = { headers };
  if (post !== undefined) {
    init.method = "POST";
    init.body = JSON.stringify(post);
    headers["Content-Type"] = "application/json";
  }
  const resp = await fetch(path, init);
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
    if ((o.flush && o.flush.deadLetters > 0) || !$("dead-panel").hidden) refreshDeadLetters();
  } catch (e) {
    setStatus(e.message, true);
  }
}

// ---- History: one SVG line chart per series, drawn from the samples.

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}

function number(v) {
  const a = Math.abs(v);
  if (Number.isInteger(v) && a < 1e4) return String(v);
  if (a >= 1e9) return (v / 1e9).toFixed(1) + "G";
  if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (a >= 1e4) return (v / 1e3).toFixed(0) + "k";
  if (a >= 100) return v.toFixed(0);
  if (a >= 1) return v.toFixed(1);
  return v.toPrecision(2);
}
function ms(v) { return v < 1e-3 ? (v * 1e6).toFixed(0) + " µs" : (v * 1e3).toPrecision(3) + " ms"; }
function bytes(v) {
  return v >= 1e9 ? (v / 1e9).toFixed(2) + " GB" : v >= 1e8 ? (v / 1e6).toFixed(0) + " MB" : v >= 1e6 ? (v / 1e6).toFixed(1) + " MB" : (v / 1e3).toFixed(0) + " kB";
}

// drawChart draws series [{values, cls}] over times into the figure; fmt
// writes a value for the axis and the current value.
function drawChart(id, times, window, series, fmt) {
  const fig = $(id);
  const W = Math.max(200, fig.clientWidth - 12), H = 90, L = 48, B = 14, T = 6;
  const old = fig.querySelector("svg");
  if (old) old.remove();
  const root = svg("svg", { viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img" });
  // The x axis spans the window, or less while the server has not been
  // sampling that long.
  const end = times.length ? times[times.length - 1] : Date.now() / 1000;
  const start = Math.min(end - 1, Math.max(end - window, times.length ? times[0] : end - window));
  let max = 0, points = 0;
  for (const s of series) for (const v of s.values) if (v != null) { max = Math.max(max, v); points++; }
  const top = max > 0 ? max * 1.15 : 1;
  const x = (t) => L + ((t - start) / (end - start)) * (W - L - 4);
  const y = (v) => T + (1 - v / top) * (H - T - B);
  for (const f of [0, 0.5, 1]) {
    root.append(svg("line", { class: "grid", x1: L, x2: W, y1: y(top * f), y2: y(top * f) }));
    root.append(svg("text", { class: "axis", x: L - 4, y: y(top * f) + 3, "text-anchor": "end" }, f ? fmt(top * f) : "0"));
  }
  root.append(svg("text", { class: "axis", x: L, y: H - 2 }, "−" + duration(end - start)));
  root.append(svg("text", { class: "axis", x: W - 2, y: H - 2, "text-anchor": "end" }, "now"));
  for (const s of series) {
    // A null value (not readable then) breaks the line; a lone point is a dot.
    let run = [];
    const flush = () => {
      if (run.length === 1) root.append(svg("circle", { class: "dot " + (s.cls || ""), cx: run[0][0], cy: run[0][1], r: 1.8 }));
      if (run.length > 1) root.append(svg("polyline", { class: "series " + (s.cls || ""), points: run.map((p) => p.join(",")).join(" ") }));
      run = [];
    };
    times.forEach((t, i) => {
      const v = s.values[i];
      if (v == null) { flush(); return; }
      run.push([x(t).toFixed(1), y(v).toFixed(1)]);
    });
    flush();
  }
  if (points === 0) root.append(svg("text", { class: "empty", x: (W + L) / 2, y: H / 2, "text-anchor": "middle" }, "no data"));
  fig.dataset.points = String(points);
  fig.append(root);
  const last = series.map((s) => s.values[s.values.length - 1]).filter((v) => v != null);
  fig.querySelector(".now").textContent = last.length ? last.map(fmt).join(" / ") : "–";
}

async function refreshHistory() {
  let h;
  try { h = await api("/api/dashboard/history"); } catch (e) { setStatus(e.message, true); return; }
  const ss = h.samples, times = ss.map((s) => s.time), pick = (k, f) => ss.map((s) => (s[k] == null ? null : f ? f(s[k]) : s[k]));
  text($("history-hint"), h.intervalSeconds ? "sampled every " + h.intervalSeconds + " s by this server" : "history off");
  const w = h.windowSeconds;
  drawChart("chart-appends", times, w, [{ values: pick("appendsPerSecond") }], number);
  drawChart("chart-latency", times, w, [{ values: pick("appendP50Seconds"), cls: "p50" }, { values: pick("appendP99Seconds"), cls: "p99" }], ms);
  drawChart("chart-lag", times, w, [{ values: pick("flushLagSeconds") }], duration);
  drawChart("chart-backlog", times, w, [{ values: pick("backlog") }], number);
  drawChart("chart-dead", times, w, [{ values: pick("deadLetters"), cls: "bad" }], number);
  drawChart("chart-memory", times, w, [{ values: pick("redisUsedMemory") }], bytes);
}

// ---- Dead letters, with retry and drop.

// The dead letters whose Drop was clicked once: a refresh of the list keeps
// them asking for the second click.
const dropArmed = new Set();

async function refreshDeadLetters() {
  let r;
  try { r = await api("/api/deadletters?limit=20"); } catch (e) { setStatus(e.message, true); return; }
  const panel = $("dead-panel"), tbody = $("dead-letters");
  panel.hidden = r.total === 0;
  text($("dead-hint"), r.total + " in " + r.shards.length + " shard" + (r.shards.length === 1 ? "" : "s"));
  tbody.replaceChildren();
  for (const sh of r.shards) {
    for (const d of sh.letters) {
      const tr = el("tr");
      tr.dataset.id = d.id; tr.dataset.shard = String(d.shard); tr.dataset.session = d.sessionId || "";
      const session = d.sessionId ? d.appName + " / " + d.userId + " / " + d.sessionId : "–";
      const kind = (d.kind || "?") + (d.unit ? " · " + d.unit : "");
      for (const v of [String(d.shard), when(d.time), session, kind, d.reason]) { const td = el("td", "", v); td.title = v; tr.append(td); }
      const act = el("td");
      const retry = el("button", "retry", "Retry"), drop = el("button", "drop", "Drop");
      retry.type = drop.type = "button";
      const arm = () => { drop.classList.add("confirm"); drop.textContent = "Confirm drop"; };
      if (dropArmed.has(d.id)) arm();
      retry.addEventListener("click", () => { dropArmed.delete(d.id); deadLetterAction("retry", d); });
      drop.addEventListener("click", () => {
        if (!dropArmed.has(d.id)) { dropArmed.add(d.id); arm(); return; }
        dropArmed.delete(d.id);
        deadLetterAction("drop", d);
      });
      act.append(retry, drop);
      tr.append(act);
      tbody.append(tr);
    }
    if (sh.count > sh.letters.length) {
      const tr = el("tr"); const td = el("td", "hint", "shard " + sh.shard + ": " + (sh.count - sh.letters.length) + " more"); td.colSpan = 6; tr.append(td); tbody.append(tr);
    }
  }
}

async function deadLetterAction(action, d) {
  try {
    await api("/api/deadletters/" + action, { shard: d.shard, entry: d.entry });
    setStatus(action === "retry" ? "dead letter " + d.id + " back on shard " + d.shard + "'s change log" : "dead letter " + d.id + " dropped");
  } catch (e) { setStatus(action + ": " + e.message, true); }
  refreshDeadLetters();
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
refreshHistory();
setInterval(() => { refreshOverview(); refreshHistory(); if (state.selected) renderSession(); }, 2000);
