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
order after a restart. It never slows a local publisher down: the broker
does not throttle a publisher for the bridge's queue (runner.py registers
it), so only its budget and queue_full apply. The session is online only
while the upstream is connected (and once at start, to create it). Online,
`local` lets the broker have at most `window` messages in flight (its
Receive Maximum); each goes up through `up`.

Nothing leaves the local store before the upstream has it: a message goes
up with its local packet id as its upstream packet id (`pids_from_tokens`),
and the local flow mirrors the upstream one step by step:

    QoS 1   up PUBACK ------------------------------> local PUBACK (record deleted)
    QoS 2   up PUBREC ------------------------------> local PUBREC (store: "released")
            local PUBREL (after the store synced) --> up PUBREL
            up PUBCOMP -----------------------------> local PUBCOMP (id freed)

After a kill -9 the local session sends again what it holds: a PUBLISH
(DUP, same id) whose upstream PUBREC never came back here, which the
upstream answers with PUBREC without delivering it twice [MQTT-4.3.3-10];
a PUBREL for one whose PUBREC did, which goes up as it is (resent on
resume [MQTT-4.4.0-1]; an upstream that had finished answers it all the
same [MQTT-4.3.3-11]). A PUBREL for a message whose upstream flow ended
otherwise (dead-lettered, sent at QoS 0/1) is completed here (`settled`).

Acks while the local connection is down: an upstream ack that comes while
the local connection is down is owed (`owed_local`) and given when the
broker sends that message again (DUP). A message coming down carries the
generation of the upstream connection and its packet id (gen << 16 | pid):
an ack after that connection ended is dropped, never applied to a reused
packet id of the next one. Down, a QoS 2 id the local session still holds
from before a restart (Session.qos2_in) is released before any new message
could take it (local_open), so no new message is taken for a resent one.

Loops: the upstream subscriptions use No Local (v5) or the bridge bit
(3.1.1, protocol level | 0x80: Mosquitto then applies No Local itself);
where the upstream has neither, settings.py refuses rules that would echo.

Profiles (profiles.py): what the upstream takes (QoS, retain, topic and size
limits). A message the upstream will never take (its profile's limits; a
v5 PUBACK / PUBREC refusal that is not "not now"; above its Maximum Packet
Size) is dead-lettered: counted, logged, and acknowledged locally so it
does not block the rest. "Not now" (0x97 quota exceeded, 0x91 id in use)
is retried, slower (client.py).

Removed rules: the shell hands local_open() the local session's filters;
on a resumed session those no "out" rule names any more are unsubscribed,
and what they had queued is dead-lettered as it arrives. Upstream the
client cannot know what a resumed session holds: a removed "in" rule's
messages are dead-lettered as they come (docs/bridge.md).

Reconnect: the shell asks `next_address(ms)` at `retry_at`; each failed
attempt moves to the next address (failover across a cluster's nodes) and
doubles the delay from `backoff_min_ms` to `backoff_max_ms`, half of it
random (jitter); a connection that reached CONNACK starts over at the min.
A silent upstream (an ack or PINGRESP owed for `stall_timeout`) is shown
"stalled"; after `keepalive` seconds of that silence it is dropped.
"""

from common.backoff import backoff_ms
from common.bridge.figures import Figures
from common.bridge.profiles import client_id_of, profile_named
from common.bridge.rules import IN, OUT, Rule
from common.bridge.sides import LocalSide, UpSide
from common.client.client import CONNECTED, DISCONNECTED, RECEIVED, Client
from common.compat import ticks_deadline, ticks_diff, ticks_sooner
from common.mqtt import consts as C

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


def _says_online(payload):
    # Sparkplug 3.0's STATE payload: JSON {"online": true|false, "timestamp": ...}.
    # Anything else (2.2's "ONLINE" text, not JSON) is not online.
    import json  # (loaded only with sparkplug_host)

    try:
        state = json.loads(payload)
    except ValueError:
        return False
    return isinstance(state, dict) and state.get("online") is True


def rules_of(settings):
    """The Rules of a BridgeSettings' topic dicts (settings.py checked them)."""
    return [Rule(r["direction"], r["local"], r["remote"], r["qos"], r["retain"]) for r in settings.topics]


class Bridge(Figures):
    def __init__(self, settings, log, entropy):
        """`settings`: a BridgeSettings (settings.py, checked); `log(level,
        text)`; `entropy(n)`: n random bytes."""
        s = settings
        self.settings = s
        self.name = s.name
        self.addresses = s.addresses  # ["host:port", ...] tried in order
        self.rules = rules_of(s)
        self.log = log
        self.entropy = entropy
        self.profile = profile_named(s.profile)
        p = self.profile
        level = p.level or s.protocol
        self.max_qos = p.max_qos
        up = self.up = Client(UpSide(self), client_id_of(s), level, s.clean_session)
        up.keep_alive = s.keepalive
        # A v5 upstream gets No Local instead; some refuse the bit (profiles).
        up.bridge = s.bridge_bit and p.bridge_bit and level == 4
        up.session_expiry = 0 if s.clean_session else C.U32_MAX
        up.max_inflight = s.max_inflight
        up.connect_timeout_ms = int(s.connect_timeout * 1000)
        up.stall_ms = int(s.stall_timeout * 1000)
        up.pids_from_tokens = True  # the local packet id upstream too (theory above)
        up.hold_release = True
        local = self.local = Client(LocalSide(self), s.local_client_id or "siskin-bridge-" + s.name, 5, False)
        local.keep_alive = 0
        local.session_expiry = C.U32_MAX
        local.max_inflight = s.window
        local.receive_max = s.window
        local.hold_complete = True
        self.backoff_min_ms = int(s.backoff_min * 1000)
        self.backoff_max_ms = int(s.backoff_max * 1000)
        self.failures = 0
        self.addr_index = 0
        self.retry_at = 1  # ticks; due at once
        self.close_wanted = None  # why the upstream stream must be closed (the shell reads it)
        self.local_lost = None  # why the local stream ended (the shell reconnects it)
        self.address = ""  # the one connected or being tried
        self.reached = False  # this connection got its CONNACK (the client may have given up since)
        self.local_ready = False  # the local session exists, subscribed (after its first CONNACK)
        self.held = ()  # the local session's filters at local_open (a removed rule's go)
        self.asked = {}  # packet id -> ([(filter, options)], asked again) of a local SUBSCRIBE awaiting its SUBACK
        self.refused = []  # [(filter, options)] the broker refused here (an ACL): resubscribe()
        # Local packet ids acknowledged upstream while the local connection
        # was down: the broker sends them again (DUP), they are acked then.
        # Value: whether a PUBREL that follows is completed here (settled).
        self.owed_local = {}
        # Local QoS 2 ids whose PUBREL is answered here: their upstream flow
        # ended without a PUBREL (dead letter, sent at QoS 0/1), or its
        # PUBCOMP came while the local connection was down.
        self.settled = set()
        self.up_gen = 0
        self.stalled = False
        self.stalled_at = 0  # ticks the stall was seen
        self.renew_at = 0  # ticks: reconnect then with new credentials (a SAS token), 0 never
        self.renewing = False
        self.paused = False  # by the operator (runner.pause): no connection upstream
        self.stopping = False  # the runner stops (shutdown, removal)
        self.state_changed = True  # $SYS is due
        # figures for $SYS
        self.sent = 0  # messages the upstream acknowledged (QoS 0: written)
        self.received = 0  # messages from upstream stored here
        self.dead_lettered = 0
        self.dropped = 0  # QoS 0 ones going up while the upstream was away
        self.faults = 0  # contained by the runner's supervisor
        self.restarts = 0  # of the bridge by the supervisor
        self.departed = 0  # messages of the local session handed on (acknowledged here; QoS 0: taken)
        self.last_error = ""
        self.rate_mark = (0, 0)  # (ticks, sent) of the last rate figure
        self.rate = 0  # messages acknowledged upstream per second, over the last sys interval
        self.pacer = None  # pacing.Pacer: egress paced (publish_rate, bytes_rate or the profile's)
        paced = p.pace(s)
        rates = (paced[0] if s.publish_rate < 0 else s.publish_rate, paced[1] if s.bytes_rate < 0 else s.bytes_rate)
        if rates[0] or rates[1]:
            from common.bridge.pacing import Pacer

            self.pacer = Pacer(rates[0], rates[1], s.window)
        # sparkplug_host: the primary host's STATE topic upstream, None off;
        # whether it said online (since this upstream connection began).
        self.state_topic = "spBv1.0/STATE/" + s.sparkplug_host if s.sparkplug_host else None
        self.host_online = False
        # Held, what the local session handed over before (its start-up
        # connection, a window in flight) stays in `up`'s queue too.
        up.held = self.state_topic is not None
        self.notifier = None  # notify.Notifier: the link's state published (notifications), None off
        if s.notifications:
            from common.bridge.notify import Notifier

            self.notifier = Notifier(s, up)
        # sparkplug_births: the births that went up, sent again first
        # whenever sending starts (births.py); None off.
        self.births = None
        if s.sparkplug_births:
            from common.bridge.births import Births

            self.births = Births(s.sparkplug_births, log, s.name)
            up.preamble = True

    # ------------------------------------------------------------ local side

    def local_wanted(self):
        """Whether the local session should be online: while the upstream is
        connected (and, with sparkplug_host, its primary host online), and
        once at start (to create it and its subscriptions).
        Offline, its messages queue as any offline session's do (bounded by
        the queue budget and queue_full)."""
        if not self.local_ready:
            return True
        # sparkplug_host: held (queued here) while the primary host is not
        # online upstream, drained in order once it is.
        return self.up.state == CONNECTED and (self.state_topic is None or self.host_online)

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

    def local_open(self, ms, held=(), qos2_held=()):
        """The shell connected the in-memory handle: CONNECT. `held`: the
        filters the local session is subscribed to now; `qos2_held`: the
        QoS 2 ids it awaits a PUBREL for (the shell reads both from the
        broker; none when it is new): released before a new message could
        take one of those ids."""
        self.held = held
        for pid in qos2_held:
            self.local.release(pid, ms)
        self.local.connect(ms)

    def local_closed(self):
        """The local connection ended (the shell may open it again at once)."""
        self.local.connection_lost()
        self.local_lost = None

    def _local_failed(self, why):
        self.local_lost = why
        # (At shutdown the broker's DISCONNECT 0x8B is expected: no error.)
        self.log(20 if self.stopping else 40, "bridge %s: local session ended: %s" % (self.name, why))

    def out_topics(self):
        """[(filter, options)] the local session subscribes to: the "out" rules'."""
        topics = []
        for r in self.rules:
            if r.direction & OUT:
                # No Local: what the bridge publishes here (from upstream)
                # does not go back up. Retain As Published keeps the flag;
                # retained messages only when the subscription is new.
                opts = r.qos | C.SUBOPT_NO_LOCAL | C.SUBOPT_RETAIN_AS_PUBLISHED | (C.RETAIN_HANDLING_SEND_IF_NEW << 4)
                topics.append((r.local, opts))
        return topics

    def _local_connected(self, present):
        self.local_ready = True
        topics = self.out_topics()
        self.refused = []
        if topics:
            self.asked[self.local.subscribe(topics)] = (topics, False)
        # A rule removed from the configuration: its subscription goes (what
        # it queued already is dead-lettered as it comes, in _outbound).
        stale = [f for f in self.held if not any(f == t[0] for t in topics)] if present else []
        self.held = ()
        if stale:
            self.local.unsubscribe(stale)
            self.log(30, "bridge %s: unsubscribed %s here: no rule names them any more" % (self.name, ", ".join(stale)))

    def _local_suback(self, pid, reasons):
        """This broker's SUBACK (or UNSUBACK) to the local client: a refused
        filter means nothing matching it goes up, so it is an error (the
        log, last_error, $SYS refused_subscriptions) until resubscribe()."""
        asked = self.asked.pop(pid, None)
        if asked is None:
            return  # (an UNSUBACK)
        topics, again = asked
        for i in range(min(len(topics), len(reasons))):
            code = reasons[i]
            if code >= 0x80:
                self.refused.append(topics[i])
                self.last_error = "local subscription %s refused (0x%02x)" % (topics[i][0], code)
                self.log(
                    40,
                    "bridge %s: this broker refused its subscription %s (0x%02x): nothing matching it goes "
                    "up; a deny rule of user bridge:%s in the ACL? (docs/bridge.md; SIGHUP asks again)"
                    % (self.name, topics[i][0], code, self.name),
                )
            elif again:
                self.log(20, "bridge %s: subscribed %s here again" % (self.name, topics[i][0]))
        self._state()

    def resubscribe(self, held):
        """After new ACL rules: ask again for the "out" filters the local
        session lacks (`held`: the filters it has; refused before, or removed
        by the broker's re-check of the rules: security_files.set_security). True if
        asked. Offline, the local session comes online once to ask."""
        missing = [t for t in self.out_topics() if t[0] not in held]
        if not missing:
            return False
        self.refused = []
        if self.local.state == CONNECTED:
            self.asked[self.local.subscribe(missing)] = (missing, True)
        else:
            self.local_ready = False  # (local_wanted: online once, subscribing every rule)
        self._state()
        return True

    def _suback(self, side, reasons):
        for code in reasons:
            if code >= 0x80:
                self.last_error = "%s subscription refused (0x%02x)" % (side, code)
                self.log(30, "bridge %s: %s" % (self.name, self.last_error))

    def _outbound(self, pkt):
        """A message from this broker to send up."""
        pid = pkt.packet_id
        if pkt.qos:
            owed = self.owed_local.pop(pid, None)
            if owed is not None:  # acknowledged upstream while the local connection was down
                self._ack_local(pid, owed)
                return
            state = self.up.holds(pid)
            if state == RECEIVED:  # its PUBREC came (the local one was lost with the connection)
                self._ack_local(pid, False)
                return
            if state >= 0:
                return  # sent again after a reconnect: the copy held goes up (its ack acks both)
        if self.pacer is not None:  # (pacing.py: it may have to wait its turn)
            verdict = self.pacer.defer(pkt, self.local.now, self.up.state == CONNECTED)
            if verdict:
                if verdict == 2:  # (pacing.DROP: a QoS 0 message over the window)
                    self.departed += 1
                    self.dropped += 1
                return
        self._send_up(pkt)

    def _send_up(self, pkt):
        """Send a message from this broker up (mapped, checked, dead-lettered)."""
        pid = pkt.packet_id
        topic = pkt.topic
        remote = None
        rule = None
        for r in self.rules:
            remote = r.out_topic(topic)
            if remote is not None:
                rule = r
                break
        if rule is None:  # queued for a rule since removed (its subscription went at start)
            self._refuse(pkt, topic, "no rule sends it up any more")
            return
        qos = pkt.qos
        if qos > rule.qos:
            qos = rule.qos
        if qos > self.max_qos:
            qos = self.max_qos
        retain = pkt.retain and rule.retain and self.profile.retain
        why = self.profile.refusal(remote, pkt.payload, self.up)
        if why is not None:
            self._refuse(pkt, remote, why)
            return
        props = None
        if pkt.props:
            props = [p for p in pkt.props if p[0] not in _HOP_PROPS]
        births = self.births
        if not pkt.qos:
            self.departed += 1
            if self.up.publish(remote, pkt.payload, 0, retain, props):
                self.sent += 1
                if births is not None:
                    births.went_up(topic, remote, pkt.payload, retain, props)
            else:
                self.dropped += 1  # QoS 0 while the upstream is away
            return
        if births is not None:  # (a QoS 1/2 birth: when handed to the upstream client)
            births.went_up(topic, remote, pkt.payload, retain, props)
        # The token is the local packet id, and its upstream packet id too:
        # the session keeps it across local connections and restarts
        # [MQTT-4.4.0-1], so an ack after a reconnect still names the same
        # message, here and upstream.
        m = self.up.publish(remote, pkt.payload, qos, retain, props, pid)
        m.dup = pkt.dup  # sent before, maybe by us before a restart
        self.up.pump(self.local.now)

    def _refuse(self, pkt, topic, why):
        """Dead-letter a local message (acknowledged here: it never goes up)."""
        self._dead_letter(topic, why)
        if pkt.qos:
            self._ack_local(pkt.packet_id, True)
        else:
            self.departed += 1

    def _ack_local(self, pid, settle):
        """Ack local message `pid`; `settle`: a PUBREL that follows is completed
        here (its upstream flow has no PUBREL). False when the local connection
        is down (the ack is owed)."""
        local = self.local
        if settle and local.incoming.get(pid) == 2:
            self.settled.add(pid)
        if local.ack(pid):
            self.departed += 1
            return True
        self.owed_local[pid] = settle
        return False

    def _local_release(self, pid):
        """The local broker's PUBREL (its store has the PUBREC): up it goes."""
        up = self.up
        if pid in self.settled or self.max_qos < 2 or up.server_max_qos < 2:
            # Nothing to release upstream (and NATS would take a PUBREL for
            # the QoS 2 it does not speak as a protocol error).
            self.settled.discard(pid)
            self.local.complete(pid)
            return
        up.release(pid, self.local.now, pid)

    def _delivered_up(self, token, reason):
        """The upstream acknowledged an outbound message (or refused it for good)."""
        if reason >= 0x80:
            self._dead_letter("(local id %d)" % token, "the upstream refused it (reason 0x%02x)" % reason)
        else:
            self.sent += 1
        # A QoS 2 flow upstream goes on with PUBREL: the local one with it.
        self._ack_local(token, self.up.holds(token) != RECEIVED)

    def _completed_up(self, token):
        """The upstream's PUBCOMP: the local one."""
        if self.local.state == CONNECTED:
            self.local.complete(token)
        else:
            self.settled.add(token)  # its PUBREL comes again with the local connection

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
        if self.up.state != DISCONNECTED or self.close_wanted is not None or self.paused:
            return None
        if ticks_diff(ms, self.retry_at) < 0:
            return None
        self.address = self.addresses[self.addr_index]
        return self.address

    def up_open(self, ms, wall=0):
        """The stream to `address` is open: CONNECT. `wall`: the wall clock
        (s since 1970; what a SAS token's expiry is counted in)."""
        self.up_gen = (self.up_gen + 1) & 0x3FFF
        self.close_wanted = None
        up = self.up
        host = self.address[: self.address.rfind(":")].strip("[]")
        up.username, up.password, lasts = self.profile.credentials(self.settings, host, wall)
        # Renewed before it expires: a new connection at four fifths of its life.
        self.renew_at = ticks_deadline(ms, lasts * 800) if lasts else 0
        up.connect(ms)
        self._state()

    def up_failed(self, why, ms):
        """A connection attempt failed, or the stream ended: retry later."""
        was = self.reached
        renewing = self.renewing
        self.reached = False
        self.renewing = False
        self.up.connection_lost()
        self.close_wanted = None
        self.last_error = why
        if self.state_topic is not None:
            self.host_online = False  # until the next connection's STATE says so
            self.up.held = True
        if was:
            self.failures = 0
            # (a renewal is routine: not a warning)
            level, word = (20, "ended") if renewing else (30, "lost")
            self.log(level, "bridge %s: connection to %s %s: %s" % (self.name, self.address, word, why))
        else:
            self.log(30, "bridge %s: cannot connect to %s: %s" % (self.name, self.address, why))
            self.failures += 1
            self.addr_index = (self.addr_index + 1) % len(self.addresses)
        self.back_off(ms)

    def back_off(self, ms):
        """The next attempt after the back-off for the failures so far."""
        delay = backoff_ms(self.backoff_min_ms, self.backoff_max_ms, self.failures, self.entropy)
        self.retry_at = ticks_deadline(ms, delay)
        self._state()

    def _up_connected(self, present):
        if self.pacer is not None:  # what its client resends at once counts (pacing.py)
            self.pacer.charge(len(self.up.inflight), sum([len(m.payload) for m in self.up.inflight]))
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
                topics.append((r.remote, opts))
        if self.state_topic is not None:
            # The primary host's STATE (retained: it comes at once); what goes
            # up waits for it (local_wanted).
            topics.append((self.state_topic, 1 | C.SUBOPT_NO_LOCAL if v5 else 1))
        if topics:
            self.up.subscribe(topics)
        if self.notifier is not None:
            self.notifier.tell_upstream(self.up, True)
        self._state()

    def _host_state(self, payload):
        """The primary host's STATE came (sparkplug_host): online or not."""
        online = _says_online(payload)
        if online != self.host_online:
            self.host_online = online
            self.up.held = not online
            if online:
                self._births_first(False)
                self.up.pump()
            why = "online: what waited goes up" if online else "offline: what goes up waits here"
            self.log(20, "bridge %s: primary host %s %s" % (self.name, self.settings.sparkplug_host, why))
            self._state()

    def _births_first(self, connack):
        """Sending starts on this upstream connection (its CONNACK, before
        anything is resent; or the primary host came online): the births
        kept go up first. Held at CONNACK, they wait for the host unless
        something in flight is resent now."""
        births = self.births
        if births is None or (connack and self.up.held and not self.up.inflight):
            return
        n = births.replay(self.up)
        if n:
            self.log(20, "bridge %s: %d birth(s) sent again before anything else" % (self.name, n))

    def _up_refused(self, reason):
        why = CONNACK_WHY.get(reason, "refused")
        self.close_wanted = "CONNACK 0x%02x (%s)" % (reason, why)

    def _inbound(self, pkt):
        """A message from upstream to store here."""
        topic = pkt.topic
        local = None
        rule = None
        for r in self.rules:
            local = r.in_topic(topic)
            if local is not None:
                rule = r
                break
        if topic == self.state_topic:
            self._host_state(pkt.payload)
            if rule is None:  # the bridge's own subscription only: taken here
                if pkt.qos:
                    self.up.ack(pkt.packet_id)
                return
        if rule is None:  # an upstream subscription of a rule since removed (kept by a resumed session)
            self._dead_letter(topic, "no rule brings it down any more (unsubscribe it upstream)")
            self.up.ack(pkt.packet_id)
            return
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
        self.local.pump(self.up.now)

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
        up = self.up
        due = up.tick(ms)
        due = ticks_sooner(due, self.local.tick(ms))
        if self.pacer is not None and self.pacer.waiting and up.state == CONNECTED:
            due = ticks_sooner(due, self.pacer.drain(ms, self._send_up))
        if up.state == DISCONNECTED and self.close_wanted is None and not self.paused:
            due = ticks_sooner(due, self.retry_at)
        if self.renew_at and up.state == CONNECTED:
            if ticks_diff(ms, self.renew_at) >= 0:
                self.renew_at = 0
                self.renewing = True
                self.close_wanted = "its credentials are renewed (a new SAS token)"
            else:
                due = ticks_sooner(due, self.renew_at)
        stalled = up.stalled(ms)
        if stalled != self.stalled:
            self.stalled = stalled
            if stalled:
                self.stalled_at = ms
                self.log(
                    30,
                    "bridge %s: %s stalled: no answer for %d s (%d message(s) in flight); dropped after %d s"
                    % (self.name, self.address, ticks_diff(ms, up.waited_since) // 1000, len(up.inflight),
                       up.ka_ms // 1000),
                )  # fmt: skip
            elif up.state == CONNECTED:
                self.log(
                    20,
                    "bridge %s: %s answers again (stalled for %d s)"
                    % (self.name, self.address, ticks_diff(ms, self.stalled_at) // 1000),
                )
            self._state()
        return due
