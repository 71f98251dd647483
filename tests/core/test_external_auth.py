# Logins an outside service decides (common/broker/external_auth.py, the
# core's side of the host's HTTP auth hook), on both interpreters: a CONNECT
# waits for the answer, then is accepted (with the answer's rules added to
# the file ACL) or refused (0x86/0x04; offline 0x88/0x03); the offline
# decisions counted; late answers dropped; a second CONNECT or an AUTH while
# it waits. The host's side, over HTTP: tests/host/test_http_auth.py.

import unittest

from common.broker import security_files
from common.broker.acl import Acl
from common.broker.external_auth import ExternalAuth
from common.mqtt import consts as C
from common.mqtt.packets import Auth, Subscribe, encode_packet
from tests.core.harness import Harness


class Service:
    """The shell's side: records each question; answers now when told."""

    def __init__(self, now=None):
        self.asked = []
        self.now = now  # a verdict to give at once (a cache hit), or None

    def __call__(self, cid, serial, user, password, client_id, address):
        self.asked.append((cid, serial, user, password, client_id, address))
        return self.now


def hooked(acl=None, now=None):
    h = Harness()
    service = Service(now)
    h.broker.hook = ExternalAuth(service)
    security_files.set_security(h.broker, None, Acl.parse(acl, "acl") if acl is not None else None, False, h.now)
    return h, service


def answer(h, service, verdict, i=-1):
    cid, serial = service.asked[i][0], service.asked[i][1]
    done = h.broker.hook.answer(h.broker, cid, serial, verdict, h.now)
    h.pump()
    return done


ALLOW = (True, None, "200", False)


class TestExternalAuth(unittest.TestCase):
    def test_waits_then_allowed(self):
        h, service = hooked()
        for level in (4, 5):
            c = h.client(level, peer=("192.0.2.7:5000", None, False))
            self.assertIsNone(c.connect("dev%d" % level, username="alice", password=b"pw"))  # no CONNACK yet
            self.assertEqual(service.asked[-1][2:], ("alice", b"pw", "dev%d" % level, "192.0.2.7"))
            self.assertTrue(answer(h, service, ALLOW))
            self.assertEqual(c.expect(C.CONNACK).reason, 0)
            self.assertEqual(h.broker.connections.by_id[c.cid].user, "alice")
            self.assertEqual(h.broker.sessions.find("dev%d" % level).user, "alice")

    def test_refused(self):
        h, service = hooked()
        for level, code in ((4, C.CONNACK_REFUSED_BAD_USERNAME_PASSWORD), (5, C.RC_BAD_USER_NAME_OR_PASSWORD)):
            c = h.client(level)
            c.connect("d", username="mallory", password=b"x")
            answer(h, service, (False, None, "HTTP 403", False))
            self.assertEqual(c.expect(C.CONNACK).reason, code)
            self.assertTrue(c.closed)
        self.assertEqual(h.broker.stats.login_failed, 2)

    def test_offline_decisions_are_counted(self):
        h, service = hooked()
        lines = []
        h.broker.set_logger(lambda level, text: lines.append(text))
        c = h.client(5)
        c.connect("known", username="alice", password=b"pw")
        answer(h, service, (True, None, "timed out after 2 s", True))
        self.assertEqual(c.expect(C.CONNACK).reason, 0)
        for level, code in ((5, C.RC_SERVER_UNAVAILABLE), (4, C.CONNACK_REFUSED_SERVER_UNAVAILABLE)):
            d = h.client(level)
            d.connect("unknown", username="eve", password=b"pw")
            answer(h, service, (False, None, "connection refused", True))
            self.assertEqual(d.expect(C.CONNACK).reason, code)
        st = h.broker.stats
        self.assertEqual((st.auth_offline_allowed, st.auth_offline_refused, st.login_failed), (1, 2, 0))
        self.assertTrue([x for x in lines if "let in on a cached allow" in x and "alice" in x])
        self.assertTrue([x for x in lines if "has no cached allow" in x and "eve" in x])

    def test_cached_answer_at_once(self):
        h, _service = hooked(now=ALLOW)
        c = h.client(5)
        self.assertEqual(c.connect("d", username="alice", password=b"pw").reason, 0)

    def test_rules_of_the_answer_with_the_file_acl(self):
        h, service = hooked(acl="user alice\ntopic read shared/#\ntopic deny shared/secret\n")
        c = h.client(5)
        c.connect("dev1", username="alice", password=b"pw")
        answer(h, service, (True, (["devices/%c/out"], ["shared/#", "cmd/%u"]), "200", False))
        c.expect(C.CONNACK)
        rules = h.broker.connections.by_id[c.cid].acl
        self.assertTrue(rules.can_write("devices/dev1/out"))
        self.assertFalse(rules.can_write("devices/dev2/out"))
        self.assertTrue(rules.can_read("cmd/alice"))
        self.assertFalse(rules.can_read("shared/secret"))  # the file's deny wins
        # The id reused by a client the hook gives no rules: none of the old ones.
        c.disconnect()
        h.pump()
        d = h.client(5)
        self.assertEqual(d.cid, c.cid)
        d.connect("dev1", username="alice", password=b"pw")
        answer(h, service, ALLOW)
        self.assertFalse(h.broker.connections.by_id[d.cid].acl.can_write("devices/dev1/out"))

    def test_late_answer_is_dropped(self):
        h, service = hooked()
        c = h.client(5)
        c.connect("d", username="alice", password=b"pw")
        c.drop()
        self.assertFalse(answer(h, service, ALLOW))
        # Its id reused by a new connection that has not sent CONNECT yet.
        d = h.client(5)
        self.assertEqual(d.cid, c.cid)
        h.broker.hook.waiting[d.cid] = service.asked[-1][1]  # (as if the old question still waited)
        self.assertFalse(answer(h, service, ALLOW))
        self.assertEqual(d.take(), [])

    def test_no_user_name_is_not_asked(self):
        h, service = hooked()
        c = h.client(5)
        self.assertEqual(c.connect("anon").reason, C.RC_NOT_AUTHORIZED)  # allow_anonymous false
        self.assertEqual(service.asked, [])

    def test_second_connect_while_waiting_closes(self):
        h, service = hooked()
        c = h.client(5)
        c.connect("d", username="alice", password=b"pw")
        c.connect("d", username="alice", password=b"pw")
        self.assertTrue(c.closed)  # [MQTT-3.1.0-2]
        self.assertFalse(answer(h, service, ALLOW, 0))

    def test_auth_while_waiting_is_a_protocol_error(self):
        h, _service = hooked()
        c = h.client(5)
        c.connect("d", username="alice", password=b"pw")
        c.send(Auth(C.RC_CONTINUE_AUTHENTICATION, None))
        self.assertEqual(c.expect(C.CONNACK).reason, C.RC_PROTOCOL_ERROR)  # [MQTT-4.12.0-1]
        self.assertTrue(c.closed)


class TopicService:
    """ask_topic's side: verdicts known now (the shell's cache), or asked."""

    def __init__(self):
        self.known = {}  # (write, topic) -> allowed
        self.asked = []

    def __call__(self, cid, user, client_id, write, topic):
        verdict = self.known.get((write, topic))
        if verdict is None:
            self.asked.append((cid, user, client_id, write, topic))
        return verdict


def release(h):
    # What the driver does at a throttle change: read the released clients again.
    h.broker.take_throttle_changes()
    for cid in list(h.clients):
        c = h.clients[cid]
        if not c.closed and cid not in h.broker.throttled:
            h.broker.data_received(cid, b"", h.now)
    h.pump()


class TestTopicChecks(unittest.TestCase):
    # Each PUBLISH and SUBSCRIBE judged by the service (ask_topic set): a
    # packet whose verdict is not known waits in its client's reader, the
    # client held back, while other clients are served.
    def rig(self):
        h, _service = hooked(now=ALLOW)
        topics = TopicService()
        h.broker.hook.ask_topic = topics
        sub = h.client(5)
        sub.connect("sub", username="bob", password=b"pw")
        topics.known[(False, "#")] = True
        self.assertEqual(sub.subscribe("#").reasons, [0])
        pub = h.client(5)
        pub.connect("pub", username="alice", password=b"pw")
        return h, topics, sub, pub

    def test_a_publish_waits_for_its_verdict_then_goes(self):
        h, topics, sub, pub = self.rig()
        pub.publish("a/b", b"1", 1, packet_id=1)
        self.assertEqual(topics.asked[-1][1:], ("alice", "pub", True, "a/b"))
        self.assertIn(pub.cid, h.broker.throttled)  # held back: nothing handled yet
        self.assertEqual(pub.take(), [])
        self.assertEqual(h.broker.stats.messages_received, 0)
        # Meanwhile another client is served (its topic known).
        other = h.client(5)
        other.connect("other", username="carol", password=b"pw")
        topics.known[(True, "c/d")] = True
        other.publish("c/d", b"x", 0)
        self.assertEqual([m.topic for m in sub.take() if m.ptype == C.PUBLISH], ["c/d"])
        topics.known[(True, "a/b")] = True
        h.broker.hook.topic_answered(h.broker, pub.cid)
        release(h)
        self.assertEqual(pub.expect(C.PUBACK).reason, 0)
        self.assertEqual([m.payload for m in sub.take() if m.ptype == C.PUBLISH], [b"1"])
        self.assertEqual(len([a for a in topics.asked if a[4] == "a/b"]), 1)
        self.assertEqual(h.broker.stats.messages_received, 2)  # (counted once)

    def test_refused_publish_and_filter(self):
        h, topics, sub, pub = self.rig()
        topics.known[(True, "x")] = False
        pub.publish("x", b"1", 1, packet_id=1)
        self.assertEqual(pub.expect(C.PUBACK).reason, C.RC_NOT_AUTHORIZED)
        topics.known[(False, "ok/#")] = True
        topics.known[(False, "no/#")] = False
        h.broker.data_received(pub.cid, encode_packet(Subscribe(2, [("ok/#", 0), ("no/#", 0)], None), 5), h.now)
        h.pump()
        self.assertEqual(pub.expect(C.SUBACK).reasons, [0, C.RC_NOT_AUTHORIZED])
        self.assertEqual(h.broker.stats.denied_publish, 1)
        self.assertEqual(h.broker.stats.denied_subscribe, 1)
        self.assertEqual([m for m in sub.take() if m.ptype == C.PUBLISH], [])

    def test_a_topic_alias_is_judged_by_its_topic(self):
        _h, topics, sub, pub = self.rig()
        topics.known[(True, "t/1")] = True
        pub.publish("t/1", b"a", 0, props=[(C.PROP_TOPIC_ALIAS, 3)])
        topics.known[(True, "t/1")] = False  # (changed: the alias-only PUBLISH is judged as t/1)
        pub.publish("", b"b", 1, packet_id=5, props=[(C.PROP_TOPIC_ALIAS, 3)])
        self.assertEqual(pub.expect(C.PUBACK).reason, C.RC_NOT_AUTHORIZED)
        self.assertEqual([m.payload for m in sub.take() if m.ptype == C.PUBLISH], [b"a"])

    def test_a_late_answer_for_a_closed_connection_releases_nothing(self):
        h, _topics, _sub, pub = self.rig()
        pub.publish("a/b", b"1", 0)
        self.assertIn(pub.cid, h.broker.throttled)
        pub.drop()
        again = h.client(5)
        self.assertEqual(again.cid, pub.cid)
        h.broker.throttled.append(again.cid)  # (held for another reason)
        h.broker.hook.topic_answered(h.broker, again.cid)
        self.assertIn(again.cid, h.broker.throttled)

    def test_off_without_ask_topic(self):
        h, _service = hooked(now=ALLOW)
        c = h.client(5)
        c.connect("c", username="alice", password=b"pw")
        c.publish("a", b"1", 1, packet_id=1)
        self.assertEqual(c.expect(C.PUBACK).reason, 0x10)  # No matching subscribers: not refused
