"""The encoders of the packets only a client sends (CONNECT, SUBSCRIBE,
UNSUBSCRIBE) and the decoders of those only a client receives (CONNACK,
SUBACK, UNSUBACK).

Apart from packets.py so that a broker, which never sends nor receives them
(a client that sends one is told off), does not hold their code: the client
(common/client/client.py) and the tests load this module;
``packets.encode_packet`` finds the encoders here through
``CLIENT_ENCODERS`` and ``packets.decode_packet`` the decoders through
``CLIENT_DECODERS`` (by packet type). The encoders follow packets.py's
rules: add up the size, allocate once, write front to back. A decoder
returns its packet's fields (packets.py makes the object: this module
imports nothing of it).
"""

from common.mqtt import consts as C
from common.mqtt.codec import (
    check_end,
    decode_packet_id,
    decode_u8,
    new_packet_buffer,
    utf8_bytes,
    vbi_size,
    write_prefixed,
    write_u8,
    write_u16,
)
from common.mqtt.errors import MalformedPacket, ProtocolError
from common.mqtt.properties import decode_properties, properties_size, write_properties


def encode_connect(p, level=None):
    lvl = p.level
    v5 = lvl == C.LEVEL_5
    name = utf8_bytes(p.proto_name or ("MQIsdp" if lvl == 3 else "MQTT"))
    cid = utf8_bytes(p.client_id or "")
    flags = 0x02 if p.clean_start else 0
    size = 2 + len(name) + 1 + 1 + 2 + 2 + len(cid)
    if v5:
        psize = properties_size(p.props)
        size += vbi_size(psize) + psize
    if p.will_topic is not None:
        flags |= 0x04 | (p.will_qos << 3)
        if p.will_retain:
            flags |= 0x20
        wtopic = utf8_bytes(p.will_topic)
        wpayload = p.will_payload or b""
        size += 4 + len(wtopic) + len(wpayload)
        if v5:
            wsize = properties_size(p.will_props)
            size += vbi_size(wsize) + wsize
    if p.username is not None:
        flags |= 0x80
        user = utf8_bytes(p.username)
        size += 2 + len(user)
    if p.password is not None:
        flags |= 0x40
        password = utf8_bytes(p.password)
        size += 2 + len(password)
    buf, off = new_packet_buffer(0x10, size)
    off = write_prefixed(buf, off, name)
    off = write_u8(buf, off, lvl)
    off = write_u8(buf, off, flags)
    off = write_u16(buf, off, p.keep_alive)
    if v5:
        off = write_properties(buf, off, p.props, psize)
    off = write_prefixed(buf, off, cid)
    if p.will_topic is not None:
        if v5:
            off = write_properties(buf, off, p.will_props, wsize)
        off = write_prefixed(buf, off, wtopic)
        off = write_prefixed(buf, off, wpayload)
    if p.username is not None:
        off = write_prefixed(buf, off, user)
    if p.password is not None:
        off = write_prefixed(buf, off, password)
    return bytes(buf)


def encode_subscribe(p, level):
    size = 2
    filters = []
    for filt, _opts in p.topics:
        f = utf8_bytes(filt)
        filters.append(f)
        size += 3 + len(f)
    if level == C.LEVEL_5:
        psize = properties_size(p.props)
        size += vbi_size(psize) + psize
    buf, off = new_packet_buffer(0x82, size)
    off = write_u16(buf, off, p.packet_id)
    if level == C.LEVEL_5:
        off = write_properties(buf, off, p.props, psize)
    k = 0
    for _filt, opts in p.topics:
        off = write_prefixed(buf, off, filters[k])
        off = write_u8(buf, off, opts)
        k += 1
    return bytes(buf)


def encode_unsubscribe(p, level):
    size = 2
    filters = []
    for filt in p.filters:
        f = utf8_bytes(filt)
        filters.append(f)
        size += 2 + len(f)
    if level == C.LEVEL_5:
        psize = properties_size(p.props)
        size += vbi_size(psize) + psize
    buf, off = new_packet_buffer(0xA2, size)
    off = write_u16(buf, off, p.packet_id)
    if level == C.LEVEL_5:
        off = write_properties(buf, off, p.props, psize)
    for f in filters:
        off = write_prefixed(buf, off, f)
    return bytes(buf)


CLIENT_ENCODERS = {C.CONNECT: encode_connect, C.SUBSCRIBE: encode_subscribe, C.UNSUBSCRIBE: encode_unsubscribe}


def decode_reason_list(buf, start, end, allowed):
    """The payload of SUBACK/UNSUBACK: one or more reason codes from ``allowed``."""
    if start >= end:
        raise ProtocolError("acknowledgement without reason codes")
    reasons = []
    i = start
    while i < end:
        r = buf[i]
        if r not in allowed:
            raise ProtocolError("invalid reason code 0x%02X" % r)
        reasons.append(r)
        i += 1
    return reasons


def decode_connack(buf, start, end, level):
    flags, i = decode_u8(buf, start, end)
    if flags & 0xFE:
        raise MalformedPacket("CONNACK reserved flags set")  # [MQTT-3.2.2-1]
    reason, i = decode_u8(buf, i, end)
    props = None
    if level == C.LEVEL_5:
        if reason not in C.REASONS_CONNACK:
            raise ProtocolError("invalid CONNACK reason code")
        props, i = decode_properties(buf, i, end, C.CONNACK)
    elif reason not in C.RETURN_CODES_CONNACK_311:
        raise ProtocolError("invalid CONNACK return code")
    if reason and flags:
        # 3.1.1 [MQTT-3.2.2-4], 5.0 [MQTT-3.2.2-6]
        raise ProtocolError("session present with a refusal")
    check_end(i, end)
    return flags == 1, reason, props


def decode_suback(buf, start, end, level):
    pid, i = decode_packet_id(buf, start, end)
    props = None
    if level == C.LEVEL_5:
        props, i = decode_properties(buf, i, end, C.SUBACK)
        allowed = C.REASONS_SUBACK
    else:
        allowed = C.RETURN_CODES_SUBACK_311  # [MQTT-3.9.3-2]
    return pid, decode_reason_list(buf, i, end, allowed), props


def decode_unsuback(buf, start, end, level):
    pid, i = decode_packet_id(buf, start, end)
    if level != C.LEVEL_5:
        check_end(i, end)
        return pid, [], None
    props, i = decode_properties(buf, i, end, C.UNSUBACK)
    return pid, decode_reason_list(buf, i, end, C.REASONS_UNSUBACK), props


CLIENT_DECODERS = {C.CONNACK: decode_connack, C.SUBACK: decode_suback, C.UNSUBACK: decode_unsuback}
