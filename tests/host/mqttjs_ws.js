// MQTT.js (npm `mqtt` 5.x) over ws:// or wss:// against a running Siskin,
// for tests/host/test_server_websocket.py:
//
//   node tests/host/mqttjs_ws.js URL PROTOCOL_VERSION
//
// A subscriber on js/# at QoS 2 and a publisher sending one message at each
// QoS 0, 1 and 2; prints what the subscriber received as one JSON line and
// exits 0, or prints the error and exits 1. For wss:// the test's CA comes in
// NODE_EXTRA_CA_CERTS; certificates are verified (rejectUnauthorized).
"use strict";

const mqtt = require("mqtt");

const [url, version] = process.argv.slice(2);
const options = {
  protocolVersion: Number(version),
  reconnectPeriod: 0, // a failure is an answer, not something to retry
  connectTimeout: 5000,
  rejectUnauthorized: true,
};

async function main() {
  const sub = await mqtt.connectAsync(url, { ...options, clientId: `js-sub-${version}` });
  const got = [];
  const all = new Promise((resolve) => {
    sub.on("message", (topic, payload, packet) => {
      got.push({ topic, payload: payload.toString(), qos: packet.qos });
      if (got.length === 3) resolve();
    });
  });
  const granted = await sub.subscribeAsync("js/#", { qos: 2 });
  const pub = await mqtt.connectAsync(url, { ...options, clientId: `js-pub-${version}` });
  for (const qos of [0, 1, 2]) {
    await pub.publishAsync(`js/${qos}`, `message at QoS ${qos} over MQTT ${version}`, { qos });
  }
  await all;
  await pub.endAsync();
  await sub.endAsync();
  console.log(JSON.stringify({ granted: granted.map((g) => g.qos), got }));
}

const timer = setTimeout(() => {
  console.log("timed out");
  process.exit(1);
}, 20000);
main().then(
  () => clearTimeout(timer),
  (err) => {
    console.log(`error: ${err && err.message ? err.message : err}`);
    process.exit(1);
  },
);
