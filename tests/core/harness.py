# In-memory harness: N clients joined to one sans-I/O Broker, bytes moved by
# hand (after h11's ConnectionPair). Runs unchanged on CPython and
# MicroPython. Clients encode with the codec and decode the broker's output
# with the codec's client-side decoders, so every byte crosses the wire format.

from common.broker.settings import new_settings
from common.mqtt import consts as C
from common.mqtt.codec import FrameReader
from common.mqtt.packets import (
    Connect,
    Disconnect,
    Pingreq,
    PubAck,
    Publish,
    Subscribe,
    Unsubscribe,
    decode_packet,
    encode_packet,
)
from common.store.storeboot import new_broker


# Hand-made wire bytes for tests that must send what the codec would refuse
# to encode.
def vbi(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        out += bytes([b | 0x80 if n else b])
        if not n:
            return out


def s16(b):
    return bytes([len(b) >> 8, len(b) & 0xFF]) + b


# Small limits, so that the broker fuzz tests (tests/host/test_broker_stateful.py,
# tests/host/fuzz_broker.py) reach every one of them, and sessions and wills end.
FUZZ_SETTINGS = {
    "max_connections": 4,
    "max_sessions": 4,
    "max_subscriptions": 12,
    "max_subscriptions_per_client": 4,
    "max_messages": 24,
    "max_queued_messages": 3,
    "max_queued_bytes": 200,
    "max_queued_total_bytes": 2500,  # four small queued copies (512 B each beyond their data)
    "queue_full": "drop_newest",
    "max_inflight": 2,
    "max_inflight_in": 2,
    "max_out_buffer": 300,
    "max_retained": 4,
    "max_retained_bytes": 200,
    "max_packet_size": 512,
    "max_topic_levels": 4,
    "topic_alias_maximum": 2,
    "max_session_expiry": 60,
    "persistent_session_expiry": 60,
    "queue_qos0_offline": True,
    "match_cache_bytes": 256,
}


def heap_per_packet(h, cid, data, mem_alloc, n=8):
    """Heap bytes the broker of harness `h` allocates to take `data` (one
    packet) from connection `cid` and hand out what it sends, once warm (two
    rounds first, so buffers reach their steady size), with the GC off:
    where gc.mem_alloc exists (MicroPython)."""
    import gc

    broker = h.broker

    def route():
        broker.data_received(cid, data, h.now)
        out = broker.output.next_dirty()
        while out >= 0:
            broker.output.take(out)
            out = broker.output.next_dirty()

    route()
    route()
    gc.collect()
    gc.disable()
    try:
        before = mem_alloc()
        for _ in range(n):
            route()
        return (mem_alloc() - before) // n
    finally:
        gc.enable()


class Harness:
    def __init__(self, store=None, now=1000, wall=1700000000, per_listener=None, **overrides):
        """A broker with `overrides` settings (and `per_listener`: listener
        key -> its own rate settings, as a host's [[listener]] tables give
        them); with a `store` (common.store.store.Store, opened) it restores
        from it first, `wall` being the wall clock at `now`."""
        self.now = now
        self.counter = 0
        self.store = store
        settings = new_settings(overrides)
        if per_listener:
            settings.per_listener = per_listener
        self.broker = new_broker(settings, self.entropy, store)
        self.clients = {}
        self.restored = self.broker.restore(now, wall) if store is not None else None

    def entropy(self, n):
        self.counter += 1
        return bytes([(self.counter + i) & 0xFF for i in range(n)])

    def client(self, level=4, peer=None):
        """A new connection; `peer` as the shell gives it (address, TLS identity, local)."""
        c = Client(self, level, peer)
        self.clients[c.cid] = c
        return c

    def offline_subscriber(self, client_id, topic_filter, qos=1, drop=False):
        """A persistent session subscribed to `topic_filter` whose client has
        gone (DISCONNECT, or `drop`: the connection lost): what comes for it
        queues. The client, for a reconnect under the same id."""
        c = self.client()
        c.connect(client_id, clean=False)
        c.subscribe(topic_filter, qos=qos)
        if drop:
            c.drop()
        else:
            c.disconnect()
        return c

    def pump(self):
        """Move every byte the broker wants to send into the clients.

        As the driver's flush does: retained replays go on while their
        client's output is not paused (every client here reads at once), and
        the input a replay held back runs when it ends."""
        broker = self.broker
        while True:
            if broker.replaying:
                broker.run_replays(self.now)
            cid = broker.output.next_dirty()
            while cid >= 0:
                client = self.clients.get(cid)
                data = broker.output.take(cid)  # valid until the next take
                if client is not None:
                    if data:
                        client.receive(data)
                    if broker.output.is_closing(cid) and not client.closed:
                        client.closed = True
                        broker.connection_lost(cid, self.now)
                cid = broker.output.next_dirty()
            if broker.take_replay_changes():
                for client in list(self.clients.values()):
                    if not client.closed and client.cid not in broker.replaying:
                        broker.data_received(client.cid, b"", self.now)
                continue
            if not (broker.replaying and broker.replays_waiting()):
                return

    def held(self):
        """What the broker holds beyond its empty state, by part: every count
        is 0 once every client has left and every session has expired (the
        fuzz tests' leak check; retained messages are the store's own)."""
        b = self.broker
        r = b.routing
        return {
            "connections": b.connections.live,
            "sessions": b.sessions.pool.in_use,
            "session ids": b.sessions.count(),
            "subscriptions": b.sessions.sub_pool.in_use,
            "trie entries": r.trie.count,
            "shared groups": len(r.groups),
            "messages": r.messages.in_use() - r.retained.count(),
            "deliveries": r.deliveries.in_use,
            "queued bytes": r.queued_total,
        }

    def advance(self, seconds):
        """Let `seconds` pass one second at a time, ticking the broker."""
        for _ in range(seconds):
            self.now += 1
            self.broker.tick(self.now)
            self.pump()


class Client:
    def __init__(self, harness, level, peer=None):
        self.h = harness
        self.level = level
        self.cid = harness.broker.connection_made(harness.now, None, peer)
        self.reader = FrameReader(1 << 28)
        self.inbox = []
        self.closed = self.cid < 0

    # ------------------------------------------------------------- transport

    def send_raw(self, data):
        self.h.broker.data_received(self.cid, data, self.h.now)
        self.h.pump()

    def send(self, pkt):
        self.send_raw(encode_packet(pkt, 5 if self.level == 5 else 4))

    def receive(self, data):
        self.reader.feed(data)
        while True:
            frame = self.reader.maybe_read_frame()
            if frame is None:
                break
            level = 5 if self.level == 5 else 4
            self.inbox.append(decode_packet(frame[0], self.reader.buf, frame[1], frame[2], level))
        self.reader.keep()  # `data` is the broker's buffer, reused

    def drop(self):
        """The network connection breaks (no DISCONNECT)."""
        if not self.closed:
            self.closed = True
            self.h.broker.connection_lost(self.cid, self.h.now)
            self.h.pump()

    def take(self):
        """Everything received so far."""
        got = self.inbox
        self.inbox = []
        return got

    def expect(self, ptype):
        """The next received packet, which must be of type `ptype`."""
        if not self.inbox:
            raise AssertionError("expected %s, received nothing" % C.PACKET_NAMES[ptype])
        pkt = self.inbox.pop(0)
        if pkt.ptype != ptype:
            raise AssertionError("expected %s, got %s" % (C.PACKET_NAMES[ptype], C.PACKET_NAMES[pkt.ptype]))
        return pkt

    # --------------------------------------------------------------- actions

    def connect(self, client_id="c", clean=True, keep_alive=0, will=None, props=None, level=None, username=None, password=None):
        """Send CONNECT; `will` is (topic, payload, qos, retain[, props])."""
        lvl = self.level if level is None else level
        w = will or (None, b"", 0, False, None)
        pkt = Connect(
            level=lvl,
            clean_start=clean,
            keep_alive=keep_alive,
            client_id=client_id,
            will_topic=w[0],
            will_payload=w[1],
            will_qos=w[2],
            will_retain=w[3],
            will_props=w[4] if len(w) > 4 else None,
            props=props,
            username=username,
            password=password,
        )
        self.send_raw(encode_packet(pkt, lvl))
        if self.inbox and self.inbox[0].ptype == C.CONNACK:
            return self.inbox.pop(0)
        return None

    def subscribe(self, flt, qos=0, packet_id=1, props=None, options=None):
        opts = qos if options is None else options
        self.send(Subscribe(packet_id, [(flt, opts)], props))
        return self.expect(C.SUBACK)

    def unsubscribe(self, flt, packet_id=2):
        self.send(Unsubscribe(packet_id, [flt], None))
        return self.expect(C.UNSUBACK)

    def publish(self, topic, payload, qos=0, retain=False, packet_id=0, dup=False, props=None):
        if qos and not packet_id:
            packet_id = 1
        self.send(Publish(topic, payload, qos, retain, dup, packet_id, props))

    def ack(self, pkt):
        """Acknowledge a received PUBLISH (QoS 1: PUBACK; QoS 2: PUBREC)."""
        self.send(PubAck(C.PUBACK if pkt.qos == 1 else C.PUBREC, pkt.packet_id, 0, None))

    def ping(self):
        self.send(Pingreq())
        return self.expect(C.PINGRESP)

    def disconnect(self, reason=0, props=None):
        self.send(Disconnect(reason, props))


class RawClient(Client):
    """A harness client that also keeps the raw bytes it receives."""

    def __init__(self, harness, level=4):
        Client.__init__(self, harness, level)
        self.raw = b""
        harness.clients[self.cid] = self

    def receive(self, data):
        self.raw += data
        Client.receive(self, data)

