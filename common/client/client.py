"""A sans-I/O MQTT client: 3.1.1 and 5.0, QoS 0/1/2 both ways.

Theory of operation
-------------------
Like the broker, the client owns no socket and reads no clock: the shell
calls `connect(ms)` once its stream is open, hands it the bytes it reads
(`data_received`), writes what `take_output()` returns, calls `tick(ms)` at
the deadline it returns and `connection_lost()` when the stream ends. Times
are 30-bit wrapping millisecond ticks (common/compat.py).

    c = Client(handler, "edge-1", 5)   # the rest are attributes with defaults:
    c.keep_alive = 30                  # set them before connect()

What happens is told to a handler object (methods, no per-event lists):

    handler.on_connected(session_present)   CONNACK 0
    handler.on_refused(reason)              CONNACK refusal (then closed)
    handler.on_message(pkt)                 a PUBLISH (the app answers a QoS 1/2
                                            one with ack(pkt.packet_id) when it
                                            has taken responsibility for it)
    handler.on_delivered(token, reason)     an outgoing message handed over:
                                            QoS 0 written, QoS 1 PUBACK, QoS 2
                                            PUBREC; reason >= 0x80: refused for
                                            good (v5)
    handler.on_completed(token)             hold_release: the PUBCOMP of a QoS 2
                                            message released with release()
    handler.on_release(pid)                 hold_complete: a PUBREL came; the app
                                            answers it with complete(pid)
    handler.on_suback(packet_id, reasons)   (SUBACK and UNSUBACK)
    handler.on_closed(why)                  the client gave up the stream
                                            (protocol error, a silent server,
                                            DISCONNECT from the server): the
                                            shell closes it

Outgoing QoS 1/2 messages (and QoS 0 ones with a token: held until they can
be written) wait in `queue` in order and move to `inflight` while the window
allows: the smaller of our own `max_inflight` and the server's Receive
Maximum. They stay there across a lost connection: on the next CONNACK
every SENT one is sent again, with DUP when the server kept the session
[MQTT-4.4.0-1] (as a new message when it did not: the app still wants it
delivered), and every RELEASED one (PUBREL written) gets its PUBREL again;
the order is the original one.

Two switches make the client a faithful relay (the bridge, which passes a
QoS 2 flow from one session to another without ever holding the only record
of it):

- `pids_from_tokens`: an outgoing message's packet id is its token (the
  bridge's token is the packet id of the local session, which the local
  store keeps across a kill -9), so a message sent again after a restart
  names the same id upstream and the upstream's QoS 2 state for it applies
  [MQTT-4.3.3-10];
- `hold_release`: a QoS 2 PUBREC puts the message in RECEIVED, and its PUBREL
  waits for release(pid) (the local store recorded the PUBREC first); the
  PUBCOMP is told with on_completed. release() of an id the client does not
  hold (the local session resends its PUBREL after a restart) sends the
  PUBREL all the same [MQTT-4.3.3-11 makes the server answer it].
- `hold_complete`: an incoming PUBREL is told with on_release; its PUBCOMP
  waits for complete(pid) (the upstream's PUBCOMP first).

Refusals (v5 PUBACK / PUBREC >= 0x80): 0x97 Quota exceeded and 0x91 Packet
identifier in use are the server's "not now": the message goes back to its
place at the head of the queue, the window shrinks to what is in flight
(at least 1) and nothing more is sent for `retry_ms` (doubling up to 8 s
while refusals go on); each accepted message then widens the window by one
up to its maximum. 0x80 and 0x83 (unspecified / implementation specific)
are retried so up to RETRY_LIMIT times. Any other refusal is for good:
on_delivered(token, reason).

Incoming QoS 2: the packet ids we answered with PUBREC are kept until the
PUBREL, so a resent PUBLISH is not handed to the app twice (4.3.3).

A silent server: while an answer is owed (an ack of something in flight, a
PINGRESP, a SUBACK), `waited_since` is the time since which nothing came;
`stalled(ms)` is True once that is `stall_ms` old (shown as "stalled"), and
at keep_alive seconds the server is taken for dead (on_closed). An idle
connection sends PINGREQ every keep_alive seconds, so an answer is owed
then too (the client's side of 3.1.2.10).
"""

from common.compat import const, ticks_deadline, ticks_diff, ticks_sooner
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
RECEIVED = const(3)  # hold_release: PUBREC seen, PUBREL waits for release()

BRIDGE_BIT = const(0x80)  # on the protocol level: "I am a bridge" (Mosquitto's try_private)

RETRY_LIMIT = const(5)  # tries of a message refused with 0x80 / 0x83 before the refusal counts
RETRY_MIN_MS = const(250)
RETRY_MAX_MS = const(8000)


class Outgoing:
    """One message from publish() to its last ack."""

    __slots__ = ("dup", "items", "payload", "pid", "qos", "retain", "state", "token", "topic", "tries")

    def __init__(self, topic, payload, qos, retain, items, token):
        self.topic = topic  # None: a PUBREL only (release() of an id not held)
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.items = items  # v5: encoded property items (bytes) or None
        self.token = token
        self.pid = 0
        self.state = QUEUED
        self.dup = False  # sent before (by us, or by whoever handed it to us)
        self.tries = 0  # refusals retried


class Client:
    def __init__(self, handler, client_id, level=4, clean_start=True):
        self.handler = handler
        self.client_id = client_id
        self.level = level  # 4 or 5 (the wire level, without the bridge bit)
        self.clean_start = clean_start
        # Options (attributes: set them before connect()).
        self.keep_alive = 60
        self.username = None
        self.password = None
        self.bridge = False
        self.session_expiry = 0
        self.will = None  # (topic, payload, qos, retain): an MQTT-SN client's will (common/mqttsn)
        self.max_inflight = 20
        self.receive_max = 65535
        self.connect_timeout_ms = 10000
        self.stall_ms = 0  # an answer owed this long: stalled() (0: keep_alive)
        self.pids_from_tokens = False
        self.hold_release = False
        self.hold_complete = False
        self.held = False  # the app holds the queue: nothing new is sent (a bridge's Sparkplug host away)
        self.will = None  # (topic, payload, qos, retain) sent in CONNECT (a bridge's notifications), None: none
        self.preamble = False  # handler.on_preamble() at CONNACK, before anything is resent (a bridge's births)
        # State
        self.state = DISCONNECTED
        self.reader = None
        self.out = []
        self.queue = []  # Outgoing, QUEUED, in order
        self.inflight = []  # Outgoing, SENT / RECEIVED / RELEASED, in send order
        self.by_pid = {}
        self.sub_pids = []  # SUBSCRIBE / UNSUBSCRIBE ids whose ack is awaited
        self.next_pid = 1
        self.window = 20
        self.window_max = 20  # what the window grows back to after a refusal
        self.retry_ms = RETRY_MIN_MS
        self.hold_until = 0  # ticks: nothing new is sent before (0: none)
        self.server_max_qos = 2
        self.server_max_packet = 0  # 0: no limit
        self.incoming = {}  # pid -> QoS of a PUBLISH handed to the app, not yet acked
        self.awaiting_rel = set()  # pids: PUBREC sent, PUBREL awaited (QoS 2 in)
        self.now = 0  # ticks: the last time the shell told us
        self.sent_at = 0  # ticks of the last write
        self.heard_at = 0  # ticks of the last byte read
        self.waiting = False  # an answer is owed
        self.waited_since = 0  # ticks: since when (restarted by every byte heard)
        self.ping_at = 0  # ticks of the PINGREQ awaiting its PINGRESP; 0 none
        self.connect_at = 0
        self.ka_ms = 0
        self.acked_at = 0  # ticks of the last PUBACK / PUBREC / PUBCOMP (health)
        self.retried = 0  # refusals the server may lift, sent again

    # ------------------------------------------------------------ stream

    def connect(self, ms):
        """The stream is open: send CONNECT."""
        self.reader = FrameReader()
        self.out = []
        self.state = CONNECTING
        self.now = ms
        self.connect_at = ms
        self.heard_at = ms
        self.ping_at = 0
        self.waiting = False
        self.sub_pids = []
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
        if self.will is not None:
            pkt.will_topic, pkt.will_payload, pkt.will_qos, pkt.will_retain = self.will
        if self.bridge:
            pkt.level = self.level | BRIDGE_BIT
        self._write(encode_connect(pkt), ms)

    def connection_lost(self):
        """The stream ended: what is in flight waits for the next connect()."""
        self.state = DISCONNECTED
        self.reader = None
        self.out = []
        self.waiting = False
        self.sub_pids = []
        self.incoming = {}  # QoS 1 ones come again (DUP); QoS 2 ones are in awaiting_rel
        # Messages waiting for the window stay where they are; QoS 0 ones
        # without a token were written or dropped already.

    def disconnect(self, end_session=False):
        """A polite DISCONNECT (the shell closes the stream after writing it);
        end_session (v5): with Session Expiry Interval 0, so the server ends
        the session now (allowed when the CONNECT had a non-zero one, v5 3.14.2.2.2)."""
        if self.state != DISCONNECTED:
            if end_session and self.level == C.LEVEL_5 and self.session_expiry:
                self.out.append(b"\xe0\x07\x00\x05\x11\x00\x00\x00\x00")
            else:
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

    def _expect(self):
        """What was just written owes us an answer: the silence clock runs."""
        if not self.waiting:
            self.waiting = True
            self.waited_since = self.now

    def _fail(self, why):
        self.state = DISCONNECTED
        self.reader = None
        self.handler.on_closed(why)

    # ------------------------------------------------------------- input

    def data_received(self, data, ms):
        reader = self.reader
        if reader is None:
            return
        self.now = ms
        self.heard_at = ms
        self.ping_at = 0
        if self.waiting:
            self.waited_since = ms  # the server is alive: the clock starts again
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
            pid = pkt.packet_id
            if self.hold_complete:
                self.handler.on_release(pid)  # its PUBCOMP: complete(pid)
            else:
                self.complete(pid)  # [MQTT-4.3.3-11]: PUBCOMP with the same id, known or not
        elif t == C.SUBACK or t == C.UNSUBACK:
            if pkt.packet_id in self.sub_pids:
                self.sub_pids.remove(pkt.packet_id)
            self.handler.on_suback(pkt.packet_id, pkt.reasons)
            self.pump(ms)  # a message may have waited for its id
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
        window = self.max_inflight
        self.server_max_qos = 2
        self.server_max_packet = 0
        if props:
            rm = prop_get(props, C.PROP_RECEIVE_MAXIMUM, 65535)
            if rm < window:
                window = rm
            self.server_max_qos = prop_get(props, C.PROP_MAXIMUM_QOS, 2)
            self.server_max_packet = prop_get(props, C.PROP_MAXIMUM_PACKET_SIZE, 0)
            ka = prop_get(props, C.PROP_SERVER_KEEP_ALIVE)
            if ka is not None:  # 3.2.2.3.14: the server's value wins
                self.ka_ms = ka * 1000
        self.window = self.window_max = window
        self.retry_ms = RETRY_MIN_MS
        self.hold_until = 0
        present = pkt.session_present
        if not present:
            self.awaiting_rel = set()
        # Resend what is in flight, in order [MQTT-4.4.0-1]. A RELEASED one
        # whose session the server lost was delivered already (PUBREC): done;
        # a RECEIVED one waits for release() either way (a PUBREL the server
        # does not know is answered all the same).
        if self.preamble:
            self.handler.on_preamble()
        kept = []
        done = []
        for m in self.inflight:
            if m.state == RELEASED:
                if present:
                    kept.append(m)
                    self._write(encode_packet(PubAck(C.PUBREL, m.pid), self.level), ms)
                    self._expect()
                else:
                    del self.by_pid[m.pid]
                    done.append(m)
            elif m.state == RECEIVED:
                kept.append(m)
            else:
                kept.append(m)
                self._send_publish(m, present, ms)
        self.inflight = kept
        self.handler.on_connected(present)
        if self.hold_release:
            for m in done:
                self.handler.on_completed(m.token)
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

    def complete(self, pid):
        """PUBCOMP for incoming `pid` (hold_complete: the app's answer to on_release)."""
        self.awaiting_rel.discard(pid)
        if self.state == CONNECTED:
            self._write(encode_packet(PubAck(C.PUBCOMP, pid), self.level))

    def _ack_in(self, pkt, ms):
        pid = pkt.packet_id
        m = self.by_pid.get(pid)
        t = pkt.ptype
        if m is None:
            if t == C.PUBREC:  # unknown id: release it anyway so the server forgets it
                self._write(
                    encode_packet(
                        PubAck(C.PUBREL, pid, C.RC_PACKET_IDENTIFIER_NOT_FOUND if self.level == C.LEVEL_5 else 0),
                        self.level,
                    ),
                    ms,
                )
            return
        reason = pkt.reason
        self.acked_at = ms
        if t == C.PUBCOMP and m.state == RELEASED:
            self._done(m)
            if self.hold_release:
                self.handler.on_completed(m.token)
        elif ((t == C.PUBREC and m.qos == 2) or (t == C.PUBACK and m.qos == 1)) and m.state == SENT:
            if reason >= 0x80:  # 4.3.3: a refused QoS 2 flow ends at its PUBREC
                self._done(m)
                if self._retry(m, reason, ms):
                    return
            elif t == C.PUBACK:
                self._done(m)
            elif self.hold_release:
                m.state = RECEIVED  # its PUBREL waits for release()
            else:
                m.state = RELEASED
                self._write(encode_packet(PubAck(C.PUBREL, m.pid), self.level), ms)
                self._expect()
            if reason < 0x80 and self.window < self.window_max:
                self.window += 1  # taken: back toward the full window
                self.retry_ms = RETRY_MIN_MS
            self.handler.on_delivered(m.token, reason)
        else:
            self._fail("%s for packet id %d out of turn" % (C.PACKET_NAMES[t], pid))
            return
        self.pump(ms)

    def _retry(self, m, reason, ms):
        """A refusal the server may lift (quota, id in use ...): the message
        goes back to the head of the queue and the sending slows down.
        False: a refusal for good (the app is told)."""
        if reason != C.RC_QUOTA_EXCEEDED and reason != C.RC_PACKET_IDENTIFIER_IN_USE:
            if reason != C.RC_UNSPECIFIED_ERROR and reason != C.RC_IMPLEMENTATION_SPECIFIC_ERROR:
                return False
            if m.tries >= RETRY_LIMIT:
                return False
        m.tries += 1
        self.retried += 1
        m.state = QUEUED
        m.dup = False  # the server let it go: a new PUBLISH (same id) next time
        # Back in front of every message never sent (they came after it).
        queue = self.queue
        i = 0
        while i < len(queue) and queue[i].tries:
            i += 1
        queue.insert(i, m)
        window = len(self.inflight)
        self.window = window if window > 0 else 1
        self.hold_until = ticks_deadline(ms, self.retry_ms) or 1
        if self.retry_ms < RETRY_MAX_MS:
            self.retry_ms *= 2
        return True

    def _done(self, m):
        del self.by_pid[m.pid]
        self.inflight.remove(m)

    # ------------------------------------------------------------ output

    def publish(self, topic, payload, qos, retain=False, props=None, token=None):
        """Queue a message; QoS 0 without a token is written now or dropped
        (False) when not connected. `props`: v5 properties (a list) or None.
        A queued message's Outgoing is returned (its `dup` may be set)."""
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
        m = Outgoing(topic, payload, qos, retain, items, token)
        self.queue.append(m)
        return m

    def release(self, pid, ms, token=None):
        """hold_release: PUBREL for outgoing QoS 2 `pid` (RECEIVED). One the
        client does not hold (its PUBREC came before a restart) is released
        all the same; on_completed(token) follows its PUBCOMP."""
        m = self.by_pid.get(pid)
        if m is None:
            m = Outgoing(None, b"", 2, False, None, token)
            m.pid = pid
            self.by_pid[pid] = m
            self.inflight.append(m)
        elif m.state != RECEIVED:
            return  # SENT (a PUBREL out of turn: ignored) or RELEASED already
        m.state = RELEASED
        if self.state == CONNECTED:
            self.now = ms
            self._write(encode_packet(PubAck(C.PUBREL, pid), self.level), ms)
            self._expect()

    def holds(self, pid):
        """The state of the outgoing message with packet id (token) `pid`: QUEUED,
        SENT, RECEIVED, RELEASED, or -1 when not held."""
        m = self.by_pid.get(pid)
        if m is not None:
            return m.state
        for m in self.queue:
            if m.token == pid:
                return QUEUED
        return -1

    def pump(self, ms=None):
        """Move queued messages into the window (after publish(), acks, CONNACK)."""
        if self.state != CONNECTED or self.held:
            return
        if ms is None:
            ms = self.now
        self.now = ms
        if self.hold_until:
            if ticks_diff(ms, self.hold_until) < 0:
                return  # slowed down after a refusal (tick() wakes us)
            self.hold_until = 0
        queue = self.queue
        n = 0
        while n < len(queue) and len(self.inflight) < self.window:
            m = queue[n]
            if not m.qos:
                n += 1
                self._write(
                    encode_publish_parts(m.topic, m.payload, C.PUBLISH_RETAIN if m.retain else 0, self.level, m.items),
                    ms,
                )
                self.handler.on_delivered(m.token, 0)
                continue
            if self.pids_from_tokens:
                pid = m.token
                if pid in self.by_pid or pid in self.sub_pids:
                    break  # its id is still in use: wait for that ack (in order)
            else:
                pid = self._allocate_pid()
            n += 1
            m.pid = pid
            m.state = SENT
            self.by_pid[pid] = m
            self.inflight.append(m)
            self._send_publish(m, m.dup, ms)
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
        m.dup = True
        self._write(data, ms)
        self._expect()

    def _allocate_pid(self):
        pid = self.next_pid
        by_pid = self.by_pid
        while pid in by_pid or pid in self.sub_pids or (self.pids_from_tokens and self._queued(pid)):
            pid = pid + 1 if pid < 65535 else 1
        self.next_pid = pid + 1 if pid < 65535 else 1
        return pid

    def _queued(self, pid):
        for m in self.queue:
            if m.token == pid:
                return True
        return False

    def subscribe(self, topics, props=None):
        """SUBSCRIBE [(filter, options)]; its packet id (the SUBACK's)."""
        # SUBSCRIBE ids come from the PUBLISH counter: never one in flight
        # or (pids_from_tokens) queued (2.2.1); a message whose id is taken
        # by a SUBSCRIBE waits for the SUBACK (pump).
        pid = self._allocate_pid()
        self.sub_pids.append(pid)
        self._write(encode_subscribe(Subscribe(pid, topics, props), self.level))
        self._expect()
        return pid

    def unsubscribe(self, filters):
        """UNSUBSCRIBE [filter]; its packet id (the UNSUBACK's: on_suback)."""
        pid = self._allocate_pid()
        self.sub_pids.append(pid)
        self._write(encode_unsubscribe(Unsubscribe(pid, filters), self.level))
        self._expect()
        return pid

    # -------------------------------------------------------------- time

    def tick(self, ms):
        """Keep-alive, the connect timeout, a silent server, the end of a
        slow-down; the next deadline (ticks, 0 none). A dead server ends in
        handler.on_closed()."""
        self.now = ms
        state = self.state
        if state == CONNECTING:
            if ticks_diff(ms, self.connect_at) >= self.connect_timeout_ms:
                self._fail("no CONNACK within %d ms" % self.connect_timeout_ms)
                return 0
            return ticks_deadline(self.connect_at, self.connect_timeout_ms)
        if state != CONNECTED:
            return 0
        due = 0
        if self.hold_until:
            if ticks_diff(ms, self.hold_until) >= 0:
                self.pump(ms)
            else:
                due = self.hold_until
        ka = self.ka_ms
        if not ka and not self.stall_ms:
            return due  # (the bridge's in-memory local client: never silent)
        if self.waiting and not self._owed():
            self.waiting = False
        if ka and not self.ping_at and ticks_diff(ms, self.sent_at) >= ka:
            self.ping_at = ms or 1
            self._write(b"\xc0\x00", ms)  # PINGREQ
            self._expect()
        if self.waiting:
            silent = ticks_diff(ms, self.waited_since)
            stall = self._stall_ms()
            dead = ka or 2 * stall
            if silent >= dead:
                self._fail("no answer from the server for %d s (keep-alive %d s)" % (silent // 1000, ka // 1000))
                return 0
            due = ticks_sooner(due, ticks_deadline(self.waited_since, stall if silent < stall else dead))
        if ka and not self.ping_at:
            due = ticks_sooner(due, ticks_deadline(self.sent_at, ka))
        return due

    def _stall_ms(self):
        stall = self.stall_ms or self.ka_ms or 10000
        ka = self.ka_ms
        return ka if ka and stall > ka else stall

    def _owed(self):
        """Whether the server owes an answer (an ack, a PINGRESP, a SUBACK)."""
        if self.ping_at or self.sub_pids:
            return True
        for m in self.inflight:
            if m.state == SENT or m.state == RELEASED:
                return True
        return False

    # ------------------------------------------------------------ figures

    def stalled(self, ms):
        """Connected, an answer owed and nothing heard for stall_ms."""
        return (
            self.state == CONNECTED
            and self.waiting
            and self._owed()
            and ticks_diff(ms, self.waited_since) >= self._stall_ms()
        )

    def pending(self):
        """Outgoing messages not yet acknowledged (queued + in flight)."""
        return len(self.queue) + len(self.inflight)

