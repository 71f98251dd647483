"""CPython-only checks of the golden fixtures' provenance.

- The committed tests/fixtures/golden.json is exactly what tools/golden/gen.js
  produces with the pinned mqtt-packet (skipped when Node or mqtt-packet is not
  installed, unless SISKIN_REQUIRE_ALL=1, in which case that is a failure).
- A second independent encoder, paho-mqtt's client, agrees with our codec:
  the bytes paho would send decode to the fields we gave paho, and our encoder
  re-creates paho's bytes.
"""

import shutil
import subprocess
from pathlib import Path

from common.mqtt.codec import FrameReader
from common.mqtt.consts import (
    PROP_CONTENT_TYPE,
    PROP_CORRELATION_DATA,
    PROP_MESSAGE_EXPIRY_INTERVAL,
    PROP_REASON_STRING,
    PROP_SESSION_EXPIRY_INTERVAL,
    PROP_USER_PROPERTY,
    PUBACK,
    PUBREL,
)
from common.mqtt.packets import (
    Connect,
    Disconnect,
    PubAck,
    Publish,
    Subscribe,
    Unsubscribe,
    decode_packet,
    encode_packet,
)
from tests.conftest import require
from tests.core.packet_fields import fields

ROOT = Path(__file__).resolve().parents[2]
GEN = ROOT / "tools" / "golden" / "gen.js"
FIXTURE = ROOT / "tests" / "fixtures" / "golden.json"


def node_with_mqtt_packet():
    node = shutil.which("node")
    require("node", node, "apt-get install nodejs")
    probe = subprocess.run(
        [node, "-e", "require.resolve('mqtt-packet')"], cwd=GEN.parent,
        capture_output=True, text=True, timeout=60,
    )
    require("mqtt-packet (npm)", probe.returncode == 0, "make npm installs it from the root package.json")
    return node


def test_committed_fixtures_match_the_generator():
    node = node_with_mqtt_packet()
    out = subprocess.run([node, str(GEN)], cwd=ROOT, capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout == FIXTURE.read_bytes(), (
        "tests/fixtures/golden.json is stale: run node tools/golden/gen.js > tests/fixtures/golden.json"
    )


def test_generator_pins_the_encoder_version():
    lock = (ROOT / "package-lock.json").read_text()
    assert '"node_modules/mqtt-packet"' in lock
    assert '"version": "9.0.2"' in lock


# ---------------------------------------------------------------------------
# paho-mqtt as a second oracle
# ---------------------------------------------------------------------------


def paho_bytes(protocol, actions):
    """Run ``actions(client)`` on a paho client whose send queue is captured."""
    import paho.mqtt.client as mc

    captured = []
    client = mc.Client(mc.CallbackAPIVersion.VERSION2, client_id="paho-1", protocol=protocol)
    client._sock = object()  # paho refuses to build a PUBLISH without a socket

    def queue(command, packet, mid, qos, info=None):
        captured.append(bytes(packet))
        return 0

    client._packet_queue = queue
    try:
        actions(client)
    finally:
        client._sock = None
    return captured


def decode_one(data, level):
    reader = FrameReader(1 << 20)
    reader.feed(data)
    first, start, end = reader.maybe_read_frame()
    assert reader.pending() == 0
    return decode_packet(first, reader.buf, start, end, level)


def check(data, expected, level):
    got = decode_one(data, level)
    assert fields(got) == fields(expected)
    assert encode_packet(got, level) == data


def test_paho_v311_packets_agree():
    import paho.mqtt.client as mc

    def actions(c):
        c.will_set("w", b"", 2, False)
        c.username_pw_set("u", None)
        c._send_connect(60)
        c._send_publish(9, b"t", b"p", 2, False, True)
        c._send_publish(0, b"a/b", b"\x00\xff", 0, True, False)
        c._send_subscribe(False, [(b"a/+", 1), (b"#", 2)])
        c._send_unsubscribe(False, [b"a", b"b"])
        c._send_puback(5)
        c._send_pubrel(6)

    connect, pub2, pub0, sub, unsub, puback, pubrel = paho_bytes(mc.MQTTv311, actions)
    check(connect, Connect(4, True, 60, "paho-1", will_topic="w", will_payload=b"", will_qos=2, username="u"), 4)
    check(pub2, Publish("t", b"p", 2, False, True, 9), 4)
    check(pub0, Publish("a/b", b"\x00\xff", 0, True), 4)
    got = decode_one(sub, 4)
    assert got.topics == [("a/+", 1), ("#", 2)]
    check(sub, Subscribe(got.packet_id, [("a/+", 1), ("#", 2)]), 4)
    check(unsub, Unsubscribe(decode_one(unsub, 4).packet_id, ["a", "b"]), 4)
    check(puback, PubAck(PUBACK, 5), 4)
    check(pubrel, PubAck(PUBREL, 6), 4)


def test_paho_v5_packets_agree():
    import paho.mqtt.client as mc
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties
    from paho.mqtt.reasoncodes import ReasonCode
    from paho.mqtt.subscribeoptions import SubscribeOptions

    def actions(c):
        c.will_set("will/t", b"bye", 1, True)
        c.username_pw_set("u", "pw")
        c._send_connect(30)
        p = Properties(PacketTypes.PUBLISH)
        p.MessageExpiryInterval = 30
        p.ContentType = "text/plain"
        p.CorrelationData = b"\x01\x02"
        p.UserProperty = ("a", "1")
        p.UserProperty = ("b", "2")
        c._send_publish(7, b"x/y", b"hello", 1, True, False, None, p)
        opts = SubscribeOptions(qos=1, noLocal=True, retainAsPublished=True, retainHandling=1)
        c._send_subscribe(False, [(b"a/#", opts)])
        d = Properties(PacketTypes.DISCONNECT)
        d.SessionExpiryInterval = 10
        d.ReasonString = "bye"
        c._send_disconnect(ReasonCode(PacketTypes.DISCONNECT, "Disconnect with will message"), d)
        c._send_disconnect(ReasonCode(PacketTypes.DISCONNECT, "Disconnect with will message"))

    connect, pub, sub, disc, disc_short = paho_bytes(mc.MQTTv5, actions)
    check(connect, Connect(5, True, 30, "paho-1", will_topic="will/t", will_payload=b"bye", will_qos=1, will_retain=True, username="u", password=b"pw"), 5)
    got = decode_one(pub, 5)
    assert (got.topic, got.payload, got.qos, got.retain, got.packet_id) == ("x/y", b"hello", 1, True, 7)
    assert sorted(got.props) == sorted([
        (PROP_MESSAGE_EXPIRY_INTERVAL, 30), (PROP_CONTENT_TYPE, "text/plain"),
        (PROP_CORRELATION_DATA, b"\x01\x02"),
        (PROP_USER_PROPERTY, ("a", "1")), (PROP_USER_PROPERTY, ("b", "2")),
    ])
    assert [p for p in got.props if p[0] == PROP_USER_PROPERTY] == [
        (PROP_USER_PROPERTY, ("a", "1")), (PROP_USER_PROPERTY, ("b", "2"))]
    assert encode_packet(got, 5) == pub
    got = decode_one(sub, 5)
    assert got.topics == [("a/#", 0x1D)]
    assert encode_packet(got, 5) == sub
    got = decode_one(disc, 5)
    assert got.reason == 0x04
    assert sorted(got.props) == [(PROP_SESSION_EXPIRY_INTERVAL, 10), (PROP_REASON_STRING, "bye")]
    assert encode_packet(got, 5) == disc
    check(disc_short, Disconnect(0x04), 5)
