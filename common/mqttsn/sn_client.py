"""One MQTT-SN client of the gateway (common/mqttsn/gateway.py): its states,
its sans-I/O MQTT client into the broker (the driver's handle for its
in-memory connection), its topic ids, and what waits for an ack.

SN messages from the client arrive in `received()`; the MQTT client's events
(the `on_*` handler methods) become SN messages to it (`send()`).

Topic ids: common/mqttsn/topicids.py. A message from the broker on a topic
the client has no id for waits for the REGACK of the gateway's REGISTER
(§6.10); messages behind it wait too, so the order is kept.

What the gateway sends that the client acknowledges (PUBLISH QoS 1/2,
PUBREL, REGISTER) waits in `unacked` until it does; common/mqttsn/timers.py
resends it (§6.13).
"""

from common.client.client import CONNECTED, Client
from common.compat import ticks_deadline
from common.inprocess import InProcessHandle
from common.mqtt import consts as C
from common.mqttsn import consts as S
from common.mqttsn.codec import SnMessage, encode_message
from common.mqttsn.topicids import TopicIds, short_name

# SnClient states
WILL_TOPIC = 0  # CONNECT with the Will flag: WILLTOPICREQ sent (§6.2)
WILL_MSG = 1  # WILLMSGREQ sent
CONNECTING = 2  # the MQTT CONNECT is on its way
ACTIVE = 3
ASLEEP = 4  # DISCONNECT with a Duration (§6.14): no MQTT connection, the session queues
AWAKE = 5  # PINGREQ while asleep: connected again until what waited is delivered and acked
EXPIRING = 6  # asleep past its Duration: connected once more only to be lost (its will)
GONE = 7
UPDATING = 8  # WILLTOPICUPD/WILLMSGUPD (§6.4): connecting again with the new will

QOS_M1_CLIENT = "mqtt-sn-qos-1"  # the one session QoS -1 PUBLISHes go through (§6.8)

# CONNACK reasons of a broker's limit (max_sessions, busy, quota, connect rate 0x9F):
# the SN client hears 0x01 "rejected: congestion" (try later), not 0x03
BROKER_LIMITS = (C.RC_SERVER_UNAVAILABLE, C.RC_SERVER_BUSY, C.RC_QUOTA_EXCEEDED, 0x9F)

KEEP_ALIVE_GRACE = 1.5  # a client is lost after 1.5 x its Duration of silence (as MQTT [MQTT-3.1.2-24])


class SnClient(InProcessHandle):
    """One SN client: its MQTT client, the driver's handle for its in-memory
    connection, its topic ids and what waits for a REGACK."""

    def __init__(self, gw, addr, msg):
        self.gw = gw
        self.addr = addr
        self.client_id = msg.client_id
        self.clean = msg.clean
        self.duration = msg.duration
        self.state = CONNECTING
        self.ids = TopicIds(gw.settings.max_topic_ids, gw.settings.predefined)
        self.mqtt = None
        self.cid = -1
        self.ended_cid = -1  # a connection the broker ended: connection_lost owed
        self.stirred = False  # in gw.stirred: Gateway.pump looks at it next
        self.heard_at = 0
        self.will_topic = None  # (topic, qos, retain) during the will handshake
        self.will = None  # (topic, payload, qos, retain): given again at every wake-up
        self.update_resp = 0  # UPDATING: WILLTOPICRESP or WILLMSGRESP, sent after the new CONNACK
        self.update_from = ACTIVE  # UPDATING: the state it goes back to
        self.sleep_until = 0  # ticks: ASLEEP, lost after this
        self.sleep_ms = 0  # 1.5 x the Duration of its last DISCONNECT
        self.waiting = []  # MQTT PUBLISHes from the broker behind a REGISTER
        self.dropping = False  # QoS 0 dropped behind this REGISTER (logged once)
        self.reg_msg_id = 0  # the msg id of our REGISTER awaiting its REGACK (0 none)
        self.next_msg_id = 1
        self.subs = {}  # MQTT packet id -> (SN type of the ack, SN msg id, topic id)
        self.qos2_in = []  # SN msg ids of QoS 2 PUBLISHes answered with PUBREC, PUBREL awaited
        # §6.13: [ack family (PUBLISH or REGISTER), msg id, datagram, due ticks, resends]
        self.unacked = []

    # ------------------------------------------------ the driver's handle

    def write(self, data):
        # A copy: the driver reuses its buffer after the call.
        if self.mqtt is not None:
            self.mqtt.data_received(bytes(data), self.gw.ticks_ms())
            self.stir()
            self.gw.wake()  # what the client answers, and the SN datagrams, at the shell's next pump

    def stir(self):
        """Something happened to it (a datagram, the broker wrote, it connects):
        its MQTT client may have bytes for the broker, an AWAKE client may be
        settled. Gateway.pump looks only at the clients stirred since the last
        one, so a datagram costs the same with one client or thousands."""
        if not self.stirred:
            self.stirred = True
            self.gw.stirred.append(self)

    def pause_reading(self):
        pass  # an SN client has no stream to hold: its QoS 1/2 publishes wait for their acks

    def resume_reading(self):
        pass

    def _ended(self):
        # The broker ended the connection (a takeover, a refusal, our own
        # DISCONNECT): inside the driver's flush, so connection_lost is told
        # at the next pump; the SN client hears DISCONNECT (§6.12) unless it
        # asked to leave, and is forgotten.
        if self.cid >= 0:
            self.ended_cid = self.cid
            self.cid = -1
            self.gw.lost.append(self)

    # ------------------------------------------------ MQTT client events

    def on_connected(self, session_present):
        session = self.gw.driver.broker.sessions.find(self.client_id)
        if session is not None and session.queue is not None:
            # What its session may queue while it sleeps: the listener's bound, not the broker's
            session.queue.cap = self.gw.settings.max_buffered
        if self.state == CONNECTING:
            self.state = ACTIVE
            self.send(SnMessage(S.CONNACK, return_code=S.RC_ACCEPTED))
        elif self.state == EXPIRING:
            self.gw.expired.append(self)
        elif self.state == UPDATING:
            self.state = self.update_from
            self.send(SnMessage(self.update_resp, return_code=S.RC_ACCEPTED))
        # AWAKE: the queued messages follow; PINGRESP once they are acked (Gateway.pump)

    def on_refused(self, reason):
        # A limit of the broker's (server unavailable: max_sessions, busy, quota,
        # connect rate): 0x01 "rejected: congestion", try later; anything else
        # (v1.2 has no "not authorized"): 0x03 "rejected: not supported" (§5.3.10)
        self.gw.count("sn_refused_connects")
        self.gw.log(30, "MQTT-SN client %s refused by the broker (CONNACK 0x%02x)", (self.client_id, reason))
        rtype = self.update_resp if self.state == UPDATING else S.CONNACK
        rc = S.RC_CONGESTION if reason in BROKER_LIMITS else S.RC_NOT_SUPPORTED
        self.send(SnMessage(rtype, return_code=rc))
        self.state = GONE
        self.gw.lost.append(self)

    def on_message(self, pkt):
        if not self.waiting and not self.reg_msg_id:
            self._deliver(pkt)
        elif pkt.qos or len(self.waiting) < self.gw.settings.max_buffered:
            self.waiting.append(pkt)  # in order, behind the REGISTER
        else:
            # QoS 0 behind a REGISTER not yet acked (QoS 1/2 are bounded by
            # the broker's inflight window): past max_buffered, dropped as for
            # any slow client; logged once a REGISTER
            self.gw.count("dropped_qos0")
            if not self.dropping:
                self.dropping = True
                why = "MQTT-SN client %s: max_buffered (%d) messages wait for its REGACK; QoS 0 dropped"
                self.gw.log(30, why, (self.client_id, self.gw.settings.max_buffered))

    def on_delivered(self, token, reason):
        if token is None:
            return
        msg_id, topic_id, qos = token
        if qos < 0:
            return  # QoS -1: nothing to answer (§6.8)
        if qos == 2:
            self.qos2_in.append(msg_id)
            self.send(SnMessage(S.PUBREC, msg_id=msg_id))
        else:
            # the broker refused it (the ACL, a full queue): v1.2 has no better word than 0x03 (§5.3.10)
            rc = S.RC_NOT_SUPPORTED if reason and reason >= 0x80 else S.RC_ACCEPTED
            self.send(SnMessage(S.PUBACK, topic_id=topic_id, msg_id=msg_id, return_code=rc))

    def on_suback(self, pid, reasons):
        entry = self.subs.pop(pid, None)
        if entry is None:
            return
        mtype, msg_id, topic_id = entry
        if mtype == S.UNSUBACK:
            self.send(SnMessage(S.UNSUBACK, msg_id=msg_id))
            return
        granted = reasons[0] if reasons else 0x80
        if granted >= 0x80:  # the ACL or a limit refused it
            self.gw.count("sn_refused_subscriptions")
            self.send(SnMessage(S.SUBACK, topic_id=0, msg_id=msg_id, return_code=S.RC_NOT_SUPPORTED))
        else:
            self.send(SnMessage(S.SUBACK, qos=granted, topic_id=topic_id, msg_id=msg_id, return_code=0))

    def on_completed(self, token):
        pass  # (hold_release is off)

    def on_release(self, pid):
        pass  # (hold_complete is off)

    def on_closed(self, why):
        self.gw.log(30, "MQTT-SN client %s: %s", (self.client_id, why))
        self._ended()

    # ------------------------------------------------ to the SN client

    def send(self, msg):
        if self.addr is not None:  # (None: the QoS -1 session, no SN client)
            self.gw.out.append((self.addr, encode_message(msg)))

    def _send_acked(self, msg, family):
        """A message the client acknowledges (§6.13): kept until it does, resent by Gateway.tick.
        family: S.PUBLISH (PUBLISH, PUBREL: PUBACK, PUBREC, PUBCOMP) or S.REGISTER (REGACK).
        The same msg id again (the session's resend at a reconnect) replaces the old one."""
        data = bytearray(encode_message(msg))
        self._acked(family, msg.msg_id)
        due = ticks_deadline(self.gw.ticks_ms(), self.gw.settings.retry_interval * 1000)
        self.unacked.append([family, msg.msg_id, data, due, 0])
        self.gw.out.append((self.addr, data))

    def _acked(self, family, msg_id):
        for i in range(len(self.unacked)):
            e = self.unacked[i]
            if e[0] == family and e[1] == msg_id:
                del self.unacked[i]
                return

    def _msg_id(self):
        n = self.next_msg_id
        self.next_msg_id = n + 1 if n < 0xFFFF else 1
        return n

    def _deliver(self, pkt):
        """Send one MQTT PUBLISH from the broker, or a REGISTER first (§6.10)."""
        kind = self.ids.id_for(pkt.topic)
        if kind is None:
            topic_id, rc = self.ids.register(pkt.topic)
            if rc:
                # No id left for it: the message cannot be named to this client.
                self.gw.count("sn_topic_ids_refused")
                self.gw.log(30, "MQTT-SN client %s: no topic id for %s; message dropped", (self.client_id, pkt.topic))
                self.mqtt.ack(pkt.packet_id)
                return
            self.reg_msg_id = self._msg_id()
            self.waiting.insert(0, pkt)
            self._send_acked(
                SnMessage(S.REGISTER, topic_id=topic_id, msg_id=self.reg_msg_id, topic_name=pkt.topic), S.REGISTER
            )
            return
        topic_type, topic_id = kind
        qos = pkt.qos
        if len(pkt.payload) + 7 > self.gw.settings.max_packet_size:  # 7: a PUBLISH's header (§5.4.12)
            self.gw.count("sn_too_large")
            why = "MQTT-SN client %s: a message on %s over max_packet_size dropped"
            self.gw.log(30, why, (self.client_id, pkt.topic))
            if qos:
                self.mqtt.ack(pkt.packet_id)
            return
        msg = SnMessage(
            S.PUBLISH,
            qos=qos,
            retain=pkt.retain,
            dup=pkt.dup,
            topic_id_type=topic_type,
            topic_id=topic_id,
            msg_id=pkt.packet_id if qos else 0,
            data=bytes(pkt.payload),
        )
        if qos:
            self._send_acked(msg, S.PUBLISH)
        else:
            self.send(msg)

    def _regack(self, msg):
        if msg.msg_id != self.reg_msg_id:
            return
        self.reg_msg_id = 0
        self.dropping = False
        if msg.return_code:
            # The client refused the id: what waited for it cannot be sent.
            self.gw.count("sn_topic_ids_refused")
            keep = []
            for pkt in self.waiting:
                if pkt.topic == self.ids.name_of(S.TOPIC_NORMAL, msg.topic_id):
                    self.mqtt.ack(pkt.packet_id)
                else:
                    keep.append(pkt)
            self.waiting = keep
        waiting = self.waiting
        self.waiting = []
        for i in range(len(waiting)):
            self._deliver(waiting[i])
            if self.reg_msg_id:  # another REGISTER: the rest waits again, in order
                self.waiting = self.waiting + waiting[i + 1 :]
                return

    # ------------------------------------------------ from the SN client

    def received(self, msg, ms):
        t = msg.mtype
        self.heard_at = ms
        self.stir()
        if self.state == WILL_TOPIC:
            if t != S.WILLTOPIC:
                self._wrong_state(msg, "WILLTOPIC awaited")
                return
            if msg.topic_name is None:  # an empty WILLTOPIC: no will after all (§6.2)
                self._open(None, ms)
            else:
                self.will_topic = (msg.topic_name, msg.qos if msg.qos > 0 else 0, msg.retain)
                self.state = WILL_MSG
                self.send(SnMessage(S.WILLMSGREQ))
            return
        if self.state == WILL_MSG:
            if t == S.WILLMSG:
                topic, qos, retain = self.will_topic
                self._open((topic, msg.data, qos, retain), ms)
            else:
                self._wrong_state(msg, "WILLMSG awaited")
            return
        if self.state == ASLEEP:
            self._asleep(msg, ms)
            return
        if self.state == AWAKE and t == S.PINGREQ:
            return  # its PINGRESP comes once what waited is delivered (Gateway.pump)
        if self.state != ACTIVE and self.state != AWAKE:
            self._wrong_state(msg, "its MQTT connection is being made")
            return
        if t == S.PUBLISH:
            self._publish(msg)
        elif t == S.REGISTER:
            topic_id, rc = self.ids.register(msg.topic_name)
            if rc:
                self._no_topic_id(msg.topic_name, rc)
            self.send(SnMessage(S.REGACK, topic_id=topic_id, msg_id=msg.msg_id, return_code=rc))
        elif t == S.REGACK:
            self._acked(S.REGISTER, msg.msg_id)
            self._regack(msg)
        elif t == S.PUBACK or t == S.PUBREC:
            self._acked(S.PUBLISH, msg.msg_id)
            self.mqtt.ack(msg.msg_id)  # MQTT PUBACK / PUBREC of the same id
            if t == S.PUBREC:
                self._send_acked(SnMessage(S.PUBREL, msg_id=msg.msg_id), S.PUBLISH)
        elif t == S.PUBCOMP:
            self._acked(S.PUBLISH, msg.msg_id)
        elif t == S.PUBREL:
            if msg.msg_id in self.qos2_in:
                self.qos2_in.remove(msg.msg_id)
            self.send(SnMessage(S.PUBCOMP, msg_id=msg.msg_id))
        elif t == S.SUBSCRIBE or t == S.UNSUBSCRIBE:
            self._subscribe(msg)
        elif t == S.PINGREQ:
            self.send(SnMessage(S.PINGRESP))
        elif t == S.DISCONNECT:
            self._disconnect(msg, ms)
        elif t == S.WILLTOPICUPD or t == S.WILLMSGUPD:
            self._update_will(msg)
        else:
            self._wrong_state(msg, "not a message to the gateway of a connected client")

    def _update_will(self, msg):
        """§6.4: MQTT cannot change a will on a live connection, so the MQTT
        connection ends with a normal DISCONNECT (which discards the old will,
        [MQTT-3.1.2-10]) and connects again with clean_start off and the new
        will; the session queues what comes meanwhile. The answer follows the
        new CONNACK (on_connected); the swap happens inside one pump()."""
        self.will = self._new_will(msg)
        self.update_resp = S.WILLTOPICRESP if msg.mtype == S.WILLTOPICUPD else S.WILLMSGRESP
        self.update_from = self.state
        self.state = UPDATING
        self.mqtt.disconnect()  # the broker ends the connection; Gateway.pump connects again

    def _new_will(self, msg):
        """The will after WILLTOPICUPD or WILLMSGUPD `msg` (§5.4.23, §5.4.25)."""
        will = self.will
        if msg.mtype == S.WILLTOPICUPD:
            if msg.topic_name is None:
                return None  # an empty WILLTOPICUPD deletes the will topic and message (§5.4.23)
            data = will[1] if will is not None else b""
            return (msg.topic_name, data, msg.qos if msg.qos > 0 else 0, msg.retain)
        if will is None:
            return None  # a message without a will topic has nowhere to go
        return (will[0], msg.data, will[2], will[3])

    def _disconnect(self, msg, ms):
        """§6.12 DISCONNECT, or §6.14 with a Duration: asleep. Either way the
        MQTT connection ends politely (no will); asleep, the session stays
        and queues what comes for the client."""
        self.send(SnMessage(S.DISCONNECT))
        if self.mqtt is not None and self.cid >= 0:
            # a clean client's session ends with it; asleep, it must stay
            self.mqtt.disconnect(self.clean and not msg.duration)
        if msg.duration:
            self.state = ASLEEP
            self.sleep_ms = int(msg.duration * KEEP_ALIVE_GRACE * 1000)
            self.sleep_until = ticks_deadline(ms, self.sleep_ms)
        else:
            self.state = GONE
            self.gw.leaving.append(self)

    def _asleep(self, msg, ms):
        """§6.14, fig. 4: asleep, a client may PINGREQ (awake), DISCONNECT
        (asleep again, or gone) or CONNECT (Gateway._connect); and update its
        will (§6.4). Anything else waits for one of those: refused."""
        t = msg.mtype
        if t == S.PINGREQ:
            # §6.14: awake: the session's queued messages are sent, then PINGRESP
            self.state = AWAKE
            self._open(self.will, ms, False)
        elif t == S.DISCONNECT:
            self._disconnect(msg, ms)
        elif t == S.WILLTOPICUPD or t == S.WILLMSGUPD:
            # No MQTT connection holds a will while it sleeps: the new one is what
            # the next carries (a PINGREQ's, or the last one, that publishes it
            # when the sleep runs out). Answered now; still asleep, the sleep
            # timer unchanged, what waits stays queued until a PINGREQ.
            self.will = self._new_will(msg)
            self.send(SnMessage(S.WILLTOPICRESP if t == S.WILLTOPICUPD else S.WILLMSGRESP, return_code=S.RC_ACCEPTED))
        else:
            self._wrong_state(msg, "asleep (PINGREQ or CONNECT first, §6.14)")

    def _wrong_state(self, msg, why):
        """A message the client's state does not take: counted, logged and,
        where it has a return code, answered 0x01 "rejected: congestion" (try
        again later, §6.5/§6.6/§6.9: after a CONNACK or PINGREQ it would pass)."""
        gw = self.gw
        gw.count("sn_wrong_state")
        gw.log(30, "MQTT-SN client %s: message type 0x%02x refused: %s", (self.client_id, msg.mtype, why))
        t = msg.mtype
        if t == S.PUBLISH and msg.qos > 0:
            self.send(SnMessage(S.PUBACK, topic_id=msg.topic_id, msg_id=msg.msg_id, return_code=S.RC_CONGESTION))
        elif t == S.SUBSCRIBE:
            self.send(SnMessage(S.SUBACK, msg_id=msg.msg_id, return_code=S.RC_CONGESTION))
        elif t == S.REGISTER:
            self.send(SnMessage(S.REGACK, msg_id=msg.msg_id, return_code=S.RC_CONGESTION))

    def settled(self):
        """AWAKE: everything the session held was delivered and acknowledged."""
        c = self.mqtt
        if c is None or c.state != CONNECTED or self.waiting or self.reg_msg_id or c.incoming or c.out:
            return False
        session = self.gw.driver.broker.sessions.find(self.client_id)
        if session is None:
            return True
        return not session.inflight and (session.queue is None or not session.queue.count)

    def _open(self, will, ms, clean=None):
        gw = self.gw
        c = Client(self, self.client_id, 5, self.clean if clean is None else clean)
        c.keep_alive = 0  # in memory: the gateway watches the SN client's Duration instead
        c.session_expiry = gw.settings.session_expiry
        c.will = will
        self.will = will
        self.mqtt = c
        if self.state != AWAKE and self.state != EXPIRING and self.state != UPDATING:
            self.state = CONNECTING
        where = "QoS -1" if self.addr is None else gw.addr_text(self.addr)
        peer = ("mqtt-sn " + where, None, gw.settings.loopback, gw.settings.listener_key)
        cid = gw.driver.connection_made(self, peer)
        if cid < 0:
            gw.count("sn_refused_connects")
            gw.log(30, "MQTT-SN client %s refused: the broker takes no more connections", (self.client_id,))
            self.send(SnMessage(S.CONNACK, return_code=S.RC_CONGESTION))
            self.state = GONE
            gw.lost.append(self)
            return
        self.cid = cid
        c.connect(ms)
        self.stir()

    def _publish(self, msg):
        name = self.ids.name_of(msg.topic_id_type, msg.topic_id)
        if name is None:
            # §6.6: unknown topic id -> PUBACK "rejected: invalid topic ID"
            self.gw.count("sn_unknown_topic_ids")
            self.send(SnMessage(S.PUBACK, topic_id=msg.topic_id, msg_id=msg.msg_id, return_code=S.RC_INVALID_TOPIC_ID))
            return
        qos = msg.qos
        if qos <= 0:
            self.mqtt.publish(name, msg.data, 0, msg.retain)
            return
        if qos == 2 and msg.msg_id in self.qos2_in:
            self.send(SnMessage(S.PUBREC, msg_id=msg.msg_id))  # a resent one: not published twice
            return
        self.mqtt.publish(name, msg.data, qos, msg.retain, None, (msg.msg_id, msg.topic_id, qos))
        self.mqtt.pump(self.gw.ticks_ms())

    def _no_topic_id(self, name, rc):
        """A REGISTER or SUBSCRIBE refused its topic id (§6.5): counted, logged."""
        self.gw.count("sn_topic_ids_refused")
        why = "max_topic_ids (%d) given" % self.ids.max_ids if rc == S.RC_CONGESTION else "not a topic name"
        self.gw.log(30, "MQTT-SN client %s: no topic id for %s: %s", (self.client_id, name, why))

    def _subscribe(self, msg):
        topic_id = 0
        if msg.topic_id_type == S.TOPIC_NORMAL:
            name = msg.topic_name
            if msg.mtype == S.SUBSCRIBE and "+" not in name and "#" not in name:
                topic_id, rc = self.ids.register(name)
                if rc:
                    self._no_topic_id(name, rc)
                    self.send(SnMessage(S.SUBACK, msg_id=msg.msg_id, return_code=rc))
                    return
        elif msg.topic_id_type == S.TOPIC_PREDEFINED:
            name = self.ids.name_of(S.TOPIC_PREDEFINED, msg.topic_id)
            topic_id = msg.topic_id
            if name is None:
                self.gw.count("sn_unknown_topic_ids")
                ack = S.SUBACK if msg.mtype == S.SUBSCRIBE else S.UNSUBACK
                self.send(SnMessage(ack, msg_id=msg.msg_id, return_code=S.RC_INVALID_TOPIC_ID))
                return
        else:
            name = short_name(msg.topic_id)
            topic_id = msg.topic_id
        if msg.mtype == S.SUBSCRIBE:
            qos = msg.qos if msg.qos > 0 else 0
            pid = self.mqtt.subscribe([(name, qos)])
            self.subs[pid] = (S.SUBACK, msg.msg_id, topic_id)
        else:
            pid = self.mqtt.unsubscribe([name])
            self.subs[pid] = (S.UNSUBACK, msg.msg_id, 0)
