"""Property tests of the codec (CPython only, hypothesis).

- encode -> decode is the identity for generated packets of every type at
  protocol levels 4 and 5 (and CONNECT at 3);
- any chunking of a stream of packets yields the same packets;
- random and mutated bytes only ever raise MqttError, fed whole and one byte
  at a time (the fuzz invariant of CONVENTIONS.md).

Example counts stay moderate so the file runs in a few seconds; set
SISKIN_FUZZ_EXAMPLES (e.g. 20000, for `make fuzz`) to raise them.
"""

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.mqtt.codec import FrameReader
from common.mqtt.consts import (
    AUTH,
    CONNACK,
    CONNECT,
    DISCONNECT,
    PROP_RESPONSE_TOPIC,
    PT_BIN,
    PT_BYTE,
    PT_PAIR,
    PT_STR,
    PT_U16,
    PT_U32,
    PUBACK,
    PUBCOMP,
    PUBLISH,
    PUBREC,
    PUBREL,
    REASONS_AUTH,
    REASONS_CONNACK,
    REASONS_DISCONNECT,
    REASONS_PUBACK,
    REASONS_PUBREL,
    REASONS_SUBACK,
    REASONS_UNSUBACK,
    RETURN_CODES_CONNACK_311,
    RETURN_CODES_SUBACK_311,
    SUBACK,
    SUBSCRIBE,
    UNSUBACK,
    UNSUBSCRIBE,
    WILL,
)
from common.mqtt.errors import MqttError
from common.mqtt.packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Pingreq,
    Pingresp,
    PubAck,
    Publish,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
    decode_packet,
    encode_packet,
)
from common.mqtt.properties import NONZERO_PROPS, PROPERTIES
from tests.core.packet_fields import fields

EXAMPLES = int(os.environ.get("SISKIN_FUZZ_EXAMPLES", "0"))


def examples(default):
    return settings(
        max_examples=max(default, EXAMPLES), deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# ---------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------

# MQTT UTF-8: any code point but U+0000 and the surrogates.
mqtt_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    max_size=12,
)
topic_name = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00+#"),
    min_size=1, max_size=12,
)
packet_id = st.integers(1, 65535)
blob = st.binary(max_size=40)


def prop_value(pid):
    dtype = PROPERTIES[pid][0]
    low = 1 if pid in NONZERO_PROPS else 0
    if dtype == PT_BYTE:
        return st.integers(0, 1)
    if dtype == PT_U16:
        return st.integers(low, 65535)
    if dtype == PT_U32:
        return st.integers(low, 0xFFFFFFFF)
    if dtype == PT_STR:
        # A Response Topic is a topic name: no wildcards (the decoder refuses them).
        return topic_name if pid == PROP_RESPONSE_TOPIC else mqtt_text
    if dtype == PT_BIN:
        return blob
    if dtype == PT_PAIR:
        return st.tuples(mqtt_text, mqtt_text)
    return st.integers(1, 268435455)  # Subscription Identifier (VBI)


@st.composite
def props_for(draw, ptype):
    """A property list legal in a packet of ``ptype`` (or WILL), in random order."""
    mask = 1 << ptype
    items = []
    for pid in sorted(PROPERTIES):
        if not PROPERTIES[pid][1] & mask:
            continue
        if PROPERTIES[pid][2] == 0 or (pid == 0x0B and ptype == PUBLISH):
            count = draw(st.integers(0, 3))  # may repeat
        else:
            count = draw(st.integers(0, 1))
        for _ in range(count):
            items.append((pid, draw(prop_value(pid))))
    items = draw(st.permutations(items)) if items else []
    return list(items)


def maybe_props(ptype, level):
    return props_for(ptype) if level == 5 else st.just(None)


@st.composite
def connect_packet(draw, level):
    has_will = draw(st.booleans())
    username = draw(st.none() | mqtt_text)
    password = draw(st.none() | blob)
    if level != 5 and username is None:
        password = None  # 3.1.1 [MQTT-3.1.2-22]
    props = draw(maybe_props(CONNECT, level))
    if props and not any(pid == 0x15 for pid, _ in props):
        # 5.0 3.1.2.11.10: no Authentication Data without an Authentication Method
        props = [(pid, value) for pid, value in props if pid != 0x16]
    return Connect(
        level, draw(st.booleans()), draw(st.integers(0, 65535)), draw(mqtt_text),
        will_topic=draw(topic_name) if has_will else None,
        will_payload=draw(blob) if has_will else None,
        will_qos=draw(st.integers(0, 2)) if has_will else 0,
        will_retain=draw(st.booleans()) if has_will else False,
        will_props=draw(props_for(WILL)) if has_will and level == 5 else None,
        username=username, password=password, props=props,
    )


@st.composite
def publish_packet(draw, level):
    qos = draw(st.integers(0, 2))
    props = draw(maybe_props(PUBLISH, level))
    topic = draw(topic_name)
    if level == 5 and props and any(p[0] == 0x23 for p in props) and draw(st.booleans()):
        topic = ""  # a Topic Alias stands in for the topic
    return Publish(topic, draw(st.binary(max_size=300)), qos, draw(st.booleans()),
                   draw(st.booleans()) if qos else False, draw(packet_id) if qos else 0, props)


@st.composite
def puback_packet(draw, level):
    ptype = draw(st.sampled_from((PUBACK, PUBREC, PUBREL, PUBCOMP)))
    reasons = REASONS_PUBACK if ptype in (PUBACK, PUBREC) else REASONS_PUBREL
    reason = draw(st.sampled_from(reasons)) if level == 5 else 0
    return PubAck(ptype, draw(packet_id), reason, draw(maybe_props(ptype, level)))


@st.composite
def subscribe_packet(draw, level):
    if level == 5:
        opts = st.builds(lambda q, nl, rap, rh: q | nl << 2 | rap << 3 | rh << 4,
                         st.integers(0, 2), st.integers(0, 1), st.integers(0, 1), st.integers(0, 2))
    else:
        opts = st.integers(0, 2)
    topics = draw(st.lists(st.tuples(mqtt_text, opts), min_size=1, max_size=5))
    return Subscribe(draw(packet_id), topics, draw(maybe_props(SUBSCRIBE, level)))


def packet(level):
    """Any packet a level-``level`` connection may carry, in either direction."""
    v5 = level == 5
    choices = [
        connect_packet(level),
        st.builds(
            lambda r, sp, p: Connack(sp and r == 0, r, p),
            st.sampled_from(REASONS_CONNACK if v5 else RETURN_CODES_CONNACK_311),
            st.booleans(), maybe_props(CONNACK, level)),
        publish_packet(level),
        puback_packet(level),
        subscribe_packet(level),
        st.builds(Suback, packet_id,
                  st.lists(st.sampled_from(REASONS_SUBACK if v5 else RETURN_CODES_SUBACK_311),
                           min_size=1, max_size=5),
                  maybe_props(SUBACK, level)),
        st.builds(Unsubscribe, packet_id, st.lists(mqtt_text, min_size=1, max_size=5),
                  maybe_props(UNSUBSCRIBE, level)),
        st.builds(Unsuback, packet_id,
                  st.lists(st.sampled_from(REASONS_UNSUBACK), min_size=1, max_size=5)
                  if v5 else st.just([]),
                  maybe_props(UNSUBACK, level)),
        st.just(Pingreq()),
        st.just(Pingresp()),
        st.builds(Disconnect, st.sampled_from(REASONS_DISCONNECT) if v5 else st.just(0),
                  maybe_props(DISCONNECT, level)),
    ]
    if v5:
        choices.append(st.builds(Auth, st.sampled_from(REASONS_AUTH), props_for(AUTH)))
    return st.one_of(choices)


any_level = st.sampled_from((4, 5))


def read_frames(reader, level, out):
    while True:
        frame = reader.maybe_read_frame()
        if frame is None:
            return
        out.append(decode_packet(frame[0], reader.buf, frame[1], frame[2], level))


# ---------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------


@examples(300)
@given(st.data())
def test_round_trip_every_type(data):
    level = data.draw(any_level)
    pkt = data.draw(packet(level))
    wire = encode_packet(pkt, level)
    reader = FrameReader(1 << 20)
    reader.feed(wire)
    got = []
    read_frames(reader, level, got)
    assert [fields(p) for p in got] == [fields(pkt)]
    assert encode_packet(got[0], level) == wire


@examples(50)
@given(connect_packet(3))
def test_round_trip_mqtt_31_connect(pkt):
    pkt.proto_name = "MQIsdp"
    wire = encode_packet(pkt, 4)
    reader = FrameReader(1 << 20)
    reader.feed(wire)
    got = []
    read_frames(reader, 4, got)
    assert [fields(p) for p in got] == [fields(pkt)]


@examples(100)
@given(st.data())
def test_any_chunking_gives_the_same_packets(data):
    level = data.draw(any_level)
    pkts = data.draw(st.lists(packet(level), min_size=1, max_size=8))
    wire = b"".join(encode_packet(p, level) for p in pkts)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=20)))
    reader = FrameReader(1 << 20)
    got = []
    prev = 0
    for cut in [*cuts, len(wire)]:
        reader.feed(wire[prev:cut])
        prev = cut
        read_frames(reader, level, got)
    assert [fields(p) for p in got] == [fields(p) for p in pkts]
    assert reader.pending() == 0


def only_mqtt_errors(wire, level, byte_by_byte):
    reader = FrameReader(4096)
    out = []
    try:
        if byte_by_byte:
            for i in range(len(wire)):
                reader.feed(wire[i:i + 1])
                read_frames(reader, level, out)
        else:
            reader.feed(wire)
            read_frames(reader, level, out)
    except MqttError:
        pass
    return out


@examples(300)
@given(st.binary(max_size=200), any_level)
def test_random_bytes_only_raise_mqtt_error(wire, level):
    whole = only_mqtt_errors(wire, level, False)
    single = only_mqtt_errors(wire, level, True)
    assert [fields(p) for p in whole] == [fields(p) for p in single]


@examples(200)
@given(st.data())
def test_mutated_packets_only_raise_mqtt_error(data):
    level = data.draw(any_level)
    wire = bytearray(encode_packet(data.draw(packet(level)), level))
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(("flip", "set", "insert", "delete", "truncate")))
        i = data.draw(st.integers(0, max(0, len(wire) - 1)))
        if op == "flip" and wire:
            wire[i] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "set" and wire:
            wire[i] = data.draw(st.integers(0, 255))
        elif op == "insert":
            wire[i:i] = data.draw(st.binary(min_size=1, max_size=4))
        elif op == "delete" and wire:
            del wire[i]
        elif op == "truncate":
            del wire[i:]
    wire = bytes(wire)
    whole = only_mqtt_errors(wire, level, False)
    single = only_mqtt_errors(wire, level, True)
    assert [fields(p) for p in whole] == [fields(p) for p in single]


@examples(150)
@given(st.data())
def test_mutated_bodies_with_valid_framing(data):
    # Keep the fixed header consistent so the mutation reaches the decoders.
    level = data.draw(any_level)
    wire = encode_packet(data.draw(packet(level)), level)
    reader = FrameReader(1 << 20)
    reader.feed(wire)
    first, start, end = reader.maybe_read_frame()
    body = bytearray(wire[start:end])
    if body:
        for _ in range(data.draw(st.integers(1, 3))):
            i = data.draw(st.integers(0, len(body) - 1))
            body[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(body)))
    try:
        decode_packet(first, bytes(body), 0, cut, level)
    except MqttError:
        pass
