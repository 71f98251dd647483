# The connection driver (common/driver.py) over a real Broker, with the shell
# played by in-memory handles and a hand-turned millisecond clock. Runs
# unchanged under MicroPython (tests/upy/run.py).

import unittest

from common.broker.settings import new_settings
from common.compat import TICKS_MASK
from common.driver import MAX_SLEEP_MS, Driver
from common.mqtt import consts as C
from common.mqtt.codec import FrameReader
from common.mqtt.packets import Connect, Disconnect, Pingreq, PubAck, Publish, Subscribe, decode_packet, encode_packet
from common.store.store import Store
from common.store.store_open import open_records
from common.store.storeboot import new_broker
from tests.core.memkv import MemKV


class Clock:
    def __init__(self, ms=0):
        self.ms = ms

    def read(self):
        return self.ms


class Handle:
    """The shell's side of one connection: what the driver asked of it."""

    def __init__(self, level=4):
        self.level = level
        self.reader = FrameReader(1 << 20)
        self.inbox = []
        self.events = []
        self.buffered = 0  # what pending() reports

    def write(self, data):
        self.reader.feed(data)
        while True:
            frame = self.reader.maybe_read_frame()
            if frame is None:
                break
            self.inbox.append(decode_packet(frame[0], self.reader.buf, frame[1], frame[2], self.level))
        self.reader.keep()  # `data` is valid only during the call

    def half_close(self):
        self.events.append("half_close")

    def close(self):
        self.events.append("close")

    def abort(self):
        self.events.append("abort")

    def pending(self):
        return self.buffered

    def pause_reading(self):
        self.events.append("pause")

    def resume_reading(self):
        self.events.append("resume")

    def types(self):
        got = [p.ptype for p in self.inbox]
        self.inbox = []
        return got


class DriverTest(unittest.TestCase):
    def make(self, start=0, store=None, **overrides):
        self.clock = Clock(start)
        self.broker = new_broker(new_settings(overrides), lambda n: bytes(n), store)
        self.driver = Driver(self.broker, self.clock.read, 2, 5)

    def at(self, ms):
        """Let the clock reach `ms` after the start and run the timers."""
        self.clock.ms = (self.start + ms) & TICKS_MASK
        return self.driver.tick()

    def open(self, client_id, level=4, keep_alive=0, clean=True):
        h = Handle(level)
        cid = self.driver.connection_made(h)
        self.assertTrue(cid >= 0)
        pkt = Connect(level=level, clean_start=clean, keep_alive=keep_alive, client_id=client_id)
        self.send(cid, pkt, level)
        self.assertEqual(h.types(), [C.CONNACK])
        return cid, h

    def send(self, cid, pkt, level=4):
        self.driver.data_received(cid, encode_packet(pkt, level))
        self.driver.flush()

    def retain(self, count):
        """`count` retained messages r/00, r/01 ... of 90 bytes."""
        setter, _h = self.open("setter")
        for i in range(count):
            self.send(setter, Publish("r/%02d" % i, b"v" * 90, 0, True, False, 0, None))

    def setUp(self):
        self.start = 0
        self.make()

    def test_flush_writes_what_the_broker_produced_and_nothing_more(self):
        cid, h = self.open("a")
        self.send(cid, Pingreq())
        self.assertEqual(h.types(), [C.PINGRESP])
        self.driver.flush()
        self.assertEqual((h.types(), h.events), ([], []))

    def test_wants_flush_after_a_close_only_when_it_left_output(self):
        # The host skips its flush turn after a close when wants_flush() is
        # False: a will published on the close must say True.
        sub, hs = self.open("sub")
        self.send(sub, Subscribe(1, [("w/#", 0)], None))
        self.assertEqual(hs.types(), [C.SUBACK])
        quiet, _h = self.open("quiet")
        self.driver.connection_lost(quiet)
        self.assertFalse(self.driver.wants_flush())
        willing = self.driver.connection_made(Handle())
        pkt = Connect(level=4, clean_start=True, keep_alive=0, client_id="w", will_topic="w/x", will_payload=b"gone")
        self.send(willing, pkt)
        self.assertFalse(self.driver.wants_flush())
        self.driver.connection_lost(willing)  # [MQTT-3.1.2-8] the will goes out
        self.assertTrue(self.driver.wants_flush())
        self.driver.flush()
        self.assertEqual(hs.types(), [C.PUBLISH])
        self.assertFalse(self.driver.wants_flush())

    def test_keep_alive_closes_at_one_and_a_half_times_to_the_ms(self):
        # Across the wrap of the 30-bit ticks, as MicroPython's ticks_ms wraps.
        # [MQTT-3.1.2-24]: 1,500 ms from the end of the millisecond the
        # CONNECT came in (broker.keep_alive_deadline).
        self.start = TICKS_MASK - 700
        self.make(self.start)
        _cid, h = self.open("ka", level=5, keep_alive=1)
        self.assertEqual(self.at(0), MAX_SLEEP_MS)  # nothing sooner: a capped sleep
        self.assertEqual(self.at(1000), 501)  # the shell sleeps to the deadline
        self.assertEqual(self.at(1500), 1)
        self.assertEqual((h.types(), h.events), ([], []))
        self.at(1501)
        pkt = h.inbox.pop()
        self.assertEqual((pkt.ptype, pkt.reason), (C.DISCONNECT, C.RC_KEEP_ALIVE_TIMEOUT))
        # A silent peer has nothing to drain: closed at once, no linger.
        self.assertEqual(h.events, ["close"])

    def test_activity_moves_the_keep_alive_deadline(self):
        cid, h = self.open("ka", keep_alive=2)
        self.clock.ms = 2000
        self.send(cid, Pingreq())
        self.assertEqual(h.types(), [C.PINGRESP])
        self.assertEqual(self.at(3000), 1)  # the old deadline: only a scan
        self.assertEqual(self.at(5000), 1)
        self.assertEqual(h.events, [])
        self.at(5001)
        self.assertEqual(h.events, ["close"])

    def test_a_publisher_outrunning_an_online_subscriber_is_throttled_not_thinned(self):
        # The subscriber holds 2 unacknowledged (max_inflight) and its queue
        # takes 8: at half of it the publisher is not read any more, and what
        # it had already sent in the same read waits in its frame reader. As
        # the subscriber acknowledges, the queue drains and the publisher is
        # read again: every message arrives, in order, nothing is dropped.
        self.make(max_inflight=2, max_queued_messages=8)
        sub, hs = self.open("sub")
        self.send(sub, Subscribe(1, [("t", 1)], None))
        self.assertEqual(hs.types(), [C.SUBACK])
        pub, hp = self.open("pub")
        burst = b"".join(encode_packet(Publish("t", bytes([i]), 1, False, False, i + 1, None), 4) for i in range(30))
        self.driver.data_received(pub, burst)
        self.driver.flush()
        self.assertEqual(hp.events, ["pause"])
        self.assertEqual(self.broker.sessions.find("sub").queue.count, 4)  # stopped at the high-water mark
        got = []
        for _ in range(100):
            sent = [p for p in hs.inbox if p.ptype == C.PUBLISH]
            hs.inbox = []
            if not sent:
                break
            for p in sent:
                got.append(p.payload[0])
                self.send(sub, PubAck(C.PUBACK, p.packet_id, 0, None))
        self.assertEqual(got, list(range(30)))
        self.assertEqual(self.broker.stats.dropped_queue_full, 0)
        self.assertEqual(len([p for p in hp.inbox if p.ptype == C.PUBACK]), 30)
        self.assertEqual(hp.events[-1], "resume")
        self.assertEqual(self.broker.throttled, [])

    def test_a_subscriber_that_never_catches_up_stalls_publishers_30_s_at_most(self):
        self.make(max_inflight=1, max_queued_messages=2, queue_full="drop_newest")
        sub, _hs = self.open("sub")
        self.send(sub, Subscribe(1, [("t", 1)], None))
        pub, hp = self.open("pub")
        for i in range(3):
            self.send(pub, Publish("t", b"x", 1, False, False, i + 1, None))
        self.assertEqual(hp.events, ["pause"])
        self.at(29000)
        self.assertEqual(hp.events, ["pause"])
        self.at(30000)
        self.assertEqual(hp.events, ["pause", "resume"])
        # For as long again, queue_full decides: dropped and counted, not held.
        self.send(pub, Publish("t", b"x", 1, False, False, 9, None))
        self.assertEqual(self.broker.throttled, [])
        self.assertTrue(self.broker.stats.dropped_queue_full >= 1)

    def test_only_the_publisher_feeding_the_backlog_is_throttled(self):
        # A retained replay that fills a queue is not a publisher's doing:
        # the next, unrelated publisher is read on.
        self.make(max_inflight=1, max_queued_messages=4)
        setter, _hset = self.open("setter")
        for i in range(4):
            self.send(setter, Publish("r/%d" % i, b"x", 1, True, False, i + 1, None))
        sub, _hs = self.open("sub")
        self.send(sub, Subscribe(1, [("r/#", 1)], None))  # 1 sent, 3 queued: past half
        other, ho = self.open("other")
        self.send(other, Publish("elsewhere", b"y", 1, False, False, 1, None))
        self.assertEqual(self.broker.throttled, [])
        self.assertEqual(ho.events, [])

    def test_a_publisher_subscribed_to_itself_is_not_throttled_by_its_own_queue(self):
        # Throttled, it would not be read, so the PUBACKs that drain its own
        # queue would wait too: every message must still come round.
        self.make(max_inflight=2, max_queued_messages=8)
        me, h = self.open("me")
        self.send(me, Subscribe(1, [("t", 1)], None))
        burst = b"".join(encode_packet(Publish("t", bytes([i]), 1, False, False, i + 1, None), 4) for i in range(6))
        self.driver.data_received(me, burst)
        self.driver.flush()
        self.assertEqual(self.broker.sessions.find("me").queue.count, 4)  # past half of 8
        self.assertEqual((self.broker.throttled, h.events), ([], []))
        got = []
        for _ in range(20):
            sent = [p for p in h.inbox if p.ptype == C.PUBLISH]
            h.inbox = []
            for p in sent:
                got.append(p.payload[0])
                self.send(me, PubAck(C.PUBACK, p.packet_id, 0, None))
        self.assertEqual(got, list(range(6)))

    def test_throttle_and_output_backpressure_both_hold_reading(self):
        self.make(max_inflight=1, max_queued_messages=2)
        sub, _hs = self.open("sub")
        self.send(sub, Subscribe(1, [("t", 1)], None))
        pub, hp = self.open("pub")
        self.driver.set_paused(pub, True)  # its own output is stuck too
        self.assertEqual(hp.events, ["pause"])
        for i in range(3):
            self.send(pub, Publish("t", b"x", 1, False, False, i + 1, None))
        self.assertEqual(self.broker.throttled, [pub])
        self.driver.set_paused(pub, False)  # output drained: still throttled
        self.assertEqual(hp.events, ["pause"])
        self.driver.connection_lost(sub)  # the slow subscriber leaves: released
        self.driver.flush()
        self.assertEqual(hp.events, ["pause", "resume"])

    def test_a_throttled_publisher_is_not_closed_for_the_silence_we_caused(self):
        # Not read by our choice, its PINGREQs wait unread: the keep-alive
        # [MQTT-3.1.2-24] counts from its release, not from its last read.
        self.make(max_inflight=1, max_queued_messages=2)
        sub, _hs = self.open("sub")
        self.send(sub, Subscribe(1, [("t", 1)], None))
        pub, hp = self.open("pub", keep_alive=1)
        for i in range(3):
            self.send(pub, Publish("t", b"x", 1, False, False, i + 1, None))
        self.assertEqual(self.broker.throttled, [pub])
        for ms in (1000, 2000, 5000, 9000):
            self.at(ms)
        self.assertEqual(hp.events, ["pause"])  # neither closed nor released

    def test_connect_timeout(self):
        self.make(connect_timeout=3)
        h = Handle()
        self.driver.connection_made(h)
        self.at(2999)
        self.assertEqual(h.events, [])
        self.at(3000)
        self.assertEqual(h.events, ["close"])

    def test_connect_timeout_counts_from_the_accept(self):
        # A TLS shell registers the connection after its handshake: the time
        # that took is spent from the same connect_timeout.
        self.make(connect_timeout=3)
        self.clock.ms = 2500
        h = Handle()
        self.driver.connection_made(h, ("192.0.2.7:50432", None, False), 500)
        self.at(2999)
        self.assertEqual(h.events, [])
        self.at(3500)
        self.assertEqual(h.events, ["close"])

    def test_close_half_closes_then_lingers_then_closes_or_aborts(self):
        a, ha = self.open("a")
        b, hb = self.open("b")
        self.send(a, Disconnect(0, None))
        self.send(b, Disconnect(0, None))
        self.assertEqual((ha.events, hb.events), (["half_close"], ["half_close"]))
        self.driver.data_received(a, b"\xc0\x00")  # input while closing: discarded
        self.driver.flush()
        self.assertEqual(ha.types(), [])
        hb.buffered = 10  # b's peer reads nothing
        self.assertEqual(self.at(1999), 1)
        self.at(2000)  # close_linger = 2 s
        self.assertEqual((ha.events, hb.events), (["half_close", "close"], ["half_close", "abort"]))
        self.driver.connection_lost(a)
        self.driver.connection_lost(b)
        self.assertEqual(self.driver.open, 0)

    def test_a_close_of_the_shells_publishes_the_will_and_lingers(self):
        # A WebSocket close frame (cpython_host/transports/websocket.py): the network
        # connection is gone for the session, closed as the broker closes.
        watcher, hw = self.open("watcher")
        self.send(watcher, Subscribe(1, [("will/#", 0)], None))
        hw.types()
        h = Handle()
        cid = self.driver.connection_made(h)
        connect = Connect(level=4, client_id="ws", will_topic="will/ws", will_payload=b"gone")
        self.send(cid, connect)
        self.assertEqual(h.types(), [C.CONNACK])
        self.driver.close(cid)
        self.driver.flush()
        self.assertEqual(h.events, ["half_close"])
        self.assertEqual([(p.topic, p.payload) for p in hw.inbox], [("will/ws", b"gone")])
        self.driver.close(cid)  # closing already: nothing more
        self.driver.flush()
        self.assertEqual(h.events, ["half_close"])
        self.at(2000)  # close_linger
        self.assertEqual(h.events, ["half_close", "close"])
        self.driver.connection_lost(cid)
        self.assertEqual(self.driver.open, 1)

    def test_a_core_error_aborts_only_its_connection(self):
        a, ha = self.open("a")
        b, hb = self.open("b")
        self.driver.data_received(a, 12345)  # not bytes: the core raises
        self.assertEqual(ha.events, ["abort"])
        self.driver.data_received(a, encode_packet(Pingreq(), 4))  # aborted: ignored
        self.send(b, Pingreq())
        self.assertEqual((ha.types(), hb.types()), ([], [C.PINGRESP]))
        self.driver.connection_lost(a)
        self.assertEqual(self.driver.open, 1)

    def test_backpressure_pauses_the_core_and_the_reading(self):
        a, ha = self.open("a")
        b, _hb = self.open("b")
        self.send(a, Subscribe(1, [("t", 0)], None))
        self.assertEqual(ha.types(), [C.SUBACK])
        self.driver.set_paused(a, True)
        self.send(b, Publish("t", b"x", 0, False, False, 0, None))
        self.assertEqual((ha.types(), ha.events), ([], ["pause"]))
        self.driver.set_paused(a, False)
        self.driver.flush()
        self.assertEqual((ha.types(), ha.events), ([C.PUBLISH], ["pause", "resume"]))

    def test_a_retained_replay_goes_on_as_output_drains_and_holds_reading(self):
        # 30 retained messages of ~100 bytes, max_out_buffer 1000: a replay
        # of three flushes or so, the client's input held until it ends.
        self.make(max_out_buffer=1000)
        self.retain(30)
        a, ha = self.open("a")
        self.driver.set_paused(a, True)  # its transport is full
        self.driver.data_received(a, encode_packet(Subscribe(1, [("r/#", 0)], None), 4) + encode_packet(Pingreq(), 4))
        self.assertFalse(self.driver.flush())  # paused: nothing can go on
        self.assertEqual(ha.events, ["pause"])
        self.assertEqual(ha.types(), [])
        self.assertEqual(self.at(0), MAX_SLEEP_MS)  # no busy timer for a paused replay
        # The transport drains: the shell is told, flushes again while the
        # driver says a replay can go on (its socket takes everything here).
        self.driver.set_paused(a, False)
        self.assertEqual(ha.events, ["pause"])  # still held: the replay is pending
        flushes = 1
        while self.driver.flush():
            flushes += 1
        self.assertGreaterEqual(flushes, 3)
        kinds = ha.types()
        self.assertEqual(kinds, [C.SUBACK] + [C.PUBLISH] * 30 + [C.PINGRESP])  # the PINGREQ ran after it
        self.assertEqual(ha.events, ["pause", "resume"])
        self.assertEqual(self.broker.replaying, [])

    def test_a_replay_that_can_go_on_wakes_the_timer_at_once(self):
        self.make(max_out_buffer=100)
        self.retain(5)
        a, ha = self.open("a")
        self.driver.data_received(a, encode_packet(Subscribe(1, [("r/#", 0)], None), 4))
        self.assertEqual(self.at(0), 1)  # flushed one, more to go: soon again
        for _ in range(10):
            if self.at(1) != 1:
                break
        self.assertEqual(ha.types(), [C.SUBACK] + [C.PUBLISH] * 5)
        self.assertEqual(self.at(2), MAX_SLEEP_MS)
        self.driver.connection_lost(a)

    def test_batch_sync_every_store_sync_ms(self):
        store = Store(MemKV())
        open_records(store)
        self.make(store=store, store_sync="batch", store_sync_ms=100)
        cid, _h = self.open("away", clean=False)
        self.send(cid, Subscribe(1, [("q", 1)], None))
        synced = store.syncs
        self.assertEqual(self.at(0), 100)
        self.assertEqual(store.syncs, synced)  # nothing new to sync
        pub, hp = self.open("pub")
        self.send(pub, Publish("q", b"x", 1, False, False, 1, None))
        self.assertEqual(hp.types(), [C.PUBACK])  # batch: the ack leaves first
        self.assertTrue(store.dirty)
        self.at(99)
        self.assertTrue(store.dirty)
        self.at(100)
        self.assertFalse(store.dirty)
        self.assertEqual(store.syncs, synced + 1)

    def test_sys_every_sys_interval(self):
        self.make(sys_interval=2)
        self.assertEqual(self.at(0), 1000)  # the first tick publishes
        cid, h = self.open("sys")
        self.send(cid, Subscribe(1, [("$SYS/broker/clients/connected", 0)], None))
        pkt = h.inbox.pop()
        self.assertEqual((pkt.topic, pkt.payload, pkt.retain), ("$SYS/broker/clients/connected", b"0", True))
        self.assertEqual(h.types(), [C.SUBACK])
        self.at(1000)
        self.assertEqual(h.types(), [])
        self.at(2000)
        pkt = h.inbox.pop()
        self.assertEqual((pkt.topic, pkt.payload), ("$SYS/broker/clients/connected", b"1"))
        snap = self.broker.snapshot()
        self.assertEqual((snap["connected"], snap["sessions"], snap["subscriptions"]), (1, 1, 1))

    def test_shutdown_closes_everyone_then_aborts_the_rest(self):
        a, ha = self.open("a", level=5)
        _b, hb = self.open("b")
        self.assertEqual(self.driver.shutdown(), 5000)
        pkt = ha.inbox.pop()
        self.assertEqual((pkt.ptype, pkt.reason), (C.DISCONNECT, C.RC_SERVER_SHUTTING_DOWN))
        self.assertEqual((ha.events, hb.events), (["half_close"], ["half_close"]))
        self.driver.connection_lost(a)
        self.driver.abort_all()
        self.assertEqual((ha.events, hb.events), (["half_close"], ["half_close", "abort"]))


if __name__ == "__main__":
    unittest.main()
