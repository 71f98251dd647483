"""Property test of the MQTT-SN gateway's handling (CPython only,
hypothesis): any sequence of datagrams — well-formed v1.2 messages of every
type in any order, arbitrary bytes, from a few addresses — with the clock
moving between them, fed to a Gateway over a real Broker and Driver (the
harness of tests/core/test_mqttsn_gateway.py, an MQTT subscriber and
publisher beside it), never raises, only ever sends datagrams that parse,
and never holds more SN clients than max_clients (the fuzz invariant of
CONVENTIONS.md for the gateway, as tests/host/fuzz_broker.py is for the
broker's packet handling).

SISKIN_FUZZ_EXAMPLES raises the example count (`make fuzz`).
"""

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from common.mqttsn.codec import encode_message, parse_datagram
from tests.core.test_mqttsn_gateway import GatewayTest
from tests.host.test_mqttsn_hypothesis import messages

EXAMPLES = int(os.environ.get("SISKIN_FUZZ_EXAMPLES", "200"))
ADDRESSES = (("10.0.0.7", 5000), ("10.0.0.8", 5000), ("10.0.0.9", 5001))

datagram = st.one_of(messages().map(encode_message), st.binary(max_size=64))
steps = st.lists(st.tuples(st.sampled_from(ADDRESSES), datagram, st.integers(0, 40_000)), max_size=40)


class Harness(GatewayTest):
    __test__ = False  # (a harness, not a test case of its own)

    def setUp(self) -> None:
        super().setUp()
        # Real entropy: the core harness's zeros would give every client with
        # an empty id the same generated id, and the broker draws until unique.
        self.broker.entropy = os.urandom

    def runTest(self) -> None:  # (unittest wants one to make an instance)
        pass


@settings(max_examples=EXAMPLES, deadline=None)
@given(steps, st.booleans())
def test_any_datagrams_in_any_order_never_break_the_gateway(sequence, mqtt_traffic):
    h = Harness()
    h.setUp()
    cid, _ = h.mqtt("watcher", "#")
    for addr, data, advance in sequence:
        h.clock.ms += advance
        h.gw.datagram_received(addr, data)
        h.gw.pump()
        if mqtt_traffic:
            h.publish(cid, "plant/alarm", b"x", 1)  # a predefined id's topic, to any SN subscriber
        h.gw.tick()
        h.driver.tick()
        h.driver.flush()
        h.gw.pump()
        for _to, out in h.gw.take_datagrams():
            assert parse_datagram(bytes(out))[1] is None, out
        assert len(h.gw.clients) <= h.gw.settings.max_clients
