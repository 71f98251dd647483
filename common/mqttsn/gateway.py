"""The MQTT-SN v1.2 gateway inside the broker: each SN client is an ordinary
MQTT session.

Theory of operation
-------------------
The gateway translates at the edge of the broker (a "transparent" gateway,
§4.2, without a second broker): every SN client gets its own sans-I/O MQTT
client (common/client) whose connection into the broker is in memory, made
through the driver the way a bridge's local connection is (bridge/link.py).
So the broker's users, ACL, retained messages, wills, persistent sessions and
their store, and $SYS apply to SN clients unchanged: the gateway only turns
SN messages into MQTT calls and the MQTT client's events back into SN
messages (the `on_*` handler methods of `SnClient`).

    shell datagram ─► Gateway.datagram_received(addr, data) ─► SnClient
        ─► Client (MQTT 3.1.1) ─► driver.data_received ─► broker
    broker output ─► SnClient.write (the driver's handle) ─► Client
        ─► handler events ─► SN datagrams ─► Gateway.take_datagrams()

Nothing here re-enters the driver from inside its flush: the driver's writes
land in the MQTT client at once, and what the client wants to send back is
moved by `pump()` afterwards: the shell calls it after every datagram and
tick, and soon after the gateway's `wake` callable asks it to (the broker
wrote to an SN client: a delivery, an ack), as a bridge runner pumps its link.

Addresses are opaque to the core (the shell's own values: an (ip, port)
tuple on the host); `addr_text` is what the log and the broker see.

The SN clients themselves (their states, the will handshake, topic ids,
what waits for an ack): common/mqttsn/sn_client.py. The timers (keep-alive,
sleep expiry, retransmission, ADVERTISE): common/mqttsn/timers.py. With
`keys` in the settings, every datagram both ways is sealed
(common/mqttsn/envelope.py), opened in `datagram_received` and sealed in
`take_datagrams`: the rest of the gateway sees plain SN messages.
"""

from common.compat import ticks_deadline
from common.mqttsn import consts as S
from common.mqttsn import timers
from common.mqttsn.codec import SnMessage, encode_message, parse_datagram
from common.mqttsn.sn_client import ASLEEP, AWAKE, GONE, QOS_M1_CLIENT, UPDATING, WILL_TOPIC, SnClient


class Gateway:
    """Every SN client of one listener, and the datagrams waiting to go out."""

    def __init__(self, driver, settings, ticks_ms, addr_text, wake, make_aead=None):
        """`make_aead(key)`: the shell's AES-GCM, needed with `settings.keys`."""
        self.driver = driver
        self.settings = settings
        self.ticks_ms = ticks_ms
        self.addr_text = addr_text  # the shell's address -> text for the log
        # The shell calls pump() soon (not now: this runs inside the driver's flush)
        self.wake = wake
        self.clients = {}  # addr -> SnClient
        self.out = []  # (addr, datagram)
        self.stirred = []  # SnClients pump() looks at next (SnClient.stir), in the order they were
        self.lost = []  # SnClients whose connection the broker ended
        self.leaving = []  # SnClients that sent DISCONNECT (their MQTT DISCONNECT goes first)
        self.expired = []  # SnClients asleep too long, connected again: now lost (their will)
        self.qos_m1 = None  # the SnClient QoS -1 PUBLISHes go through (made at the first)
        self.advertisement = None  # §6.1: the ADVERTISE datagram, sent every advertise_interval s
        self.advertise_due = 0  # ticks of the next one (the first at the first tick)
        if settings.advertise_interval and settings.advertise_to is not None:
            ad = SnMessage(S.ADVERTISE, gw_id=settings.gw_id, duration=settings.advertise_interval)
            self.advertisement = encode_message(ad)
            self.advertise_due = ticks_ms()
        self.envelope = None  # common/mqttsn/envelope.py: with keys only (else not even loaded)
        if settings.keys:
            if make_aead is None:
                raise ValueError("MQTT-SN keys need the shell's make_aead")
            from common.mqttsn.envelope import Envelope

            self.envelope = Envelope(settings.keys, make_aead, driver.broker.entropy)

    def log(self, level, fmt, args):
        self.driver.broker.log(level, fmt, args)

    def count(self, name):
        stats = self.driver.broker.stats
        setattr(stats, name, getattr(stats, name) + 1)

    def datagram_received(self, addr, data):
        """One datagram from `addr`; then pump() and take_datagrams()."""
        ms = self.ticks_ms()
        settings = self.settings
        if len(data) > settings.max_packet_size + settings.envelope_overhead:
            self.count("sn_too_large")
            why = "MQTT-SN datagram from %s refused: %d bytes, over max_packet_size"
            self.log(30, why, (self.addr_text(addr), len(data)))
            return
        key = None  # the KeyState an envelope authenticated
        env = self.envelope
        if env is not None and data and data[0] == 0:  # (0x00 is no v1.2 Length: an envelope)
            key, data, refused = env.open(addr, data)
            if key is None:
                self.count(refused[0])
                level = 20 if refused[0] == "sn_challenged" else 30  # (a challenge: every client's first)
                self.log(level, "MQTT-SN datagram from %s refused: %s", (self.addr_text(addr), refused[1]))
                return
            if len(data) > settings.max_packet_size:
                self.count("sn_too_large")
                why = "MQTT-SN message from %s refused: %d bytes, over max_packet_size"
                self.log(30, why, (self.addr_text(addr), len(data)))
                return
        msg, why = parse_datagram(data)
        if msg is None:
            self.count("sn_malformed")
            self.log(30, "MQTT-SN datagram from %s refused: %s", (self.addr_text(addr), why))
            return
        t = msg.mtype
        if env is not None and not self._keyed(addr, key, msg):
            return
        if t == S.SEARCHGW:  # §6.1: answered with GWINFO (unicast: the shell has the address)
            gwinfo = encode_message(SnMessage(S.GWINFO, gw_id=self.settings.gw_id))
            if key is None:
                self.send_plain(addr, gwinfo)
            else:
                self.out.append((addr, gwinfo))
            return
        client = self.clients.get(addr)
        if t == S.PUBLISH and msg.qos == -1 and client is None:
            self._publish_qos_m1(msg, ms)
            return
        if t == S.CONNECT:
            self._connect(addr, client, msg, ms)
            return
        if client is None or client.state == GONE:
            # Not connected (a gateway restart, an expired client): DISCONNECT tells it to CONNECT again
            self.count("sn_unknown_clients")
            self.out.append((addr, encode_message(SnMessage(S.DISCONNECT))))
            return
        client.received(msg, ms)

    def _keyed(self, addr, key, msg):
        """A keyed listener: whether `msg` (under `key`, None: plain) may go
        on. Plain only SEARCHGW (discovery); a client id only with its own
        key. What it answers is sealed to `addr` under `key` from now on."""
        env = self.envelope
        where = self.addr_text(addr)
        if key is None:
            if msg.mtype == S.SEARCHGW:
                return True
            self.count("sn_unsealed")
            self.log(30, "MQTT-SN datagram from %s refused: not sealed (this listener has keys)", (where,))
            return False
        if msg.mtype == S.CONNECT and msg.client_id != key.name:
            self.count("sn_wrong_key")
            why = "MQTT-SN CONNECT from %s refused: client id %s under the key of %s"
            self.log(30, why, (where, msg.client_id, key.name))
            refusal = env.seal(key, encode_message(SnMessage(S.CONNACK, return_code=S.RC_NOT_SUPPORTED)))
            if refusal is not None:
                env.out.append((addr, refusal))
            return False
        client = self.clients.get(addr)
        if msg.mtype != S.CONNECT and client is not None and client.client_id != key.name:
            self.count("sn_wrong_key")
            why = "MQTT-SN datagram from %s refused: under the key of %s, to client %s"
            self.log(30, why, (where, key.name, client.client_id))
            return False
        env.bind(addr, key)
        return True

    def send_plain(self, addr, data):
        """A datagram that goes out as it is also from a keyed listener (discovery: GWINFO, ADVERTISE)."""
        (self.out if self.envelope is None else self.envelope.out).append((addr, data))

    def _connect(self, addr, client, msg, ms):
        if client is not None:
            self._end(client)  # a CONNECT again: the old connection ends first
        elif len(self.clients) >= self.settings.max_clients:
            self.count("sn_refused_connects")
            self.log(30, "MQTT-SN client %s refused: max_clients (%d)", (msg.client_id, self.settings.max_clients))
            self.out.append((addr, encode_message(SnMessage(S.CONNACK, return_code=S.RC_CONGESTION))))
            return
        client = SnClient(self, addr, msg)
        client.heard_at = ms
        self.clients[addr] = client
        if msg.will:
            client.state = WILL_TOPIC
            client.send(SnMessage(S.WILLTOPICREQ))
        else:
            client._open(None, ms)

    def _publish_qos_m1(self, msg, ms):
        """§6.8: a PUBLISH without a connection, to a predefined id or a short
        name; it goes through one session of its own (client id
        QOS_M1_CLIENT), so the ACL judges it as that client's."""
        c = self.qos_m1
        if c is None or c.state == GONE:
            hello = SnMessage(S.CONNECT, clean=True, client_id=QOS_M1_CLIENT)
            c = SnClient(self, None, hello)
            self.qos_m1 = c
            self.clients[None] = c
            c._open(None, ms)
        name = None
        if msg.topic_id_type != S.TOPIC_NORMAL:  # a normal id means nothing without a connection
            name = c.ids.name_of(msg.topic_id_type, msg.topic_id)
        if name is None:
            self.count("sn_unknown_topic_ids")
            return
        c.mqtt.publish(name, msg.data, 0, msg.retain, None, (0, 0, -1))
        c.mqtt.pump(ms)
        c.stir()

    def _end(self, client, lost=False):
        """Forget `client`; its MQTT connection ends (lost: without DISCONNECT, so its will is published)."""
        if self.clients.get(client.addr) is client:
            del self.clients[client.addr]
        client.state = GONE
        cid = client.cid
        client.cid = -1
        if cid >= 0:
            if not lost and client.mqtt is not None:
                client.mqtt.disconnect()
                out = client.mqtt.take_output()
                if out:
                    self.driver.data_received(cid, out)
            self.driver.connection_lost(cid)
            self.driver.flush()

    def pump(self):
        """Move the MQTT clients' bytes into the driver until all is said: of
        the clients stirred since the last pump (SnClient.stir), not of all."""
        driver = self.driver
        for _ in range(8):  # each round answers the last one's acks: a few at most
            moved = False
            stirred = self.stirred
            self.stirred = []
            for c in stirred:
                c.stirred = False  # (stirred again by what follows: looked at in the next round)
            for c in stirred:
                if c.cid < 0 or c.mqtt is None:
                    continue
                out = c.mqtt.take_output()
                if out:
                    moved = True
                    driver.data_received(c.cid, out)
                    driver.flush()
            while self.leaving:
                self._end(self.leaving.pop())
            while self.expired:
                # lost, not disconnected: the broker publishes its will
                c = self.expired.pop()
                self.count("sn_keep_alive_lost")
                self._end(c, True)
                moved = True
            for c in stirred:
                if c.state == AWAKE and self.clients.get(c.addr) is c and c.settled():
                    # §6.14: everything delivered: PINGRESP last, then asleep again
                    c.send(SnMessage(S.PINGRESP))
                    c.state = ASLEEP
                    c.sleep_until = ticks_deadline(self.ticks_ms(), c.sleep_ms)
                    c.mqtt.disconnect()
                    c.stir()
                    moved = True
            while self.lost:
                c = self.lost.pop()
                if c.ended_cid >= 0:
                    driver.connection_lost(c.ended_cid)
                    c.ended_cid = -1
                    driver.flush()
                if c.state == ASLEEP:
                    continue  # its session queues what comes for it
                if c.state == UPDATING and self.clients.get(c.addr) is c:
                    # §6.4: connected again with the new will; the session owes
                    # again what waited behind a REGISTER (QoS 0 is not owed)
                    c.waiting = []
                    c._open(c.will, self.ticks_ms(), False)
                    moved = True
                    continue
                if self.clients.get(c.addr) is c:
                    del self.clients[c.addr]
                    if c.state != GONE:
                        c.state = GONE
                        c.send(SnMessage(S.DISCONNECT))
                moved = True
            if not moved and not self.stirred:
                return

    def take_datagrams(self):
        """The (address, datagram) pairs to send; sealed with keys."""
        out = self.out
        self.out = []
        if self.envelope is not None:
            return self.envelope.seal_all(out)
        return out

    def tick(self):
        """Keep-alive, sleep expiry, retransmission, ADVERTISE (common/mqttsn/timers.py).
        The next deadline (ms ticks, 0 none)."""
        return timers.run(self)
