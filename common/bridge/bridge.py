"""The bridge: store-and-forward between this broker and an upstream one.

Theory of operation
-------------------
A bridge is two MQTT clients (common/client/client.py) joined back to back:

    local broker  <-- `local` (v5, in memory) -- Bridge -- `up` (TCP/TLS) -->  upstream

`local` is an ordinary client of this broker, connected through the shell's
in-memory handle with a persistent session (clean start off, session expiry
forever) subscribed to the "out" rules' filters. So the outbound queue IS
that session's queue: kept by the store like any session's (a message
whose publisher got its PUBACK survives kill -9), bounded by
max_queued_bytes / max_queued_total_bytes with queue_full, and resent in
order after a restart. The session is online only while the upstream is
connected (and once at start, to create it): while the upstream is away it
is an offline session, whose queue grows without holding the local
publishers back (an online subscriber that falls behind would). Online,
`local` lets the broker have at most `window` messages in flight (its
Receive Maximum); each goes up through `up`, and only the upstream's
PUBACK (QoS 1) or PUBREC (QoS 2) acknowledges it locally, which deletes
the record.

Downward the same from the other side: a message from upstream is
published into this broker through `local` (No Local on the out
subscriptions: it does not go back up), and only this broker's PUBACK /
PUBREC, which leaves after the store synced what it acknowledges
(store_sync = always), is answered upstream with the PUBACK / PUBREC.

Tokens: a message going up carries its local packet id, which the local
session keeps across connections (resent with DUP and the same id): a
resent one that `up` still holds is not taken twice, and an upstream ack
that comes while the local connection is down is owed (`owed_local`) and
given when the broker sends that message again. A message coming down
carries the generation of the upstream connection and its packet id
(gen << 16 | pid): an ack after that connection ended is dropped, never
applied to a reused packet id of the next one.

Loops: the upstream subscriptions use No Local (v5) or the bridge bit
(3.1.1, protocol level | 0x80: Mosquitto then applies No Local itself).

Profiles: "mqtt" (Mosquitto and others) and "nats" (NATS's MQTT listener:
3.1.1 only, QoS <= 1, no bridge bit, and a topic with "." or a space kills
the connection: such a message is dead-lettered, not sent).

Dead letters: a message the upstream will never take (the NATS topic rule;
a v5 PUBACK / PUBREC reason >= 0x80; above its Maximum Packet Size) is
counted, logged, and acknowledged locally so it does not block the rest.

Removed rules: the shell hands local_open() the local session's filters;
on a resumed session those no "out" rule names any more are unsubscribed,
and what they had queued is dead-lettered as it arrives. Upstream the
client cannot know what a resumed session holds: a removed "in" rule's
messages are dead-lettered as they come (docs/bridge.md).

Reconnect: the shell asks `next_address(ms)` at `retry_at`; each failed
attempt moves to the next address (failover across a cluster's nodes) and
doubles the delay from `backoff_min_ms` to `backoff_max_ms`, half of it
random (jitter); a connection that reached CONNACK starts over at the min.
"""

from common.broker.topics import topic_matches
from common.client.client import CONNECTED, DISCONNECTED, RELEASED, Client
from common.compat import const, ticks_deadline, ticks_diff, ticks_sooner
from common.mqtt import consts as C

OUT = const(1)
IN = const(2)
BOTH = const(3)
DIRECTIONS = {"out": OUT, "in": IN, "both": BOTH}

SYS_PREFIX = "$SYS/broker/bridge/"

# States, as $SYS says them
STATE_NAMES = ("disconnected", "connecting", "connected")

# v5 properties of a local delivery not to forward: they are this hop's.
_HOP_PROPS = (C.PROP_SUBSCRIPTION_IDENTIFIER, C.PROP_TOPIC_ALIAS)

CONNACK_WHY = {
    1: "unacceptable protocol version",
    2: "client id refused",
    3: "server unavailable",
    4: "bad user name or password",
    5: "not authorized",
    0x84: "unsupported protocol version",
    0x85: "client id refused",
    0x86: "bad user name or password",
    0x87: "not authorized",
    0x88: "server unavailable",
    0x89: "server busy",
    0x8A: "banned",
}


class Rule:
    """One topic rule: `pattern` below `local_prefix` here and `remote_prefix` upstream."""

    __slots__ = ("direction", "local_prefix", "pattern", "qos", "remote_prefix", "retain")

    def __init__(self, direction, pattern, local_prefix="", remote_prefix="", qos=1, retain=True):
        self.direction = DIRECTIONS[direction] if isinstance(direction, str) else direction
        self.pattern = pattern
        self.local_prefix = local_prefix
        self.remote_prefix = remote_prefix
        self.qos = qos  # the QoS cap, both ways
        self.retain = retain  # False: the retain flag is cleared on the way


class _LocalSide:
    """The handler of the `local` client (methods, no closures)."""

    def __init__(self, bridge):
        self.b = bridge

    def on_connected(self, present):
        self.b._local_connected(present)

    def on_refused(self, reason):
        self.b._local_failed("the local broker refused the bridge's session (0x%02x)" % reason)

    def on_message(self, pkt):
        self.b._outbound(pkt)

    def on_delivered(self, token, reason):
        self.b._stored_locally(token, reason)

    def on_suback(self, pid, reasons):
        self.b._suback("local", reasons)

    def on_closed(self, why):
        self.b._local_failed(why)


class _UpSide:
    def __init__(self, bridge):
        self.b = bridge

    def on_connected(self, present):
        self.b._up_connected(present)

    def on_refused(self, reason):
        self.b._up_refused(reason)

    def on_message(self, pkt):
        self.b._inbound(pkt)

    def on_delivered(self, token, reason):
        self.b._delivered_up(token, reason)

    def on_suback(self, pid, reasons):
        self.b._suback("upstream", reasons)

    def on_closed(self, why):
        self.b.close_wanted = why


class Bridge:
    def __init__(
        self,
        name,
        addresses,
        rules,
        log,
        entropy,
        client_id="",
        username=None,
        password=None,
        level=4,
        keep_alive=60,
        clean_session=False,
        profile="mqtt",
        bridge_bit=True,
        max_inflight=20,
        window=32,
        local_client_id="",
        backoff_min_ms=1000,
        backoff_max_ms=60000,
        connect_timeout_ms=10000,
    ):
        self.name = name
        self.addresses = addresses  # ["host:port", ...] tried in order
        self.rules = rules
        self.log = log  # log(level, text)
        self.entropy = entropy
        self.profile = profile
        nats = profile == "nats"
        if nats:
            level = 4  # NATS speaks 3.1.1 only
        self.max_qos = 1 if nats else 2
        self.up = Client(
            _UpSide(self),
            client_id or "siskin-" + name,
            level=level,
            keep_alive=keep_alive,
            clean_start=clean_session,
            username=username,
            password=password,
            # NATS refuses the bridge bit; a v5 upstream gets No Local instead.
            bridge=bridge_bit and not nats and level == 4,
            session_expiry=0 if clean_session else C.U32_MAX,
            max_inflight=max_inflight,
            connect_timeout_ms=connect_timeout_ms,
        )
        self.local = Client(
            _LocalSide(self),
            local_client_id or "siskin-bridge-" + name,
            level=5,
            keep_alive=0,
            clean_start=False,
            session_expiry=C.U32_MAX,
            max_inflight=window,
            receive_max=window,
        )
        self.backoff_min_ms = backoff_min_ms
        self.backoff_max_ms = backoff_max_ms
        self.failures = 0
        self.addr_index = 0
        self.retry_at = 1  # ticks; due at once
        self.close_wanted = None  # why the upstream stream must be closed (the shell reads it)
        self.local_lost = None  # why the local stream ended (the shell reconnects it)
        self.address = ""  # the one connected or being tried
        self.reached = False  # this connection got its CONNACK (the client may have given up since)
        self.local_ready = False  # the local session exists, subscribed (after its first CONNACK)
        self.held = ()  # the local session's filters at local_open (a removed rule's go)
        # Local packet ids acknowledged upstream while the local connection
        # was down: the broker sends them again (DUP), they are acked then.
        self.owed_local = set()
        self.up_gen = 0
        self.state_changed = True  # $SYS is due
        # figures for $SYS
        self.sent = 0  # messages the upstream acknowledged (QoS 0: written)
        self.received = 0  # messages from upstream stored here
        self.dead_lettered = 0
        self.dropped = 0  # QoS 0 ones going up while the upstream was away
        self.last_error = ""

    # ------------------------------------------------------------ local side

    def local_wanted(self):
        """Whether the local session should be online: while the upstream is
        connected, and once at start (to create it and its subscriptions).
        Offline, its messages queue as any offline session's do (bounded by
        the queue budget and queue_full); online with the upstream away,
        they would pile up in an online subscriber's queue, and the broker
        would hold the local publishers back."""
        return self.up.state == CONNECTED or not self.local_ready

    def sync_local(self):
        """True: the shell opens the local connection (then local_open());
        an online local session whose upstream is away says DISCONNECT (in
        its output: the broker then closes the connection)."""
        state = self.local.state
        if self.local_wanted():
            return state == DISCONNECTED and self.local_lost is None
        if state == CONNECTED:
            self.local.disconnect()
        return False

    def local_open(self, ms, held=()):
        """The shell connected the in-memory handle: CONNECT. `held`: the
        filters the local session is subscribed to now (the shell reads
        them from the broker; none when it is new)."""
        self.held = held
        self.local.connect(ms)

    def local_closed(self):
        """The local connection ended (the shell may open it again at once)."""
        self.local.connection_lost()
        self.local_lost = None

    def _local_failed(self, why):
        self.local_lost = why
        self.log(40, "bridge %s: local session ended: %s" % (self.name, why))

    def _local_connected(self, present):
        self.local_ready = True
        topics = []
        for r in self.rules:
            if r.direction & OUT:
                # No Local: what the bridge publishes here (from upstream)
                # does not go back up. Retain As Published keeps the flag;
                # retained messages only when the subscription is new.
                opts = r.qos | C.SUBOPT_NO_LOCAL | C.SUBOPT_RETAIN_AS_PUBLISHED | (C.RETAIN_HANDLING_SEND_IF_NEW << 4)
                topics.append((r.local_prefix + r.pattern, opts))
        if topics:
            self.local.subscribe(topics)
        # A rule removed from the configuration: its subscription goes (what
        # it queued already is dead-lettered as it comes, in _outbound).
        stale = [f for f in self.held if not any(f == t[0] for t in topics)] if present else []
        self.held = ()
        if stale:
            self.local.unsubscribe(stale)
            self.log(30, "bridge %s: unsubscribed %s here: no rule names them any more" % (self.name, ", ".join(stale)))

    def _suback(self, side, reasons):
        for code in reasons:
            if code >= 0x80:
                self.last_error = "%s subscription refused (0x%02x)" % (side, code)
                self.log(30, "bridge %s: %s" % (self.name, self.last_error))

    def _outbound(self, pkt):
        """A message from this broker to send up."""
        topic = pkt.topic
        rule = None
        for r in self.rules:
            if r.direction & OUT and topic_matches(r.local_prefix + r.pattern, topic):
                rule = r
                break
        pid = pkt.packet_id
        if pid in self.owed_local:  # acknowledged upstream already
            self.owed_local.discard(pid)
            self.local.ack(pid)
            return
        if pkt.dup and self._holding(pid):
            return  # sent again after a reconnect: the copy held goes up (its ack acks both)
        if rule is None:  # queued for a rule since removed (its subscription went at start)
            self._dead_letter(topic, "no rule sends it up any more")
            self.local.ack(pid)
            return
        remote = rule.remote_prefix + topic[len(rule.local_prefix) :]
        if self.profile == "nats" and ("." in remote or " " in remote):
            # NATS maps "/" to "." in its subjects and closes the connection
            # for a topic with "." or " ": never sendable.
            self._dead_letter(remote, "NATS cannot take a topic with '.' or ' '")
            self.local.ack(pid)
            return
        qos = pkt.qos
        if qos > rule.qos:
            qos = rule.qos
        if qos > self.max_qos:
            qos = self.max_qos
        props = None
        if pkt.props:
            props = [p for p in pkt.props if p[0] not in _HOP_PROPS]
        retain = pkt.retain and rule.retain
        if not pkt.qos:
            if self.up.publish(remote, pkt.payload, 0, retain, props):
                self.sent += 1
            else:
                self.dropped += 1  # QoS 0 while the upstream is away
            return
        # The token is the local packet id: the session keeps it across
        # local connections [MQTT-4.4.0-1], so an ack after a reconnect still
        # names the same message.
        self.up.publish(remote, pkt.payload, qos, retain, props, pid)
        self.up.pump()

    def _holding(self, pid):
        """Whether the upstream client holds local message `pid`, not yet acknowledged upstream."""
        for lst in (self.up.queue, self.up.inflight):
            for m in lst:
                if m.token == pid and m.state != RELEASED:
                    return True
        return False

    def _delivered_up(self, token, reason):
        """The upstream acknowledged an outbound message (or refused it for good)."""
        if reason >= 0x80:
            self._dead_letter("(local id %d)" % token, "the upstream refused it (reason 0x%02x)" % reason)
        else:
            self.sent += 1
        if not self.local.ack(token):
            self.owed_local.add(token)  # the local connection is down: acked when it comes again

    def _dead_letter(self, topic, why):
        self.dead_lettered += 1
        self.last_error = "dead letter: " + why
        n = self.dead_lettered
        # Every one counted ($SYS); the log says the first ten, then every 1000th.
        if n <= 10 or n % 1000 == 0:
            self.log(30, "bridge %s: message %s dead-lettered (%d so far): %s" % (self.name, topic, n, why))

    # --------------------------------------------------------- upstream side

    def next_address(self, ms):
        """The address ("host:port") to try now, or None before retry_at."""
        if self.up.state != DISCONNECTED or self.close_wanted is not None:
            return None
        if ticks_diff(ms, self.retry_at) < 0:
            return None
        self.address = self.addresses[self.addr_index]
        return self.address

    def up_open(self, ms):
        """The stream to `address` is open: CONNECT."""
        self.up_gen = (self.up_gen + 1) & 0x3FFF
        self.close_wanted = None
        self.up.connect(ms)
        self._state()

    def up_failed(self, why, ms):
        """A connection attempt failed, or the stream ended: retry later."""
        was = self.reached
        self.reached = False
        self.up.connection_lost()
        self.close_wanted = None
        self.last_error = why
        if was:
            self.failures = 0
            self.log(30, "bridge %s: connection to %s lost: %s" % (self.name, self.address, why))
        else:
            self.log(30, "bridge %s: cannot connect to %s: %s" % (self.name, self.address, why))
            self.failures += 1
            self.addr_index = (self.addr_index + 1) % len(self.addresses)
        delay = self.backoff_min_ms << min(self.failures, 16)
        if delay > self.backoff_max_ms:
            delay = self.backoff_max_ms
        half = delay >> 1
        r = self.entropy(2)
        jitter = ((r[0] << 8) | r[1]) * half // 65535
        self.retry_at = ticks_deadline(ms, half + jitter)
        self._state()

    def _up_connected(self, present):
        self.reached = True
        self.failures = 0
        self.last_error = ""
        self.log(
            20, "bridge %s: connected to %s (session %s)" % (self.name, self.address, "resumed" if present else "new")
        )
        topics = []
        v5 = self.up.level == C.LEVEL_5
        for r in self.rules:
            if r.direction & IN:
                opts = r.qos if r.qos <= self.max_qos else self.max_qos
                if v5:
                    opts |= C.SUBOPT_NO_LOCAL | C.SUBOPT_RETAIN_AS_PUBLISHED
                topics.append((r.remote_prefix + r.pattern, opts))
        if topics:
            self.up.subscribe(topics)
        self._state()

    def _up_refused(self, reason):
        why = CONNACK_WHY.get(reason, "refused")
        self.close_wanted = "CONNACK 0x%02x (%s)" % (reason, why)

    def _inbound(self, pkt):
        """A message from upstream to store here."""
        topic = pkt.topic
        rule = None
        for r in self.rules:
            if r.direction & IN and topic_matches(r.remote_prefix + r.pattern, topic):
                rule = r
                break
        if rule is None:  # an upstream subscription of a rule since removed (kept by a resumed session)
            self._dead_letter(topic, "no rule brings it down any more (unsubscribe it upstream)")
            self.up.ack(pkt.packet_id)
            return
        local = rule.local_prefix + topic[len(rule.remote_prefix) :]
        qos = pkt.qos
        if qos > rule.qos:
            qos = rule.qos
        props = None
        if pkt.props:
            props = [p for p in pkt.props if p[0] not in _HOP_PROPS]
        # A token for every message, QoS 0 too: the local connection may
        # still be connecting (the client holds it until then).
        token = -1
        if pkt.qos:
            token = (self.up_gen << 16) | pkt.packet_id
        self.local.publish(local, pkt.payload, qos, pkt.retain and rule.retain, props, token)
        self.local.pump()

    def _stored_locally(self, token, reason):
        """This broker acknowledged a message from upstream: ack it there."""
        if reason >= 0x80:
            self._dead_letter("from upstream", "this broker refused it (reason 0x%02x)" % reason)
        else:
            self.received += 1
        if token >= 0 and token >> 16 == self.up_gen:
            self.up.ack(token & 0xFFFF)

    # ------------------------------------------------------------------ time

    def tick(self, ms):
        """Both clients' timers; the next deadline (ticks, 0 none)."""
        due = self.up.tick(ms)
        due = ticks_sooner(due, self.local.tick(ms))
        if self.up.state == DISCONNECTED and self.close_wanted is None:
            due = ticks_sooner(due, self.retry_at)
        return due

    # --------------------------------------------------------------- figures

    def _state(self):
        self.state_changed = True

    def state_name(self):
        return STATE_NAMES[self.up.state]

    def sys_values(self, queued, queued_bytes):
        """(topic, text) for $SYS; `queued`/`queued_bytes`: the local session's queue (the shell reads it)."""
        base = SYS_PREFIX + self.name + "/"
        up = self.up
        return [
            (base + "state", self.state_name()),
            # (an empty retained payload would clear the topic: "-" for none)
            (base + "address", self.address if up.state == CONNECTED else "-"),
            (base + "queued", str(queued + up.pending())),
            (base + "queued_bytes", str(queued_bytes)),
            (base + "sent", str(self.sent)),
            (base + "received", str(self.received)),
            (base + "dead_lettered", str(self.dead_lettered)),
            (base + "dropped", str(self.dropped)),
            (base + "last_error", self.last_error or "-"),
        ]
