"""A sans-I/O MQTT client: 3.1.1 and 5.0, QoS 0/1/2 both ways.

Theory of operation
-------------------
Like the broker, the client owns no socket and reads no clock: the shell
calls `connect(ms)` once its stream is open, hands it the bytes it reads
(`data_received`), writes what `take_output()` returns, calls `tick(ms)` at
the deadline it returns and `connection_lost()` when the stream ends. Times
are 30-bit wrapping millisecond ticks (common/compat.py).

What happens is told to a handler object (methods, no per-event lists):

    handler.on_connected(session_present)   CONNACK 0
    handler.on_refused(reason)              CONNACK refusal (then closed)
    handler.on_message(pkt)                 a PUBLISH (the app answers a QoS 1/2
                                            one with ack(pkt.packet_id) when it
                                            has taken responsibility for it)
    handler.on_delivered(token, reason)     an outgoing message handed over:
                                            QoS 0 written, QoS 1 PUBACK, QoS 2
                                            PUBREC; reason >= 0x80: refused (v5)
    handler.on_suback(packet_id, reasons)   (SUBACK and UNSUBACK)
    handler.on_closed(why)                  the client gave up the stream
                                            (protocol error, keep-alive,
                                            DISCONNECT from the server): the
                                            shell closes it

Outgoing QoS 1/2 messages (and QoS 0 ones with a token: held until they can
be written) wait in `queue` in order and move to `inflight` while the window
allows: the smaller of our own `max_inflight` and the server's Receive
Maximum. They stay there across a lost connection: on the next CONNACK
every SENT one is sent again, with DUP when the server kept the session
[MQTT-4.4.0-1] (as a new message when it did not: the app still wants it
delivered), and every RELEASED one (PUBREC seen) gets its PUBREL again; the
order is the original one.

Incoming QoS 2: the packet ids we answered with PUBREC are kept until the
PUBREL, so a resent PUBLISH is not handed to the app twice (4.3.3).
Keep-alive: a PINGREQ when nothing was sent for keep_alive seconds; no byte
from the server for keep_alive seconds after it, and the server is taken for
dead (the client's side of 3.1.2.10).
"""

from common.compat import const, ticks_deadline, ticks_diff
from common.mqtt import consts as C
from common.mqtt.client_packets import encode_connect, encode_subscribe, encode_unsubscribe
from common.mqtt.codec import FrameReader
from common.mqtt.errors import MqttError
from common.mqtt.packets import (
    Connect,
    PubAck,
    Subscribe,
    Unsubscribe,
    decode_packet,
    encode_packet,
    encode_publish_parts,
)
from common.mqtt.properties import encode_property_items, prop_get

# Client states
DISCONNECTED = const(0)
CONNECTING = const(1)  # CONNECT sent, no CONNACK yet
CONNECTED = const(2)

# Outgoing message states
QUEUED = const(0)
SENT = const(1)  # PUBLISH written, PUBACK / PUBREC awaited
RELEASED = const(2)  # PUBREL written, PUBCOMP awaited

BRIDGE_BIT = const(0x80)  # on the protocol level: "I am a bridge" (Mosquitto's try_private)


class Outgoing:
    """One message from publish() to its last ack."""

    __slots__ = ("items", "payload", "pid", "qos", "retain", "state", "token", "topic")

    def __init__(self, topic, payload, qos, retain, items, token):
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.items = items  # v5: encoded property items (bytes) or None
        self.token = token
        self.pid = 0
        self.state = QUEUED


class Client:
    def __init__(
        self,
        handler,
        client_id,
        level=4,
        keep_alive=60,
        clean_start=True,
        username=None,
        password=None,
        bridge=False,
        session_expiry=0,
        max_inflight=20,
        receive_max=65535,
        connect_timeout_ms=10000,
    ):
        self.handler = handler
        self.client_id = client_id
        self.level = level  # 4 or 5 (the wire level, without the bridge bit)
        self.keep_alive = keep_alive
        self.clean_start = clean_start
        self.username = username
        self.password = password
        self.bridge = bridge
        self.session_expiry = session_expiry
        self.max_inflight = max_inflight
        self.receive_max = receive_max
        self.connect_timeout_ms = connect_timeout_ms
        self.state = DISCONNECTED
        self.reader = None
        self.out = []
        self.queue = []  # Outgoing, QUEUED, in order
        self.inflight = []  # Outgoing, SENT or RELEASED, in send order
        self.by_pid = {}
        self.next_pid = 1
        self.window = max_inflight
        self.server_max_qos = 2
        self.server_max_packet = 0  # 0: no limit
        self.incoming = {}  # pid -> QoS of a PUBLISH handed to the app, not yet acked
        self.awaiting_rel = set()  # pids: PUBREC sent, PUBREL awaited (QoS 2 in)
        self.sent_at = 0  # ticks of the last write
        self.heard_at = 0  # ticks of the last byte read
        self.ping_at = 0  # ticks of the PINGREQ awaiting its PINGRESP; 0 none
        self.connect_at = 0
        self.ka_ms = keep_alive * 1000

    # ------------------------------------------------------------ stream

    def connect(self, ms):
        """The stream is open: send CONNECT."""
        self.reader = FrameReader()
        self.out = []
        self.state = CONNECTING
        self.connect_at = ms
        self.heard_at = ms
        self.ping_at = 0
        self.ka_ms = self.keep_alive * 1000
        props = None
        if self.level == C.LEVEL_5:
            props = [(C.PROP_RECEIVE_MAXIMUM, self.receive_max)]
            if self.session_expiry:
                props.append((C.PROP_SESSION_EXPIRY_INTERVAL, self.session_expiry))
        pkt = Connect(
            self.level,
            self.clean_start,
            self.keep_alive,
            self.client_id,
            username=self.username,
            password=self.password,
            props=props,
        )
        if self.bridge:
            pkt.level = self.level | BRIDGE_BIT
        self._write(encode_connect(pkt), ms)

    def connection_lost(self):
        """The stream ended: what is in flight waits for the next connect()."""
        self.state = DISCONNECTED
        self.reader = None
        self.out = []
        self.incoming = {}  # QoS 1 ones come again (DUP); QoS 2 ones are in awaiting_rel
        # Messages waiting for the window stay where they are; QoS 0 ones
        # without a token were written or dropped already.

    def disconnect(self):
        """A polite DISCONNECT (the shell closes the stream after writing it)."""
        if self.state != DISCONNECTED:
            self.out.append(b"\xe0\x00")
            self.state = DISCONNECTED

    def take_output(self):
        out = self.out
        if not out:
            return None
        self.out = []
        return out[0] if len(out) == 1 else b"".join(out)

    def _write(self, data, ms=None):
        self.out.append(data)
        if ms is not None:
            self.sent_at = ms

    def _fail(self, why):
        self.state = DISCONNECTED
        self.reader = None
        self.handler.on_closed(why)

    # ------------------------------------------------------------- input

    def data_received(self, data, ms):
        reader = self.reader
        if reader is None:
            return
        self.heard_at = ms
        self.ping_at = 0
        reader.feed(data)
        try:
            while self.reader is reader:
                first = reader.next_frame()
                if first < 0:
                    break
                pkt = decode_packet(first, reader.buf, reader.start, reader.stop, self.level)
                self._handle(pkt, ms)
            reader.keep()  # `data` may be a buffer its owner reuses
        except MqttError as e:
            self._fail("bad packet from the server: %s" % e)

    def _handle(self, pkt, ms):
        t = pkt.ptype
        if self.state == CONNECTING:
            if t != C.CONNACK:
                self._fail("%s before CONNACK" % C.PACKET_NAMES[t])
            else:
                self._connack(pkt, ms)
            return
        if t == C.PUBLISH:
            self._publish_in(pkt, ms)
        elif t == C.PUBACK or t == C.PUBREC or t == C.PUBCOMP:
            self._ack_in(pkt, ms)
        elif t == C.PUBREL:
            # [MQTT-4.3.3-11]: PUBCOMP with the same id, known or not.
            self.awaiting_rel.discard(pkt.packet_id)
            self._write(encode_packet(PubAck(C.PUBCOMP, pkt.packet_id), self.level), ms)
        elif t == C.SUBACK or t == C.UNSUBACK:
            self.handler.on_suback(pkt.packet_id, pkt.reasons)
        elif t == C.PINGRESP:
            pass
        elif t == C.DISCONNECT:
            self._fail("DISCONNECT from the server (reason 0x%02x)" % pkt.reason)
        else:
            self._fail("unexpected %s from the server" % C.PACKET_NAMES[t])

    def _connack(self, pkt, ms):
        if pkt.reason:
            self.state = DISCONNECTED
            self.reader = None
            self.handler.on_refused(pkt.reason)
            return
        self.state = CONNECTED
        props = pkt.props
        self.window = self.max_inflight
        self.server_max_qos = 2
        self.server_max_packet = 0
        if props:
            rm = prop_get(props, C.PROP_RECEIVE_MAXIMUM, 65535)
            if rm < self.window:
                self.window = rm
            self.server_max_qos = prop_get(props, C.PROP_MAXIMUM_QOS, 2)
            self.server_max_packet = prop_get(props, C.PROP_MAXIMUM_PACKET_SIZE, 0)
            ka = prop_get(props, C.PROP_SERVER_KEEP_ALIVE)
            if ka is not None:  # 3.2.2.3.14: the server's value wins
                self.ka_ms = ka * 1000
        present = pkt.session_present
        if not present:
            self.awaiting_rel = set()
        # Resend what is in flight, in order [MQTT-4.4.0-1]; a RELEASED one
        # whose session the server lost was delivered already (PUBREC).
        kept = []
        for m in self.inflight:
            if m.state == RELEASED:
                if present:
                    kept.append(m)
                    self._write(encode_packet(PubAck(C.PUBREL, m.pid), self.level), ms)
                else:
                    del self.by_pid[m.pid]
            else:
                kept.append(m)
                self._send_publish(m, present, ms)
        self.inflight = kept
        self.handler.on_connected(present)
        self.pump(ms)

    def _publish_in(self, pkt, ms):
        qos = pkt.qos
        pid = pkt.packet_id
        if qos == 2 and pid in self.awaiting_rel:
            # Resent after our PUBREC: PUBREC again, not handed over twice [MQTT-4.3.3-10].
            self._write(encode_packet(PubAck(C.PUBREC, pid), self.level), ms)
            return
        if qos:
            if pid in self.incoming:
                return  # a DUP of one the app holds: its ack answers both
            self.incoming[pid] = qos
        self.handler.on_message(pkt)

    def ack(self, pid):
        """The app took responsibility for incoming message `pid`: PUBACK or PUBREC."""
        qos = self.incoming.pop(pid, 0)
        if not qos or self.state != CONNECTED:
            return False
        if qos == 1:
            self._write(encode_packet(PubAck(C.PUBACK, pid), self.level))
        else:
            self.awaiting_rel.add(pid)
            self._write(encode_packet(PubAck(C.PUBREC, pid), self.level))
        return True

    def _ack_in(self, pkt, ms):
        m = self.by_pid.get(pkt.packet_id)
        t = pkt.ptype
        if m is None:
            if t == C.PUBREC:  # unknown id: release it anyway so the server forgets it
                self._write(
                    encode_packet(
                        PubAck(
                            C.PUBREL, pkt.packet_id, C.RC_PACKET_IDENTIFIER_NOT_FOUND if self.level == C.LEVEL_5 else 0
                        ),
                        self.level,
                    ),
                    ms,
                )
            return
        if t == C.PUBREC and m.state == SENT and m.qos == 2:
            if pkt.reason >= 0x80:  # 4.3.3: the flow ends here
                self._done(m)
                self.handler.on_delivered(m.token, pkt.reason)
            else:
                m.state = RELEASED
                self._write(encode_packet(PubAck(C.PUBREL, m.pid), self.level), ms)
                self.handler.on_delivered(m.token, pkt.reason)
        elif t == C.PUBACK and m.state == SENT and m.qos == 1:
            self._done(m)
            self.handler.on_delivered(m.token, pkt.reason)
        elif t == C.PUBCOMP and m.state == RELEASED:
            self._done(m)
        else:
            self._fail("%s for packet id %d out of turn" % (C.PACKET_NAMES[t], pkt.packet_id))
            return
        self.pump(ms)

    def _done(self, m):
        del self.by_pid[m.pid]
        self.inflight.remove(m)

    # ------------------------------------------------------------ output

    def publish(self, topic, payload, qos, retain=False, props=None, token=None):
        """Queue a message; QoS 0 without a token is written now or dropped
        (False) when not connected. `props`: v5 properties (a list) or None."""
        items = None
        if self.level == C.LEVEL_5 and props:
            items = encode_property_items(props)
        if qos > self.server_max_qos:
            qos = self.server_max_qos
        if not qos and token is None:
            if self.state != CONNECTED:
                return False
            self._write(encode_publish_parts(topic, payload, C.PUBLISH_RETAIN if retain else 0, self.level, items))
            return True
        self.queue.append(Outgoing(topic, payload, qos, retain, items, token))
        return True

    def pump(self, ms=None):
        """Move queued messages into the window (after publish(), acks, CONNACK)."""
        if self.state != CONNECTED:
            return
        queue = self.queue
        n = 0
        while n < len(queue) and len(self.inflight) < self.window:
            m = queue[n]
            n += 1
            if not m.qos:
                self._write(
                    encode_publish_parts(m.topic, m.payload, C.PUBLISH_RETAIN if m.retain else 0, self.level, m.items),
                    ms,
                )
                self.handler.on_delivered(m.token, 0)
                continue
            m.pid = self._allocate_pid()
            m.state = SENT
            self.by_pid[m.pid] = m
            self.inflight.append(m)
            self._send_publish(m, False, ms)
        if n:
            del queue[:n]

    def _send_publish(self, m, dup, ms):
        bits = m.qos | m.pid << C.PUBLISH_PID_SHIFT | (C.PUBLISH_RETAIN if m.retain else 0) | (C.PUBLISH_DUP if dup else 0)
        data = encode_publish_parts(m.topic, m.payload, bits, self.level, m.items)
        if self.server_max_packet and len(data) > self.server_max_packet:
            # [MQTT-3.2.2-15] the client must not send it: refused here, for good.
            self._done(m)
            self.handler.on_delivered(m.token, C.RC_PACKET_TOO_LARGE)
            return
        self._write(data, ms)

    def _allocate_pid(self):
        pid = self.next_pid
        by_pid = self.by_pid
        while pid in by_pid:
            pid = pid + 1 if pid < 65535 else 1
        self.next_pid = pid + 1 if pid < 65535 else 1
        return pid

    def subscribe(self, topics, props=None):
        """SUBSCRIBE [(filter, options)]; its packet id (the SUBACK's)."""
        # SUBSCRIBE ids come from the PUBLISH counter: never one in flight
        # (2.2.1), and a PUBLISH would reach this one only after the
        # counter wrapped (65,535 messages later; the SUBACK is long back).
        pid = self._allocate_pid()
        self._write(encode_subscribe(Subscribe(pid, topics, props), self.level))
        return pid

    def unsubscribe(self, filters):
        """UNSUBSCRIBE [filter]; its packet id (the UNSUBACK's: on_suback)."""
        pid = self._allocate_pid()
        self._write(encode_unsubscribe(Unsubscribe(pid, filters), self.level))
        return pid

    # -------------------------------------------------------------- time

    def tick(self, ms):
        """Keep-alive and connect timeout; the next deadline (ticks, 0 none).
        A dead server ends in handler.on_closed()."""
        state = self.state
        if state == CONNECTING:
            if ticks_diff(ms, self.connect_at) >= self.connect_timeout_ms:
                self._fail("no CONNACK within %d ms" % self.connect_timeout_ms)
                return 0
            return ticks_deadline(self.connect_at, self.connect_timeout_ms)
        if state != CONNECTED or not self.ka_ms:
            return 0
        ka = self.ka_ms
        if self.ping_at:
            if ticks_diff(ms, self.ping_at) >= ka:
                self._fail("no answer from the server for %d s (keep-alive)" % (ka // 1000))
                return 0
            return ticks_deadline(self.ping_at, ka)
        if ticks_diff(ms, self.sent_at) >= ka:
            self.ping_at = ms or 1
            self._write(b"\xc0\x00", ms)  # PINGREQ
            return ticks_deadline(ms, ka)
        return ticks_deadline(self.sent_at, ka)

    # ------------------------------------------------------------ figures

    def pending(self):
        """Outgoing messages not yet acknowledged (queued + in flight)."""
        return len(self.queue) + len(self.inflight)
