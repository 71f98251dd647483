"""Golden MQTT-SN v1.2 datagrams, one per message layout and flag form.

Each entry: (name, spec section, message type, fields, hex). The hex is the
wire form the spec's §5.4.x layout gives; tests/host/test_mqttsn_golden.py
checks every entry that the independent PyPI client ``mqtt-sn-12`` (1.0.9)
can encode or decode against that client, so the bytes are not only ours.
tests/core/test_mqttsn_codec.py drives decode, encode and round trip from it.
"""

from common.mqttsn import consts as c

GOLDEN = (
    ("advertise", "5.4.1", c.ADVERTISE, {"gw_id": 7, "duration": 900}, "0500070384"),
    ("searchgw", "5.4.2", c.SEARCHGW, {"radius": 1}, "030101"),
    ("gwinfo-from-gateway", "5.4.3", c.GWINFO, {"gw_id": 7}, "030207"),
    ("gwinfo-from-client", "5.4.3", c.GWINFO, {"gw_id": 7, "gw_add": b"\x7f\x00\x00\x01"}, "0702077f000001"),
    (
        "connect-clean-will",
        "5.4.4",
        c.CONNECT,
        {"will": True, "clean": True, "duration": 30, "client_id": "sensor-1"},
        "0e040c01001e73656e736f722d31",
    ),
    ("connect-plain", "5.4.4", c.CONNECT, {"duration": 60, "client_id": "c"}, "07040001003c63"),
    ("connack-accepted", "5.4.5", c.CONNACK, {"return_code": 0}, "030500"),
    ("connack-congestion", "5.4.5", c.CONNACK, {"return_code": 1}, "030501"),
    ("willtopicreq", "5.4.6", c.WILLTOPICREQ, {}, "0206"),
    ("willtopic-qos1-retain", "5.4.7", c.WILLTOPIC, {"qos": 1, "retain": True, "topic_name": "w/t"}, "060730772f74"),
    ("willtopic-empty", "5.4.7", c.WILLTOPIC, {}, "0207"),
    ("willmsgreq", "5.4.8", c.WILLMSGREQ, {}, "0208"),
    ("willmsg", "5.4.9", c.WILLMSG, {"data": b"gone"}, "0609676f6e65"),
    ("register", "5.4.10", c.REGISTER, {"topic_id": 0, "msg_id": 5, "topic_name": "a/b"}, "090a00000005612f62"),
    ("register-from-gateway", "5.4.10", c.REGISTER, {"topic_id": 1, "msg_id": 2, "topic_name": "x"}, "070a0001000278"),
    ("regack-accepted", "5.4.11", c.REGACK, {"topic_id": 1, "msg_id": 5, "return_code": 0}, "070b0001000500"),
    ("regack-invalid", "5.4.11", c.REGACK, {"topic_id": 0, "msg_id": 5, "return_code": 2}, "070b0000000502"),
    ("publish-qos0-normal", "5.4.12", c.PUBLISH, {"topic_id": 1, "data": b"hi"}, "090c00000100006869"),
    (
        "publish-qos1-retain",
        "5.4.12",
        c.PUBLISH,
        {"qos": 1, "retain": True, "topic_id": 1, "msg_id": 9, "data": b"x"},
        "080c300001000978",
    ),
    (
        "publish-qos2-dup-predefined",
        "5.4.12",
        c.PUBLISH,
        {"qos": 2, "dup": True, "topic_id_type": c.TOPIC_PREDEFINED, "topic_id": 0x1234, "msg_id": 0xBEEF, "data": b""},
        "070cc11234beef",
    ),
    (
        "publish-qosm1-short",
        "5.4.12",
        c.PUBLISH,
        {"qos": -1, "topic_id_type": c.TOPIC_SHORT, "topic_id": 0x6162, "data": b"1"},
        "080c626162000031",
    ),
    ("puback-accepted", "5.4.13", c.PUBACK, {"topic_id": 1, "msg_id": 9, "return_code": 0}, "070d0001000900"),
    ("puback-invalid-topic", "5.4.13", c.PUBACK, {"topic_id": 7, "msg_id": 9, "return_code": 2}, "070d0007000902"),
    ("pubrec", "5.4.14", c.PUBREC, {"msg_id": 0xBEEF}, "040fbeef"),
    ("pubrel", "5.4.14", c.PUBREL, {"msg_id": 0xBEEF}, "0410beef"),
    ("pubcomp", "5.4.14", c.PUBCOMP, {"msg_id": 0xBEEF}, "040ebeef"),
    (
        "subscribe-normal-wildcard",
        "5.4.15",
        c.SUBSCRIBE,
        {"qos": 1, "msg_id": 3, "topic_name": "s/+"},
        "0812200003732f2b",
    ),
    (
        "subscribe-predefined",
        "5.4.15",
        c.SUBSCRIBE,
        {"qos": 2, "topic_id_type": c.TOPIC_PREDEFINED, "msg_id": 4, "topic_id": 0x0102},
        "07124100040102",
    ),
    (
        "subscribe-short",
        "5.4.15",
        c.SUBSCRIBE,
        {"topic_id_type": c.TOPIC_SHORT, "msg_id": 4, "topic_id": 0x6162},
        "07120200046162",
    ),
    ("suback", "5.4.16", c.SUBACK, {"qos": 1, "topic_id": 1, "msg_id": 3, "return_code": 0}, "0813200001000300"),
    ("suback-not-supported", "5.4.16", c.SUBACK, {"topic_id": 0, "msg_id": 3, "return_code": 3}, "0813000000000303"),
    ("unsubscribe-normal", "5.4.17", c.UNSUBSCRIBE, {"msg_id": 6, "topic_name": "s/+"}, "0814000006732f2b"),
    (
        "unsubscribe-short",
        "5.4.17",
        c.UNSUBSCRIBE,
        {"topic_id_type": c.TOPIC_SHORT, "msg_id": 6, "topic_id": 0x6162},
        "07140200066162",
    ),
    ("unsuback", "5.4.18", c.UNSUBACK, {"msg_id": 6}, "04150006"),
    ("pingreq", "5.4.19", c.PINGREQ, {}, "0216"),
    ("pingreq-awake", "5.4.19", c.PINGREQ, {"client_id": "sensor-1"}, "0a1673656e736f722d31"),
    ("pingresp", "5.4.20", c.PINGRESP, {}, "0217"),
    ("disconnect", "5.4.21", c.DISCONNECT, {}, "0218"),
    ("disconnect-sleep", "5.4.21", c.DISCONNECT, {"duration": 600}, "04180258"),
    ("willtopicupd", "5.4.22", c.WILLTOPICUPD, {"qos": 1, "topic_name": "w/t"}, "061a20772f74"),
    ("willtopicupd-empty", "5.4.22", c.WILLTOPICUPD, {}, "021a"),
    ("willtopicresp", "5.4.23", c.WILLTOPICRESP, {"return_code": 0}, "031b00"),
    ("willmsgupd", "5.4.24", c.WILLMSGUPD, {"data": b"bye"}, "051c627965"),
    ("willmsgresp", "5.4.25", c.WILLMSGRESP, {"return_code": 0}, "031d00"),
    # §5.2.1: longer than 255 octets, so the 3-octet length form
    ("publish-long", "5.2.1", c.PUBLISH, {"topic_id": 1, "data": b"z" * 300}, "0101350c0000010000" + "7a" * 300),
)
