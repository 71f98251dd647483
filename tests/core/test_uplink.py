# The PPP uplink's policy (common/uplink/): the modem's dial-up script, the
# supervisor's dial / fail / back-off / lost / redial cycle and its counts,
# the "ppp" settings and their refusals, and the back-off both the uplink and
# the bridge use (common/backoff.py). Runs unchanged under MicroPython
# (tests/upy/run.py).

import unittest

from common.backoff import backoff_ms
from common.broker.settings import ConfigError
from common.compat import TICKS_MASK
from common.uplink.dialscript import DONE, FAILED, RUNNING, DialScript
from common.uplink.link import DIALING, NEGOTIATING, UP, WAITING, Uplink
from common.uplink.settings import parse_ppp

SCRIPT = (
    ("AT", b"OK", 2000),
    ("ATE0", b"OK", 2000),
    ('AT+CGDCONT=1,"IP","internet"', b"OK", 5000),
    ("ATD*99#", b"CONNECT", 30000),
)


def entropy_low(n):
    return bytes(n)


def entropy_high(n):
    return b"\xff" * n


class Lines:
    def __init__(self):
        self.lines = []

    def log(self, level, text):
        self.lines.append((level, text))


class TestDialScript(unittest.TestCase):
    def test_the_script_sends_each_command_after_its_answer(self):
        d = DialScript(SCRIPT)
        self.assertEqual(d.start(0), b"AT\r")
        # The modem echoes the command before ATE0: the echo is no answer.
        self.assertEqual(d.feed(b"AT\r\r\n", 10), b"")
        self.assertEqual(d.feed(b"OK\r\n", 20), b"ATE0\r")
        self.assertEqual(d.feed(b"ATE0\r\r\nOK\r\n", 30), b'AT+CGDCONT=1,"IP","internet"\r')
        # An answer split over reads.
        self.assertEqual(d.feed(b"\r\nO", 40), b"")
        self.assertEqual(d.feed(b"K\r\n", 50), b"ATD*99#\r")
        self.assertEqual(d.state, RUNNING)
        self.assertEqual(d.feed(b"\r\nCONNECT 115200\r\n~\xff}", 60), b"")
        self.assertEqual(d.state, DONE)
        self.assertEqual(d.deadline, 0)
        # Nothing more is written once it is done.
        self.assertEqual(d.feed(b"OK\r\n", 70), b"")
        self.assertEqual(d.tick(99999), b"")

    def test_a_failure_answer_ends_the_script_with_its_step_and_answer(self):
        d = DialScript(SCRIPT)
        d.start(0)
        d.feed(b"OK\r\n", 1)
        d.feed(b"OK\r\n", 2)
        d.feed(b"OK\r\n", 3)
        self.assertEqual(d.feed(b"\r\nNO CARRIER\r\n", 4), b"")
        self.assertEqual(d.state, FAILED)
        self.assertIn("step 4 of 4 ('ATD*99#')", d.reason)
        self.assertIn("NO CARRIER", d.reason)

    def test_cme_error_and_busy_fail_too(self):
        for answer in (b"+CME ERROR: 10", b"BUSY", b"ERROR", b"NO DIALTONE", b"NO ANSWER"):
            d = DialScript(SCRIPT)
            d.start(0)
            d.feed(answer + b"\r\n", 1)
            self.assertEqual(d.state, FAILED, answer)

    def test_a_step_without_its_answer_fails_at_its_timeout(self):
        d = DialScript(SCRIPT)
        d.start(0)
        self.assertEqual(d.tick(1999), b"")
        self.assertEqual(d.state, RUNNING)
        self.assertEqual(d.tick(2000), b"")
        self.assertEqual(d.state, FAILED)
        self.assertIn("no b'OK' within 2000 ms", d.reason)

    def test_a_pause_step_ends_at_its_timeout(self):
        d = DialScript((("+++", b"", 1000), ("ATH", b"OK", 2000)))
        self.assertEqual(d.start(0), b"+++\r")
        self.assertEqual(d.feed(b"OK\r\n", 10), b"")  # a pause waits for nothing
        self.assertEqual(d.tick(1000), b"ATH\r")
        self.assertEqual(d.deadline, 3000)

    def test_the_deadline_wraps_with_the_ticks(self):
        start = TICKS_MASK - 500
        d = DialScript((("AT", b"OK", 2000),))
        d.start(start)
        self.assertEqual(d.tick((start + 1999) & TICKS_MASK), b"")
        self.assertEqual(d.state, RUNNING)
        d.tick((start + 2000) & TICKS_MASK)
        self.assertEqual(d.state, FAILED)

    def test_garbage_without_line_ends_is_bounded(self):
        d = DialScript(SCRIPT)
        d.start(0)
        for _ in range(100):
            d.feed(b"x" * 64, 1)
        self.assertLessEqual(len(d.line), 128)
        self.assertEqual(d.feed(b"\r\nOK\r\n", 2), b"ATE0\r")

    def test_no_script_is_done_at_once(self):
        d = DialScript(())
        self.assertEqual(d.start(0), b"")
        self.assertEqual(d.state, DONE)


class TestUplink(unittest.TestCase):
    def link(self, entropy=entropy_high):
        self.out = Lines()
        return Uplink("ppp", 1000, 8000, 30000, entropy, self.out.log)

    def test_dial_up_lost_redial_with_counts_in_sys(self):
        u = self.link()
        self.assertTrue(u.due(0))
        u.dialing(0)
        self.assertEqual(u.state, DIALING)
        self.assertEqual(u.negotiating(100), 30100)
        self.assertEqual(u.state, NEGOTIATING)
        u.up(200, "10.0.0.2")
        self.assertEqual(u.state, UP)
        self.assertFalse(u.due(200))
        u.lost(5000, "carrier lost")
        self.assertEqual(u.state, WAITING)
        # A lost link redials after the first step of the back-off (1 s at most).
        self.assertFalse(u.due(5999))
        self.assertTrue(u.due(6000))
        sys = dict(u.sys_values())
        self.assertEqual(sys["$SYS/broker/uplink/ppp/state"], "waiting")
        self.assertEqual(sys["$SYS/broker/uplink/ppp/address"], "-")
        self.assertEqual(sys["$SYS/broker/uplink/ppp/dials"], "1")
        self.assertEqual(sys["$SYS/broker/uplink/ppp/lost"], "1")
        self.assertEqual(sys["$SYS/broker/uplink/ppp/last_error"], "carrier lost")
        self.assertIn(
            (30, "uplink ppp: link lost: carrier lost; redialling in 1000 ms (1 lost so far)"), self.out.lines
        )

    def test_failures_back_off_doubling_to_the_max_then_start_over_when_up(self):
        u = self.link()
        now = 0
        waits = []
        for _ in range(6):
            u.dialing(now)
            u.failed(now, "no CONNECT")
            waits.append(u.wait_ms(now))
            now = u.retry_at
            self.assertTrue(u.due(now))
        self.assertEqual(waits, [1000, 2000, 4000, 8000, 8000, 8000])
        self.assertEqual((u.failures, u.in_a_row, u.dials), (6, 6, 6))
        self.assertIn("(6 failed in a row, 6 in all)", self.out.lines[-1][1])
        u.dialing(now)
        u.up(now, "10.0.0.2")
        u.lost(now, "hang-up")
        u.dialing(now)
        u.failed(now, "no CONNECT")
        self.assertEqual(u.wait_ms(now), 1000)  # in a row again from the last time it was up
        self.assertEqual((u.failures, u.in_a_row), (7, 1))

    def test_half_of_each_wait_is_random(self):
        u = self.link(entropy_low)
        u.dialing(0)
        u.failed(0, "x")
        self.assertEqual(u.wait_ms(0), 500)


class TestBackoff(unittest.TestCase):
    def test_doubles_from_min_to_max_with_half_random(self):
        self.assertEqual([backoff_ms(100, 1000, n, entropy_high) for n in range(6)], [100, 200, 400, 800, 1000, 1000])
        self.assertEqual([backoff_ms(100, 1000, n, entropy_low) for n in range(6)], [50, 100, 200, 400, 500, 500])
        self.assertEqual(backoff_ms(100, 1000, 10000, entropy_high), 1000)  # no huge shifts


class TestPppSettings(unittest.TestCase):
    def test_defaults_and_the_script(self):
        cfg = parse_ppp("siskin.json", {"dial": [["AT", "OK", 2], ["ATD*99#", "CONNECT", 30.5]], "_note": "x"})
        self.assertEqual(cfg["uart"], 0)
        self.assertEqual(cfg["baudrate"], 115200)
        self.assertEqual(cfg["flow"], "none")
        self.assertEqual(cfg["dial"], (("AT", b"OK", 2000), ("ATD*99#", b"CONNECT", 30500)))
        self.assertEqual(
            (cfg["connect_timeout_ms"], cfg["backoff_min_ms"], cfg["backoff_max_ms"]), (30000, 1000, 60000)
        )
        self.assertEqual(parse_ppp("f", {})["dial"], ())

    def refused(self, obj, words):
        try:
            parse_ppp("siskin.json", obj)
        except ConfigError as e:
            self.assertIn(words, str(e))
            self.assertIn("siskin.json: ppp", str(e))
            return
        self.fail("accepted %r" % (obj,))

    def test_bad_settings_are_refused_with_the_key(self):
        self.refused([], "wants an object")
        self.refused({"baud": 9600}, "unknown key 'baud'")
        self.refused({"baudrate": 10}, "baudrate = 10")
        self.refused({"flow": "xon"}, "flow = 'xon'")
        self.refused({"security": "pap"}, "needs a user")
        self.refused({"rts": 3}, "rts and cts go together")
        self.refused({"backoff_min": 5, "backoff_max": 1}, "backoff_max must not be below backoff_min")

    def test_bad_dial_steps_are_refused_with_their_number(self):
        self.refused({"dial": "ATD*99#"}, "dial wants a list")
        self.refused({"dial": [["AT", "OK"]]}, "dial step 1")
        self.refused({"dial": [["AT", "OK", 2], ["ATD*99#", "CONNECT", 0]]}, "dial step 2")
        self.refused({"dial": [["AT\r", "OK", 2]]}, "dial step 1")
        self.refused({"dial": [["AT", "OK", True]]}, "dial step 1")
        self.refused({"dial": [["", "", 2]]}, "dial step 1")
        self.refused({"dial": [["AT", "OK", 1]] * 17}, "at most 16 steps")
