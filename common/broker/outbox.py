# A session's outbound side: its queue, its inflight window and their byte
# counts. This module is the only one that changes them (and the only one
# besides delivery.py that reads a Delivery's bits); route, retained
# replays, shared hand-overs, session ends and the store's restore all come
# through here, and the client's acks for the broker's PUBLISHes (PUBACK,
# PUBREC, PUBCOMP) are handled here.
#
# Theory of operation. deliver() takes one copy of a message for one
# session: QoS 0 goes straight to the connection's output (or is dropped
# and counted for a slow reader over max_out_buffer); QoS 1/2 goes out
# while the session's inflight window (min of max_inflight and the client's
# Receive Maximum) has room and nothing older waits in its queue, otherwise
# it waits in the queue in order. Acks free window slots and pump() moves
# queued deliveries out in order [MQTT-4.6.0-*]. On reconnect resume()
# resends the window first [MQTT-4.4.0-1]. Every change of a delivery is
# told to the broker's listener (persistence).
#
# Limits: a session's queue holds max_queued_messages / max_queued_bytes,
# all queues together max_queued_total_bytes (each copy counted with
# QUEUED_COST). When full, queue_full decides: drop_newest (the copy is
# dropped), drop_oldest (the oldest queued copies make room) or refuse
# (route asks full_subscriber() before it keeps a client's QoS 1/2 message
# at all, so the publisher is told). Every drop is counted and logged.

from common.broker.delivery import QUEUED, RELEASED, SENT, SHARED
from common.broker.egress import send_ack, send_publish
from common.compat import const
from common.mqtt.errors import ProtocolError

# The wire constants this module uses, as private const()s with the values
# of common/mqtt/consts.py's names (tests/core/test_const_mirrors.py checks
# each): MicroPython folds them into the bytecode, where C.NAME takes a
# global and an attribute load at every use (about 1 KB of a board's heap
# over the per-packet modules, docs/boards.md).
_PUBLISH_PID_SHIFT = const(6)
_PUBLISH_QOS_MASK = const(0x03)
_PUBLISH_RETAIN = const(0x04)
_PUBREL = const(6)
_RC_PACKET_IDENTIFIER_NOT_FOUND = const(0x92)
_RC_SUCCESS = const(0x00)
_U16_MAX = const(65535)

# Against max_queued_total_bytes every queued copy counts its topic and
# payload plus this many bytes: about what a queued message costs the host
# beyond its data (docs/limits.md has the measurements), so that the budget
# bounds memory however small the messages are.
QUEUED_COST = const(512)

# deliver()'s answer: an online subscriber's queue passed its high-water
# mark (half its limits, capped: routing.high_count / high_bytes). One of
# route's outcome bits (route.py): the publisher is throttled.
BACKLOG = const(0x100)

# What no_room() finds: room, the session's own queue full, all queues full.
ROOM = const(0)
FULL_SESSION = const(1)
FULL_TOTAL = const(2)

# A session's drops, and the drops and refusals of all queues full, are
# logged at most once per this many seconds.
_DROP_LOG_INTERVAL = const(10)


def window(broker, conn):
    extras = conn.extras
    cap = extras.window_cap if extras is not None and extras.window_cap else broker.settings.max_inflight
    peer = conn.receive_maximum
    return peer if peer < cap else cap


# ------------------------------------------------------------------ deliver


def deliver(broker, session, msg, bits, tag, now):
    """Send now, or queue in order, or drop and count; BACKLOG if it leaves
    the session online and over its high-water mark, else 0.

    `bits`: the copy's QoS | PUBLISH_RETAIN | SHARED (as a Delivery keeps
    them); `tag` as in Delivery: the subscription identifiers (a list or
    None), or with SHARED the picked member's Subscription.share.
    """
    conn = session.conn
    s = broker.settings
    qos = bits & _PUBLISH_QOS_MASK
    if qos == 0:
        if conn is not None:
            if conn.paused and conn.out_bytes >= s.max_out_buffer:
                broker.stats.dropped_qos0 += 1
            else:
                send_publish(broker, conn, msg, bits, tag[1] if bits & SHARED else tag, now)
            return 0
        if not s.queue_qos0_offline:
            broker.stats.dropped_qos0 += 1
            return 0
    elif conn is not None and not session.queue.count and len(session.inflight) < window(broker, conn):
        _send_inflight(broker, conn, session, broker.routing.deliveries.new(msg, bits, tag), now)
        return 0
    queue = session.queue
    size = msg.size()
    full = no_room(broker, session, size)
    if full:
        # Full (with queue_full = refuse, only a shared subscription's copy
        # gets here: route() checked the others before accepting).
        if s.queue_full != "drop_oldest" or not _drop_oldest(broker, session, size, full, now):
            _dropped(broker, session, full, now)
            return 0
    routing = broker.routing
    d = routing.deliveries.new(msg, bits, tag)
    queue.push(d)
    session.queued_bytes += size
    routing.queued_total += size + QUEUED_COST
    broker.listener.delivery_added(session, d)
    if conn is not None and (queue.count >= routing.high_count or session.queued_bytes >= routing.high_bytes):
        if session.client_id in routing.unthrottled:
            return 0  # a bridge's session: its queue is the uplink's buffer (only its budget applies)
        return BACKLOG  # an online subscriber falls behind (route throttles the publisher)
    return 0


def queues(broker, session, qos):
    """Whether a delivery of `qos` to `session` would wait in its queue
    (not sent at once, and not a QoS 0 that is not queued at all)."""
    conn = session.conn
    if qos == 0:
        return conn is None and broker.settings.queue_qos0_offline
    return conn is None or session.queue.count or len(session.inflight) >= window(broker, conn)


def no_room(broker, session, size):
    """Room for `size` more bytes in the session's queue: ROOM, or
    FULL_SESSION (its max_queued_messages / max_queued_bytes), or
    FULL_TOTAL (max_queued_total_bytes of all queues together)."""
    s = broker.settings
    if session.queued_bytes + size > s.max_queued_bytes or session.queue.count >= session.queue.cap:
        return FULL_SESSION
    if broker.routing.queued_total + size + QUEUED_COST > s.max_queued_total_bytes:
        return FULL_TOTAL
    return ROOM


def full_subscriber(broker, matches, origin, qos, size):
    """queue_full = refuse: the first session among `matches` whose queue
    a message of `qos` and `size` bytes would overflow, or None. Only QoS
    1/2 publishes from a client are refused (QoS 0 is never acknowledged;
    the broker's own and wills follow drop_newest), and shared
    subscriptions are left to their member's drop (the member is picked at
    delivery). It is all queues together that would overflow
    (max_queued_total_bytes) when no_room() of that session is not
    FULL_SESSION."""
    routing = broker.routing
    stamp = routing.next_stamp()  # marks a session counted once (several of its filters may match)
    need = routing.queued_total + size + QUEUED_COST
    limit = broker.settings.max_queued_total_bytes
    for entry in matches:
        if entry.is_group:
            continue
        session = entry.session
        if (entry.no_local and session.client_id == origin) or session.route_stamp == stamp:
            continue
        granted = entry.qos if entry.qos < qos else qos
        if not queues(broker, session, granted):
            continue
        session.route_stamp = stamp
        if need > limit or no_room(broker, session, size) == FULL_SESSION:
            return session
        need += size + QUEUED_COST
    return None


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
    if full == FULL_TOTAL:
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
        full = no_room(broker, session, size)
    return not full


def _dropped(broker, session, full, now):
    """Count a message dropped for `session` (`full`: FULL_SESSION or
    FULL_TOTAL); a warning names the client, its count so far and the
    limits (at most one per _DROP_LOG_INTERVAL)."""
    session.dropped += 1
    if full == FULL_TOTAL:
        broker.stats.dropped_queue_total += 1
        log_total(broker, session.client_id, now)
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
    session.drop_log_at = now + _DROP_LOG_INTERVAL


def log_total(broker, client_id, now):
    """A warning, at most one per _DROP_LOG_INTERVAL for the whole broker
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
    routing.total_log_at = now + _DROP_LOG_INTERVAL


# ----------------------------------------------------------- the window


def allocate_packet_id(session):
    """A packet id not used by an unacknowledged outbound message."""
    pid = session.next_packet_id
    inflight = session.inflight
    # (Delivery.packet_id() inlined, and for/else rather than a flag:
    # this scans the window per QoS 1/2 PUBLISH, the top of the QoS 1
    # fan-in profile's bookkeeping.)
    for _ in range(_U16_MAX):
        for d in inflight:
            if d.bits >> _PUBLISH_PID_SHIFT == pid:
                break
        else:
            session.next_packet_id = pid + 1 if pid < _U16_MAX else 1
            return pid
        pid = pid + 1 if pid < _U16_MAX else 1
    return 0


def find_inflight(session, packet_id):
    inflight = session.inflight
    for i in range(len(inflight)):
        if inflight[i].bits >> _PUBLISH_PID_SHIFT == packet_id:
            return i
    return -1


def _send_inflight(broker, conn, session, d, now):
    """Send a QoS 1/2 delivery (new, or out of the queue) and keep it in the window."""
    pid = allocate_packet_id(session)
    bits = d.bits  # (Delivery's accessors inlined: once per QoS 1/2 delivery)
    ids = d.tag[1] if bits & SHARED else d.tag
    if send_publish(broker, conn, d.msg, bits | pid << _PUBLISH_PID_SHIFT, ids, now):
        d.set_sent(pid)
        session.inflight.append(d)
        if d.seq:
            broker.listener.delivery_sent(session, d)
        else:
            broker.listener.delivery_added(session, d)
    else:
        # Too large for this client, or its ACL forbids it: dropped (counted by send_publish).
        broker.listener.delivery_done(session, d)
        broker.routing.deliveries.release(d)


def _resend(broker, conn, d, now):
    if d.state() == SENT:
        send_publish(broker, conn, d.msg, d.bits, d.sub_ids(), now)  # SENT: with DUP
    else:
        send_ack(broker, conn, _PUBREL, d.packet_id(), _RC_SUCCESS)


def _take_inflight(session, i):
    """Remove and return inflight[i] (acknowledged, refused or handed over)."""
    inflight = session.inflight
    if i >= len(inflight) - session.held_back:
        session.held_back -= 1  # acknowledged before we resent it
    return inflight.pop(i)


def _finish(broker, session, d):
    broker.listener.delivery_done(session, d)
    broker.routing.deliveries.release(d)


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
            send_publish(broker, conn, msg, d.bits, d.sub_ids(), now)
        else:
            broker.stats.expired += 1  # [MQTT-3.3.2-5]
        _finish(broker, session, d)
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


def drop_inflight(broker, session, i):
    """Complete inflight[i] without its ack (its client may no longer read
    it: secured.drop_unreadable_inflight)."""
    _finish(broker, session, _take_inflight(session, i))


# ------------------------------------------------------ acks from the client
# (the handlers of PUBACK, PUBREC and PUBCOMP: Broker's dispatch table)


def handle_puback(broker, conn, pkt, now):
    session = conn.session
    i = find_inflight(session, pkt.packet_id)
    if i < 0:
        return  # unknown id: nothing to release
    d = session.inflight[i]
    if d.bits & _PUBLISH_QOS_MASK != 1:  # (Delivery.qos() inlined: once per PUBACK)
        raise ProtocolError("PUBACK for a QoS 2 message")
    _take_inflight(session, i)
    _finish(broker, session, d)
    pump(broker, session, now)


def handle_pubrec(broker, conn, pkt, now):
    session = conn.session
    pid = pkt.packet_id
    i = find_inflight(session, pid)
    if i < 0:
        send_ack(broker, conn, _PUBREL, pid, _RC_PACKET_IDENTIFIER_NOT_FOUND)
        return
    d = session.inflight[i]
    if d.qos() != 2:
        raise ProtocolError("PUBREC for a QoS 1 message")
    if d.msg is not None:
        broker.routing.messages.drop(d.msg)  # [MQTT-4.3.3-4] the message is done with
        d.msg = None
    if pkt.reason >= 0x80:
        _take_inflight(session, i)  # v5: the receiver refused it; no PUBREL
        _finish(broker, session, d)
        pump(broker, session, now)
        return
    if d.state() == SENT:
        d.set_released()
        broker.listener.delivery_released(session, d)
    send_ack(broker, conn, _PUBREL, pid, _RC_SUCCESS)  # [MQTT-4.3.3-3]


def handle_pubcomp(broker, conn, pkt, now):
    session = conn.session
    i = find_inflight(session, pkt.packet_id)
    if i < 0 or session.inflight[i].state() != RELEASED:
        return
    _finish(broker, session, _take_inflight(session, i))
    pump(broker, session, now)


# ---------------------------------------------------- shared, ends, restore


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
            deliver(broker, sub.session, d.msg, qos | (_PUBLISH_RETAIN if d.retain() else 0) | SHARED, sub.share, now)
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


def restore_delivery(broker, session, d):
    """The store's restore: one of a session's deliveries, each in its
    original order: a sent one (SENT, RELEASED) to the inflight window, a
    QUEUED one to the queue."""
    if d.state() != QUEUED:
        session.inflight.append(d)
        return
    queue = session.queue
    if queue.count >= queue.cap:
        # max_queued_messages was lowered since they were stored: keep
        # them all (they were acknowledged), past the queue's cap.
        queue.cap = 2 * queue.cap or 1
    queue.push(d)
    size = d.msg.size()
    session.queued_bytes += size
    broker.routing.queued_total += size + QUEUED_COST
