# Routing one message (the act; routing_table.py holds the table it reads):
# who gets it, the subscriptions it matches, one delivery per session.
#
# Theory of operation. route() looks up the subscriptions whose filter
# matches the topic (in the topic's TopicCache entry while the trie has not
# changed, else in the trie), refuses a client's QoS 1/2 message whole when
# a subscriber's queue could not take it (queue_full = refuse), stores the
# message once as a pooled Message (when it is retained or someone
# subscribes), folds several subscriptions of one session into one delivery
# at the highest granted QoS [MQTT-3.3.5-1] carrying all their Subscription
# Identifiers, and hands each session its copy (outbox.deliver). Its answer
# is one small int: the reason code for the publisher in the low byte and
# the outcome bits above it (BACKLOG, FULL_SESSION, FULL_TOTAL).
#
# route_frame() is the 3.1.1 QoS 0 path: a whole PUBLISH, not retained,
# goes to 3.1.1 subscribers as it came (no Message, no encoding, no payload
# copy: nothing allocated); its payload is copied out of the frame and
# routed as above only when a subscriber needs more (v5, a shared group,
# offline).
#
# TopicCache (at the end) keeps the topic names of the PUBLISHes seen lately
# with the subscriptions each one matches: a warm topic costs a hash and a
# compare over its bytes, no new str (MicroPython allocates one per decode
# otherwise) and no trie walk. The codec asks it for a topic name while
# decoding a PUBLISH into the broker's reused Publish
# (packets.decode_publish_into: find, then add for a name it did not know,
# after checking it); route asks it for the matches of the topic it routes.
# The entry of the name decoded last is `entry`; route uses it only for that
# very str, so an entry left from an earlier PUBLISH (a $SYS message, a
# will, an aliased topic) is never taken for another topic. (Here rather
# than in a module of its own: a module costs a board 200 B of heap.)

from common.broker.delivery import SHARED
from common.broker.outbox import BACKLOG, FULL_SESSION, deliver, full_subscriber, log_total, no_room
from common.compat import const
from common.mqtt.codec import take_bytes

# The wire constants this module uses, as private const()s with the values
# of common/mqtt/consts.py's names (tests/core/test_const_mirrors.py checks
# each): MicroPython folds them into the bytecode, where C.NAME takes a
# global and an attribute load at every use (about 1 KB of a board's heap
# over the per-packet modules, docs/boards.md).
_LEVEL_5 = const(5)
_PUBLISH_QOS_MASK = const(0x03)
_PUBLISH_RETAIN = const(0x04)
_RC_NO_MATCHING_SUBSCRIBERS = const(0x10)
_RC_QUOTA_EXCEEDED = const(0x97)
_RC_SUCCESS = const(0x00)

# Outcome bits above the reason code (BACKLOG: outbox.py): refused whole,
# a subscriber's own queue full, or all queues together (queue_full =
# refuse); a Quota exceeded without either: the message pool was full.
_FULL_SESSION_HIT = const(0x200)
_FULL_TOTAL_HIT = const(0x400)
REASON_MASK = const(0xFF)

_FOLD_RETAIN = const(4)  # in Session.route_fold, above the QoS bits (PUBLISH_RETAIN)


def route(broker, origin, pub, payload, expiry_interval, now):
    """Deliver a message to every matching subscription; a v5 reason code
    and outcome bits (above).

    `pub`: what the message is, its `topic`, `qos`, `retain` and forwarded
    `props` (a Publish as decoded, or a Message: a will); `payload` its
    payload. `origin` is the publisher's client id (No Local), None for
    the broker's own.
    """
    routing = broker.routing
    matches = broker.topics.matches(pub.topic, routing.trie, routing.matches)
    outcome = _route(broker, origin, pub, payload, expiry_interval, now, matches)
    _done(routing, matches)
    return outcome


def _route(broker, origin, pub, payload, expiry_interval, now, matches):
    routing = broker.routing
    topic = pub.topic
    qos = pub.qos
    retain = pub.retain
    if matches and qos and origin is not None and broker.settings.queue_full == "refuse":
        full = full_subscriber(broker, matches, origin, qos, len(topic) + len(payload))
        if full is not None:
            # Refused whole, before it is kept anywhere: the publisher is
            # told (v5 0x97) or not acknowledged (3.1.1), so nothing it
            # was told is accepted goes missing.
            if no_room(broker, full, len(topic) + len(payload)) == FULL_SESSION:
                broker.stats.refused_queue_full += 1
                return _RC_QUOTA_EXCEEDED | _FULL_SESSION_HIT
            broker.stats.refused_queue_total += 1
            log_total(broker, origin, now)
            return _RC_QUOTA_EXCEEDED | _FULL_TOTAL_HIT
    messages = routing.messages
    expiry = now + expiry_interval if expiry_interval else 0
    msg = None
    if retain:
        msg = routing.retained.store(topic, payload, qos, pub.props, expiry)
    if not matches:
        return _RC_NO_MATCHING_SUBSCRIBERS
    if msg is None:
        msg = messages.new(topic, payload, qos, retain, pub.props, expiry)
        if msg is None:
            broker.stats.dropped_no_slab += 1
            return _RC_QUOTA_EXCEEDED
    messages.hold(msg)  # keep it alive while delivering
    outcome = _RC_SUCCESS
    stamp = routing.next_stamp()
    for entry in matches:
        if entry.is_group:
            # A SharedGroup: one member gets its own copy, apart from the
            # member's other subscriptions, so it can be handed to another
            # member if this one leaves (v5 4.8.2).
            sub = entry.pick(broker.settings.max_inflight)
            if sub is not None:
                bits = sub.qos if sub.qos < qos else qos
                if retain and sub.retain_as_published:
                    bits |= _PUBLISH_RETAIN
                if deliver(broker, sub.session, msg, bits | SHARED, sub.share, now) and sub.session.client_id != origin:
                    outcome |= BACKLOG
            continue
        sess = entry.session
        if entry.no_local and sess.client_id == origin:
            continue  # [MQTT-3.8.3-3]
        granted = entry.qos if entry.qos < qos else qos  # [MQTT-3.8.4-6]
        keep_retain = retain and entry.retain_as_published  # [MQTT-3.3.1-12]
        # route_fold: the highest granted QoS, | _FOLD_RETAIN if any of the
        # session's matching subscriptions keeps the retain flag.
        if sess.route_stamp != stamp:
            sess.route_stamp = stamp
            sess.route_fold = granted | _FOLD_RETAIN if keep_retain else granted
            sess.route_ids = None
        else:
            fold = sess.route_fold
            if granted > fold & _PUBLISH_QOS_MASK:
                fold = (fold & _FOLD_RETAIN) | granted
            if keep_retain:
                fold |= _FOLD_RETAIN
            sess.route_fold = fold
        if entry.sub_id:
            if sess.route_ids is None:
                sess.route_ids = [entry.sub_id]
            else:
                sess.route_ids.append(entry.sub_id)
    # Each session folded above gets one delivery, in the order of its first
    # match (a second pass rather than a list of them: nothing to clear).
    for entry in matches:
        if entry.is_group:
            continue
        sess = entry.session
        if sess.route_stamp == stamp:
            sess.route_stamp = 0  # delivered
            # (route_fold is QoS | PUBLISH_RETAIN: a delivery's bits)
            if deliver(broker, sess, msg, sess.route_fold, sess.route_ids, now) and sess.client_id != origin:
                # An online subscriber falls behind: slow the publisher down
                # before its queue overflows; not a publisher subscribed to
                # itself: throttled, it would stop reading the very acks
                # that drain its queue.
                outcome |= BACKLOG
    if msg.refs > 1:
        msg.wire4 = msg.wire5 = None  # kept (queued, in flight, retained): not with copies of its bytes
    messages.drop(msg)
    return outcome


def route_frame(broker, origin, pub, frame, at, now):
    """route() for a whole QoS 0 3.1.1 PUBLISH `frame` not retained (`pub`
    decoded from it, its payload at frame[at:]): the frame goes as it is
    to the sessions matched if every one is a 3.1.1 client online and none
    is a shared group; else its payload is copied out and routed."""
    routing = broker.routing
    topic = pub.topic
    matches = broker.topics.matches(topic, routing.trie, routing.matches)
    for entry in matches:
        if entry.is_group:
            break
        conn = entry.session.conn
        if conn is None or conn.level == _LEVEL_5 or (conn.extras is not None and conn.extras.mount is not None):
            break  # (a mount point's client gets the topic without its prefix: egress.py)
    else:
        _forward(broker, origin, topic, matches, frame, len(frame) - at)
        _done(routing, matches)
        return _RC_SUCCESS if matches else _RC_NO_MATCHING_SUBSCRIBERS
    outcome = _route(broker, origin, pub, take_bytes(frame, at, len(frame)), 0, now, matches)
    _done(routing, matches)
    return outcome


def _forward(broker, origin, topic, matches, frame, size):
    # Each copy is the frame's bytes appended to the client's output, as it
    # came: no encoding (so here, not in egress.py).
    stamp = broker.routing.next_stamp()  # several filters of one session: one copy [MQTT-3.3.5-1]
    bound = broker.settings.max_out_buffer
    st = broker.stats
    by_client = st.by_client
    for entry in matches:
        sess = entry.session
        if sess.route_stamp == stamp or (entry.no_local and sess.client_id == origin):
            continue  # [MQTT-3.8.3-3]
        sess.route_stamp = stamp
        conn = sess.conn
        if conn.paused and conn.out_bytes >= bound:
            st.dropped_qos0 += 1
        elif conn.acl is not None and not conn.acl.can_read(topic):
            st.denied_delivery += 1  # as egress.send_publish
        else:
            broker.output.write(conn, frame, True)  # (QoS 0: before the store's sync)
            st.messages_sent += 1
            st.publish_bytes_sent += size  # (the payload's)
            st.sent_by_qos[0] += 1
            if by_client is not None:
                by_client.sent[conn.cid] += 1


def _done(routing, matches):
    # The scratch list is emptied for the next message; a cached one is kept.
    if matches is routing.matches:
        del matches[:]


def refusal_text(broker, origin, pub, outcome, size):
    """The publisher's reason string for a Quota exceeded of route()'s
    (`size`: the message's topic and payload). The subscriber whose queue
    was full is looked up again: refusals are rare, and route() keeps no
    side results."""
    s = broker.settings
    if outcome & _FULL_TOTAL_HIT:
        return "all queues full (max_queued_total_bytes %d)" % s.max_queued_total_bytes
    if outcome & _FULL_SESSION_HIT:
        routing = broker.routing
        matches = broker.topics.matches(pub.topic, routing.trie, routing.matches)
        full = full_subscriber(broker, matches, origin, pub.qos, size)
        _done(routing, matches)
        return "queue of subscriber %s full (max_queued_messages %d, max_queued_bytes %d)" % (
            None if full is None else full.client_id,
            s.max_queued_messages,
            s.max_queued_bytes,
        )
    return "message store full (max_messages %d)" % s.max_messages


# ------------------------------------------------------------ TopicCache

# An entry is a list of four fields (a list of four costs less than an
# object of four attributes on MicroPython):
_NAME = const(0)  # the topic name's bytes as received
_TOPIC = const(1)  # the str decoded and checked when it was first seen
_MATCHES = const(2)  # the trie's match list for it (never modified), or None
_GENERATION = const(3)  # the trie generation that list holds for


class TopicCache:
    """`capacity` slots, one entry each, chosen by a hash of the name's bytes
    (a newcomer replaces only the entry in its slot); a topic gets an entry
    at its second PUBLISH in a row for its slot, so that names seen once (a
    retained message per device) take no room."""

    def __init__(self, capacity):
        self.slots = [None] * capacity  # hash % capacity -> entry
        self.seen = [-1] * capacity  # the hash last missed in each slot
        self.hash = 0  # the hash find() computed last (add() files under it)
        self.entry = None  # the entry of the topic decoded last, or None

    def find(self, buf, a, b):
        """The topic str of the name buf[a:b] if it is cached, else None."""
        h = b - a
        for k in range(a, b):
            h = (h * 31 + buf[k]) & 0x3FFFFF  # small ints on every port
        self.hash = h
        self.entry = None
        entry = self.slots[h % len(self.slots)]
        if entry is None:
            return None
        key = entry[_NAME]
        if len(key) != b - a:
            return None
        for c in key:
            if c != buf[a]:
                return None
            a += 1
        self.entry = entry
        return entry[_TOPIC]

    def add(self, buf, a, b, topic):
        """Cache the checked topic name buf[a:b] as `topic` (after find()
        missed it), unless this is its first miss in its slot."""
        h = self.hash
        i = h % len(self.slots)
        if self.seen[i] != h:
            self.seen[i] = h
            return
        entry = [take_bytes(buf, a, b), topic, None, 0]
        self.slots[i] = entry
        self.entry = entry

    def matches(self, topic, trie, scratch):
        """The subscriptions (and shared groups) whose filter matches `topic`:
        the list kept in its entry while the trie has not changed since
        (never modified by the caller), else the trie's answer, kept there;
        for a topic not cached, the trie's answer in `scratch`."""
        entry = self.entry
        if entry is None or entry[_TOPIC] is not topic:
            trie.match(topic, scratch)
            return scratch
        if entry[_GENERATION] != trie.generation:
            found = []
            trie.match(topic, found)
            entry[_MATCHES] = found
            entry[_GENERATION] = trie.generation
        return entry[_MATCHES]
