// Sparkplug B payloads by Eclipse Tahu's own encoder (npm sparkplug-payload),
// the independent side of the Sparkplug tests (tests/host/test_sparkplug.py):
//   node sparkplug_payload.js encode '<JSON payload>'   -> the bytes, hex
//   node sparkplug_payload.js decode <hex>              -> the payload, JSON
// In JSON a 64-bit value (timestamp, seq, an Int64/UInt64 metric) is a
// decimal string, so nothing passes through a double.
"use strict";
const spb = require("sparkplug-payload").get("spBv1.0");

function plain(value) {
  if (value && typeof value === "object" && typeof value.toString === "function" && "low" in value) {
    return value.toString();
  }
  if (Array.isArray(value)) return value.map(plain);
  if (value && typeof value === "object" && !(value instanceof Uint8Array)) {
    const out = {};
    for (const k of Object.keys(value)) out[k] = plain(value[k]);
    return out;
  }
  return value;
}

const [op, arg] = process.argv.slice(2);
if (op === "encode") {
  const payload = JSON.parse(arg);
  process.stdout.write(Buffer.from(spb.encodePayload(payload)).toString("hex") + "\n");
} else if (op === "decode") {
  process.stdout.write(JSON.stringify(plain(spb.decodePayload(Buffer.from(arg, "hex")))) + "\n");
} else {
  process.stderr.write("usage: sparkplug_payload.js encode JSON | decode HEX\n");
  process.exit(2);
}
