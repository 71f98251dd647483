// The status page: polls /api/status every POLL_MS and redraws. No build
// step, no library: plain DOM and a canvas.
"use strict";

const POLL_MS = 2000;
const LEVELS = { 4: "3.1.1", 5: "5.0" };

function text(id, value) {
  document.getElementById(id).textContent = value;
}

function size(bytes) {
  if (bytes === null || bytes === undefined) return "no store";
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (bytes >= 1024 && i < units.length - 1) { bytes /= 1024; i++; }
  return (i ? bytes.toFixed(1) : bytes) + " " + units[i];
}

function fill(tableId, rows, cells) {
  const body = document.querySelector("#" + tableId + " tbody");
  body.replaceChildren(...rows.map((row) => {
    const tr = document.createElement("tr");
    for (const [value, numeric] of cells(row)) {
      const td = document.createElement("td");
      td.textContent = value;  // text, never HTML: ids and filters come from clients
      if (numeric) td.className = "num";
      tr.appendChild(td);
    }
    return tr;
  }));
}

function chart(samples) {
  const canvas = document.getElementById("chart");
  const g = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height, pad = 24;
  g.clearRect(0, 0, w, h);
  const top = Math.max(1, ...samples.map((s) => Math.max(s.received, s.sent)));
  g.fillStyle = "#777";
  g.font = "11px sans-serif";
  g.fillText(top.toFixed(top < 10 ? 1 : 0) + "/s", 4, 12);
  g.fillText("0", 4, h - 4);
  g.strokeStyle = "#eee";
  g.beginPath(); g.moveTo(pad, h - pad / 2); g.lineTo(w, h - pad / 2); g.stroke();
  // Samples across the width: the ring the broker keeps (120), and at
  // least 30 while it fills, so the first minutes are not a sliver.
  const n = Math.min(120, Math.max(30, samples.length));
  const x = (i) => pad + (w - pad) * (n - samples.length + i) / Math.max(n - 1, 1);
  const y = (v) => h - pad / 2 - (h - pad) * v / top;
  for (const [key, color] of [["received", "#1f77b4"], ["sent", "#ff7f0e"]]) {
    g.strokeStyle = color;
    g.lineWidth = 2;
    g.beginPath();
    samples.forEach((s, i) => (i ? g.lineTo(x(i), y(s[key])) : g.moveTo(x(i), y(s[key]))));
    g.stroke();
  }
}

async function poll() {
  const state = document.getElementById("state");
  try {
    const response = await fetch("api/status", { cache: "no-store" });
    if (!response.ok) throw new Error("HTTP " + response.status);
    const s = await response.json();
    text("version", s.version);
    for (const key of ["connected", "sessions", "subscription_count", "retained", "queued"]) text(key, s[key]);
    text("store", size(s.store.size_bytes));
    fill("clients", s.clients, (c) => [
      [c.client_id], [c.address], [LEVELS[c.protocol_level] || c.protocol_level],
      [c.keep_alive, true], [c.inflight, true], [c.queued, true], [c.subscriptions, true],
    ]);
    fill("subscriptions", s.subscriptions, (r) => [[r.client_id], [r.filter]]);
    text("span", s.sample_seconds * 2 + " minutes");  // 120 samples
    // Who is looking: an administrator sees every client; another user its own.
    text("viewer", s.user === null ? "" : s.admin ? "logged in as " + s.user + " (administrator)" :
      "logged in as " + s.user + ": your own clients and subscriptions only; actions need an administrator ([http] admins)");
    chart(s.throughput);
    state.className = "";
    state.textContent = "up " + s.uptime + " s; " + s.messages_received + " messages received, " +
      s.messages_sent + " sent; updated " + new Date().toLocaleTimeString();
  } catch (e) {
    state.className = "error";
    state.textContent = "cannot reach the broker: " + e.message;
  }
}

poll();
setInterval(poll, POLL_MS);
