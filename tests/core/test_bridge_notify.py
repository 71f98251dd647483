# A bridge's notifications (Mosquitto's `notifications`, common/bridge/notify.py):
# the link's state as a retained "1" / "0", upstream (with a will for a cut
# link) and here, driven through the Runner against a cloud harness.

import unittest

from common.broker.settings import ConfigError
from common.mqtt import consts as C
from tests.core.test_bridge import bridge_settings
from tests.core.test_bridge_runner import Edge

# Siskin, the cloud here, takes no client's PUBLISH or will under $SYS/
# (Mosquitto does: tests/host/test_bridge_notify.py): a topic of its own.
TOPIC = "gw/link"
DEFAULT = "$SYS/broker/connection/gw-7/state"


def retained_upstream(e, flt=TOPIC):
    """(payload, retain flag) of what a new subscriber upstream gets at once."""
    c = e.cloud.client(4)
    c.connect("peek")
    c.subscribe(flt, 1)
    got = [(p.payload, p.retain) for p in c.take() if p.ptype == C.PUBLISH]
    c.disconnect()
    return got


def here(e, topic=TOPIC):
    msg = e.broker.routing.retained.current(topic, e.driver.now)
    return None if msg is None else bytes(msg.payload)


class TestNotifications(unittest.TestCase):
    def test_1_on_connect_and_the_upstream_says_0_when_the_link_is_cut(self):
        e = Edge(notifications=True, client_id="gw-7", notification_topic=TOPIC)
        watcher = e.cloud.client(4)
        watcher.connect("watcher")
        watcher.subscribe(TOPIC, 1)
        conn = e.connect()
        self.assertEqual(retained_upstream(e), [(b"1", True)])
        self.assertEqual(here(e), b"1")
        conn.cut()  # no DISCONNECT: the upstream publishes the bridge's will
        e.settle()
        live = [p.payload for p in watcher.take() if p.ptype == C.PUBLISH]
        self.assertEqual(live, [b"1", b"0"])
        self.assertEqual(retained_upstream(e), [(b"0", True)])
        self.assertEqual(here(e), b"0")

    def test_a_clean_stop_says_0_upstream_and_here(self):
        e = Edge(notifications=True, client_id="gw-7", notification_topic=TOPIC)
        e.connect()
        self.assertEqual(retained_upstream(e), [(b"1", True)])
        e.runner.stop()
        e.cloud.pump()
        self.assertEqual(retained_upstream(e), [(b"0", True)])
        self.assertEqual(here(e), b"0")

    def test_local_only_and_off(self):
        # Here only, on Mosquitto's default topic (a will there would be refused by this cloud).
        e = Edge(notifications=True, notifications_local_only=True, client_id="gw-7")
        e.connect()
        self.assertIsNone(e.runner.bridge.up.will)
        self.assertEqual(e.runner.bridge.state_name(), "connected")
        self.assertEqual(here(e, DEFAULT), b"1")
        e = Edge(client_id="gw-7", notification_topic=TOPIC)
        e.connect()
        self.assertEqual((retained_upstream(e), here(e), here(e, DEFAULT)), ([], None, None))

    def test_a_topic_with_a_wildcard_is_refused(self):
        with self.assertRaises(ConfigError):
            bridge_settings(notifications=True, notification_topic="gw/+/state")

    def test_an_upstream_that_would_refuse_them_is_said_at_start(self):
        aws = dict(profile="aws", certfile="c.pem", keyfile="k.pem", notifications=True)
        with self.assertRaises(ConfigError) as e:
            bridge_settings(**aws)  # $SYS/broker/connection/...: AWS IoT takes no "$" topic but its own
        self.assertIn("notifications upstream: aws takes no topic starting with $", str(e.exception))
        bridge_settings(notification_topic="gw/link", **aws)  # one it takes
        bridge_settings(notifications_local_only=True, **aws)  # or here only


if __name__ == "__main__":
    unittest.main()
