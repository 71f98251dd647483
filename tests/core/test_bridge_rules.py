# Topic rewriting (common/bridge/rules.py), the rule checks and the loop
# refusal (settings.py), the cloud profiles (profiles.py): what AWS IoT
# Core and Azure IoT Hub would refuse is dead-lettered before it is sent,
# Azure's SAS token and its renewal. Between two sans-I/O brokers where a
# flow is needed (tests/core/test_bridge.py's Pair). Runs on CPython and
# MicroPython.

import unittest

from common.bridge.profiles import profile_named, sas_token, url_quote
from common.bridge.rules import Rule, acl_grants, local_filter
from common.bridge.settings import parse_bridges
from common.broker.acl import READ, WRITE
from common.broker.settings import ConfigError
from common.client.client import CONNECTED
from tests.core.test_bridge import Pair, publish_acked

OK = {"name": "c", "addresses": ["h:1883"]}


def parsed(topic, **table):
    body = dict(OK, topic=topic)
    body.update(table)
    return parse_bridges("t.toml", [body])[0]


def refused(topic, **table):
    try:
        parsed(topic, **table)
    except ConfigError as e:
        return str(e)
    raise AssertionError("accepted: %r %r" % (topic, table))


class TestRewriting(unittest.TestCase):
    def test_wildcard_captures_many_to_one_and_both_ways(self):
        r = Rule("out", "sensors/+/temp", "site1/{1}/temperature")
        self.assertEqual(r.out_topic("sensors/k1/temp"), "site1/k1/temperature")
        self.assertIsNone(r.out_topic("sensors/k1/hum"))
        self.assertIsNone(r.in_topic("site1/k1/temperature"))  # an "out" rule brings nothing down
        flat = Rule("out", "sensors/#", "site1/all")
        self.assertEqual([flat.out_topic(t) for t in ("sensors/a/b", "sensors")], ["site1/all", "site1/all"])
        swap = Rule("out", "s/+/#", "site/{2}/v/{1}")
        self.assertEqual(swap.out_topic("s/k/a/b"), "site/a/b/v/k")
        self.assertEqual(swap.out_topic("s/k"), "site/v/k")  # "#" matched no level: its level goes
        self.assertEqual(Rule("out", "a/+/b", "x/{1}").out_topic("a//b"), "x/")  # an empty "+" level stays
        self.assertEqual(Rule("out", "a/+", "x/pre-{1}-post").out_topic("a/q"), "x/pre-q-post")
        down = Rule("in", "cmd/{1}", "cmd/edge1/#")
        self.assertEqual(down.in_topic("cmd/edge1/x/y"), "cmd/x/y")
        both = Rule("both", "x/+/#", "y/+/#")
        self.assertEqual((both.out_topic("x/a/b/c"), both.in_topic("y/q/r")), ("y/a/b/c", "x/q/r"))
        # [MQTT-4.7.2-1] a filter starting with a wildcard matches no "$" topic.
        self.assertIsNone(Rule("out", "#", "x/{1}").out_topic("$SYS/a"))
        self.assertEqual(Rule("out", "$SYS/#", "x/{1}").out_topic("$SYS/a"), "x/a")

    def test_rules_are_checked_at_start(self):
        for topic, words in (
            ({"local": "a/+", "remote": "x/{2}"}, "names {2} but 'a/+' has 1 wildcard"),
            ({"local": "a/+", "remote": "x/{1}", "direction": "both"}, 'a "both" rule maps each way'),
            ({"local": "a/#", "remote": "x/pre{1}"}, "must be a whole level"),
            ({"local": "a/+", "remote": "x/#"}, "do not have the same wildcards"),
            ({"local": "a/+", "remote": "x/{z}"}, "a placeholder is {n}"),
            ({"local": "a/#/b", "remote": "x"}, "not a valid topic filter"),
            ({"local": "a/+"}, "local and remote go together"),
            ({"local": "a/+", "remote": "x/{1}", "pattern": "#"}, "pattern belongs to the prefix form"),
        ):
            self.assertIn(words, refused([topic]), topic)

    def test_a_rule_that_can_loop_is_refused(self):
        # No No Local upstream (3.1.1 without the bridge bit): what goes up
        # to a topic an "in" filter matches would come back down.
        out = {"direction": "out", "local": "sensors/+/temp", "remote": "site1/{1}/temp"}
        back = {"direction": "in", "remote": "site1/+/#", "local": "cmd/{1}/{2}"}
        why = refused([out, back], bridge_bit=False)
        self.assertIn("rule #1 (out, 'site1/+/temp') and rule #2 (in, 'site1/+/#') overlap", why)
        self.assertIn("no No Local (bridge_bit = false)", why)
        self.assertIn('rule #1 is "both"', refused([{"direction": "both", "pattern": "#"}], profile="nats"))
        # With the bridge bit (or MQTT 5: No Local) the upstream does not echo: accepted.
        self.assertEqual(len(parsed([out, back]).topics), 2)
        self.assertEqual(len(parsed([out, back], bridge_bit=False, protocol=5).topics), 2)
        # Many to one into an "in" filter's space loops just the same.
        flat = {"direction": "out", "local": "a/#", "remote": "cmd/all"}
        self.assertIn("overlap", refused([flat, {"direction": "in", "remote": "cmd/#", "local": "x/{1}"}], profile="nats"))

    def test_rewritten_flow_with_per_rule_qos_and_retain(self):
        rules = [
            {"direction": "out", "local": "sensors/+/temp", "remote": "site1/{1}/temperature", "qos": 2},
            {"direction": "out", "local": "sensors/#", "remote": "site1/other", "qos": 0, "retain": False},
        ]
        p = Pair(rules=rules)
        p.connect_up()
        cons = p.consumer("site1/#")
        dev = p.edge.client(4)
        dev.connect("dev")
        dev.publish("sensors/k1/temp", b"21", 2, retain=True, packet_id=1)
        dev.publish("sensors/k1/hum", b"40", 1, retain=True, packet_id=2)
        p.settle()
        got = [(m.topic, m.payload, m.qos) for m in cons.take() if m.ptype == 3]
        # The first rule that matches wins, in the order written.
        self.assertEqual(got, [("site1/k1/temperature", b"21", 2), ("site1/other", b"40", 0)])
        retained = p.cloud.broker.routing.retained
        self.assertIsNotNone(retained.current("site1/k1/temperature", p.cloud.now))
        self.assertIsNone(retained.current("site1/other", p.cloud.now))  # retain = false cleared it


class TestProfiles(unittest.TestCase):
    def test_aws_limits_are_checked_before_sending(self):
        aws = profile_named("aws")
        ok = "dt/site1/k1/temp"
        self.assertIsNone(aws.refusal(ok, b"x", None))
        self.assertIn("at most 7 '/'", aws.refusal("a/b/c/d/e/f/g/h/i", b"x", None))
        self.assertIsNone(aws.refusal("$aws/rules/r1/a/b/c/d/e/f/g/h", b"x", None))  # the Basic Ingest prefix is exempt
        self.assertIn("at most 256 bytes", aws.refusal("t/" + "x" * 255, b"x", None))
        self.assertIn("at most 131072 bytes", aws.refusal(ok, bytes(131073), None))
        self.assertIsNone(aws.refusal(ok, bytes(131072), None))
        self.assertIn("starting with $", aws.refusal("$SYS/x", b"x", None))

    def test_aws_needs_a_certificate_and_offers_alpn_on_443(self):
        rule = [{"pattern": "#", "direction": "out", "qos": 2}]
        self.assertIn("X.509 client certificate", refused(rule, profile="aws"))
        b = parsed(rule, profile="aws", certfile="c.pem", keyfile="k.pem", addresses=["x.iot.amazonaws.com:443"])
        self.assertEqual((b.alpn, b.tls, b.topics[0]["qos"]), (["x-amzn-mqtt-ca"], True, 1))
        b = parsed(rule, profile="aws", certfile="c.pem", keyfile="k.pem", addresses=["x.iot.amazonaws.com:8883"])
        self.assertEqual(b.alpn, [])

    def test_aws_refusals_are_dead_lettered_the_rest_goes_on(self):
        p = Pair(
            rules=[{"pattern": "#", "direction": "out", "local_prefix": "up/", "qos": 2}],
            profile="aws",
            certfile="c.pem",
            keyfile="k.pem",
            publish_rate=0,  # (not paced here: test_bridge_pacing.py)
            bytes_rate=0,
        )
        p.connect_up()
        cons = p.consumer("#")
        publish_acked(p.edge, "up/a/b/c/d/e/f/g/h/i", 1)  # 8 "/": AWS would refuse it
        publish_acked(p.edge, "up/ok", 1, qos=2, start=1)
        p.settle()
        got = [(m.topic, m.qos) for m in cons.take() if m.ptype == 3]
        self.assertEqual(got, [("ok", 1)])  # QoS 2 goes as 1
        self.assertEqual(p.bridge.dead_lettered, 1)
        self.assertIn("at most 7 '/'", p.logged[-1])

    def test_azure_rules_and_keys(self):
        up = {"direction": "out", "local": "telemetry/#", "remote": "devices/dev1/messages/events/"}
        down = {"direction": "in", "remote": "devices/dev1/messages/devicebound/#", "local": "cmd/{1}"}
        key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
        b = parsed([up, down], profile="azure", client_id="dev1", device_key=key)
        self.assertTrue(b.tls)
        self.assertIn("client_id is the device id", refused([up], profile="azure", device_key=key))
        self.assertIn("needs device_key", refused([up], profile="azure", client_id="dev1"))
        self.assertIn("not base64", refused([up], profile="azure", client_id="dev1", device_key="not base64!"))
        wrong = {"direction": "out", "local": "t/#", "remote": "devices/dev2/messages/events/"}
        self.assertIn("IoT Hub takes messages on", refused([wrong], profile="azure", client_id="dev1", device_key=key))
        self.assertIn("speaks MQTT 3.1.1 only", refused([up], profile="azure", client_id="dev1", device_key=key, protocol=5))

    def test_sas_token_as_documented(self):
        # Microsoft's "Control access to IoT Hub with shared access signatures":
        # sig = base64(HMAC-SHA256(base64decode(key), urlencode(resource) + "\n" + expiry)).
        # The expected token was made with CPython's hmac, base64 and urllib.parse.urlencode.
        key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
        self.assertEqual(
            sas_token("myhub.azure-devices.net/devices/dev-1", key, 1700003600),
            "SharedAccessSignature sr=myhub.azure-devices.net%2Fdevices%2Fdev-1"
            "&sig=Q8xuYWcgMGnEpRv%2FW7Qjw%2Bocuxnefzyb0Ertn9JHgZk%3D&se=1700003600",
        )
        self.assertEqual(url_quote("a b/~é"), "a%20b%2F~%C3%A9")

    def test_azure_credentials_are_renewed_before_they_expire(self):
        up = {"direction": "out", "local": "telemetry/#", "remote": "devices/dev1/messages/events/"}
        key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
        p = Pair(rules=[up], profile="azure", client_id="dev1", device_key=key, sas_ttl=100, addresses=["hub.example:8883"])
        b = p.bridge
        self.assertEqual(b.next_address(1), "hub.example:8883")
        b.up_open(1, 1700000000)
        self.assertEqual(b.up.username, "hub.example/dev1/?api-version=2021-04-12")
        self.assertTrue(b.up.password.endswith("&se=1700000100"))
        self.assertIn("sr=hub.example%2Fdevices%2Fdev1&", b.up.password)
        b.up.state = CONNECTED
        b.reached = True  # (as if its CONNACK came)
        self.assertEqual(b.tick(80000), 80001)  # 4/5 of its life: then a new connection, a new token
        b.tick(80001)
        self.assertEqual(b.close_wanted, "its credentials are renewed (a new SAS token)")
        b.up_failed(b.close_wanted, 80001)
        self.assertIn("connection to hub.example:8883 ended: its credentials are renewed", p.logged[-1])
        ms = b.retry_at
        b.next_address(ms)
        b.up_open(ms, 1700000080)
        self.assertTrue(b.up.password.endswith("&se=1700000180"))

    def test_azure_clears_retain_and_caps_qos(self):
        up = {"direction": "out", "local": "telemetry/#", "remote": "devices/dev1/messages/events/", "qos": 2}
        key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
        p = Pair(rules=[up], profile="azure", client_id="dev1", device_key=key)
        p.connect_up()
        cons = p.consumer("devices/#")
        dev = p.edge.client(4)
        dev.connect("dev")
        dev.publish("telemetry/t", b"1", 2, retain=True, packet_id=1)
        p.settle()
        got = [(m.topic, m.qos, m.retain) for m in cons.take() if m.ptype == 3]
        self.assertEqual(got, [("devices/dev1/messages/events/", 1, False)])

    def test_hosted_needs_tls_and_a_login(self):
        rule = [{"pattern": "#", "direction": "out"}]
        self.assertIn("user name and password", refused(rule, profile="hosted", username="u"))
        b = parsed(rule, profile="hosted", username="u", password="p")
        self.assertTrue(b.tls)
        self.assertFalse(profile_named("hosted").bridge_bit)


class TestAclGrants(unittest.TestCase):
    def test_the_local_side_as_a_filter(self):
        self.assertEqual(local_filter(Rule("out", "up/+/t", "edge1/{1}")), "up/+/t")
        self.assertEqual(local_filter(Rule("in", "down/{1}", "cmd/edge1/#")), "down/#")  # a "#" capture: "#"
        self.assertEqual(local_filter(Rule("in", "a/{1}/b/{2}", "x/+/y/+")), "a/+/b/+")
        self.assertEqual(local_filter(Rule("in", "a/x{1}y", "x/+")), "a/+")
        self.assertEqual(local_filter(Rule("in", "loc/+/#", "rem/+/#")), "loc/+/#")  # the filter form

    def test_read_out_write_in(self):
        grants = acl_grants(
            [Rule("out", "up/#", "edge1/{1}"), Rule("in", "down/{1}", "cmd/#"), Rule("both", "x/#", "y/#")]
        )
        self.assertEqual(
            [(bits, flt) for bits, flt, _ in grants], [(READ, "up/#"), (WRITE, "down/#"), (READ, "x/#"), (WRITE, "x/#")]
        )


if __name__ == "__main__":
    unittest.main()
