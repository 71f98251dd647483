# Rate limits refilled from the ms clock (common/broker/ratelimit.py,
# buckets.py), through the driver (common/driver.py) with a hand-turned
# millisecond clock: the long-run rate is exact, a held client is read again
# a step (REFILL_MS) after its hold when its debt is paid then, not a second
# later, the driver's next deadline names that release (and none when
# nobody is held), and rate_grace still closes a client that never slows
# down. Runs unchanged under MicroPython (tests/upy/run.py).

import unittest

from common.broker.ratelimit import REFILL_MS
from common.broker.settings import new_settings
from common.compat import TICKS_MASK
from common.driver import MAX_SLEEP_MS, Driver
from common.mqtt import consts as C
from common.mqtt.packets import Connect, Publish, Subscribe, encode_packet
from common.store.storeboot import new_broker
from tests.core.test_driver import Clock, Handle

RATE = 100  # rate_messages


def publishes(n, level=4, topic="t"):
    return b"".join([encode_packet(Publish(topic, b"x", 0, False, False, 0, None), level) for _ in range(n)])


class RateRefillTest(unittest.TestCase):
    def make(self, start=0, **overrides):
        self.start = start
        self.clock = Clock(start)
        s = {"rate_messages": RATE, "rate_grace": 0}
        s.update(overrides)
        self.broker = new_broker(new_settings(s), lambda n: bytes(n), None)
        self.driver = Driver(self.broker, self.clock.read, 2, 5)
        self.wakes = []
        self.driver.wake = lambda: self.wakes.append(self.clock.ms)
        self.driver.tick()

    def at(self, ms):
        """Let the clock reach `ms` after the start and run the timers: the ms to the next deadline."""
        self.clock.ms = (self.start + ms) & TICKS_MASK
        return self.driver.tick()

    def open(self, client_id, level=4):
        h = Handle(level)
        cid = self.driver.connection_made(h)
        self.driver.data_received(
            cid, encode_packet(Connect(level=level, clean_start=True, keep_alive=0, client_id=client_id), level)
        )
        self.driver.flush()
        self.assertEqual(h.types(), [C.CONNACK])
        return cid, h

    def rig(self, start=0, **overrides):
        self.make(start, **overrides)
        sub, hsub = self.open("counter")
        self.driver.data_received(sub, encode_packet(Subscribe(1, [("t", 0)], None), 4))
        self.driver.flush()
        self.assertEqual(hsub.types(), [C.SUBACK])
        pub, hpub = self.open("flooder")
        return hsub, pub, hpub

    def flood(self, pub, n):
        self.driver.data_received(pub, publishes(n))
        self.driver.flush()

    def test_the_long_run_rate_holds_exactly_over_ten_and_a_half_seconds(self):
        # A flooder that has sent far more than it may is read at exactly
        # RATE a second, to the step and not by whole seconds: its bucket
        # (RATE) plus RATE x 10.5 s, across the wrap of the 30-bit ticks.
        hsub, pub, _h = self.rig(start=TICKS_MASK - 3000)
        self.flood(pub, RATE * 15)
        got = len(hsub.types())
        self.assertEqual(got, RATE + 1)  # the bucket, then one into debt
        for ms in range(REFILL_MS, 10501, REFILL_MS):
            self.at(ms)
            got += len(hsub.types())
        # It is read while out of debt and each read puts it one into debt again.
        self.assertEqual(got, RATE + 1 + RATE * 105 // 10)
        self.assertEqual(self.broker.stats.messages_received, got)

    def test_a_held_client_is_read_again_a_step_later_not_a_second(self):
        # [The old buckets were refilled by whole seconds: the flooder waited
        # for the next second and then passed a second's worth at once.]
        hsub, pub, hpub = self.rig()
        self.at(500)
        self.flood(pub, RATE * 3)
        self.assertEqual(len(hsub.types()), RATE + 1)
        self.assertIn(pub, self.broker.throttled)
        self.assertEqual(hpub.events, ["pause"])
        # Its debt (1 PUBLISH at 100/s) is paid 10 ms on: read again a
        # step after the last refill, with what a step earned (2).
        self.at(500 + REFILL_MS - 1)
        self.assertEqual(hsub.types(), [])
        self.at(500 + REFILL_MS)
        self.assertEqual(hpub.events, ["pause", "resume", "pause"])
        self.assertEqual(len(hsub.types()), RATE * REFILL_MS // 1000)  # one token left, one into debt
        # And so on, a slice every step: not a second's worth at once.
        for step in range(2, 6):
            self.at(500 + step * REFILL_MS)
            self.assertEqual(len(hsub.types()), RATE * REFILL_MS // 1000)
        # Held again at each step, counted once in the second (rate_held_*
        # counts per client and second, as when it was refilled by seconds).
        self.assertEqual(self.broker.stats.rate_held_messages, 1)
        self.at(1000)
        self.assertEqual(self.broker.stats.rate_held_messages, 2)

    def test_the_next_deadline_is_the_release_and_none_without_a_hold(self):
        hsub, pub, _h = self.rig(rate_messages=10)
        self.assertEqual(self.at(300), MAX_SLEEP_MS)  # nobody held: no wake-up for the limits
        self.assertEqual(self.broker.rate_due, 0)
        self.assertEqual(self.wakes, [])
        self.flood(pub, 30)
        self.assertEqual(len(hsub.types()), 11)
        # 1 PUBLISH of debt at 10/s: paid 100 ms after the last refill
        # (300): the shell, asleep until 1300, is woken (Driver.wake), and
        # the next deadline names the release.
        self.assertEqual(self.broker.rate_due, 400)
        self.assertEqual(self.wakes, [300])
        self.assertEqual(self.at(310), 90)
        self.assertEqual(self.at(400), 100)  # read again: 1 token, 1 into debt, held again
        self.assertEqual(len(hsub.types()), 1)
        self.assertEqual(self.broker.rate_due, 500)
        self.assertEqual(self.at(500), 100)
        # Without more input, once the 30 are read it is not held: no deadline left.
        for ms in range(600, 2400, 100):
            self.at(ms)
        self.assertEqual(len(hsub.types()), 30 - 12)
        self.assertEqual(self.broker.throttled, [])
        self.assertEqual(self.broker.rate_due, 0)
        self.assertEqual(self.at(2450), MAX_SLEEP_MS)

    def test_rate_grace_still_closes_a_client_that_does_not_slow_down(self):
        # Held back at some moment of every second for rate_grace (2) s:
        # v5 DISCONNECT 0x96 (Message rate too high). A step's release does
        # not reset its clock.
        self.make(rate_grace=2)
        pub, hpub = self.open("flooder", 5)
        self.driver.data_received(pub, publishes(RATE * 5, 5))
        self.driver.flush()
        ms = 0
        while ms < 3000 and not hpub.events.count("half_close"):
            ms += REFILL_MS
            self.at(ms)
        self.assertEqual([p.reason for p in hpub.inbox if p.ptype == C.DISCONNECT], [0x96])
        self.assertEqual(self.broker.stats.closed_rate_limited, 1)
        self.assertLessEqual(ms, 2000)  # closed at the tick of second 3 (held since second 1)
        self.assertGreater(ms, 1000)
        # Meanwhile it was read a slice a step, not once a second.
        self.assertGreater(hpub.events.count("resume"), 1000 // REFILL_MS)

    def test_a_client_held_by_its_listeners_bucket_is_read_again_a_step_later(self):
        # (The shared buckets, rate_groups.py, refill from the same clock.)
        self.make(rate_messages=0, listener_rate_messages=RATE)
        sub, hsub = self.open("counter")
        self.driver.data_received(sub, encode_packet(Subscribe(1, [("t", 0)], None), 4))
        self.driver.flush()
        hsub.types()
        pub, hpub = self.open("flooder")
        self.at(500)
        self.flood(pub, RATE * 3)
        self.assertEqual(len(hsub.types()), RATE + 1)
        self.assertEqual(self.broker.stats.rate_held_listener_messages, 1)
        self.at(500 + REFILL_MS)
        self.assertEqual(hpub.events, ["pause", "resume", "pause"])
        self.assertEqual(len(hsub.types()), RATE * REFILL_MS // 1000)


class BucketArithmeticTest(unittest.TestCase):
    def test_refills_earn_the_exact_rate_in_small_ints(self):
        # 1,000,003 bytes/s in 7 ms refills for 10 s: exactly 10,000,030
        # earned, and every intermediate product a small int (< 2**30).
        from common.broker.buckets import Buckets

        rate = 1000003
        b = Buckets([rate], 1)
        b.fill(0, 0)
        earned = 0
        for ms in range(7, 10008, 7):
            b.tokens[0][0] = -(1 << 24)  # in debt: every refill counts
            b.refill(0, ms)
            earned += b.tokens[0][0] + (1 << 24)
        self.assertEqual(earned, rate * 10003 // 1000)
