# The unittest surface that tests/core relies on behaves the same under
# CPython's unittest (pytest) and under our MicroPython shim
# (tests/upy/lib/unittest.py, run by tests/upy/run.py). Every assertion here
# runs on both interpreters; a divergence fails on one of them.

import unittest


class _Boom(Exception):
    def __init__(self, code):
        super().__init__(code)
        self.code = code


def _raise_boom(code, extra=0):
    raise _Boom(code + extra)


class TestFixtures(unittest.TestCase):
    calls = 0

    def setUp(self):
        self.state = ["set up"]
        TestFixtures.calls += 1

    def tearDown(self):
        self.state = None

    def test_setup_runs_before_each_test(self):
        self.assertEqual(self.state, ["set up"])
        self.assertGreaterEqual(TestFixtures.calls, 1)

    def test_cleanups_run_in_reverse_order(self):
        order = []
        self.addCleanup(order.append, 1)
        self.addCleanup(order.append, 2)
        self.doCleanups()
        self.assertEqual(order, [2, 1])


class TestAssertions(unittest.TestCase):
    def test_passing_assertions(self):
        self.assertEqual(b"\x10\x00", bytes([16, 0]))
        self.assertNotEqual(1, 2)
        self.assertTrue([0])
        self.assertFalse(b"")
        marker = object()
        self.assertIs(marker, marker)
        self.assertIsNot(marker, object())
        self.assertIsNone(None)
        self.assertIsNotNone(0)
        self.assertIn(3, (1, 2, 3))
        self.assertNotIn("x", "abc")
        self.assertIsInstance(b"", bytes)
        self.assertGreater(2, 1)
        self.assertLess(1, 2)
        self.assertLessEqual(2, 2)
        self.assertAlmostEqual(0.1 + 0.2, 0.3)
        self.assertAlmostEqual(1.0, 1.05, delta=0.1)
        self.assertSequenceEqual([1, 2], (1, 2))
        self.assertCountEqual([1, 2, 2], [2, 1, 2])

    def test_failing_assertions_raise_failure_exception(self):
        checks = (
            (self.assertEqual, (1, 2)),
            (self.assertNotEqual, (1, 1)),
            (self.assertTrue, (0,)),
            (self.assertFalse, (1,)),
            (self.assertIs, ([], [])),
            (self.assertIsNone, (0,)),
            (self.assertIsNotNone, (None,)),
            (self.assertIn, (4, (1, 2))),
            (self.assertNotIn, (1, (1, 2))),
            (self.assertGreater, (1, 1)),
            (self.assertLess, (2, 1)),
            (self.assertGreaterEqual, (1, 2)),
            (self.assertLessEqual, (2, 1)),
            (self.assertAlmostEqual, (1.0, 1.1)),
            (self.assertCountEqual, ([1, 2], [1, 1])),
        )
        for check, args in checks:
            try:
                check(*args)
            except AssertionError:
                continue
            self.fail("%r did not fail on %r" % (check, args))

    def test_fail_and_message(self):
        with self.assertRaises(AssertionError) as ctx:
            self.fail("stop here")
        self.assertIn("stop here", str(ctx.exception))
        with self.assertRaises(AssertionError) as ctx:
            self.assertEqual(1, 2, "packet id")
        self.assertIn("packet id", str(ctx.exception))


class TestAssertRaises(unittest.TestCase):
    def test_context_manager_keeps_exception(self):
        with self.assertRaises(_Boom) as ctx:
            _raise_boom(0x81)
        self.assertEqual(ctx.exception.code, 0x81)

    def test_catches_subclasses(self):
        with self.assertRaises(LookupError) as ctx:
            {}["missing"]
        self.assertIsInstance(ctx.exception, KeyError)

    def test_call_form(self):
        self.assertRaises(_Boom, _raise_boom, 0x80, extra=2)
        self.assertRaises(ValueError, int, "x")

    def test_nothing_raised_is_a_failure(self):
        try:
            with self.assertRaises(_Boom):
                pass
        except AssertionError:
            return
        self.fail("assertRaises passed without an exception")

    def test_other_exception_propagates(self):
        try:
            with self.assertRaises(_Boom):
                raise KeyError("k")
        except KeyError:
            return
        self.fail("an unexpected exception type was swallowed")


class TestSkip(unittest.TestCase):
    def test_skiptest_raises_skip(self):
        with self.assertRaises(unittest.SkipTest):
            self.skipTest("only on the other interpreter")
