# CONNECT, sessions, takeover, keep-alive, wills, DISCONNECT (MQTT 3.1.1),
# on the in-memory harness. Runs under CPython and MicroPython.

import unittest

from common.mqtt import consts as C
from common.mqtt.packets import Connect, Publish, Subscribe, encode_packet
from tests.core.harness import Harness


def mqtt31_connect(client_id):
    return encode_packet(Connect(level=3, clean_start=True, keep_alive=0, client_id=client_id), 3)


class TestConnect(unittest.TestCase):
    def test_accepts_311_connect(self):
        h = Harness()
        c = h.client()
        ack = c.connect("a")
        self.assertEqual(ack.reason, C.CONNACK_ACCEPTED)
        self.assertFalse(ack.session_present)  # [MQTT-3.2.2-1]
        self.assertFalse(c.closed)

    def test_first_packet_must_be_connect(self):
        # [MQTT-3.1.0-1]
        h = Harness()
        c = h.client()
        c.publish("a", b"x")
        self.assertTrue(c.closed)
        self.assertEqual(c.take(), [])

    def test_second_connect_is_a_protocol_violation(self):
        # [MQTT-3.1.0-2]
        h = Harness()
        c = h.client()
        c.connect("a")
        c.connect("a")
        self.assertTrue(c.closed)

    def test_dispatch_table(self):
        # One entry per packet type: a client's packets have a handler and
        # the connection states they are legal in; a server's have neither.
        from common.broker.broker import DECODE, HANDLE, LEGAL_IN
        from common.broker.connection import CLOSING, CONNECTED, FREE, NEW

        self.assertEqual((len(DECODE), len(HANDLE), len(LEGAL_IN)), (16, 16, 4))
        client_to_server = (C.CONNECT, C.PUBLISH, C.PUBACK, C.PUBREC, C.PUBREL, C.PUBCOMP, C.SUBSCRIBE, C.UNSUBSCRIBE, C.PINGREQ, C.DISCONNECT, C.AUTH)
        for ptype in range(16):
            name = C.PACKET_NAMES[ptype]
            self.assertTrue(callable(DECODE[ptype]))
            self.assertEqual(HANDLE[ptype] is not None, ptype in client_to_server, name)
            # before CONNACK only CONNECT, and AUTH for its exchange [MQTT-3.1.0-1];
            # after it anything a client sends but a second CONNECT [MQTT-3.1.0-2]
            self.assertEqual(LEGAL_IN[NEW] >> ptype & 1, 1 if ptype in (C.CONNECT, C.AUTH) else 0, name)
            self.assertEqual(LEGAL_IN[CONNECTED] >> ptype & 1, 1 if ptype in client_to_server and ptype != C.CONNECT else 0, name)
        self.assertEqual((LEGAL_IN[FREE], LEGAL_IN[CLOSING]), (0, 0))  # no input is read then

    def test_a_server_packet_from_a_client_closes_it(self):
        # 3.1.1 has no code for it: closed; no other client is touched.
        h = Harness()
        other = h.client()
        other.connect("other")
        for raw in (b"\x20\x02\x00\x00", b"\x90\x03\x00\x01\x00", b"\xd0\x00"):  # CONNACK, SUBACK, PINGRESP
            c = h.client()
            c.connect("bad")
            c.send_raw(raw)
            self.assertTrue(c.closed)
        other.ping()
        self.assertFalse(other.closed)

    def test_unsupported_level_gets_connack_0x01(self):
        # [MQTT-3.1.2-2]
        h = Harness()
        c = h.client()
        data = bytearray(encode_packet(Connect(level=4, clean_start=True, client_id="x"), 4))
        data[8] = 6  # protocol level byte of "\x00\x04MQTT" + level
        c.send_raw(bytes(data))
        ack = c.expect(C.CONNACK)
        self.assertEqual(ack.reason, C.CONNACK_REFUSED_PROTOCOL_VERSION)
        self.assertTrue(c.closed)

    def test_mqtt31_accepted_by_default(self):
        h = Harness()
        c = h.client(level=3)
        c.send_raw(mqtt31_connect("old"))
        ack = c.expect(C.CONNACK)
        self.assertEqual(ack.reason, C.CONNACK_ACCEPTED)

    def test_mqtt31_refused_by_setting(self):
        h = Harness(allow_mqtt31=False)
        c = h.client(level=3)
        c.send_raw(mqtt31_connect("old"))
        ack = c.expect(C.CONNACK)
        self.assertEqual(ack.reason, C.CONNACK_REFUSED_PROTOCOL_VERSION)
        self.assertTrue(c.closed)

    def test_empty_client_id_with_clean_session_gets_an_id(self):
        # [MQTT-3.1.3-6]
        h = Harness()
        a = h.client()
        b = h.client()
        self.assertEqual(a.connect("").reason, C.CONNACK_ACCEPTED)
        self.assertEqual(b.connect("").reason, C.CONNACK_ACCEPTED)
        ids = list(h.broker.sessions.by_client_id.keys())
        self.assertEqual(len(ids), 2)
        self.assertNotEqual(ids[0], ids[1])

    def test_empty_client_id_without_clean_session_refused(self):
        # [MQTT-3.1.3-7] [MQTT-3.1.3-8]
        h = Harness()
        c = h.client()
        ack = c.connect("", clean=False)
        self.assertEqual(ack.reason, C.CONNACK_REFUSED_IDENTIFIER_REJECTED)
        self.assertTrue(c.closed)

    def test_client_id_too_long_refused(self):
        h = Harness(max_client_id_length=8)
        c = h.client()
        self.assertEqual(c.connect("123456789").reason, C.CONNACK_REFUSED_IDENTIFIER_REJECTED)
        d = h.client()
        self.assertEqual(d.connect("12345678").reason, C.CONNACK_ACCEPTED)

    def test_connection_limit_refused_politely(self):
        h = Harness(max_connections=2)
        a = h.client()
        b = h.client()
        a.connect("a")
        b.connect("b")
        c = h.client()
        ack = c.connect("c")
        self.assertEqual(ack.reason, C.CONNACK_REFUSED_SERVER_UNAVAILABLE)
        self.assertTrue(c.closed)
        a.drop()
        d = h.client()
        self.assertEqual(d.connect("d").reason, C.CONNACK_ACCEPTED)

    def test_session_pool_full_refused(self):
        h = Harness(max_sessions=1)
        a = h.client()
        a.connect("a")
        b = h.client()
        self.assertEqual(b.connect("b").reason, C.CONNACK_REFUSED_SERVER_UNAVAILABLE)

    def test_connect_timeout_closes_silent_connection(self):
        h = Harness(connect_timeout=5)
        c = h.client()
        h.advance(4)
        self.assertFalse(c.closed)
        h.advance(2)
        self.assertTrue(c.closed)

    def test_keepalive_cap_refuses_311_client_asking_more(self):
        h = Harness(max_keepalive=60)
        c = h.client()
        self.assertEqual(c.connect("a", keep_alive=120).reason, C.CONNACK_REFUSED_IDENTIFIER_REJECTED)
        d = h.client()
        self.assertEqual(d.connect("b", keep_alive=30).reason, C.CONNACK_ACCEPTED)


class TestKeepAlive(unittest.TestCase):
    def test_disconnects_after_one_and_a_half_keepalive(self):
        # [MQTT-3.1.2-24]
        h = Harness()
        c = h.client()
        c.connect("a", keep_alive=10)
        h.advance(14)
        self.assertFalse(c.closed)
        h.advance(2)
        self.assertTrue(c.closed)

    def test_no_client_measures_less_than_one_and_a_half_keepalive(self):
        # 3.1.1 [MQTT-3.1.2-24], 5.0 [MQTT-3.1.2-22]. The broker's clock is
        # whole milliseconds: input read at tick T came at some time in
        # [T, T+1), and the client's clock started at the CONNACK, as late
        # as T+1. So the close must not come before tick T+1 + 3,000 for
        # keep-alive 2 (deadline T + 3,000 closed at 2,999.x ms after such a
        # CONNACK). Driven tick by tick, the clock passed in; near the wrap of
        # the 30-bit ticks too.
        from common.compat import TICKS_MASK

        for connect_ms in (1000, 1999, TICKS_MASK - 1500):
            h = Harness()
            broker = h.broker
            now = 5
            cid = broker.connection_made(now, connect_ms)
            broker.data_received(cid, encode_packet(Connect(4, True, 2, "ka"), 4), now, connect_ms)
            self.assertEqual(bytes(broker.output.take(cid)), b"\x20\x02\x00\x00")  # the CONNACK
            broker.output.next_dirty()
            closed_at = None
            for step in range(2900, 3100):
                ms = (connect_ms + step) & TICKS_MASK
                broker.tick(now + step // 1000, ms)
                if broker.output.is_closing(cid):
                    closed_at = step
                    break
            self.assertIsNotNone(closed_at)
            self.assertGreaterEqual(closed_at - 1, 3000, connect_ms)  # measured from the CONNACK's latest
            self.assertLessEqual(closed_at, 3001)  # and no later than that

    def test_any_packet_resets_keepalive(self):
        h = Harness()
        c = h.client()
        c.connect("a", keep_alive=10)
        for _ in range(5):
            h.advance(10)
            c.ping()  # [MQTT-3.12.4-1] PINGRESP
        self.assertFalse(c.closed)

    def test_zero_keepalive_never_expires(self):
        h = Harness()
        c = h.client()
        c.connect("a", keep_alive=0)
        h.advance(100)
        self.assertFalse(c.closed)


class TestSessions(unittest.TestCase):
    def test_clean_session_discards_state(self):
        # [MQTT-3.1.2-6] [MQTT-3.2.2-1]
        h = Harness()
        c = h.client()
        c.connect("a", clean=False)
        c.subscribe("t", 1)
        c.drop()
        d = h.client()
        ack = d.connect("a", clean=True)
        self.assertFalse(ack.session_present)
        p = h.client()
        p.connect("p")
        p.publish("t", b"x", qos=1)
        self.assertEqual(d.take(), [])

    def test_persistent_session_resumed_with_session_present(self):
        # [MQTT-3.1.2-4] [MQTT-3.2.2-2]
        h = Harness()
        c = h.client()
        self.assertFalse(c.connect("a", clean=False).session_present)
        c.subscribe("t", 1)
        c.drop()
        d = h.client()
        self.assertTrue(d.connect("a", clean=False).session_present)
        p = h.client()
        p.connect("p")
        p.publish("t", b"x", qos=1)
        msg = d.expect(C.PUBLISH)
        self.assertEqual(msg.payload, b"x")

    def test_clean_session_ends_when_connection_ends(self):
        # [MQTT-3.1.2-6]
        h = Harness()
        c = h.client()
        c.connect("a", clean=True)
        self.assertIsNotNone(h.broker.sessions.find("a"))
        c.drop()
        self.assertIsNone(h.broker.sessions.find("a"))

    def test_offline_messages_queued_and_delivered_in_order(self):
        # [MQTT-3.1.2-5] [MQTT-4.6.0-6]
        h = Harness()
        c = h.client()
        c.connect("a", clean=False)
        c.subscribe("t", 1)
        c.drop()
        p = h.client()
        p.connect("p")
        for i in range(5):
            p.publish("t", bytes([i]), qos=1, packet_id=i + 1)
        d = h.client()
        d.connect("a", clean=False)
        got = [m.payload for m in d.take()]
        self.assertEqual(got, [bytes([i]) for i in range(5)])

    def test_qos0_not_queued_offline_by_default(self):
        h = Harness()
        c = h.client()
        c.connect("a", clean=False)
        c.subscribe("t", 1)
        c.drop()
        p = h.client()
        p.connect("p")
        p.publish("t", b"q0")
        d = h.client()
        d.connect("a", clean=False)
        self.assertEqual(d.take(), [])
        self.assertEqual(h.broker.stats.dropped_qos0, 1)

    def test_qos0_queued_offline_when_configured(self):
        h = Harness(queue_qos0_offline=True)
        c = h.client()
        c.connect("a", clean=False)
        c.subscribe("t", 1)
        c.drop()
        p = h.client()
        p.connect("p")
        p.publish("t", b"q0")
        d = h.client()
        d.connect("a", clean=False)
        self.assertEqual([m.payload for m in d.take()], [b"q0"])

    def test_persistent_session_expiry_setting(self):
        h = Harness(persistent_session_expiry=60)
        c = h.client()
        c.connect("a", clean=False)
        c.drop()
        h.advance(59)
        self.assertIsNotNone(h.broker.sessions.find("a"))
        h.advance(2)
        self.assertIsNone(h.broker.sessions.find("a"))


class TestTakeover(unittest.TestCase):
    def test_second_connection_with_same_id_takes_over(self):
        # [MQTT-3.1.4-2]
        h = Harness()
        a = h.client()
        a.connect("same", clean=False)
        a.subscribe("t", 1)
        b = h.client()
        ack = b.connect("same", clean=False)
        self.assertTrue(a.closed)
        self.assertFalse(b.closed)
        self.assertTrue(ack.session_present)
        p = h.client()
        p.connect("p")
        p.publish("t", b"x", qos=1)
        self.assertEqual(b.expect(C.PUBLISH).payload, b"x")
        self.assertEqual(a.take(), [])

    def test_takeover_publishes_old_will(self):
        h = Harness()
        w = h.client()
        w.connect("watcher")
        w.subscribe("will/#")
        a = h.client()
        a.connect("same", will=("will/a", b"gone", 0, False))
        b = h.client()
        b.connect("same")
        self.assertEqual(w.expect(C.PUBLISH).payload, b"gone")

    def test_clean_successor_never_gets_earlier_generation_messages(self):
        # DESIGN: a delivery routed under an earlier generation never reaches
        # a clean-start successor.
        h = Harness()
        a = h.client()
        a.connect("same", clean=False)
        a.subscribe("t", 1)
        p = h.client()
        p.connect("p")
        a.drop()
        p.publish("t", b"old", qos=1)
        b = h.client()
        b.connect("same", clean=True)
        b.subscribe("t", 1)
        p.publish("t", b"new", qos=1, packet_id=2)
        self.assertEqual([m.payload for m in b.take() if m.ptype == C.PUBLISH], [b"new"])


class TestWill(unittest.TestCase):
    def setUp(self):
        self.h = Harness()
        self.w = self.h.client()
        self.w.connect("watcher")
        self.w.subscribe("will/#", 2)

    def test_will_on_connection_loss(self):
        # [MQTT-3.1.2-8]
        c = self.h.client()
        c.connect("a", will=("will/a", b"bye", 1, False))
        c.drop()
        msg = self.w.expect(C.PUBLISH)
        self.assertEqual(msg.topic, "will/a")
        self.assertEqual(msg.payload, b"bye")
        self.assertEqual(msg.qos, 1)

    def test_a_will_that_cannot_be_kept_is_refused_not_dropped(self):
        # The CONNACK acknowledges the will: with the message pool full it
        # is refused (v5 0x97, 3.1.1 0x03) and counted, never accepted and
        # then silently not kept.
        h = Harness(max_messages=2)
        sub = h.client()
        sub.connect("sub", clean=False)
        sub.subscribe("t", 1)
        sub.drop()
        pub = h.client()
        pub.connect("pub")
        pub.publish("t", b"1", qos=1, packet_id=1)
        pub.publish("t", b"2", qos=1, packet_id=2)  # the pool's two slabs are queued
        v5 = h.client(level=5)
        ack = v5.connect("w5", will=("will/w5", b"bye", 0, False))
        self.assertEqual(ack.reason, C.RC_QUOTA_EXCEEDED)
        v311 = h.client()
        ack = v311.connect("w3", will=("will/w3", b"bye", 0, False))
        self.assertEqual(ack.reason, C.CONNACK_REFUSED_SERVER_UNAVAILABLE)
        self.assertEqual(h.broker.stats.dropped_no_slab, 2)
        plain = h.client()
        self.assertEqual(plain.connect("nowill").reason, 0)  # without a will it fits

    def test_no_will_after_disconnect(self):
        # [MQTT-3.1.2-10] [MQTT-3.14.4-3]
        c = self.h.client()
        c.connect("a", will=("will/a", b"bye", 1, False))
        c.disconnect()
        self.assertTrue(c.closed)
        self.assertEqual(self.w.take(), [])

    def test_will_on_keepalive_timeout(self):
        c = self.h.client()
        c.connect("a", keep_alive=2, will=("will/a", b"ka", 0, False))
        self.h.advance(4)
        self.assertTrue(c.closed)
        self.assertEqual(self.w.expect(C.PUBLISH).payload, b"ka")

    def test_will_on_protocol_error(self):
        c = self.h.client()
        c.connect("a", will=("will/a", b"err", 0, False))
        c.send_raw(b"\x30\x02\x00")  # truncated topic length: malformed
        c.send_raw(b"\xf0\x00")  # AUTH at level 4: malformed
        self.assertTrue(c.closed)
        self.assertEqual(self.w.expect(C.PUBLISH).payload, b"err")

    def test_retained_will(self):
        # [MQTT-3.1.2-17]
        c = self.h.client()
        c.connect("a", will=("will/r", b"kept", 0, True))
        c.drop()
        self.w.take()
        late = self.h.client()
        late.connect("late")
        late.subscribe("will/r")
        msg = late.expect(C.PUBLISH)
        self.assertEqual(msg.payload, b"kept")
        self.assertTrue(msg.retain)

    def test_will_under_sys_refused(self):
        c = self.h.client()
        ack = c.connect("a", will=("$SYS/x", b"no", 0, False))
        self.assertEqual(ack.reason, C.CONNACK_REFUSED_NOT_AUTHORIZED)
        self.assertTrue(c.closed)

    def test_will_topic_too_deep_refused(self):
        h = Harness(max_topic_levels=2)
        c = h.client()
        ack = c.connect("a", will=("a/b/c", b"no", 0, False))
        self.assertNotEqual(ack.reason, C.CONNACK_ACCEPTED)
        self.assertTrue(c.closed)


class TestIsolation(unittest.TestCase):
    def test_bad_packet_closes_only_its_connection(self):
        h = Harness()
        good = h.client()
        good.connect("good")
        good.subscribe("t")
        bad = h.client()
        bad.connect("bad")
        bad.send_raw(b"\x82\x04\x00\x01\x00\x05")  # SUBSCRIBE: filter length past the end
        self.assertTrue(bad.closed)
        p = h.client()
        p.connect("p")
        p.publish("t", b"still here")
        self.assertEqual(good.expect(C.PUBLISH).payload, b"still here")

    def test_server_packets_from_client_are_protocol_errors(self):
        h = Harness()
        for raw in (b"\x20\x02\x00\x00", b"\x90\x03\x00\x01\x00", b"\xd0\x00"):
            c = h.client()
            c.connect("x")
            c.send_raw(raw)
            self.assertTrue(c.closed)

    def test_publish_before_subscribe_and_subscribe_in_same_chunk(self):
        h = Harness()
        c = h.client()
        data = encode_packet(Connect(level=4, clean_start=True, client_id="x"), 4)
        data += encode_packet(Subscribe(1, [("t", 0)], None), 4)
        data += encode_packet(Publish("t", b"self", 0, False, False, 0, None), 4)
        c.send_raw(data)
        self.assertEqual([p.ptype for p in c.take()], [C.CONNACK, C.SUBACK, C.PUBLISH])
