# Sparkplug B awareness in the core (sparkplug_aware; common/broker/sparkplug.py),
# on both interpreters, over the in-memory harness. The Sparkplug 3.0
# assertions for an aware MQTT server are named [tck-id-...]; the same are
# driven by independent clients over the real host broker in
# tests/host/test_sparkplug.py.

import unittest

from common.broker import security_files
from common.broker.acl import Acl
from common.broker.protobuf import stamp
from common.broker.sparkplug import classify
from common.broker.users import Users
from common.mqtt import consts as C
from tests.core.harness import Harness
from tests.core.test_security import user_line

# Payload bytes below were made by Eclipse Tahu's encoder (npm
# sparkplug-payload 1.0.3, tests/host/sparkplug_payload.js), not by ours:
#   {"timestamp":1000,"metrics":[{"name":"bdSeq","type":"Int64","value":3}]}
NDEATH_1000 = bytes.fromhex("08e807" "120b0a056264536571" "2004" "5803")
#   the same with "timestamp": 1700000000123
NDEATH_STAMPED = bytes.fromhex("08fbd095ffbc31" "120b0a056264536571" "2004" "5803")
#   {"timestamp":5,"metrics":[...bdSeq 3...],"seq":0}: field 1 first, seq (field 3) after
WITH_SEQ = bytes.fromhex("0805" "120b0a05626453657120045803" "1800")
NOW_MS = 1700000000123
#   {"timestamp":1700000000123,"metrics":[{"name":"bdSeq","type":"Int64","value":0}]}
EDGE_NDEATH = bytes.fromhex("08fbd095ffbc31" "120b0a056264536571" "2004" "5800")
#   {"timestamp":1700000000123,"metrics":[{"alias":1,"type":"UInt64","value":2},
#    {"alias":2,"type":"UInt64","value":2},{"alias":4,"type":"UInt64","value":1}],"seq":1}
EDGE_NDATA = bytes.fromhex("08fbd095ffbc31" "120610012008" "5802" "120610022008" "5802" "120610042008" "5801" "1801")
#   {"metrics":[{"name":"Node Control/Rebirth","type":"Boolean","value":false}]}: the metric
REBIRTH_METRIC = bytes.fromhex("121a0a144e6f646520436f6e74726f6c2f52656269727468200b7000")
#   {"timestamp":5,"metrics":[{"name":"Other","type":"Boolean","value":true},
#    {"name":"Node Control/Rebirth","type":"Boolean","value":true}]}: an NCMD asking for a rebirth
NCMD_OTHER_TRUE = bytes.fromhex("0805" "120b0a054f74686572200b7001" "121a0a144e6f646520436f6e74726f6c2f52656269727468200b7001")


CERTS = "$sparkplug/certificates/"
NBIRTH = "spBv1.0/G1/NBIRTH/E1"
DBIRTH = "spBv1.0/G1/DBIRTH/E1/D1"
NDEATH = "spBv1.0/G1/NDEATH/E1"


def aware(acl=None, **settings):
    h = Harness(sparkplug_aware=True, **settings)
    if acl is not None:
        security_files.set_security(h.broker, Users.parse(user_line("trusted", "pw") + "\n", "passwd"), Acl.parse(acl, "acl"), True, h.now)
    return h


def logged(h):
    lines = []
    h.broker.set_logger(lambda level, text: lines.append(text))
    return lines


def publishes(client):
    return [p for p in client.take() if p.ptype == C.PUBLISH]


class TestTopics(unittest.TestCase):
    def test_valid_and_malformed(self):
        ok = (
            "spBv1.0/G/NBIRTH/E",
            "spBv1.0/G/NDATA/E",
            "spBv1.0/G/NCMD/E",
            "spBv1.0/G/DBIRTH/E/D",
            "spBv1.0/G/DDATA/E/D",
            "spBv1.0/G/DDEATH/E/D",
            "spBv1.0/G/DCMD/E/D",
            "spBv1.0/STATE/host-1",
            "spAv1.0/G/NBIRTH",  # not the namespace: a topic like others
            "sensors/1",
        )
        for topic in ok:
            self.assertLess(classify(topic), 3, topic)
        bad = (
            "spBv1.0/",
            "spBv1.0/G",
            "spBv1.0/G/",
            "spBv1.0//NBIRTH/E",  # empty group id
            "spBv1.0/G/NBIRTH/",  # empty edge node id
            "spBv1.0/G/NBIRTH",  # no edge node id
            "spBv1.0/G/NBIRTH/E/D",  # a device on a node message
            "spBv1.0/G/DBIRTH/E",  # no device on a device message
            "spBv1.0/G/DDATA/E//",
            "spBv1.0/G/XBIRTH/E",  # no such message type
            "spBv1.0/STATE",
            "spBv1.0/STATE/h/x",
            CERTS + NBIRTH,
        )
        for topic in bad:
            self.assertGreaterEqual(classify(topic), 3, topic)


class TestStamp(unittest.TestCase):
    def test_timestamp_replaced_and_the_rest_kept(self):
        self.assertEqual(stamp(NDEATH_1000, NOW_MS), NDEATH_STAMPED)

    def test_timestamp_added_first_when_absent(self):
        self.assertEqual(stamp(NDEATH_1000[3:], NOW_MS), NDEATH_STAMPED)

    def test_fields_after_keep_their_order(self):
        self.assertEqual(stamp(WITH_SEQ, 1000), NDEATH_1000 + b"\x18\x00")

    def test_not_protobuf(self):
        for junk in (b"\x08", b"\x12\x05ab", b"\x0b\x00", b"\x00\x01", b"\xff" * 11):
            self.assertIsNone(stamp(junk, 1), junk)


class TestOff(unittest.TestCase):
    def test_off_by_default_nothing_loaded_nothing_changed(self):
        h = Harness()
        self.assertIsNone(h.broker.sparkplug)
        sub = h.client(5)
        sub.connect("sub")
        sub.subscribe("$sparkplug/#")
        pub = h.client(5)
        pub.connect("pub")
        pub.publish(NBIRTH, b"birth", qos=1)
        self.assertEqual(pub.expect(C.PUBACK).reason, C.RC_NO_MATCHING_SUBSCRIBERS)
        pub.publish(CERTS + NBIRTH, b"planted", qos=1)  # a topic like others when off
        self.assertEqual(pub.expect(C.PUBACK).reason, C.RC_SUCCESS)
        self.assertEqual([p.payload for p in publishes(sub)], [b"planted"])
        self.assertEqual(h.broker.snapshot()["refused_sparkplug"], 0)


class TestAware(unittest.TestCase):
    def test_nbirth_certificate_retained(self):
        # [tck-id-conformance-mqtt-aware-store] [tck-id-conformance-mqtt-aware-nbirth-mqtt-topic]
        # [tck-id-conformance-mqtt-aware-nbirth-mqtt-retain]
        h = aware()
        host = h.client()
        host.connect("host")
        host.subscribe("spBv1.0/#")
        node = h.client()
        node.connect("E1")
        node.publish(NBIRTH, b"nbirth-1")  # QoS 0, not retained, as the spec has it
        got = publishes(host)
        self.assertEqual([(p.topic, p.payload) for p in got], [(NBIRTH, b"nbirth-1")])  # [tck-id-conformance-mqtt-aware-basic]
        late = h.client()
        late.connect("late")
        late.subscribe(CERTS + "spBv1.0/G1/NBIRTH/+")
        (cert,) = publishes(late)
        self.assertEqual((cert.topic, cert.payload, cert.retain), (CERTS + NBIRTH, b"nbirth-1", True))
        node.publish(NBIRTH, b"nbirth-2")  # a new birth replaces the certificate
        late2 = h.client()
        late2.connect("late2")
        late2.subscribe(CERTS + NBIRTH)
        self.assertEqual([p.payload for p in publishes(late2)], [b"nbirth-2"])
        self.assertEqual(h.broker.sparkplug.certified, 2)

    def test_dbirth_certificate_retained_with_its_properties(self):
        # [tck-id-conformance-mqtt-aware-dbirth-mqtt-topic] [tck-id-conformance-mqtt-aware-dbirth-mqtt-retain]
        h = aware()
        node = h.client(5)
        node.connect("E1")
        props = [(C.PROP_USER_PROPERTY, ("site", "north"))]
        node.publish(DBIRTH, b"dbirth", qos=1, props=props)
        self.assertEqual(node.expect(C.PUBACK).reason, C.RC_NO_MATCHING_SUBSCRIBERS)
        late = h.client(5)
        late.connect("late")
        late.subscribe(CERTS + "spBv1.0/+/DBIRTH/#", qos=1)
        (cert,) = publishes(late)
        self.assertEqual((cert.topic, cert.payload, cert.retain, cert.qos), (CERTS + DBIRTH, b"dbirth", True, 1))
        self.assertEqual(cert.props, props)

    def test_clients_cannot_publish_certificates(self):
        h = aware()
        lines = logged(h)
        v5 = h.client(5)
        v5.connect("v5")
        v5.publish(CERTS + NBIRTH, b"planted", qos=1, retain=True)
        ack = v5.expect(C.PUBACK)
        self.assertEqual(ack.reason, C.RC_NOT_AUTHORIZED)
        v3 = h.client()
        v3.connect("v3")
        v3.publish(CERTS + NBIRTH, b"planted", qos=1, retain=True)
        v3.expect(C.PUBACK)  # 3.1.1 has no code to refuse it: acknowledged and dropped, counted
        late = h.client()
        late.connect("late")
        late.subscribe("$sparkplug/#")
        self.assertEqual(publishes(late), [])
        self.assertEqual(h.broker.snapshot()["refused_sparkplug"], 2)
        self.assertEqual(len([line for line in lines if "only the broker publishes under $sparkplug/certificates/" in line]), 1, lines)

    def test_malformed_topics_refused(self):
        h = aware()
        host = h.client()
        host.connect("host")
        host.subscribe("spBv1.0/#")
        node = h.client(5)
        node.connect("E1")
        for topic in ("spBv1.0//NBIRTH/E1", "spBv1.0/G1/NBIRTH/", "spBv1.0/G1/NBIRTH/E1/D1", "spBv1.0/G1/BIRTH/E1"):
            node.publish(topic, b"x", qos=1)
            self.assertEqual(node.expect(C.PUBACK).reason, C.RC_TOPIC_NAME_INVALID, topic)
        self.assertEqual(publishes(host), [])
        late = h.client()
        late.connect("late")
        late.subscribe("$sparkplug/#")
        self.assertEqual(publishes(late), [])
        self.assertEqual(h.broker.sparkplug.refused, 4)

    def test_certificate_needs_the_publishers_write_right(self):
        # Mosquitto's plugin writes the certificate for any client allowed its
        # NBIRTH (eclipse-mosquitto #3673, CWE-862); here the derived publish is
        # the publisher's and its ACL decides.
        acl = "pattern write spBv1.0/G1/+/%c\npattern write spBv1.0/G1/+/%c/#\nuser trusted\ntopic write $sparkplug/certificates/spBv1.0/G1/#\npattern read #\npattern read $sparkplug/#\n"
        h = aware(acl)
        lines = logged(h)
        host = h.client()
        host.connect("host")
        host.subscribe("spBv1.0/#")
        node = h.client(5)
        node.connect("E1")
        node.publish(NBIRTH, b"birth", qos=1)
        self.assertEqual(node.expect(C.PUBACK).reason, C.RC_SUCCESS)  # the birth itself is the client's to send
        self.assertEqual([p.payload for p in publishes(host)], [b"birth"])
        late = h.client()
        late.connect("late")
        self.assertEqual(late.subscribe("$sparkplug/#").reasons, [0])
        self.assertEqual(publishes(late), [])  # no certificate planted
        self.assertEqual(h.broker.stats.denied_publish, 1)
        refused = [line for line in lines if "certificate to $sparkplug/certificates/spBv1.0/G1/NBIRTH/E1 refused by the ACL" in line]
        self.assertEqual(len(refused), 1, lines)
        # A publisher that may write there gets its certificate.
        ok = h.client(5)
        ok.connect("E2", username="trusted", password=b"pw")
        ok.publish("spBv1.0/G1/NBIRTH/E2", b"birth-2", qos=1)
        got = publishes(late)
        self.assertEqual([(p.topic, p.payload) for p in got], [(CERTS + "spBv1.0/G1/NBIRTH/E2", b"birth-2")])

    def test_ndeath_will_stamped_when_sent(self):
        # [tck-id-conformance-mqtt-aware-ndeath-timestamp]: the timestamp of an
        # NDEATH it replaces is the UTC time it sends it at.
        h = aware()
        h.broker.wall_ms = lambda: NOW_MS
        host = h.client()
        host.connect("host")
        host.subscribe(NDEATH, qos=1)
        node = h.client()
        node.connect("E1", will=(NDEATH, NDEATH_1000, 1, False))
        node.drop()
        (death,) = publishes(host)
        self.assertEqual(death.payload, NDEATH_STAMPED)
        self.assertEqual(h.broker.sparkplug.stamped, 1)

    def test_ndeath_will_without_a_wall_clock_or_protobuf_goes_as_it_came(self):
        h = aware()
        lines = logged(h)
        host = h.client()
        host.connect("host")
        host.subscribe(NDEATH)
        node = h.client()
        node.connect("E1", will=(NDEATH, NDEATH_1000, 0, False))
        node.drop()
        self.assertEqual([p.payload for p in publishes(host)], [NDEATH_1000])
        h.broker.wall_ms = lambda: NOW_MS
        node = h.client()
        node.connect("E1", will=(NDEATH, b"\xff", 0, False))
        node.drop()
        self.assertEqual([p.payload for p in publishes(host)], [b"\xff"])
        self.assertEqual(len([line for line in lines if "not a Sparkplug protobuf" in line]), 1, lines)

    def test_wills_to_refused_topics_are_not_sent(self):
        h = aware()
        watcher = h.client()
        watcher.connect("w")
        watcher.subscribe("$sparkplug/#")
        watcher.subscribe("spBv1.0/#", packet_id=2)
        for topic in (CERTS + NBIRTH, "spBv1.0/G1/NDEATH/E1/extra"):
            node = h.client()
            node.connect("E1", will=(topic, b"x", 0, True))
            node.drop()
        self.assertEqual(publishes(watcher), [])
        self.assertEqual(h.broker.snapshot()["refused_sparkplug"], 2)


class TestEdgeNode(unittest.TestCase):
    """The gateway as its own edge node (spb_node.py), driven as the driver does."""

    def node(self, **settings):
        from common.broker.spb_node import EdgeNode

        h = Harness(sparkplug_group="Edge", sparkplug_node="gw1", **settings)
        h.broker.wall_ms = lambda: NOW_MS
        host = h.client()
        host.connect("host")
        host.subscribe("spBv1.0/Edge/#", qos=1)
        return h, host, EdgeNode(h.broker, h.broker.settings)

    def test_free_heap_and_bridge_backlogs(self):
        # After the $SYS figures: a board's free heap, then each running
        # bridge's backlog by its name; another set of bridges: a new birth.
        from common.broker.protobuf import UINT64, add_metric
        from common.broker.spb_node import METRICS

        def metric(alias, value):
            out = bytearray()
            add_metric(out, None, alias, UINT64, value)
            return bytes(out)

        h, host, edge = self.node(sparkplug_interval=5)
        free, cloud = len(METRICS) + 1, len(METRICS) + 2
        edge.tick(h.broker, h.now, None, 90000, [("cloud", 3)])
        h.pump()
        (birth,) = publishes(host)
        self.assertIn(b"Heap/Free Bytes", birth.payload)
        self.assertIn(b"Bridges/cloud/Queued", birth.payload)
        edge.tick(h.broker, h.now + 5, None, 80000, [("cloud", 7)])
        h.pump()
        (data,) = publishes(host)
        self.assertEqual(data.topic, "spBv1.0/Edge/NDATA/gw1")
        self.assertIn(metric(free, 80000), data.payload)
        self.assertIn(metric(cloud, 7), data.payload)
        edge.tick(h.broker, h.now + 10, None, 80000, [("cloud", 7), ("aws", 0)])  # a bridge added
        h.pump()
        (birth,) = publishes(host)
        self.assertEqual(birth.topic, "spBv1.0/Edge/NBIRTH/gw1")
        self.assertIn(b"Bridges/aws/Queued", birth.payload)
        self.assertTrue(birth.payload.endswith(b"\x18\x00"))  # seq 0 again

    def test_the_driver_hands_it_the_bridges_backlogs(self):
        from tests.core.test_bridge_runner import Edge

        e = Edge()
        self.assertEqual(e.driver.bridge_runners, [e.runner])
        conn = e.connect()
        conn.cut()
        e.turn()
        for i in range(4):  # the upstream away: queued
            e.publish("up/x", b"%d" % i)
        e.turn()
        self.assertEqual(e.runner.backlog(), 4)
        self.assertEqual(e.runner.status()["queued"], 4)
        e.runner.stop()
        self.assertEqual(e.driver.bridge_runners, [])

    def test_birth_data_death(self):
        h, host, edge = self.node(sparkplug_interval=5)
        edge.tick(h.broker, h.now, None)
        h.pump()
        (birth,) = publishes(host)
        self.assertEqual((birth.topic, birth.qos, birth.retain), ("spBv1.0/Edge/NBIRTH/gw1", 0, False))
        p = birth.payload
        self.assertTrue(p.startswith(EDGE_NDEATH[:-2]))  # timestamp, then bdSeq 0 (no store) ...
        self.assertEqual(p[len(EDGE_NDEATH) : len(EDGE_NDEATH) + len(REBIRTH_METRIC)], REBIRTH_METRIC)  # ... Rebirth
        self.assertIn(b"Clients/Connected", p)
        self.assertNotIn(b"Heap/Bytes", p)  # not measured: not in the birth
        self.assertTrue(p.endswith(b"\x18\x00"))  # seq 0
        edge.tick(h.broker, h.now + 4, None)  # not due yet
        h.pump()
        self.assertEqual(publishes(host), [])
        other = h.client()
        other.connect("other")  # Clients/Connected, /Sessions 1 -> 2; Messages/Sent (the birth) 0 -> 1
        edge.tick(h.broker, h.now + 5, None)
        h.pump()
        (data,) = publishes(host)
        self.assertEqual((data.topic, data.payload), ("spBv1.0/Edge/NDATA/gw1", EDGE_NDATA))
        edge.tick(h.broker, h.now + 10, None)  # only what changed: Messages/Sent (the NDATA), seq 2
        h.pump()
        (data,) = publishes(host)
        self.assertEqual(data.payload, EDGE_NDATA[:7] + bytes.fromhex("120610042008" "5802" "1802"))
        edge.death(h.broker, h.now + 11)
        h.pump()
        (death,) = publishes(host)
        self.assertEqual((death.topic, death.qos, death.payload), ("spBv1.0/Edge/NDEATH/gw1", 1, EDGE_NDEATH))

    def test_rebirth_on_ncmd(self):
        h, host, edge = self.node()
        b = h.broker
        edge.tick(b, h.now, None)
        h.pump()
        self.assertEqual([p.topic for p in publishes(host)], ["spBv1.0/Edge/NBIRTH/gw1"])
        self.assertFalse(edge.wants(b, h.now + 1))
        scada = h.client()
        scada.connect("scada")
        scada.publish("spBv1.0/Edge/NCMD/gw1", REBIRTH_METRIC, qos=1)  # false: nothing asked
        scada.publish("spBv1.0/Edge/NCMD/gw1", NCMD_OTHER_TRUE[:-1] + b"\x00", qos=1)  # only "Other" true
        self.assertFalse(edge.wants(b, h.now + 1))
        scada.publish("spBv1.0/Edge/NCMD/gw1", NCMD_OTHER_TRUE, qos=1)
        self.assertTrue(edge.wants(b, h.now + 1))
        edge.tick(b, h.now + 1, None)
        h.pump()
        got = publishes(host)
        self.assertEqual([p.topic for p in got][-1], "spBv1.0/Edge/NBIRTH/gw1")  # (after the NCMDs it saw)
        self.assertTrue(got[-1].payload.endswith(b"\x18\x00"))  # seq 0 again
        self.assertFalse(edge.wants(b, h.now + 1))

    def test_ids_checked(self):
        from common.broker.limits import ConfigError
        from common.broker.spb_node import EdgeNode

        for group, node in (("a/b", "n"), ("g", ""), ("g", "n+"), ("#", "n")):
            h = Harness(sparkplug_group=group, sparkplug_node=node)
            with self.assertRaises(ConfigError):
                EdgeNode(h.broker, h.broker.settings)


class TestBridgeHold(unittest.TestCase):
    """A bridge with sparkplug_host: what goes up waits while the primary
    host application's STATE upstream is not online (common/bridge/bridge.py)."""

    def pair(self):
        from tests.core.test_bridge import Pair, rule

        p = Pair(rules=[rule("out", "spBv1.0/#")], sparkplug_host="scada", protocol=5)
        p.connect_up()
        host = p.cloud.client(5)
        host.connect("scada-host")
        host.subscribe("spBv1.0/Plant1/#", 1)
        return p, host

    def state(self, p, online):
        scada = p.cloud.client(5)
        scada.connect("scada")
        scada.publish("spBv1.0/STATE/scada", b'{"online": %s, "timestamp": 5}' % (b"true" if online else b"false"), 1, retain=True)
        scada.disconnect()
        p.settle()

    def data(self, p, first, n):
        self.assertEqual(publish_acked_dev(p.edge, first, n), n)  # acknowledged here: queued, kept
        p.settle()

    def test_held_until_the_host_is_online_then_in_order(self):
        from tests.core.test_bridge import payloads

        p, host = self.pair()
        session = p.edge.broker.sessions.find("siskin-bridge-cloud")
        self.data(p, 0, 5)  # no STATE yet: held
        self.assertEqual(payloads(host), [])
        self.assertEqual(session.queue.count, 5)
        self.assertIsNone(session.conn)
        self.state(p, False)
        self.data(p, 5, 3)
        self.assertEqual(payloads(host), [])
        self.assertEqual(session.queue.count, 8)
        self.state(p, True)  # online: everything, in order
        self.assertEqual(payloads(host), [b"%d" % i for i in range(8)])
        self.assertEqual(session.queue.count, 0)
        self.data(p, 8, 2)  # online: straight through
        self.assertEqual(payloads(host), [b"8", b"9"])
        self.state(p, False)
        self.data(p, 10, 2)
        self.assertEqual(payloads(host), [])
        self.assertTrue(any("primary host scada offline" in line for line in p.logged), p.logged)
        self.state(p, True)
        self.assertEqual(payloads(host), [b"10", b"11"])
        self.assertEqual(p.bridge.sent, 12)

    def test_a_new_upstream_connection_waits_for_the_state_again(self):
        from tests.core.test_bridge import payloads

        p, host = self.pair()
        self.state(p, True)
        self.data(p, 0, 2)
        self.assertEqual(payloads(host), [b"0", b"1"])
        p.drop_up()
        self.data(p, 2, 3)
        p.connect_up()  # the retained STATE (online) comes with the subscription: then the queue
        self.assertEqual(payloads(host), [b"2", b"3", b"4"])
        self.assertTrue(p.bridge.host_online)

    def test_what_the_start_up_connection_hands_over_waits_too(self):
        # After a restart the local session comes online once (to resume its
        # subscriptions) and hands the bridge a window of what it queued:
        # that too waits in the bridge for the host's STATE.
        from tests.core.memkv import MemKV
        from tests.core.test_bridge import Pair, payloads, rule
        from tests.core.test_persist import open_store, restart

        backend = MemKV()
        rules = [rule("out", "spBv1.0/#")]
        p = Pair(rules=rules, edge=Harness(store=open_store(backend)), sparkplug_host="scada", protocol=5, window=4)
        self.data(p, 0, 6)  # never connected upstream: queued
        edge2, _ = restart(backend)
        p2 = Pair(rules=rules, edge=edge2, cloud=p.cloud, sparkplug_host="scada", protocol=5, window=4)
        self.assertEqual(len(p2.bridge.up.queue), 4)  # the start-up connection's window, in the bridge
        host = p2.cloud.client(5)
        host.connect("scada-host")
        host.subscribe("spBv1.0/Plant1/#", 1)
        p2.connect_up()
        self.assertEqual(payloads(host), [])  # connected upstream, the host not online: nothing
        self.state(p2, True)
        self.assertEqual(payloads(host), [b"%d" % i for i in range(6)])

    def test_qos0_births_need_queue_qos0_offline(self):
        # Held, the bridge's session is offline: a QoS 0 NBIRTH is queued only
        # with queue_qos0_offline (else dropped, counted, and said at start).
        from tests.core.test_bridge import payloads
        from tests.core.test_bridge_runner import Edge

        for queue in (True, False):
            p, host, node = spb_pair(queue, sparkplug_host="scada")
            node.publish("spBv1.0/Plant1/NBIRTH/press-7", b"birth", 0)
            p.settle()
            self.data(p, 0, 2)
            self.state(p, True)
            self.assertEqual(payloads(host), ([b"birth"] if queue else []) + [b"0", b"1"])
            self.assertEqual(p.edge.broker.stats.dropped_qos0, 0 if queue else 1)
        edge = Edge(sparkplug_host="scada")
        self.assertTrue(any("set [limits] queue_qos0_offline = true" in text for _level, text in edge.logged), edge.logged)


class TestBirthsFirst(unittest.TestCase):
    """A bridge with sparkplug_births: whenever it starts sending on an
    upstream connection, the births that went up go again first, so no
    DATA reaches the host before its node's birth (common/bridge/births.py)."""

    def pair(self, births=8, **table):
        return spb_pair(True, sparkplug_births=births, **table)

    def send(self, p, node, *messages):
        for kind, payload in messages:
            qos = 1 if "DATA" in kind else 0  # (DATA at QoS 1: acknowledged here, so queued, never lost)
            topic = "spBv1.0/Plant1/%s/press-7" % kind.split(":")[0] + ("/" + kind.split(":")[1] if ":" in kind else "")
            node.publish(topic, payload, qos, packet_id=1 if qos else 0)
            node.take()
        p.settle()

    def cut(self, p):
        p.drop_up()
        p.settle()  # the local session offline: what comes now is queued (QoS 0 too)

    def got(self, host):
        from tests.core.test_bridge import payloads

        return payloads(host)

    def test_births_first_on_every_reconnect(self):
        p, host, node = self.pair()
        self.send(p, node, ("NBIRTH", b"nb1"), ("DBIRTH:d1", b"db1"), ("DBIRTH:d2", b"db2"), ("NDATA", b"nd"))
        self.assertEqual(self.got(host), [b"nb1", b"db1", b"db2", b"nd"])
        for i in range(3):
            self.cut(p)
            self.send(p, node, ("DDATA:d1", b"dd%d" % i), ("NDATA", b"nd%d" % i))
            p.connect_up()  # NBIRTH, then the DBIRTHs in order, then what was queued
            self.assertEqual(self.got(host), [b"nb1", b"db1", b"db2", b"dd%d" % i, b"nd%d" % i])
        self.assertTrue(any("3 birth(s) sent again" in line for line in p.logged), p.logged)

    def test_queued_data_keeps_the_birth_it_was_sent_under(self):
        # Queued: DATA of the old birth, then a new birth and its DATA. The
        # old birth goes first (its aliases are the queued DATA's), then the
        # queue in order: never the newer birth before the older DATA.
        p, host, node = self.pair()
        self.send(p, node, ("NBIRTH", b"nb1"), ("DBIRTH:d1", b"db1"))
        self.got(host)
        self.cut(p)
        self.send(p, node, ("NDATA", b"old"), ("NBIRTH", b"nb2"), ("NDATA", b"new"))
        p.connect_up()
        self.assertEqual(self.got(host), [b"nb1", b"db1", b"old", b"nb2", b"new"])
        self.cut(p)
        p.connect_up()  # the new birth now; d1 was not born again after it
        self.assertEqual(self.got(host), [b"nb2"])
        self.assertEqual(p.bridge.births.kept, 1)

    def test_deaths_forget(self):
        p, host, node = self.pair()
        self.send(p, node, ("NBIRTH", b"nb1"), ("DBIRTH:d1", b"db1"), ("DBIRTH:d2", b"db2"), ("DDEATH:d1", b"dd"))
        self.got(host)
        self.cut(p)
        p.connect_up()
        self.assertEqual(self.got(host), [b"nb1", b"db2"])
        self.send(p, node, ("NDEATH", b"nd"))
        self.got(host)
        self.cut(p)
        p.connect_up()  # a dead node is not announced alive again
        self.assertEqual(self.got(host), [])
        self.assertEqual(p.bridge.births.kept, 0)

    def test_bounded(self):
        p, host, node = self.pair(births=2)
        other = p.edge.client(4)
        other.connect("press-8")
        self.send(p, node, ("NBIRTH", b"nb1"), ("DBIRTH:d1", b"db1"), ("DBIRTH:d2", b"db2"))
        other.publish("spBv1.0/Plant1/NBIRTH/press-8", b"nb8", 0)
        p.settle()
        self.assertEqual(self.got(host), [b"nb1", b"db1", b"db2", b"nb8"])  # each goes up as it comes
        self.cut(p)
        p.connect_up()
        self.assertEqual(self.got(host), [b"nb1", b"db1"])  # two kept
        self.assertEqual(p.bridge.births.unkept, 2)
        self.assertIn(("$SYS/broker/bridge/cloud/births_unkept", "2"), p.bridge.sys_values(0, 0, 0))
        self.assertTrue(any("birth spBv1.0/Plant1/NBIRTH/press-8 not kept (2 so far)" in line for line in p.logged), p.logged)

    def test_with_the_hold_births_go_when_the_host_is_online(self):
        p, host, node = self.pair(sparkplug_host="scada")
        TestBridgeHold.state(self, p, True)
        self.send(p, node, ("NBIRTH", b"nb1"), ("NDATA", b"a"))
        self.assertEqual(self.got(host), [b"nb1", b"a"])
        TestBridgeHold.state(self, p, False)
        self.send(p, node, ("NDATA", b"b"))
        self.assertEqual(self.got(host), [])
        TestBridgeHold.state(self, p, True)
        self.assertEqual(self.got(host), [b"nb1", b"b"])
        self.cut(p)
        self.send(p, node, ("NDATA", b"c"))
        p.connect_up()  # the retained STATE says online: births, then the queue
        self.assertEqual(self.got(host), [b"nb1", b"c"])

    def test_off_by_default(self):
        from tests.core.test_bridge import bridge_settings

        self.assertEqual(bridge_settings().sparkplug_births, 0)
        p, host, node = self.pair(births=0)
        self.assertIsNone(p.bridge.births)
        self.send(p, node, ("NBIRTH", b"nb1"), ("NDATA", b"a"))
        self.got(host)
        self.cut(p)
        self.send(p, node, ("NDATA", b"b"))
        p.connect_up()
        self.assertEqual(self.got(host), [b"b"])


def spb_pair(queue_qos0_offline, **table):
    """A bridge (v5, spBv1.0/# out; `table`: more [[bridge]] keys) connected
    upstream, a host application there subscribed to spBv1.0/Plant1/#, and
    edge node press-7 connected here: (Pair, host, node)."""
    from tests.core.test_bridge import Pair, rule

    p = Pair(rules=[rule("out", "spBv1.0/#")], edge=Harness(queue_qos0_offline=queue_qos0_offline), protocol=5, **table)
    p.connect_up()
    host = p.cloud.client(5)
    host.connect("scada-host")
    host.subscribe("spBv1.0/Plant1/#", 1)
    node = p.edge.client(4)
    node.connect("press-7")
    return p, host, node

def publish_acked_dev(h, first, n):
    """`n` NDATA (QoS 1) of an edge node of harness `h`; how many it got an ack for."""
    dev = h.client(4)
    dev.connect("press-7")
    acked = 0
    for i in range(first, first + n):
        dev.publish("spBv1.0/Plant1/NDATA/press-7", b"%d" % i, 1, packet_id=i + 1)
        acked += len([x for x in dev.take() if x.ptype == C.PUBACK])
    dev.disconnect()
    return acked


if __name__ == "__main__":
    unittest.main()
