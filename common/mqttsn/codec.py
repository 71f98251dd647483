"""MQTT-SN v1.2 codec: one datagram in, one ``SnMessage`` out, and back.

Theory of operation. An MQTT-SN message is a whole UDP datagram (§5.2): a
length (one octet, or 0x01 followed by two octets for messages longer than 255,
§5.2.1) that counts the header itself, the type octet (§5.2.2), then a body
whose layout the type fixes (§5.4). The decoder is strict, because a gateway
that guesses hands a sensor's garbage to MQTT subscribers: the length must
equal the datagram's size, every fixed field must be there, variable fields
must be valid UTF-8 where they are topic names or client ids, and the
reserved TopicIdType 0b11 is refused. Every refusal is an ``SnMalformed`` with
a short reason (for the log and the counter); ``parse_datagram`` turns it into
a ``(None, reason)`` pair so no exception reaches the gateway.

Fields live on one ``SnMessage`` class (no per-type classes: less code on the
boards' heap); each type uses the fields its §5.4.x layout names. In
PUBLISH, SUBSCRIBE and UNSUBSCRIBE a predefined or short topic travels in
``topic_id`` (a short name's two octets as one big-endian int, §3 "short topic
names"); a normal topic in SUBSCRIBE/UNSUBSCRIBE travels in ``topic_name``.

Optional parts the spec allows: GWINFO's GwAdd (only when a client answers,
§5.4.3), PINGREQ's ClientId (§5.4.19), DISCONNECT's Duration (§5.4.21) and an
empty WILLTOPIC/WILLTOPICUPD (no Flags, no topic: delete the will, §5.4.7,
§5.4.22). ``None`` marks an absent one.
"""

from common.mqtt.errors import MqttError
from common.mqtt.utf8 import decode_utf8
from common.mqttsn.consts import (
    DISCONNECT,
    FLAG_CLEAN,
    FLAG_DUP,
    FLAG_QOS_MASK,
    FLAG_RETAIN,
    FLAG_TOPIC_ID_TYPE,
    FLAG_WILL,
    MAX_LENGTH,
    PROTOCOL_ID,
    TOPIC_NORMAL,
)


class SnMalformed(Exception):
    """A datagram the codec refuses; ``reason`` says why (for logs and counters)."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


# Body layouts (§5.4.x); the table below maps each message type to one.
L_EMPTY = 0  # WILLTOPICREQ, WILLMSGREQ, PINGRESP
L_RC = 1  # CONNACK, WILLTOPICRESP, WILLMSGRESP: ReturnCode
L_MSGID = 2  # PUBREC, PUBREL, PUBCOMP, UNSUBACK: MsgId
L_ACK = 3  # REGACK, PUBACK: TopicId MsgId ReturnCode
L_ADVERTISE = 4  # GwId Duration
L_SEARCHGW = 5  # Radius
L_GWINFO = 6  # GwId [GwAdd]
L_CONNECT = 7  # Flags ProtocolId Duration ClientId
L_WILLTOPIC = 8  # [Flags WillTopic]
L_WILLMSG = 9  # WillMsg
L_REGISTER = 10  # TopicId MsgId TopicName
L_PUBLISH = 11  # Flags TopicId MsgId Data
L_SUBSCRIBE = 12  # Flags MsgId (TopicName | TopicId)
L_SUBACK = 13  # Flags TopicId MsgId ReturnCode
L_PINGREQ = 14  # [ClientId]
L_DISCONNECT = 15  # [Duration]

# Indexed by message type (0x00..0x1D); None: not a v1.2 type (0x03, 0x11,
# 0x19 are reserved; 0xFE encapsulation is answered by the caller's reason).
LAYOUTS = (
    L_ADVERTISE,
    L_SEARCHGW,
    L_GWINFO,
    None,
    L_CONNECT,
    L_RC,
    L_EMPTY,
    L_WILLTOPIC,
    L_EMPTY,
    L_WILLMSG,
    L_REGISTER,
    L_ACK,
    L_PUBLISH,
    L_ACK,
    L_MSGID,
    L_MSGID,
    L_MSGID,
    None,
    L_SUBSCRIBE,
    L_SUBACK,
    L_SUBSCRIBE,
    L_MSGID,
    L_PINGREQ,
    L_EMPTY,
    L_DISCONNECT,
    None,
    L_WILLTOPIC,
    L_RC,
    L_WILLMSG,
    L_RC,
)

# Layouts whose flags carry a TopicIdType
_WITH_TOPIC_TYPE = (L_PUBLISH, L_SUBSCRIBE)


class SnMessage:
    """One MQTT-SN message; fields a type does not use keep their defaults."""

    def __init__(self, mtype, **fields):
        self.mtype = mtype
        self.dup = False
        self.qos = 0  # -1 for 0b11 (QoS -1, §6.8)
        self.retain = False
        self.will = False
        self.clean = False
        self.topic_id_type = TOPIC_NORMAL
        self.gw_id = 0
        # ADVERTISE, CONNECT, DISCONNECT (where None means absent: not asleep)
        self.duration = None if mtype == DISCONNECT else 0
        self.radius = 0
        self.gw_add = None  # GWINFO: bytes or None
        self.protocol_id = PROTOCOL_ID
        self.client_id = None  # CONNECT: str; PINGREQ: str or None
        self.return_code = 0
        self.topic_id = 0
        self.msg_id = 0
        self.topic_name = None  # REGISTER, SUBSCRIBE/UNSUBSCRIBE (normal), WILLTOPIC (None: empty form)
        self.data = b""  # PUBLISH data, WILLMSG/WILLMSGUPD message
        for k in fields:
            if not hasattr(self, k):
                raise TypeError("SnMessage has no field " + k)
            setattr(self, k, fields[k])

    def __eq__(self, other):
        return isinstance(other, SnMessage) and self.__dict__ == other.__dict__

    def __repr__(self):
        return "SnMessage(%r)" % (self.__dict__,)


# ---- flags (§5.3.4) ------------------------------------------------------


def _decode_flags(msg, flags, topic_type):
    msg.dup = bool(flags & FLAG_DUP)
    q = (flags & FLAG_QOS_MASK) >> 5
    msg.qos = -1 if q == 3 else q
    msg.retain = bool(flags & FLAG_RETAIN)
    msg.will = bool(flags & FLAG_WILL)
    msg.clean = bool(flags & FLAG_CLEAN)
    if topic_type:
        t = flags & FLAG_TOPIC_ID_TYPE
        if t == 3:
            raise SnMalformed("reserved TopicIdType 0b11")
        msg.topic_id_type = t


def encode_flags(msg):
    q = 3 if msg.qos == -1 else msg.qos
    return (
        (FLAG_DUP if msg.dup else 0)
        | (q << 5)
        | (FLAG_RETAIN if msg.retain else 0)
        | (FLAG_WILL if msg.will else 0)
        | (FLAG_CLEAN if msg.clean else 0)
        | (msg.topic_id_type & FLAG_TOPIC_ID_TYPE)
    )


# ---- decode ---------------------------------------------------------------


def _u16(buf, i):
    return (buf[i] << 8) | buf[i + 1]


def _text(buf, start, end, what):
    try:
        return decode_utf8(buf, start, end)
    except MqttError:
        raise SnMalformed(what + " is not valid UTF-8")


def decode_message(buf, start, end):
    """Decode the one message in buf[start:end] (a whole datagram); raise
    SnMalformed when it is not exactly one valid v1.2 message."""
    size = end - start
    if size < 2:
        raise SnMalformed("truncated header")
    length = buf[start]
    i = start + 1
    if length == 0x01:  # 3-octet form, §5.2.1
        if size < 4:
            raise SnMalformed("truncated 3-octet length")
        length = _u16(buf, i)
        i += 2
        if length < 4:
            raise SnMalformed("3-octet length below its own header")
    elif length < 2:
        raise SnMalformed("length 0")
    if length != size:
        raise SnMalformed("length %d but datagram of %d octets" % (length, size))
    mtype = buf[i]
    i += 1
    layout = LAYOUTS[mtype] if mtype < len(LAYOUTS) else None
    if layout is None:
        raise SnMalformed("unknown message type 0x%02X" % mtype)
    msg = SnMessage(mtype)
    body = end - i

    if layout == L_EMPTY:
        _exact(body, 0)
    elif layout == L_RC:
        _exact(body, 1)
        msg.return_code = buf[i]
    elif layout == L_MSGID:
        _exact(body, 2)
        msg.msg_id = _u16(buf, i)
    elif layout == L_ACK:
        _exact(body, 5)
        msg.topic_id = _u16(buf, i)
        msg.msg_id = _u16(buf, i + 2)
        msg.return_code = buf[i + 4]
    elif layout == L_ADVERTISE:
        _exact(body, 3)
        msg.gw_id = buf[i]
        msg.duration = _u16(buf, i + 1)
    elif layout == L_SEARCHGW:
        _exact(body, 1)
        msg.radius = buf[i]
    elif layout == L_GWINFO:
        _at_least(body, 1)
        msg.gw_id = buf[i]
        if body > 1:
            msg.gw_add = bytes(buf[i + 1 : end])
    elif layout == L_CONNECT:
        _at_least(body, 4)
        _decode_flags(msg, buf[i], False)
        msg.protocol_id = buf[i + 1]
        if msg.protocol_id != PROTOCOL_ID:
            raise SnMalformed("ProtocolId 0x%02X is not MQTT-SN v1.2" % msg.protocol_id)
        msg.duration = _u16(buf, i + 2)
        msg.client_id = _text(buf, i + 4, end, "ClientId")
    elif layout == L_WILLTOPIC:
        if body:  # an empty one deletes the will
            _at_least(body, 1)
            _decode_flags(msg, buf[i], False)
            msg.topic_name = _text(buf, i + 1, end, "WillTopic")
    elif layout == L_WILLMSG:
        msg.data = bytes(buf[i:end])
    elif layout == L_REGISTER:
        _at_least(body, 4)
        msg.topic_id = _u16(buf, i)
        msg.msg_id = _u16(buf, i + 2)
        msg.topic_name = _text(buf, i + 4, end, "TopicName")
    elif layout == L_PUBLISH:
        _at_least(body, 5)
        _decode_flags(msg, buf[i], True)
        msg.topic_id = _u16(buf, i + 1)
        msg.msg_id = _u16(buf, i + 3)
        msg.data = bytes(buf[i + 5 : end])
    elif layout == L_SUBSCRIBE:
        _at_least(body, 3)
        _decode_flags(msg, buf[i], True)
        msg.msg_id = _u16(buf, i + 1)
        if msg.topic_id_type == TOPIC_NORMAL:
            msg.topic_name = _text(buf, i + 3, end, "TopicName")
        else:  # predefined id or short name: exactly two octets (§5.4.15)
            _exact(body, 5)
            msg.topic_id = _u16(buf, i + 3)
    elif layout == L_SUBACK:
        _exact(body, 6)
        _decode_flags(msg, buf[i], False)
        msg.topic_id = _u16(buf, i + 1)
        msg.msg_id = _u16(buf, i + 3)
        msg.return_code = buf[i + 5]
    elif layout == L_PINGREQ:
        if body:
            msg.client_id = _text(buf, i, end, "ClientId")
    else:  # L_DISCONNECT
        if body:
            _exact(body, 2)
            msg.duration = _u16(buf, i)
        else:
            msg.duration = None
    return msg


def _exact(body, n):
    if body != n:
        raise SnMalformed("body of %d octets, layout needs %d" % (body, n))


def _at_least(body, n):
    if body < n:
        raise SnMalformed("body of %d octets, layout needs at least %d" % (body, n))


def parse_datagram(data):
    """(SnMessage, None) or (None, reason): the gateway's one entry point, so
    that a hostile datagram is a counted refusal, never an exception."""
    try:
        return decode_message(data, 0, len(data)), None
    except SnMalformed as e:
        return None, e.reason


# ---- encode ---------------------------------------------------------------


def _body(msg):
    """The body's octets for msg's layout."""
    layout = LAYOUTS[msg.mtype]
    if layout == L_EMPTY:
        return b""
    if layout == L_RC:
        return bytes((msg.return_code,))
    if layout == L_MSGID:
        return msg.msg_id.to_bytes(2, "big")
    if layout == L_ACK:
        return msg.topic_id.to_bytes(2, "big") + msg.msg_id.to_bytes(2, "big") + bytes((msg.return_code,))
    if layout == L_ADVERTISE:
        return bytes((msg.gw_id,)) + msg.duration.to_bytes(2, "big")
    if layout == L_SEARCHGW:
        return bytes((msg.radius,))
    if layout == L_GWINFO:
        return bytes((msg.gw_id,)) + (msg.gw_add or b"")
    if layout == L_CONNECT:
        head = bytes((encode_flags(msg), msg.protocol_id)) + msg.duration.to_bytes(2, "big")
        return head + msg.client_id.encode()
    if layout == L_WILLTOPIC:
        if msg.topic_name is None:
            return b""
        return bytes((encode_flags(msg),)) + msg.topic_name.encode()
    if layout == L_WILLMSG:
        return bytes(msg.data)
    if layout == L_REGISTER:
        return msg.topic_id.to_bytes(2, "big") + msg.msg_id.to_bytes(2, "big") + msg.topic_name.encode()
    if layout == L_PUBLISH:
        head = bytes((encode_flags(msg),)) + msg.topic_id.to_bytes(2, "big") + msg.msg_id.to_bytes(2, "big")
        return head + bytes(msg.data)
    if layout == L_SUBSCRIBE:
        head = bytes((encode_flags(msg),)) + msg.msg_id.to_bytes(2, "big")
        if msg.topic_id_type == TOPIC_NORMAL:
            return head + msg.topic_name.encode()
        return head + msg.topic_id.to_bytes(2, "big")
    if layout == L_SUBACK:
        head = bytes((encode_flags(msg),)) + msg.topic_id.to_bytes(2, "big")
        return head + msg.msg_id.to_bytes(2, "big") + bytes((msg.return_code,))
    if layout == L_PINGREQ:
        return msg.client_id.encode() if msg.client_id else b""
    # L_DISCONNECT
    return b"" if msg.duration is None else msg.duration.to_bytes(2, "big")


def encode_message(msg):
    """The datagram for msg, with the 1-octet length when it fits (§5.2.1)."""
    body = _body(msg)
    n = len(body) + 2
    if n <= 255:
        return bytes((n, msg.mtype)) + body
    n += 2
    if n > MAX_LENGTH:
        raise ValueError("MQTT-SN message longer than 65535 octets")
    return b"\x01" + n.to_bytes(2, "big") + bytes((msg.mtype,)) + body
