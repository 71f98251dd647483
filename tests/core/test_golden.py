"""Golden bytes from an independent encoder (mqtt-packet 9.0.2, tools/golden/gen.js).

One fixture drives every direction, at protocol levels 3 (CONNECT), 4 and 5:
our decoder yields the fixture's fields from its bytes, fed whole, one byte at
a time and followed by the next packet's bytes; our encoder yields the bytes
(or, where mqtt-packet writes a longer form than the spec requires, the spec's
short form given in "encode_hex", which we also decode).

Runs unchanged under CPython (pytest) and MicroPython (tests/upy): plain
unittest, file paths relative to the repository root.
"""

import json
import unittest

from common.mqtt.codec import FrameReader
from common.mqtt.consts import AUTH, CONNECT, PT_BIN, PT_PAIR, PUBACK, PUBCOMP, PUBREC, PUBREL
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
from common.mqtt.properties import PROPERTIES
from tests.core.packet_fields import fields

FIXTURE_PATH = "tests/fixtures/golden.json"
CACHE = []


def fixtures():
    if not CACHE:
        with open(FIXTURE_PATH) as f:
            CACHE.append(json.load(f)["fixtures"])
    return CACHE[0]


def unhex(s):
    return bytes.fromhex(s)


def conv_props(items):
    out = []
    for pid, value in items:
        t = PROPERTIES[pid][0]
        if t == PT_BIN:
            value = unhex(value)
        elif t == PT_PAIR:
            value = (value[0], value[1])
        out.append((pid, value))
    return out


def opt_hex(value):
    return None if value is None else unhex(value)


def expected_packet(fx):
    """The packet object the fixture's fields describe."""
    f = fx["fields"]
    t = fx["ptype"]
    if t == CONNECT:
        return Connect(
            f["level"], f["clean_start"], f["keep_alive"], f["client_id"], will_topic=f["will_topic"],
            will_payload=opt_hex(f["will_payload"]), will_qos=f["will_qos"], will_retain=f["will_retain"],
            will_props=conv_props(f["will_props"]), username=f["username"], password=opt_hex(f["password"]),
            props=conv_props(f["props"]), proto_name=f["proto_name"])
    if t == 2:
        return Connack(f["session_present"], f["reason"], conv_props(f["props"]))
    if t == 3:
        return Publish(f["topic"], unhex(f["payload"]), f["qos"], f["retain"], f["dup"],
                       f["packet_id"], conv_props(f["props"]))
    if t in (PUBACK, PUBREC, PUBREL, PUBCOMP):
        return PubAck(t, f["packet_id"], f["reason"], conv_props(f["props"]))
    if t == 8:
        return Subscribe(f["packet_id"], [(a, b) for a, b in f["topics"]], conv_props(f["props"]))
    if t == 9:
        return Suback(f["packet_id"], f["reasons"], conv_props(f["props"]))
    if t == 10:
        return Unsubscribe(f["packet_id"], f["filters"], conv_props(f["props"]))
    if t == 11:
        return Unsuback(f["packet_id"], f["reasons"], conv_props(f["props"]))
    if t == 12:
        return Pingreq()
    if t == 13:
        return Pingresp()
    if t == 14:
        return Disconnect(f["reason"], conv_props(f["props"]))
    if t == AUTH:
        return Auth(f["reason"], conv_props(f["props"]))
    raise ValueError("unknown packet type %d" % t)


def read_all(reader, level):
    out = []
    while True:
        frame = reader.maybe_read_frame()
        if frame is None:
            return out
        out.append(decode_packet(frame[0], reader.buf, frame[1], frame[2], level))


class TestGolden(unittest.TestCase):
    def check_same(self, fx, got, expected, how):
        if fields(got) != fields(expected):
            self.fail("%s (%s): got %r, expected %r" % (fx["name"], how, fields(got), fields(expected)))

    def test_fixture_file_covers_every_packet_and_property(self):
        seen = []
        pids = []
        for fx in fixtures():
            seen.append((fx["ptype"], fx["level"]))
            f = fx["fields"]
            for key in ("props", "will_props"):
                for pid, _value in f.get(key, []):
                    if pid not in pids:
                        pids.append(pid)
        for t in range(1, 16):
            self.assertIn((t, 5), seen)
            if t != AUTH:
                self.assertIn((t, 4), seen)
        self.assertIn((CONNECT, 3), seen)
        for pid in PROPERTIES:
            self.assertIn(pid, pids)

    def test_decode_whole(self):
        for fx in fixtures():
            reader = FrameReader(1 << 20)
            reader.feed(unhex(fx["hex"]))
            got = read_all(reader, fx["level"])
            self.assertEqual(len(got), 1)
            self.check_same(fx, got[0], expected_packet(fx), "whole")
            self.assertEqual(reader.pending(), 0)

    def test_decode_byte_by_byte(self):
        for fx in fixtures():
            data = unhex(fx["hex"])
            reader = FrameReader(1 << 20)
            for i in range(len(data) - 1):
                reader.feed(data[i:i + 1])
                self.assertIsNone(reader.maybe_read_frame())
            reader.feed(data[len(data) - 1:])
            got = read_all(reader, fx["level"])
            self.assertEqual(len(got), 1)
            self.check_same(fx, got[0], expected_packet(fx), "byte by byte")

    def test_decode_with_trailing_bytes(self):
        fxs = fixtures()
        for k in range(len(fxs)):
            fx = fxs[k]
            nxt = fxs[(k + 1) % len(fxs)]
            data = unhex(fx["hex"])
            tail = unhex(nxt["hex"])
            reader = FrameReader(1 << 20)
            reader.feed(data + tail)
            frame = reader.maybe_read_frame()
            got = decode_packet(frame[0], reader.buf, frame[1], frame[2], fx["level"])
            self.check_same(fx, got, expected_packet(fx), "trailing bytes")
            self.assertEqual(reader.pending(), len(tail))
            frame = reader.maybe_read_frame()
            got = decode_packet(frame[0], reader.buf, frame[1], frame[2], nxt["level"])
            self.check_same(nxt, got, expected_packet(nxt), "after another packet")
            self.assertIsNone(reader.maybe_read_frame())

    def test_encode(self):
        for fx in fixtures():
            want = unhex(fx.get("encode_hex") or fx["hex"])
            got = encode_packet(expected_packet(fx), fx["level"])
            if got != want:
                self.fail("%s: encoded %s, expected %s" % (fx["name"], got.hex(), want.hex()))

    def test_decode_spec_short_forms(self):
        # Fixtures where mqtt-packet's bytes are longer than the spec requires:
        # the short form decodes to the same packet.
        count = 0
        for fx in fixtures():
            if "encode_hex" not in fx:
                continue
            count += 1
            reader = FrameReader(1 << 20)
            reader.feed(unhex(fx["encode_hex"]))
            got = read_all(reader, fx["level"])
            self.assertEqual(len(got), 1)
            self.check_same(fx, got[0], expected_packet(fx), "short form")
        self.assertTrue(count >= 9)

    def test_round_trip(self):
        for fx in fixtures():
            pkt = expected_packet(fx)
            reader = FrameReader(1 << 20)
            reader.feed(encode_packet(pkt, fx["level"]))
            got = read_all(reader, fx["level"])
            self.check_same(fx, got[0], pkt, "round trip")

    def test_whole_stream_in_one_feed(self):
        # Every fixture of one level back to back, in one buffer.
        for level in (4, 5):
            fxs = [fx for fx in fixtures() if fx["level"] == level]
            data = b"".join([unhex(fx["hex"]) for fx in fxs])
            reader = FrameReader(1 << 20)
            reader.feed(data)
            got = read_all(reader, level)
            self.assertEqual(len(got), len(fxs))
            for k in range(len(fxs)):
                self.check_same(fxs[k], got[k], expected_packet(fxs[k]), "stream")

    def test_every_truncation_raises_mqtt_error_or_decodes(self):
        # Re-frame each packet body cut short: the decoder sees a shorter
        # Remaining Length and must answer with an MqttError (or, where the
        # shorter body is itself valid, a packet) -- never another exception.
        for fx in fixtures():
            data = unhex(fx["hex"])
            if len(data) > 400:
                continue
            reader = FrameReader(1 << 20)
            reader.feed(data)
            first, start, end = reader.maybe_read_frame()
            for cut in range(start, end):
                try:
                    decode_packet(first, reader.buf, start, cut, fx["level"])
                except MqttError:
                    pass
