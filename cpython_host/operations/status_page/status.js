// The status page: polls api/status every POLL_MS and redraws in place.
// No build step, no library: plain DOM and hand-written SVG charts.
//
// Redraws keep what stays: a table row is keyed (client id, bridge name,
// counter) and updated cell by cell, so a row under the pointer, a button
// about to be clicked or a test's reference to an element survives the
// next poll. Everything a client sent (ids, users, filters) is set as
// text, never as HTML.
"use strict";

const POLL_MS = 2000;
const LEVELS = { 4: "3.1.1", 5: "5.0" };
const STATES = { connected: "connected", connecting: "connecting", stalled: "stalled", disconnected: "down", paused: "paused" };
const EXPIRY_WARN_DAYS = 30;
// The API's address. Not relative to the page's URL: a URL with
// user:password@ in it (a login typed into the address bar) is one fetch() refuses.
const BASE = location.origin + location.pathname.replace(/[^/]*$/, "");

let last = null;  // the latest /api/status answer
let polls = 0;

// ------------------------------------------------------------------ text

const pad = (n) => String(n).padStart(2, "0");

function clock(t) {
  const d = new Date(t * 1000);
  return pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
}

function day(t) {
  const d = new Date(t * 1000);
  return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate());
}

// A moment: its time of day if it is today (the broker's today), else its date and time.
function when(t) {
  if (t === null || t === undefined) return "–";
  return (day(t) === day(last.time) ? "" : day(t) + " ") + clock(t);
}

function duration(s) {
  s = Math.max(0, Math.floor(s));
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min";
  if (s < 86400) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
  return Math.floor(s / 86400) + " d " + Math.floor((s % 86400) / 3600) + " h";
}

function ago(t) {
  return t === null || t === undefined ? "before the broker started" : when(t) + " (" + duration(last.time - t) + " ago)";
}

function count(n) {
  return n === null || n === undefined ? "–" : n.toLocaleString("en-US");
}

function size(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : Math.round(n)) + " " + units[i];
}

// A rate: three significant figures at most, whole numbers from 100 on.
function number(v) {
  if (v === null || v === undefined) return "–";
  if (Number.isInteger(v)) return v.toLocaleString("en-US");
  return v >= 100 ? Math.round(v).toLocaleString("en-US") : v >= 10 ? v.toFixed(1) : v.toFixed(2);
}

// ------------------------------------------------------------------ DOM

const $ = (id) => document.getElementById(id);

function text(id, value) {
  const el = $(id);
  const t = String(value);
  if (el.textContent !== t) el.textContent = t;
}

function button(action, id, label, danger) {
  const b = document.createElement("button");
  b.type = "button";
  b.dataset.action = action;
  b.dataset.id = id;
  b.textContent = label;
  if (danger) b.className = "danger";
  return b;
}

// One cell: a value, or {text, cls, title}, or {buttons: [[action, id, label, danger]...]}.
function setCell(td, v) {
  if (v === null || typeof v !== "object") v = { text: v };
  const cls = v.cls || (v.buttons ? "actions" : "");
  if (td.className !== cls) td.className = cls;
  const title = v.title || "";
  if (td.title !== title) td.title = title;
  if (v.buttons) {
    const sig = JSON.stringify(v.buttons);
    if (td.dataset.sig !== sig) {
      td.dataset.sig = sig;
      td.replaceChildren(...v.buttons.map((b) => button(...b)));
    }
    return;
  }
  const t = v.text === null || v.text === undefined ? "–" : String(v.text);
  if (td.textContent !== t || td.children.length) td.textContent = t;
}

// A table's rows, keyed by key(row) and updated in place, in the order given;
// the <p class="empty"> after the table shows when there are none.
function fill(tableId, rows, key, cells, rowClass) {
  const table = $(tableId);
  const body = table.tBodies[0];
  const old = new Map(Array.from(body.rows, (tr) => [tr.dataset.key, tr]));
  let prev = null;
  for (const row of rows) {
    const k = String(key(row));
    let tr = old.get(k);
    if (tr) old.delete(k);
    else { tr = document.createElement("tr"); tr.dataset.key = k; }
    const values = cells(row);
    while (tr.cells.length > values.length) tr.deleteCell(-1);
    values.forEach((v, i) => setCell(tr.cells[i] || tr.insertCell(), v));
    const cls = rowClass ? rowClass(row) : "";
    if (tr.className !== cls) tr.className = cls;
    const next = prev ? prev.nextSibling : body.firstChild;
    if (next !== tr) body.insertBefore(tr, next);
    prev = tr;
  }
  for (const tr of old.values()) tr.remove();
  table.hidden = rows.length === 0;
  const empty = table.nextElementSibling;
  if (empty && empty.classList.contains("empty")) empty.hidden = rows.length > 0;
}

const num = (v) => ({ text: count(v), cls: "num" });

// ------------------------------------------------------------------ charts

const SVG = "http://www.w3.org/2000/svg";
const W = 600, H = 170, LEFT = 72, RIGHT = 10, TOP = 10, BOTTOM = 22;

function svg(name, attrs, parent) {
  const e = document.createElementNS(SVG, name);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
}

// 1, 2, 5 x 10^n: the step of about `n` ticks up to `top`.
function niceStep(top, n) {
  const raw = top / n;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

// For bytes: 1, 2, 4 ... x 1024^n, so that the labels are round in KiB and MiB.
function byteStep(top, n) {
  const raw = top / n;
  let p = 1;
  while (p * 1024 <= raw) p *= 1024;
  for (const m of [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]) if (m * p >= raw) return m * p;
  return 1024 * p;
}

const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400];

class Chart {
  // series: [[sample key, label, css class]]; format(value) for labels and the tooltip.
  constructor(figure, series, format, step) {
    this.series = series;
    this.format = format;
    this.step = step;
    this.samples = [];
    this.hoverT = null;  // the sample under the pointer, by time
    this.svg = svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img" }, figure);
    this.svg.setAttribute("aria-label", figure.querySelector("figcaption").textContent + " over time");
    const legend = document.createElement("span");
    legend.className = "legend";
    for (const [, label, cls] of series) {
      const s = document.createElement("span");
      s.className = cls;
      s.textContent = "■ " + label + " ";
      legend.appendChild(s);
    }
    figure.querySelector("figcaption").appendChild(legend);
    this.plot = svg("g", {}, this.svg);
    this.cursor = svg("g", { visibility: "hidden" }, this.svg);
    this.tip = document.createElement("div");
    this.tip.className = "tip";
    this.tip.hidden = true;
    figure.appendChild(this.tip);
    const area = svg("rect", { x: LEFT, y: TOP, width: W - LEFT - RIGHT, height: H - TOP - BOTTOM, fill: "transparent" }, this.svg);
    area.addEventListener("pointermove", (e) => this.pointer(e));
    area.addEventListener("pointerleave", () => { this.hoverT = null; this.showTip(); });
  }

  draw(samples, span) {
    this.samples = samples;
    const end = samples.length ? samples[samples.length - 1].t : last.time;
    this.t1 = end;
    this.t0 = end - span;
    let top = 0;
    for (const s of samples) for (const [key] of this.series) top = Math.max(top, s[key]);
    const step = this.step(top || 1, 4);
    this.top = Math.max(step, Math.ceil(top / step) * step);
    const g = svg("g", {});
    const axis = svg("g", { class: "axis" }, g);
    for (let v = 0; v <= this.top + step / 2; v += step) {
      const y = this.y(v);
      svg("line", { class: "grid", x1: LEFT, x2: W - RIGHT, y1: y, y2: y }, axis);
      svg("text", { x: LEFT - 6, y: y + 4, "text-anchor": "end" }, axis).textContent = this.format(v);
    }
    const every = TIME_STEPS.find((s) => span / s <= 6) || TIME_STEPS[TIME_STEPS.length - 1];
    for (let t = Math.ceil(this.t0 / every) * every; t <= this.t1; t += every) {
      const x = this.x(t);
      svg("line", { class: "grid", x1: x, x2: x, y1: TOP, y2: H - BOTTOM }, axis);
      const label = every < 60 ? clock(t) : clock(t).slice(0, 5);
      svg("text", { x: x, y: H - 6, "text-anchor": "middle" }, axis).textContent = label;
    }
    svg("rect", { class: "frame", x: LEFT, y: TOP, width: W - LEFT - RIGHT, height: H - TOP - BOTTOM, fill: "none" }, g);
    for (const [key, , cls] of this.series) {
      const points = samples.filter((s) => s.t >= this.t0).map((s) => this.x(s.t).toFixed(1) + "," + this.y(s[key]).toFixed(1));
      svg("polyline", { class: cls, points: points.join(" ") }, g);
    }
    this.plot.replaceWith(g);
    this.plot = g;
    this.showTip();
  }

  x(t) { return LEFT + (W - LEFT - RIGHT) * (t - this.t0) / Math.max(this.t1 - this.t0, 1); }
  y(v) { return H - BOTTOM - (H - TOP - BOTTOM) * v / this.top; }

  pointer(e) {
    const box = this.svg.getBoundingClientRect();
    const x = (e.clientX - box.left) * W / box.width;
    let best = null;
    for (const s of this.samples) {
      if (s.t < this.t0) continue;
      if (best === null || Math.abs(this.x(s.t) - x) < Math.abs(this.x(best.t) - x)) best = s;
    }
    this.hoverT = best ? best.t : null;
    this.showTip();
  }

  // The tooltip and cursor at the sample hovered (kept across redraws while it is in the ring).
  showTip() {
    const s = this.hoverT === null ? null : this.samples.find((x) => x.t === this.hoverT);
    if (!s) {
      this.cursor.setAttribute("visibility", "hidden");
      this.tip.hidden = true;
      return;
    }
    const x = this.x(s.t);
    this.cursor.replaceChildren();
    svg("line", { class: "cursor", x1: x, x2: x, y1: TOP, y2: H - BOTTOM }, this.cursor);
    for (const [key, , cls] of this.series) svg("circle", { class: cls, cx: x, cy: this.y(s[key]), r: 3 }, this.cursor);
    this.cursor.setAttribute("visibility", "visible");
    const lines = [clock(s.t)].concat(this.series.map(([key, label]) => label + ": " + this.format(s[key])));
    this.tip.replaceChildren(...lines.map((line, i) => {
      const span = document.createElement(i ? "span" : "b");
      span.textContent = line;
      return span;
    }));
    this.tip.hidden = false;
    // Beside the cursor, inside the chart (the side with room).
    const fig = this.tip.parentElement.getBoundingClientRect();
    const box = this.svg.getBoundingClientRect();
    const px = box.left - fig.left + x * box.width / W;
    const width = this.tip.offsetWidth;
    this.tip.style.left = (px + 12 + width > box.right - fig.left ? px - 12 - width : px + 12) + "px";
    this.tip.style.top = box.top - fig.top + 8 + "px";
  }
}

let charts = null;

function drawCharts(s) {
  if (charts === null) {
    charts = [
      new Chart($("chart-messages"), [["received", "received", "received"], ["sent", "sent", "sent"]],
        (v) => number(v) + "/s", niceStep),
      new Chart($("chart-bytes"), [["received_bytes", "received", "received"], ["sent_bytes", "sent", "sent"]],
        (v) => size(v) + "/s", byteStep),
    ];
  }
  // The ring's span (120 samples), or 30 samples' while it fills, so that
  // a broker just started does not draw a sliver at the right edge.
  const samples = Math.min(120, Math.max(30, s.throughput.length));
  for (const chart of charts) chart.draw(s.throughput, s.sample_seconds * samples);
  text("span", duration(s.sample_seconds * samples));
}

// ------------------------------------------------------------------ sections

function attention(s) {
  const items = [];
  for (const b of s.bridges) {
    const refused = b.refused_subscriptions || [];
    if (refused.length) {
      items.push(["bridge-refused:" + b.name, "bad", "Bridge " + b.name + ": this broker refuses its subscription " +
        refused.join(", ") + ", so nothing matching it goes up (a deny rule of user bridge:" + b.name +
        " in the ACL; SIGHUP asks again)"]);
    }
    if (b.state === "connected") continue;
    let line = "Bridge " + b.name + " is " + (STATES[b.state] || b.state);
    if (b.last_error) line += " (" + b.last_error + ")";
    line += ": " + count(b.queued) + " message(s) waiting";
    if (age(b.oldest_queued_age) !== null && b.queued) line += ", the oldest for " + duration(b.oldest_queued_age);
    items.push(["bridge:" + b.name, b.state === "connecting" || b.state === "paused" ? "warn" : "bad", line]);
  }
  const window = s.drops_since === null ? null : duration(s.time - s.drops_since);
  const within = window === null ? " since the broker started" : " in the last " + window;
  for (const d of s.drops) {
    if (d.recent > 0) {
      items.push(["drop:" + d.key, "warn", count(d.recent) + within + ": " + d.what + " (" + d.key + "; limit: " + d.limit + ")"]);
    }
  }
  for (const c of s.certificates || []) {
    if (c.error) items.push(["cert:" + c.what, "bad", "Certificate of " + c.what + " (" + c.file + "): " + c.error]);
    else if (c.not_after <= s.time) items.push(["cert:" + c.what, "bad", "Certificate of " + c.what + " expired on " + day(c.not_after)]);
    else if (c.not_after - s.time < EXPIRY_WARN_DAYS * 86400) {
      items.push(["cert:" + c.what, "warn", "Certificate of " + c.what + " expires on " + day(c.not_after) + " (in " + duration(c.not_after - s.time) + ")"]);
    }
  }
  if (!items.length) {
    items.push(["ok", "ok", "Nothing needs attention: " + (s.bridges.length ? "every uplink is connected, " : "") +
      "nothing dropped or refused" + within +
      (s.certificates && s.certificates.length ? ", no certificate expires within " + EXPIRY_WARN_DAYS + " days" : "") + "."]);
  }
  const list = document.querySelector("#attention ul");
  const old = new Map(Array.from(list.children, (li) => [li.dataset.key, li]));
  list.replaceChildren(...items.map(([key, cls, line]) => {
    const li = old.get(key) || document.createElement("li");
    li.dataset.key = key;
    if (li.className !== cls) li.className = cls;
    if (li.textContent !== line) li.textContent = line;
    return li;
  }));
}

// A bridge's age figure: null (not measured) and -1 (none: nothing waits, no ack yet) show as "–".
const age = (s) => (s === null || s === undefined || s < 0 ? null : s);

function bridges(s) {
  fill("bridges", s.bridges, (b) => b.name, (b) => [
    b.name,
    { text: STATES[b.state] || b.state, cls: "state " + (STATES[b.state] || b.state) },
    b.address || (b.addresses.length ? "tries " + b.addresses.join(", ") : null),
    { text: count(b.queued) + " (" + size(b.queued_bytes) + ")", cls: "num" },
    { text: age(b.oldest_queued_age) === null || !b.queued ? "–" : duration(b.oldest_queued_age), cls: "num" },
    { text: number(b.sent_rate), cls: "num", title: count(b.sent) + " sent since start" },
    { text: number(b.received_rate), cls: "num", title: count(b.received) + " received since start" },
    { text: b.inflight_max ? count(b.inflight) + " of " + count(b.inflight_max) : "–", cls: "num",
      title: "messages sent up, not yet acknowledged, of the upstream's window" },
    { text: age(b.last_ack_age) === null ? "–" : duration(b.last_ack_age) + " ago", cls: "num" },
    num(b.dead_lettered),
    num(b.dropped),
    { text: b.last_error || "–", cls: "error" },
    b.local_session ? b.local_session.client_id + (b.local_session.online ? " (online)" : b.local_session.kept ? " (offline, kept)" : " (none yet)") : "–",
  ]);
}

function drops(s) {
  const rows = s.drops.slice().sort((a, b) => (b.count > 0) - (a.count > 0));
  const all = $("drops-all").checked;
  fill("drops", rows, (d) => d.key, (d) => [
    d.key, d.what, num(d.count), num(d.recent), { text: d.limit, cls: "limit" },
  ], (d) => (d.count ? "" : "zero") + (d.recent ? " recent" : ""));
  const none = rows.every((d) => d.count === 0);
  $("drops").classList.toggle("all", all);
  $("drops").hidden = none && !all;
  $("drops-none").hidden = !none;
  text("drops-window", s.drops_since === null ? "" : "(recently: the last " + duration(s.time - s.drops_since) + ")");
}

function offline(s) {
  fill("offline_sessions", s.offline_sessions, (o) => o.client_id, (o) => {
    const cells = [
      o.client_id, o.user || "–", { text: ago(o.last_seen), cls: "time" }, num(o.queued), { text: size(o.queued_bytes), cls: "num" },
      num(o.inflight), num(o.dropped), { text: o.expires === null ? "never" : when(o.expires), cls: "time" },
    ];
    if (s.admin) cells.push({ buttons: [["drop-session", o.client_id, "drop session", true]] });
    return cells;
  });
}

function clients(s) {
  fill("clients", s.clients, (c) => c.client_id, (c) => {
    const cells = [
      c.client_id, c.user || "–", c.address, LEVELS[c.protocol_level] || c.protocol_level,
      { text: c.connected_since === null ? "–" : when(c.connected_since) + " (" + duration(s.time - c.connected_since) + ")", cls: "time" },
      num(c.messages_in), num(c.messages_out), num(c.inflight), num(c.queued), num(c.subscriptions),
    ];
    if (s.admin) cells.push({ buttons: [["kick", c.client_id, "kick"], ["drop-session", c.client_id, "drop session", true]] });
    return cells;
  });
}

function store(s) {
  const st = s.store;
  text("store_size", st.enabled ? size(st.size_bytes) : "no store");
  text("store-size", st.enabled ? size(st.size_bytes) : "no store (--data-dir)");
  text("store-live", st.live_bytes === null ? "–" : size(st.live_bytes));
  text("store-syncs", st.enabled ? number(st.syncs_per_second) + "/s (" + count(st.syncs) + " since start; store_sync = " + st.store_sync + ")" : "–");
  text("store-compaction", !st.enabled ? "–" : st.last_compaction !== null ? ago(st.last_compaction) + "; " + count(st.compactions) + " since start"
    : st.compactions ? count(st.compactions) + " since start" : "none since the broker started");
  text("store-path", st.path || "–");
}

function certificates(s) {
  $("certificates-section").hidden = s.certificates === null;
  if (s.certificates === null) return;
  fill("certificates", s.certificates, (c) => c.what, (c) => {
    if (c.error) return [c.what, { text: c.error, cls: "bad" }, "–", "–", c.file];
    const left = c.not_after - s.time;
    const cls = left <= 0 ? "bad" : left < EXPIRY_WARN_DAYS * 86400 ? "warn" : "ok";
    return [
      c.what, c.subject || (c.names || []).join(", ") || "–", { text: day(c.not_after), cls: "time", title: when(c.not_after) },
      { text: left <= 0 ? "expired" : Math.floor(left / 86400) + " days", cls: "num " + cls }, c.file,
    ];
  });
}

// The offset of this browser's time zone from UTC, as "UTC+01:00".
function browserZone() {
  const m = -new Date().getTimezoneOffset();
  return "UTC" + (m < 0 ? "-" : "+") + pad(Math.floor(Math.abs(m) / 60)) + ":" + pad(Math.abs(m) % 60);
}

function gateway(s) {
  const g = s.gateway;
  text("host", g.host);
  const list = $("listeners");
  const lines = g.listeners.length ? g.listeners : ["–"];
  if (Array.from(list.children, (li) => li.textContent).join("\n") !== lines.join("\n")) {
    list.replaceChildren(...lines.map((line) => { const li = document.createElement("li"); li.textContent = line; return li; }));
  }
  text("memory", g.memory === null ? "–" : size(g.memory) + " (resident)");
  text("disk", g.disk === null ? "– (no store)" : size(g.disk.free) + " of " + size(g.disk.total) + " free in " + g.data_dir);
  text("timezone", "the gateway's: " + g.timezone + "; times on this page are this browser's (" + browserZone() + ")");
  const warnings = $("warnings");
  const items = s.warnings.map((w) => when(w.t) + " " + w.level + " " + w.logger + ": " + w.text);
  if (Array.from(warnings.children, (li) => li.textContent).join("\n") !== items.join("\n")) {
    warnings.replaceChildren(...s.warnings.map((w, i) => {
      const li = document.createElement("li");
      li.className = w.level;
      li.textContent = items[i];
      return li;
    }));
  }
  $("warnings-none").hidden = s.warnings.length > 0;
}

function render(s) {
  last = s;
  document.body.classList.toggle("admin", s.admin);
  text("version", s.version);
  text("connected", count(s.connected));
  text("offline", count(s.offline));
  text("subscription_count", count(s.subscription_count));
  text("retained", count(s.retained));
  text("retained_sys", "(+" + count(s.retained_sys) + " $SYS)");
  text("queued", count(s.queued));
  text("queued_bytes", "(" + size(s.queued_bytes) + ")");
  text("viewer", s.user === null ? "" : s.admin ? "logged in as " + s.user + " (administrator)" :
    "logged in as " + s.user + ": your own clients and sessions only; actions need an administrator ([http] admins)");
  gateway(s);
  attention(s);
  bridges(s);
  drawCharts(s);
  drops(s);
  offline(s);
  clients(s);
  store(s);
  certificates(s);
  fill("subscriptions", s.subscriptions, (r) => r.client_id + "\n" + r.filter, (r) => [r.client_id, r.filter]);
  const state = $("state");
  state.className = "";
  text("state", "up " + duration(s.uptime) + "; " + count(s.messages_received) + " messages received, " +
    count(s.messages_sent) + " sent; updated " + clock(s.time) + " (" + browserZone() + ")");
  document.body.dataset.polls = ++polls;  // (tests wait for a redraw by it)
}

async function poll() {
  try {
    const response = await fetch(BASE + "api/status", { cache: "no-store" });
    if (!response.ok) throw new Error("HTTP " + response.status);
    render(await response.json());
  } catch (e) {
    $("state").className = "error";
    $("state").textContent = "cannot reach the broker: " + e.message;
  }
}

// ------------------------------------------------------------------ actions

function say(ok, line) {
  const m = $("message");
  m.className = ok ? "ok" : "bad";
  m.textContent = line;
}

// An action: a POST with a JSON body (a cross-site form cannot send one;
// the listener also checks its Origin). Administrators only: the listener
// answers 403 to anyone else, and this page shows them no buttons.
async function act(path, body) {
  let response, answer;
  try {
    response = await fetch(BASE + "api/" + path, {
      method: "POST", cache: "no-store", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    });
    answer = await response.text();
  } catch (e) {
    say(false, "cannot reach the broker: " + e.message);
    return;
  }
  if (!response.ok) {
    say(false, "refused (HTTP " + response.status + "): " + answer.trim());
  } else {
    const a = JSON.parse(answer);
    say(true, a.client_id !== undefined ? a.client_id + ": " + a.result : a.cleared + " retained message(s) matching " + a.filter + " cleared");
  }
  await poll();
}

const QUESTIONS = {
  "kick": (id) => "Disconnect " + id + "? A persistent session stays and the client may reconnect.",
  "drop-session": (id) => "Disconnect " + id + " and end its session? Its subscriptions and queued messages are discarded.",
};

document.addEventListener("click", (e) => {
  const b = e.target.closest("button[data-action]");
  if (!b) return;
  const id = b.dataset.id;
  if (confirm(QUESTIONS[b.dataset.action](id))) act(b.dataset.action, { client_id: id });
});

$("clear-retained").addEventListener("submit", (e) => {
  e.preventDefault();
  const filter = $("retained-filter").value;
  if (confirm("Clear every retained message matching " + filter + "?")) act("clear-retained", { filter: filter });
});

$("drops-all").addEventListener("change", () => last && drops(last));

poll();
setInterval(poll, POLL_MS);
