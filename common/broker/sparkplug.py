# Sparkplug B 3.0 awareness (sparkplug_aware = true): docs/sparkplug.md.
#
# Theory of operation. With the setting on, the broker holds one Sparkplug
# object (Broker.sparkplug; this module is not loaded without it) and
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
# of the Payload) when the shell gave a wall clock
# [tck-id-conformance-mqtt-aware-ndeath-timestamp].
#
# Costs: nothing when off (one attribute test per PUBLISH); when on, a few
# str.find calls per PUBLISH in the namespace, one Publish and the new
# topic per birth, one new payload per NDEATH will.

from common.broker.handle_publish import write_denied
from common.broker.route import route
from common.compat import const
from common.mqtt import consts as C
from common.mqtt.packets import Publish

NAMESPACE = "spBv1.0/"
CERTIFICATES = "$sparkplug/certificates/"

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
    """The aware broker's state: its counters, the last check's answer and
    the shell's wall clock."""

    def __init__(self):
        # The shell's wall clock: () -> ms since 1970 UTC, or None: an
        # NDEATH will's timestamp is then left as the node wrote it (the
        # spec's MAY; a board without a trusted clock).
        self.wall_ms = None
        self.refused = 0  # PUBLISHes and wills refused (malformed topic, $sparkplug/certificates/)
        self.certified = 0  # births republished under $sparkplug/certificates/
        self.stamped = 0  # NDEATH wills sent with the time they were sent
        self.birth = False  # the PUBLISH check() saw last is an NBIRTH/DBIRTH
        self.text = None  # why check() refused it

    def check(self, broker, client_id, topic, now):
        """The reason code refusing a client's PUBLISH to `topic` (0: none;
        then `birth` says whether certify() follows its routing); a refusal
        is counted and logged (`text` says why)."""
        kind = classify(topic)
        self.birth = kind == _BIRTH
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

    def certify(self, broker, conn, props, topic, payload, qos, now):
        """After an NBIRTH/DBIRTH to `topic` was routed: republish it
        retained under $sparkplug/certificates/, if the publisher may write
        there [tck-id-conformance-mqtt-aware-nbirth-mqtt-retain]
        [tck-id-conformance-mqtt-aware-dbirth-mqtt-retain]."""
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
        kind = classify(topic)
        if kind >= _BAD:
            self._refuse(broker, session.client_id, "will", topic, _refusal(kind)[1], now)
            return None
        if kind == _NDEATH and self.wall_ms is not None:
            stamped = stamp(payload, self.wall_ms())
            if stamped is not None:
                self.stamped += 1
                return stamped
            broker.log(30, "%s: NDEATH will to %s sent as it was: its payload is not a Sparkplug protobuf", (session.client_id, topic))
        return payload


# ------------------------------------------------------------ protobuf
# Just what a timestamp needs: the Payload's top-level fields walked by
# their wire type (0 varint, 1 fixed 64, 2 length-delimited, 5 fixed 32).


def read_varint(buf, i, end):
    """(value, next offset) of the varint at buf[i]; -1 offset: malformed."""
    value = 0
    shift = 0
    while i < end and shift < 64:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7
    return 0, -1


def write_varint(out, value):
    """Append `value` (>= 0) to the bytearray `out` as a varint."""
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def stamp(payload, ms):
    """`payload` (a Sparkplug B Payload) with timestamp = `ms` (field 1
    first, every other field as it was, in order); None if it does not
    parse as protobuf."""
    out = bytearray(b"\x08")
    write_varint(out, ms)
    i = 0
    end = len(payload)
    while i < end:
        start = i
        key, i = read_varint(payload, i, end)
        if i < 0 or key >> 3 == 0:
            return None
        wire = key & 7
        if wire == 0:
            _, i = read_varint(payload, i, end)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            size, i = read_varint(payload, i, end)
            if i >= 0:
                i += size
        else:
            return None
        if i < 0 or i > end:
            return None
        if key != 0x08:  # (the old timestamp left out)
            out.extend(payload[start:i])
    return bytes(out)
