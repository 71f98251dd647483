# The one settings validator (common/broker/settings.py), on both interpreters: what
# the host's TOML and the board's JSON go through. The files themselves are
# tested end to end in tests/host/test_config_files.py.

import unittest

from common.broker.settings import (
    K_BOOL,
    K_CHOICE,
    K_FILTERS,
    K_INT,
    K_LIST,
    K_NUMBER,
    K_OBJECT,
    K_STR,
    LIMITS,
    LOG_LEVEL_NAMES,
    LOG_LEVELS,
    ConfigError,
    check,
    defaults,
    new_settings,
    update_settings,
)
from common.broker.settings_hint import did_you_mean

SCHEMA = (
    ("port", 1883, K_INT, 0, 65535),
    ("linger", 2.0, K_NUMBER, 0, None),
    ("on", True, K_BOOL, None, None),
    ("name", "x", K_STR, None, None),
    ("level", "info", K_CHOICE, LOG_LEVEL_NAMES, None),
    ("users", [], K_LIST, None, None),
    ("deny", [], K_FILTERS, None, None),
    ("sub", {}, K_OBJECT, None, None),
)


def message(obj, schema=SCHEMA, listed_in=""):
    try:
        check("f.json: server", obj, schema, listed_in)
    except ConfigError as e:
        return str(e)
    raise AssertionError("no ConfigError for %r" % (obj,))


class TestCheck(unittest.TestCase):
    def test_good_values_come_back_checked(self):
        obj = {"port": 0, "linger": 1, "on": False, "level": "error", "users": ["a"], "deny": ["a/#"], "sub": {}}
        out = check("f", obj, SCHEMA)
        self.assertEqual(out, obj)
        self.assertIsNot(out["users"], obj["users"])  # a copy: the caller's list is not shared
        self.assertEqual(check("f", {"linger": 0.5}, SCHEMA), {"linger": 0.5})

    def test_typo_names_the_key_and_suggests(self):
        text = message({"prot": 1})
        self.assertEqual(
            text,
            "f.json: server: unknown key 'prot'; did you mean 'port'? Fix or remove it "
            "(known keys: port, linger, on, name, level, users, deny, sub).",
        )
        text = message({"zzz": 1}, listed_in="docs/boards.md")
        self.assertEqual(text, "f.json: server: unknown key 'zzz'. Fix or remove it (docs/boards.md lists every key).")

    def test_wrong_type_says_what_it_wants(self):
        self.assertEqual(
            message({"port": "1883"}), "f.json: server: port = '1883': wants an integer 0..65535; fix the value."
        )
        self.assertEqual(
            message({"port": 1.0}), "f.json: server: port = 1.0: wants an integer 0..65535; fix the value."
        )
        self.assertEqual(
            message({"port": True}), "f.json: server: port = True: wants an integer 0..65535; fix the value."
        )
        self.assertEqual(message({"on": 1}), "f.json: server: on = 1: wants true or false; fix the value.")
        self.assertEqual(message({"name": 5}), "f.json: server: name = 5: wants a string; fix the value.")
        self.assertIn("wants a list of strings", message({"users": [1]}))
        self.assertIn("wants a table", message({"sub": []}))

    def test_out_of_range_says_the_range(self):
        self.assertEqual(
            message({"port": 70000}), "f.json: server: port = 70000: wants an integer 0..65535; fix the value."
        )
        self.assertEqual(message({"linger": -1}), "f.json: server: linger = -1: wants a number >= 0; fix the value.")
        self.assertEqual(
            message({"level": "loud"}),
            "f.json: server: level = 'loud': wants one of debug, info, warning, error; fix the value.",
        )
        self.assertIn("valid topic filters", message({"deny": ["a/#/b"]}))

    def test_did_you_mean(self):
        names = [e[0] for e in LIMITS]
        self.assertEqual(did_you_mean("max_conections", names), "; did you mean 'max_connections'?")
        self.assertEqual(did_you_mean("maxinflight", names), "; did you mean 'max_inflight'?")
        self.assertEqual(did_you_mean("limit", ("limits", "server", "log")), "; did you mean 'limits'?")
        self.assertEqual(did_you_mean("colour", names), "")

    def test_defaults_are_copies(self):
        a = defaults(SCHEMA)
        a["users"].append("x")
        a["sub"]["k"] = 1
        self.assertEqual(defaults(SCHEMA)["users"], [])
        self.assertEqual(defaults(SCHEMA)["sub"], {})


class TestLimits(unittest.TestCase):
    def test_every_default_passes_its_own_check(self):
        values = defaults(LIMITS)
        self.assertEqual(check("defaults", values, LIMITS), values)
        for entry in LIMITS:
            self.assertEqual(len(entry), 5, entry[0])

    def test_settings_refuse_with_config_error(self):
        with self.assertRaises(ConfigError) as ctx:
            new_settings({"max_inflight": 0}, "rpi.toml: [limits]")
        self.assertEqual(
            str(ctx.exception), "rpi.toml: [limits]: max_inflight = 0: wants an integer 1..65535; fix the value."
        )
        self.assertTrue(isinstance(ctx.exception, ValueError))
        with self.assertRaises(ConfigError):
            new_settings({"store_sync": "sometimes"})
        with self.assertRaises(ConfigError):
            new_settings({"maximum_qos": 3})
        with self.assertRaises(ConfigError):
            new_settings({"max_packet_size": 15})

    def test_update_keeps_earlier_overrides(self):
        s = new_settings({"max_inflight": 4})
        update_settings(s, {"max_connections": 3})
        self.assertEqual((s.max_inflight, s.max_connections), (4, 3))


class TestLogLevels(unittest.TestCase):
    def test_names_in_order_of_their_numbers(self):
        self.assertEqual(LOG_LEVEL_NAMES, ("debug", "info", "warning", "error"))
        self.assertEqual([LOG_LEVELS[n] for n in LOG_LEVEL_NAMES], [10, 20, 30, 40])  # Python logging's
