# PUBLISH from a client: its checks, its QoS 2 state, its answer.
#
# Theory of operation. An inbound PUBLISH arrives decoded into the broker's
# reused Publish by the dispatch table (Broker.data_received), its topic
# name checked by the codec (UTF-8, no wildcard, not empty) and its payload
# still in the frame; here come the broker's own checks (alias, limits,
# QoS, retain, $SYS, the ACL), then route.py decides who gets it (copying
# the payload out of the frame only if something keeps it) and this module
# answers the publisher: PUBACK, or PUBREC and its QoS 2 state until PUBREL
# [MQTT-4.3.2-2] [MQTT-4.3.3-8], with the reason route's outcome gives. The
# acks a client sends for the broker's own PUBLISHes (PUBACK, PUBREC,
# PUBCOMP) are outbox.py's.
#
# The walk of a PUBLISH, function by function: docs/architecture.md.

from common.broker.egress import send_ack
from common.broker.outbox import BACKLOG
from common.broker.route import REASON_MASK, refusal_text, route, route_frame
from common.broker.topics import over_limits
from common.compat import const
from common.mqtt.codec import take_bytes, vbi_size
from common.mqtt.errors import MqttError, ProtocolError

# The wire constants this module uses, as private const()s with the values
# of common/mqtt/consts.py's names (tests/core/test_const_mirrors.py checks
# each): MicroPython folds them into the bytecode, where C.NAME takes a
# global and an attribute load at every use (about 1 KB of a board's heap
# over the per-packet modules, docs/boards.md).
_LEVEL_5 = const(5)
_PROP_MESSAGE_EXPIRY_INTERVAL = const(0x02)
_PROP_SUBSCRIPTION_IDENTIFIER = const(0x0B)
_PROP_TOPIC_ALIAS = const(0x23)
_PUBACK = const(4)
_PUBCOMP = const(7)
_PUBREC = const(5)
_RC_NOT_AUTHORIZED = const(0x87)
_RC_PACKET_IDENTIFIER_NOT_FOUND = const(0x92)
_RC_QOS_NOT_SUPPORTED = const(0x9B)
_RC_QUOTA_EXCEEDED = const(0x97)
_RC_RECEIVE_MAXIMUM_EXCEEDED = const(0x93)
_RC_RETAIN_NOT_SUPPORTED = const(0x9A)
_RC_SUCCESS = const(0x00)
_RC_TOPIC_ALIAS_INVALID = const(0x94)
_RC_TOPIC_NAME_INVALID = const(0x90)

# A 3.1.1 client cannot be told the broker's window for inbound QoS 2
# (max_inflight_in; v5 hears it as Receive Maximum) and paho's own is 20.
# Beyond the window its PUBLISH is taken (routed, its id held as usual) but
# its PUBREC is withheld (Broker.qos2_late) until a PUBREL makes room,
# so its own window fills and it waits: slowed, not cut off. Pausing its
# socket instead would deadlock: the PUBRELs that make room come behind the
# PUBLISHes already sent. This many withheld at most, then 0x93 as for v5.
QOS2_LATE_MAX = const(32)


def handle_publish(broker, conn, pkt, now):
    """A PUBLISH decoded into the reused `pkt`, its payload still in the
    frame (conn.reader.buf[pkt.payload_at:reader.stop]); copied out only if
    something keeps it (route)."""
    s = broker.settings
    session = conn.session
    topic = pkt.topic
    qos = pkt.qos
    st = broker.stats
    st.messages_received += 1
    st.received_by_qos[qos] += 1
    st.publish_bytes_received += conn.reader.stop - pkt.payload_at
    rates = broker.rates
    if rates is not None:  # (ratelimit.py: charged now, held back once in debt)
        size = conn.reader.stop - conn.reader.start
        if rates.free == conn.cid:
            rates.owed += size  # (charged after the read)
        else:
            rates.charge(broker, conn, 0, 1, now)
            rates.charge(broker, conn, 1, size, now)
    by_client = st.by_client
    if by_client is not None:
        by_client.received[conn.cid] += 1
    fwd = None
    expiry = 0
    if conn.level == _LEVEL_5:
        props = pkt.props
        if props:
            alias = 0
            taken = 0
            for prop_id, value in props:
                if prop_id == _PROP_TOPIC_ALIAS:
                    alias = value
                    taken += 1
                elif prop_id == _PROP_MESSAGE_EXPIRY_INTERVAL:
                    expiry = value
                    taken += 1
                elif prop_id == _PROP_SUBSCRIPTION_IDENTIFIER:
                    raise ProtocolError("Subscription Identifier from a client")  # [MQTT-3.3.4-6]
            if alias:
                topic = _resolve_alias(broker, conn, topic, alias)
            fwd = forwarded(props, taken, _PROP_TOPIC_ALIAS)
        if qos > s.maximum_qos:
            raise MqttError(_RC_QOS_NOT_SUPPORTED, "QoS above Maximum QoS")  # [MQTT-3.2.2-11]
        if pkt.retain and not s.retain_available:
            raise MqttError(_RC_RETAIN_NOT_SUPPORTED, "retain not available")  # [MQTT-3.2.2-14]
    if not topic:
        raise ProtocolError("empty topic without a topic alias")  # [MQTT-3.3.2-1] (Topic Alias 0)
    extras = conn.extras
    mount = None if extras is None else extras.mount
    if mount is not None:
        topic = mount + topic  # its listener's mount point (listener_policy.py)
    if over_limits(topic, s.max_topic_levels, s.max_topic_length):
        raise MqttError(_RC_TOPIC_NAME_INVALID, "topic name over the limits")
    pid = pkt.packet_id
    if qos == 2:
        late = broker.qos2_late.get(conn.cid) if broker.qos2_late else None
        if pid in session.qos2_in:
            # A resent QoS 2 PUBLISH before PUBREL: acknowledge, do not
            # deliver again [MQTT-4.3.3-9] (a withheld PUBREC comes in turn).
            if late is None or pid not in late:
                send_ack(broker, conn, _PUBREC, pid, _RC_SUCCESS)
            return
        if len(session.qos2_in) >= s.max_inflight_in:
            if conn.level == _LEVEL_5 or (late is not None and len(late) >= QOS2_LATE_MAX):
                raise MqttError(_RC_RECEIVE_MAXIMUM_EXCEEDED, "too many QoS 2 in flight")  # [MQTT-3.3.4-7]
            if late is None:
                late = broker.qos2_late[conn.cid] = []
            late.append(pid)  # 3.1.1: its PUBREC waits for room (QOS2_LATE_MAX)
    reader = conn.reader
    frame = reader.buf
    at = pkt.payload_at
    end = reader.stop
    text = None
    spb = broker.sparkplug  # sparkplug_aware or sparkplug_group: sparkplug.py; else None
    refused = 0 if spb is None else spb.check(broker, session.client_id, topic, now)
    if topic.startswith("$SYS") or (mount is not None and topic.startswith("$SYS", len(mount))):
        reason = _RC_NOT_AUTHORIZED  # only the broker publishes into $SYS/
        text = "only the broker publishes under $SYS/"
    elif refused:
        reason = refused  # under $sparkplug/certificates/, or a malformed Sparkplug topic
        text = spb.text
    elif conn.acl is not None and write_denied(broker, conn.acl, session, conn.user, topic, now):
        # v5: PUBACK/PUBREC 0x87; 3.1.1 has no code for it: acknowledged
        # (the reason is not encoded at that level) and dropped, counted.
        reason = _RC_NOT_AUTHORIZED
        text = "the ACL does not let this client write to this topic"
    elif broker.hook is not None and broker.hook.denied(conn, True, topic):
        reason = _RC_NOT_AUTHORIZED  # (the auth hook's answer: external_auth.py)
        text = "the auth hook does not let this client write to this topic"
        broker.hook.refused(broker, session, "PUBLISH to", topic, now)
    elif (
        pkt.retain
        and qos
        and conn.level == _LEVEL_5
        and not broker.routing.retained.fits(topic, take_bytes(frame, at, end))
    ):
        # A v5 publisher can be told its retained message would not be kept:
        # refused whole rather than routed and silently not retained.
        broker.stats.dropped_retained += 1
        reason = _RC_QUOTA_EXCEEDED
        text = "retained store full (max_retained %d, max_retained_bytes %d)" % (s.max_retained, s.max_retained_bytes)
    else:
        if qos == 0 and not pkt.retain and conn.level != _LEVEL_5 and mount is None:
            # A QoS 0 3.1.1 PUBLISH is what a 3.1.1 subscriber gets, byte
            # for byte (retain 0 [MQTT-3.3.1-9], no DUP). It is the whole
            # buffer when it came alone (a board's usual read: nothing
            # allocated), else a view of it (one per message: a batch).
            start = reader.start
            head = start - 1 - vbi_size(end - start)
            if head or end != len(frame):
                frame = memoryview(frame)[head:end]
                at -= head
            outcome = route_frame(broker, session.client_id, pkt, frame, at, now)
        else:
            pkt.topic = topic  # (the alias resolved)
            pkt.props = fwd
            outcome = route(broker, session.client_id, pkt, take_bytes(frame, at, end), expiry, now)
        if outcome & BACKLOG:
            broker.throttle(conn, now)
        reason = outcome & REASON_MASK
        if spb is not None and spb.after and reason < 0x80:
            spb.after_route(broker, conn, fwd, topic, take_bytes(reader.buf, pkt.payload_at, end), pkt.qos, now)
        if reason == _RC_QUOTA_EXCEEDED:
            text = refusal_text(broker, session.client_id, pkt, outcome, len(topic) + end - pkt.payload_at)
            if qos and conn.level != _LEVEL_5:
                # 3.1.1 has no code to refuse it: a transient error closes
                # the connection, never an ack for a message not kept
                # [MQTT-4.8.0-2] (3.1.1).
                raise MqttError(_RC_QUOTA_EXCEEDED, text)
    if qos == 1:
        send_ack(broker, conn, _PUBACK, pid, reason, text)  # [MQTT-4.3.2-2]
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
        send_ack(broker, conn, _PUBREC, pid, reason, text)


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
        if prop[0] != other and prop[0] != _PROP_MESSAGE_EXPIRY_INTERVAL:
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
        raise MqttError(_RC_TOPIC_ALIAS_INVALID, "topic alias above the maximum")  # [MQTT-3.3.2-9]
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


def handle_pubrel(broker, conn, pkt, now):
    session = conn.session
    pid = pkt.packet_id
    if pid in session.qos2_in:
        session.qos2_in.discard(pid)
        broker.listener.session_saved(session)
        send_ack(broker, conn, _PUBCOMP, pid, _RC_SUCCESS)  # [MQTT-4.3.3-11]
        late = broker.qos2_late.get(conn.cid) if broker.qos2_late else None
        if late:
            if pid in late:
                late.remove(pid)  # released before its PUBREC: no room made
            else:
                # Room in the window: the oldest withheld PUBREC (QOS2_LATE_MAX).
                send_ack(broker, conn, _PUBREC, late.pop(0), _RC_SUCCESS)
    else:
        send_ack(broker, conn, _PUBCOMP, pid, _RC_PACKET_IDENTIFIER_NOT_FOUND)
