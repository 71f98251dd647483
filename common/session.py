# Per-client session state, as plain data.
#
# A Session outlives its network connection when the client asked for a
# persistent session (3.1.1 clean session 0, v5 Session Expiry > 0). It holds
# only plain values and references to pooled Messages, so the store can
# persist it (the persistence layer walks these fields) and a restore can
# rebuild it; the live Connection it is attached to is a separate object.
#
# Outbound delivery state:
#   queue     Ring of (msg, qos, retain, sub_ids, group, seq): routed, not
#             yet sent; group is the SharedGroup it was picked for, or None;
#             seq numbers its record in the store (0 = not stored)
#   inflight  list of InflightEntry in send order: sent, not yet acknowledged
# Redelivery on reconnect resends `inflight` in order (DUP), then the queue,
# so a message routed while the client was away waits behind them
# [MQTT-4.4.0-1] [MQTT-4.6.0-1].

from common.pools import Ring

# InflightEntry.state
AWAIT_ACK = 0  # PUBLISH sent: waiting for PUBACK (QoS 1) or PUBREC (QoS 2)
AWAIT_COMP = 1  # PUBREL sent: waiting for PUBCOMP

# State of a delivery record in the store (common/persist.py).
QUEUED = 0  # routed, not sent
SENT = 1  # PUBLISH sent with its packet id, awaiting PUBACK/PUBREC
RELEASED = 2  # PUBREL sent, awaiting PUBCOMP (the message is gone)


class InflightEntry:
    def __init__(self, packet_id, msg, qos, retain, sub_ids):
        self.packet_id = packet_id
        self.msg = msg  # None once PUBREC released it
        self.qos = qos
        self.retain = retain
        self.sub_ids = sub_ids
        self.state = AWAIT_ACK
        self.group = None  # SharedGroup it was picked for, or None
        self.seq = 0  # its delivery record in the store, 0 = not stored


class Subscription:
    """One filter of one session. `group` is the share name or None."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.session = None
        self.key = ""  # the filter as subscribed, with any $share/ prefix
        self.filter = ""  # the filter matched against topics
        self.group = None
        self.qos = 0
        self.no_local = False
        self.retain_as_published = False
        self.retain_handling = 0
        self.sub_id = 0  # v5 Subscription Identifier, 0 = none


class Session:
    def __init__(self):
        self.queue = None
        self.reset()

    def reset(self):
        self.client_id = ""
        self.generation = 0
        self.stored = False  # persisted: changes are written to the store
        self.level = 4
        self.expiry_interval = 0  # s the session outlives its connection
        self.expires_at = 0  # absolute time (s) while orphaned, 0 = never
        self.conn = None  # live Connection or None while orphaned
        self.subs = {}  # key -> Subscription (order never used for output)
        self.inflight = []
        self.qos2_in = set()  # inbound QoS 2 packet ids awaiting PUBREL
        self.next_packet_id = 1
        self.queued_bytes = 0
        # Will, taken from CONNECT; published on abnormal disconnect.
        self.will = None  # Message or None (held: refs counted)
        self.will_delay = 0
        self.will_expiry = 0  # the will's v5 Message Expiry Interval (s)
        self.will_at = 0  # absolute time (s) a delayed will is due, 0 = none
        # Scratch used by routing to fold several matching subscriptions of
        # this session into one delivery (no per-message dict).
        self.route_stamp = 0
        self.route_qos = 0
        self.route_retain = False
        self.route_ids = None
        if self.queue is not None:
            self.queue.head = 0
            self.queue.count = 0

    def setup_queue(self, cap, initial):
        if self.queue is None or self.queue.cap != cap:
            self.queue = Ring(cap, initial)

    def allocate_packet_id(self):
        """A packet id not used by an unacknowledged outbound message."""
        pid = self.next_packet_id
        inflight = self.inflight
        for _ in range(65535):
            busy = False
            for entry in inflight:
                if entry.packet_id == pid:
                    busy = True
                    break
            nxt = pid + 1 if pid < 65535 else 1
            if not busy:
                self.next_packet_id = nxt
                return pid
            pid = nxt
        return 0

    def find_inflight(self, packet_id):
        inflight = self.inflight
        for i in range(len(inflight)):
            if inflight[i].packet_id == packet_id:
                return i
        return -1


class SharedGroup:
    """The members of one `$share/{group}/{filter}`: one of them gets each message.

    It sits in the subscription trie in place of its members; pick() chooses
    the next member round-robin, preferring one that is connected and has
    room in its inflight window, so load follows acknowledgements.
    """

    def __init__(self, group, flt):
        self.group = group
        self.filter = flt
        self.members = []  # Subscriptions, in joining order
        self.next = 0

    def pick(self, broker, now, leaving=None):
        """The member to get the next message; None if there is none but `leaving`."""
        members = self.members
        n = len(members)
        start = self.next % n if n else 0
        fallback = None
        for k in range(n):
            sub = members[(start + k) % n]
            session = sub.session
            if session is leaving:
                continue
            conn = session.conn
            if fallback is None:
                fallback = sub
            if conn is None:
                continue
            cap = broker.settings.max_inflight
            if conn.receive_maximum < cap:
                cap = conn.receive_maximum
            if len(session.inflight) < cap and not session.queue.count:
                self.next = start + k + 1
                return sub
        self.next = start + 1
        return fallback
