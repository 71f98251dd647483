# Fairness between connections (common/turns.py) over a real Driver and
# Broker, with the shell played by in-memory handles: what a loop turn
# handles, what waits, and in what order. Runs unchanged under MicroPython
# (tests/upy/run.py).

import unittest

from common.broker.settings import new_settings
from common.driver import Driver
from common.mqtt import consts as C
from common.mqtt.packets import Connect, Pingreq, Publish, Subscribe, encode_packet
from common.store.store import Store
from common.store.store_open import open_records
from common.store.storeboot import new_broker
from common.turns import Turns
from tests.core.memkv import MemKV
from tests.core.test_driver import Clock, Handle

PER_TURN = 4


def connect(client_id, clean=True):
    return encode_packet(Connect(4, clean, 0, client_id), 4)


PING = encode_packet(Pingreq(), 4)


class Shell:
    """A loop that hands every read to Turns, flushes when input() says so,
    and runs end_turn() at the end of a turn when `due`."""

    def __init__(self, store=None, per_turn=PER_TURN, **overrides):
        self.broker = new_broker(new_settings(overrides), lambda n: bytes(n), store)
        self.driver = Driver(self.broker, Clock().read, 2, 5)
        self.turns = Turns(self.driver, per_turn)
        self.flushes = 0

    def accept(self):
        h = Handle()
        return self.driver.connection_made(h), h

    def read(self, cid, data):
        if self.turns.input(cid, data):
            self.flush()

    def flush(self):
        self.flushes += 1
        self.driver.flush()

    def end_of_turn(self):
        """The end of a loop turn; True if another end_turn() is wanted."""
        if not self.turns.due:
            return False
        self.flushes += 1
        return self.turns.end_turn()

    def connected(self, client_id):
        """A client connected in a loop turn of its own (the next starts
        with a whole allowance)."""
        cid, h = self.accept()
        self.read(cid, connect(client_id))
        self.turns.due = True
        while self.end_of_turn():
            pass
        self.assertTypes(h, [C.CONNACK])
        return cid, h

    @staticmethod
    def assertTypes(h, want):
        got = h.types()
        if got != want:
            raise AssertionError("%r != %r" % (got, want))


class TestTurns(unittest.TestCase):
    def test_input_within_the_allowance_goes_at_once(self):
        s = Shell()
        cid, h = s.connected("a")
        s.read(cid, PING)
        self.assertEqual(h.types(), [C.PINGRESP])  # flushed at once: no turn needed
        self.assertFalse(s.turns.due)

    def test_at_most_per_turn_inputs_at_once_the_rest_from_the_queue(self):
        s = Shell()
        clients = [s.connected("c%d" % i) for i in range(PER_TURN + 3)]
        for cid, _h in clients:
            s.read(cid, PING)
        answered = [len(h.types()) for _cid, h in clients]
        self.assertEqual(answered, [1] * PER_TURN + [0] * 3)  # the allowance, then put off
        self.assertTrue(s.turns.due)
        self.assertFalse(s.end_of_turn())  # the 3 fit in one turn's allowance
        self.assertEqual([len(h.types()) for _cid, h in clients], [0] * PER_TURN + [1] * 3)

    def test_a_storm_of_connects_waits_behind_a_bystander(self):
        # 3 x PER_TURN new connections in one loop turn, and a client that was
        # served before: its input is answered within the next turn, the
        # storm's CONNECTs over three turns, in the order they came.
        s = Shell()
        bystander, hb = s.connected("b")
        storm = [s.accept() for _ in range(3 * PER_TURN)]
        for cid, _h in storm[: PER_TURN + 1]:
            s.read(cid, connect("s%d" % cid))
        s.read(bystander, PING)  # beyond the allowance: put off, but first in line
        for cid, _h in storm[PER_TURN + 1 :]:
            s.read(cid, connect("s%d" % cid))  # waits: input waits already
        acked = [bool(h.types()) for _cid, h in storm]
        self.assertEqual(acked, [True] * PER_TURN + [False] * (2 * PER_TURN))
        self.assertEqual(hb.types(), [])
        turns = 0
        done = []
        while True:
            more = s.end_of_turn()
            turns += 1
            if not done:
                self.assertEqual(hb.types(), [C.PINGRESP])  # in the first turn
            done.append([i for i, (_cid, h) in enumerate(storm) if h.types()])
            if not more:
                break
        self.assertEqual(turns, 3)
        self.assertEqual(done, [list(range(PER_TURN, 2 * PER_TURN - 1)), list(range(2 * PER_TURN - 1, 3 * PER_TURN - 1)), [3 * PER_TURN - 1]])

    def test_a_new_connection_alone_goes_at_once(self):
        s = Shell()
        cid, h = s.accept()
        s.read(cid, connect("alone"))
        self.assertEqual(h.types(), [C.CONNACK])
        self.assertFalse(s.turns.due)

    def test_input_of_one_connection_stays_in_order_and_its_reading_pauses(self):
        s = Shell()
        others = [s.connected("o%d" % i) for i in range(PER_TURN)]
        cid, h = s.connected("p")
        sub, hs = s.connected("sub")
        s.read(sub, encode_packet(Subscribe(1, [("t", 0)], None), 4))
        self.assertEqual(hs.types(), [C.SUBACK])
        for other, _h in others:
            s.read(other, PING)  # the allowance spent
        for i in range(3):
            s.read(cid, encode_packet(Publish("t", bytes([i]), 0, False, False, 0, None), 4))
        self.assertEqual(h.events, ["pause"])  # more came while its input waited
        self.assertEqual(hs.types(), [])
        s.end_of_turn()
        self.assertEqual(h.events, ["pause", "resume"])
        got = hs.inbox
        self.assertEqual([p.payload for p in got], [b"\x00", b"\x01", b"\x02"])

    def test_one_flush_and_one_sync_per_turn_with_store_sync_always(self):
        store = Store(MemKV())
        open_records(store)
        s = Shell(store=store, store_sync="always")
        s.driver.restore(1)
        syncs = store.syncs
        flushes = s.flushes
        for i in range(3):
            # a persistent session's CONNECT changes the store
            cid, hh = s.accept()
            s.read(cid, connect("persist%d" % i, clean=False))
            self.assertEqual(hh.types(), [])  # its CONNACK waits for the sync
        self.assertEqual((s.flushes, store.syncs), (flushes, syncs))
        self.assertTrue(s.turns.due)
        s.end_of_turn()
        self.assertEqual((s.flushes, store.syncs), (flushes + 1, syncs + 1))

    def test_eof_after_waiting_input_closes_after_it(self):
        s = Shell()
        others = [s.connected("o%d" % i) for i in range(PER_TURN)]
        cid, h = s.connected("leaving")
        for other, _h in others:
            s.read(other, PING)
        s.read(cid, PING)
        self.assertTrue(s.turns.waits(cid))
        s.turns.close_after(cid)
        self.assertEqual(h.events, [])
        s.end_of_turn()
        self.assertEqual(h.types(), [C.PINGRESP])  # its input first
        self.assertEqual(h.events, ["close"])

    def test_input_waiting_when_the_connection_is_lost_is_not_lost(self):
        s = Shell()
        sub, hs = s.connected("sub")
        s.read(sub, encode_packet(Subscribe(1, [("t", 0)], None), 4))
        hs.types()
        others = [s.connected("o%d" % i) for i in range(PER_TURN)]
        cid, _h = s.connected("gone")
        for other, _hh in others:
            s.read(other, PING)
        s.read(cid, encode_packet(Publish("t", b"last", 0, False, False, 0, None), 4))
        s.turns.run_now(cid)
        s.driver.connection_lost(cid)
        s.turns.forget(cid)
        s.flush()
        self.assertEqual([p.payload for p in hs.inbox], [b"last"])
        self.assertFalse(s.turns.waits(cid))
