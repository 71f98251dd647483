# common/mqttsn/topicids.py: normal ids (MQTT-SN v1.2 §6.5), predefined ids
# and short topic names (§6.7, §3), and the bound on ids per client.
# Plain unittest: runs under pytest and under MicroPython (tests/upy shim).

import unittest

from common.mqttsn import consts as c
from common.mqttsn.topicids import TopicIds, short_id, short_name

PREDEFINED = {1: "plant/config", 0x0102: "plant/alarm"}


class TestRegister(unittest.TestCase):
    # §6.5: REGISTER -> REGACK with the id the gateway assigns
    def test_ids_assigned_in_order_from_1(self):
        ids = TopicIds(4, PREDEFINED)
        self.assertEqual(ids.register("a/b"), (1, c.RC_ACCEPTED))
        self.assertEqual(ids.register("a/c"), (2, c.RC_ACCEPTED))
        self.assertEqual(ids.name_of(c.TOPIC_NORMAL, 2), "a/c")

    def test_same_name_same_id(self):
        ids = TopicIds(1, PREDEFINED)
        self.assertEqual(ids.register("a/b"), (1, c.RC_ACCEPTED))
        self.assertEqual(ids.register("a/b"), (1, c.RC_ACCEPTED))

    def test_full_table_is_congestion(self):
        # the bound per client: REGACK 0x01 "rejected: congestion" (§5.3.10)
        ids = TopicIds(2, PREDEFINED)
        ids.register("x/1")
        ids.register("x/2")
        self.assertEqual(ids.register("x/3"), (0, c.RC_CONGESTION))
        self.assertIsNone(ids.id_for("x/3"))

    def test_wildcard_or_empty_name_refused(self):
        # a REGISTER names a topic, never a filter: 0x02 "rejected: invalid topic ID"
        ids = TopicIds(8, PREDEFINED)
        for name in ("a/+", "#", "", "a\x00b"):
            self.assertEqual(ids.register(name), (0, c.RC_INVALID_TOPIC_ID), name)
        self.assertEqual(ids.names, [])

    def test_unknown_and_reserved_normal_ids(self):
        # §6.6: a PUBLISH with an unknown id gets PUBACK 0x02; 0x0000 is reserved (§5.3.11)
        ids = TopicIds(8, PREDEFINED)
        ids.register("a")
        for topic_id in (0, 2, 0xFFFF):
            self.assertIsNone(ids.name_of(c.TOPIC_NORMAL, topic_id))


class TestPredefinedAndShort(unittest.TestCase):
    # §6.7: predefined ids (from the settings) and short topic names need no REGISTER
    def test_predefined_lookup(self):
        ids = TopicIds(8, PREDEFINED)
        self.assertEqual(ids.name_of(c.TOPIC_PREDEFINED, 0x0102), "plant/alarm")
        self.assertIsNone(ids.name_of(c.TOPIC_PREDEFINED, 7))

    def test_short_name_round_trip(self):
        self.assertEqual(short_id("ab"), 0x6162)
        self.assertEqual(short_name(0x6162), "ab")
        self.assertIsNone(short_id("abc"))
        self.assertIsNone(short_id("\u20ac1"))  # not one octet per character
        ids = TopicIds(8, PREDEFINED)
        self.assertEqual(ids.name_of(c.TOPIC_SHORT, 0x6162), "ab")

    def test_id_for_prefers_normal_then_predefined_then_short(self):
        # §6.10: what the gateway may send without a REGISTER first
        ids = TopicIds(8, PREDEFINED)
        self.assertEqual(ids.id_for("plant/alarm"), (c.TOPIC_PREDEFINED, 0x0102))
        self.assertEqual(ids.id_for("ab"), (c.TOPIC_SHORT, 0x6162))
        self.assertIsNone(ids.id_for("a/b"))
        ids.register("a/b")
        ids.register("ab")
        self.assertEqual(ids.id_for("a/b"), (c.TOPIC_NORMAL, 1))
        self.assertEqual(ids.id_for("ab"), (c.TOPIC_NORMAL, 2))


if __name__ == "__main__":
    unittest.main()
