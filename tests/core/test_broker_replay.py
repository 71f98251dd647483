# Retained replay as a cursor (common/broker/replay.py): the retained
# messages a SUBSCRIBE brings go out as the client's output drains, never
# more than max_out_buffer ahead, and hold the client's further input until
# they are all sent. Runs under CPython and MicroPython.

import unittest

from common.mqtt import consts as C
from common.mqtt.packets import Pingreq, Subscribe, encode_packet
from tests.core.harness import FUZZ_SETTINGS, Harness

BOUND = 1000  # max_out_buffer of these tests
RETAINED = 40
PAYLOAD = b"v" * 90  # ~100 bytes a PUBLISH: the whole replay is ~4 x BOUND
# The order of a replay: the retained store's (topic levels in sorted order).
ORDER = sorted("r/%d" % i for i in range(RETAINED))


def retained_broker(**overrides):
    """A broker holding RETAINED retained messages r/0 .. r/39 (QoS 1)."""
    settings = {"max_out_buffer": BOUND}
    settings.update(overrides)
    h = Harness(**settings)
    pub = h.client()
    pub.connect("pub")
    for i in range(RETAINED):
        pub.publish("r/%d" % i, PAYLOAD, qos=1, retain=True, packet_id=i + 1)
    pub.take()
    return h, pub


def paused_subscriber(h, level=4, client_id="sub", keep_alive=0):
    """A client connected, then its transport full (the shell said so)."""
    c = h.client(level)
    c.connect(client_id, keep_alive=keep_alive)
    h.broker.output.set_paused(c.cid, True)
    return c


def drain(h, c):
    """The client reads: its transport drains, the broker goes on."""
    h.broker.output.set_paused(c.cid, False)
    h.pump()


def read_one_bound(h, c):
    """The client reads a little: what waited goes out, the replay makes one
    bound more (as the driver's flush does: run_replays, then write), and
    the transport is full again; the PUBLISHes it got."""
    broker = h.broker
    broker.output.set_paused(c.cid, False)
    for _ in range(2):
        cid = broker.output.next_dirty()
        while cid >= 0:
            data = broker.output.take(cid)
            if cid == c.cid and data:
                c.receive(data)
            cid = broker.output.next_dirty()
        broker.run_replays(h.now)
    broker.output.set_paused(c.cid, True)
    return publishes(c.take())


def publishes(packets):
    return [p for p in packets if p.ptype == C.PUBLISH]


class TestReplayIsPaced(unittest.TestCase):
    def test_a_client_that_does_not_read_gets_at_most_max_out_buffer_ahead(self):
        h, _pub = retained_broker()
        c = paused_subscriber(h)
        c.send(Subscribe(1, [("r/#", 0)], None))
        conn = h.broker.connections.by_id[c.cid]
        # The SUBACK and about one bound of the replay, not all 40 (~4 KB).
        self.assertLess(conn.out_bytes, BOUND + 200)
        self.assertEqual(h.broker.replaying, [c.cid])
        self.assertEqual(c.take(), [])  # (paused: nothing taken)
        # Its output drains: everything, in order, retained [MQTT-3.3.1-8].
        drain(h, c)
        got = c.take()
        self.assertEqual(got[0].ptype, C.SUBACK)
        msgs = publishes(got)
        self.assertEqual([m.topic for m in msgs], ORDER)
        self.assertTrue(all(m.retain and m.payload == PAYLOAD and m.qos == 0 for m in msgs))
        self.assertEqual((h.broker.replaying, h.broker.replays), ([], []))

    def test_each_drain_sends_one_more_bound_in_order(self):
        h, _pub = retained_broker()
        c = paused_subscriber(h)
        c.send(Subscribe(1, [("r/#", 0)], None))
        conn = h.broker.connections.by_id[c.cid]
        topics = []
        for _ in range(10):
            got = read_one_bound(h, c)
            # What waited and one bound more: two bounds of 96-byte PUBLISHes.
            self.assertLessEqual(len(got), 2 * (BOUND // 96 + 1))
            topics += [m.topic for m in got]
            self.assertLess(conn.out_bytes, BOUND + 200)
            if c.cid not in h.broker.replaying:
                break
        self.assertEqual(topics, ORDER)

    def test_fifty_subscribes_in_one_read_cannot_stack_replays(self):
        # The abuse: SUBSCRIBE '#' again and again, never reading.
        h, _pub = retained_broker()
        c = paused_subscriber(h)
        burst = b"".join(encode_packet(Subscribe(i + 1, [("#", 0)], None), 4) for i in range(50))
        c.send_raw(burst + encode_packet(Pingreq(), 4))
        conn = h.broker.connections.by_id[c.cid]
        self.assertLess(conn.out_bytes, BOUND + 200)  # one SUBACK, one bound of one replay
        self.assertTrue(conn.reader.pending())  # the other 49 wait unparsed
        # The client reads: each SUBSCRIBE in turn, then the PINGREQ.
        drain(h, c)
        got = c.take()
        kinds = [p.ptype for p in got]
        self.assertEqual(kinds.count(C.SUBACK), 50)
        self.assertEqual(len(publishes(got)), 50 * RETAINED)
        self.assertEqual(kinds[-1], C.PINGRESP)
        # Each SUBACK comes before the replay its SUBSCRIBE started [MQTT-3.8.4-1].
        self.assertEqual(kinds[: RETAINED + 2], [C.SUBACK] + [C.PUBLISH] * RETAINED + [C.SUBACK])

    def test_input_waits_until_the_replay_ends(self):
        h, _pub = retained_broker()
        c = paused_subscriber(h)
        c.send(Subscribe(1, [("r/#", 0)], None))
        c.send(Pingreq())
        self.assertEqual(h.broker.replaying, [c.cid])
        drain(h, c)
        kinds = [p.ptype for p in c.take()]
        self.assertEqual(kinds, [C.SUBACK] + [C.PUBLISH] * RETAINED + [C.PINGRESP])

    def test_the_first_message_goes_before_the_others_are_looked_at(self):
        # The replay walks the retained store as it sends: when SUBSCRIBE's
        # turn ends, it has looked at the messages it sent and at most one
        # more, not at all 40 (each one looked at is checked for its expiry:
        # they all have one here, an hour away).
        h = Harness(max_out_buffer=BOUND)
        pub = h.client(level=5)
        pub.connect("pub")
        for i in range(RETAINED):
            pub.publish("r/%d" % i, PAYLOAD, retain=True, props=[(C.PROP_MESSAGE_EXPIRY_INTERVAL, 3600)])
        retained = h.broker.routing.retained
        looked_at = []
        expired = retained._expired

        def counting(msg, now):
            looked_at.append(msg.topic)
            return expired(msg, now)

        retained._expired = counting
        c = paused_subscriber(h)
        c.send(Subscribe(1, [("r/#", 0)], None))
        retained._expired = expired
        h.broker.output.set_paused(c.cid, False)
        c.receive(h.broker.output.take(c.cid))  # what SUBSCRIBE's turn wrote
        sent = [m.topic for m in publishes(c.take())]
        self.assertTrue(0 < len(sent) < RETAINED, len(sent))
        self.assertEqual(sent, ORDER[: len(sent)])
        self.assertTrue(len(sent) <= len(looked_at) <= len(sent) + 1, (len(sent), len(looked_at)))

    def test_a_reading_client_gets_everything_at_once(self):
        h, _pub = retained_broker()
        c = h.client()
        c.connect("sub")
        self.assertEqual(c.subscribe("r/#", 0).ptype, C.SUBACK)
        self.assertEqual(len(publishes(c.take())), RETAINED)


class TestReplayAndLiveMessages(unittest.TestCase):
    def test_a_value_retained_meanwhile_is_not_overtaken_by_the_old_one(self):
        h, pub = retained_broker()
        c = paused_subscriber(h)
        c.send(Subscribe(1, [("r/#", 0)], None))
        # Still owed: r/39 and r/38. A new value is retained on one, the
        # other is cleared [MQTT-3.3.1-10]. (Routed live too, but this
        # client's output is over max_out_buffer: QoS 0 dropped for it.)
        pub.publish("r/39", b"new", retain=True)
        pub.publish("r/38", b"", retain=True)
        drain(h, c)
        last = {}
        for m in publishes(c.take()):
            last[m.topic] = m.payload
        self.assertEqual(last["r/39"], b"new")  # the client ends with the newest
        self.assertEqual(last.get("r/38", b""), b"")  # never the old value after the clear
        self.assertEqual(last["r/0"], PAYLOAD)

    def test_a_live_message_delivered_meanwhile_is_followed_by_the_current_value(self):
        h, pub = retained_broker()
        c = paused_subscriber(h)
        c.send(Subscribe(1, [("r/#", 1)], None))  # QoS 1: the live copy is queued, not dropped
        pub.publish("r/39", b"new", qos=1, retain=True, packet_id=99)
        drain(h, c)
        got = [(m.topic, m.payload) for m in publishes(c.take())]
        mine = [p for t, p in got if t == "r/39"]
        self.assertEqual(mine[-1], b"new")
        self.assertNotIn(PAYLOAD, mine)  # the old value was replaced before its turn

    def test_a_topic_retained_meanwhile_comes_live_and_from_the_replay_only_below_a_node_not_yet_entered(self):
        h, pub = retained_broker()
        c = paused_subscriber(h)
        c.send(Subscribe(1, [("r/#", 1)], None))  # QoS 1: the live copies are queued, not dropped
        # r/5 is near the end of the order (ORDER[-5]), not reached yet.
        pub.publish("r/5/new", b"below", qos=1, retain=True, packet_id=98)
        pub.publish("r/99", b"beside", qos=1, retain=True, packet_id=99)  # "r"'s names were sorted on entry
        drain(h, c)
        got = []
        msgs = publishes(c.take())
        while msgs:  # the client acknowledges: what waits behind the inflight window comes
            got += [(m.topic, m.retain) for m in msgs]
            for m in msgs:
                c.ack(m)
            msgs = publishes(c.take())
        # Live with RETAIN 0 [MQTT-3.3.1-9]; from the replay with RETAIN 1 [MQTT-3.3.1-8], after r/5.
        self.assertEqual([r for t, r in got if t == "r/5/new"], [False, True])
        self.assertEqual([r for t, r in got if t == "r/99"], [False])
        replayed = [t for t, r in got if r]
        self.assertEqual(replayed, ORDER[: ORDER.index("r/5") + 1] + ["r/5/new"] + ORDER[ORDER.index("r/5") + 1 :])

    def test_an_expired_message_is_skipped_when_its_turn_comes(self):
        h = Harness(max_out_buffer=BOUND)
        pub = h.client(level=5)
        pub.connect("pub")
        for i in range(RETAINED):
            props = [(C.PROP_MESSAGE_EXPIRY_INTERVAL, 5)] if i == RETAINED - 1 else None
            pub.publish("r/%d" % i, PAYLOAD, retain=True, props=props)
        c = paused_subscriber(h)
        c.send(Subscribe(1, [("r/#", 0)], None))
        h.now += 10  # [MQTT-3.3.2-5] expired while it waited
        drain(h, c)
        topics = [m.topic for m in publishes(c.take())]
        self.assertEqual(topics, [t for t in ORDER if t != "r/39"])

    def test_v5_options_hold_for_every_message_of_the_replay(self):
        # QoS min(message, subscription) [MQTT-3.8.4-6], the Subscription
        # Identifier [MQTT-3.3.4-3], the retain flag [MQTT-3.3.1-8].
        h, _pub = retained_broker(max_inflight=100, max_queued_messages=100)
        c = paused_subscriber(h, level=5)
        c.send(Subscribe(1, [("r/#", 2)], [(C.PROP_SUBSCRIPTION_IDENTIFIER, 7)]))
        drain(h, c)
        msgs = publishes(c.take())
        self.assertEqual(len(msgs), RETAINED)
        for m in msgs:
            self.assertEqual((m.qos, m.retain), (1, True))
            self.assertIn((C.PROP_SUBSCRIPTION_IDENTIFIER, 7), m.props)


class TestReplayEnds(unittest.TestCase):
    def assert_released(self, h):
        self.assertEqual((h.broker.replaying, h.broker.replays), ([], []))

    def test_disconnect_takeover_and_leaving_release_everything(self):
        settings = dict(FUZZ_SETTINGS)
        settings["max_out_buffer"] = 40  # two of these retained messages
        h = Harness(**settings)
        pub = h.client()
        pub.connect("pub")
        for i in range(4):
            pub.publish("r/%d" % i, b"x" * 16, qos=1, retain=True, packet_id=i + 1)
        pub.disconnect()
        baseline = h.broker.routing.messages.in_use()
        # Leaves without DISCONNECT while owed messages.
        a = paused_subscriber(h, client_id="a")
        a.send(Subscribe(1, [("#", 1)], None))
        a.drop()
        self.assert_released(h)
        # Taken over while owed messages.
        b = paused_subscriber(h, client_id="b")
        b.send(Subscribe(1, [("#", 1)], None))
        self.assertEqual(h.broker.replaying, [b.cid])
        b2 = h.client()
        b2.connect("b")
        self.assertTrue(b.closed)
        self.assert_released(h)
        b2.disconnect()
        held = h.held()
        for part in held:
            self.assertEqual(held[part], 0, held)
        self.assertEqual(h.broker.routing.messages.in_use(), baseline)

    def test_a_client_that_reads_nothing_is_closed_after_replay_stall_timeout(self):
        h, _pub = retained_broker(replay_stall_timeout=5)
        c = paused_subscriber(h, level=5, keep_alive=1)
        c.send(Subscribe(1, [("r/#", 0)], None))
        h.advance(4)  # (its keep-alive is not what closes it: we do not read it)
        self.assertFalse(c.closed)
        h.advance(2)
        self.assertTrue(c.closed)
        self.assertEqual(h.broker.stats.closed_replay_stalled, 1)
        self.assert_released(h)
        # The DISCONNECT 0x97 was the last thing the broker had for it.
        conn_out = c.take()
        self.assertEqual((conn_out[-1].ptype, conn_out[-1].reason), (C.DISCONNECT, C.RC_QUOTA_EXCEEDED))
        self.assertEqual(h.broker.snapshot()["closed_replay_stalled"], 1)

    def test_a_slow_client_that_keeps_reading_is_not_closed(self):
        h, _pub = retained_broker(replay_stall_timeout=3)
        c = paused_subscriber(h)
        c.send(Subscribe(1, [("r/#", 0)], None))
        got = 0
        for _ in range(6):
            h.advance(2)  # reads a little every 2 s: one bound at a time
            got += len(read_one_bound(h, c))
        self.assertFalse(c.closed)
        self.assertEqual(got, RETAINED)
        self.assertEqual(h.broker.stats.closed_replay_stalled, 0)

    def test_zero_turns_the_stall_rule_off(self):
        h, _pub = retained_broker(replay_stall_timeout=0)
        c = paused_subscriber(h)
        c.send(Subscribe(1, [("r/#", 0)], None))
        h.advance(100)
        self.assertFalse(c.closed)
        drain(h, c)
        self.assertEqual(len(publishes(c.take())), RETAINED)


if __name__ == "__main__":
    unittest.main()
