# A small `unittest` for MicroPython, so that tests/core/ runs unchanged on
# CPython (stdlib unittest, collected by pytest) and on MicroPython (this
# module, driven by tests/upy/run.py).
#
# Theory of operation: MicroPython ships no unittest and has no test
# discovery. This shim implements the subset of unittest.TestCase that the
# core tests use, with the same names and the same failure behaviour
# (AssertionError via self.failureException, SkipTest for skips), plus a
# tiny result/runner pair that tests/upy/run.py uses. It only relies on
# features that MicroPython has: no metaclasses, no function attributes
# (the skip decorators wrap instead of tagging), no dict ordering (test
# names are sorted), `sys.print_exception` for tracebacks.
#
# tests/core/test_runner_shim.py checks that this shim and CPython's unittest
# agree on every method the core tests rely on.

import sys

try:
    from sys import print_exception as _print_exception
except ImportError:  # CPython (only when someone runs the shim there)
    import traceback

    def _print_exception(exc, file=sys.stdout):
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=file)


class SkipTest(Exception):
    """Raised to skip a test; the argument is the reason."""


# ---------------------------------------------------------------------------
# decorators


def skip(reason):
    def decorator(obj):
        if isinstance(obj, type):
            # Classes take attributes on MicroPython, functions do not.
            obj.__unittest_skip__ = True
            obj.__unittest_skip_why__ = reason
            return obj

        def skipped(*args, **kwargs):
            raise SkipTest(reason)

        return skipped

    return decorator


def _identity(obj):
    return obj


def skipIf(condition, reason):
    return skip(reason) if condition else _identity


def skipUnless(condition, reason):
    return _identity if condition else skip(reason)


# ---------------------------------------------------------------------------
# assertion helpers


class _AssertRaisesContext:
    def __init__(self, expected, test_case):
        self.expected = expected
        self.test_case = test_case
        self.exception = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_value, tb):
        if exc_type is None:
            name = getattr(self.expected, "__name__", str(self.expected))
            raise self.test_case.failureException("%s not raised" % name)
        if not issubclass(exc_type, self.expected):
            return False  # let an unexpected exception propagate, as CPython does
        if exc_value is None:  # MicroPython may pass the type only for bare raises
            exc_value = exc_type()
        self.exception = exc_value
        return True


class _SubTest:
    # subTest() cannot report several failures per test here: the first
    # failure ends the test, with the sub-test parameters in the message.
    def __init__(self, params):
        self.params = params

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_value, tb):
        if exc_type is not None and exc_value is not None and self.params:
            print("  in subTest", self.params)
        return False


def _safe_repr(obj, limit=400):
    try:
        text = repr(obj)
    except Exception:
        text = object.__repr__(obj)
    if len(text) > limit:
        text = text[:limit] + "...[%d chars]" % len(text)
    return text


# ---------------------------------------------------------------------------
# TestCase


class TestCase:
    failureException = AssertionError
    longMessage = True
    maxDiff = None  # accepted for compatibility; diffs are not computed

    def __init__(self, methodName="runTest"):
        self._testMethodName = methodName
        self._cleanups = []

    def id(self):
        return "%s.%s.%s" % (self.__class__.__module__, self.__class__.__name__, self._testMethodName)

    def __str__(self):
        return "%s (%s)" % (self._testMethodName, self.__class__.__name__)

    # -- fixtures
    @classmethod
    def setUpClass(cls):
        pass

    @classmethod
    def tearDownClass(cls):
        pass

    def setUp(self):
        pass

    def tearDown(self):
        pass

    def addCleanup(self, function, *args, **kwargs):
        self._cleanups.append((function, args, kwargs))

    def doCleanups(self):
        while self._cleanups:
            function, args, kwargs = self._cleanups.pop()
            function(*args, **kwargs)

    def skipTest(self, reason):
        raise SkipTest(reason)

    def subTest(self, msg=None, **params):
        if msg is not None:
            params["msg"] = msg
        return _SubTest(params)

    # -- failure
    def fail(self, msg=None):
        raise self.failureException(msg if msg is not None else "fail() called")

    def _fail(self, standard, msg):
        if msg is not None:
            standard = "%s : %s" % (standard, msg)
        raise self.failureException(standard)

    # -- assertions
    def assertEqual(self, first, second, msg=None):
        if not first == second:
            self._fail("%s != %s" % (_safe_repr(first), _safe_repr(second)), msg)

    def assertNotEqual(self, first, second, msg=None):
        if not first != second:
            self._fail("%s == %s" % (_safe_repr(first), _safe_repr(second)), msg)

    def assertTrue(self, expr, msg=None):
        if not expr:
            self._fail("%s is not true" % _safe_repr(expr), msg)

    def assertFalse(self, expr, msg=None):
        if expr:
            self._fail("%s is not false" % _safe_repr(expr), msg)

    def assertIs(self, first, second, msg=None):
        if first is not second:
            self._fail("%s is not %s" % (_safe_repr(first), _safe_repr(second)), msg)

    def assertIsNot(self, first, second, msg=None):
        if first is second:
            self._fail("unexpectedly identical: %s" % _safe_repr(first), msg)

    def assertIsNone(self, obj, msg=None):
        if obj is not None:
            self._fail("%s is not None" % _safe_repr(obj), msg)

    def assertIsNotNone(self, obj, msg=None):
        if obj is None:
            self._fail("unexpectedly None", msg)

    def assertIn(self, member, container, msg=None):
        if member not in container:
            self._fail("%s not found in %s" % (_safe_repr(member), _safe_repr(container)), msg)

    def assertNotIn(self, member, container, msg=None):
        if member in container:
            self._fail("%s unexpectedly found in %s" % (_safe_repr(member), _safe_repr(container)), msg)

    def assertIsInstance(self, obj, cls, msg=None):
        if not isinstance(obj, cls):
            self._fail("%s is not an instance of %r" % (_safe_repr(obj), cls), msg)

    def assertNotIsInstance(self, obj, cls, msg=None):
        if isinstance(obj, cls):
            self._fail("%s is an instance of %r" % (_safe_repr(obj), cls), msg)

    def assertGreater(self, a, b, msg=None):
        if not a > b:
            self._fail("%s not greater than %s" % (_safe_repr(a), _safe_repr(b)), msg)

    def assertGreaterEqual(self, a, b, msg=None):
        if not a >= b:
            self._fail("%s not greater than or equal to %s" % (_safe_repr(a), _safe_repr(b)), msg)

    def assertLess(self, a, b, msg=None):
        if not a < b:
            self._fail("%s not less than %s" % (_safe_repr(a), _safe_repr(b)), msg)

    def assertLessEqual(self, a, b, msg=None):
        if not a <= b:
            self._fail("%s not less than or equal to %s" % (_safe_repr(a), _safe_repr(b)), msg)

    def assertAlmostEqual(self, first, second, places=None, msg=None, delta=None):
        if first == second:
            return
        diff = abs(first - second)
        if delta is not None:
            if places is not None:
                raise TypeError("specify delta or places not both")
            if diff <= delta:
                return
            self._fail("%r != %r within %r delta (%r difference)" % (first, second, delta, diff), msg)
        if places is None:
            places = 7
        if round(diff, places) == 0:
            return
        self._fail("%r != %r within %r places (%r difference)" % (first, second, places, diff), msg)

    def assertNotAlmostEqual(self, first, second, places=None, msg=None, delta=None):
        diff = abs(first - second)
        if delta is not None:
            if not (first == second) and diff > delta:
                return
        else:
            if places is None:
                places = 7
            if not (first == second) and round(diff, places) != 0:
                return
        self._fail("%r == %r within tolerance" % (first, second), msg)

    def assertSequenceEqual(self, first, second, msg=None, seq_type=None):
        if seq_type is not None and not isinstance(first, seq_type):
            self._fail("first sequence is not a %r" % (seq_type,), msg)
        if len(first) != len(second):
            self._fail("sequences differ in length: %d != %d" % (len(first), len(second)), msg)
        for i in range(len(first)):
            if not first[i] == second[i]:
                self._fail(
                    "sequences differ at index %d: %s != %s" % (i, _safe_repr(first[i]), _safe_repr(second[i])), msg
                )

    def assertListEqual(self, first, second, msg=None):
        self.assertSequenceEqual(first, second, msg, list)

    def assertTupleEqual(self, first, second, msg=None):
        self.assertSequenceEqual(first, second, msg, tuple)

    def assertDictEqual(self, first, second, msg=None):
        self.assertEqual(first, second, msg)

    def assertCountEqual(self, first, second, msg=None):
        # Order-free comparison without hashing (elements may be unhashable).
        rest = list(second)
        for item in first:
            for i in range(len(rest)):
                if rest[i] == item:
                    del rest[i]
                    break
            else:
                self._fail("element counts differ: %s" % _safe_repr(item), msg)
        if rest:
            self._fail("element counts differ: %s" % _safe_repr(rest[0]), msg)

    def assertRaises(self, expected, *args, **kwargs):
        context = _AssertRaisesContext(expected, self)
        if not args:
            return context
        func = args[0]
        with context:
            func(*args[1:], **kwargs)
        return None


# ---------------------------------------------------------------------------
# running (used by tests/upy/run.py; CPython's unittest is not involved)


class TestResult:
    def __init__(self, verbose=False):
        self.verbose = verbose
        self.passed = []
        self.failed = []  # (test id, exception)
        self.skipped = []  # (test id, reason)

    def add_pass(self, test_id):
        self.passed.append(test_id)
        if self.verbose:
            print("ok", test_id)

    def add_failure(self, test_id, exc):
        self.failed.append((test_id, exc))
        print("FAIL", test_id)
        _print_exception(exc)

    def add_skip(self, test_id, reason):
        self.skipped.append((test_id, reason))
        if self.verbose:
            print("skip", test_id, ":", reason)

    def summary(self):
        return "%d passed, %d failed, %d skipped" % (len(self.passed), len(self.failed), len(self.skipped))


def find_test_classes(module):
    """Every TestCase subclass in a module's namespace, sorted by name
    (pytest collects imported TestCase classes too, so we do the same)."""
    found = []
    for name in dir(module):
        obj = getattr(module, name)
        if isinstance(obj, type) and obj is not TestCase and issubclass(obj, TestCase):
            if getattr(obj, "__test__", True):
                found.append((name, obj))
    found.sort(key=lambda pair: pair[0])
    return found


def find_test_methods(cls):
    names = [n for n in dir(cls) if n.startswith("test") and callable(getattr(cls, n))]
    names.sort()
    return names


def run_class(cls, result, module_name=None, name=None, selector=None):
    """Run every test method of one TestCase class into `result`."""
    if module_name is None:
        module_name = cls.__module__
    if name is None:
        name = cls.__name__
    prefix = "%s.%s." % (module_name, name)
    names = find_test_methods(cls)
    if selector is not None:
        names = [n for n in names if selector(prefix + n)]
    if not names:
        return
    if getattr(cls, "__unittest_skip__", False):
        for n in names:
            result.add_skip(prefix + n, getattr(cls, "__unittest_skip_why__", ""))
        return
    try:
        cls.setUpClass()
    except SkipTest as e:
        for n in names:
            result.add_skip(prefix + n, str(e))
        return
    except Exception as e:
        for n in names:
            result.add_failure(prefix + n, e)
        return
    for n in names:
        _run_one(cls, n, prefix + n, result)
    try:
        cls.tearDownClass()
    except Exception as e:
        result.add_failure(prefix + "tearDownClass", e)


def _run_one(cls, method_name, test_id, result):
    try:
        test = cls(method_name)
    except Exception as e:
        result.add_failure(test_id, e)
        return
    outcome = None  # None: passed; else ("skip", reason) or ("fail", exc)
    try:
        test.setUp()
        try:
            getattr(test, method_name)()
        finally:
            test.tearDown()
    except SkipTest as e:
        outcome = ("skip", str(e))
    except Exception as e:  # AssertionError included
        outcome = ("fail", e)
    try:
        test.doCleanups()
    except Exception as e:
        if outcome is None or outcome[0] == "skip":
            outcome = ("fail", e)
    if outcome is None:
        result.add_pass(test_id)
    elif outcome[0] == "skip":
        result.add_skip(test_id, outcome[1])
    else:
        result.add_failure(test_id, outcome[1])


def main(module="__main__", verbose=True):
    """`unittest.main()` for a test file run directly under MicroPython."""
    if isinstance(module, str):
        module = __import__(module)
    result = TestResult(verbose)
    for name, cls in find_test_classes(module):
        run_class(cls, result, module.__name__, name)
    print(result.summary())
    sys.exit(1 if result.failed else 0)
