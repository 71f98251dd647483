# PUBLISH in both directions: inbound QoS 0/1/2, routing, delivery, acks.
#
# Theory of operation. An inbound PUBLISH arrives decoded and its topic name
# checked by the codec (UTF-8, no wildcard, not empty); here come the
# broker's own checks (alias, limits, QoS, retain), then route() stores it
# once as a pooled Message (when it is retained or someone subscribes),
# finds the matching subscriptions in the trie, folds several subscriptions
# of one session into one delivery at the highest granted QoS
# [MQTT-3.3.5-1] carrying all their Subscription Identifiers, and hands each
# session a Delivery (common/broker/delivery.py).
#
# Delivery to a session: QoS 0 goes straight to the connection's output (or
# is dropped and counted for a slow reader over max_out_buffer); QoS 1/2 goes
# out while the session's inflight window (min of max_inflight and the
# client's Receive Maximum) has room and nothing older waits in its queue,
# otherwise it waits in the queue in order. Acks free window slots and
# pump() moves queued deliveries out in order [MQTT-4.6.0-*]. Every change
# of a delivery is told to the broker's listener (persistence).
#
# Encoding: every copy is appended to the client's output buffer. A whole
# QoS 0 3.1.1 PUBLISH, not retained, goes to 3.1.1 subscribers as it came
# (_forward: no Message, no encoding, no payload copy: nothing allocated).
# Otherwise the payload is copied out of the frame once, and the copies at
# one QoS (that of the message's first copy) with no property of their own
# share one encoded PUBLISH per protocol level (Message.wire4/wire5),
# patched in each output (flags, packet id: _write_shared). A v5 message's forwarded properties are encoded
# once, at its first v5 delivery (Message.props), and copied as bytes into
# every PUBLISH next to that delivery's own (expiry left, subscription ids,
# outbound alias). The topic's TopicCache entry keeps its match result.

from common.broker.delivery import QOS_MASK, RELEASED, RETAIN, SENT, SHARED
from common.broker.topics import over_limits
from common.compat import const
from common.mqtt import consts as C
from common.mqtt.codec import take_bytes, vbi_size
from common.mqtt.errors import MqttError, ProtocolError
from common.mqtt.packets import PubAck, encode_packet, encode_publish_parts
from common.mqtt.properties import encode_property_items

_FOLD_RETAIN = const(4)  # in Session.route_fold, above the QoS bits

# An ack's four bytes, patched in the output (send_ack).
ACK4 = b"\x00\x02\x00\x00"

# Against max_queued_total_bytes every queued copy counts its topic and
# payload plus this many bytes: about what a queued message costs the host
# beyond its data (docs/limits.md has the measurements), so that the budget
# bounds memory however small the messages are.
QUEUED_COST = const(512)

# A 3.1.1 client cannot be told the broker's window for inbound QoS 2
# (max_inflight_in; v5 hears it as Receive Maximum) and paho's own is 20.
# Beyond the window its PUBLISH is taken (routed, its id held as usual) but
# its PUBREC is withheld (Broker.qos2_late) until a PUBREL makes room,
# so its own window fills and it waits: slowed, not cut off. Pausing its
# socket instead would deadlock: the PUBRELs that make room come behind the
# PUBLISHes already sent. This many withheld at most, then 0x93 as for v5.
QOS2_LATE_MAX = const(32)

# What _no_room() finds: room, the session's own queue full, all queues full.
_ROOM = const(0)
_FULL_SESSION = const(1)
_FULL_TOTAL = const(2)

# ------------------------------------------------------------------ inbound


def handle_publish(broker, conn, pkt, now, frame, start, at, end):
    """A PUBLISH from decode_packet_into: `pkt` (reused) and its payload
    still in the frame, frame[at:end] (the body starts at `start`); copied
    out only if something keeps it (route)."""
    s = broker.settings
    session = conn.session
    topic = pkt.topic
    qos = pkt.qos
    st = broker.stats
    st.messages_received += 1
    st.received_by_qos[qos] += 1
    by_client = st.by_client
    if by_client is not None:
        by_client.received[conn.cid] += 1
    fwd = None
    expiry = 0
    if conn.level == C.LEVEL_5:
        props = pkt.props
        if props:
            alias = 0
            taken = 0
            for prop_id, value in props:
                if prop_id == C.PROP_TOPIC_ALIAS:
                    alias = value
                    taken += 1
                elif prop_id == C.PROP_MESSAGE_EXPIRY_INTERVAL:
                    expiry = value
                    taken += 1
                elif prop_id == C.PROP_SUBSCRIPTION_IDENTIFIER:
                    raise ProtocolError("Subscription Identifier from a client")  # [MQTT-3.3.4-6]
            if alias:
                topic = _resolve_alias(broker, conn, topic, alias)
            fwd = forwarded(props, taken, C.PROP_TOPIC_ALIAS)
        if qos > s.maximum_qos:
            raise MqttError(C.RC_QOS_NOT_SUPPORTED, "QoS above Maximum QoS")  # [MQTT-3.2.2-11]
        if pkt.retain and not s.retain_available:
            raise MqttError(C.RC_RETAIN_NOT_SUPPORTED, "retain not available")  # [MQTT-3.2.2-14]
    if not topic:
        raise ProtocolError("empty topic without a topic alias")  # [MQTT-3.3.2-1] (Topic Alias 0)
    if over_limits(topic, s.max_topic_levels, s.max_topic_length):
        raise MqttError(C.RC_TOPIC_NAME_INVALID, "topic name over the limits")
    pid = pkt.packet_id
    if qos == 2:
        late = broker.qos2_late.get(conn.cid) if broker.qos2_late else None
        if pid in session.qos2_in:
            # A resent QoS 2 PUBLISH before PUBREL: acknowledge, do not
            # deliver again [MQTT-4.3.3-9] (a withheld PUBREC comes in turn).
            if late is None or pid not in late:
                send_ack(broker, conn, C.PUBREC, pid, C.RC_SUCCESS)
            return
        if len(session.qos2_in) >= s.max_inflight_in:
            if conn.level == C.LEVEL_5 or (late is not None and len(late) >= QOS2_LATE_MAX):
                raise MqttError(C.RC_RECEIVE_MAXIMUM_EXCEEDED, "too many QoS 2 in flight")  # [MQTT-3.3.4-7]
            if late is None:
                late = broker.qos2_late[conn.cid] = []
            late.append(pid)  # 3.1.1: its PUBREC waits for room (QOS2_LATE_MAX)
    text = None
    if topic.startswith("$SYS"):
        reason = C.RC_NOT_AUTHORIZED  # only the broker publishes into $SYS/
        text = "only the broker publishes under $SYS/"
    elif conn.acl is not None and write_denied(broker, conn.acl, session, conn.user, topic, now):
        # v5: PUBACK/PUBREC 0x87; 3.1.1 has no code for it: acknowledged
        # (the reason is not encoded at that level) and dropped, counted.
        reason = C.RC_NOT_AUTHORIZED
        text = "the ACL does not let this client write to this topic"
    elif pkt.retain and qos and conn.level == C.LEVEL_5 and not broker.routing.retained.fits(topic, take_bytes(frame, at, end)):
        # A v5 publisher can be told its retained message would not be kept:
        # refused whole rather than routed and silently not retained.
        broker.stats.dropped_retained += 1
        reason = C.RC_QUOTA_EXCEEDED
        text = "retained store full (max_retained %d, max_retained_bytes %d)" % (s.max_retained, s.max_retained_bytes)
    else:
        routing = broker.routing
        entry = broker.topics.entry if topic is pkt.topic else None
        if qos == 0 and not pkt.retain and conn.level != C.LEVEL_5:
            # A QoS 0 3.1.1 PUBLISH is what a 3.1.1 subscriber gets, byte
            # for byte (retain 0 [MQTT-3.3.1-9], no DUP). It is the whole
            # buffer when it came alone (a board's usual read: nothing
            # allocated), else a view of it (one per message: a batch).
            head = start - 1 - vbi_size(end - start)
            if head or end != len(frame):
                frame = memoryview(frame)[head:end]
                at -= head
            reason = route(broker, session.client_id, topic, at, 0, False, None, 0, now, entry, frame)
        else:
            reason = route(broker, session.client_id, topic, take_bytes(frame, at, end), qos, pkt.retain, fwd, expiry, now, entry)
        if routing.backlog:
            routing.backlog = False
            broker.throttle(conn, now)
        if reason == C.RC_QUOTA_EXCEEDED:
            if routing.refused_total:
                text = "all queues full (max_queued_total_bytes %d)" % s.max_queued_total_bytes
            elif routing.refused_for is not None:
                text = "queue of subscriber %s full (max_queued_messages %d, max_queued_bytes %d)" % (
                    routing.refused_for,
                    s.max_queued_messages,
                    s.max_queued_bytes,
                )
            else:
                text = "message store full (max_messages %d)" % s.max_messages
            if qos and conn.level != C.LEVEL_5:
                # 3.1.1 has no code to refuse it: a transient error closes
                # the connection, never an ack for a message not kept
                # [MQTT-4.8.0-2] (3.1.1).
                raise MqttError(C.RC_QUOTA_EXCEEDED, text)
    if qos == 1:
        send_ack(broker, conn, C.PUBACK, pid, reason, text)  # [MQTT-4.3.2-2]
    elif qos == 2:
        if reason < 0x80:
            if not session.qos2_in:
                session.qos2_in = set()  # () until the first (session.py)
            session.qos2_in.add(pid)  # held until PUBREL [MQTT-4.3.3-8]
            broker.listener.session_saved(session)
            if late is not None and pid in late:
                return  # its PUBREC when a PUBREL makes room
        elif late is not None and pid in late:
            late.remove(pid)  # not kept: nothing to wait for
        send_ack(broker, conn, C.PUBREC, pid, reason, text)


def forwarded(props, taken, other):
    """The properties a message forwards (Message.props), or None.

    `props` less Message Expiry and `other` (the publisher's Topic Alias, or
    a will's Will Delay), of which `taken` are present: the rest in their
    order, User Properties unchanged [MQTT-3.3.2-17] [MQTT-3.3.2-18]; the
    decoded list itself when nothing is taken out.
    """
    if not taken:
        return props
    rest = []
    for prop in props:
        if prop[0] != other and prop[0] != C.PROP_MESSAGE_EXPIRY_INTERVAL:
            rest.append(prop)
    return rest or None


def write_denied(broker, acl, session, user, topic, now, what="PUBLISH"):
    """Whether the rules `acl` refuse `user`'s publish to `topic` from
    `session`: a live PUBLISH, or its will when it is sent (the same answer,
    counter and log line). A refusal is counted; at most one line a second
    is logged."""
    if acl.can_write(topic):
        return False
    st = broker.stats
    st.denied_publish += 1
    if now >= broker.denied_log_at:
        broker.denied_log_at = now + 1
        broker.log(30, "%s: %s to %s refused by the ACL (user %s; %d refused so far)", (session.client_id, what, topic, user, st.denied_publish))
    return True


def _resolve_alias(broker, conn, topic, alias):
    if alias > broker.settings.topic_alias_maximum:
        raise MqttError(C.RC_TOPIC_ALIAS_INVALID, "topic alias above the maximum")  # [MQTT-3.3.2-9]
    extras = conn.extras
    aliases = None if extras is None else extras.aliases_in
    if topic:
        if aliases is None:
            aliases = conn.extra().aliases_in = {}
        aliases[alias] = topic  # [MQTT-3.3.2-12] (re)define the alias
        return topic
    known = aliases.get(alias) if aliases is not None else None
    if known is None:
        raise ProtocolError("unknown topic alias")
    return known


def send_ack(broker, conn, ptype, packet_id, reason, text=None):
    """PUBACK/PUBREC/PUBREL/PUBCOMP; `text` is a v5 Reason String, sent only
    when the client did not turn off Request Problem Information [MQTT-3.1.2-29]."""
    if text is not None and conn.extras is not None and not conn.extras.problem_info:
        text = None
    if conn.level == C.LEVEL_5 and (reason or text is not None):
        pkt = PubAck(ptype, packet_id, reason, None)
        if text is not None:
            # Left out beyond the client's Maximum Packet Size [MQTT-3.4.2-2] [MQTT-3.5.2-2].
            broker.write(conn, broker.with_reason_string(conn, pkt, text))
        else:
            broker.write(conn, encode_packet(pkt, C.LEVEL_5))
        return
    # Four bytes, the same at both levels (v5 leaves out reason 0, 3.4.2.1):
    # written without a packet object.
    out = broker.write(conn, ACK4)
    n = len(out) - 4
    out[n] = (ptype << 4) | 0x02 if ptype == C.PUBREL else ptype << 4
    out[n + 2] = packet_id >> 8
    out[n + 3] = packet_id & 0xFF


def handle_pubrel(broker, conn, pkt, now):
    session = conn.session
    pid = pkt.packet_id
    if pid in session.qos2_in:
        session.qos2_in.discard(pid)
        broker.listener.session_saved(session)
        send_ack(broker, conn, C.PUBCOMP, pid, C.RC_SUCCESS)  # [MQTT-4.3.3-11]
        late = broker.qos2_late.get(conn.cid) if broker.qos2_late else None
        if late:
            if pid in late:
                late.remove(pid)  # released before its PUBREC: no room made
            else:
                # Room in the window: the oldest withheld PUBREC (QOS2_LATE_MAX).
                send_ack(broker, conn, C.PUBREC, late.pop(0), C.RC_SUCCESS)
    else:
        send_ack(broker, conn, C.PUBCOMP, pid, C.RC_PACKET_IDENTIFIER_NOT_FOUND)


# ------------------------------------------------------------------ routing


def route(broker, origin, topic, payload, qos, retain, props, expiry_interval, now, entry=None, frame=None):
    """Deliver a message to every matching subscription; a v5 reason code.

    `origin` is the publisher's client id (No Local), None for the broker's own.
    `entry`: the topic's TopicCache entry (its match result is kept there),
    or None. With `frame`, a whole QoS 0 3.1.1 PUBLISH not retained,
    `payload` is the offset of its payload in it: 3.1.1 subscribers get the
    frame as it is (_forward), and it is copied out only if more is needed.
    """
    routing = broker.routing
    messages = routing.messages
    expiry = now + expiry_interval if expiry_interval else 0
    routing.backlog = False  # (a retained replay or a will may have left it set)
    routing.origin = origin
    matches = _matches(routing, topic, entry)
    if frame is not None:
        if _forward(broker, origin, topic, matches, frame):
            return C.RC_SUCCESS if matches else C.RC_NO_MATCHING_SUBSCRIBERS
        payload = take_bytes(frame, payload, len(frame))
    if matches and qos and origin is not None and broker.settings.queue_full == "refuse":
        full = _full_subscriber(broker, matches, origin, qos, len(topic) + len(payload))
        if full is not None:
            # Refused whole, before it is kept anywhere: the publisher is
            # told (v5 0x97) or not acknowledged (3.1.1), so nothing it
            # was told is accepted goes missing.
            _done(routing, matches)
            routing.refused_for = full.client_id
            if routing.refused_total:
                broker.stats.refused_queue_total += 1
                _log_total(broker, origin, now)
            else:
                broker.stats.refused_queue_full += 1
            return C.RC_QUOTA_EXCEEDED
    msg = None
    if retain:
        msg = routing.retained.store(topic, payload, qos, props, expiry)
    if not matches:
        return C.RC_NO_MATCHING_SUBSCRIBERS
    if msg is None:
        msg = messages.new(topic, payload, qos, retain, props, expiry)
        if msg is None:
            _done(routing, matches)
            routing.refused_for = None  # the pool, not a subscriber's queue
            routing.refused_total = False
            broker.stats.dropped_no_slab += 1
            return C.RC_QUOTA_EXCEEDED
    messages.hold(msg)  # keep it alive while delivering
    stamp = _next_stamp(routing)
    for entry in matches:
        if entry.is_group:
            # A SharedGroup: one member gets its own copy, apart from the
            # member's other subscriptions, so it can be handed to another
            # member if this one leaves (v5 4.8.2).
            sub = entry.pick(broker.settings.max_inflight)
            if sub is not None:
                granted = sub.qos if sub.qos < qos else qos
                deliver(broker, sub.session, msg, granted, retain and sub.retain_as_published, sub.share, True, now)
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
            if granted > fold & QOS_MASK:
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
            fold = sess.route_fold
            deliver(broker, sess, msg, fold & QOS_MASK, fold & _FOLD_RETAIN != 0, sess.route_ids, False, now)
    _done(routing, matches)
    if msg.refs > 1:
        msg.wire4 = msg.wire5 = None  # kept (queued, in flight, retained): not with copies of its bytes
    messages.drop(msg)
    return C.RC_SUCCESS


def _matches(routing, topic, entry):
    """The subscriptions (and shared groups) whose filter matches `topic`:
    the list kept in the topic's TopicCache `entry` while the trie has not
    changed since (never modified), else the trie's answer (kept there)."""
    trie = routing.trie
    if entry is None:
        matches = routing.matches
        trie.match(topic, matches)
        return matches
    if entry[3] != trie.generation:
        matches = []
        trie.match(topic, matches)
        entry[2] = matches
        entry[3] = trie.generation
    return entry[2]


def _done(routing, matches):
    # The scratch list is emptied for the next message; a cached one is kept.
    if matches is routing.matches:
        del matches[:]


def _forward(broker, origin, topic, matches, frame):
    """Send a whole QoS 0 3.1.1 PUBLISH `frame` as it is to the sessions
    matched, if every one is a 3.1.1 client online and none is a shared
    group; else False, nothing done. No Message, no encoding: each copy is
    the frame's bytes appended to the client's output."""
    for entry in matches:
        if entry.is_group:
            return False
        conn = entry.session.conn
        if conn is None or conn.level == C.LEVEL_5:
            return False
    routing = broker.routing
    stamp = _next_stamp(routing)  # several filters of one session: one copy [MQTT-3.3.5-1]
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
            continue
        if conn.acl is not None and not conn.acl.can_read(topic):
            st.denied_delivery += 1  # as _send
            continue
        broker.write(conn, frame)
        st.messages_sent += 1
        st.sent_by_qos[0] += 1
        if by_client is not None:
            by_client.sent[conn.cid] += 1
    _done(routing, matches)
    return True


def _full_subscriber(broker, matches, origin, qos, size):
    """queue_full = refuse: the first session among `matches` whose queue
    this message would overflow, or None. Only QoS 1/2 publishes from a
    client are refused (QoS 0 is never acknowledged; the broker's own and
    wills follow drop_newest), and shared subscriptions are left to their
    member's drop (the member is picked at delivery). Sets
    routing.refused_total when it is max_queued_total_bytes that all the
    message's copies together would overflow."""
    routing = broker.routing
    stamp = _next_stamp(routing)  # marks a session counted once (several of its filters may match)
    need = routing.queued_total + size + QUEUED_COST
    limit = broker.settings.max_queued_total_bytes
    for entry in matches:
        if entry.is_group:
            continue
        session = entry.session
        if (entry.no_local and session.client_id == origin) or session.route_stamp == stamp:
            continue
        granted = entry.qos if entry.qos < qos else qos
        if not _queues(broker, session, granted):
            continue
        session.route_stamp = stamp
        full = _no_room(broker, session, size)
        if full == _FULL_SESSION or need > limit:
            routing.refused_total = full != _FULL_SESSION
            return session
        need += size + QUEUED_COST
    return None


def _next_stamp(routing):
    """A new value for Session.route_stamp: the sessions marked with it are
    those this routing step has seen."""
    stamp = routing.stamp + 1
    if stamp >= 0x3FFFFFFF:  # stay a small int on 32-bit ports
        stamp = 1
    routing.stamp = stamp
    return stamp


def window(broker, conn):
    cap = broker.settings.max_inflight
    peer = conn.receive_maximum
    return peer if peer < cap else cap


def deliver(broker, session, msg, qos, retain, tag, shared, now):
    """Send now, or queue in order, or drop and count.

    `tag` and `shared` as in Delivery: the subscription identifiers (a list
    or None), or with `shared` the picked member's Subscription.share.
    """
    conn = session.conn
    s = broker.settings
    if qos == 0:
        if conn is not None:
            if conn.paused and conn.out_bytes >= s.max_out_buffer:
                broker.stats.dropped_qos0 += 1
            else:
                _send(broker, conn, msg, 0, retain, tag[1] if shared else tag, 0, False, now)
            return
        if not s.queue_qos0_offline:
            broker.stats.dropped_qos0 += 1
            return
    elif conn is not None and not session.queue.count and len(session.inflight) < window(broker, conn):
        _send_inflight(broker, conn, session, broker.routing.deliveries.new(msg, qos, retain, tag, shared), now)
        return
    queue = session.queue
    size = msg.size()
    full = _no_room(broker, session, size)
    if full:
        # Full (with queue_full = refuse, only a shared subscription's copy
        # gets here: route() checked the others before accepting).
        if s.queue_full != "drop_oldest" or not _drop_oldest(broker, session, size, full, now):
            _dropped(broker, session, full, now)
            return
    routing = broker.routing
    d = routing.deliveries.new(msg, qos, retain, tag, shared)
    queue.push(d)
    session.queued_bytes += size
    routing.queued_total += size + QUEUED_COST
    broker.listener.delivery_added(session, d)
    if (
        conn is not None
        and (queue.count >= routing.high_count or session.queued_bytes >= routing.high_bytes)
        and session.client_id != routing.origin
    ):
        # An online subscriber falls behind: slow the publisher down
        # (handle_publish throttles it) before its queue overflows; not a
        # publisher subscribed to itself: throttled, it would stop reading
        # the very acks that drain its queue.
        routing.backlog = True


def _queues(broker, session, qos):
    """Whether a delivery of `qos` to `session` would wait in its queue
    (not sent at once, and not a QoS 0 that is not queued at all)."""
    conn = session.conn
    if qos == 0:
        return conn is None and broker.settings.queue_qos0_offline
    return conn is None or session.queue.count or len(session.inflight) >= window(broker, conn)


def _no_room(broker, session, size):
    """Room for `size` more bytes in the session's queue: _ROOM, or
    _FULL_SESSION (its max_queued_messages / max_queued_bytes), or
    _FULL_TOTAL (max_queued_total_bytes of all queues together)."""
    s = broker.settings
    if session.queued_bytes + size > s.max_queued_bytes or session.queue.count >= session.queue.cap:
        return _FULL_SESSION
    if broker.routing.queued_total + size + QUEUED_COST > s.max_queued_total_bytes:
        return _FULL_TOTAL
    return _ROOM


def _unqueued(broker, session, d):
    """A delivery left the session's queue: its bytes leave both counts."""
    size = d.msg.size()
    session.queued_bytes -= size
    broker.routing.queued_total -= size + QUEUED_COST


def _drop_oldest(broker, session, size, full, now):
    """queue_full = drop_oldest: make room by dropping the oldest queued
    deliveries of this session (never one already sent: those are in
    `inflight`); False, dropping none, if even its whole queue gone would
    not make room (`size` alone over max_queued_bytes, or all queues full
    with too little of it in this one)."""
    s = broker.settings
    if size > s.max_queued_bytes:
        return False
    if full == _FULL_TOTAL:
        over = broker.routing.queued_total + size + QUEUED_COST - s.max_queued_total_bytes
        if session.queued_bytes + session.queue.count * QUEUED_COST < over:
            return False
    queue = session.queue
    deliveries = broker.routing.deliveries
    while queue.count and full:
        old = queue.pop()
        _unqueued(broker, session, old)
        broker.listener.delivery_done(session, old)
        deliveries.release(old)
        _dropped(broker, session, full, now)
        full = _no_room(broker, session, size)
    return not full


# A session's drops, and the drops and refusals of all queues full, are
# logged at most once per this many seconds.
DROP_LOG_INTERVAL = 10


def _dropped(broker, session, full, now):
    """Count a message dropped for `session` (`full`: _FULL_SESSION or
    _FULL_TOTAL); a warning names the client, its count so far and the
    limits (at most one per DROP_LOG_INTERVAL)."""
    session.dropped += 1
    if full == _FULL_TOTAL:
        broker.stats.dropped_queue_total += 1
        _log_total(broker, session.client_id, now)
        return
    broker.stats.dropped_queue_full += 1
    if now < session.drop_log_at:
        return
    s = broker.settings
    broker.log(
        30,
        "%s: queue full, %d message(s) dropped so far (max_queued_messages %d, max_queued_bytes %d, queue_full = %s)",
        (session.client_id, session.dropped, s.max_queued_messages, s.max_queued_bytes, s.queue_full),
    )
    session.drop_log_at = now + DROP_LOG_INTERVAL


def _log_total(broker, client_id, now):
    """A warning, at most one per DROP_LOG_INTERVAL for the whole broker
    (a flood over many sessions is one line), when all queues together are
    full: what was dropped and refused so far, the latest for whom."""
    routing = broker.routing
    if now < routing.total_log_at:
        return
    s = broker.settings
    st = broker.stats
    broker.log(
        30,
        "all queues full (max_queued_total_bytes %d, queue_full = %s): %d message(s) dropped, %d publish(es) refused so far, the latest for %s",
        (s.max_queued_total_bytes, s.queue_full, st.dropped_queue_total, st.refused_queue_total, client_id),
    )
    routing.total_log_at = now + DROP_LOG_INTERVAL


def _send_inflight(broker, conn, session, d, now):
    """Send a QoS 1/2 delivery (new, or out of the queue) and keep it in the window."""
    pid = session.allocate_packet_id()
    bits = d.bits  # (Delivery's accessors inlined: once per QoS 1/2 delivery)
    ids = d.tag[1] if bits & SHARED else d.tag
    if _send(broker, conn, d.msg, bits & QOS_MASK, bits & RETAIN != 0, ids, pid, False, now):
        d.set_sent(pid)
        session.inflight.append(d)
        if d.seq:
            broker.listener.delivery_sent(session, d)
        else:
            broker.listener.delivery_added(session, d)
    else:
        # Too large for this client, or its ACL forbids it: dropped (counted by _send).
        broker.listener.delivery_done(session, d)
        broker.routing.deliveries.release(d)


def _send(broker, conn, msg, qos, retain, sub_ids, pid, dup, now):
    """Encode and write one PUBLISH; False if the client's size limit or its
    ACL forbids it.

    A v5 PUBLISH carries the message's forwarded properties, encoded once
    per message (Message.props), then this delivery's own: the expiry left,
    the subscription identifiers, the outbound topic alias.
    """
    acl = conn.acl
    if acl is not None and not acl.can_read(msg.topic):
        # A rule narrower than the filter granted (after a rule change, or a
        # session resumed by another user): not sent, counted.
        broker.stats.denied_delivery += 1
        return False
    level = conn.level
    if level != C.LEVEL_5:
        data = msg.wire4
        if data is not None and (data[0] >> 1) & 3 == qos:
            return _write_shared(broker, conn, data, qos, retain, dup, pid)
        data = encode_publish_parts(msg.topic, msg.payload, qos, retain, dup, pid, level, None, -1, None, 0)
        if msg.wire4 is None:
            msg.wire4 = data  # the first copy's: the next ones patch it
        return _write_publish(broker, conn, data, qos)
    items = msg.props
    if items is not None and not isinstance(items, bytearray):
        items = msg.props = encode_property_items(items)  # the first v5 delivery
    extras = conn.extras
    alias_max = 0 if extras is None else extras.alias_max_out
    if not (msg.expiry or sub_ids or alias_max):
        data = msg.wire5
        if data is not None and (data[0] >> 1) & 3 == qos:
            return _write_shared(broker, conn, data, qos, retain, dup, pid)
        if data is None:
            data = msg.wire5 = encode_publish_parts(msg.topic, msg.payload, qos, retain, dup, pid, C.LEVEL_5, items, -1, None, 0)
            return _write_publish(broker, conn, data, qos)
    topic = msg.topic
    left = -1
    if msg.expiry:
        left = msg.expiry - now
        if left < 0:
            left = 0  # [MQTT-3.3.2-6] the interval less the time spent waiting
    alias = 0
    if alias_max:
        alias = _alias_out(extras, topic)
        if alias < 0:
            alias = -alias
            topic = ""  # the client knows the alias: the topic is left out
    # sub_ids: [MQTT-3.3.4-3]
    data = encode_publish_parts(topic, msg.payload, qos, retain, dup, pid, C.LEVEL_5, items, left, sub_ids, alias)
    return _write_publish(broker, conn, data, qos)


def _write_shared(broker, conn, data, qos, retain, dup, pid):
    """Write a message's shared PUBLISH `data` (Message.wire4/wire5: its
    first copy, encoded once), and patch this copy's flags and packet id in
    the client's output: every copy of a message at one QoS is the same
    bytes but for those."""
    out = _write_publish(broker, conn, data, qos)
    if not out:
        return False
    n = len(out) - len(data)
    out[n] = 0x30 | qos << 1 | (0x08 if dup else 0) | (0x01 if retain else 0)
    if qos:
        i = n + 2
        while out[i - 1] & 0x80:  # past the Remaining Length
            i += 1
        i += 2 + ((out[i] << 8) | out[i + 1])  # past the topic name
        out[i] = pid >> 8
        out[i + 1] = pid & 0xFF
    return True


def _write_publish(broker, conn, data, qos):
    """Write one PUBLISH: the buffer it landed in (Broker.write), or False
    beyond the client's Maximum Packet Size."""
    st = broker.stats
    extras = conn.extras
    if extras is not None and extras.max_packet_out and len(data) > extras.max_packet_out:
        st.dropped_too_large += 1  # [MQTT-3.1.2-25]
        return False
    out = broker.write(conn, data)
    st.messages_sent += 1
    st.sent_by_qos[qos] += 1
    by_client = st.by_client
    if by_client is not None:
        by_client.sent[conn.cid] += 1
    return out


def _alias_out(extras, topic):
    """Outbound topic alias: 0 for none, a new alias (sent with the topic),
    or minus a known one (sent without the topic).

    The first PUBLISH on a topic carries the topic and a new alias; later ones
    carry only the alias. Aliases are never reassigned once the client's
    Topic Alias Maximum is used up [MQTT-3.3.2-8] [MQTT-3.3.2-10].
    """
    aliases = extras.aliases_out
    if aliases is None:
        aliases = extras.aliases_out = {}
    alias = aliases.get(topic)
    if alias is not None:
        return -alias
    if len(aliases) < extras.alias_max_out:
        alias = len(aliases) + 1
        aliases[topic] = alias
        return alias
    return 0


def pump(broker, session, now):
    """Move queued deliveries out while the window allows, in order."""
    conn = session.conn
    if conn is None:
        return
    queue = session.queue
    w = window(broker, conn)
    inflight = session.inflight
    while session.held_back and len(inflight) - session.held_back < w:
        _resend(broker, conn, inflight[len(inflight) - session.held_back], now)
        session.held_back -= 1
    while queue.count:
        d = queue.peek()
        msg = d.msg
        qos = d.qos()
        if qos and len(session.inflight) >= w:
            break
        queue.pop()
        _unqueued(broker, session, d)
        if qos and not (msg.expiry and now >= msg.expiry):
            _send_inflight(broker, conn, session, d, now)
            continue
        if qos == 0:
            _send(broker, conn, msg, 0, d.retain(), d.sub_ids(), 0, False, now)
        else:
            broker.stats.expired += 1  # [MQTT-3.3.2-5]
        broker.listener.delivery_done(session, d)
        broker.routing.deliveries.release(d)
    routing = broker.routing
    if broker.throttled and queue.count * 2 <= routing.high_count and session.queued_bytes * 2 <= routing.high_bytes:
        broker.release_throttled()


def resume(broker, conn, session, now):
    """On reconnect: resend unacknowledged PUBLISH (DUP) and PUBREL in order,
    with their original packet ids [MQTT-4.4.0-1], as many as the window
    allows now [MQTT-3.3.4-9]; pump() resends the rest as acks free it."""
    inflight = session.inflight
    n = len(inflight)
    w = window(broker, conn)
    k = n if n <= w else w
    for i in range(k):
        _resend(broker, conn, inflight[i], now)
    session.held_back = n - k
    pump(broker, session, now)


def _resend(broker, conn, d, now):
    if d.state() == SENT:
        _send(broker, conn, d.msg, d.qos(), d.retain(), d.sub_ids(), d.packet_id(), True, now)
    else:
        send_ack(broker, conn, C.PUBREL, d.packet_id(), C.RC_SUCCESS)


def _take_inflight(session, i):
    """Remove and return inflight[i] (acknowledged, refused or handed over)."""
    inflight = session.inflight
    if i >= len(inflight) - session.held_back:
        session.held_back -= 1  # acknowledged before we resent it
    return inflight.pop(i)


def hand_over_shared(broker, session, now, group=None):
    """A shared-subscription member leaves: give its undelivered copies to others.

    Queued copies and QoS 1 copies sent but not acknowledged go to another
    member of their SharedGroup (`group`, or every group); a QoS 2 copy
    already sent stays with this session, since it must be completed with
    the same client [MQTT-4.8.2-4] [MQTT-4.8.2-5].
    """
    moved = []
    queue = session.queue
    listener = broker.listener
    for d in queue.clear():
        shared = d.shared_group()
        if shared is not None and (group is None or shared is group):
            _unqueued(broker, session, d)
            listener.delivery_done(session, d)
            moved.append(d)
        else:
            queue.push(d)
    inflight = session.inflight
    i = 0
    while i < len(inflight):
        d = inflight[i]
        shared = d.shared_group()
        if shared is not None and d.qos() == 1 and (group is None or shared is group):
            listener.delivery_done(session, d)
            moved.append(d)  # goes out to the next member as new (no DUP)
            _take_inflight(session, i)
        else:
            i += 1
    max_inflight = broker.settings.max_inflight
    for d in moved:
        shared = d.tag[0]
        sub = shared.pick(max_inflight, session)
        if sub is None:
            broker.stats.dropped_queue_full += 1
        else:
            qos = d.qos()
            if sub.qos < qos:
                qos = sub.qos
            deliver(broker, sub.session, d.msg, qos, d.retain(), sub.share, True, now)
        broker.routing.deliveries.release(d)


def release_session_messages(broker, session):
    """Drop every delivery of a session that ends (after the listener forgot it)."""
    broker.listener.session_forgotten(session)
    for d in session.queue.clear():
        _unqueued(broker, session, d)
        broker.routing.deliveries.release(d)
    for d in session.inflight:
        broker.routing.deliveries.release(d)
    session.inflight = []
    session.held_back = 0
    session.queued_bytes = 0
    session.qos2_in = ()


# ------------------------------------------------------------ outbound acks


def handle_puback(broker, conn, pkt, now):
    session = conn.session
    i = session.find_inflight(pkt.packet_id)
    if i < 0:
        return  # unknown id: nothing to release
    d = session.inflight[i]
    if d.bits & QOS_MASK != 1:  # (Delivery.qos() inlined: once per PUBACK)
        raise ProtocolError("PUBACK for a QoS 2 message")
    _take_inflight(session, i)
    broker.listener.delivery_done(session, d)
    broker.routing.deliveries.release(d)
    pump(broker, session, now)


def handle_pubrec(broker, conn, pkt, now):
    session = conn.session
    pid = pkt.packet_id
    i = session.find_inflight(pid)
    if i < 0:
        send_ack(broker, conn, C.PUBREL, pid, C.RC_PACKET_IDENTIFIER_NOT_FOUND)
        return
    d = session.inflight[i]
    if d.qos() != 2:
        raise ProtocolError("PUBREC for a QoS 1 message")
    if d.msg is not None:
        broker.routing.messages.drop(d.msg)  # [MQTT-4.3.3-4] the message is done with
        d.msg = None
    if pkt.reason >= 0x80:
        _take_inflight(session, i)  # v5: the receiver refused it; no PUBREL
        broker.listener.delivery_done(session, d)
        broker.routing.deliveries.release(d)
        pump(broker, session, now)
        return
    if d.state() == SENT:
        d.set_released()
        broker.listener.delivery_released(session, d)
    send_ack(broker, conn, C.PUBREL, pid, C.RC_SUCCESS)  # [MQTT-4.3.3-3]


def handle_pubcomp(broker, conn, pkt, now):
    session = conn.session
    i = session.find_inflight(pkt.packet_id)
    if i < 0 or session.inflight[i].state() != RELEASED:
        return
    d = _take_inflight(session, i)
    broker.listener.delivery_done(session, d)
    broker.routing.deliveries.release(d)
    pump(broker, session, now)
