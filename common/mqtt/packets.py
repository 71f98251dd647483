"""MQTT control packets: classes and the symmetric ``decode_*``/``encode_*`` pairs.

Theory of operation
-------------------
``decode_packet(first_byte, buf, start, end, level)`` checks the fixed header
(type, reserved flags [MQTT-2.2.2-1, -2]) and dispatches through ``DECODERS``,
a tuple indexed by packet type, to ``decode_<type>(first_byte, buf, start,
end, level)``. ``buf[start:end]`` is the packet body (what the Remaining
Length announced); every decoder must consume exactly that: bytes left over
are a malformed packet. ``level`` is the connection's protocol level (3 and 4
decode alike; 5 adds reason codes and properties); CONNECT carries its own.

``encode_packet(pkt, level)`` dispatches through ``ENCODERS`` (and, for the
packets only a client sends, client_packets.py's ``CLIENT_ENCODERS``); each encoder
adds up the size, allocates once and writes front to back, in the shortest
form the spec allows (3.4.2.1, 3.14.2.1, 3.15.2.1). Encoders do not police
their caller (a test may send a bad packet on purpose). ``decode_packet``
turns any stray low-level exception into ``MalformedPacket`` as a last guard.
"""

from common.compat import JOIN_PARTS_FASTER as _JOIN_PARTS  # encode_publish's per-message path
from common.compat import STRUCT_ERROR, const
from common.mqtt import consts as C
from common.mqtt.codec import (
    check_end,
    decode_bin,
    decode_packet_id,
    decode_str,
    decode_u8,
    decode_u16,
    decode_vbi,
    new_packet_buffer,
    take_bytes,
    utf8_bytes,
    vbi_size,
    write_prefixed,
    write_raw,
    write_u8,
    write_u16,
    write_u32,
    write_vbi,
)
from common.mqtt.errors import (
    MalformedPacket,
    MqttError,
    ProtocolError,
    TopicNameInvalid,
    UnsupportedProtocol,
)
from common.mqtt.properties import (
    decode_properties,
    decode_reason_props,
    encode_property_items,
    encode_reason_props,
    prop_get,
    properties_size,
    write_properties,
)
from common.mqtt.utf8 import decode_utf8

# The wire constants this module uses, as private const()s with the values
# of common/mqtt/consts.py's names (tests/core/test_const_mirrors.py checks
# each): MicroPython folds them into the bytecode, where C.NAME takes a
# global and an attribute load at every use (about 1 KB of a board's heap
# over the per-packet modules, docs/boards.md).
_AUTH = const(15)
_CONNACK = const(2)
_CONNECT = const(1)
_DISCONNECT = const(14)
_LEVEL_5 = const(5)
_PINGREQ = const(12)
_PINGRESP = const(13)
_PROP_AUTHENTICATION_DATA = const(0x16)
_PROP_AUTHENTICATION_METHOD = const(0x15)
_PROP_MESSAGE_EXPIRY_INTERVAL = const(0x02)
_PROP_SUBSCRIPTION_IDENTIFIER = const(0x0B)
_PROP_TOPIC_ALIAS = const(0x23)
_PUBACK = const(4)
_PUBLISH = const(3)
_PUBLISH_DUP = const(0x08)
_PUBLISH_PID_SHIFT = const(6)
_PUBLISH_QOS_MASK = const(0x03)
_PUBLISH_RETAIN = const(0x04)
_PUBREC = const(5)
_PUBREL = const(6)
_SUBACK = const(9)
_SUBSCRIBE = const(8)
_UNSUBACK = const(11)
_UNSUBSCRIBE = const(10)
_WILL = const(16)

# ---------------------------------------------------------------------------
# Packet classes: plain attributes, keyword defaults, ``ptype`` on every one.
# ---------------------------------------------------------------------------


class Packet:
    """A packet's type; its fields are plain attributes (no field table, no
    __eq__ or __repr__: only tests compare or print packets, by their
    attributes, tests/core/packet_fields.py; on a board that code and those
    tables would cost heap)."""

    ptype = 0


class Connect(Packet):
    """A CONNECT: its four fixed fields positionally, the others (a will, a
    user name and password, properties, the protocol name) by keyword; what
    is not given keeps its default, a class attribute below."""

    ptype = _CONNECT
    will_topic = None  # None: no will
    will_payload = None
    will_qos = 0
    will_retain = False
    will_props = None
    username = None  # None: flag clear
    password = None  # bytes, None: flag clear
    props = None
    proto_name = None  # None: the one of `level` ("MQIsdp" for 3, "MQTT")

    def __init__(self, level=4, clean_start=True, keep_alive=0, client_id="", **fields):
        self.level = level
        self.clean_start = clean_start
        self.keep_alive = keep_alive
        self.client_id = client_id
        for name in fields:
            if name[0] == "_" or name == "ptype" or not hasattr(Connect, name):
                raise TypeError(name)  # not a field of CONNECT (one with its default below)
            setattr(self, name, fields[name])
        if self.proto_name is None:
            self.proto_name = "MQIsdp" if level == 3 else "MQTT"


class Connack(Packet):
    ptype = _CONNACK

    def __init__(self, session_present=False, reason=0, props=None):
        self.session_present = session_present
        self.reason = reason  # v5 reason code, or 3.1.1 return code
        self.props = props


class Publish(Packet):
    ptype = _PUBLISH

    def __init__(self, topic="", payload=b"", qos=0, retain=False, dup=False,
                 packet_id=0, props=None):
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.dup = dup
        self.packet_id = packet_id  # 0 for QoS 0 (no packet identifier)
        self.props = props


class PubAck(Packet):
    """PUBACK, PUBREC, PUBREL or PUBCOMP (``ptype`` says which)."""


    def __init__(self, ptype=_PUBACK, packet_id=0, reason=0, props=None):
        self.ptype = ptype
        self.packet_id = packet_id
        self.reason = reason
        self.props = props


class Subscribe(Packet):
    ptype = _SUBSCRIBE

    def __init__(self, packet_id=0, topics=None, props=None):
        self.packet_id = packet_id
        self.topics = topics if topics is not None else []  # [(filter, options byte)]
        self.props = props


class Suback(Packet):
    ptype = _SUBACK

    def __init__(self, packet_id=0, reasons=None, props=None):
        self.packet_id = packet_id
        self.reasons = reasons if reasons is not None else []
        self.props = props


class Unsubscribe(Packet):
    ptype = _UNSUBSCRIBE

    def __init__(self, packet_id=0, filters=None, props=None):
        self.packet_id = packet_id
        self.filters = filters if filters is not None else []
        self.props = props


class Unsuback(Packet):
    ptype = _UNSUBACK

    def __init__(self, packet_id=0, reasons=None, props=None):
        self.packet_id = packet_id
        self.reasons = reasons if reasons is not None else []  # [] at 3.1.1
        self.props = props


class Pingreq(Packet):
    ptype = _PINGREQ


class Pingresp(Packet):
    ptype = _PINGRESP


class Disconnect(Packet):
    ptype = _DISCONNECT

    def __init__(self, reason=0, props=None):
        self.reason = reason
        self.props = props


class Auth(Packet):
    ptype = _AUTH

    def __init__(self, reason=0, props=None):
        self.reason = reason
        self.props = props


# ---------------------------------------------------------------------------
# Decoders: (first_byte, buf, start, end, level) -> packet
# ---------------------------------------------------------------------------


def check_topic_name(topic):
    if "+" in topic or "#" in topic:
        raise TopicNameInvalid("wildcard in a topic name")  # [MQTT-3.3.2-2]


def decode_connect(first, buf, start, end, level):
    name, i = decode_str(buf, start, end)
    lvl, i = decode_u8(buf, i, end)
    # The protocol name and level decide how to read the rest: stop here if
    # they are not ours [MQTT-3.1.2-1, -2].
    if name == "MQTT":
        if lvl != 4 and lvl != 5:
            raise UnsupportedProtocol("protocol level %d" % lvl)
    elif name == "MQIsdp":
        if lvl != 3:
            raise UnsupportedProtocol("MQIsdp with level %d" % lvl)
    elif lvl == 5:
        # 5.0 [MQTT-3.1.2-1]: may answer CONNACK 0x84 before closing.
        raise UnsupportedProtocol("unknown protocol name with level 5")
    else:
        raise ProtocolError("unknown protocol name")  # 3.1.1 [MQTT-3.1.2-1]: close
    flags, i = decode_u8(buf, i, end)
    if flags & 0x01:
        raise MalformedPacket("CONNECT reserved flag set")  # [MQTT-3.1.2-3]
    will = flags & 0x04
    will_qos = (flags >> 3) & 3
    will_retain = flags & 0x20
    if will:
        if will_qos == 3:
            # 3.1.1 [MQTT-3.1.2-14], 5.0 [MQTT-3.1.2-12]
            raise MalformedPacket("will QoS 3")
    elif will_qos or will_retain:
        # 3.1.1 [MQTT-3.1.2-11, -13, -15], 5.0 [MQTT-3.1.2-11, -13]
        raise MalformedPacket("will QoS or retain without will flag")
    if lvl != 5 and flags & 0x40 and not flags & 0x80:
        # 3.1.1 [MQTT-3.1.2-22]; 5.0 allows a password without a user name
        raise MalformedPacket("password flag without user name flag")
    pkt = Connect(lvl, (flags & 0x02) != 0, 0, "", proto_name=name)
    pkt.keep_alive, i = decode_u16(buf, i, end)
    if lvl == 5:
        props, i = decode_properties(buf, i, end, _CONNECT)
        if prop_get(props, _PROP_AUTHENTICATION_DATA) is not None and prop_get(props, _PROP_AUTHENTICATION_METHOD) is None:
            raise ProtocolError("Authentication Data without an Authentication Method")  # v5 3.1.2.11.10
        pkt.props = props
    pkt.client_id, i = decode_str(buf, i, end)
    if will:
        if lvl == 5:
            pkt.will_props, i = decode_properties(buf, i, end, _WILL)
        topic, i = decode_str(buf, i, end)
        if not topic:
            raise TopicNameInvalid("empty will topic")  # [MQTT-4.7.3-1]
        check_topic_name(topic)
        pkt.will_topic = topic
        pkt.will_payload, i = decode_bin(buf, i, end)
        pkt.will_qos = will_qos
        pkt.will_retain = will_retain != 0
    if flags & 0x80:
        pkt.username, i = decode_str(buf, i, end)
    if flags & 0x40:
        pkt.password, i = decode_bin(buf, i, end)
    check_end(i, end)
    return pkt


def connect_level(buf):
    """The protocol level byte of the CONNECT at ``buf[0]``, or 0 if not there.

    Reads only the fixed header, the protocol name's length and the level, and
    checks nothing else, so that a CONNECT that fails decode_connect can still
    be answered in its own dialect (v5: CONNACK 0x81/0x82, 4.13.1).
    """
    n = len(buf)
    try:
        length, i = decode_vbi(buf, 1, n)
        end = min(i + length, n)
        name_len, i = decode_u16(buf, i, end)
        return decode_u8(buf, i + name_len, end)[0]
    except MqttError:
        return 0


def decode_publish(first, buf, start, end, level):
    pkt = Publish()
    pkt.payload = take_bytes(buf, decode_publish_into(pkt, first, buf, start, end, level, None), end)
    return pkt


def decode_publish_into(pkt, first, buf, start, end, level, topics):
    """Fill the Publish `pkt` from a PUBLISH body but its payload: the offset
    where the payload starts in `buf` is returned (it ends at `end`).

    `topics`, the broker's TopicCache (common/broker/route.py) or
    None: a topic name found there comes out as the str decoded and checked
    when it was first seen, with no new object; a new one is offered to it.
    """
    qos = (first >> 1) & 3
    if qos == 3:
        raise MalformedPacket("PUBLISH with QoS 3")  # [MQTT-3.3.1-4]
    dup = first & 0x08
    if dup and not qos:
        raise ProtocolError("DUP set on a QoS 0 PUBLISH")  # [MQTT-3.3.1-2]
    # decode_str and decode_packet_id, inlined: this runs for every message.
    if start + 2 > end:
        raise MalformedPacket("truncated string length")
    a = start + 2
    i = a + ((buf[start] << 8) | buf[start + 1])
    if i > end:
        raise MalformedPacket("string runs past the end")
    tend = i
    topic = topics.find(buf, a, i) if topics is not None and i > a else None
    fresh = topic is None
    if fresh:
        topic = decode_utf8(buf, a, i)
    pid = 0
    if qos:
        if i + 2 > end:
            raise MalformedPacket("truncated two byte integer")
        pid = (buf[i] << 8) | buf[i + 1]
        if pid == 0:
            raise ProtocolError("packet identifier 0")  # [MQTT-2.3.1-1]
        i += 2
    props = None
    if level == _LEVEL_5:
        props, i = decode_properties(buf, i, end, _PUBLISH)
    if not topic:
        if level != _LEVEL_5:
            raise TopicNameInvalid("empty topic name")  # [MQTT-4.7.3-1]
        if prop_get(props, _PROP_TOPIC_ALIAS) is None:
            # 3.3.2.1: a zero-length topic needs a Topic Alias (resolved by the broker)
            raise ProtocolError("empty topic name without a topic alias")
    elif fresh:
        check_topic_name(topic)
        if topics is not None:
            topics.add(buf, a, tend, topic)
    pkt.topic = topic
    pkt.qos = qos
    pkt.retain = (first & 1) != 0
    pkt.dup = dup != 0
    pkt.packet_id = pid
    pkt.props = props
    return i


def decode_puback(first, buf, start, end, level):
    return decode_puback_into(PubAck(), first, buf, start, end, level)


def decode_puback_into(pkt, first, buf, start, end, level):
    """PUBACK, PUBREC, PUBREL or PUBCOMP into the PubAck `pkt` (reused)."""
    ptype = first >> 4
    # decode_packet_id, inlined: no (value, offset) tuple per ack.
    if start + 2 > end:
        raise MalformedPacket("truncated two byte integer")
    pid = (buf[start] << 8) | buf[start + 1]
    if pid == 0:
        raise ProtocolError("packet identifier 0")  # [MQTT-2.3.1-1]
    i = start + 2
    reason = 0
    props = None
    if level == _LEVEL_5 and i < end:
        # Remaining Length 2: reason 0, no properties; 3: no properties (3.4.2.1)
        reason = buf[i]
        i += 1
        allowed = C.REASONS_PUBACK if ptype == _PUBACK or ptype == _PUBREC else C.REASONS_PUBREL
        if reason not in allowed:
            raise ProtocolError("invalid reason code for %s" % C.PACKET_NAMES[ptype])
        if i < end:
            props, i = decode_properties(buf, i, end, ptype)
    check_end(i, end)
    pkt.ptype = ptype
    pkt.packet_id = pid
    pkt.reason = reason
    pkt.props = props
    return pkt


def decode_subscribe(first, buf, start, end, level):
    pid, i = decode_packet_id(buf, start, end)
    props = None
    if level == _LEVEL_5:
        props, i = decode_properties(buf, i, end, _SUBSCRIBE)
    topics = []
    while i < end:
        filt, i = decode_str(buf, i, end)
        opts, i = decode_u8(buf, i, end)
        if level == _LEVEL_5:
            if opts & 0xC0:
                raise MalformedPacket("subscription options reserved bits")  # [MQTT-3.8.3-5]
            if opts & 0x03 == 3:
                raise ProtocolError("subscription QoS 3")  # 3.8.3.1
            if opts & 0x30 == 0x30:
                raise ProtocolError("retain handling 3")  # 3.8.3.1
        elif opts & 0xFC or opts == 3:
            raise MalformedPacket("bad requested QoS byte")  # 3.1.1 [MQTT-3-8.3-4]
        topics.append((filt, opts))
    if not topics:
        # 3.1.1 [MQTT-3.8.3-3], 5.0 [MQTT-3.8.3-2]
        raise ProtocolError("SUBSCRIBE without topic filters")
    return Subscribe(pid, topics, props)


def decode_unsubscribe(first, buf, start, end, level):
    pid, i = decode_packet_id(buf, start, end)
    props = None
    if level == _LEVEL_5:
        props, i = decode_properties(buf, i, end, _UNSUBSCRIBE)
    filters = []
    while i < end:
        filt, i = decode_str(buf, i, end)
        filters.append(filt)
    if not filters:
        raise ProtocolError("UNSUBSCRIBE without topic filters")  # [MQTT-3.10.3-2]
    return Unsubscribe(pid, filters, props)


def decode_ping(first, buf, start, end, level):
    check_end(start, end)  # PINGREQ and PINGRESP have no body
    return Pingreq() if first >> 4 == _PINGREQ else Pingresp()


def decode_disconnect_auth(first, buf, start, end, level):
    if first >> 4 == _AUTH:
        return Auth(*decode_reason_props(buf, start, end, level, _AUTH, C.REASONS_AUTH))
    return Disconnect(*decode_reason_props(buf, start, end, level, _DISCONNECT, C.REASONS_DISCONNECT))


def decode_client_only(first, buf, start, end, level):
    # CONNACK, SUBACK, UNSUBACK: only a client receives them, so their checks
    # live in client_packets.py, out of a broker's heap (a client sending
    # one to the broker loads them to be told off the same way).
    from common.mqtt.client_packets import CLIENT_DECODERS  # (never on the broker's path)

    ptype = first >> 4
    made = Connack if ptype == _CONNACK else Suback if ptype == _SUBACK else Unsuback
    return made(*CLIENT_DECODERS[ptype](buf, start, end, level))


DECODERS = (
    None, decode_connect, decode_client_only, decode_publish, decode_puback,
    decode_puback, decode_puback, decode_puback, decode_subscribe, decode_client_only,
    decode_unsubscribe, decode_client_only, decode_ping, decode_ping,
    decode_disconnect_auth, decode_disconnect_auth,
)


def check_fixed_header(first_byte, level):
    """The packet type and the reserved flags of a fixed header."""
    ptype = first_byte >> 4
    flags = first_byte & 0x0F
    if ptype == 0:
        raise MalformedPacket("packet type 0 is reserved")  # 2.1.2
    if ptype == _AUTH and level != _LEVEL_5:
        raise MalformedPacket("AUTH before MQTT 5")  # 3.1.1 2.2.1: type 15 reserved
    if ptype == _PUBREL or ptype == _SUBSCRIBE or ptype == _UNSUBSCRIBE:
        if flags != 0x02:
            raise MalformedPacket("fixed header flags must be 0010")  # [MQTT-2.2.2-1, -2]
    elif flags and ptype != _PUBLISH:
        raise MalformedPacket("fixed header flags must be 0000")  # [MQTT-2.2.2-1, -2]
    return ptype


# What a decoder may raise on bytes it did not expect, besides MqttError:
# the last guard turns it into the answer the spec gives to bad bytes.
UNDECODABLE = (IndexError, ValueError, TypeError, KeyError, UnicodeError, STRUCT_ERROR, OverflowError)


def decode_packet(first_byte, buf, start, end, level):
    """Decode one packet body ``buf[start:end]`` whose first byte is ``first_byte``."""
    ptype = check_fixed_header(first_byte, level)
    try:
        return DECODERS[ptype](first_byte, buf, start, end, level)
    except MqttError:
        raise
    except UNDECODABLE:
        # Last guard: the decoders bound-check by design; this only turns a
        # missed case into the answer the spec gives to bad bytes.
        raise MalformedPacket("undecodable packet")


def decode_packet_into(pkt, first_byte, buf, start, end, level, topics):
    """decode_packet into a reused object, for the per-message packets: a
    Publish for a PUBLISH (its payload left in `buf`: the offset where it
    starts is returned, see decode_publish_into), a PubAck for PUBACK ..
    PUBCOMP (returns `end`)."""
    ptype = check_fixed_header(first_byte, level)
    try:
        if ptype == _PUBLISH:
            return decode_publish_into(pkt, first_byte, buf, start, end, level, topics)
        decode_puback_into(pkt, first_byte, buf, start, end, level)
        return end
    except MqttError:
        raise
    except UNDECODABLE:
        raise MalformedPacket("undecodable packet")


# ---------------------------------------------------------------------------
# Encoders: (pkt, level) -> bytes
# ---------------------------------------------------------------------------


def encode_connack(p, level):
    size = 2
    if level == _LEVEL_5:
        psize = properties_size(p.props)
        size += vbi_size(psize) + psize
    buf, off = new_packet_buffer(0x20, size)
    off = write_u8(buf, off, 1 if p.session_present else 0)
    off = write_u8(buf, off, p.reason)
    if level == _LEVEL_5:
        write_properties(buf, off, p.props, psize)
    return bytes(buf)


def encode_publish(p, level):
    bits = p.qos | p.packet_id << _PUBLISH_PID_SHIFT
    if p.retain:
        bits |= _PUBLISH_RETAIN
    if p.dup:
        bits |= _PUBLISH_DUP
    return encode_publish_parts(p.topic, p.payload, bits, level, encode_property_items(p.props) if level == _LEVEL_5 else None)


def publish_first_byte(bits):
    """A PUBLISH's first byte for its `bits` (consts.PUBLISH_*)."""
    first = 0x30 | (bits & _PUBLISH_QOS_MASK) << 1
    if bits & _PUBLISH_DUP:
        first |= 0x08
    if bits & _PUBLISH_RETAIN:
        first |= 0x01
    return first


def encode_publish_parts(topic, payload, bits, level, items):
    """A PUBLISH from its fields, as the broker sends one per delivery:
    `bits` are its QoS, retain and DUP flags and packet id
    (consts.PUBLISH_*); v5 only, `items` its properties already encoded
    (``encode_property_items``, None for none: Property Length 0)."""
    if items and level == _LEVEL_5:
        return encode_publish_props(topic, payload, bits, items, -1, None, 0)
    first = publish_first_byte(bits)
    qos = bits & _PUBLISH_QOS_MASK
    packet_id = bits >> _PUBLISH_PID_SHIFT
    topic = utf8_bytes(topic)
    payload = payload or b""
    tlen = len(topic)
    size = 2 + tlen + len(payload)
    if qos:
        size += 2
    # The per-message path: the generic steps of encode_publish_props
    # inlined (same two allocations, a third of the interpreted calls).
    if level == _LEVEL_5:
        size += 1  # Property Length 0
    if tlen > 65535:
        raise ValueError("string or binary data longer than 65535 bytes")
    if _JOIN_PARTS and size < 128:
        if qos:
            if level == _LEVEL_5:
                mid = bytes((packet_id >> 8, packet_id & 0xFF, 0))
            else:
                mid = bytes((packet_id >> 8, packet_id & 0xFF))
        else:
            mid = b"\x00" if level == _LEVEL_5 else b""
        return b"".join((bytes((first, size, tlen >> 8, tlen & 0xFF)), topic, mid, payload))
    if size < 128:
        buf = bytearray(2 + size)
        buf[1] = size
        off = 2
    else:
        buf, off = new_packet_buffer(first, size)
    buf[0] = first
    buf[off] = tlen >> 8
    buf[off + 1] = tlen & 0xFF
    off += 2
    buf[off:off + tlen] = topic
    off += tlen
    if qos:
        buf[off] = packet_id >> 8
        buf[off + 1] = packet_id & 0xFF
        off += 2
    if level == _LEVEL_5:
        off += 1  # Property Length 0 (the buffer is zeroed)
    buf[off:] = payload
    return bytes(buf)


def encode_publish_props(topic, payload, bits, items, expiry, sub_ids, alias):
    """A v5 PUBLISH with properties, as the broker sends one per delivery.

    ``items`` are properties already encoded (``encode_property_items``,
    None for none), written first, then the per-delivery ones: Message
    Expiry Interval ``expiry`` (-1: none), a Subscription Identifier for
    each of ``sub_ids`` (None: none), Topic Alias ``alias`` (0: none). The
    same bytes as ``encode_publish`` of those properties in that order; no
    Publish object, and the forwarded properties are not encoded again for
    each subscriber. `bits` as for encode_publish_parts.
    """
    if not (items or sub_ids or alias or expiry >= 0):
        return encode_publish_parts(topic, payload, bits, _LEVEL_5, None)
    qos = bits & _PUBLISH_QOS_MASK
    topic = utf8_bytes(topic)
    payload = payload or b""
    size = 2 + len(topic) + len(payload)
    if qos:
        size += 2
    psize = len(items) if items else 0
    if expiry >= 0:
        psize += 5
    if sub_ids:
        for sub_id in sub_ids:
            psize += 1 + vbi_size(sub_id)
    if alias:
        psize += 3
    buf, off = new_packet_buffer(publish_first_byte(bits), size + vbi_size(psize) + psize)
    off = write_prefixed(buf, off, topic)
    if qos:
        off = write_u16(buf, off, bits >> _PUBLISH_PID_SHIFT)
    off = write_vbi(buf, off, psize)
    if items:
        n = len(items)
        buf[off:off + n] = items
        off += n
    if expiry >= 0:
        buf[off] = _PROP_MESSAGE_EXPIRY_INTERVAL
        off = write_u32(buf, off + 1, expiry)
    if sub_ids:
        for sub_id in sub_ids:
            buf[off] = _PROP_SUBSCRIPTION_IDENTIFIER
            off = write_vbi(buf, off + 1, sub_id)
    if alias:
        buf[off] = _PROP_TOPIC_ALIAS
        off = write_u16(buf, off + 1, alias)
    write_raw(buf, off, payload)
    return bytes(buf)


def encode_puback(p, level):
    ptype = p.ptype
    first = (ptype << 4) | (0x02 if ptype == _PUBREL else 0)
    if not p.reason and (level != _LEVEL_5 or not p.props):
        pid = p.packet_id  # the per-message path: 4 bytes
        return bytes((first, 2, pid >> 8, pid & 0xFF))
    size = 2
    psize = 0
    if level == _LEVEL_5:
        if p.props:
            psize = properties_size(p.props)
            size = 3 + vbi_size(psize) + psize
        elif p.reason:
            size = 3  # 3.4.2.2.1: Remaining Length 3 means no property length
    buf, off = new_packet_buffer(first, size)
    off = write_u16(buf, off, p.packet_id)
    if size > 2:
        off = write_u8(buf, off, p.reason)
        if size > 3:
            write_properties(buf, off, p.props, psize)
    return bytes(buf)


def encode_ack_list(first, p, level, with_reasons):
    """SUBACK and UNSUBACK: packet id, v5 properties, one reason per filter."""
    reasons = p.reasons if with_reasons else ()
    size = 2 + len(reasons)
    if level == _LEVEL_5:
        psize = properties_size(p.props)
        size += vbi_size(psize) + psize
    buf, off = new_packet_buffer(first, size)
    off = write_u16(buf, off, p.packet_id)
    if level == _LEVEL_5:
        off = write_properties(buf, off, p.props, psize)
    for r in reasons:
        buf[off] = r
        off += 1
    return bytes(buf)


def encode_suback(p, level):
    return encode_ack_list(0x90, p, level, True)


def encode_unsuback(p, level):
    # 3.1.1 UNSUBACK has no payload (3.1.1 3.11.3)
    return encode_ack_list(0xB0, p, level, level == _LEVEL_5)


def encode_ping(p, level):
    return bytes((p.ptype << 4, 0))


def encode_disconnect(p, level):
    return encode_reason_props(0xE0, p, level)


def encode_auth(p, level):
    if level != _LEVEL_5:
        raise ValueError("AUTH exists only in MQTT 5")
    return encode_reason_props(0xF0, p, level)


# None: a packet only a client sends (CONNECT, SUBSCRIBE, UNSUBSCRIBE),
# whose encoder is in client_packets.py: the broker never sends one, so a
# board's heap does not hold their code (the client loads them).
ENCODERS = (
    None, None, encode_connack, encode_publish, encode_puback,
    encode_puback, encode_puback, encode_puback, None, encode_suback,
    None, encode_unsuback, encode_ping, encode_ping,
    encode_disconnect, encode_auth,
)


def encode_packet(pkt, level):
    """Encode ``pkt`` for a connection at protocol ``level`` (CONNECT uses its own)."""
    encode = ENCODERS[pkt.ptype]
    if encode is None:
        from common.mqtt.client_packets import CLIENT_ENCODERS  # (never on the broker's path)

        encode = CLIENT_ENCODERS[pkt.ptype]
    return encode(pkt, level)

