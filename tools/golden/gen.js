#!/usr/bin/env node
// Golden fixtures for Siskin's codec from an independent encoder.
//
// Usage (from the repository root):
//   npm ci                                   # at the repository root: mqtt-packet 9.0.2, pinned by package-lock.json
//   node tools/golden/gen.js > tests/fixtures/golden.json
//
// Every fixture is one packet: the protocol level of the connection, the fields
// in Siskin's own names (common/mqtt/packets.py), and the bytes mqtt-packet's
// generate() produced for it ("hex"). tests/core/test_golden.py checks that our
// decoder yields the fields and our encoder yields the bytes, fed whole, one byte
// at a time and followed by the next packet's bytes.
//
// Where mqtt-packet and the MQTT specification differ we follow the spec:
// - mqtt-packet always writes a Reason Code and a Property Length in v5
//   DISCONNECT and AUTH, and a Property Length after a non-zero Reason Code in v5
//   PUBACK/PUBREC/PUBREL/PUBCOMP (and a 0 Reason Code when `properties: {}` is
//   given). Those bytes are valid, but the spec lets a sender omit a 0 Reason Code
//   and an empty property block (MQTT 5.0 3.4.2.1, 3.14.2.1, 3.15.2.1), and our
//   encoder sends the shortest form, as Mosquitto does. Such fixtures carry
//   "encode_hex": the spec's short form, written out by hand below with the
//   section it comes from; our decoder must accept both forms.
// - mqtt-packet refuses a v5 password without a user name, which MQTT 5.0 allows
//   (3.1.2.9); that case is tested in tests/core/test_codec.py instead.
// - mqtt-packet encodes User Properties from a JS object, so all values of one
//   name are written together; interleaved names ((a,1),(b,2),(a,3)) cannot be
//   produced here and are covered by our own round-trip tests.
'use strict'

const mqtt = require('mqtt-packet')
const protocol = require('mqtt-packet/constants')

const fixtures = []

function hex (buf) {
  return Buffer.from(buf).toString('hex')
}

function bin (value) {
  if (value === undefined || value === null) return null
  return hex(typeof value === 'string' ? Buffer.from(value, 'utf8') : value)
}

// mqtt-packet properties object -> Siskin's [[id, value], ...] in wire order
// (writeProperties walks the object's keys in order, arrays element by element).
function props (properties) {
  const out = []
  if (!properties) return out
  for (const name of Object.keys(properties)) {
    const value = properties[name]
    if (value === undefined || value === null) continue
    const id = protocol.properties[name]
    const type = protocol.propertiesTypes[name]
    if (type === 'pair') {
      for (const key of Object.getOwnPropertyNames(value)) {
        const v = value[key]
        for (const item of (Array.isArray(v) ? v : [v])) out.push([id, [key, String(item)]])
      }
      continue
    }
    for (const item of (Array.isArray(value) ? value : [value])) {
      if (type === 'byte') out.push([id, item ? 1 : 0])
      else if (type === 'binary') out.push([id, bin(item)])
      else out.push([id, item])
    }
  }
  return out
}

const CODES = {
  connect: 1, connack: 2, publish: 3, puback: 4, pubrec: 5, pubrel: 6, pubcomp: 7,
  subscribe: 8, suback: 9, unsubscribe: 10, unsuback: 11, pingreq: 12, pingresp: 13,
  disconnect: 14, auth: 15
}

function fields (p, level) {
  const v5 = level === 5
  switch (p.cmd) {
    case 'connect': {
      const w = p.will
      return {
        level: p.protocolVersion,
        clean_start: p.clean === undefined ? true : !!p.clean,
        keep_alive: p.keepalive || 0,
        client_id: p.clientId || '',
        will_topic: w ? w.topic : null,
        will_payload: w ? bin(w.payload || '') : null,
        will_qos: w ? (w.qos || 0) : 0,
        will_retain: w ? !!w.retain : false,
        will_props: w && v5 ? props(w.properties) : [],
        username: p.username === undefined ? null : p.username,
        password: p.password === undefined ? null : bin(p.password),
        props: v5 ? props(p.properties) : [],
        proto_name: p.protocolId
      }
    }
    case 'connack':
      return {
        session_present: !!p.sessionPresent,
        reason: v5 ? p.reasonCode : p.returnCode,
        props: v5 ? props(p.properties) : []
      }
    case 'publish':
      return {
        topic: p.topic,
        payload: bin(p.payload),
        qos: p.qos || 0,
        retain: !!p.retain,
        dup: !!p.dup,
        packet_id: p.messageId || 0,
        props: v5 ? props(p.properties) : []
      }
    case 'puback': case 'pubrec': case 'pubrel': case 'pubcomp':
      return {
        packet_id: p.messageId,
        reason: v5 ? (p.reasonCode || 0) : 0,
        props: v5 ? props(p.properties) : []
      }
    case 'subscribe':
      return {
        packet_id: p.messageId,
        topics: p.subscriptions.map(s => [s.topic, v5
          ? (s.qos | (s.nl ? 4 : 0) | (s.rap ? 8 : 0) | ((s.rh || 0) << 4))
          : s.qos]),
        props: v5 ? props(p.properties) : []
      }
    case 'suback':
      return { packet_id: p.messageId, reasons: p.granted, props: v5 ? props(p.properties) : [] }
    case 'unsubscribe':
      return { packet_id: p.messageId, filters: p.unsubscriptions, props: v5 ? props(p.properties) : [] }
    case 'unsuback':
      return { packet_id: p.messageId, reasons: v5 ? p.granted : [], props: v5 ? props(p.properties) : [] }
    case 'pingreq': case 'pingresp':
      return {}
    case 'disconnect': case 'auth':
      return { reason: v5 ? (p.reasonCode || 0) : 0, props: v5 ? props(p.properties) : [] }
  }
  throw new Error('unknown cmd ' + p.cmd)
}

// add(name, level, packet[, encodeHex, note]): encodeHex is the spec's short
// form where it differs from mqtt-packet's bytes (see the header comment).
function add (name, level, packet, encodeHex, note) {
  const bytes = mqtt.generate(packet, { protocolVersion: level })
  const f = { name, level, ptype: CODES[packet.cmd], fields: fields(packet, level), hex: hex(bytes) }
  if (encodeHex) f.encode_hex = encodeHex
  if (note) f.note = note
  fixtures.push(f)
}

const UTF8 = 'caf\u00e9/\u20ac/\ud83d\ude00' // 2-, 3- and 4-byte sequences
const big = Buffer.alloc(16400) // > 16383: a three-byte Remaining Length
for (let i = 0; i < big.length; i++) big[i] = (i * 7 + 3) & 0xff

// ---- CONNECT -------------------------------------------------------------
add('connect-31-minimal', 3, { cmd: 'connect', protocolId: 'MQIsdp', protocolVersion: 3, clientId: 'c31', clean: true, keepalive: 30 })
add('connect-31-full', 3, {
  cmd: 'connect', protocolId: 'MQIsdp', protocolVersion: 3, clientId: 'legacy', clean: false, keepalive: 65535,
  will: { topic: 'last/will', payload: Buffer.from('gone'), qos: 2, retain: false },
  username: 'user', password: Buffer.from('secret')
})
for (const level of [4, 5]) {
  add(`connect-${level}-minimal`, level, { cmd: 'connect', protocolId: 'MQTT', protocolVersion: level, clientId: '', clean: true, keepalive: 0 })
  add(`connect-${level}-will-user-pass`, level, {
    cmd: 'connect', protocolId: 'MQTT', protocolVersion: level, clientId: 'sensor-1', clean: false, keepalive: 60,
    will: { topic: 'status/sensor-1', payload: Buffer.from('offline'), qos: 1, retain: true },
    username: 'alice', password: Buffer.from([0, 1, 2, 255])
  })
  add(`connect-${level}-will-qos2-user-only-utf8`, level, {
    cmd: 'connect', protocolId: 'MQTT', protocolVersion: level, clientId: UTF8, clean: true, keepalive: 1,
    will: { topic: UTF8, payload: Buffer.alloc(0), qos: 2, retain: false },
    username: UTF8
  })
}
add('connect-5-all-properties', 5, {
  cmd: 'connect', protocolId: 'MQTT', protocolVersion: 5, clientId: 'v5-client', clean: false, keepalive: 300,
  properties: {
    sessionExpiryInterval: 4294967295,
    receiveMaximum: 20,
    maximumPacketSize: 268435460,
    topicAliasMaximum: 10,
    requestResponseInformation: true,
    requestProblemInformation: false,
    userProperties: { region: 'eu', tag: ['a', 'b'] },
    authenticationMethod: 'SCRAM-SHA-256',
    authenticationData: Buffer.from('n,,n=user,r=abc')
  },
  will: {
    topic: 'clients/v5/state',
    payload: Buffer.from('{"online":false}'),
    qos: 1,
    retain: false,
    properties: {
      willDelayInterval: 30,
      payloadFormatIndicator: true,
      messageExpiryInterval: 3600,
      contentType: 'application/json',
      responseTopic: 'clients/v5/reply',
      correlationData: Buffer.from([0xde, 0xad, 0xbe, 0xef]),
      userProperties: { why: 'will' }
    }
  },
  username: 'bob',
  password: Buffer.from('pw')
})

// ---- CONNACK -------------------------------------------------------------
add('connack-4-accepted-session-present', 4, { cmd: 'connack', sessionPresent: true, returnCode: 0 })
add('connack-4-refused-not-authorized', 4, { cmd: 'connack', sessionPresent: false, returnCode: 5 })
add('connack-5-no-properties', 5, { cmd: 'connack', sessionPresent: false, reasonCode: 0 })
add('connack-5-all-properties', 5, {
  cmd: 'connack', sessionPresent: true, reasonCode: 0,
  properties: {
    sessionExpiryInterval: 120,
    receiveMaximum: 100,
    maximumQoS: 1,
    retainAvailable: true,
    maximumPacketSize: 65536,
    assignedClientIdentifier: 'auto-0001',
    topicAliasMaximum: 16,
    reasonString: 'welcome',
    userProperties: { server: 'siskin' },
    wildcardSubscriptionAvailable: true,
    subscriptionIdentifiersAvailable: false,
    sharedSubscriptionAvailable: true,
    serverKeepAlive: 45,
    responseInformation: 'resp/',
    serverReference: 'other.example:1883',
    authenticationMethod: 'SCRAM-SHA-256',
    authenticationData: Buffer.from('v=xyz')
  }
})
add('connack-5-refused', 5, { cmd: 'connack', sessionPresent: false, reasonCode: 0x87, properties: { reasonString: 'not authorized' } })

// ---- PUBLISH -------------------------------------------------------------
for (const level of [4, 5]) {
  add(`publish-${level}-qos0`, level, { cmd: 'publish', topic: 'a/b', payload: Buffer.from('hello'), qos: 0, retain: false, dup: false })
  add(`publish-${level}-qos1-retain-empty-payload`, level, { cmd: 'publish', topic: 'retained/x', payload: Buffer.alloc(0), qos: 1, messageId: 1, retain: true, dup: false })
  add(`publish-${level}-qos2-dup-utf8`, level, { cmd: 'publish', topic: UTF8, payload: Buffer.from(UTF8), qos: 2, messageId: 65535, retain: false, dup: true })
  // one three-byte Remaining Length is enough (the fixture file is also read on small heaps)
  if (level === 4) add(`publish-${level}-large-payload`, level, { cmd: 'publish', topic: 'bulk', payload: big, qos: 1, messageId: 300, retain: false, dup: false })
  add(`publish-${level}-two-byte-length`, level, { cmd: 'publish', topic: 't', payload: big.subarray(0, 200), qos: 0, retain: true, dup: false })
}
add('publish-5-all-properties', 5, {
  cmd: 'publish', topic: 'req/1', payload: Buffer.from('{"x":1}'), qos: 1, messageId: 42, retain: false, dup: false,
  properties: {
    payloadFormatIndicator: true,
    messageExpiryInterval: 60,
    topicAlias: 3,
    responseTopic: 'resp/1',
    correlationData: Buffer.from('corr-1'),
    userProperties: { first: '1', second: ['2', '3'], third: '' },
    subscriptionIdentifier: [1, 268435455, 16384],
    contentType: 'application/json'
  }
})
add('publish-5-topic-alias-empty-topic', 5, {
  cmd: 'publish', topic: '', payload: Buffer.from('aliased'), qos: 0, retain: false, dup: false,
  properties: { topicAlias: 65535 }
})
add('publish-5-format-indicator-0', 5, {
  cmd: 'publish', topic: 'bin', payload: Buffer.from([0, 255]), qos: 2, messageId: 7, retain: false, dup: false,
  properties: { payloadFormatIndicator: false, subscriptionIdentifier: 127 }
})

// ---- PUBACK / PUBREC / PUBREL / PUBCOMP --------------------------------------
const ACK_REASON = { puback: 0x10, pubrec: 0x97, pubrel: 0x92, pubcomp: 0x92 }
const ACK_FIRST = { puback: '40', pubrec: '50', pubrel: '62', pubcomp: '70' }
for (const cmd of ['puback', 'pubrec', 'pubrel', 'pubcomp']) {
  add(`${cmd}-4`, 4, { cmd, messageId: 1234 })
  add(`${cmd}-5-short`, 5, { cmd, messageId: 1, reasonCode: 0 })
  add(`${cmd}-5-reason-properties`, 5, {
    cmd, messageId: 65535, reasonCode: ACK_REASON[cmd],
    properties: { reasonString: 'because', userProperties: { k: 'v' } }
  })
  add(`${cmd}-5-success-properties`, 5, { cmd, messageId: 2, reasonCode: 0, properties: { userProperties: { trace: 'id-9' } } })
  // MQTT 5.0 3.4.2.1: a Remaining Length of 3 means a Reason Code and no Property Length.
  add(`${cmd}-5-reason-no-properties`, 5, { cmd, messageId: 258, reasonCode: ACK_REASON[cmd] },
    ACK_FIRST[cmd] + '030102' + ACK_REASON[cmd].toString(16),
    'mqtt-packet writes an empty Property Length after the Reason Code; the spec allows omitting it (3.4.2.2.1)')
  // MQTT 5.0 3.4.2.1: Reason Code 0 and no properties may be sent as Remaining Length 2.
  add(`${cmd}-5-success-empty-properties`, 5, { cmd, messageId: 3, reasonCode: 0, properties: {} },
    ACK_FIRST[cmd] + '020003',
    'mqtt-packet writes Reason Code 0 and an empty Property Length; the spec allows omitting both (3.4.2.1)')
}

// ---- SUBSCRIBE / SUBACK --------------------------------------------------
add('subscribe-4-one', 4, { cmd: 'subscribe', messageId: 10, subscriptions: [{ topic: 'a/+/c', qos: 1 }] })
add('subscribe-4-many', 4, {
  cmd: 'subscribe', messageId: 11,
  subscriptions: [{ topic: '#', qos: 0 }, { topic: 'x/y', qos: 1 }, { topic: UTF8, qos: 2 }, { topic: '$SYS/#', qos: 0 }]
})
add('subscribe-5-options', 5, {
  cmd: 'subscribe', messageId: 12,
  subscriptions: [
    { topic: 'a/#', qos: 2, nl: true, rap: true, rh: 2 },
    { topic: '$share/g/b', qos: 1, nl: false, rap: false, rh: 1 },
    { topic: 'c', qos: 0, nl: false, rap: true, rh: 0 }
  ],
  properties: { subscriptionIdentifier: 268435455, userProperties: { sub: 'yes' } }
})
add('subscribe-5-no-properties', 5, { cmd: 'subscribe', messageId: 13, subscriptions: [{ topic: 'z', qos: 1, nl: true, rap: false, rh: 0 }] })
add('suback-4', 4, { cmd: 'suback', messageId: 10, granted: [0, 1, 2, 128] })
add('suback-5', 5, {
  cmd: 'suback', messageId: 12, granted: [2, 1, 0x80, 0x83, 0x87, 0x8f, 0x91, 0x97, 0x9e, 0xa1, 0xa2],
  properties: { reasonString: 'partial', userProperties: { a: 'b' } }
})
add('suback-5-no-properties', 5, { cmd: 'suback', messageId: 1, granted: [0] })

// ---- UNSUBSCRIBE / UNSUBACK ----------------------------------------------
add('unsubscribe-4', 4, { cmd: 'unsubscribe', messageId: 20, unsubscriptions: ['a/+/c', UTF8] })
add('unsubscribe-5', 5, { cmd: 'unsubscribe', messageId: 21, unsubscriptions: ['x/#'], properties: { userProperties: { u: '1' } } })
add('unsubscribe-5-no-properties', 5, { cmd: 'unsubscribe', messageId: 22, unsubscriptions: ['a', 'b', 'c'] })
add('unsuback-4', 4, { cmd: 'unsuback', messageId: 20 })
add('unsuback-5', 5, {
  cmd: 'unsuback', messageId: 21, granted: [0x00, 0x11, 0x80, 0x83, 0x87, 0x8f, 0x91],
  properties: { reasonString: 'done', userProperties: { n: '7' } }
})
add('unsuback-5-no-properties', 5, { cmd: 'unsuback', messageId: 23, granted: [0] })

// ---- PINGREQ / PINGRESP --------------------------------------------------
for (const level of [4, 5]) {
  add(`pingreq-${level}`, level, { cmd: 'pingreq' })
  add(`pingresp-${level}`, level, { cmd: 'pingresp' })
}

// ---- DISCONNECT ----------------------------------------------------------
add('disconnect-4', 4, { cmd: 'disconnect' })
add('disconnect-5-properties', 5, {
  cmd: 'disconnect', reasonCode: 0x9c,
  properties: { sessionExpiryInterval: 0, reasonString: 'moving', serverReference: 'b.example', userProperties: { x: 'y' } }
})
add('disconnect-5-takeover-reason-string', 5, { cmd: 'disconnect', reasonCode: 0x8e, properties: { reasonString: 'taken over' } })
// MQTT 5.0 3.14.2.1: Reason Code 0 and no properties may be sent as Remaining Length 0.
add('disconnect-5-normal', 5, { cmd: 'disconnect', reasonCode: 0 }, 'e000',
  'mqtt-packet always writes the Reason Code and Property Length; the spec allows Remaining Length 0 (3.14.2.1)')
// MQTT 5.0 3.14.2.2.1: with Remaining Length 1 the Property Length is omitted.
add('disconnect-5-with-will', 5, { cmd: 'disconnect', reasonCode: 0x04 }, 'e00104',
  'mqtt-packet writes an empty Property Length; the spec allows omitting it (3.14.2.2.1)')

// ---- AUTH ----------------------------------------------------------------
add('auth-5-continue', 5, {
  cmd: 'auth', reasonCode: 0x18,
  properties: { authenticationMethod: 'SCRAM-SHA-256', authenticationData: Buffer.from([1, 2, 3]), reasonString: 'step', userProperties: { s: '1' } }
})
add('auth-5-reauthenticate', 5, { cmd: 'auth', reasonCode: 0x19, properties: { authenticationMethod: 'SCRAM-SHA-256' } })
// MQTT 5.0 3.15.2.1: Reason Code 0 and no properties may be sent as Remaining Length 0.
add('auth-5-success', 5, { cmd: 'auth', reasonCode: 0 }, 'f000',
  'mqtt-packet always writes the Reason Code and Property Length; the spec allows Remaining Length 0 (3.15.2.1)')

const out = {
  generator: 'mqtt-packet ' + require('mqtt-packet/package.json').version + ' via tools/golden/gen.js',
  fixtures
}
process.stdout.write(JSON.stringify(out, null, 1) + '\n')
