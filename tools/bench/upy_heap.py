# mypy: ignore-errors
# (MicroPython code: gc.mem_alloc and micropython exist only there, and the
# core it drives is untyped; mypy strict has nothing to check here.)
#
# Heap bytes the core allocates per routed message, under MicroPython.
#
#   node tools/bench/upy_wasm.mjs                  32-bit wasm port (the boards' object model)
#   MICROPYPATH=. .venv/bin/micropython -X heapsize=4M tools/bench/upy_heap.py
#                                                  64-bit unix port, + heap_lock proofs
#
# Drives one sans-I/O Broker in memory (as tests/core/harness.py does, but
# with every input packet encoded before the measurement): a publisher and
# 1 or 10 subscribers, QoS 0 or QoS 1, with the esp32 board's switches that
# matter here (prealloc pools, no match cache). The 3.1.1 cases carry no
# properties; the v5 cases carry a Content Type and two User Properties
# (forwarded to every subscriber), and with "sub_id" each subscriber's
# Subscription Identifier (a per-delivery property). For each case it measures,
# with gc.disable() and gc.mem_alloc() deltas over `N` messages:
#   route   the publisher's PUBLISH in (feed, frame, decode, route) and every
#           delivery encoded, plus the shell taking the output (next_dirty,
#           Output.take): bytes per message;
#   acks    the subscribers' PUBACKs for QoS 1 (bytes per PUBACK);
# and the messages per second of the route phase (collector on).
# With the argument "gc" (unix port, e.g. -X heapsize=110K for a board's
# heap) it times the collections instead while routing a stream.
# A phase that measures 0 is run again under micropython.heap_lock() where
# the port has it: any allocation then raises MemoryError, so "0" is proved,
# not sampled. Prints one JSON line per case and phase.
#
# Runs under MicroPython only (gc.mem_alloc); imports nothing but common/.

import gc
import json
import sys
import time

from common.broker.broker import Broker
from common.broker.settings import new_settings

try:
    import micropython
except ImportError:
    micropython = None

N = 200  # messages per measurement
NOW = 1000
TOPIC = "bench/heap"
PAYLOAD = bytes(range(64))


def vbi(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def mqtt_str(s):
    b = s.encode()
    return bytes((len(b) >> 8, len(b) & 0xFF)) + b


def packet(first, body):
    return bytes((first,)) + vbi(len(body)) + body


# The v5 PUBLISH's properties: Content Type, two User Properties.
PROPS5 = (
    b"\x03" + mqtt_str("application/json")
    + b"\x26" + mqtt_str("trace") + mqtt_str("4bf92f3577b34da6")
    + b"\x26" + mqtt_str("origin") + mqtt_str("sensor-7")
)


def props_block(props):
    return vbi(len(props)) + props if props is not None else b""


def connect_pkt(client_id, level):
    return packet(0x10, mqtt_str("MQTT") + bytes((level, 2, 0, 0)) + props_block(b"" if level == 5 else None) + mqtt_str(client_id))


def subscribe_pkt(pid, flt, qos, level, sub_id):
    props = None
    if level == 5:
        props = b"\x0b" + vbi(sub_id) if sub_id else b""
    return packet(0x82, bytes((pid >> 8, pid & 0xFF)) + props_block(props) + mqtt_str(flt) + bytes((qos,)))


def publish_pkt(qos, pid, level):
    mid = bytes((pid >> 8, pid & 0xFF)) if qos else b""
    return packet(0x30 | (qos << 1), mqtt_str(TOPIC) + mid + props_block(PROPS5 if level == 5 else None) + PAYLOAD)


def puback_pkt(pid):
    return bytes((0x40, 2, pid >> 8, pid & 0xFF))


def entropy(n):
    return bytes(n)


class Rig:
    """A broker, one publisher and `subs` subscribers, all connected."""

    def __init__(self, subs, qos, level, sub_id):
        settings = new_settings(
            {
                "prealloc": True,
                "match_cache_bytes": 0,
                "max_connections": 16,
                "max_sessions": 16,
                "max_subscriptions": 48,
                "max_messages": 96,
                "max_queued_messages": 32,  # (prealloc: every session's queue at its cap)
                "max_inflight": 8,
                "sys_interval": 0,
            }
        )
        self.broker = Broker(settings, entropy)
        self.qos = qos
        self.level = level
        self.pub = self.join("pub")
        self.subs = []
        for i in range(subs):
            cid = self.join("sub" + str(i))
            self.feed(cid, subscribe_pkt(1, TOPIC, qos, level, i + 1 if sub_id else 0))
            self.subs.append(cid)
        self.drain()

    def join(self, client_id):
        cid = self.broker.connection_made(NOW)
        self.feed(cid, connect_pkt(client_id, self.level))
        return cid

    def feed(self, cid, data):
        self.broker.data_received(cid, data, NOW)
        self.drain()

    def drain(self):
        broker = self.broker
        cid = broker.output.next_dirty()
        while cid >= 0:
            broker.output.take(cid)
            cid = broker.output.next_dirty()


def measure(fn, n):
    """Bytes allocated per call of fn(i) over n calls, the collector off."""
    gc.collect()
    gc.disable()
    try:
        before = gc.mem_alloc()
        for i in range(n):
            fn(i)
        after = gc.mem_alloc()
    finally:
        gc.enable()
    return (after - before) / n


def locked(fn, n):
    """True if n calls of fn(i) allocate nothing (micropython.heap_lock)."""
    if micropython is None or not hasattr(micropython, "heap_lock"):
        return None
    gc.collect()
    micropython.heap_lock()
    try:
        for i in range(n):
            fn(i)
    except MemoryError:
        micropython.heap_unlock()
        return False
    micropython.heap_unlock()
    return True


class Case:
    """One rig and its inputs, encoded beforehand: publisher PUBLISH ids
    1..N (QoS 1), the subscribers' PUBACKs for the ids the broker hands out
    (1, 2, ... per session, one message in flight at a time here). Methods,
    not closures: calling a closure over more than a few variables
    allocates its arguments on MicroPython, which heap_lock would catch."""

    def __init__(self, subs, qos, level, sub_id, inputs=N * 3 + 20):
        self.rig = Rig(subs, qos, level, sub_id)
        self.broker = self.rig.broker
        self.qos = qos
        self.pubs = [publish_pkt(qos, (i % 60000) + 1, level) for i in range(inputs)]
        self.ack = bytearray(puback_pkt(1))  # rewritten for each packet id
        self.k = 0
        self.sent = 0  # messages routed: the broker numbers each session's ids 1, 2, ...
        self.pending = []

    def drain(self):
        broker = self.broker
        cid = broker.output.next_dirty()
        while cid >= 0:
            broker.output.take(cid)
            cid = broker.output.next_dirty()

    def route(self, i):
        """One message in, out to every subscriber; their PUBACKs (QoS 1)."""
        k = self.k
        self.broker.data_received(self.rig.pub, self.pubs[k], NOW)
        self.drain()
        self.sent += 1
        if self.qos:
            self.acks_in(self.sent)
        self.k = k + 1

    def send_only(self, i):
        k = self.k
        self.broker.data_received(self.rig.pub, self.pubs[k], NOW)
        self.drain()
        self.sent += 1
        self.pending.append(self.sent)
        self.k = k + 1

    def acks_in(self, pid):
        ack = self.ack
        pid = (pid - 1) % 65535 + 1
        ack[2] = pid >> 8
        ack[3] = pid & 0xFF
        broker = self.broker
        for cid in self.rig.subs:
            broker.data_received(cid, ack, NOW)
        self.drain()

    def ack_last(self, i):
        self.acks_in(self.pending[len(self.pending) - 1])


def run_case(subs, qos, level=4, sub_id=False):
    case = Case(subs, qos, level, sub_id)
    route = case.route
    # Warm up (buffers reach their steady size), then measure.
    for i in range(10):
        route(i)
    per_msg = measure(route, N)
    t0 = time.ticks_us()
    for i in range(N):
        route(i)
    us = time.ticks_diff(time.ticks_us(), t0)
    tags = {"qos": qos, "subscribers": subs}
    if level == 5:
        tags["level"] = 5
        tags["sub_id"] = sub_id
    row = {"case": "route", "bytes_per_message": per_msg, "messages_per_s": int(N * 1000000 / us)}
    row.update(tags)
    results = [row]
    if qos:
        # The acks alone. One message in flight at a time keeps the ids in
        # step: send one, measure its acks, repeat.
        total = 0
        for i in range(N):
            case.send_only(i)
            gc.collect()
            gc.disable()
            before = gc.mem_alloc()
            case.ack_last(i)
            total += gc.mem_alloc() - before
            gc.enable()
        per_ack = total / (N * subs)
        row = {"case": "puback", "bytes_per_ack": per_ack}
        row.update(tags)
        if per_ack == 0:
            case.send_only(0)
            row["heap_lock"] = locked(case.ack_last, 1)
        results.append(row)
    if per_msg == 0:
        results[0]["heap_lock"] = locked(route, N)
    return results


def gc_pauses(subs, qos, n):
    """Route `n` messages with the collector on (as a board runs) and time
    every collection: the automatic collector off, gc.collect() by hand
    each time half of the heap free after start-up is used, so each pause
    is measured. The longest pause and the number of collections,
    for the heap the interpreter was started with."""
    case = Case(subs, qos, 4, False, 64)
    route = case.route
    gc.collect()
    low = gc.mem_free() // 2  # collect when half of what is free now is used
    longest = 0
    count = 0
    gc.disable()  # every collection is one of ours, and timed
    try:
        for i in range(n):
            if case.k >= len(case.pubs):
                case.k = 0  # (the ids repeat: the previous use of each was acknowledged)
            route(i)
            if gc.mem_free() < low:
                t0 = time.ticks_us()
                gc.collect()
                pause = time.ticks_diff(time.ticks_us(), t0)
                count += 1
                if pause > longest:
                    longest = pause
    finally:
        gc.enable()
    return {"case": "gc", "qos": qos, "subscribers": subs, "heap": gc.mem_free() + gc.mem_alloc(),
            "messages": n, "collections": count, "longest_pause_us": longest}


def main():
    impl = sys.implementation
    info = {
        "impl": impl.name,
        "version": ".".join(str(x) for x in impl.version[:3]),
        "platform": sys.platform,
        "maxsize": sys.maxsize,
        "heap_lock": micropython is not None and hasattr(micropython, "heap_lock"),
    }
    print(json.dumps(info))
    if "gc" in getattr(sys, "argv", ()):
        for qos in (0, 1):
            print(json.dumps(gc_pauses(10, qos, 5000)))
        return
    for qos in (0, 1):
        for subs in (1, 10):
            for row in run_case(subs, qos):
                print(json.dumps(row))
    for qos in (0, 1):
        for subs in (1, 10):
            for sub_id in (False, True):
                for row in run_case(subs, qos, 5, sub_id):
                    print(json.dumps(row))


main()
