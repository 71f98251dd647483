# Per-client session state, and the Sessions part of the broker.
#
# A Session outlives its network connection when the client asked for a
# persistent session (3.1.1 clean session 0, v5 Session Expiry > 0). It holds
# only plain values and references to pooled Messages, so the store can
# persist it (the persistence listener walks these fields) and a restore can
# rebuild it; the live Connection it is attached to is a separate object.
#
# Outbound delivery state (common/broker/delivery.py), changed only by
# common/broker/outbox.py:
#   queue     Ring of QUEUED Deliveries: routed, not yet sent, in order
#   inflight  list of SENT / RELEASED Deliveries in send order: not yet
#             acknowledged
# Redelivery on reconnect resends `inflight` in order (DUP), then the queue,
# so a message routed while the client was away waits behind them
# [MQTT-4.4.0-1] [MQTT-4.6.0-1].

from common.broker.pools import Ring, SlotPool

NEVER = 0xFFFFFFFF  # v5 Session Expiry Interval meaning "does not expire"
OWNER_UNKNOWN = False  # Session.user of a session restored without its owner: the first user to resume it owns it


class Subscription:
    """One filter of one session.

    `share` is None for a normal subscription; for a `$share/` one it is the
    tuple (SharedGroup, [sub_id] or None) every delivery picked through it
    carries (made once here, so routing allocates nothing for it).
    """

    def __init__(self):
        self.reset()

    def reset(self):
        self.is_group = False  # a trie entry that is not a SharedGroup
        self.session = None
        self.key = ""  # the filter as subscribed, with any $share/ prefix
        self.filter = ""  # the filter matched against topics
        self.share = None
        self.qos = 0
        self.no_local = False
        self.retain_as_published = False
        self.retain_handling = 0
        self.sub_id = 0  # v5 Subscription Identifier, 0 = none

    def set_options(self, qos, no_local, retain_as_published, retain_handling, sub_id):
        self.qos = qos
        self.no_local = no_local
        self.retain_as_published = retain_as_published
        self.retain_handling = retain_handling
        self.sub_id = sub_id
        if self.share is not None:
            self.share = (self.share[0], [sub_id] if sub_id else None)


class Session:
    # (Slots: see Connection.)
    __slots__ = (
        "client_id",
        "conn",
        "drop_log_at",
        "dropped",
        "expires_at",
        "expiry_interval",
        "generation",
        "held_back",
        "inflight",
        "level",
        "listener",
        "next_packet_id",
        "qos2_in",
        "queue",
        "queued_bytes",
        "route_fold",
        "route_ids",
        "route_stamp",
        "stored",
        "subs",
        "user",
        "will",
        "will_at",
    )

    def __init__(self):
        self.queue = None
        self.reset()

    def reset(self):
        self.client_id = ""
        # The user who made it (None: an anonymous client); only that user's
        # clients may take it over or resume it (refusal.owner_refusal).
        # OWNER_UNKNOWN: restored from a record that did not say.
        self.user = None
        self.generation = 0
        # The shell's key of the listener its client came in on last (None: the
        # broker's security applies; login.security_of): its will is judged by
        # that listener's rules. Not persisted: a restored session has None.
        self.listener = None
        self.stored = False  # persisted: changes are written to the store
        self.level = 4
        self.expiry_interval = 0  # s the session outlives its connection
        self.expires_at = 0  # absolute time (s) while orphaned, 0 = never
        self.conn = None  # live Connection or None while orphaned
        self.subs = {}  # key -> Subscription (order never used for output)
        self.inflight = []
        # Inbound QoS 2 packet ids awaiting PUBREL: a set made at the first
        # one (an empty set costs 216 B per client on the host, more than a
        # connection object), () until then.
        self.qos2_in = ()
        self.next_packet_id = 1
        self.queued_bytes = 0
        self.dropped = 0  # messages dropped for this session (queue full)
        # The last `held_back` of `inflight` are not yet resent on this
        # connection: a resumed session resends no more than its window.
        self.held_back = 0
        self.drop_log_at = 0  # s; no warning about its drops before then
        # Will, taken from CONNECT; published on abnormal disconnect.
        # (held Message, Will Delay Interval s, its v5 Message Expiry
        # Interval s) or None: one tuple, made at CONNECT, rather than three
        # attributes on every session (a board's RAM per session).
        self.will = None
        self.will_at = 0  # absolute time (s) a delayed will is due, 0 = none
        # Scratch used by routing to fold several matching subscriptions of
        # this session into one delivery (no per-message dict).
        self.route_stamp = 0
        self.route_fold = 0  # the highest granted QoS | PUBLISH_RETAIN (route.py)
        self.route_ids = None
        if self.queue is not None:
            self.queue.head = 0
            self.queue.count = 0

    def setup_queue(self, cap, initial):
        if self.queue is None or self.queue.cap != cap:
            self.queue = Ring(cap, initial)

    def drop_will(self, messages):
        """Discard its will (a normal DISCONNECT, a new connection, rules
        that no longer let its owner publish it): the held message goes back
        to `messages` (the MessagePool)."""
        if self.will is not None:
            messages.drop(self.will[0])
            self.will = None
        self.will_at = 0

    def restored(self, level, expiry_interval, expires_at, next_packet_id, qos2_in, user):
        """Its state as the store kept it (common/store/restore.py)."""
        self.level = level
        self.expiry_interval = expiry_interval
        self.expires_at = expires_at
        self.next_packet_id = next_packet_id
        self.qos2_in = set(qos2_in) if qos2_in else ()
        self.user = user
        self.stored = True


class SharedGroup:
    """The members of one `$share/{name}/{filter}`: one of them gets each message.

    It sits in the subscription trie in place of its members; pick() chooses
    the next member round-robin, preferring one that is connected and has
    room in its inflight window, so load follows acknowledgements.
    """

    def __init__(self, name, flt):
        self.is_group = True  # a trie entry standing for its members
        self.name = name  # the share name
        self.filter = flt
        self.members = []  # Subscriptions, in joining order
        self.next = 0

    def key(self):
        """The group's name, "{name}/{filter}", in the routing part and the store."""
        return self.name + "/" + self.filter

    def pick(self, max_inflight, leaving=None):
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
            cap = max_inflight
            if conn.receive_maximum < cap:
                cap = conn.receive_maximum
            if len(session.inflight) < cap and not session.queue.count:
                self.next = start + k + 1
                return sub
        self.next = start + 1
        return fallback


class Sessions:
    """The broker's sessions by client id, their pool and their generations.

    A generation number is given to each new session, strictly increasing
    (restored sessions keep theirs): a delivery routed under an earlier
    generation never reaches a clean-start successor.
    """

    def __init__(self, settings):
        self.settings = settings
        self.by_client_id = {}
        self.pool = SlotPool(Session, settings.max_sessions, settings.prealloc)
        self.sub_pool = SlotPool(Subscription, settings.max_subscriptions, settings.prealloc)
        self.generation = 0

    def find(self, client_id):
        return self.by_client_id.get(client_id)

    def count(self):
        return len(self.by_client_id)

    def create(self, client_id, generation=0):
        """A new empty session registered under `client_id`; None if the pool is full.

        `generation` 0 takes the next one; a restored session passes its own.
        """
        session = self.pool.alloc()
        if session is None:
            return None
        if generation:
            if generation > self.generation:
                self.generation = generation
        else:
            self.generation += 1
            generation = self.generation
        s = self.settings
        session.client_id = client_id
        session.generation = generation
        # Without prealloc the queue's slots come with its first message (an
        # idle client never has one).
        session.setup_queue(s.max_queued_messages, s.max_queued_messages if s.prealloc else 0)
        self.by_client_id[client_id] = session
        return session

    def release(self, session):
        """Unregister an ended session and return it to the pool."""
        if self.by_client_id.get(session.client_id) is session:
            del self.by_client_id[session.client_id]
        self.pool.release(session)
