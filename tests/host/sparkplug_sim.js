// Independent Sparkplug B clients for the bridge's births-first run
// (tests/host/test_sparkplug_births.py): MQTT.js 5 clients whose payloads
// are made and read by Eclipse Tahu's own codec (npm sparkplug-payload).
//
//   node sparkplug_sim.js host <port>
//     A host application: subscribes to spBv1.0/# and mark/# (QoS 1) and
//     prints one JSON line per message, in arrival order:
//     {"topic", "seq", "alias", "value", "name"} (the first metric), or
//     {"mark": "<payload>"}; {"ready": true} once subscribed.
//   node sparkplug_sim.js node <port> <group> <edge node> <device>
//     An edge node: NBIRTH and DBIRTH (QoS 0, as Sparkplug sends them; the
//     metric "count" named, alias 1), then NDATA and DDATA in turn (QoS 1,
//     by alias only, the value counting up from 0) each after the last's
//     PUBACK, until its stdin closes; then {"acked": n} (the DATA the
//     broker acknowledged). {"born": true} once the births are written,
//     {"acked": n} every 100.
"use strict";
const mqtt = require("mqtt");
const spb = require("sparkplug-payload").get("spBv1.0");

const [mode, port, group, node, device] = process.argv.slice(2);
const url = "mqtt://127.0.0.1:" + port;
const say = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

function first(payload) {
  const m = (payload.metrics || [])[0] || {};
  const num = (v) => (v && typeof v === "object" && "low" in v ? Number(v.toString()) : v);
  return { seq: num(payload.seq), alias: num(m.alias), value: num(m.value), name: m.name };
}

if (mode === "host") {
  const c = mqtt.connect(url, { clientId: "scada-host-app", clean: true, reconnectPeriod: 0 });
  c.on("connect", () => {
    c.subscribe({ "spBv1.0/#": { qos: 1 }, "mark/#": { qos: 1 } }, (err) => say(err ? { error: String(err) } : { ready: true }));
  });
  c.on("message", (topic, payload) => {
    if (topic.startsWith("mark/")) return say({ mark: payload.toString() });
    say(Object.assign({ topic }, first(spb.decodePayload(payload))));
  });
  c.on("error", (err) => say({ error: String(err) }));
} else if (mode === "node") {
  const base = "spBv1.0/" + group + "/";
  const c = mqtt.connect(url, { clientId: node, clean: true, reconnectPeriod: 0 });
  let stop = false;
  process.stdin.on("end", () => (stop = true));
  process.stdin.resume();
  const birth = (bdSeq) => ({
    timestamp: Date.now(),
    seq: 0,
    metrics: [
      { name: "count", alias: 1, type: "Int64", value: 0 },
      ...(bdSeq === null ? [] : [{ name: "bdSeq", type: "Int64", value: bdSeq }]),
    ],
  });
  c.on("connect", async () => {
    await c.publishAsync(base + "NBIRTH/" + node, Buffer.from(spb.encodePayload(birth(0))), { qos: 0 });
    await c.publishAsync(base + "DBIRTH/" + node + "/" + device, Buffer.from(spb.encodePayload(birth(null))), { qos: 0 });
    say({ born: true });
    let n = 0;
    while (!stop) {
      const topic = n % 2 ? base + "DDATA/" + node + "/" + device : base + "NDATA/" + node;
      const payload = { timestamp: Date.now(), seq: (n + 1) % 256, metrics: [{ alias: 1, type: "Int64", value: n }] };
      await c.publishAsync(topic, Buffer.from(spb.encodePayload(payload)), { qos: 1 });
      n += 1;
      if (n % 100 === 0) say({ acked: n });
    }
    say({ acked: n, done: true });
    c.end(false, () => process.exit(0));
  });
  c.on("error", (err) => say({ error: String(err) }));
} else {
  process.stderr.write("usage: sparkplug_sim.js host PORT | node PORT GROUP NODE DEVICE\n");
  process.exit(2);
}
