# Per-listener security and mount points in the core
# (common/broker/listener_policy.py, login.security_of): the shell names a
# connection's listener by the peer tuple's 4th item. Runs on CPython and
# MicroPython. The host's side with real clients:
# tests/host/test_listener_security.py.

import unittest

from common.broker import security_files
from common.broker.acl import Acl
from common.broker.listener_policy import ListenerPolicy, mount_filter
from common.broker.users import Users
from common.mqtt import consts as C
from tests.core.harness import Harness
from tests.core.test_security import user_line

OPEN = ("127.0.0.1:40000", None, True, 0)  # listener 0: the broker's security
SECURE = ("127.0.0.1:40001", None, True, 1)  # listener 1: its own
MOUNTED = ("127.0.0.1:40002", None, True, 2)  # listener 2: a mount point only


def with_policies():
    h = Harness()
    users = Users.parse(user_line("alice", "wonderland"), "passwd")
    acl = Acl.parse("user alice\ntopic readwrite home/#\n", "acl")
    policies = {
        1: ListenerPolicy(True, users, acl, False),
        2: ListenerPolicy(False, mount="site1/"),
    }
    security_files.set_security(h.broker, None, None, True, h.now, policies)
    return h


class TestListenerSecurity(unittest.TestCase):
    def test_each_listener_its_own_users_and_anonymous_switch(self):
        h = with_policies()
        self.assertEqual(h.client(peer=OPEN).connect("anon").reason, C.CONNACK_ACCEPTED)
        self.assertEqual(h.client(peer=SECURE).connect("anon2").reason, C.CONNACK_REFUSED_NOT_AUTHORIZED)
        ok = h.client(peer=SECURE).connect("a1", username="alice", password=b"wonderland")
        self.assertEqual(ok.reason, C.CONNACK_ACCEPTED)
        # The broker's security has no users: a user name is not believed there, the client is anonymous.
        self.assertEqual(h.client(peer=OPEN).connect("a2", username="alice", password=b"x").reason, C.CONNACK_ACCEPTED)

    def test_the_listeners_acl_binds_its_clients_only(self):
        h = with_policies()
        alice = h.client(peer=SECURE)
        alice.connect("alice", username="alice", password=b"wonderland")
        self.assertEqual(alice.subscribe("other/#").reasons, [C.SUBACK_FAILURE_311])  # [MQTT-3.9.3-1]
        anon = h.client(peer=OPEN)
        anon.connect("anon")
        self.assertEqual(anon.subscribe("other/#").reasons, [0])


class TestMountPoint(unittest.TestCase):
    def test_topics_in_and_out_under_the_prefix(self):
        h = with_policies()
        outside = h.client(peer=OPEN)
        outside.connect("outside")
        outside.publish("site1/room/temp", b"21", retain=True)
        outside.subscribe("site1/#")
        outside.expect(C.PUBLISH)  # (its own retained message)
        inside = h.client(5, peer=MOUNTED)
        inside.connect("inside")
        inside.subscribe("room/+")
        retained = inside.expect(C.PUBLISH)
        self.assertEqual((retained.topic, retained.retain), ("room/temp", True))  # [MQTT-3.3.2-3]
        inside.publish("room/hum", b"40")
        self.assertEqual(outside.expect(C.PUBLISH).topic, "site1/room/hum")
        self.assertEqual(inside.expect(C.PUBLISH).topic, "room/hum")
        outside.publish("room/hum", b"outside the prefix")  # (3.1.1 QoS 0: the forwarded-frame path)
        outside.publish("site1/room/co2", b"400")
        self.assertEqual(inside.expect(C.PUBLISH).topic, "room/co2")
        self.assertEqual(inside.inbox, [])
        self.assertEqual(inside.unsubscribe("room/+").reasons, [C.RC_SUCCESS])

    def test_a_forwarded_qos0_frame_is_not_sent_under_the_prefix(self):
        # 3.1.1 QoS 0 goes to 3.1.1 subscribers as the publisher's frame
        # (route_frame), except to a mounted one: it gets its own topic [MQTT-3.3.2-3].
        h = with_policies()
        inside = h.client(peer=MOUNTED)
        inside.connect("inside311")
        inside.subscribe("room/+")
        outside = h.client(peer=OPEN)
        outside.connect("outside311")
        outside.publish("site1/room/x", b"1")
        self.assertEqual(inside.expect(C.PUBLISH).topic, "room/x")
        # ...nor from a mounted publisher: the others get the whole topic.
        outside.subscribe("site1/#")
        inside.publish("room/y", b"2")
        self.assertEqual(outside.expect(C.PUBLISH).topic, "site1/room/y")

    def test_shared_filters_keep_their_share_name_in_front(self):
        self.assertEqual(mount_filter("m/", "$share/g/a/#"), "$share/g/m/a/#")
        self.assertEqual(mount_filter("m/", "a/+"), "m/a/+")
        self.assertEqual(mount_filter("m/", "$SYS/#"), "m/$SYS/#")


if __name__ == "__main__":
    unittest.main()
