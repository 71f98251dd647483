"""Property tests of the MQTT-SN codec (CPython only, hypothesis):

- encode -> decode is the identity for generated messages of every v1.2 type;
- arbitrary and mutated datagrams only ever give (message, None) or
  (None, reason) from parse_datagram: no exception escapes (the fuzz
  invariant of CONVENTIONS.md, for MQTT-SN v1.2 §5.2 and §5.4);
- the sealed envelope of a keyed listener (common/mqttsn/envelope.py):
  arbitrary and mutated envelopes are refused with a counter and a reason,
  never an exception, and a mutated one never opens.

SISKIN_FUZZ_EXAMPLES raises the example counts (as for the MQTT codec).
"""

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from common.mqttsn import consts as c
from common.mqttsn.codec import LAYOUTS, SnMessage, decode_message, encode_message, parse_datagram
from tests.core.mqttsn_golden import GOLDEN

EXAMPLES = int(os.environ.get("SISKIN_FUZZ_EXAMPLES", "400"))

u8 = st.integers(0, 255)
u16 = st.integers(0, 0xFFFF)
text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
qos = st.sampled_from((0, 1, 2, -1))
TYPES = [t for t in range(len(LAYOUTS)) if LAYOUTS[t] is not None]


@st.composite
def messages(draw):
    mtype = draw(st.sampled_from(TYPES))
    f = {}
    if mtype in (c.PUBLISH, c.SUBSCRIBE, c.UNSUBSCRIBE):
        f["topic_id_type"] = draw(st.sampled_from((c.TOPIC_NORMAL, c.TOPIC_PREDEFINED, c.TOPIC_SHORT)))
    if mtype in (c.PUBLISH, c.SUBSCRIBE, c.SUBACK, c.WILLTOPIC, c.WILLTOPICUPD, c.UNSUBSCRIBE):
        f["qos"] = draw(qos)
        f["dup"] = draw(st.booleans())
        f["retain"] = draw(st.booleans())
    if mtype in (c.CONNECT,):
        f["will"] = draw(st.booleans())
        f["clean"] = draw(st.booleans())
        f["duration"] = draw(u16)
        f["client_id"] = draw(text)
    if mtype == c.ADVERTISE:
        f["gw_id"], f["duration"] = draw(u8), draw(u16)
    if mtype == c.SEARCHGW:
        f["radius"] = draw(u8)
    if mtype == c.GWINFO:
        f["gw_id"] = draw(u8)
        f["gw_add"] = draw(st.one_of(st.none(), st.binary(min_size=1, max_size=16)))
    if mtype in (c.CONNACK, c.WILLTOPICRESP, c.WILLMSGRESP, c.REGACK, c.PUBACK, c.SUBACK):
        f["return_code"] = draw(u8)
    if mtype in (
        c.REGISTER,
        c.REGACK,
        c.PUBLISH,
        c.PUBACK,
        c.PUBCOMP,
        c.PUBREC,
        c.PUBREL,
        c.SUBSCRIBE,
        c.SUBACK,
        c.UNSUBSCRIBE,
        c.UNSUBACK,
    ):
        f["msg_id"] = draw(u16)
    if mtype in (c.REGISTER, c.REGACK, c.PUBLISH, c.PUBACK, c.SUBACK):
        f["topic_id"] = draw(u16)
    if mtype == c.REGISTER:
        f["topic_name"] = draw(text)
    if mtype in (c.SUBSCRIBE, c.UNSUBSCRIBE):
        if f["topic_id_type"] == c.TOPIC_NORMAL:
            f["topic_name"] = draw(text)
        else:
            f["topic_id"] = draw(u16)
    if mtype in (c.WILLTOPIC, c.WILLTOPICUPD):
        if draw(st.booleans()):
            f["topic_name"] = draw(text)
        else:  # the empty form has no flags at all
            f = {}
    if mtype in (c.PUBLISH, c.WILLMSG, c.WILLMSGUPD):
        f["data"] = draw(st.binary(max_size=300))
    if mtype == c.PINGREQ:
        f["client_id"] = draw(st.one_of(st.none(), text.filter(bool)))
    if mtype == c.DISCONNECT:
        f["duration"] = draw(st.one_of(st.none(), u16))
    return SnMessage(mtype, **f)


@settings(max_examples=EXAMPLES, deadline=None)
@given(messages())
def test_round_trip(msg):
    data = encode_message(msg)
    assert decode_message(data, 0, len(data)) == msg


def assert_parses_or_refuses(data):
    msg, reason = parse_datagram(data)
    assert (msg is None) != (reason is None)
    if msg is not None:  # what was accepted re-encodes to an accepted datagram
        again = encode_message(msg)
        assert parse_datagram(again)[0] == msg


@settings(max_examples=EXAMPLES * 5, deadline=None)
@given(st.binary(max_size=320))
def test_arbitrary_bytes_never_raise(data):
    assert_parses_or_refuses(data)


@settings(max_examples=EXAMPLES * 5, deadline=None)
@given(st.sampled_from([bytes.fromhex(g[4]) for g in GOLDEN]), st.integers(0, 400), u8, st.booleans())
def test_mutated_golden_never_raise(data, pos, value, cut):
    data = bytearray(data)
    pos %= len(data)
    if cut:
        del data[pos:]
    else:
        data[pos] = value
    assert_parses_or_refuses(bytes(data))


def sealed_envelope():
    """A keyed Envelope holding a current challenge, and one datagram sealed under it (ctr 1)."""
    from common.mqttsn.envelope import Envelope, derive_keys
    from cpython_host.runtime.crypto import make_aead

    key = bytes(range(16))
    env = Envelope({"s1": key}, make_aead, lambda n: b"\x07" * n)
    env.open("a", b"\x00\x01\x02s1" + bytes(12))  # a challenge request: pending = 07 * 8
    header = b"\x00\x01\x02s1" + b"\x07" * 8 + (1).to_bytes(4, "big")
    up = make_aead(derive_keys(key)[0])
    return env, header + up.encrypt(header[-12:], bytes([2, c.PINGREQ]), header)


@settings(max_examples=EXAMPLES * 5, deadline=None)
@given(st.binary(max_size=120), st.integers(0, 200), u8, st.booleans())
def test_envelopes_refused_never_raise(noise, pos, value, cut):
    env, good = sealed_envelope()
    for data in (b"\x00" + noise, b"\x00\x01" + noise):
        key, _plain, refused = env.open("a", data)
        assert key is None and refused[0] in ("sn_bad_seal", "sn_challenged") and refused[1]
    data = bytearray(good)
    pos %= len(data)
    if cut:
        del data[pos:]
    elif data[pos] == value:
        value ^= 1
    if not cut:
        data[pos] = value
    key, _plain, refused = env.open("a", bytes(data))
    assert key is None and refused is not None  # a mutated envelope never opens
    assert env.open("a", good)[1] == bytes([2, c.PINGREQ])  # the genuine one still does
