# The bridge (common/bridge/bridge.py) between two sans-I/O brokers: an
# "edge" and a "cloud" harness, its two clients joined to them by hand
# (tests/core/wire.py). Store-and-forward, remapping, profiles, dead
# letters, loops, back-off. Runs on CPython and MicroPython.

import unittest

from common.bridge.bridge import Bridge
from common.bridge.settings import parse_bridges
from common.broker.settings import ConfigError
from common.mqtt import consts as C
from common.mqtt.packets import PubAck
from tests.core.harness import Harness
from tests.core.memkv import MemKV
from tests.core.test_persist import open_store, restart
from tests.core.wire import Wire


def rule(direction, pattern, local_prefix="", remote_prefix="", qos=1, retain=True):
    """A [[bridge.topic]] table in the prefix form."""
    return {
        "direction": direction,
        "pattern": pattern,
        "local_prefix": local_prefix,
        "remote_prefix": remote_prefix,
        "qos": qos,
        "retain": retain,
    }


def bridge_settings(rules=None, **table):
    """The BridgeSettings of a [[bridge]] table named cloud (settings.py checks it)."""
    if rules is None:
        rules = [rule("out", "#", "up/", "edge1/", 2), rule("in", "#", "down/", "cmd/edge1/", 2)]
    body = {"name": "cloud", "addresses": ["a:1", "b:2"], "topic": rules}
    body.update(table)
    return parse_bridges("test", [body])[0]


class Pair:
    """An edge broker, a cloud broker and a bridge between them. `table`:
    [[bridge]] keys (the cloud, a Siskin, refuses the bridge bit: 3.1.1
    goes without it)."""

    def __init__(self, rules=None, edge=None, cloud=None, **table):
        self.edge = edge if edge is not None else Harness()
        self.cloud = cloud if cloud is not None else Harness()
        self.logged = []
        table.setdefault("bridge_bit", False)
        self.bridge = Bridge(bridge_settings(rules, **table), self.log, self.cloud.entropy)
        self.local = None
        self.up = None
        self.settle()

    def log(self, level, text):
        self.logged.append(text)

    def connect_up(self):
        self.up = Wire(self.cloud, self.bridge.up)
        self.bridge.up_open(0)
        self.settle()

    def drop_up(self):
        self.up.drop()
        self.bridge.up_failed("test", 0)
        self.up = None

    def settle(self):
        """Move bytes until both sides are quiet, opening and closing the
        local connection as the bridge asks (as cpython_host/bridge.py does)."""
        b = self.bridge
        for _ in range(20):
            self.sync_local()
            if self.local is not None:
                self.local.settle()
                self.sync_local()
            if self.up is not None:
                self.up.settle()
            if not b.local.out and (self.up is None or not b.up.out) and not (b.sync_local() and self.local is None):
                return

    def sync_local(self):
        """Open the local connection when the bridge asks; note its end."""
        b = self.bridge
        if self.local is not None and self.local.closed:  # the broker closed it (after our DISCONNECT)
            b.local_closed()
            self.local = None
        if b.sync_local() and self.local is None:
            self.local = Wire(self.edge, b.local)
            session = self.edge.broker.sessions.find(b.local.client_id)
            if session is None:
                b.local_open(0)
            else:
                b.local_open(0, list(session.subs), list(session.qos2_in))

    def consumer(self, flt, qos=2):
        c = self.cloud.client(4)
        c.connect("consumer", clean=False)
        c.subscribe(flt, qos)
        return c


def payloads(client, with_topic=False):
    """What `client` received (acking each, so more can come)."""
    got = []
    while True:
        pkts = [p for p in client.take() if p.ptype == C.PUBLISH]
        if not pkts:
            return got
        for p in pkts:
            got.append((p.topic, p.payload) if with_topic else p.payload)
            if p.qos:
                client.ack(p)


def publish_acked(h, topic, n, qos=1, start=0):
    """`n` messages from a device of harness `h`; how many it got an ack for."""
    dev = h.client(4)
    dev.connect("device")
    acked = 0
    for i in range(start, start + n):
        dev.publish(topic, b"%d" % i, qos, packet_id=i % 60000 + 1)
        for p in dev.take():
            if p.ptype in (C.PUBACK, C.PUBREC):
                acked += 1
                if p.ptype == C.PUBREC:
                    dev.send(PubAck(C.PUBREL, p.packet_id))
    dev.disconnect()
    return acked


class TestForward(unittest.TestCase):
    def test_out_and_in_with_remapped_prefixes(self):
        for level in (4, 5):
            p = Pair(protocol=level)
            p.connect_up()
            cons = p.consumer("edge1/#")
            dev = p.edge.client(5)
            dev.connect("dev")
            dev.subscribe("down/#", 2)
            for qos in (0, 1, 2):
                dev.publish("up/s/%d" % qos, b"q%d" % qos, qos, packet_id=qos)
                p.settle()
            self.assertEqual(payloads(cons, True), [("edge1/s/0", b"q0"), ("edge1/s/1", b"q1"), ("edge1/s/2", b"q2")])
            cmd = p.cloud.client(4)
            cmd.connect("cmd")
            for qos in (0, 1, 2):
                cmd.publish("cmd/edge1/x/%d" % qos, b"c%d" % qos, qos, packet_id=qos + 1)
                p.settle()
            got = [(m.topic, m.payload, m.qos) for m in dev.take() if m.ptype == C.PUBLISH]
            self.assertEqual(got, [("down/x/0", b"c0", 0), ("down/x/1", b"c1", 1), ("down/x/2", b"c2", 2)])
            self.assertEqual(p.bridge.sent, 3)
            self.assertEqual(p.bridge.received, 3)

    def test_no_loop_for_a_topic_bridged_both_ways(self):
        # What came down is not sent back up: No Local on the local session
        # (and on the upstream subscription, v5).
        p = Pair(rules=[rule("both", "x/#")], protocol=5)
        p.connect_up()
        cons = p.consumer("x/#")
        cmd = p.cloud.client(5)
        cmd.connect("cmd")
        cmd.publish("x/1", b"down", 1, packet_id=1)
        p.settle()
        self.assertEqual(payloads(cons), [b"down"])
        self.assertEqual(p.bridge.sent, 0)
        self.assertEqual(p.bridge.received, 1)


class TestStoreAndForward(unittest.TestCase):
    def test_upstream_away_then_back_in_order(self):
        p = Pair(window=4)
        p.connect_up()
        cons = p.consumer("edge1/#")
        p.drop_up()
        self.assertEqual(publish_acked(p.edge, "up/t", 50), 50)
        p.settle()
        session = p.edge.broker.sessions.find("siskin-bridge-cloud")
        # Offline while the upstream is away: queued like any offline
        # session's, no publisher held back (an online one falling behind would).
        self.assertIsNone(session.conn)
        self.assertEqual(p.edge.broker.throttled, [])
        self.assertEqual(session.queue.count, 46)
        self.assertEqual(len(session.inflight), 4)  # the window's 4: held by the bridge, resent with DUP
        self.assertEqual(payloads(cons), [])
        p.connect_up()
        self.assertEqual(payloads(cons), [b"%d" % i for i in range(50)])
        self.assertEqual(session.queue.count, 0)
        self.assertEqual(len(session.inflight), 0)
        self.assertEqual(p.bridge.sent, 50)

    def test_in_flight_when_the_link_died_goes_once(self):
        # Sent up, the link dies before the ack: the upstream client resends
        # it (DUP, same id) and the local session too (DUP, same local id):
        # the bridge keeps one copy, so QoS 2 stays exactly once.
        p = Pair(window=8)
        p.connect_up()
        cons = p.consumer("edge1/#")
        dev = p.edge.client(4)
        dev.connect("dev")
        for i in range(5):
            dev.publish("up/t", b"%d" % i, 2, packet_id=i + 1)
        p.local.settle()  # into the bridge and written up, not yet read by the cloud
        self.assertEqual(len(p.bridge.up.inflight), 5)
        p.drop_up()
        p.settle()
        p.connect_up()
        self.assertEqual(payloads(cons), [b"%d" % i for i in range(5)])
        self.assertEqual(p.bridge.sent, 5)
        session = p.edge.broker.sessions.find("siskin-bridge-cloud")
        self.assertEqual(len(session.inflight) + session.queue.count, 0)

    def test_acked_messages_survive_a_power_cut_of_the_edge(self):
        backend = MemKV()
        p = Pair(edge=Harness(store=open_store(backend)), window=2)
        cons = p.consumer("edge1/#")
        self.assertEqual(publish_acked(p.edge, "up/t", 10), 10)  # the upstream never reached
        p.settle()
        edge2, _ = restart(backend)  # only what was synced survives
        p2 = Pair(edge=edge2, cloud=p.cloud, window=2)
        p2.connect_up()
        self.assertEqual(payloads(cons), [b"%d" % i for i in range(10)])
        session = edge2.broker.sessions.find("siskin-bridge-cloud")
        self.assertEqual(session.queue.count + len(session.inflight), 0)

    def test_queue_full_is_the_sessions_policy(self):
        p = Pair(edge=Harness(max_queued_messages=5, queue_full="drop_newest"), window=1)
        publish_acked(p.edge, "up/t", 20)
        p.settle()
        session = p.edge.broker.sessions.find("siskin-bridge-cloud")
        self.assertEqual(session.queue.count, 5)
        self.assertGreater(p.edge.broker.snapshot()["dropped_queue_full"], 0)


class TestRemovedRules(unittest.TestCase):
    def test_a_removed_rule_goes_and_what_it_queued_is_dead_lettered(self):
        backend = MemKV()
        keep = [rule("out", "#", "up/", "edge1/")]
        rules = keep + [rule("out", "#", "old/", "old/"), rule("in", "#", "down/", "cmd/edge1/")]
        p = Pair(edge=Harness(store=open_store(backend)), rules=rules)
        p.connect_up()  # the upstream session subscribes cmd/edge1/#
        cons = p.consumer("#")
        p.drop_up()
        publish_acked(p.edge, "old/t", 3)
        publish_acked(p.edge, "up/t", 2, start=3)
        p.settle()
        # Restarted with the old/ and the in rule gone from the configuration.
        edge2, _ = restart(backend)
        p2 = Pair(edge=edge2, cloud=p.cloud, rules=keep)
        session = edge2.broker.sessions.find("siskin-bridge-cloud")
        self.assertEqual(list(session.subs), ["up/#"])
        self.assertIn("bridge cloud: unsubscribed old/# here: no rule names them any more", p2.logged)
        p2.connect_up()
        self.assertEqual(payloads(cons, True), [("edge1/t", b"3"), ("edge1/t", b"4")])
        self.assertEqual(session.queue.count + len(session.inflight), 0)
        self.assertEqual(p2.bridge.dead_lettered, 3)  # old/t's, counted and logged
        self.assertEqual(len([t for t in p2.logged if "no rule sends it up any more" in t]), 3)
        # Upstream, the resumed session still holds cmd/edge1/#: what comes
        # is counted, acknowledged and skipped, not stored here.
        dev = edge2.client(4)
        dev.connect("dev")
        dev.subscribe("down/#", 1)
        cmd = p.cloud.client(4)
        cmd.connect("cmd")
        cmd.publish("cmd/edge1/x", b"c", 1, packet_id=1)
        p2.settle()
        self.assertEqual(payloads(dev), [])
        self.assertEqual(p2.bridge.dead_lettered, 4)
        self.assertEqual(p2.bridge.received, 0)


class TestDeadLetters(unittest.TestCase):
    def test_nats_topic_with_a_dot_does_not_block_the_rest(self):
        p = Pair(profile="nats")
        p.connect_up()
        cons = p.consumer("edge1/#")
        publish_acked(p.edge, "up/a.b", 1)
        publish_acked(p.edge, "up/ok", 1, start=1)
        publish_acked(p.edge, "up/with space", 1, start=2)
        p.settle()
        self.assertEqual(payloads(cons), [b"1"])
        self.assertEqual(p.bridge.dead_lettered, 2)
        session = p.edge.broker.sessions.find("siskin-bridge-cloud")
        self.assertEqual(len(session.inflight) + session.queue.count, 0)
        self.assertIn("dead-lettered", p.logged[-1])

    def test_nats_profile_is_311_qos1_without_the_bridge_bit(self):
        p = Pair(profile="nats")
        self.assertEqual(p.bridge.up.level, 4)
        self.assertFalse(p.bridge.up.bridge)
        p.connect_up()
        cons = p.consumer("edge1/#")
        publish_acked(p.edge, "up/q2", 1, qos=2)
        p.settle()
        got = [m.qos for m in cons.take() if m.ptype == C.PUBLISH]
        self.assertEqual(got, [1])

    def test_v5_refusal_is_dead_lettered(self):
        p = Pair(rules=[rule("out", "#", "up/", "$SYS/")], protocol=5)  # the cloud refuses $SYS/ (0x87)
        p.connect_up()
        publish_acked(p.edge, "up/x", 3)
        p.settle()
        self.assertEqual(p.bridge.dead_lettered, 3)
        self.assertEqual(p.bridge.sent, 0)
        session = p.edge.broker.sessions.find("siskin-bridge-cloud")
        self.assertEqual(len(session.inflight) + session.queue.count, 0)


class TestReconnect(unittest.TestCase):
    def test_backoff_doubles_with_jitter_and_fails_over(self):
        p = Pair(backoff_min=1.0, backoff_max=8.0)
        self.assertEqual(p.bridge.next_address(5), "a:1")
        p.bridge.up_open(5)
        delays = []
        addresses = []
        ms = 5
        for _ in range(6):
            p.bridge.up_failed("refused", ms)
            delay = p.bridge.retry_at - ms
            delays.append(delay)
            self.assertIsNone(p.bridge.next_address(ms + delay - 1))
            ms += delay
            addresses.append(p.bridge.next_address(ms))
            p.bridge.up_open(ms)
        self.assertEqual(addresses, ["b:2", "a:1", "b:2", "a:1", "b:2", "a:1"])
        caps = [2000, 4000, 8000, 8000, 8000, 8000]
        for d, cap in zip(delays, caps):
            self.assertTrue(cap // 2 <= d <= cap, (delays, caps))

    def test_refused_credentials_logged_once_per_attempt(self):
        from common.broker import security_files

        p = Pair()
        security_files.set_security(p.cloud.broker, None, None, False, p.cloud.now)
        p.connect_up()
        self.assertEqual(p.bridge.close_wanted, "CONNACK 0x05 (not authorized)")
        p.bridge.up_failed(p.bridge.close_wanted, 0)
        self.assertEqual(len([t for t in p.logged if "not authorized" in t]), 1)


class TestSettings(unittest.TestCase):
    def test_filters_overlap(self):
        from common.bridge.settings import overlap as _overlap

        for a, b, want in (
            ("a/b", "a/b", True),
            ("a/b", "a/c", False),
            ("a/+", "a/b", True),
            ("+/cmd/#", "edge1/#", True),
            ("+/cmd/#", "edge1/up/#", False),
            ("a/#", "a", True),  # "#" matches its parent level too
            ("a/+/#", "a", False),
            ("a/+", "a", False),
            ("#", "x/y/z", True),
            ("a/b/c", "a/+", False),
        ):
            self.assertEqual(_overlap(a, b), want, (a, b))
            self.assertEqual(_overlap(b, a), want, (b, a))

    def test_parse_and_refuse(self):
        ok = {"name": "c", "addresses": ["h:1883"], "topic": [{"pattern": "#", "direction": "both"}]}
        (b,) = parse_bridges("t.toml", [ok])
        self.assertEqual((b.protocol, b.topics[0]["qos"], b.topics[0]["direction"]), (4, 1, "both"))
        nats = dict(ok, profile="nats", topic=[{"pattern": "a/#", "qos": 2, "direction": "out"}])
        self.assertEqual(parse_bridges("t.toml", [nats])[0].topics[0]["qos"], 1)  # QoS 2 downgraded
        # Out and in apart upstream: no echo from NATS, accepted.
        apart = [
            {"pattern": "#", "direction": "out", "remote_prefix": "edge1/up/"},
            {"pattern": "#", "direction": "in", "remote_prefix": "edge1/down/"},
            {"pattern": "+/cmd", "direction": "in", "remote_prefix": "all/"},
        ]
        self.assertEqual(len(parse_bridges("t.toml", [dict(ok, profile="nats", topic=apart)])[0].topics), 3)
        bad = (
            (dict(ok, name=""), "name is missing"),
            (dict(ok, addresses=[]), "addresses is missing"),
            (dict(ok, addresses=["nohost"]), "host:port"),
            (dict(ok, topic=[]), "no topic rules"),
            (dict(ok, topic=[{"pattern": "a/#/b"}]), "not a valid topic filter"),
            (dict(ok, topic=[{"pattern": "a", "local_prefix": "+/"}]), "wildcards"),
            (dict(ok, profile="nats", protocol=5), "3.1.1 only"),
            (dict(ok, profile="nats", topic=[{"pattern": "a/#", "remote_prefix": "site.1/"}]), "takes no '.' in a topic"),
            (dict(ok, profile="nats"), 'rule #1 is "both"'),
            (
                dict(
                    ok,
                    profile="nats",
                    topic=[
                        {"pattern": "#", "direction": "out", "remote_prefix": "edge1/"},
                        {"pattern": "+/cmd/#", "direction": "in", "local_prefix": "cmd/"},
                    ],
                ),
                "rule #1 (out, 'edge1/#') and rule #2 (in, '+/cmd/#') overlap",
            ),
            (dict(ok, certfile="c.pem"), "go together"),
            (dict(ok, porotcol=5), "unknown key"),
        )
        for body, words in bad:
            with self.assertRaises(ConfigError) as cm:
                parse_bridges("t.toml", [body])
            self.assertIn(words, str(cm.exception))


if __name__ == "__main__":
    unittest.main()
