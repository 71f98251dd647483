"""The golden MQTT-SN datagrams of tests/core/mqttsn_golden.py against an
independent implementation: the PyPI client ``mqtt-sn-12`` (1.0.9, pinned in
pyproject.toml's test extra). For every golden entry, the client's packet
class for that type encodes the same fields to the same bytes (where it has an
encoder for that form) and decodes our bytes to the same fields (where it has
a decoder); every v1.2 message type is checked one way or the other.
"""

from mqttsn12 import packets as sn12

from common.mqttsn import consts as c
from common.mqttsn.codec import SnMessage, encode_flags, encode_message
from tests.core.mqttsn_golden import GOLDEN

# The client's class per message type (its names, §5.4.x order)
CLASSES = {
    c.ADVERTISE: sn12.AdvertisePacket,
    c.SEARCHGW: sn12.SearchGatewayPacket,
    c.GWINFO: sn12.GatewayInfoPacket,
    c.CONNECT: sn12.ConnectPacket,
    c.CONNACK: sn12.ConnackPacket,
    c.WILLTOPICREQ: sn12.WillTopicReqPacket,
    c.WILLTOPIC: sn12.WillTopicPacket,
    c.WILLMSGREQ: sn12.WillMessageReqPacket,
    c.WILLMSG: sn12.WillMessagePacket,
    c.REGISTER: sn12.RegisterPacket,
    c.REGACK: sn12.RegackPacket,
    c.PUBLISH: sn12.PublishPacket,
    c.PUBACK: sn12.PubAckPacket,
    c.PUBCOMP: sn12.PubCompPacket,
    c.PUBREC: sn12.PubRecPacket,
    c.PUBREL: sn12.PubRelPacket,
    c.SUBSCRIBE: sn12.SubPacket,
    c.SUBACK: sn12.SubAckPacket,
    c.UNSUBSCRIBE: sn12.UnsubscribePacket,
    c.UNSUBACK: sn12.UnsubackPacket,
    c.PINGREQ: sn12.PingReqPacket,
    c.PINGRESP: sn12.PingResPacket,
    c.DISCONNECT: sn12.DisconnectReqPacket,
    c.WILLTOPICUPD: sn12.WillTopicUpdateReqPacket,
    c.WILLTOPICRESP: sn12.WillTopicResPacket,
    c.WILLMSGUPD: sn12.WillMessageUpdatePacket,
    c.WILLMSGRESP: sn12.WillMessageRespPacket,
}

# Types the client has no encoder for (it only receives them)
NO_ENCODER = {c.ADVERTISE, c.GWINFO, c.UNSUBACK, c.WILLTOPICRESP, c.WILLMSGRESP}


def theirs(msg):
    """The client's packet object carrying msg's fields (their attribute names)."""
    pkt = CLASSES[msg.mtype]()
    topic = None if msg.topic_name is None else msg.topic_name.encode()
    values = {
        "flags": encode_flags(msg),
        "protocol_id": msg.protocol_id,
        "duration": msg.duration or 0,
        "message_id": msg.msg_id,
        "topic_id": msg.topic_id,
        "return_code": msg.return_code,
        "radius": msg.radius,
        "gwID": msg.gw_id,
        "gw_id": msg.gw_id,
        "data": msg.data,
        "message": msg.data,
        "topic_name": topic,
        "topicName": topic,
        "extended": len(msg.data) + 7 > 255,
    }
    for name, value in values.items():
        if hasattr(pkt, name):
            setattr(pkt, name, value)
    if msg.mtype == c.CONNECT:
        pkt.client_id = msg.client_id.encode()
    if msg.mtype == c.PINGREQ:
        pkt.client_id = msg.client_id or ""
    return pkt


def empty_will_topic(msg):
    # §5.4.7/§5.4.22: the empty form deletes the will; the client neither sends nor reads it
    return msg.mtype in (c.WILLTOPIC, c.WILLTOPICUPD) and msg.topic_name is None


def test_client_encodes_our_golden_bytes():
    checked = set()
    for name, section, mtype, fields, hexs in GOLDEN:
        msg = SnMessage(mtype, **fields)
        if mtype in NO_ENCODER or empty_will_topic(msg):
            continue
        assert theirs(msg).encode().hex() == hexs, f"{name} (MQTT-SN v1.2 §{section})"
        checked.add(mtype)
    assert len(checked) == len(CLASSES) - len(NO_ENCODER)


def test_client_decodes_our_golden_bytes():
    checked = set()
    for name, section, mtype, fields, hexs in GOLDEN:
        msg = SnMessage(mtype, **fields)
        pkt = CLASSES[mtype]()
        if not hasattr(pkt, "decode") or empty_will_topic(msg):
            continue
        pkt.decode(bytes.fromhex(hexs))
        want = theirs(msg)
        for attr in (
            "flags",
            "message_id",
            "topic_id",
            "return_code",
            "gwID",
            "gw_id",
            "data",
            "message",
            "topic_name",
            "duration",
        ):
            if hasattr(pkt, attr) and attr in vars(want) and mtype != c.SEARCHGW:
                got, exp = getattr(pkt, attr), getattr(want, attr)
                if attr == "gw_id" and mtype == c.GWINFO:
                    assert bytes(pkt.gw_address) == (msg.gw_add or b""), name
                assert got == exp or (exp is None and got in (b"", None)), (
                    f"{name} §{section}: {attr} {got!r} != {exp!r}"
                )
        assert pkt.type == mtype, name
        checked.add(mtype)
    assert c.ADVERTISE in checked and c.WILLMSGRESP in checked and c.UNSUBACK in checked


def test_our_encoder_matches_client_for_long_publish():
    # §5.2.1: the 3-octet length form, both sides
    msg = SnMessage(c.PUBLISH, qos=1, topic_id=3, msg_id=4, data=bytes(range(256)) * 2)
    assert theirs(msg).encode() == encode_message(msg)
