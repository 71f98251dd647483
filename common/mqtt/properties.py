"""MQTT 5.0 properties (2.2.2): the table, decoding and encoding.

Theory of operation
-------------------
Properties travel as a Variable Byte Integer length followed by
``identifier, value`` items. In memory they are a list of ``(prop_id, value)``
in wire order (MicroPython dicts do not keep insertion order, and User
Property order is significant [MQTT-3.3.2-18]); a User Property value is a
``(name, value)`` tuple of strs; Binary Data values are bytes; UTF-8 strings
are strs; integers are ints. ``None`` or ``[]`` means "no properties", and the
decoder returns ``None`` for an empty block (no allocation).

``PROPERTIES`` maps each identifier to ``(data_type, allowed, bit)``:
``allowed`` is a bit mask of the packet types that may carry it (``1 << ptype``,
with ``_WILL`` = 16 for the Will Properties of CONNECT), ``bit`` a distinct
small bit used to spot repeats without allocating a set (every mask stays
below 2**30, so it is a small int on 32-bit ports).

Errors (2.2.2.2 and the per-property text of 3.x):
- an unknown identifier, or one not allowed in this packet: MalformedPacket;
- a property other than User Property included twice, or Subscription
  Identifier twice outside _PUBLISH: ProtocolError;
- a value the spec forbids (Receive Maximum 0, Maximum Packet Size 0,
  Subscription Identifier 0, Topic Alias 0, a 0/1 flag byte with another
  value, Maximum QoS not 0/1): ProtocolError.
"""

from common.compat import const
from common.mqtt import consts as C
from common.mqtt.codec import (
    check_end,
    decode_bin,
    decode_str,
    decode_str_pair,
    decode_u16,
    decode_u32,
    decode_vbi,
    new_packet_buffer,
    utf8_bytes,
    vbi_size,
    write_prefixed,
    write_u8,
    write_u16,
    write_u32,
    write_vbi,
)
from common.mqtt.consts import PACKET_NAMES
from common.mqtt.errors import MalformedPacket, ProtocolError

# The wire constants this module uses, as private const()s with the values
# of common/mqtt/consts.py's names (tests/core/test_const_mirrors.py checks
# each): MicroPython folds them into the bytecode, where C.NAME takes a
# global and an attribute load at every use (about 1 KB of a board's heap
# over the per-packet modules, docs/boards.md).
_AUTH = const(15)
_DISCONNECT = const(14)
_LEVEL_5 = const(5)
_PROP_RESPONSE_TOPIC = const(0x08)
_PT_BIN = const(6)
_PT_BYTE = const(1)
_PT_PAIR = const(7)
_PT_STR = const(5)
_PT_U16 = const(2)
_PT_U32 = const(3)
_PT_VBI = const(4)
_PUBLISH = const(3)
_WILL = const(16)


def _table():
    # Table 2-4 of MQTT 5.0 (2.2.2.2): id -> (data type, where allowed, repeat
    # bit). Made by a function run once at import, so that its names (the
    # packet types as bits, the property ids named only here) are not
    # globals: each would stay in a board's heap.
    connect = 1 << C.CONNECT
    connack = 1 << C.CONNACK
    publish = 1 << _PUBLISH
    acks = (1 << C.PUBACK) | (1 << C.PUBREC) | (1 << C.PUBREL) | (1 << C.PUBCOMP)
    subscribe = 1 << C.SUBSCRIBE
    suback = 1 << C.SUBACK
    unsuback = 1 << C.UNSUBACK
    disconnect = 1 << _DISCONNECT
    auth = 1 << _AUTH
    will = 1 << _WILL
    every = (
        connect | connack | publish | acks | subscribe | suback
        | (1 << C.UNSUBSCRIBE) | unsuback | disconnect | auth | will
    )  # fmt: skip
    return {
        C.PROP_PAYLOAD_FORMAT_INDICATOR: (_PT_BYTE, publish | will, 1 << 0),
        C.PROP_MESSAGE_EXPIRY_INTERVAL: (_PT_U32, publish | will, 1 << 1),
        C.PROP_CONTENT_TYPE: (_PT_STR, publish | will, 1 << 2),
        _PROP_RESPONSE_TOPIC: (_PT_STR, publish | will, 1 << 3),
        C.PROP_CORRELATION_DATA: (_PT_BIN, publish | will, 1 << 4),
        C.PROP_SUBSCRIPTION_IDENTIFIER: (_PT_VBI, publish | subscribe, 1 << 5),
        C.PROP_SESSION_EXPIRY_INTERVAL: (_PT_U32, connect | connack | disconnect, 1 << 6),
        C.PROP_ASSIGNED_CLIENT_IDENTIFIER: (_PT_STR, connack, 1 << 7),
        C.PROP_SERVER_KEEP_ALIVE: (_PT_U16, connack, 1 << 8),
        C.PROP_AUTHENTICATION_METHOD: (_PT_STR, connect | connack | auth, 1 << 9),
        C.PROP_AUTHENTICATION_DATA: (_PT_BIN, connect | connack | auth, 1 << 10),
        C.PROP_REQUEST_PROBLEM_INFORMATION: (_PT_BYTE, connect, 1 << 11),
        C.PROP_WILL_DELAY_INTERVAL: (_PT_U32, will, 1 << 12),
        C.PROP_REQUEST_RESPONSE_INFORMATION: (_PT_BYTE, connect, 1 << 13),
        C.PROP_RESPONSE_INFORMATION: (_PT_STR, connack, 1 << 14),
        C.PROP_SERVER_REFERENCE: (_PT_STR, connack | disconnect, 1 << 15),
        C.PROP_REASON_STRING: (_PT_STR, connack | acks | suback | unsuback | disconnect | auth, 1 << 16),
        C.PROP_RECEIVE_MAXIMUM: (_PT_U16, connect | connack, 1 << 17),
        C.PROP_TOPIC_ALIAS_MAXIMUM: (_PT_U16, connect | connack, 1 << 18),
        C.PROP_TOPIC_ALIAS: (_PT_U16, publish, 1 << 19),
        C.PROP_MAXIMUM_QOS: (_PT_BYTE, connack, 1 << 20),
        C.PROP_RETAIN_AVAILABLE: (_PT_BYTE, connack, 1 << 21),
        C.PROP_USER_PROPERTY: (_PT_PAIR, every, 0),  # User Property: may repeat everywhere
        C.PROP_MAXIMUM_PACKET_SIZE: (_PT_U32, connect | connack, 1 << 22),
        C.PROP_WILDCARD_SUBSCRIPTION_AVAILABLE: (_PT_BYTE, connack, 1 << 23),
        C.PROP_SUBSCRIPTION_IDENTIFIER_AVAILABLE: (_PT_BYTE, connack, 1 << 24),
        C.PROP_SHARED_SUBSCRIPTION_AVAILABLE: (_PT_BYTE, connack, 1 << 25),
    }


PROPERTIES = _table()
del _table  # (its code is not kept)

SUBSCRIPTION_IDENTIFIER_BIT = 1 << 5

# Properties whose value must be 1 or more (the text of 3.1.2.11, 3.2.2.3,
# 3.3.2.3.8, 3.3.2.3.4): Subscription Identifier (VBI 1..268435455), Receive
# Maximum, Topic Alias, Maximum Packet Size.
NONZERO_PROPS = (C.PROP_SUBSCRIPTION_IDENTIFIER, C.PROP_RECEIVE_MAXIMUM, C.PROP_TOPIC_ALIAS, C.PROP_MAXIMUM_PACKET_SIZE)


def prop_get(props, pid, default=None):
    """The value of the first property ``pid`` in ``props``, or ``default``."""
    if props:
        for p in props:
            if p[0] == pid:
                return p[1]
    return default


def decode_properties(buf, start, end, ptype):
    """Decode a property block of a packet of type ``ptype`` (or _WILL).

    Returns ``(props, new_offset)``; ``props`` is None when the block is empty.
    """
    length, i = decode_vbi(buf, start, end)
    stop = i + length
    if stop > end:
        raise MalformedPacket("property length runs past the end")
    if length == 0:
        return None, i
    pmask = 1 << ptype
    seen = 0
    props = []
    while i < stop:
        pid = buf[i]
        i += 1
        info = PROPERTIES.get(pid)
        if info is None:
            raise MalformedPacket("unknown property 0x%02X" % pid)
        dtype, allowed, bit = info
        if not allowed & pmask:
            raise MalformedPacket("property 0x%02X not allowed here" % pid)
        if bit:
            if seen & bit and not (bit == SUBSCRIPTION_IDENTIFIER_BIT and ptype == _PUBLISH):
                raise ProtocolError("property 0x%02X included twice" % pid)
            seen |= bit
        if dtype == _PT_BYTE:
            if i >= stop:
                raise MalformedPacket("truncated property")
            value = buf[i]
            i += 1
            # Every Byte property is a 0/1 flag (Maximum QoS too: 0 or 1,
            # 3.2.2.3.4; Payload Format Indicator 3.3.2.3.2).
            if value > 1:
                raise ProtocolError("property 0x%02X must be 0 or 1" % pid)
        elif dtype == _PT_U16:
            value, i = decode_u16(buf, i, stop)
        elif dtype == _PT_U32:
            value, i = decode_u32(buf, i, stop)
        elif dtype == _PT_VBI:
            value, i = decode_vbi(buf, i, stop)
        elif dtype == _PT_STR:
            value, i = decode_str(buf, i, stop)
            if pid == _PROP_RESPONSE_TOPIC and ("+" in value or "#" in value):
                raise ProtocolError("wildcard in a Response Topic")  # [MQTT-3.3.2-14]
        elif dtype == _PT_BIN:
            value, i = decode_bin(buf, i, stop)
        else:
            value, i = decode_str_pair(buf, i, stop)
        if pid in NONZERO_PROPS and value == 0:
            raise ProtocolError("property 0x%02X must not be 0" % pid)
        props.append((pid, value))
    return props, stop


def decode_property_items(items, ptype):
    """The list ``encode_property_items`` made ``items`` from (None for none).

    Off the hot path (persistence): the items get their length in front
    and go through ``decode_properties`` as a block.
    """
    if not items:
        return None
    n = len(items)
    block = bytearray(vbi_size(n) + n)
    block[write_vbi(block, 0, n):] = items
    return decode_properties(block, 0, len(block), ptype)[0]


def properties_size(props):
    """Bytes taken by the items of ``props`` (without the length prefix)."""
    size = 0
    if not props:
        return 0
    for pid, value in props:
        info = PROPERTIES.get(pid)
        if info is None:
            raise ValueError("unknown property id %r" % (pid,))
        dtype = info[0]
        if dtype == _PT_BYTE:
            size += 2
        elif dtype == _PT_U16:
            size += 3
        elif dtype == _PT_U32:
            size += 5
        elif dtype == _PT_VBI:
            size += 1 + vbi_size(value)
        elif dtype == _PT_PAIR:
            size += 5 + len(utf8_bytes(value[0])) + len(utf8_bytes(value[1]))
        else:
            size += 3 + len(utf8_bytes(value))
    return size


def write_properties(buf, off, props, size):
    """Write the block (length ``size`` from ``properties_size``) at ``off``."""
    return _write_items(buf, write_vbi(buf, off, size), props)


def encode_property_items(props):
    """The items of ``props``' block, without the block's length: a bytearray
    (not copied into bytes: a board's heap is spared the copy), None for none.

    The form a broker keeps a message's forwarded properties in: encoded
    once, then copied into each _PUBLISH next to the per-delivery properties
    (``packets.encode_publish_props``).
    """
    if not props:
        return None
    buf = bytearray(properties_size(props))
    _write_items(buf, 0, props)
    return buf


def _write_items(buf, off, props):
    if not props:
        return off
    for pid, value in props:
        dtype = PROPERTIES[pid][0]
        buf[off] = pid
        off += 1
        if dtype == _PT_BYTE:
            off = write_u8(buf, off, value)
        elif dtype == _PT_U16:
            off = write_u16(buf, off, value)
        elif dtype == _PT_U32:
            off = write_u32(buf, off, value)
        elif dtype == _PT_VBI:
            off = write_vbi(buf, off, value)
        elif dtype == _PT_PAIR:
            off = write_prefixed(buf, off, utf8_bytes(value[0]))
            off = write_prefixed(buf, off, utf8_bytes(value[1]))
        else:
            off = write_prefixed(buf, off, utf8_bytes(value))
    return off


# ---------------------------------------------------------------------------
# "Reason code, then an optional property block": DISCONNECT and AUTH bodies
# ---------------------------------------------------------------------------


def decode_reason_props(buf, start, end, level, ptype, allowed):
    """_DISCONNECT and _AUTH bodies: empty (reason 0), reason, or reason + props."""
    reason = 0
    props = None
    i = start
    if level == _LEVEL_5 and i < end:
        reason = buf[i]
        i += 1
        if reason not in allowed:
            raise ProtocolError("invalid reason code for %s" % PACKET_NAMES[ptype])
        if i < end:
            props, i = decode_properties(buf, i, end, ptype)
    check_end(i, end)
    return reason, props


def encode_reason_props(first, p, level):
    """_DISCONNECT and _AUTH: Remaining Length 0 for reason 0 and no properties,
    1 for a reason without properties (3.14.2.1, 3.15.2.1)."""
    if level != _LEVEL_5:
        return bytes((first, 0))
    if not p.props:
        if p.reason == 0:
            return bytes((first, 0))
        return bytes((first, 1, p.reason))
    psize = properties_size(p.props)
    buf, off = new_packet_buffer(first, 1 + vbi_size(psize) + psize)
    off = write_u8(buf, off, p.reason)
    write_properties(buf, off, p.props, psize)
    return bytes(buf)
