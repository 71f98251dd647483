# SUBSCRIBE and UNSUBSCRIBE, and the retained replay a subscription triggers.
#
# Each filter of a SUBSCRIBE gets its own answer in SUBACK, in order
# [MQTT-3.8.4-2]: the granted QoS, or a failure code (3.1.1: 0x80; v5: the
# specific reason). A filter already subscribed by the session replaces the
# old subscription's options [MQTT-3.8.4-3]. Shared subscriptions join a
# SharedGroup that sits in the trie in place of its members. After SUBACK,
# retained messages matching each new or replaced subscription are sent with
# the retain flag set [MQTT-3.3.1-8], as v5 Retain Handling allows, at the
# pace the client reads them (common/broker/replay.py).

from common.broker import outbox, replay
from common.broker.topics import filter_covers, parse_shared, validate_topic_filter
from common.compat import const
from common.mqtt.errors import MqttError, ProtocolError
from common.mqtt.packets import Suback, Unsuback, encode_packet, prop_get

# The wire constants this module uses, as private const()s with the values
# of common/mqtt/consts.py's names (tests/core/test_const_mirrors.py checks
# each): MicroPython folds them into the bytecode, where C.NAME takes a
# global and an attribute load at every use (about 1 KB of a board's heap
# over the per-packet modules, docs/boards.md).
_LEVEL_5 = const(5)
_PROP_SUBSCRIPTION_IDENTIFIER = const(0x0B)
_RC_NOT_AUTHORIZED = const(0x87)
_RC_NO_SUBSCRIPTION_EXISTED = const(0x11)
_RC_QUOTA_EXCEEDED = const(0x97)
_RC_SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = const(0x9E)
_RC_SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = const(0xA1)
_RC_SUCCESS = const(0x00)
_RC_TOPIC_FILTER_INVALID = const(0x8F)
_RC_WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = const(0xA2)
_RETAIN_HANDLING_DONT_SEND = const(2)
_RETAIN_HANDLING_SEND_IF_NEW = const(1)
_SUBACK_FAILURE_311 = const(0x80)
_SUBOPT_NO_LOCAL = const(0x04)
_SUBOPT_QOS_MASK = const(0x03)
_SUBOPT_RETAIN_AS_PUBLISHED = const(0x08)
_SUBOPT_RETAIN_HANDLING_MASK = const(0x30)
_SUBOPT_RETAIN_HANDLING_SHIFT = const(4)


def handle_subscribe(broker, conn, pkt, now):
    session = conn.session
    v5 = conn.level == _LEVEL_5
    sub_id = 0
    if v5:
        sub_id = prop_get(pkt.props, _PROP_SUBSCRIPTION_IDENTIFIER, 0)
        if sub_id and not broker.settings.subscription_identifiers:
            raise MqttError(_RC_SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED, "no subscription identifiers")
    if broker.rates is not None:
        broker.rates.charge(broker, conn, 2, len(pkt.topics), now)  # (ratelimit.py)
    codes = []
    owed = []  # the subscriptions that get retained messages
    mount = None if conn.extras is None else conn.extras.mount
    if mount is not None:
        from common.broker.listener_policy import mount_filter  # (host only: a board has no mount point)
    for flt, options in pkt.topics:
        if mount is not None:
            flt = mount_filter(mount, flt)  # its listener's mount point (listener_policy.py)
        code, sub = _subscribe_one(broker, session, flt, options, sub_id, v5, now)
        if code >= 0x80 and not v5:
            code = _SUBACK_FAILURE_311  # 3.1.1 knows one failure code
        codes.append(code)
        if sub is not None:
            owed.append(sub)
    broker.output.write(conn, encode_packet(Suback(pkt.packet_id, codes, None), conn.level))
    if owed:
        replay.start(broker, conn, owed, now)


def _subscribe_one(broker, session, flt, options, sub_id, v5, now):
    """Subscribe one filter: (reason code, subscription to replay or None)."""
    s = broker.settings
    qos = options & _SUBOPT_QOS_MASK
    no_local = options & _SUBOPT_NO_LOCAL != 0
    share_name, inner = parse_shared(flt)
    if inner is None:
        return _RC_TOPIC_FILTER_INVALID, None
    if share_name is not None:
        if not s.shared_subscriptions:
            return _RC_SHARED_SUBSCRIPTIONS_NOT_SUPPORTED, None
        if no_local and v5:
            raise ProtocolError("No Local on a shared subscription")  # [MQTT-3.8.3-4]
    if validate_topic_filter(inner, s.max_topic_levels, s.max_topic_length):
        return _RC_TOPIC_FILTER_INVALID, None
    if not s.wildcard_subscriptions and ("+" in inner or "#" in inner):
        return _RC_WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED, None
    for denied in s.deny_subscribe:
        if filter_covers(denied, inner):
            return _RC_NOT_AUTHORIZED, None
    acl = session.conn.acl
    if acl is not None and not acl.may_subscribe(inner):
        # Granted only if every topic it can match is readable; a shared
        # subscription is judged on its inner filter (acl.py).
        broker.stats.denied_subscribe += 1
        broker.log(30, "%s: SUBSCRIBE %s refused: the ACL does not let user %s read every topic it matches", (session.client_id, flt, session.conn.user))
        return _RC_NOT_AUTHORIZED, None
    if broker.hook is not None and broker.hook.denied(session.conn, False, flt):
        broker.hook.refused(broker, session, "SUBSCRIBE", flt, now)  # (external_auth.py)
        return _RC_NOT_AUTHORIZED, None
    if qos > s.maximum_qos:
        qos = s.maximum_qos  # [MQTT-3.8.4-6] grant less than asked
    sub = session.subs.get(flt)
    is_new = sub is None
    if is_new:
        if len(session.subs) >= s.max_subscriptions_per_client:
            return _RC_QUOTA_EXCEEDED, None
        sub = broker.add_subscription(session, flt)
        if sub is None:
            return _RC_QUOTA_EXCEEDED, None
    rh = (options & _SUBOPT_RETAIN_HANDLING_MASK) >> _SUBOPT_RETAIN_HANDLING_SHIFT
    sub.set_options(qos, no_local, options & _SUBOPT_RETAIN_AS_PUBLISHED != 0, rh, sub_id)
    broker.listener.sub_saved(session, sub)
    if (
        share_name is not None
        or rh == _RETAIN_HANDLING_DONT_SEND
        or (rh == _RETAIN_HANDLING_SEND_IF_NEW and not is_new)
    ):
        return qos, None  # no retained messages for a shared subscription (v5 4.8.2)
    return qos, sub


def handle_unsubscribe(broker, conn, pkt, now):
    session = conn.session
    codes = []
    mount = None if conn.extras is None else conn.extras.mount
    if mount is not None:
        from common.broker.listener_policy import mount_filter
    for flt in pkt.filters:
        sub = session.subs.get(flt if mount is None else mount_filter(mount, flt))
        if sub is None:
            codes.append(_RC_NO_SUBSCRIPTION_EXISTED)
        else:
            remove(broker, sub, now)
            codes.append(_RC_SUCCESS)
    # [MQTT-3.10.4-4] UNSUBACK even when nothing was subscribed.
    broker.output.write(conn, encode_packet(Unsuback(pkt.packet_id, codes, None), conn.level))


def remove(broker, sub, now):
    session = sub.session
    if session.conn is not None:
        replay.end(broker, session.conn)  # (a replay may name `sub`, which goes back to its pool)
    del session.subs[sub.key]
    broker.listener.sub_removed(session, sub)
    broker.routing.remove(sub)
    if sub.share is not None:
        # Its undelivered copies go to the group's other members.
        outbox.hand_over_shared(broker, session, now, sub.share[0])
    broker.sessions.sub_pool.release(sub)


def remove_all(broker, session, now):
    for sub in list(session.subs.values()):
        remove(broker, sub, now)
