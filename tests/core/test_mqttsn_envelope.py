# The sealed envelope of a keyed MQTT-SN listener (common/mqttsn/envelope.py)
# through the gateway over a real Broker and Driver: a client side written
# here from the wire format in docs/mqtt-sn.md (Security), its own HKDF calls
# and AES-GCM; a hand-turned clock. Runs under MicroPython too (cryptolib's
# AES); tests/host/test_mqttsn_udp_keys.py drives the host broker over UDP
# with a client side on `cryptography`.

import unittest

from common.broker.settings import ConfigError, new_settings
from common.crypto.aesgcm import AesGcm
from common.crypto.hkdf import hkdf_sha256
from common.driver import Driver
from common.mqtt.packets import Connect, Subscribe, encode_packet
from common.mqttsn import consts as S
from common.mqttsn.codec import SnMessage, encode_message, parse_datagram
from common.mqttsn.gateway import Gateway
from common.mqttsn.settings import sn_settings
from common.store.storeboot import new_broker
from tests.core.ecb_helper import NO_AES, make_ecb
from tests.core.test_driver import Clock, Handle

SENSOR = ("10.0.0.7", 5000)
OTHER = ("10.0.0.8", 5000)
KEY_HEX = "000102030405060708090a0b0c0d0e0f"
KEY2_HEX = "f0e0d0c0b0a090807060504030201000" * 2  # AES-256


def make_aead(key):
    return AesGcm(key, make_ecb(key))


class Entropy:
    """Distinct 8-octet challenges, like the shell's random ones."""

    def __init__(self):
        self.n = 0

    def __call__(self, n):
        self.n += 1
        return self.n.to_bytes(n, "big")


class SealingClient:
    """A keyed SN client's envelope, from the wire format alone."""

    def __init__(self, name, key_hex):
        key = bytes.fromhex(key_hex) if hasattr(bytes, "fromhex") else __import__("binascii").unhexlify(key_hex)
        self.kid = name.encode()
        salt = b"siskin-sn-envelope-v1"
        self.up = make_aead(hkdf_sha256(key, salt, b"client->gateway", len(key)))
        self.down = make_aead(hkdf_sha256(key, salt, b"gateway->client", len(key)))
        self.c = bytes(8)  # no challenge yet
        self.ctr = 0
        self.down_ctr = 0

    def header(self, c, ctr):
        return b"\x00\x01" + bytes((len(self.kid),)) + self.kid + c + ctr.to_bytes(4, "big")

    def hello(self):
        """A booting client's challenge request: the header alone, nothing sealed."""
        return self.header(bytes(8), 0)

    def seal(self, msg, ctr=None):
        if ctr is None:
            self.ctr += 1
            ctr = self.ctr
        h = self.header(self.c, ctr)
        return h + self.up.encrypt(h[-12:], encode_message(msg), h)

    def take(self, data):
        """A datagram from the gateway: a challenge (taken: None) or the SN message it seals."""
        if data[:2] == b"\x00\x02":
            n = data[2]
            assert data[3 : 3 + n] == self.kid
            self.c = bytes(data[3 + n : 3 + n + 8])
            self.ctr = 0
            self.down_ctr = 0
            return None
        assert data[:2] == b"\x00\x03", data
        assert data[2:10] == self.c  # under our challenge
        ctr = int.from_bytes(data[10:14], "big")
        assert ctr > self.down_ctr
        self.down_ctr = ctr
        msg, why = parse_datagram(self.down.decrypt(data[2:14], data[14:], data[:14]))
        assert why is None, why
        return msg


class KeyedTest(unittest.TestCase):
    def setUp(self):
        if make_ecb(bytes(16)) is None:
            self.skipTest(NO_AES)
        self.clock = Clock(0)
        self.broker = new_broker(new_settings({}), Entropy(), None)
        self.driver = Driver(self.broker, self.clock.read, 2, 5)
        self.sn_settings = sn_settings("t", {"keys": {"s1": KEY_HEX, "s2": KEY2_HEX}}, True, 0)
        self.gw = self.gateway()
        self.s1 = SealingClient("s1", KEY_HEX)

    def gateway(self):
        return Gateway(self.driver, self.sn_settings, self.clock.read, lambda a: "%s:%d" % a, lambda: None, make_aead)

    def send(self, data, addr=SENSOR):
        """One datagram in; the datagrams that came back to addr."""
        self.gw.datagram_received(addr, data)
        self.gw.pump()
        got = []
        for to, d in self.gw.take_datagrams():
            self.assertEqual(to, addr)
            got.append(d)
        return got

    def exchange(self, client, msg, addr=SENSOR):
        """Sealed msg in; the SN messages back, opened (challenges taken)."""
        return [client.take(d) for d in self.send(client.seal(msg), addr)]

    def join(self, client=None, addr=SENSOR):
        """Challenge, then CONNECT -> CONNACK."""
        client = client or self.s1
        got = self.send(client.hello(), addr)
        self.assertEqual(len(got), 1)
        self.assertIsNone(client.take(got[0]))
        name = client.kid.decode()
        got = self.exchange(client, SnMessage(S.CONNECT, clean=True, duration=60, client_id=name), addr)
        self.assertEqual([(m.mtype, m.return_code) for m in got], [(S.CONNACK, 0)])

    def stats(self):
        return self.broker.stats


class TestSealing(KeyedTest):
    def test_connect_publish_and_delivery_sealed(self):
        # The round trip: CONNECT, SUBSCRIBE and a delivery back, each opened by the client
        self.join()
        self.assertIsNotNone(self.broker.sessions.find("s1"))
        sub = SnMessage(S.SUBSCRIBE, qos=1, msg_id=1, topic_name="t/x")
        got = self.exchange(self.s1, sub)
        self.assertEqual([m.mtype for m in got], [S.SUBACK])
        h = Handle(4)
        cid = self.driver.connection_made(h)
        self.driver.data_received(cid, encode_packet(Connect(4, True, 0, "pub"), 4))
        from common.mqtt.packets import Publish

        self.driver.data_received(cid, encode_packet(Publish("t/x", b"hello", 0, False, False, 0, None), 4))
        self.driver.flush()
        self.gw.pump()
        got = [self.s1.take(d) for _, d in self.gw.take_datagrams()]
        self.assertEqual([(m.mtype, m.data) for m in got], [(S.PUBLISH, b"hello")])
        self.assertEqual(self.s1.down_ctr, 3)  # CONNACK, SUBACK, PUBLISH: the gateway's counter from 1

    def test_a_client_publishes_to_an_mqtt_subscriber(self):
        h = Handle(4)
        cid = self.driver.connection_made(h)
        self.driver.data_received(cid, encode_packet(Connect(4, True, 0, "sub"), 4))
        self.driver.data_received(cid, encode_packet(Subscribe(1, [("a/b", 1)]), 4))
        self.driver.flush()
        h.types()
        self.join()
        got = self.exchange(self.s1, SnMessage(S.REGISTER, topic_id=0, msg_id=1, topic_name="a/b"))
        tid = got[0].topic_id
        got = self.exchange(self.s1, SnMessage(S.PUBLISH, qos=1, topic_id=tid, msg_id=2, data=b"v"))
        self.assertEqual([(m.mtype, m.return_code) for m in got], [(S.PUBACK, 0)])
        self.driver.flush()
        self.assertEqual([(p.topic, p.payload) for p in h.inbox], [("a/b", b"v")])

    def test_tampered_or_unknown_refused(self):
        self.join()
        ping = self.s1.seal(SnMessage(S.PINGREQ))
        bad = ping[:-1] + bytes((ping[-1] ^ 1,))  # the tag
        self.assertEqual(self.send(bad), [])
        bad = ping[:20] + bytes((ping[20] ^ 1,)) + ping[21:]  # the ciphertext
        self.assertEqual(self.send(bad), [])
        self.assertEqual(self.send(ping[:-20]), [])  # truncated
        self.assertEqual(self.send(b"\x00\x01\x02s9" + bytes(12 + 16)), [])  # a key id we do not know
        self.assertEqual(self.send(b"\x00\x01\x00"), [])
        self.assertEqual(self.stats().sn_bad_seal, 5)
        # The wrong key for the key id: the tag does not match
        liar = SealingClient("s1", KEY2_HEX)
        liar.c = self.s1.c
        liar.ctr = 100
        self.assertEqual(self.send(liar.seal(SnMessage(S.PINGREQ))), [])
        self.assertEqual(self.stats().sn_bad_seal, 6)
        got = [self.s1.take(d) for d in self.send(ping)]  # the genuine one still opens
        self.assertEqual([m.mtype for m in got], [S.PINGRESP])


class TestFreshness(KeyedTest):
    def test_replay_refused(self):
        self.join()
        ping = self.s1.seal(SnMessage(S.PINGREQ))
        self.assertEqual(len(self.send(ping)), 1)
        self.assertEqual(self.send(ping), [])
        self.assertEqual(self.stats().sn_replayed, 1)
        # and the CONNECT recorded earlier: replayed too
        self.s1.ctr = 0
        again = self.s1.seal(SnMessage(S.CONNECT, clean=True, duration=60, client_id="s1"))
        self.assertEqual(self.send(again), [])
        self.assertEqual(self.stats().sn_replayed, 2)

    def test_reorder_inside_the_window_accepted_once(self):
        self.join()  # ctr 1
        late = [self.s1.seal(SnMessage(S.PINGREQ)) for _ in range(3)]  # 2, 3, 4
        self.s1.ctr = 60
        self.assertEqual(len(self.send(self.s1.seal(SnMessage(S.PINGREQ)))), 1)  # 61 first
        for d in reversed(late):
            self.assertEqual(len(self.send(d)), 1)  # 4, 3, 2: late, not seen: accepted
        for d in late:
            self.assertEqual(self.send(d), [])  # each once only
        self.assertEqual(self.stats().sn_replayed, 3)

    def test_older_than_the_window_refused(self):
        self.join()  # ctr 1
        old = self.s1.seal(SnMessage(S.PINGREQ))  # 2, never delivered
        self.s1.ctr = 2 + 64
        self.assertEqual(len(self.send(self.s1.seal(SnMessage(S.PINGREQ)))), 1)  # 67
        self.assertEqual(self.send(old), [])  # 2 is 65 below 67: outside the window
        self.assertEqual(self.stats().sn_replayed, 1)
        self.s1.ctr = 3
        self.assertEqual(len(self.send(self.s1.seal(SnMessage(S.PINGREQ)))), 1)  # 4: 63 below, inside


class TestChallenges(KeyedTest):
    def test_a_booting_client_is_challenged(self):
        got = self.send(self.s1.hello())
        self.assertEqual(len(got), 1)
        self.assertEqual(got[0][:4], b"\x00\x02\x02s")
        self.assertEqual(len(got[0]), 4 + 1 + 8)
        self.assertEqual(self.stats().sn_challenged, 1)
        self.assertIsNone(self.broker.sessions.find("s1"))

    def test_challenge_spam_does_not_break_a_current_client(self):
        self.join()
        attacker = SealingClient("s1", KEY2_HEX)  # knows the key id only
        for _ in range(5):
            got = self.send(attacker.hello(), OTHER)
            self.assertEqual(len(got), 1)  # a new pending challenge each time
        got = self.exchange(self.s1, SnMessage(S.PINGREQ))
        self.assertEqual([m.mtype for m in got], [S.PINGRESP])  # under its current one: works
        self.assertEqual(self.stats().sn_challenged, 6)

    def test_pending_promoted_by_its_first_authentic_datagram(self):
        self.join()
        old = SealingClient("s1", KEY_HEX)
        old.c = self.s1.c
        old.ctr = 50
        recorded = old.seal(SnMessage(S.PINGREQ))  # under the current challenge, not delivered yet
        self.assertIsNone(self.s1.take(self.send(self.s1.hello())[0]))  # the client asks anew
        got = self.exchange(self.s1, SnMessage(S.PINGREQ))  # under the pending one: promoted
        self.assertEqual([m.mtype for m in got], [S.PINGRESP])
        self.assertEqual(self.send(recorded)[0][:2], b"\x00\x02")  # the old challenge is gone: challenged
        self.assertEqual(self.stats().sn_challenged, 3)

    def test_a_gateway_restart_challenges_the_old_challenge(self):
        self.join()
        self.gw = self.gateway()  # a new run: nothing persisted
        ping = self.s1.seal(SnMessage(S.PINGREQ))
        got = self.send(ping)
        self.assertIsNone(self.s1.take(got[0]))  # challenged
        got = self.exchange(self.s1, SnMessage(S.PINGREQ))
        self.assertEqual([m.mtype for m in got], [S.DISCONNECT])  # opened; the new gateway does not know it
        self.assertEqual(self.send(ping)[0][:2], b"\x00\x02")  # the recording from the old run: never opens


class TestKeyedRules(KeyedTest):
    def test_a_client_id_other_than_its_key_refused(self):
        got = self.send(self.s1.hello())
        self.s1.take(got[0])
        got = self.exchange(self.s1, SnMessage(S.CONNECT, clean=True, duration=60, client_id="s2"))
        self.assertEqual([(m.mtype, m.return_code) for m in got], [(S.CONNACK, S.RC_NOT_SUPPORTED)])
        self.assertIsNone(self.broker.sessions.find("s2"))
        self.assertEqual(self.stats().sn_wrong_key, 1)

    def test_another_key_cannot_speak_for_a_connected_client(self):
        self.join()
        s2 = SealingClient("s2", KEY2_HEX)
        s2.take(self.send(s2.hello())[0])
        got = self.send(s2.seal(SnMessage(S.DISCONNECT)))  # from s1's address, under s2's key
        self.assertEqual(got, [])
        self.assertEqual(self.stats().sn_wrong_key, 1)
        self.assertEqual([m.mtype for m in self.exchange(self.s1, SnMessage(S.PINGREQ))], [S.PINGRESP])

    def test_plain_refused_but_searchgw(self):
        plain = encode_message(SnMessage(S.CONNECT, clean=True, duration=60, client_id="s1"))
        self.assertEqual(self.send(plain), [])
        qos_m1 = encode_message(SnMessage(S.PUBLISH, qos=-1, topic_id_type=S.TOPIC_SHORT, topic_id=0x6162, data=b"x"))
        self.assertEqual(self.send(qos_m1), [])
        self.assertEqual(self.stats().sn_unsealed, 2)
        self.assertIsNone(self.broker.sessions.find("s1"))
        got = self.send(encode_message(SnMessage(S.SEARCHGW, radius=0)))
        msg, _why = parse_datagram(got[0])  # §6.1: discovery stays plain
        self.assertEqual((msg.mtype, msg.gw_id), (S.GWINFO, 1))

    def test_plain_searchgw_answered_plain_after_a_session(self):
        self.join()
        got = self.send(encode_message(SnMessage(S.SEARCHGW, radius=0)))
        self.assertEqual(parse_datagram(got[0])[0].mtype, S.GWINFO)

    def test_advertise_stays_plain(self):
        # §6.1: ADVERTISE is discovery, to a broadcast address no key authenticated from
        self.sn_settings.advertise_interval = 60
        self.sn_settings.advertise_to = ("10.0.0.255", 1884)
        self.gw = self.gateway()
        self.gw.tick()
        ((to, data),) = self.gw.take_datagrams()
        msg, _why = parse_datagram(data)
        self.assertEqual((to, msg.mtype, msg.duration), (("10.0.0.255", 1884), S.ADVERTISE, 60))

    def test_over_max_packet_size_inside_the_envelope_refused(self):
        self.sn_settings.max_packet_size = 40
        self.join()
        big = SnMessage(S.PUBLISH, qos=0, topic_id_type=S.TOPIC_SHORT, topic_id=0x6162, data=b"x" * 40)
        self.assertEqual(self.send(self.s1.seal(big)), [])
        self.assertEqual(self.stats().sn_too_large, 1)


class TestKeySettings(unittest.TestCase):
    def test_keys_from_hex(self):
        s = sn_settings("t", {"keys": {"s1": KEY_HEX, "s2": KEY2_HEX.upper()}}, True, 0)
        self.assertEqual(len(s.keys["s1"]), 16)
        self.assertEqual(len(s.keys["s2"]), 32)
        self.assertEqual(s.envelope_overhead, 3 + 2 + 12 + 16)
        self.assertEqual(sn_settings("t", {}, True, 0).envelope_overhead, 0)

    def test_bad_keys_refused_saying_what_to_write(self):
        for bad in ({"s1": "00" * 8}, {"s1": "zz" * 16}, {"s1": "00" * 24}, {"s1": 5}, {"": KEY_HEX}):
            with self.assertRaises(ConfigError) as e:
                sn_settings("t", {"keys": bad}, True, 0)
            self.assertIn("keys", str(e.exception))
        with self.assertRaises(ConfigError) as e:
            sn_settings("t", {"keys": {"s1": "zz" * 16}}, True, 0)
        self.assertIn("32 or 64 hex digits", str(e.exception))

    def test_an_unkeyed_gateway_has_no_envelope(self):
        broker = new_broker(new_settings({}), Entropy(), None)
        gw = Gateway(Driver(broker, Clock(0).read, 2, 5), sn_settings("t", {}, True, 0), Clock(0).read, str, None)
        self.assertIsNone(gw.envelope)


if __name__ == "__main__":
    unittest.main()
