# common/broker/topics.py: validation, $share parsing, matching, the subscription
# trie and the retained-message tree. Plain unittest: runs under pytest and
# under MicroPython (tests/upy shim), so only assertEqual/True/False/Is/
# IsNone/In/Raises and fail are used, and no order is taken from a dict.

import unittest

from common.broker.topics import (
    SHARED_INVALID,
    TOPIC_FILTER_INVALID,
    TOPIC_NAME_INVALID,
    SubscriptionTrie,
    TopicTree,
    filter_covers,
    parse_shared,
    topic_matches,
    validate_topic_filter,
    validate_topic_name,
)


class Sub:
    # an opaque broker entry; equal names on purpose to prove identity is used
    def __init__(self, name):
        self.name = name

    def __eq__(self, other):
        return isinstance(other, Sub) and other.name == self.name

    def __repr__(self):
        return "Sub(" + repr(self.name) + ")"


def names(entries):
    return [e.name for e in entries]


class TestValidateTopicName(unittest.TestCase):
    def test_valid(self):
        for t in (
            "a",
            "/",
            "//",
            "a/b/c",
            "/finance",
            "sport/",
            "$SYS/x",
            "a b",
            "é/ü/€",
        ):
            self.assertEqual(validate_topic_name(t, 0, 0), 0)

    def test_empty(self):
        self.assertEqual(validate_topic_name("", 0, 0), TOPIC_NAME_INVALID)  # [MQTT-4.7.3-1]

    def test_wildcards(self):
        # [MQTT-3.3.2-2] [MQTT-4.7.0-1] no wildcard characters in a topic name
        for t in ("+", "#", "a/+", "a/#", "a+", "a#b", "sport/tennis/#"):
            self.assertEqual(validate_topic_name(t, 0, 0), TOPIC_NAME_INVALID)

    def test_null(self):
        self.assertEqual(validate_topic_name("a\x00b", 0, 0), TOPIC_NAME_INVALID)  # [MQTT-4.7.3-2]

    def test_max_levels(self):
        self.assertEqual(validate_topic_name("a/b/c", 3, 0), 0)
        self.assertEqual(validate_topic_name("a/b/c/d", 3, 0), TOPIC_NAME_INVALID)
        self.assertEqual(validate_topic_name("a/b/", 3, 0), 0)
        self.assertEqual(validate_topic_name("/a/b/", 3, 0), TOPIC_NAME_INVALID)
        self.assertEqual(validate_topic_name("a/b/c/d/e/f", 0, 0), 0)  # 0 = no limit

    def test_max_length_counts_utf8_bytes(self):
        self.assertEqual(validate_topic_name("abcd", 0, 4), 0)
        self.assertEqual(validate_topic_name("abcde", 0, 4), TOPIC_NAME_INVALID)
        # "é" is 2 bytes: 3 code points, 4 bytes
        self.assertEqual(validate_topic_name("aéb", 0, 4), 0)
        self.assertEqual(validate_topic_name("aéb", 0, 3), TOPIC_NAME_INVALID)
        self.assertEqual(validate_topic_name("€€", 0, 6), 0)
        self.assertEqual(validate_topic_name("€€", 0, 5), TOPIC_NAME_INVALID)
        self.assertEqual(validate_topic_name("x" * 5000, 0, 0), 0)


class TestValidateTopicFilter(unittest.TestCase):
    def test_valid(self):
        for f in (
            "sport/tennis/player1/#",  # spec 4.7.1.2 examples
            "sport/#",
            "#",
            "+",
            "+/tennis/#",
            "sport/+/player1",
            "sport/+",
            "+/+",
            "/+",
            "+/",
            "/",
            "$SYS/#",
            "$SYS/monitor/+",
            "$share",  # not "$share/": an ordinary filter
            "$shared/g/x",
            "a//b",
        ):
            self.assertEqual(validate_topic_filter(f, 0, 0), 0, f)

    def test_empty(self):
        self.assertEqual(validate_topic_filter("", 0, 0), TOPIC_FILTER_INVALID)  # [MQTT-4.7.3-1]

    def test_null(self):
        self.assertEqual(validate_topic_filter("a/\x00", 0, 0), TOPIC_FILTER_INVALID)  # [MQTT-4.7.3-2]

    def test_hash_last_and_alone(self):
        # [MQTT-4.7.1-2]
        for f in (
            "sport/tennis#",
            "sport/tennis/#/ranking",
            "#/",
            "##",
            "a/#/#",
            "a#",
            "#a",
            "/#/",
        ):
            self.assertEqual(validate_topic_filter(f, 0, 0), TOPIC_FILTER_INVALID, f)

    def test_plus_whole_level(self):
        # [MQTT-4.7.1-3]
        for f in ("sport+", "+sport", "a/b+/c", "a/+b", "++", "a/++/b", "+#"):
            self.assertEqual(validate_topic_filter(f, 0, 0), TOPIC_FILTER_INVALID, f)

    def test_shared_refused_here(self):
        # shared subscriptions go through parse_shared() first
        self.assertEqual(validate_topic_filter("$share/g/a", 0, 0), TOPIC_FILTER_INVALID)

    def test_limits(self):
        self.assertEqual(validate_topic_filter("a/+/#", 3, 0), 0)
        self.assertEqual(validate_topic_filter("a/+/b/#", 3, 0), TOPIC_FILTER_INVALID)
        self.assertEqual(validate_topic_filter("a/+/#", 0, 5), 0)
        self.assertEqual(validate_topic_filter("a/+/#", 0, 4), TOPIC_FILTER_INVALID)


class TestParseShared(unittest.TestCase):
    def test_normal(self):
        self.assertEqual(parse_shared("a/b"), (None, "a/b"))
        self.assertEqual(parse_shared("$share"), (None, "$share"))
        self.assertEqual(parse_shared("$SYS/#"), (None, "$SYS/#"))

    def test_shared(self):
        self.assertEqual(parse_shared("$share/g/a/b"), ("g", "a/b"))
        self.assertEqual(
            parse_shared("$share/consumer1/sport/tennis/+"),
            ("consumer1", "sport/tennis/+"),
        )
        self.assertEqual(parse_shared("$share/g/#"), ("g", "#"))
        self.assertEqual(parse_shared("$share/g//"), ("g", "/"))
        self.assertEqual(parse_shared("$share/g/$SYS/x"), ("g", "$SYS/x"))

    def test_invalid(self):
        self.assertEqual(SHARED_INVALID, ("", None))
        for f in (
            "$share/",  # [MQTT-4.8.2-1] empty group
            "$share//a",  # [MQTT-4.8.2-1]
            "$share/g",  # [MQTT-4.8.2-2] no "/" after the group
            "$share/g/",  # [MQTT-4.8.2-2] no filter
            "$share/g+/a",  # [MQTT-4.8.2-2]
            "$share/+/a",
            "$share/#/a",
            "$share/g#/a",
            "$share/g/a#",  # inner filter invalid [MQTT-4.7.1-2]
            "$share/g/a+/b",  # [MQTT-4.7.1-3]
            "$share/g/$share/h/a",  # nested share
            "$share/g/a\x00",
        ):
            self.assertEqual(parse_shared(f), SHARED_INVALID, f)


class TestTopicMatches(unittest.TestCase):
    def check(self, flt, yes, no):
        for t in yes:
            self.assertTrue(topic_matches(flt, t), flt + " ~ " + t)
        for t in no:
            self.assertFalse(topic_matches(flt, t), flt + " !~ " + t)

    def test_spec_multi_level(self):
        # 4.7.1.2: "sport/tennis/player1/#"; "#" includes the parent [MQTT-4.7.1-2]
        self.check(
            "sport/tennis/player1/#",
            (
                "sport/tennis/player1",
                "sport/tennis/player1/ranking",
                "sport/tennis/player1/score/wimbledon",
            ),
            ("sport/tennis/player2", "sport/tennis", "sport/tennis/player10"),
        )
        self.check("sport/#", ("sport", "sport/", "sport/tennis"), ("sports", "spor"))
        self.check("#", ("a", "/", "a/b/c", "/finance"), ())

    def test_spec_single_level(self):
        # 4.7.1.3 [MQTT-4.7.1-3]
        self.check(
            "sport/tennis/+",
            ("sport/tennis/player1", "sport/tennis/player2"),
            ("sport/tennis/player1/ranking", "sport/tennis"),
        )
        self.check("sport/+", ("sport/",), ("sport", "sport/a/b"))
        self.check("+", ("finance", "a b"), ("/finance", "a/b"))
        self.check("+/+", ("/finance", "a/b", "/"), ("a", "a/b/c"))
        self.check("/+", ("/finance", "/"), ("finance", "a/b", "//a"))
        self.check("+/tennis/#", ("sport/tennis", "x/tennis/a/b"), ("sport/golf",))

    def test_dollar_topics(self):
        # [MQTT-4.7.2-1] a filter starting with a wildcard does not match "$" topics
        self.check("#", (), ("$SYS", "$SYS/monitor/Clients", "$share/x"))
        self.check("+/monitor/Clients", ("a/monitor/Clients",), ("$SYS/monitor/Clients",))
        self.check("$SYS/#", ("$SYS", "$SYS/monitor/Clients"), ("SYS/x",))
        self.check("$SYS/monitor/+", ("$SYS/monitor/Clients",), ())
        self.check("a/+", ("a/$b",), ())  # "$" only matters in the first level

    def test_exact_and_case(self):
        self.check("a/b", ("a/b",), ("A/b", "a/b/", "a", "a/bc"))
        self.check("a//b", ("a//b",), ("a/b",))


class TestFilterCovers(unittest.TestCase):
    def test_covers(self):
        for outer, inner in (
            ("#", "a/b"),
            ("#", "+/#"),
            ("+/#", "#"),  # both match every non-"$" topic
            ("a/#", "a"),
            ("a/#", "a/#"),
            ("a/#", "a/+/c"),
            ("a/+", "a/b"),
            ("a/+", "a/+"),
            ("+/+", "/x"),
            ("$SYS/#", "$SYS/a"),
            ("+/#", "x/#"),
            ("a/b", "a/b"),
        ):
            self.assertTrue(filter_covers(outer, inner), outer + " > " + inner)

    def test_not_covers(self):
        for outer, inner in (
            ("a/+", "a/#"),  # "a/#" matches "a" and "a/b/c"
            ("a/+/#", "a/#"),  # "a"
            ("a/b", "a/+"),
            ("a/#", "b"),
            ("a/b/#", "a"),
            ("+", "+/+"),
            ("+/+", "+"),
            ("#", "$SYS/x"),  # [MQTT-4.7.2-1]
            ("+/x", "$SYS/x"),  # [MQTT-4.7.2-1]
            ("$SYS/#", "#"),
            ("+/+/#", "#"),
            ("a", "a/b"),
        ):
            self.assertFalse(filter_covers(outer, inner), outer + " !> " + inner)


class TestSubscriptionTrie(unittest.TestCase):
    def setUp(self):
        self.trie = SubscriptionTrie()

    def match(self, topic, trie=None):
        out = []
        (trie or self.trie).match(topic, out)
        return out

    def test_empty(self):
        self.assertEqual(self.match("a/b"), [])
        self.assertEqual(self.trie.count, 0)

    def test_spec_examples(self):
        t = self.trie
        filters = (
            "sport/tennis/player1/#",
            "sport/#",
            "#",
            "sport/tennis/+",
            "sport/+",
            "+",
            "+/+",
            "/+",
            "$SYS/#",
            "+/monitor/Clients",
            "$SYS/monitor/+",
        )
        subs = [Sub(f) for f in filters]
        for s in subs:
            t.add(s.name, s)
        self.assertEqual(t.count, len(filters))
        topics = (
            "sport/tennis/player1",
            "sport/tennis/player1/ranking",
            "sport/tennis/player1/score/wimbledon",
            "sport",
            "sport/",
            "/finance",
            "finance",
            "$SYS/monitor/Clients",
            "$SYS",
            "a/monitor/Clients",
        )
        for topic in topics:
            got = sorted(names(self.match(topic)))
            want = sorted(f for f in filters if topic_matches(f, topic))
            self.assertEqual(got, want, topic)
        # [MQTT-4.7.2-1]
        self.assertEqual(
            sorted(names(self.match("$SYS/monitor/Clients"))),
            ["$SYS/#", "$SYS/monitor/+"],
        )

    def test_order_is_documented_order(self):
        # at each node: its "#" entries, then the "+" subtree, then the exact
        # subtree; at the end: the node's entries, then its "#" entries;
        # insertion order inside one list
        t = self.trie
        for f in ("a/b", "a/+", "#", "a/#", "+/b", "a/b/#", "+/+", "a/b"):
            t.add(f, Sub(f))
        self.assertEqual(
            names(self.match("a/b")),
            ["#", "+/+", "+/b", "a/#", "a/+", "a/b", "a/b", "a/b/#"],
        )
        self.assertEqual(names(self.match("a/b/c")), ["#", "a/#", "a/b/#"])
        # insertion order wins over filter text
        t2 = SubscriptionTrie()
        for n in ("z", "y", "x"):
            t2.add("q", Sub(n))
        self.assertEqual(names(self.match("q", t2)), ["z", "y", "x"])

    def test_order_independent_of_dict_layout(self):
        # many siblings under the root: the result order depends only on the
        # rule, never on how the children dict happens to be laid out
        t = self.trie
        for i in (5, 1, 9, 3, 7, 2, 8, 0, 6, 4):
            t.add("k" + str(i) + "/x", Sub("k" + str(i)))
        t.add("+/x", Sub("plus"))
        t.add("#", Sub("hash"))
        for i in range(10):
            self.assertEqual(names(self.match("k" + str(i) + "/x")), ["hash", "plus", "k" + str(i)])

    def test_appends_to_out(self):
        s = Sub("s")
        self.trie.add("a", s)
        out = ["keep"]
        self.trie.match("a", out)
        self.assertEqual(len(out), 2)
        self.assertEqual(out[0], "keep")
        self.assertIs(out[1], s)

    def test_duplicates_not_deduped(self):
        s = Sub("s")
        self.trie.add("a/+", s)
        self.trie.add("a/+", s)
        self.trie.add("a/b", s)
        self.assertEqual(self.trie.count, 3)
        self.assertEqual(len(self.match("a/b")), 3)

    def test_remove_by_identity(self):
        t = self.trie
        s1, s2 = Sub("same"), Sub("same")
        t.add("a/b", s1)
        t.add("a/b", s2)
        self.assertTrue(t.remove("a/b", s2))
        got = self.match("a/b")
        self.assertEqual(len(got), 1)
        self.assertIs(got[0], s1)
        self.assertFalse(t.remove("a/b", s2))
        self.assertFalse(t.remove("a/b/c", s1))
        self.assertFalse(t.remove("a/+", s1))
        self.assertFalse(t.remove("a/#", s1))
        self.assertFalse(t.remove("x", s1))
        self.assertEqual(t.count, 1)

    def test_remove_keeps_order(self):
        t = self.trie
        subs = [Sub(n) for n in ("a", "b", "c", "d")]
        for s in subs:
            t.add("x/#", s)
        t.remove("x/#", subs[1])
        self.assertEqual(names(self.match("x/y")), ["a", "c", "d"])

    def test_remove_prunes(self):
        t = self.trie
        subs = {}
        filters = ("a/b/c", "a/+/c", "a/b/#", "+/#", "#", "a", "/", "a//b")
        for f in filters:
            subs[f] = Sub(f)
            t.add(f, subs[f])
        keep = Sub("keep")
        t.add("a/b/c", keep)
        for f in filters:
            self.assertTrue(t.remove(f, subs[f]), f)
        self.assertEqual(t.count, 1)
        self.assertEqual(self.match("a/b/c"), [keep])
        self.assertTrue(t.remove("a/b/c", keep))
        self.assertEqual(t.count, 0)
        # every node is gone: the root is as new
        self.assertEqual(t._root, [None, None, None, None])

    def test_partial_prune(self):
        t = self.trie
        s1, s2 = Sub("1"), Sub("2")
        t.add("a/b/c/d", s1)
        t.add("a/b", s2)
        t.remove("a/b/c/d", s1)
        node = t._root[0]["a"][0]["b"]
        self.assertIsNone(node[0])  # "c" and "d" pruned
        self.assertEqual(node[3], [s2])

    def test_dollar_rule(self):
        t = self.trie
        for f in ("#", "+", "+/+", "+/#", "$SYS", "$SYS/+", "$SYS/#", "$/#"):
            t.add(f, Sub(f))
        self.assertEqual(names(self.match("$SYS")), ["$SYS", "$SYS/#"])  # [MQTT-4.7.2-1]
        self.assertEqual(names(self.match("$SYS/a")), ["$SYS/#", "$SYS/+"])
        self.assertEqual(names(self.match("$")), ["$/#"])  # parent of "$/#"
        self.assertEqual(names(self.match("$/x")), ["$/#"])
        self.assertEqual(names(self.match("SYS/a")), ["#", "+/#", "+/+"])

    def test_empty_levels(self):
        t = self.trie
        for f in ("/", "+/", "/+", "+/+", "//#", "+"):
            t.add(f, Sub(f))
        self.assertEqual(sorted(names(self.match("/"))), ["+/", "+/+", "/", "/+", "//#"])
        self.assertEqual(sorted(names(self.match("//"))), ["//#"])
        self.assertEqual(sorted(names(self.match("a/"))), ["+/", "+/+"])

    def test_cache_hits_and_invalidation(self):
        t = SubscriptionTrie(4096)
        a = Sub("a")
        t.add("x/+", a)
        self.assertEqual(self.match("x/y", t), [a])
        self.assertEqual(self.match("x/y", t), [a])  # served from the cache
        self.assertEqual(self.match("nobody", t), [])
        self.assertEqual(self.match("nobody", t), [])
        self.assertEqual(len(t._cache), 2)
        # add invalidates: the new entry shows up at once
        b = Sub("b")
        t.add("nobody", b)
        self.assertEqual(len(t._cache), 0)
        self.assertEqual(self.match("nobody", t), [b])
        self.assertEqual(self.match("x/y", t), [a])
        # remove invalidates
        t.remove("x/+", a)
        self.assertEqual(self.match("x/y", t), [])
        self.assertEqual(self.match("nobody", t), [b])
        # a failed remove changes nothing and keeps the cache
        n = len(t._cache)
        self.assertFalse(t.remove("x/+", a))
        self.assertEqual(len(t._cache), n)

    def test_cache_appends_after_existing(self):
        t = SubscriptionTrie(4096)
        a = Sub("a")
        t.add("q", a)
        for _ in range(2):
            out = ["pre"]
            t.match("q", out)
            self.assertEqual(out, ["pre", a])

    def test_cache_budget(self):
        t = SubscriptionTrie(200)  # about 4 short topics
        a = Sub("a")
        t.add("#", a)
        for i in range(50):
            self.assertEqual(self.match("t/" + str(i), t), [a])
            self.assertTrue(t._cache_used <= 200)
            self.assertTrue(len(t._cache) <= 5)
        # a result too large for the budget is not cached but still right
        t2 = SubscriptionTrie(40)
        for i in range(20):
            t2.add("#", Sub(i))
        self.assertEqual(len(self.match("a", t2)), 20)
        self.assertEqual(len(t2._cache), 0)
        self.assertEqual(len(self.match("a", t2)), 20)

    def test_cache_hit_allocates_nothing(self):
        # allocation budget, measured where gc.mem_alloc exists (MicroPython)
        import gc

        mem_alloc = getattr(gc, "mem_alloc", None)
        if mem_alloc is None:
            self.skipTest("gc.mem_alloc: measured under MicroPython (tests/host/test_micropython.py)")
        t = SubscriptionTrie(4096)
        t.add("a/+", Sub("1"))
        t.add("#", Sub("2"))
        out = []
        topics = ("a/b", "zz/q", "$x", "a/b", "$x")
        for topic in topics:  # fill the cache and grow `out` once
            t.match(topic, out)
        used = 0
        for topic in topics:
            del out[:]
            gc.collect()
            before = mem_alloc()
            t.match(topic, out)
            used += mem_alloc() - before
        self.assertEqual(used, 0)

    def test_cache_disabled(self):
        self.assertIsNone(SubscriptionTrie(0)._cache)

    def test_many_filters_agree_with_reference(self):
        levels = ("a", "b", "", "$x", "+")
        filters = []
        for x in levels:
            if x:
                filters.append(x)
            filters.append(x + "/#")
            for y in levels:
                filters.append(x + "/" + y)
                filters.append(x + "/" + y + "/#")
        filters.append("#")
        topics = []
        for x in ("a", "b", "", "$x", "c"):
            if x:
                topics.append(x)
            for y in ("a", "b", "", "$x", "c"):
                topics.append(x + "/" + y)
                topics.append(x + "/" + y + "/a")
        for cache in (0, 1 << 20):
            t = SubscriptionTrie(cache)
            for f in filters:
                t.add(f, Sub(f))
            for _ in range(2):
                for topic in topics:
                    got = sorted(names(self.match(topic, t)))
                    want = sorted(f for f in filters if topic_matches(f, topic))
                    self.assertEqual(got, want, topic)


class TestTopicTree(unittest.TestCase):
    def setUp(self):
        self.tree = TopicTree()

    def query(self, flt):
        out = []
        self.tree.match_filter(flt, out)
        return out

    def fill(self, topics):
        for t in topics:
            self.tree.set(t, t)

    def test_set_get_remove(self):
        tr = self.tree
        self.assertIsNone(tr.get("a"))
        tr.set("a/b", 1)
        tr.set("a/b", 2)  # replace
        tr.set("a", 3)
        self.assertEqual(tr.count, 2)
        self.assertEqual(tr.get("a/b"), 2)
        self.assertEqual(tr.get("a"), 3)
        self.assertIsNone(tr.get("a/b/c"))
        self.assertIsNone(tr.get("a/"))
        self.assertEqual(tr.remove("a/b"), 2)
        self.assertIsNone(tr.remove("a/b"))
        self.assertIsNone(tr.remove("zz"))
        self.assertEqual(tr.count, 1)
        tr.set("a", None)  # None removes
        self.assertEqual(tr.count, 0)
        self.assertEqual(tr._root, [None, None])

    def test_remove_prunes(self):
        tr = self.tree
        tr.set("a/b/c/d", 1)
        tr.set("a/b", 2)
        self.assertIsNone(tr.remove("a/b/c"))  # an inner node holds no value
        tr.remove("a/b/c/d")
        self.assertIsNone(tr._root[0]["a"][0]["b"][0])
        tr.remove("a/b")
        self.assertEqual(tr._root, [None, None])

    def test_exact(self):
        self.fill(("a/b", "a/c", "a"))
        self.assertEqual(self.query("a/b"), ["a/b"])
        self.assertEqual(self.query("a/x"), [])
        self.assertEqual(self.query("a/b/c"), [])

    def test_order_is_level_lexicographic(self):
        topics = ("b", "a/c", "a", "a/b/c", "a/", "a//x", "a/b", "c/a", "$SYS/x")
        self.fill(topics)
        self.assertEqual(self.query("#"), ["a", "a/", "a//x", "a/b", "a/b/c", "a/c", "b", "c/a"])
        self.assertEqual(self.query("a/#"), ["a", "a/", "a//x", "a/b", "a/b/c", "a/c"])
        self.assertEqual(self.query("a/+"), ["a/", "a/b", "a/c"])
        self.assertEqual(self.query("+"), ["a", "b"])
        self.assertEqual(self.query("+/+"), ["a/", "a/b", "a/c", "c/a"])

    def test_spec_examples(self):
        topics = (
            "sport",
            "sport/",
            "sport/tennis",
            "sport/tennis/player1",
            "sport/tennis/player1/ranking",
            "sport/tennis/player1/score/wimbledon",
            "sport/tennis/player2",
            "/finance",
            "finance",
            "$SYS/monitor/Clients",
            "$SYS",
        )
        self.fill(topics)
        for flt in (
            "sport/tennis/player1/#",
            "sport/#",
            "#",
            "sport/tennis/+",
            "sport/+",
            "+",
            "+/+",
            "/+",
            "$SYS/#",
            "+/monitor/Clients",
            "$SYS/monitor/+",
            "+/#",
        ):
            want = sorted((t for t in topics if topic_matches(flt, t)), key=lambda t: t.split("/"))
            self.assertEqual(self.query(flt), want, flt)

    def test_dollar_rule(self):
        self.fill(("$SYS", "$SYS/a", "$", "x", "x/$y"))
        # [MQTT-4.7.2-1]
        self.assertEqual(self.query("#"), ["x", "x/$y"])
        self.assertEqual(self.query("+"), ["x"])
        self.assertEqual(self.query("+/+"), ["x/$y"])
        self.assertEqual(self.query("$SYS/#"), ["$SYS", "$SYS/a"])
        self.assertEqual(self.query("$"), ["$"])

    def test_large(self):
        for i in range(2000):
            self.tree.set("dev/" + str(i) + "/state", i)
        self.assertEqual(self.tree.count, 2000)
        self.assertEqual(self.query("dev/1234/state"), [1234])
        got = self.query("dev/+/state")
        self.assertEqual(len(got), 2000)
        self.assertEqual(got[:3], [0, 1, 10])  # level "0" < "1" < "10"


class TestFilterCursor(unittest.TestCase):
    # TopicTree.cursor: match_filter's values one at a time (the retained
    # replay streams them), while the tree may change between calls.
    def setUp(self):
        self.tree = TopicTree()
        for t in ("a", "a/", "a//x", "a/b", "a/b/c", "a/c", "b", "c/a", "$SYS/x"):
            self.tree.set(t, t)

    def take(self, cursor, n=1000):
        out = []
        while len(out) < n:
            v = cursor.next()
            if v is None:
                break
            out.append(v)
        return out

    def test_the_first_value_comes_before_the_walk_has_seen_the_rest(self):
        cursor = self.tree.cursor("#")
        self.assertEqual(cursor.next(), "a")
        # everything after "a" is looked up when its turn comes: removed now, never given
        for t in ("a/", "a//x", "a/b", "a/b/c", "a/c", "b"):
            self.tree.remove(t)
        self.assertEqual(self.take(cursor), ["c/a"])
        self.assertIsNone(cursor.next())  # and stays over

    def test_a_value_replaced_ahead_of_the_cursor_is_given_as_it_is_then(self):
        cursor = self.tree.cursor("a/+")
        self.assertEqual(cursor.next(), "a/")
        self.tree.set("a/c", "new")
        self.tree.remove("a/b")
        self.tree.set("a/b", "again")  # a new node under the node being walked
        self.assertEqual(self.take(cursor), ["again", "new"])

    def test_a_topic_under_a_node_not_yet_entered_is_found(self):
        cursor = self.tree.cursor("#")
        self.assertEqual(self.take(cursor, 2), ["a", "a/"])
        self.tree.set("c/0", "c/0")  # below "c", not entered yet
        self.tree.set("a/0", "a/0")  # below "a", whose names were sorted: not given
        self.assertEqual(self.take(cursor), ["a//x", "a/b", "a/b/c", "a/c", "b", "c/0", "c/a"])

    def test_every_filter_walks_like_match_filter(self):
        for flt in ("#", "a/#", "a/+", "+", "+/+", "+/#", "a", "a/b/c", "$SYS/#", "+/a", "x/#", "a//+"):
            want = []
            self.tree.match_filter(flt, want)
            want2 = sorted((t for t in ("a", "a/", "a//x", "a/b", "a/b/c", "a/c", "b", "c/a", "$SYS/x") if topic_matches(flt, t)), key=lambda t: t.split("/"))
            self.assertEqual(want, want2, flt)
            self.assertEqual(self.take(self.tree.cursor(flt)), want, flt)


if __name__ == "__main__":
    unittest.main()
