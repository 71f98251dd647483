# The sans-I/O MQTT client (common/client/client.py) against the sans-I/O
# broker, bytes moved by hand (tests/core/wire.py). Runs on CPython and
# MicroPython.

import unittest

from common.client.client import CONNECTED, DISCONNECTED, Client
from common.mqtt import consts as C
from common.mqtt.packets import Connack, PubAck, Publish, encode_packet
from tests.core.harness import Harness
from tests.core.wire import Recorder, Wire


def made(rec, client_id, level=4, clean=True, **options):
    """A Client with `options` set (its attributes)."""
    client = Client(rec, client_id, level, clean)
    for name, value in options.items():
        assert hasattr(client, name), name
        setattr(client, name, value)
    return client


def joined(h, level=4, clean=True, **kw):
    rec = Recorder()
    client = made(rec, "dev", level, clean, **kw)
    wire = Wire(h, client)
    client.connect(wire.ms())
    wire.settle()
    return rec, client, wire


def publish_types(chunks):
    """First bytes of the PUBLISH packets in raw chunks (one packet per chunk or more)."""
    from common.mqtt.codec import FrameReader

    r = FrameReader()
    firsts = []
    for chunk in chunks:
        r.feed(chunk)
        while True:
            frame = r.maybe_read_frame()
            if frame is None:
                break
            if frame[0] >> 4 == C.PUBLISH:
                firsts.append(frame[0])
    return firsts


class TestConnect(unittest.TestCase):
    def test_connects_at_both_levels(self):
        for level in (4, 5):
            h = Harness()
            rec, client, _ = joined(h, level)
            self.assertEqual(rec.events, [("connected", False)])
            self.assertEqual(client.state, CONNECTED)
            self.assertEqual(h.broker.snapshot()["connected"], 1)

    def test_refusal_is_told(self):
        from common.broker import security_files

        h = Harness()
        security_files.set_security(h.broker, None, None, False, h.now)
        rec, client, _ = joined(h, 4)
        self.assertEqual(rec.events, [("refused", 5)])
        self.assertEqual(client.state, DISCONNECTED)

    def test_bridge_bit_on_the_level(self):
        rec = Recorder()
        client = made(rec, "b", 4, bridge=True)
        client.connect(0)
        out = client.take_output()
        self.assertEqual(out[8], 0x84)  # "MQTT" level | 0x80 (Mosquitto's try_private)

    def test_a_packet_before_connack_closes(self):
        rec = Recorder()
        client = Client(rec, "b")
        client.connect(0)
        client.data_received(b"\xd0\x00", 0)  # PINGRESP
        self.assertEqual(rec.events[0][0], "closed")

    def test_garbage_closes(self):
        h = Harness()
        rec, client, _ = joined(h)
        client.data_received(b"\x00\x00", 0)  # packet type 0 is reserved
        self.assertEqual(rec.events[-1][0], "closed")
        self.assertEqual(client.state, DISCONNECTED)


class TestPublishOut(unittest.TestCase):
    def test_qos_0_1_2_reach_a_subscriber(self):
        for level in (4, 5):
            h = Harness()
            sub = h.client(level)
            sub.connect("sub")
            sub.subscribe("a/#", 2)
            rec, client, wire = joined(h, level)
            client.publish("a/0", b"zero", 0)
            client.publish("a/1", b"one", 1, token="t1")
            client.publish("a/2", b"two", 2, token="t2")
            client.pump(wire.ms())
            wire.settle()
            got = [(p.topic, p.payload, p.qos) for p in sub.take() if p.ptype == C.PUBLISH]
            self.assertEqual(got, [("a/0", b"zero", 0), ("a/1", b"one", 1), ("a/2", b"two", 2)])
            # QoS 1 at its PUBACK, QoS 2 at its PUBREC; PUBCOMP ends the flow
            self.assertEqual(rec.delivered(), [("t1", 0), ("t2", 0)])
            self.assertEqual(client.pending(), 0)

    def test_qos0_with_a_token_waits_for_the_connection(self):
        rec = Recorder()
        client = Client(rec, "x")
        self.assertFalse(client.publish("a", b"", 0))  # no token, not connected: dropped
        self.assertTrue(client.publish("a", b"", 0, token=9))
        self.assertEqual(client.pending(), 1)
        h = Harness()
        wire = Wire(h, client)
        client.connect(0)
        wire.settle()
        self.assertEqual(rec.delivered(), [(9, 0)])

    def test_own_window(self):
        h = Harness()
        rec, client, wire = joined(h, 4, max_inflight=2)
        for i in range(5):
            client.publish("t", b"%d" % i, 1, token=i)
        client.pump(wire.ms())
        self.assertEqual(len(client.inflight), 2)
        self.assertEqual(len(client.queue), 3)
        wire.settle()
        self.assertEqual(rec.delivered(), [(i, 0) for i in range(5)])

    def test_server_receive_maximum_bounds_the_window(self):
        # 3.3.4: no more unacknowledged QoS 1/2 PUBLISHes than the server's Receive Maximum
        h = Harness(max_inflight_in=3)
        rec, client, wire = joined(h, 5, max_inflight=100)
        self.assertEqual(client.window, 3)
        for i in range(10):
            client.publish("t", b"x", 2, token=i)
        client.pump(wire.ms())
        self.assertEqual(len(client.inflight), 3)
        wire.settle()
        self.assertEqual(len(rec.delivered()), 10)

    def test_server_maximum_qos_downgrades(self):
        h = Harness(maximum_qos=1)
        rec, client, wire = joined(h, 5)
        client.publish("t", b"x", 2, token=1)
        client.pump(wire.ms())
        self.assertEqual(client.inflight[0].qos, 1)
        wire.settle()
        self.assertEqual(rec.delivered(), [(1, C.RC_NO_MATCHING_SUBSCRIBERS)])

    def test_v5_refusal_is_delivered_with_its_reason(self):
        h = Harness()
        rec, client, wire = joined(h, 5)
        client.publish("$SYS/x", b"x", 1, token="bad")  # only the broker publishes there
        client.publish("ok", b"x", 1, token="ok")
        client.pump(wire.ms())
        wire.settle()
        self.assertEqual(rec.delivered(), [("bad", C.RC_NOT_AUTHORIZED), ("ok", C.RC_NO_MATCHING_SUBSCRIBERS)])


class TestResume(unittest.TestCase):
    def test_unacknowledged_resent_with_dup(self):
        # [MQTT-4.4.0-1] on a resumed session, unacknowledged PUBLISHes go
        # again, in order, with DUP; a PUBREC'd one gets its PUBREL again.
        for level in (4, 5):
            h = Harness()
            sub = h.client(level)
            sub.connect("sub", clean=False)
            sub.subscribe("t/#", 2)
            rec = Recorder()
            kw = {"session_expiry": 100} if level == 5 else {}
            client = made(rec, "dev", level, False, **kw)
            wire = Wire(h, client)
            client.connect(0)
            wire.settle()
            client.publish("t/1", b"1", 1, token=1)
            client.publish("t/2", b"2", 2, token=2)
            client.pump()
            wire.drop()  # lost in transit: the broker saw neither
            self.assertEqual(client.pending(), 2)
            wire2 = Wire(h, client)
            client.connect(1000)
            wire2.settle()
            self.assertEqual(rec.events[-3:], [("connected", True), ("delivered", 1, 0), ("delivered", 2, 0)][-3:])
            # the resent PUBLISHes carry DUP (0x08)
            self.assertEqual(publish_types(wire2.sent), [0x3A, 0x3C])
            got = [p.payload for p in sub.take() if p.ptype == C.PUBLISH]
            self.assertEqual(got, [b"1", b"2"])
            self.assertEqual(client.pending(), 0)

    def test_lost_session_resends_as_new(self):
        h = Harness()
        rec = Recorder()
        client = made(rec, "dev", 4, True)
        wire = Wire(h, client)
        client.connect(0)
        wire.settle()
        client.publish("t", b"1", 1, token=1)
        client.pump()
        wire.drop()
        wire2 = Wire(h, client)
        client.connect(0)
        wire2.settle()
        self.assertEqual(publish_types(wire2.sent), [0x32])  # no DUP: a new message for this session
        self.assertEqual(rec.delivered(), [(1, 0)])


class TestReceive(unittest.TestCase):
    def test_app_acks_qos_1_and_2(self):
        h = Harness()
        rec, client, wire = joined(h, 4)
        client.subscribe([("in/#", 2)])
        wire.settle()
        pub = h.client(4)
        pub.connect("pub")
        pub.publish("in/1", b"a", 1, packet_id=1)
        pub.publish("in/2", b"b", 2, packet_id=2)
        wire.settle()
        self.assertEqual([(m.topic, m.qos) for m in rec.messages], [("in/1", 1), ("in/2", 2)])
        session = h.broker.sessions.find("dev")
        self.assertEqual(len(session.inflight), 2)  # not acked by the app yet
        for m in rec.messages:
            client.ack(m.packet_id)
        wire.settle()  # PUBACK; PUBREC -> PUBREL -> PUBCOMP [MQTT-4.3.3-11]
        self.assertEqual(len(session.inflight), 0)

    def test_qos2_resent_is_not_handed_over_twice(self):
        rec = Recorder()
        client = Client(rec, "x")
        client.connect(0)
        client.data_received(encode_packet(Connack(False, 0), 4), 0)
        pub = encode_packet(Publish("t", b"p", 2, False, False, 7), 4)
        client.data_received(pub, 0)
        client.ack(7)
        client.take_output()
        # [MQTT-4.3.3-10] a resent PUBLISH gets PUBREC again, nothing onward
        dup = encode_packet(Publish("t", b"p", 2, False, True, 7), 4)
        client.data_received(dup, 0)
        self.assertEqual(len(rec.messages), 1)
        self.assertEqual(client.take_output(), encode_packet(PubAck(C.PUBREC, 7), 4))  # PUBREC again
        client.data_received(encode_packet(PubAck(C.PUBREL, 7), 4), 0)
        self.assertEqual(client.take_output(), encode_packet(PubAck(C.PUBCOMP, 7), 4))
        client.data_received(pub, 0)  # after PUBCOMP: a new message [MQTT-4.3.3-12]
        self.assertEqual(len(rec.messages), 2)


class TestKeepAlive(unittest.TestCase):
    def test_ping_then_dead(self):
        rec = Recorder()
        client = made(rec, "x", keep_alive=10)
        client.connect(0)
        client.data_received(encode_packet(Connack(False, 0), 4), 0)
        client.take_output()
        self.assertEqual(client.tick(5000), 10000)
        client.tick(10000)
        self.assertEqual(client.take_output(), b"\xc0\x00")  # PINGREQ
        client.data_received(b"\xd0\x00", 12000)  # PINGRESP
        client.tick(15000)
        self.assertEqual(client.state, CONNECTED)
        client.tick(20000)
        self.assertEqual(client.take_output(), b"\xc0\x00")
        client.tick(29999)
        self.assertEqual(client.state, CONNECTED)
        client.tick(30000)  # keep-alive seconds after the PINGREQ, nothing heard
        self.assertEqual(rec.events[-1][0], "closed")
        self.assertIn("keep-alive", rec.events[-1][1])

    def test_connect_timeout(self):
        rec = Recorder()
        client = made(rec, "x", connect_timeout_ms=3000)
        client.connect(100)
        self.assertEqual(client.tick(200), 3100)
        client.tick(3100)
        self.assertEqual(rec.events, [("closed", "no CONNACK within 3000 ms")])


if __name__ == "__main__":
    unittest.main()
