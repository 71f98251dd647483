# Wills: a CONNECT's will judged, kept, and published. Loaded by the first
# CONNECT that carries a will (or the first will a restored session
# publishes): a board whose clients send none keeps none of this code.
# When a will is published or dropped is session_life.py's (a
# connection's end, the Will Delay Interval, the session's expiry).
#
# Theory of operation. refusal() is the CONNECT check of a will
# (handle_connect's CONNECT_CHECKS): the will is refused exactly as the same
# live PUBLISH would be. keep() holds the will's message in the pool before
# CONNACK acknowledges it, so that it cannot be lost for want of room at the
# end; publish() routes it as a publish by its owner, judged by the rules in
# force at that moment.

from common.broker.connection import mount_of
from common.broker.handle_publish import forwarded, write_denied
from common.broker.login import security_of
from common.broker.route import route
from common.broker.topics import over_limits
from common.mqtt import consts as C


def refusal(broker, conn, pkt, found):
    """The CONNECT refusal (reason, why) for its will and its words, or None;
    the codec checked the rest of the topic (not empty, no wildcard, no
    U+0000), as it does a PUBLISH's, and the checks here are
    handle_publish's: the will is refused exactly as the same live PUBLISH
    would be."""
    s = broker.settings
    mount = mount_of(conn)
    topic = pkt.will_topic if mount is None else mount + pkt.will_topic  # (listener_policy.py)
    if over_limits(topic, s.max_topic_levels, s.max_topic_length):
        why = "will topic over max_topic_levels %d or max_topic_length %d" % (s.max_topic_levels, s.max_topic_length)
        return C.RC_TOPIC_NAME_INVALID, why
    if pkt.will_topic.startswith("$SYS"):
        return C.RC_NOT_AUTHORIZED, "will topic in $SYS"
    if found.acl is not None and not found.acl.can_write(topic):
        broker.stats.denied_publish += 1
        return C.RC_NOT_AUTHORIZED, ("the ACL does not let user %s write the will topic %s", (found.user, topic))
    if pkt.level == C.LEVEL_5:
        if pkt.will_qos > s.maximum_qos:
            return C.RC_QOS_NOT_SUPPORTED, "will QoS %d over maximum_qos %d" % (
                pkt.will_qos,
                s.maximum_qos,
            )  # [MQTT-3.2.2-12]
        if pkt.will_retain and not s.retain_available:
            return C.RC_RETAIN_NOT_SUPPORTED, "will retain with retain_available false"  # [MQTT-3.2.2-13]
    return None


def keep(broker, pkt, mount=None):
    """(held Message, delay, expiry) for the CONNECT's will (its topic under
    the listener's `mount` point, if any); None if the message pool has no
    room for it."""
    props = pkt.will_props
    delay = 0
    expiry = 0
    fwd = None
    if props:
        taken = 0
        for prop_id, value in props:
            if prop_id == C.PROP_WILL_DELAY_INTERVAL:
                delay = value
                taken += 1
            elif prop_id == C.PROP_MESSAGE_EXPIRY_INTERVAL:
                expiry = value
                taken += 1
        fwd = forwarded(props, taken, C.PROP_WILL_DELAY_INTERVAL)
    messages = broker.routing.messages
    msg = messages.new(
        pkt.will_topic if mount is None else mount + pkt.will_topic,
        pkt.will_payload,
        pkt.will_qos,
        pkt.will_retain,
        fwd,
        0,
    )
    if msg is None:
        return None
    messages.hold(msg)
    return msg, delay, expiry


def publish(broker, session, now):
    """Publish the session's will (if it still has one) and let it go."""
    will = session.will
    session.will = None
    session.will_at = 0
    if will is None:
        return
    msg = will[0]
    # A will is a publish by its owner, judged by the rules in force now.
    acl = security_of(broker, session.listener).acl  # (its listener's: login.security_of)
    payload = msg.payload
    if broker.sparkplug is not None:
        payload = broker.sparkplug.will_payload(broker, session, msg.topic, payload, now)  # None: refused
    if payload is not None and (
        acl is None
        or not write_denied(
            broker, acl.for_client(session.user, session.client_id), session, session.user, msg.topic, now, "will"
        )
    ):
        route(broker, None, msg, payload, will[2], now)
    broker.routing.messages.drop(msg)
