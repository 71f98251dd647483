# Rate limits refilled from the ms clock (common/broker/ratelimit.py,
# buckets.py), through the driver (common/driver.py) with a hand-turned
# millisecond clock: the long-run rate is exact, a held client is read again
# a step after its hold when its debt is paid then, not a second later, the
# step follows the fastest PUBLISH rate so that a release passes at most
# SLICE PUBLISHes (20 ms at the boards' rates, 2 ms at 1000/s), the
# driver's next deadline names that release (and none when nobody is held),
# and rate_grace still closes a client that never slows down. Runs
# unchanged under MicroPython (tests/upy/run.py).

import unittest

from common.broker.ratelimit import SLICE, STEP_MAX_MS, STEP_MIN_MS
from common.broker.settings import new_settings
from common.compat import TICKS_MASK
from common.driver import MAX_SLEEP_MS, Driver
from common.mqtt import consts as C
from common.mqtt.packets import Connect, Publish, Subscribe, encode_packet
from common.store.storeboot import new_broker
from tests.core.test_driver import Clock, Handle

RATE = 100  # rate_messages (a board's: the step is STEP_MAX_MS)
FAST = 1000  # rate_messages of a host (the step is SLICE x 1000 / FAST ms)


def publishes(n, level=4, topic="t"):
    return b"".join([encode_packet(Publish(topic, b"x", 0, False, False, 0, None), level) for _ in range(n)])


class RateRefillTest(unittest.TestCase):
    def make(self, start=0, per_listener=None, **overrides):
        self.start = start
        self.clock = Clock(start)
        s = {"rate_messages": RATE, "rate_grace": 0}
        s.update(overrides)
        settings = new_settings(s)
        if per_listener:
            settings.per_listener = per_listener  # (a host's [[listener]] tables)
        self.broker = new_broker(settings, lambda n: bytes(n), None)
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

    def long_run(self, rate, step, ms_end):
        # A flooder that has sent far more than it may is read at exactly
        # `rate` a second, to the step and not by whole seconds: its bucket
        # (rate) plus rate x ms_end / 1000, across the wrap of the 30-bit ticks.
        hsub, pub, _h = self.rig(start=TICKS_MASK - 3000, rate_messages=rate)
        self.assertEqual(self.broker.rates.step, step)
        self.flood(pub, rate * (ms_end // 1000 + 5))
        got = len(hsub.types())
        self.assertEqual(got, rate + 1)  # the bucket, then one into debt
        for ms in range(step, ms_end + 1, step):
            self.at(ms)
            got += len(hsub.types())
        # It is read while out of debt and each read puts it one into debt again.
        self.assertEqual(got, rate + 1 + rate * ms_end // 1000)
        self.assertEqual(self.broker.stats.messages_received, got)

    def test_the_long_run_rate_holds_exactly_over_ten_and_a_half_seconds(self):
        self.long_run(RATE, STEP_MAX_MS, 10500)

    def test_the_long_run_rate_holds_exactly_in_small_steps(self):
        self.long_run(FAST, STEP_MIN_MS, 2500)

    def test_a_held_client_is_read_again_a_step_later_not_a_second(self):
        # [The old buckets were refilled by whole seconds: the flooder waited
        # for the next second and then passed a second's worth at once.]
        hsub, pub, hpub = self.rig()
        step = self.broker.rates.step
        self.assertEqual(step, STEP_MAX_MS)  # at a board's rate, as before the step followed the rate
        self.at(500)
        self.flood(pub, RATE * 3)
        self.assertEqual(len(hsub.types()), RATE + 1)
        self.assertIn(pub, self.broker.throttled)
        self.assertEqual(hpub.events, ["pause"])
        # Its debt (1 PUBLISH at 100/s) is paid 10 ms on: read again a
        # step (20 ms) after the last refill, with what a step earned (2).
        self.at(500 + step - 1)
        self.assertEqual(hsub.types(), [])
        self.at(500 + step)
        self.assertEqual(hpub.events, ["pause", "resume", "pause"])
        self.assertEqual(len(hsub.types()), 2)  # one token left, one into debt
        # And so on, a slice every step: not a second's worth at once.
        for k in range(2, 6):
            self.at(500 + k * step)
            self.assertEqual(len(hsub.types()), 2)
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
            ms += STEP_MAX_MS
            self.at(ms)
        self.assertEqual([p.reason for p in hpub.inbox if p.ptype == C.DISCONNECT], [0x96])
        self.assertEqual(self.broker.stats.closed_rate_limited, 1)
        self.assertLessEqual(ms, 2000)  # closed at the tick of second 3 (held since second 1)
        self.assertGreater(ms, 1000)
        # Meanwhile it was read a slice a step, not once a second.
        self.assertGreater(hpub.events.count("resume"), 1000 // STEP_MAX_MS)

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
        self.at(500 + STEP_MAX_MS)
        self.assertEqual(hpub.events, ["pause", "resume", "pause"])
        self.assertEqual(len(hsub.types()), 2)  # what 20 ms earn at 100/s

    def test_at_1000_a_second_a_released_flooder_passes_at_most_two_publishes_a_release(self):
        # The slice a bystander may wait behind: what a step earns. At
        # 1000/s a 20 ms step passed 20 PUBLISHes at once; the step now
        # follows the rate (SLICE x 1000 / rate ms): 2 ms, 2 PUBLISHes.
        hsub, pub, _h = self.rig(rate_messages=FAST)
        self.assertEqual(self.broker.rates.step, SLICE * 1000 // FAST)
        self.at(500)
        self.flood(pub, FAST * 3)
        self.assertEqual(len(hsub.types()), FAST + 1)
        # Its debt (1 PUBLISH) is paid 1 ms on, and it is read a step after
        # the hold: the shell, asleep until 1500, is woken (Driver.wake) and
        # the next deadline names the release.
        self.assertEqual(self.broker.rate_due, 500 + STEP_MIN_MS)
        self.assertEqual(self.wakes, [500])
        self.assertEqual(self.at(501), 1)
        self.assertEqual(hsub.types(), [])
        # Every ms for a second: never more than SLICE at once, and as
        # many releases as steps (the rate kept: SLICE a step).
        passed = 0
        releases = 0
        for ms in range(502, 1500):
            self.at(ms)
            n = len(hsub.types())
            self.assertLessEqual(n, SLICE, ms)
            passed += n
            releases += n > 0
        self.assertEqual(passed, FAST * 998 // 1000)
        self.assertEqual(releases, 998 // STEP_MIN_MS)
        self.assertIn(pub, self.broker.throttled)

    def test_the_step_follows_the_fastest_publish_rate_set(self):
        # SLICE x 1000 / the fastest rate_messages (own, user's, listener's),
        # within [STEP_MIN_MS, STEP_MAX_MS]; a bytes limit alone keeps the
        # longest step (the boards' 50-100/s keep it too).
        for overrides, step in (
            ({"rate_messages": 50}, 20),
            ({"rate_messages": 100}, 20),
            ({"rate_messages": 200}, 10),
            ({"rate_messages": 1000}, 2),
            ({"rate_messages": 100000}, 2),
            ({"rate_messages": 0, "rate_bytes": 1000000}, 20),
            ({"rate_messages": 100, "user_rate_messages": 400}, 5),
            ({"rate_messages": 0, "listener_rate_messages": 1000}, 2),
        ):
            self.make(**overrides)
            self.assertEqual(self.broker.rates.step, step, overrides)
        # A listener's own rate (rate_listeners.py) above [limits]' counts too.
        self.make(per_listener={1: {"rate_messages": 500}, 2: {"listener_rate_messages": 250}})
        self.assertEqual(self.broker.rates.step, 4)
        self.make(per_listener={1: {"rate_bytes": 9000}})
        self.assertEqual(self.broker.rates.step, 20)


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
