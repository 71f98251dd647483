# The first packet judged on its first byte, a bad v5 CONNECT answered with
# CONNACK, and refusals that name their rule and the code the client got.
# BAD_CONNECTS is shared with tests/host/test_server_connect.py (real sockets).

import unittest

from common.mqtt import consts as C
from common.mqtt.packets import prop_get
from tests.core.harness import Harness, RawClient, s16, vbi


def connect_raw(level, flags, payload, props=b"", name=b"MQTT", tail=b""):
    """A CONNECT from its parts; `tail` is sent beyond the Remaining Length's
    reach only when negative lengths are wanted (see BAD_CONNECTS)."""
    body = s16(name) + bytes([level, flags, 0, 0])
    if level == 5:
        body += vbi(len(props)) + props
    body += payload
    return b"\x10" + vbi(len(body)) + body + tail


def truncated(level):
    # The Remaining Length stops inside the client id.
    raw = connect_raw(level, 0x02, s16(b"abcdef"))
    return b"\x10" + vbi(len(raw) - 2 - 3) + raw[2:-3]


def props_overrun():
    # The property length announces 10 bytes; 3 are there before the end.
    body = s16(b"MQTT") + bytes([5, 0x02, 0, 0]) + b"\x0a\x21\x00\x0a"
    return b"\x10" + vbi(len(body)) + body


WILL5 = b"\x00" + s16(b"w") + s16(b"m")  # will properties (none), topic, payload

# (name, raw v5 CONNECT, CONNACK reason, the same fault in 3.1.1 or None)
BAD_CONNECTS = (
    # 3.1.1 [MQTT-3.1.2-1] protocol name: closed; 5.0 [MQTT-3.1.2-1] CONNACK 0x84
    ("bad-name", connect_raw(5, 0x02, s16(b"c"), name=b"MQTX"), C.RC_UNSUPPORTED_PROTOCOL_VERSION, connect_raw(4, 0x02, s16(b"c"), name=b"MQTX")),
    # 3.1.1 [MQTT-3.1.2-3] 5.0 [MQTT-3.1.2-3] reserved flag
    ("reserved-flag", connect_raw(5, 0x03, s16(b"c")), C.RC_MALFORMED_PACKET, connect_raw(4, 0x03, s16(b"c"))),
    # 3.1.1 [MQTT-3.1.2-14] 5.0 [MQTT-3.1.2-12] will QoS 3
    ("will-qos3", connect_raw(5, 0x1E, s16(b"c") + WILL5), C.RC_MALFORMED_PACKET, connect_raw(4, 0x1E, s16(b"c") + s16(b"w") + s16(b"m"))),
    # will QoS / retain without the will flag: 3.1.1 [MQTT-3.1.2-13] 3.1.1 [MQTT-3.1.2-15]
    # 5.0 [MQTT-3.1.2-11] 5.0 [MQTT-3.1.2-13]
    ("will-qos-no-will", connect_raw(5, 0x0A, s16(b"c")), C.RC_MALFORMED_PACKET, connect_raw(4, 0x0A, s16(b"c"))),
    ("will-retain-no-will", connect_raw(5, 0x22, s16(b"c")), C.RC_MALFORMED_PACKET, connect_raw(4, 0x22, s16(b"c"))),
    # in the client id: U+0000 3.1.1 [MQTT-1.5.3-2] 5.0 [MQTT-1.5.4-2], a surrogate
    # 3.1.1 [MQTT-1.5.3-1] 5.0 [MQTT-1.5.4-1]
    ("client-id-nul", connect_raw(5, 0x02, s16(b"a\x00b")), C.RC_MALFORMED_PACKET, connect_raw(4, 0x02, s16(b"a\x00b"))),
    ("client-id-surrogate", connect_raw(5, 0x02, s16(b"\xed\xa0\x80")), C.RC_MALFORMED_PACKET, connect_raw(4, 0x02, s16(b"\xed\xa0\x80"))),
    ("truncated", truncated(5), C.RC_MALFORMED_PACKET, truncated(4)),
    ("trailing-bytes", connect_raw(5, 0x02, s16(b"c") + b"\x00"), C.RC_MALFORMED_PACKET, connect_raw(4, 0x02, s16(b"c") + b"\x00")),
    # v5 properties (2.2.2.2, 3.1.2.11)
    ("duplicate-property", connect_raw(5, 0x02, s16(b"c"), props=b"\x21\x00\x0a\x21\x00\x0a"), C.RC_PROTOCOL_ERROR, None),
    ("receive-maximum-0", connect_raw(5, 0x02, s16(b"c"), props=b"\x21\x00\x00"), C.RC_PROTOCOL_ERROR, None),
    ("maximum-packet-size-0", connect_raw(5, 0x02, s16(b"c"), props=b"\x27\x00\x00\x00\x00"), C.RC_PROTOCOL_ERROR, None),
    # 2.2.2.2: an identifier not valid for the packet is malformed
    ("property-not-for-connect", connect_raw(5, 0x02, s16(b"c"), props=b"\x23\x00\x01"), C.RC_MALFORMED_PACKET, None),
    ("properties-overrun", props_overrun(), C.RC_MALFORMED_PACKET, None),
    # 5.0 [MQTT-1.5.7-1] a user property's UTF-8
    ("user-property-utf8", connect_raw(5, 0x02, s16(b"c"), props=b"\x26" + s16(b"k") + s16(b"\xff")), C.RC_MALFORMED_PACKET, None),
    # 3.1.2.11.10: Authentication Data without an Authentication Method
    ("auth-data-no-method", connect_raw(5, 0x02, s16(b"c"), props=b"\x16" + s16(b"xyz")), C.RC_PROTOCOL_ERROR, None),
)


def logging_harness(**settings):
    h = Harness(**settings)
    h.lines = []
    h.broker.set_logger(lambda level, text: h.lines.append(text))
    return h


class TestFirstByte(unittest.TestCase):
    def test_http_get_closed_at_once(self):
        # 3.1.1 [MQTT-3.1.0-1] 5.0 [MQTT-3.1.0-1] "GET " announces 69 bytes: closed on its first byte,
        # without a CONNACK, not after the connect timeout
        h = logging_harness()
        c = RawClient(h, level=4)
        c.send_raw(b"GET / HTTP/1.1\r\n")
        self.assertTrue(c.closed)
        self.assertEqual(c.raw, b"")
        self.assertIn("first byte 0x47 is not a CONNECT's (0x10); closed without CONNACK", h.lines[-1])

    def test_every_other_first_byte_closed_at_once(self):
        # 3.1.1 [MQTT-3.1.0-1] 5.0 [MQTT-3.1.0-1] judged on the first byte alone
        # (the rest announces 127 bytes that never come); reserved CONNECT
        # flags too: 3.1.1 [MQTT-2.2.2-2] 5.0 [MQTT-2.1.3-1]
        h = Harness()
        for first in range(256):
            if first == 0x10:
                continue
            c = RawClient(h, level=4)
            c.send_raw(bytes([first, 0x7F]))
            self.assertTrue(c.closed, hex(first))
            self.assertEqual(c.raw, b"", hex(first))
        self.assertEqual(h.broker.connections.live, 0)

    def test_connect_byte_by_byte_still_served(self):
        # The check reads the stream's first byte only: a CONNECT fed one
        # byte at a time is accepted, and later packets are not judged by it.
        h = Harness()
        c = RawClient(h, level=4)
        for b in connect_raw(4, 0x02, s16(b"slow")):
            c.send_raw(bytes([b]))
        self.assertEqual(c.raw, b"\x20\x02\x00\x00")
        c.expect(C.CONNACK)
        c.ping()
        self.assertFalse(c.closed)


class TestBadV5Connect(unittest.TestCase):
    def test_v5_answered_with_connack(self):
        # 5.0 [MQTT-3.1.4-1] 5.0 [MQTT-4.13.1-1] a v5 CONNECT that is malformed
        # or a protocol error, once its level is read: CONNACK with the reason
        # (5.0 [MQTT-3.2.2-8]) and a Reason String, Session Present 0
        # (5.0 [MQTT-3.2.2-6]), then closed (5.0 [MQTT-3.2.2-7])
        h = logging_harness()
        for name, raw, reason, _ in BAD_CONNECTS:
            c = h.client(level=5)
            c.send_raw(raw)
            got = c.take()
            self.assertEqual([(p.ptype, p.reason, p.session_present) for p in got], [(C.CONNACK, reason, False)], name)
            self.assertTrue(prop_get(got[0].props, C.PROP_REASON_STRING), name)
            self.assertTrue(c.closed, name)
            self.assertIn("sent CONNACK reason 0x%02x" % reason, h.lines[-1], name)
        self.assertEqual(h.broker.sessions.count(), 0)

    def test_v311_closed_without_connack(self):
        # 3.1.1 [MQTT-3.1.4-1] 3.1.1 [MQTT-3.2.2-6] the same faults in 3.1.1
        # close the connection with no CONNACK
        h = logging_harness()
        for name, _, _, raw in BAD_CONNECTS:
            if raw is None:
                continue
            c = RawClient(h, level=4)
            c.send_raw(raw)
            self.assertTrue(c.closed, name)
            self.assertEqual(c.raw, b"", name)
            self.assertIn("sent no code", h.lines[-1], name)

    def test_auth_data_with_method_goes_to_the_method(self):
        # Authentication Data with its Method is no protocol error: the
        # method decides (none configured here: 0x8C, naming it)
        h = Harness()
        c = h.client(level=5)
        ack = c.connect("c", props=[(C.PROP_AUTHENTICATION_METHOD, "X"), (C.PROP_AUTHENTICATION_DATA, b"d")])
        self.assertEqual(ack.reason, C.RC_BAD_AUTHENTICATION_METHOD)
        self.assertIn("'X'", prop_get(ack.props, C.PROP_REASON_STRING))


class TestRefusalsNameTheLimit(unittest.TestCase):
    def test_packet_too_large(self):
        # Refused from its fixed header: the DISCONNECT's Reason String and
        # the log name max_packet_size and its value
        h = logging_harness(max_packet_size=100)
        c = h.client(level=5)
        c.connect("big5")
        c.send_raw(b"\x30\x7f")
        d = c.expect(C.DISCONNECT)
        self.assertEqual(d.reason, C.RC_PACKET_TOO_LARGE)
        self.assertEqual(prop_get(d.props, C.PROP_REASON_STRING), "packet of 129 bytes over max_packet_size 100")
        self.assertIn("closing big5: packet of 129 bytes over max_packet_size 100; sent DISCONNECT reason 0x95", h.lines[-1])
        c = h.client()
        c.connect("big4")
        c.send_raw(b"\x30\x7f")
        self.assertTrue(c.closed)
        self.assertIn("closing big4: packet of 129 bytes over max_packet_size 100; sent no code", h.lines[-1])

    def test_connect_too_large_v5_connack_0x95_v311_closed(self):
        # A CONNECT over max_packet_size is refused from its fixed header;
        # when its level byte came with it, a v5 client hears CONNACK 0x95
        h = logging_harness(max_packet_size=100)
        c = h.client(level=5)
        c.send_raw(connect_raw(5, 0x02, s16(b"c" * 120)))
        ack = c.expect(C.CONNACK)
        self.assertEqual(ack.reason, C.RC_PACKET_TOO_LARGE)
        self.assertEqual(prop_get(ack.props, C.PROP_REASON_STRING), "packet of 136 bytes over max_packet_size 100")
        self.assertTrue(c.closed)
        c = RawClient(h, level=4)
        c.send_raw(connect_raw(4, 0x02, s16(b"c" * 120)))
        self.assertTrue(c.closed)
        self.assertEqual(c.raw, b"")
        self.assertIn("packet of 135 bytes over max_packet_size 100; sent no code", h.lines[-1])

    def test_v311_refusal_logged_with_its_return_code(self):
        # 3.1.1 [MQTT-3.1.3-9] 3.1.1 [MQTT-3.2.2-5] the log names the 3.1.1
        # return code the client received, not the v5 reason, and the limit
        # with its value
        h = logging_harness(max_client_id_length=8, max_keepalive=60)
        c = RawClient(h, level=4)
        c.send_raw(connect_raw(4, 0x02, s16(b"much-too-long")))
        self.assertEqual(c.raw, b"\x20\x02\x00\x02")
        self.assertIn("client id of 13 characters over max_client_id_length 8; sent CONNACK return code 0x02", h.lines[-1])
        c = h.client()
        ack = c.connect("ka", keep_alive=100)
        self.assertEqual(ack.reason, C.CONNACK_REFUSED_IDENTIFIER_REJECTED)
        self.assertIn("keep-alive 100 s outside max_keepalive 60 s (0 = none); sent CONNACK return code 0x02", h.lines[-1])

    def test_v5_refusal_names_the_limit_in_reason_string_and_log(self):
        # 5.0 [MQTT-3.1.3-8] CONNACK 0x85 with the limit in its Reason String
        h = logging_harness(max_client_id_length=8)
        c = h.client(level=5)
        ack = c.connect("much-too-long")
        self.assertEqual(ack.reason, C.RC_CLIENT_IDENTIFIER_NOT_VALID)
        why = "client id of 13 characters over max_client_id_length 8"
        self.assertEqual(prop_get(ack.props, C.PROP_REASON_STRING), why)
        self.assertIn(why + "; sent CONNACK reason 0x85", h.lines[-1])

    def test_max_connections_named(self):
        h = logging_harness(max_connections=1)
        first = h.client()
        first.connect("first")
        c = h.client()
        self.assertEqual(c.connect("second").reason, C.CONNACK_REFUSED_SERVER_UNAVAILABLE)
        self.assertIn("over max_connections 1; sent CONNACK return code 0x03", h.lines[-1])
        c = h.client(level=5)
        ack = c.connect("third")
        self.assertEqual(ack.reason, C.RC_SERVER_BUSY)
        self.assertEqual(prop_get(ack.props, C.PROP_REASON_STRING), "over max_connections 1")
        self.assertIn("sent CONNACK reason 0x89", h.lines[-1])
