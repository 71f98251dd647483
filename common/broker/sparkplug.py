# Sparkplug B 3.0 awareness (sparkplug_aware = true): docs/sparkplug.md.
#
# Theory of operation. With the setting on (or the gateway's own edge node,
# spb_node.py, whose NCMD this module hears of), the broker holds one Sparkplug
# object (Broker.sparkplug; this module is not loaded without either) and
# handle_publish asks it about every inbound PUBLISH's topic (check): a
# topic under `$sparkplug/certificates/` is refused (only the broker writes
# there) and so is a malformed one in the `spBv1.0/` namespace (an empty
# group, node or device id, an unknown message type, the wrong number of
# levels); an NBIRTH or DBIRTH is marked so that, once routed, certify()
# republishes it retained on `$sparkplug/certificates/<its topic>`
# [tck-id-conformance-mqtt-aware-nbirth-mqtt-topic] and stores it like
# every retained message [tck-id-conformance-mqtt-aware-store] -- but only
# if the publisher's own ACL lets it write that topic: the derived publish
# is the publisher's (refused, counted as denied_publish and logged when
# not; Mosquitto's plugin skips this check: eclipse-mosquitto #3673).
# A will is judged the same way when it is sent (will_payload), and an
# NDEATH will gets the time it is sent as its timestamp (protobuf field 1
# of the Payload) when the shell gave a wall clock (Broker.wall_ms)
# [tck-id-conformance-mqtt-aware-ndeath-timestamp].
#
# Costs: nothing when off (one attribute test per PUBLISH); when on, a few
# str.find calls per PUBLISH in the namespace, one Publish and the new
# topic per birth, one new payload per NDEATH will.

from common.broker.handle_publish import write_denied
from common.broker.protobuf import has_true_metric, stamp
from common.broker.route import route
from common.compat import const
from common.mqtt import consts as C
from common.mqtt.packets import Publish

NAMESPACE = "spBv1.0/"
CERTIFICATES = "$sparkplug/certificates/"
REBIRTH = "Node Control/Rebirth"  # the metric of an NBIRTH, and of an NCMD asking for one

# What check() makes of a topic.
_PLAIN = const(0)  # not Sparkplug, or a valid topic of it that needs nothing
_BIRTH = const(1)  # NBIRTH / DBIRTH: certified once routed
_NDEATH = const(2)  # an NDEATH (a will's timestamp)
_BAD = const(3)  # a malformed topic in the namespace
_CERTS = const(4)  # under $sparkplug/certificates/: the broker's own

# The message types and the topic levels after the group id each takes:
# <type>/<edge node> or <type>/<edge node>/<device> (spec 4.1).
_NODE_TYPES = ("NBIRTH", "NDEATH", "NDATA", "NCMD")
_DEVICE_TYPES = ("DBIRTH", "DDEATH", "DDATA", "DCMD")


def classify(topic):
    """What `topic` is to an aware broker: one of the _PLAIN.._CERTS kinds."""
    if topic.startswith(CERTIFICATES):
        return _CERTS
    if not topic.startswith(NAMESPACE):
        return _PLAIN
    # Empty parts: an id may not be empty (spec 4.1.1); wildcards cannot be
    # in a topic name (the codec refuses them), so this is the rest of it.
    if topic.endswith("/") or topic.find("//") >= 0:
        return _BAD
    g = topic.find("/", len(NAMESPACE))  # the end of the group id
    if g < 0:
        return _BAD
    levels = topic.count("/") + 1
    if topic.startswith("STATE/", len(NAMESPACE)):
        # spBv1.0/STATE/<host id> (3.0): the group position holds STATE.
        return _PLAIN if levels == 3 else _BAD
    t = topic.find("/", g + 1)  # the end of the message type
    if t < 0:
        return _BAD
    kind = topic[g + 1 : t]
    if kind in _NODE_TYPES:
        if levels != 4:
            return _BAD
        return _BIRTH if kind == "NBIRTH" else _NDEATH if kind == "NDEATH" else _PLAIN
    if kind in _DEVICE_TYPES and levels == 5:
        return _BIRTH if kind == "DBIRTH" else _PLAIN
    return _BAD


def _refusal(kind):
    if kind == _CERTS:
        return C.RC_NOT_AUTHORIZED, "only the broker publishes under $sparkplug/certificates/"
    return C.RC_TOPIC_NAME_INVALID, "malformed Sparkplug topic (spBv1.0/<group>/<type>/<node>[/<device>])"


class Sparkplug:
    """The broker's Sparkplug state (sparkplug_aware, or the gateway's own
    edge node: sparkplug_group): its counters, the last check's answer."""

    def __init__(self, settings):
        self.aware = settings.sparkplug_aware
        # The gateway's own edge node's NCMD topic (spb_node.py), or None;
        # `rebirth` is set when an NCMD there asks for a rebirth.
        self.command = None
        if settings.sparkplug_group:
            self.command = NAMESPACE + settings.sparkplug_group + "/NCMD/" + settings.sparkplug_node
        self.rebirth = False
        self.refused = 0  # PUBLISHes and wills refused (malformed topic, $sparkplug/certificates/)
        self.certified = 0  # births republished under $sparkplug/certificates/
        self.stamped = 0  # NDEATH wills sent with the time they were sent
        self.after = False  # the PUBLISH check() saw last wants after_route() once routed
        self.text = None  # why check() refused it

    def check(self, broker, client_id, topic, now):
        """The reason code refusing a client's PUBLISH to `topic` (0: none;
        then `after` says whether after_route() follows its routing: a
        birth, the edge node's NCMD); a refusal is counted and logged
        (`text` says why)."""
        if topic == self.command:
            self.after = True
            return 0
        self.after = False
        if not self.aware:
            return 0
        kind = classify(topic)
        self.after = kind == _BIRTH
        if kind < _BAD:
            return 0
        reason, self.text = _refusal(kind)
        self._refuse(broker, client_id, "PUBLISH", topic, self.text, now)
        return reason

    def _refuse(self, broker, client_id, what, topic, why, now):
        self.refused += 1
        if now >= broker.denied_log_at:
            broker.denied_log_at = now + 1  # (the ACL's one line a second, shared)
            broker.log(30, "%s: %s to %s refused: %s (%d refused so far)", (client_id, what, topic, why, self.refused))

    def after_route(self, broker, conn, props, topic, payload, qos, now):
        """After a PUBLISH check() marked was routed: the edge node's NCMD
        (a rebirth asked for), or an NBIRTH/DBIRTH to `topic`, republished
        retained under $sparkplug/certificates/ if the publisher may write
        there [tck-id-conformance-mqtt-aware-nbirth-mqtt-retain]
        [tck-id-conformance-mqtt-aware-dbirth-mqtt-retain]."""
        if topic == self.command:
            if has_true_metric(payload, REBIRTH):
                self.rebirth = True
            return
        cert = CERTIFICATES + topic
        session = conn.session
        if conn.acl is not None and write_denied(broker, conn.acl, session, conn.user, cert, now, "certificate"):
            return
        self.certified += 1
        route(broker, session.client_id, Publish(cert, None, qos, True, False, 0, props), payload, 0, now)

    def will_payload(self, broker, session, topic, payload, now):
        """The payload a will to `topic` goes with as it is sent: None if it
        may not go (refused as check() refuses a PUBLISH), an NDEATH's with
        the time now as its timestamp when there is a wall clock."""
        if not self.aware:
            return payload
        kind = classify(topic)
        if kind >= _BAD:
            self._refuse(broker, session.client_id, "will", topic, _refusal(kind)[1], now)
            return None
        # Without a wall clock (Broker.wall_ms None: a board without a
        # trusted clock) the node's own timestamp stays (the spec's MAY).
        if kind == _NDEATH and broker.wall_ms is not None:
            stamped = stamp(payload, broker.wall_ms())
            if stamped is not None:
                self.stamped += 1
                return stamped
            broker.log(30, "%s: NDEATH will to %s sent as it was: its payload is not a Sparkplug protobuf", (session.client_id, topic))
        return payload
